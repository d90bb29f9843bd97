"""The PromQL of the Grafana dashboards in dashboards/: listed, with Grafana's variables given
concrete values, and evaluated against a Prometheus (tests, and checking a live deployment)."""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARDS = Path(__file__).resolve().parents[1] / "dashboards"
# Grafana fills these in per panel and time range; a check uses fixed values.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}
_METRIC = re.compile(r"\b(memstream_[a-z0-9_]+)")
_HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str  # file name
    panel: str  # title
    expr: str  # as written in the dashboard

    @property
    def promql(self) -> str:
        expr = self.expr
        for name, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(name, value)
        return expr

    def metrics(self) -> set[str]:
        """Metric names the expression reads, histogram series folded into their family."""
        names = set()
        for name in _METRIC.findall(self.expr):
            for part in _HISTOGRAM_PARTS:
                if name.endswith(part) and not name.endswith("_total"):
                    name = name.removesuffix(part)
                    break
            names.add(name)
        return names


def load_dashboards(folder: Path = DASHBOARDS) -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def panel_queries(folder: Path = DASHBOARDS) -> list[PanelQuery]:
    out = []
    for name, dashboard in load_dashboards(folder).items():
        for panel in _panels(dashboard.get("panels", [])):
            for target in panel.get("targets", []):
                if target.get("expr"):
                    out.append(PanelQuery(name, panel.get("title", ""), target["expr"]))
    return out


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Panels, rows' nested panels included."""
    out = []
    for panel in panels:
        out.append(panel)
        out += _panels(panel.get("panels", []))
    return out


def evaluate(prometheus_url: str, promql: str, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """An instant query; the result vector (or a scalar as one sample). Raises on a PromQL error."""
    url = f"{prometheus_url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:  # 400 carries Prometheus's error message
        body = json.loads(exc.read() or b"{}")
    if body.get("status") != "success":
        raise ValueError(f"{body.get('errorType', 'error')}: {body.get('error', body)}")
    data = body["data"]
    return data["result"] if data["resultType"] in ("vector", "matrix") else [{"value": data["result"]}]


@dataclass(frozen=True)
class Checked:
    query: PanelQuery
    series: int  # series returned (0: the expression parses but finds no data)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.series > 0


def check(prometheus_url: str, folder: Path = DASHBOARDS) -> list[Checked]:
    """Every dashboard expression evaluated against a Prometheus: does it parse, and find series?"""
    out = []
    for q in panel_queries(folder):
        try:
            out.append(Checked(q, len(evaluate(prometheus_url, q.promql))))
        except (ValueError, OSError) as exc:
            out.append(Checked(q, 0, str(exc)))
    return out
