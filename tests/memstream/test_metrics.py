"""The metrics catalogue: docs/metrics.md and the registry agree, and no label is unbounded."""

import re
from pathlib import Path

from memstream.gateway.http import GatewayMetrics
from memstream.metrics import LLM_ERROR_KINDS, Metrics

CATALOGUE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
# Label names whose values come from small fixed sets (stages, topics, partitions, models, reasons...).
BOUNDED_LABELS = {
    "stage",
    "op",  # a rebuild: upsert or delete
    "phase",  # a worker's start-up phase (a fixed set)
    "reason",
    "group",
    "topic",
    "partition",
    "direction",
    "mode",
    "source",
    "collection",
    "model",
    "kind",
    "error",
    "action",
    "decided_by",
    "profile",
    "outcome",
    "step",
    "operation",
    "where",  # a fixed set: store:<collection>, window, buffer, table, dropped, update
}


def metric_objects(m: Metrics) -> list:
    return [v for v in vars(m).values() if hasattr(v, "_labelnames")]


def exposed_name(metric) -> str:  # a prometheus_client metric
    return metric._name + ("_total" if metric._type == "counter" else "")


def documented() -> dict[str, tuple[str, set[str]]]:
    rows = re.findall(r"^\| `(memstream_\w+)` \| (\w+) \|\s*([\w, ]*?)\s*\|", CATALOGUE.read_text(), re.M)
    return {
        name: (kind, {label.strip() for label in labels.split(",") if label.strip()}) for name, kind, labels in rows
    }


def test_the_catalogue_lists_every_metric_with_its_type_and_labels():
    """Every series a worker or a gateway exposes, and nothing else."""
    docs = documented()
    exposed = [*metric_objects(Metrics()), *metric_objects(GatewayMetrics())]
    code = {exposed_name(m): (m._type, set(m._labelnames)) for m in exposed}
    assert docs == code


def test_no_label_is_unbounded():
    for metric in metric_objects(Metrics()):
        assert set(metric._labelnames) <= BOUNDED_LABELS, (metric._name, metric._labelnames)
        assert not {"tenant", "conversation", "tenant_id", "conversation_id"} & set(metric._labelnames)


def samples(m: Metrics, name: str) -> dict[tuple, float]:
    return {tuple(s.labels.values()): s.value for f in m.registry.collect() for s in f.samples if s.name == name}


def test_llm_costs_are_counted_per_stage_and_model():
    m = Metrics()
    m.count_llm("extract", "smollm2", 2, 300, 120)
    m.count_llm("extract", "smollm2", 1, 100, 40)
    m.count_llm("answer", None, 1, 50, 10)
    tokens = samples(m, "memstream_llm_tokens_total")
    assert tokens[("extract", "smollm2", "prompt")] == 400 and tokens[("extract", "smollm2", "completion")] == 160
    assert samples(m, "memstream_llm_calls_total")[("answer", "unknown")] == 1


def test_a_stage_and_an_llm_use_exist_at_zero_before_their_first_message():
    m = Metrics()
    m.init_stage("index")
    m.init_llm("plan", "smollm2")
    assert samples(m, "memstream_stage_messages_in_total") == {("index",): 0.0}
    assert samples(m, "memstream_stage_messages_skipped_total") == {
        ("index", "redelivered"): 0.0,
        ("index", "out_of_order"): 0.0,
        ("index", "fenced"): 0.0,
        ("index", "in_state"): 0.0,
    }
    errors = samples(m, "memstream_llm_errors_total")
    assert set(errors) == {("plan", "smollm2", kind) for kind in LLM_ERROR_KINDS} and not any(errors.values())
