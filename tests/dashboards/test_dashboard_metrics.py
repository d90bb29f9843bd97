"""Every dashboard panel reads metrics from the catalogue (docs/metrics.md), through the datasource
variable, and the dashboards are told apart by uid."""

import re
from pathlib import Path

from memstream.dashboards import PanelQuery, load_dashboards, panel_queries

CATALOGUE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def catalogue() -> set[str]:
    names = set(re.findall(r"^\| `(memstream_\w+)` \|", CATALOGUE.read_text(), re.M))
    return names | {n.removesuffix("_total") for n in names}


def test_every_panel_metric_is_in_the_catalogue():
    known = catalogue()
    queries = panel_queries()
    assert len(queries) >= 30
    for q in queries:
        assert q.metrics(), f"{q.dashboard} / {q.panel}: reads no memstream metric"
        unknown = {m for m in q.metrics() if m not in known and m + "_total" not in known}
        assert not unknown, f"{q.dashboard} / {q.panel}: {unknown} not in docs/metrics.md"


def test_histogram_series_fold_into_their_family():
    q = PanelQuery(
        "d",
        "p",
        "histogram_quantile(0.5, sum by (le) (rate(memstream_store_seconds_bucket[1m]))) + memstream_llm_calls_total",
    )
    assert q.metrics() == {"memstream_store_seconds", "memstream_llm_calls_total"}
    assert "[1m]" in PanelQuery("d", "p", "rate(memstream_x_total[$__rate_interval])").promql


def test_the_three_dashboards_use_the_datasource_variable():
    dashboards = load_dashboards()
    assert {"memstream-overview.json", "memstream-cost.json", "memstream-query.json"} <= set(dashboards)
    assert len({d["uid"] for d in dashboards.values()}) == len(dashboards)
    for name, d in dashboards.items():
        assert d["title"] and d["uid"], name
        variables = {v["name"]: v for v in d["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        for panel in d["panels"]:
            assert panel["datasource"]["uid"] == "${datasource}", (name, panel["title"])
            assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"]), (name, panel["title"])
