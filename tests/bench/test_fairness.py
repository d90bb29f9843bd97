"""``memstream bench fairness``: its pieces (the import, the figures, the delivery count) and a short
run end to end (a worker, a gateway, the broker): the JSON names B's ratios and counts no turn lost
or duplicated."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from memstream.bench.cli import bench
from memstream.bench.fairness import (
    FIGURES,
    PHASES,
    FairnessOptions,
    TenantA,
    TenantB,
    Timed,
    delivery,
    fairness_result,
    history,
    latency_figures,
    plot_fairness,
    ratio,
)
from memstream.gateway.http import tenant_turns


def test_the_import_is_the_same_text_in_both_phases_in_conversations_of_their_own():
    o = FairnessOptions(import_turns=7, import_conversation_turns=3)
    bulk, live = history(o, "bulk"), history(o, "live")
    assert [t.text for t in bulk] == [t.text for t in live]
    assert [t.conversation_id for t in bulk] == ["bulk-h0000"] * 3 + ["bulk-h0001"] * 3 + ["bulk-h0002"]
    assert len({(t.conversation_id, t.turn_id) for t in bulk}) == 7
    assert all(a.event_time < b.event_time for a, b in zip(bulk, bulk[1:]))
    # what the gateway's routes take: the turns as JSON, of the key's tenant
    assert len(tenant_turns([t.model_dump(mode="json") for t in bulk], "fair-a")) == 7


def test_a_phase_figures_count_a_missed_one_as_its_timeout_or_leave_it_out():
    timed = [Timed("bulk", 0, 1.0), Timed("bulk", 1, 3.0), Timed("bulk", 2, None), Timed("baseline", 0, 50.0)]
    with_timeout = latency_figures(timed, "bulk", 10.0)
    assert with_timeout == {"n": 3, "p50_s": 3.0, "p99_s": 10.0, "max_s": 10.0, "missed": 1}
    assert latency_figures(timed, "bulk", None)["p99_s"] == 3.0
    assert latency_figures(timed, "live", 10.0)["p99_s"] is None
    assert ratio(3.0, 1.5) == 2.0 and ratio(None, 1.0) is None and ratio(1.0, None) is None


def test_delivery_counts_lost_duplicated_and_refused_turns_that_were_stored():
    writes = {"t1": {"w1"}, "t2": {"w1", "w2"}, "t3": {"w2"}}
    counts = delivery(["t1", "t2", "t3", "t4"], ["r1", "r2"], {"t1", "t2", "t3", "r2"}, writes)
    assert counts == {
        "turns_sent": 4,
        "turns_lost": 1,
        "turns_duplicated": 1,
        "refused_turns": 2,
        "refused_turns_stored": 1,
    }


@pytest.mark.integration
def test_a_short_fairness_run_reports_b_per_phase_and_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "fairness.json"
    args = ["fairness", "--import-turns", "60", "--import-conversation-turns", "20", "--phase", "10"]
    args += ["--probe-every", "2", "--question-every", "4", "--stm-idle", "3", "--probe-timeout", "30"]
    args += ["--workdir", str(tmp_path / "w"), "--json", str(out)]
    result = CliRunner().invoke(bench, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    fair = json.loads(out.read_text())
    assert out.with_suffix(".png").stat().st_size > 10_000
    for name in FIGURES:
        for phase in ("bulk", "live"):
            assert fair[f"{name}_p99_ratio_{phase}"] > 0, (name, phase, fair[f"{name}_p99_ratio_{phase}"])
        for phase in PHASES:
            figure = fair["phases"][phase][f"b_{name}"]
            assert figure["n"] > 0 and figure["p99_s"] > 0 and figure["p50_s"] <= figure["p99_s"], (name, phase)
    assert fair["turns_lost"] == 0 and fair["turns_duplicated"] == 0, fair
    assert fair["refused_turns_stored"] == 0
    assert fair["turns_sent"] >= 120 + 3 * 8  # both imports and B's turns (one a second), the flood besides
    bulk = fair["phases"]["bulk"]
    assert bulk["a_import_sent_s"] is not None and bulk["a_flood_turns"] > 0
    # Live traffic goes first: on a busy machine the import may be let in only once the phase's live
    # turns are through, but all of it is let in before the next phase.
    assert bulk["a_import_all_let_in_s"] is not None and bulk["a_import_all_let_in_s"] > 0
    assert fair["rate_limited_429"] > 0, "A's flood met its limit"
    assert fair["llm_budget_fallbacks"] == 0  # extractive: no LLM call to refuse
    assert fair["b_reply_errors"] == 0


def test_the_result_names_the_ratios_and_the_plot_is_drawn(tmp_path: Path) -> None:
    o = FairnessOptions(import_turns=10, phase_s=10)
    a, b = TenantA(o, None, None), TenantB(o, None, lambda: 0.0)  # type: ignore[arg-type]
    run = SimpleNamespace(o=o, a=a, b=b, samples=[], writes_of={}, windows={})
    for i, phase in enumerate(PHASES):
        slower = 1 + i  # the baseline, then twice and three times as slow
        b.sent[f"{phase}-t"] = (phase, 10.0 * i, 0.0)
        b.card_seen[f"{phase}-t"] = 4.0 * slower
        b.fresh.append(Timed(phase, 10.0 * i, 1.0 * slower))
        b.replies.append(Timed(phase, 10.0 * i + 1, 0.1 * slower))
        run.windows[phase] = {
            "start_s": 10.0 * i,
            "end_s": 10.0 * i + 10,
            "imported": 10 * (phase == "bulk"),
            "fallbacks": 0,
        }
        run.windows[phase]["drained_s"] = 1.0
        run.samples.append({"t_s": 10.0 * i + 5, "imported": 10 * i, "fallbacks": 0, "lag_turns": i, "lag_bulk": 0})
    a.accepted = {"bulk-t", "x"}
    result = fairness_result(run, o, {"baseline-t", "bulk-t", "live-t", "x"}, "abc1234")  # type: ignore[arg-type]
    assert result["fresh_p99_ratio_bulk"] == 2.0 and result["reply_p99_ratio_live"] == 3.0
    assert result["card_p99_ratio_bulk"] == 2.0 and result["target_within_2x_bulk"] is True
    assert result["turns_lost"] == 0 and result["turns_duplicated"] == 0 and result["turns_sent"] == 4
    assert result["phases"]["bulk"]["a_import_all_let_in_s"] == 5.0  # the first sample with all 10 in
    assert result["phases"]["bulk"]["a_import_rate_per_s"] == 2.0  # while it ran: 10 turns in 5 s
    json.dumps(result)
    assert plot_fairness(result, tmp_path / "f.png").stat().st_size > 10_000
