from memstream import metrics as metrics_module
from memstream.metrics import Metrics


def series(m: Metrics, name: str) -> list[dict]:
    return [s.labels for f in m.registry.collect() for s in f.samples if s.name == name]


def test_llm_costs_are_counted_per_stage_and_per_conversation():
    m = Metrics()
    m.count_llm("extract", "smollm2", 2, 300, 120, tenant="acme", conversation="c1")
    m.count_llm("extract", "smollm2", 1, 100, 40, tenant="acme", conversation="c2")
    totals = {tuple(s.labels.values()): s.value for f in m.registry.collect() for s in f.samples
              if s.name == "memstream_llm_tokens_total"}
    assert totals[("extract", "smollm2", "prompt")] == 400
    per_conv = {(s.labels["conversation"], s.labels["kind"]): s.value for f in m.registry.collect() for s in f.samples
                if s.name == "memstream_conversation_llm_tokens_total"}
    assert per_conv[("c1", "prompt")] == 300 and per_conv[("c2", "completion")] == 40


def test_per_conversation_series_stay_bounded(monkeypatch):
    monkeypatch.setattr(metrics_module, "CONVERSATION_SERIES", 3)
    m = Metrics()
    for i in range(5):
        m.count_llm("extract", "x", 1, 10, 5, tenant="acme", conversation=f"c{i}")
    kept = {s["conversation"] for s in series(m, "memstream_conversation_llm_calls_total")}
    assert kept == {"c2", "c3", "c4"}
    assert sum(s.value for f in m.registry.collect() for s in f.samples if s.name == "memstream_llm_calls_total") == 5
