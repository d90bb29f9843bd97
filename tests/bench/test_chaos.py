"""The chaos bench's schedule and its scoring (pure parts)."""

from dataclasses import replace
from datetime import datetime, timezone

from memstream.bench.chaos import (
    NETWORK_FAULTS,
    WORKERS,
    Asked,
    ChaosOptions,
    changed_payloads,
    plan_events,
    proxied_services,
    score_delivery,
)
from memstream.processors.write.index import CARDS, SCENES, TRIGGERS, TURNS, turn_point_id
from memstream.schemas import MemoryWrite, SourceTurn, Turn

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_the_schedule_is_seeded_and_covers_every_kind_of_failure():
    options = ChaosOptions(minutes=2, seed=7, llm=True)
    events = plan_events(options, list(WORKERS))
    assert events == plan_events(options, list(WORKERS))
    assert events != plan_events(ChaosOptions(minutes=2, seed=8, llm=True), list(WORKERS))
    kinds = [e.action for e in events]
    assert kinds.count("broker_restart") == 1 and kinds.count("llm_restart") == 1
    assert {"kill", "stop"} <= set(kinds)
    assert all(0 < e.at_s < 120 for e in events) and [e.at_s for e in events] == sorted(e.at_s for e in events)
    assert all(e.pause_s > 10.0 for e in events if e.action == "stop"), "a stop outlasts the session timeout"
    assert "llm_restart" not in [e.action for e in plan_events(ChaosOptions(minutes=2), list(WORKERS))]


def test_the_cluster_schedule_kills_a_broker_a_qdrant_node_and_a_whole_group_once():
    options = ChaosOptions(minutes=3, seed=3, cluster=True)
    assert set(options.workers) == set(WORKERS) | {"store-2"}
    events = plan_events(options, list(options.workers))
    kinds = [e.action for e in events]
    assert "broker_restart" not in kinds  # the cluster's brokers are killed one at a time instead
    assert kinds.count("broker_kill") >= 1 and kinds.count("qdrant_kill") >= 1 and kinds.count("group_kill") == 1
    nodes = [e for e in events if e.action in ("broker_kill", "qdrant_kill")]
    assert all(e.target in {"1", "2", "3"} and 5.0 <= e.pause_s <= 20.0 for e in nodes)
    # One node down at a time: a node's pause ends before the next node kill, so a quorum always holds.
    assert all(a.at_s + a.pause_s < b.at_s for a, b in zip(nodes, nodes[1:]))
    [group] = [e for e in events if e.action == "group_kill"]
    assert group.target in {"ingest", "store"} and 0 < group.at_s < 180
    long_run = [e.action for e in plan_events(ChaosOptions(minutes=20, cluster=True), list(options.workers))]
    assert long_run.count("broker_kill") >= 4 and long_run.count("qdrant_kill") >= 4


def test_a_calm_end_has_no_failure_and_every_failure_is_over_before_it():
    for cluster in (False, True):
        base = ChaosOptions(minutes=1, seed=4, cluster=cluster, kill_every_s=(2.0, 5.0), node_down_s=(3.0, 8.0))
        calm = replace(base, calm_s=20.0)
        every, kept = plan_events(base, list(base.workers)), plan_events(calm, list(calm.workers))
        assert any(e.at_s + e.pause_s > 40.0 for e in every)  # without a calm, failures run to the end
        assert kept and all(e.at_s + e.pause_s <= 40.0 for e in kept if e.action in ("kill", "stop"))
        assert all(e.at_s < 40.0 for e in kept)
        nodes = [e for e in kept if e.action in ("broker_kill", "qdrant_kill", "group_kill")]
        assert all(e.at_s + e.pause_s <= 40.0 for e in nodes) and (not cluster or len(nodes) == 3)


def test_network_faults_add_every_kind_of_toxic_on_a_proxied_service_and_leave_the_rest_as_it_was():
    options = ChaosOptions(minutes=2, seed=5, llm=True, network_faults=True)
    events = plan_events(options, list(WORKERS))
    assert events == plan_events(options, list(WORKERS))
    toxics = [e for e in events if e.action in NETWORK_FAULTS]
    assert sorted(e.action for e in toxics) == sorted(NETWORK_FAULTS)  # 2 minutes: 4 slots, one of each kind
    assert {e.target for e in toxics} == {"kafka", "llm"}  # spread over both services
    for e in toxics:
        low, high = NETWORK_FAULTS[e.action]
        assert low <= e.pause_s <= high and 0 < e.at_s < 120
    [lat] = [e for e in toxics if e.action == "latency"]
    assert 200 <= lat.attributes["latency"] <= 1000 and lat.attributes["jitter"] == lat.attributes["latency"] // 5
    [reset] = [e for e in toxics if e.action == "reset_peer"]
    assert 0 <= reset.attributes["timeout"] <= 500
    [hang] = [e for e in toxics if e.action == "timeout"]
    assert 1000 <= hang.attributes["timeout"] <= 5000
    [slow] = [e for e in toxics if e.action == "bandwidth"]
    assert 8 <= slow.attributes["rate"] <= 64
    # One toxic at a time in a 2-minute run: each is off before the next one starts.
    assert all(a.at_s + a.pause_s < b.at_s for a, b in zip(toxics, toxics[1:]))
    # Drawn after the rest: the failures of the same seed are the same with or without toxics.
    assert [e for e in events if e.action not in NETWORK_FAULTS] == plan_events(
        ChaosOptions(minutes=2, seed=5, llm=True), list(WORKERS)
    )
    # Without the option, no toxic.
    for plain in (ChaosOptions(minutes=2, seed=5, llm=True), ChaosOptions(minutes=3, cluster=True)):
        assert not [e for e in plan_events(plain, list(plain.workers)) if e.action in NETWORK_FAULTS]


def test_network_faults_target_what_is_proxied():
    assert proxied_services(ChaosOptions(network_faults=True)) == ["kafka"]
    assert proxied_services(ChaosOptions(network_faults=True, llm=True, cluster=True)) == ["llm", "qdrant"]
    # A cluster's brokers stay direct; a Qdrant fault hits one node's proxy.
    options = ChaosOptions(minutes=3, seed=2, cluster=True, network_faults=True)
    toxics = [e for e in plan_events(options, list(options.workers)) if e.action in NETWORK_FAULTS]
    assert {e.action for e in toxics} == set(NETWORK_FAULTS)
    assert {e.target for e in toxics} <= {"qdrant-1", "qdrant-2", "qdrant-3"}
    long_run = ChaosOptions(minutes=20, seed=1, network_faults=True)
    assert len([e for e in plan_events(long_run, list(WORKERS)) if e.action in NETWORK_FAULTS]) == 40


def turn(i: int, tenant: str = "t1") -> Turn:
    return Turn(
        tenant_id=tenant,
        conversation_id="c1",
        session_id="S1",
        turn_id=f"D1:{i}",
        speaker="A",
        text=f"turn {i}",
        event_time=T0,
    )


def write(write_id: str, turn_ids: list[int]) -> MemoryWrite:
    return MemoryWrite(
        tenant_id="t1",
        conversation_id="c1",
        write_id=write_id,
        flush_id=write_id,
        mode="extractive",
        cards=[],
        scenes=[],
        source_turns=[
            SourceTurn(
                turn_id=f"D1:{i}", session_id="S1", speaker="A", role="user", text=f"turn {i}", event_time=T0, seq=i
            )
            for i in turn_ids
        ],
        written_at=T0,
    )


def test_lost_duplicated_extra_and_missing_points_are_counted_apart():
    produced = [turn(i) for i in range(4)]
    ids = {t.turn_id: turn_point_id(t.tenant_id, t.conversation_id, t.turn_id) for t in produced}
    reference = {TURNS: set(ids.values()), CARDS: {"c1", "c2"}, SCENES: {"s1"}, TRIGGERS: set()}
    chaos = {TURNS: set(list(ids.values())[:3]), CARDS: {"c1", "c3"}, SCENES: {"s1"}, TRIGGERS: set()}
    # w1 delivered twice (the same write: not a duplicate); turn 2 also in w2 (a duplicate).
    writes = [write("w1", [0, 1, 2]), write("w1", [0, 1, 2]), write("w2", [2, 3])]
    d = score_delivery(produced, chaos, reference, writes)
    assert (d.turns, d.lost, d.duplicated) == (4, 1, 1)
    assert (d.extra_points, d.missing_points) == (1, 2)
    assert d.extra_by_collection[CARDS] == 1 and d.missing_by_collection[TURNS] == 1


def test_changed_payloads_names_the_fields_that_differ_on_points_both_stores_hold():
    reference = {CARDS: {"c1": {"text": "a", "v": 1}, "c2": {"text": "b"}}, TURNS: {"t1": {"seq": 1}}}
    points = {
        CARDS: {"c1": {"text": "a", "v": 2, "extra": None}, "c3": {"text": "c"}},  # c3/c2: ids, not payloads
        TURNS: {"t1": {"seq": 1.0}},  # the same number, whichever store typed it
    }
    assert changed_payloads(points, reference) == {CARDS: {"c1": ["extra", "v"]}}
    assert changed_payloads(points, reference, ignore=["v", "extra"]) == {}


def test_asked_counts_every_outcome_and_a_p99():
    asked = Asked(ok=3, error_replies=1, send_errors=1, unanswered=0, latencies_ms=[10.0, 20.0, 30.0, 1000.0])
    assert asked.queries == 5
    assert 900 < asked.p99_ms() <= 1000
