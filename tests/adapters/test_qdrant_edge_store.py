"""VectorStore contract, run over both embedded adapters (qdrant-client local mode, Qdrant Edge) and
over a real Qdrant server through qdrant-client (marked ``cluster``: ``make test-cluster``, which
needs a Qdrant binary).

Small hand-made 4-d vectors; each case opens a fresh store in tmp_path (on the server: collections
of their own, named after tmp_path).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from memstream.adapters.qdrant_edge_store import QdrantEdgeStore
from memstream.adapters.qdrant_store import QdrantStore
from memstream.ports import StoreFilter, StorePoint

DIM = 4
COLL = "cards"
OTHER = "turns"


def unit(*xs: float) -> list[float]:
    v = np.asarray(xs, dtype=np.float32)
    return (v / np.linalg.norm(v)).tolist()


def pid(i: int) -> str:
    return f"00000000-0000-0000-0000-{i:012d}"


SERVER: dict[str, str] = {}  # the server's URL, once a "server" case has started it


def _open(kind: str, path):
    if kind == "server":  # one server for every case: each case's collections are its own
        prefix = "t" + hashlib.sha1(str(path).encode()).hexdigest()[:12] + "_"
        return QdrantStore(url=SERVER["url"], prefix=prefix)
    return QdrantStore(path=path) if kind == "local" else QdrantEdgeStore(path)


@pytest.fixture(params=["local", "edge", pytest.param("server", marks=[pytest.mark.integration, pytest.mark.cluster])])
def kind(request) -> str:
    if request.param == "server":
        SERVER["url"] = request.getfixturevalue("qdrant_server").url
    return request.param


@pytest.fixture
def store(kind, tmp_path):
    s = _open(kind, tmp_path / "q")
    s.ensure_collections([COLL, OTHER], DIM)
    yield s
    s.close()


# id, tenant, vector, payload (tenant_id is added)
ROWS = [
    (
        1,
        "t1",
        unit(1, 0, 0, 0),
        {
            "conversation_id": "c1",
            "subject": "Maria",
            "turn_ids": ["D1:1", "D1:2"],
            "event_ts": 100.0,
            "seq": 1,
            "atomic": True,
            "superseded_by": None,
        },
    ),
    (
        2,
        "t1",
        unit(0, 1, 0, 0),
        {
            "conversation_id": "c1",
            "subject": "Tom",
            "turn_ids": ["D1:3"],
            "event_ts": 200.0,
            "seq": 2,
            "atomic": False,
            "superseded_by": pid(9),
        },
    ),
    (
        3,
        "t1",
        unit(0, 0, 1, 0),
        {"conversation_id": "c2", "subject": "Maria", "turn_ids": ["D2:1"], "event_ts": 300.0, "seq": 3, "atomic": 1},
    ),  # no superseded_by key; int 1
    (
        4,
        "t2",
        unit(1, 0, 0, 0),
        {
            "conversation_id": "c1",
            "subject": "Maria",
            "turn_ids": ["D1:1"],
            "event_ts": 100.0,
            "seq": 1,
            "atomic": True,
            "superseded_by": None,
        },
    ),
]


def fill(store) -> None:
    store.upsert(COLL, [StorePoint(pid(i), vec, {"tenant_id": t, **p}) for i, t, vec, p in ROWS])


def ids(hits) -> list[str]:
    return sorted(h.id for h in hits)


def test_search_returns_the_nearest_point_with_its_payload(store):
    fill(store)
    hits = store.search(COLL, "t1", unit(0.1, 1, 0, 0), limit=2)
    assert [h.id for h in hits][0] == pid(2)
    assert hits[0].score > hits[1].score
    assert hits[0].score == pytest.approx(float(np.dot(unit(0.1, 1, 0, 0), unit(0, 1, 0, 0))), abs=1e-5)
    payload = dict(hits[0].payload)
    assert payload == {"tenant_id": "t1", **ROWS[1][3]}
    assert isinstance(payload["seq"], int) and isinstance(payload["event_ts"], float)


def test_another_tenants_points_are_never_returned(store):
    fill(store)
    # t2's point 4 is the exact match for this vector; t1 must not see it
    assert pid(4) not in ids(store.search(COLL, "t1", unit(1, 0, 0, 0), limit=10))
    assert ids(store.search(COLL, "t2", unit(0, 1, 0, 0), limit=10)) == [pid(4)]
    assert ids(store.scroll(COLL, "t1")) == [pid(1), pid(2), pid(3)]
    assert ids(store.scroll(COLL, "t2")) == [pid(4)]
    assert store.scroll(COLL, "t3") == [] and store.search(COLL, "t3", unit(1, 0, 0, 0)) == []
    assert store.count(COLL, "t1") == 3 and store.count(COLL, "t2") == 1 and store.count(COLL, "t3") == 0


@pytest.mark.parametrize(
    "where, expected",
    [
        (StoreFilter(equals={"conversation_id": "c1"}), [1, 2]),
        (StoreFilter(equals={"conversation_id": "c1", "subject": "Maria"}), [1]),
        (StoreFilter(equals={"seq": 3}), [3]),
        # a boolean matches booleans only, not the integer 1 (Edge needs a workaround for this)
        (StoreFilter(equals={"atomic": True}), [1]),
        (StoreFilter(equals={"atomic": False}), [2]),
        (StoreFilter(equals={"atomic": 1}), [3]),
        (StoreFilter(any_of={"turn_ids": ["D1:2", "D2:1", "nope"]}), [1, 3]),  # any element of a list field
        (StoreFilter(any_of={"seq": [2, 3]}), [2, 3]),
        (StoreFilter(any_of={"subject": []}), []),
        # explicit null only: point 3 has no superseded_by key and does NOT match (Qdrant IsNull)
        (StoreFilter(is_null=["superseded_by"]), [1]),
        (StoreFilter(range_ts={"event_ts": (150.0, 300.0)}), [2, 3]),  # bounds inclusive
        (StoreFilter(range_ts={"event_ts": (None, 200.0)}), [1, 2]),
        (StoreFilter(range_ts={"event_ts": (200.0, None)}), [2, 3]),
        (StoreFilter(equals={"subject": "Maria"}, range_ts={"event_ts": (150.0, None)}), [3]),
        # excluded values: a missing key passes (point 3 has no superseded_by), a bool excludes only bools
        (StoreFilter(not_equals={"superseded_by": pid(9)}), [1, 3]),
        (StoreFilter(not_equals={"atomic": True}), [2, 3]),
        (StoreFilter(equals={"subject": "Maria"}, not_equals={"conversation_id": "c2"}), [1]),
        # excluded ranges (bounds inclusive); a point without the key passes
        (StoreFilter(not_range_ts={"event_ts": (None, 200.0)}), [3]),
        (StoreFilter(not_range_ts={"event_ts": (150.0, None), "seq": (None, 1.0)}), []),
        (StoreFilter(not_range_ts={"retired_ts": (None, 1e12)}), [1, 2, 3]),
    ],
)
def test_each_filter_kind(store, where, expected):
    fill(store)
    want = [pid(i) for i in expected]
    assert ids(store.scroll(COLL, "t1", where=where)) == want
    assert ids(store.search(COLL, "t1", unit(1, 1, 1, 0), where=where, limit=10)) == want
    assert store.count(COLL, "t1", where=where) == len(want)


def test_upserting_the_same_id_again_replaces_the_point(store):
    fill(store)
    before = store.count(COLL)
    store.upsert(COLL, [StorePoint(pid(1), unit(0, 0, 0, 1), {"tenant_id": "t1", "subject": "Ana"})])
    fill(store)  # a redelivered batch
    store.upsert(COLL, [StorePoint(pid(1), unit(0, 0, 0, 1), {"tenant_id": "t1", "subject": "Ana"})])
    assert store.count(COLL) == before == 4
    top = store.search(COLL, "t1", unit(0, 0, 0, 1), limit=1)[0]
    assert top.id == pid(1) and top.payload == {"tenant_id": "t1", "subject": "Ana"}  # payload replaced, not merged


def test_only_new_points_are_inserted_and_existing_ones_stay_as_they_are(store):
    fill(store)
    kept = store.search(COLL, "t1", unit(1, 0, 0, 0), limit=1)[0]
    fresh = StorePoint(kept.id, unit(0, 0, 0, 1), {"tenant_id": "t1", "subject": "Zoe"}, "zoe")
    new = StorePoint(pid(90), unit(0, 0, 1, 1), {"tenant_id": "t1", "subject": "Yan"}, "yan")
    store.upsert(COLL, [fresh, new], only_new=True)
    assert store.search(COLL, "t1", unit(1, 0, 0, 0), limit=1)[0] == kept  # untouched
    assert store.count(COLL, "t1", where=StoreFilter(equals={"subject": "Yan"})) == 1
    assert [h.id for h in store.search_text(COLL, "t1", "yan")] == [pid(90)]
    assert store.search_text(COLL, "t1", "zoe") == []


def test_scroll_honours_the_limit_across_pages(store):
    points = [StorePoint(pid(100 + i), unit(1, i, 0, 0), {"tenant_id": "t1", "seq": i}) for i in range(300)]
    store.upsert(OTHER, points)
    assert len(store.scroll(OTHER, "t1", limit=5)) == 5
    assert len(store.scroll(OTHER, "t1", limit=257)) == 257  # more than one 256-point page
    assert len(store.scroll(OTHER, "t1")) == 300
    assert store.scroll(OTHER, "t1", limit=0) == []
    assert len({h.id for h in store.scroll(OTHER, "t1", limit=300)}) == 300  # no page repeats


def test_count_with_and_without_a_tenant(store):
    assert store.count(COLL) == 0 and store.count(COLL, "t1") == 0
    fill(store)
    assert store.count(COLL) == 4
    assert store.count(COLL, "t1") == 3
    assert store.count(COLL, "t1", where=StoreFilter(equals={"subject": "Maria"})) == 2
    assert store.count("never_created") == 0


def closed_and_reopened(kind: str, path, filling):
    """A store ``filling`` filled, closed, and opened again (its collections not yet ensured)."""
    s = _open(kind, path)
    s.ensure_collections([COLL], DIM)
    filling(s)
    s.close()
    return _open(kind, path)


@pytest.fixture
def reopened(kind, tmp_path):
    """A store filled with ROWS, closed, and opened again."""
    s = closed_and_reopened(kind, tmp_path / "q", fill)
    yield s
    s.close()


def test_points_persist_after_close_and_reopen(reopened):
    s = reopened
    assert s.count(COLL) == 4  # readable before ensure_collections
    s.ensure_collections([COLL], DIM)  # idempotent on an existing collection
    s.ensure_collections([COLL], DIM)
    assert s.count(COLL) == 4
    hits = s.search(COLL, "t1", unit(1, 0, 0, 0), where=StoreFilter(any_of={"turn_ids": ["D1:1"]}), limit=3)
    assert [h.id for h in hits] == [pid(1)] and hits[0].payload["subject"] == "Maria"


def test_a_store_built_with_another_embedders_size_is_refused_with_a_clear_error(reopened):
    with pytest.raises(ValueError, match=r"holds 4-d vectors, not 8-d: the store was built with another embedder"):
        reopened.ensure_collections([COLL], 2 * DIM)
    reopened.ensure_collections([COLL], DIM)  # the refusal changed nothing: the right size still opens it
    assert reopened.count(COLL) == 4


def test_every_read_needs_a_tenant(store):
    fill(store)
    with pytest.raises(ValueError):
        store.search(COLL, "", unit(1, 0, 0, 0))
    with pytest.raises(ValueError):
        store.scroll(COLL, "")
    with pytest.raises(ValueError):
        store.count(COLL, "")


def test_store_attributes(kind, store, tmp_path):
    assert store.embedded is (kind != "server")
    assert store.location == (SERVER["url"] if kind == "server" else str(tmp_path / "q"))
    store.upsert(COLL, [])  # no-op


def test_edge_folder_is_locked_to_one_store(tmp_path):
    s = QdrantEdgeStore(tmp_path / "q")
    try:
        with pytest.raises(RuntimeError):
            QdrantEdgeStore(tmp_path / "q")
    finally:
        s.close()
    QdrantEdgeStore(tmp_path / "q").close()  # released on close


# --- BM25 (search_text) -------------------------------------------------------------------------
# Every document's dense vector points along x; the dense query below points along w, so a dense
# search ranks these documents by nothing but insertion noise - only the words can find them.
X, W = unit(1, 0, 0, 0), unit(0, 0, 0, 1)
DOCS = [  # id, tenant, conversation, text
    (11, "t1", "c1", "Maria adopted a grey cat called Pixel"),
    (12, "t1", "c1", "Maria went hiking in the Alps with Tom"),
    (13, "t1", "c2", "Maria drinks her coffee black"),
    (14, "t1", "c2", "Maria"),
    (15, "t1", "c2", "Pixel"),  # same length as 14: only IDF tells them apart
    (16, "t2", "c9", "Tom flew a zeppelin over Pixel's house"),
]


def fill_docs(store, coll: str = COLL) -> None:
    store.upsert(coll, [StorePoint(pid(i), X, {"tenant_id": t, "conversation_id": c}, text) for i, t, c, text in DOCS])
    # a dense-only neighbour of W: the dense search finds it first, BM25 never sees it
    store.upsert(coll, [StorePoint(pid(17), W, {"tenant_id": "t1", "conversation_id": "c1", "note": "zeppelin"})])


def test_search_text_finds_by_words_what_the_dense_search_ranks_low(store):
    fill_docs(store)
    assert store.search(COLL, "t1", W, limit=1)[0].id == pid(17)
    hits = store.search_text(COLL, "t1", "hiking in the alps", limit=3)
    assert [h.id for h in hits] == [pid(12)]  # "in"/"the" are stopwords: no other document matches
    assert hits[0].payload == {"tenant_id": "t1", "conversation_id": "c1"}
    assert hits[0].vector is None
    # English stemming: "adopting cats" matches "adopted ... cat"
    assert [h.id for h in store.search_text(COLL, "t1", "adopting cats")] == [pid(11)]
    assert store.search_text(COLL, "t1", "the of and") == []  # stopwords only
    assert store.search_text(COLL, "t1", "") == []


def test_search_text_scores_are_bm25_with_idf_from_the_collection(store):
    fill_docs(store)
    hits = store.search_text(COLL, "t1", "maria pixel", limit=10)
    by_id = {h.id: h.score for h in hits}
    assert set(by_id) == {pid(i) for i in (11, 12, 13, 14, 15)}
    assert by_id[pid(15)] > by_id[pid(14)]  # equal length and tf: the rare "pixel" beats the common "maria"
    assert hits[0].id == pid(11)  # the only t1 document with both terms

    # Qdrant's BM25: tf*(k+1)/(tf + k*(1-b+b*len/avg_len)) per document term, times
    # idf = ln(1 + (N-n+0.5)/(n+0.5)) over the points that have the sparse vector - all tenants.
    k, b, avg_len = 1.2, 0.75, 256.0
    n_docs = len(DOCS)  # point 17 has no text and does not count

    def idf(n: int) -> float:
        return float(np.log(1 + (n_docs - n + 0.5) / (n + 0.5)))

    def tf(length: int) -> float:
        return (k + 1) / (1 + k * (1 - b + b * length / avg_len))

    assert by_id[pid(14)] == pytest.approx(tf(1) * idf(4), rel=1e-5)  # "maria" in 4 documents
    assert by_id[pid(15)] == pytest.approx(tf(1) * idf(3), rel=1e-5)  # "pixel" in 3, one of them t2's
    # "Maria adopted a grey cat called Pixel": 6 tokens once "a" is dropped
    assert by_id[pid(11)] == pytest.approx(tf(6) * (idf(4) + idf(3)), rel=1e-5)


def test_search_text_keeps_to_the_tenant_and_the_filter(store):
    fill_docs(store)
    assert store.search_text(COLL, "t1", "zeppelin") == []  # t2's word; t1's point 17 has it only in payload
    assert [h.id for h in store.search_text(COLL, "t2", "maria pixel tom")] == [pid(16)]
    assert store.search_text(COLL, "t3", "maria") == []
    where = StoreFilter(equals={"conversation_id": "c2"})
    assert ids(store.search_text(COLL, "t1", "maria pixel", where=where)) == [pid(13), pid(14), pid(15)]
    where = StoreFilter(any_of={"conversation_id": ["c1"]})
    assert ids(store.search_text(COLL, "t1", "maria", where=where, limit=10)) == [pid(11), pid(12)]
    assert len(store.search_text(COLL, "t1", "maria", limit=2)) == 2
    with pytest.raises(ValueError):
        store.search_text(COLL, "", "maria")


def test_points_without_text_are_not_lexically_found(store):
    store.upsert(
        COLL,
        [
            StorePoint(pid(1), X, {"tenant_id": "t1", "text": "walrus"}),  # the words only in the payload
            StorePoint(pid(2), X, {"tenant_id": "t1"}, "the and of"),  # nothing left after the stopwords
            StorePoint(pid(3), X, {"tenant_id": "t1"}, "walrus"),
        ],
    )
    assert [h.id for h in store.search_text(COLL, "t1", "walrus the")] == [pid(3)]
    assert store.count(COLL, "t1") == 3 and ids(store.search(COLL, "t1", X)) == [pid(1), pid(2), pid(3)]


def test_reupserting_an_id_replaces_its_text(store):
    fill_docs(store)
    fill_docs(store)  # a redelivered batch
    assert store.count(COLL) == len(DOCS) + 1
    assert [h.id for h in store.search_text(COLL, "t1", "maria", limit=10)].count(pid(11)) == 1
    store.upsert(COLL, [StorePoint(pid(11), X, {"tenant_id": "t1"}, "a walrus on the beach")])
    assert pid(11) not in ids(store.search_text(COLL, "t1", "pixel adopted"))
    assert [h.id for h in store.search_text(COLL, "t1", "walrus")] == [pid(11)]
    store.upsert(COLL, [StorePoint(pid(11), X, {"tenant_id": "t1"})])  # without text: no longer lexical
    assert store.search_text(COLL, "t1", "walrus") == []
    assert store.count(COLL) == len(DOCS) + 1


def test_with_vectors_returns_the_stored_dense_vector(store):
    fill(store)  # dense-only points
    fill_docs(store)  # points with the bm25 sparse vector too
    for hits in (
        store.search(COLL, "t1", unit(0, 1, 0, 0), limit=20, with_vectors=True),
        store.scroll(COLL, "t1", with_vectors=True),
    ):
        assert len(hits) == 9
        stored = {pid(i): vec for i, _, vec, _ in ROWS} | {pid(i): X for i, *_ in DOCS} | {pid(17): W}
        for h in hits:
            assert isinstance(h.vector, list) and all(isinstance(x, float) for x in h.vector)
            assert h.vector == pytest.approx(stored[h.id], abs=1e-6)
    assert all(h.vector is None for h in store.search(COLL, "t1", X) + store.scroll(COLL, "t1"))
    lexical = store.search_text(COLL, "t1", "Maria Pixel Alps", limit=20, with_vectors=True)
    assert lexical and all(h.vector == pytest.approx(stored[h.id], abs=1e-6) for h in lexical)
    assert all(h.vector is None for h in store.search_text(COLL, "t1", "Maria Pixel Alps"))


def test_tied_hits_are_the_same_whatever_order_the_points_were_written_in(kind, tmp_path):
    """A rebuild or a restore writes the points in another order: equal scores are ordered by id, so
    the cut at ``limit`` keeps the same points (the engine alone keeps storage order)."""
    tied = [StorePoint(pid(i), unit(1, 0, 0, 0), {"tenant_id": "t1"}, "see you at the lake") for i in range(40, 52)]
    other = StorePoint(pid(60), unit(1, 1, 0, 0), {"tenant_id": "t1"}, "the lake was cold")
    answers = []
    for order, points in (("forward", [other, *tied]), ("reversed", [*reversed(tied), other])):
        s = _open(kind, tmp_path / order)
        try:
            s.ensure_collections([COLL], DIM)
            s.upsert(COLL, points)
            answers.append(
                (
                    [h.id for h in s.search(COLL, "t1", unit(1, 0, 0, 0), limit=5)],
                    [h.id for h in s.search_text(COLL, "t1", "see you lake", limit=5)],
                )
            )
        finally:
            s.close()
    assert answers[0] == answers[1]
    assert answers[0][0] == [pid(i) for i in range(40, 45)]


def test_bm25_survives_close_and_reopen(kind, tmp_path):
    s = closed_and_reopened(kind, tmp_path / "q", fill_docs)
    try:
        assert [h.id for h in s.search_text(COLL, "t1", "alps")] == [pid(12)]  # before ensure_collections
        s.ensure_collections([COLL], DIM)
        s.upsert(COLL, [StorePoint(pid(18), X, {"tenant_id": "t1"}, "alps again")])
        assert ids(s.search_text(COLL, "t1", "alps")) == [pid(12), pid(18)]
    finally:
        s.close()


def test_edge_shard_from_before_bm25_gains_the_sparse_vector(tmp_path):
    import qdrant_edge as qe

    folder = tmp_path / "q" / "memstream_cards"
    dense_only = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine))
    old = qe.EdgeShard.create(str(folder), dense_only)
    old.update(qe.UpdateOperation.upsert_points([qe.Point(pid(1), X, {"tenant_id": "t1"})]))
    old.close()
    s = QdrantEdgeStore(tmp_path / "q")
    try:
        with pytest.raises(ValueError, match="predates BM25"):  # opened for reading, not migrated yet
            s.search_text(COLL, "t1", "walrus")
        s.ensure_collections([COLL], DIM)
        assert s.search_text(COLL, "t1", "walrus") == []  # the old point has no text
        s.upsert(COLL, [StorePoint(pid(2), X, {"tenant_id": "t1"}, "walrus")])
        assert [h.id for h in s.search_text(COLL, "t1", "walrus")] == [pid(2)]
        assert s.count(COLL) == 2
    finally:
        s.close()
    s = QdrantEdgeStore(tmp_path / "q")
    try:
        assert [h.id for h in s.search_text(COLL, "t1", "walrus")] == [pid(2)]  # the migration persisted
    finally:
        s.close()


def test_edge_shard_gains_the_payload_indexes_added_since_it_was_made(tmp_path):
    # A store written before entity_triggers was indexed: graph expansion filters on it, and at 100k
    # cards an unindexed filter cost 130 ms a search (docs/retrieval.md, "Graph expansion").
    import qdrant_edge as qe

    s = QdrantEdgeStore(tmp_path / "q")
    s.ensure_collections([COLL], DIM)
    s.upsert(COLL, [StorePoint(pid(1), X, {"tenant_id": "t1", "entity_triggers": ["Lisbon", "tea"]})])
    s._require(COLL).update(qe.UpdateOperation.delete_field_index("entity_triggers"))
    assert "entity_triggers" not in s._require(COLL).info().payload_schema
    s.close()
    s = QdrantEdgeStore(tmp_path / "q")
    try:
        s.ensure_collections([COLL], DIM)
        assert "entity_triggers" in s._require(COLL).info().payload_schema
        found = s.search(COLL, "t1", X, where=StoreFilter(any_of={"entity_triggers": ["Lisbon"]}))
        assert [h.id for h in found] == [pid(1)]
        assert s.search(COLL, "t1", X, where=StoreFilter(any_of={"entity_triggers": ["Porto"]})) == []
    finally:
        s.close()


# --- set_payload -------------------------------------------------------------------------------
def payloads(store, tenant: str, coll: str = COLL) -> dict:
    return {h.id: dict(h.payload) for h in store.scroll(coll, tenant)}


def test_set_payload_sets_fields_and_keeps_the_rest_of_the_point(store):
    fill(store)
    fill_docs(store)
    before = {h.id: h for h in store.scroll(COLL, "t1", with_vectors=True)}
    score = {h.id: h.score for h in store.search_text(COLL, "t1", "adopting cats")}[pid(11)]
    fields = {"valid_to": 123.5, "tags": [1.0, 2.0, "x"], "grid": [[1.0, 2.5], [3.0]], "note": {"k": [0.5]}}
    assert store.set_payload(COLL, "t1", pid(11), fields) is True

    after = {h.id: h for h in store.scroll(COLL, "t1", with_vectors=True)}
    assert after[pid(11)].payload == {**before[pid(11)].payload, **fields}  # lists round-trip as stored
    assert after[pid(11)].vector == pytest.approx(X, abs=1e-6)
    for i in (1, 2, 3, 12, 13, 14, 15, 17):  # the other points are untouched
        assert after[pid(i)].payload == before[pid(i)].payload
        assert after[pid(i)].vector == pytest.approx(before[pid(i)].vector, abs=1e-6)
    # the bm25 sparse vector is kept: same hits, same score, the new payload on the hit
    hits = store.search_text(COLL, "t1", "adopting cats")
    assert [h.id for h in hits] == [pid(11)] and hits[0].score == pytest.approx(score, rel=1e-6)
    assert hits[0].payload["tags"] == [1.0, 2.0, "x"]
    assert store.search(COLL, "t1", X, where=StoreFilter(equals={"conversation_id": "c1"}), limit=10)

    # replacing a field (and writing a null: the overwrite path) also keeps vectors and the other fields
    assert store.set_payload(COLL, "t1", pid(11), {"tags": ["y"], "valid_to": None}) is True
    hit = {h.id: h for h in store.scroll(COLL, "t1", with_vectors=True)}[pid(11)]
    assert hit.payload == {**before[pid(11)].payload, **fields, "tags": ["y"], "valid_to": None}
    assert hit.vector == pytest.approx(X, abs=1e-6)
    hits = store.search_text(COLL, "t1", "adopting cats")
    assert [h.id for h in hits] == [pid(11)] and hits[0].score == pytest.approx(score, rel=1e-6)
    assert store.count(COLL) == len(ROWS) + len(DOCS) + 1


@pytest.mark.parametrize("fields", [{"subject": "Eve"}, {"superseded_by": None, "subject": "Eve"}])
def test_set_payload_refuses_another_tenants_point_and_a_missing_id(store, fields):
    fill(store)
    t1, t2 = payloads(store, "t1"), payloads(store, "t2")
    assert store.set_payload(COLL, "t2", pid(1), fields) is False  # pid(1) is t1's
    assert store.set_payload(COLL, "t1", pid(4), fields) is False  # pid(4) is t2's
    assert store.set_payload(COLL, "t3", pid(1), fields) is False
    assert store.set_payload(COLL, "t1", pid(99), fields) is False  # no such point
    assert store.set_payload("never_created", "t1", pid(1), fields) is False
    assert payloads(store, "t1") == t1 and payloads(store, "t2") == t2  # nothing changed
    assert store.set_payload(COLL, "t2", pid(4), fields) is True  # its own tenant may
    assert payloads(store, "t2")[pid(4)] == {**t2[pid(4)], **fields}
    assert payloads(store, "t1") == t1


def test_set_payload_null_is_a_stored_null_that_is_null_matches(store):
    fill(store)
    null = StoreFilter(is_null=["superseded_by"])
    assert ids(store.scroll(COLL, "t1", where=null)) == [pid(1)]  # point 3 has no key at all
    assert store.set_payload(COLL, "t1", pid(3), {"superseded_by": None}) is True
    assert ids(store.scroll(COLL, "t1", where=null)) == [pid(1), pid(3)]
    assert payloads(store, "t1")[pid(3)]["superseded_by"] is None
    assert store.set_payload(COLL, "t1", pid(1), {"superseded_by": pid(9)}) is True
    assert ids(store.scroll(COLL, "t1", where=null)) == [pid(3)]
    assert store.count(COLL, "t1", where=StoreFilter(equals={"superseded_by": pid(9)})) == 2
    assert store.set_payload(COLL, "t1", pid(1), {"superseded_by": None}) is True
    assert ids(store.scroll(COLL, "t1", where=null)) == [pid(1), pid(3)]
    assert ids(store.search(COLL, "t1", X, where=null, limit=10)) == [pid(1), pid(3)]

    # a new field: null, then a value (no longer is_null, found by range), then null again
    valid_to = StoreFilter(is_null=["valid_to"])
    assert store.scroll(COLL, "t1", where=valid_to) == []
    assert store.set_payload(COLL, "t1", pid(2), {"valid_to": None}) is True
    assert ids(store.scroll(COLL, "t1", where=valid_to)) == [pid(2)]
    assert store.set_payload(COLL, "t1", pid(2), {"valid_to": 250.0}) is True
    assert store.scroll(COLL, "t1", where=valid_to) == []
    assert ids(store.scroll(COLL, "t1", where=StoreFilter(range_ts={"valid_to": (200.0, 300.0)}))) == [pid(2)]
    assert store.set_payload(COLL, "t1", pid(2), {"valid_to": None}) is True
    assert ids(store.scroll(COLL, "t1", where=valid_to)) == [pid(2)]
    assert payloads(store, "t2")[pid(4)] == {"tenant_id": "t2", **ROWS[3][3]}  # t2's null untouched


@pytest.mark.parametrize("fields", [{"valid_to": 5.0, "tags": [1.0, "x"]}, {"valid_to": None, "tags": [[1.0]]}])
def test_set_payload_is_idempotent(store, fields):
    fill(store)
    assert store.set_payload(COLL, "t1", pid(2), fields) is True
    once = payloads(store, "t1")
    assert store.set_payload(COLL, "t1", pid(2), fields) is True
    assert payloads(store, "t1") == once and once[pid(2)] == {"tenant_id": "t1", **ROWS[1][3], **fields}
    assert store.count(COLL) == len(ROWS)


def test_set_payload_arguments(store):
    fill(store)
    before = payloads(store, "t1")
    assert store.set_payload(COLL, "t1", pid(1), {}) is True  # exists; nothing to set
    assert store.set_payload(COLL, "t1", pid(99), {}) is False
    with pytest.raises(ValueError):
        store.set_payload(COLL, "", pid(1), {"subject": "Eve"})
    with pytest.raises(ValueError):  # a point cannot be moved to another tenant
        store.set_payload(COLL, "t1", pid(1), {"tenant_id": "t2"})
    assert payloads(store, "t1") == before


def test_set_payload_persists_after_close_and_reopen(kind, tmp_path):
    s = _open(kind, tmp_path / "q")
    s.ensure_collections([COLL], DIM)
    fill(s)
    assert s.set_payload(COLL, "t1", pid(3), {"superseded_by": None, "tags": [1.0, "x"]})
    assert s.set_payload(COLL, "t1", pid(2), {"valid_to": 9.5})
    s.close()
    s = _open(kind, tmp_path / "q")
    try:
        got = payloads(s, "t1")
        assert got[pid(3)] == {"tenant_id": "t1", **ROWS[2][3], "superseded_by": None, "tags": [1.0, "x"]}
        assert got[pid(2)]["valid_to"] == 9.5
        assert ids(s.scroll(COLL, "t1", where=StoreFilter(is_null=["superseded_by"]))) == [pid(1), pid(3)]
    finally:
        s.close()


def test_delete_keeps_to_the_tenant_and_counts_what_it_deleted(store, kind, tmp_path):
    fill(store)
    # pid(4) is t2's: a t1 delete naming it leaves it; unknown ids and an empty list delete nothing
    assert store.delete(COLL, "t1", [pid(1), pid(4), pid(99), pid(1)]) == 1
    assert ids(store.scroll(COLL, "t1")) == [pid(2), pid(3)]
    assert ids(store.scroll(COLL, "t2")) == [pid(4)]
    assert store.delete(COLL, "t1", []) == 0
    assert store.delete("never_created", "t1", [pid(2)]) == 0
    assert store.delete(COLL, "t1", [pid(1)]) == 0  # again: idempotent
    with pytest.raises(ValueError):
        store.delete(COLL, "", [pid(2)])
    # deleted for good: not found after a reopen either
    store.close()
    again = _open(kind, tmp_path / "q")
    try:
        assert ids(again.scroll(COLL, "t1")) == [pid(2), pid(3)]
    finally:
        again.close()
