"""``memstream bench drill``, short: the packaged conversation on one Qdrant server node with the real
broker, worker and embedder. The store's collections deleted twice, recovered by rebuild from the
record and by restore of a backup taken before more turns and a speaker's forget: no point lost, no
question unanswered (error replies while the store is gone), nothing of the forgotten speaker left,
recall equal; then a re-embed with MiniLM's vectors rotated (another fingerprint, same geometry)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstream.bench.drill import DrillOptions, run_drill
from memstream.datasets import demo_conversation_path

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def rotated_minilm(folder: Path) -> Path:
    """MiniLM with its unit vectors turned by a fixed orthogonal matrix: every cosine between two texts
    is kept, the fingerprint (one text's vector against MiniLM's) is not."""
    import torch
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer.modules import Dense
    except ImportError:  # sentence-transformers before 6
        from sentence_transformers.models import Dense

    from memstream.adapters.packaged_models import model_path

    model = SentenceTransformer(model_path(None), device="cpu")
    dim = len(model.encode(["a text"])[0])
    turn = Dense(dim, dim, bias=False, activation_function=torch.nn.Identity())
    turn.linear.weight.data = torch.linalg.qr(torch.randn(dim, dim, generator=torch.Generator().manual_seed(0)))[0]
    model.append(turn)
    model.save(str(folder))
    return folder


def test_a_deleted_store_comes_back_whole_by_rebuild_and_by_restore(qdrant_server, tmp_path: Path) -> None:
    options = DrillOptions(
        data=demo_conversation_path(),
        conversations=1,
        stores=("server",),
        cluster=False,
        qdrant_url=qdrant_server.url,
        outage_s=3.0,
        ask_timeout_s=60.0,
        compaction_timeout_s=180.0,
        reembed_model=str(rotated_minilm(tmp_path / "minilm-rotated")),
        reembed_backend="torch",  # the ONNX backend runs Transformer, Pooling, Normalize only
        workdir=tmp_path / "drill",
    )
    result = run_drill(options)
    server = result["stores"]["server"]
    assert result["points_lost"] == 0, {w: r["lost_by_collection"] for w, r in server["recoveries"].items()}
    assert result["questions_unanswered"] == 0, server["questions"]["by_phase"]
    assert result["forgotten_remaining"] == 0, server["erasure"]
    assert result["recall_equal"] and server["recall_before"]["recall"] > 0
    # The drill did what it says: the store was gone (questions got error replies in time), the
    # forget had something to erase, the backup held it and the restore took it out again.
    assert server["questions"]["by_phase"]["disaster:rebuild"]["error_reply"] > 0
    assert server["questions"]["error_reply_max_ms"] < 30_000
    assert server["forget"]["counts"]["store:turns"] > 0 and server["erasure"]["record_versions_before_compaction"] > 0
    restore = server["recoveries"]["restore"]
    assert restore["reconciled"] > 0 and restore["points_after"] == restore["points_before"] > 0
    assert server["dead_letters"] == 0
    reembed = result["reembed"]["server"]
    assert not reembed["skipped"] and reembed["model"] == "minilm-rotated" != reembed["from_model"]
    assert reembed["recall_after"] == reembed["recall_before"]
