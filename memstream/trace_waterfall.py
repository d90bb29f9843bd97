"""One trace from Jaeger's query API as a waterfall: its spans in tree order with their start and
duration (``memstream trace TRACE_ID``), as a table or a PNG. Jaeger built from source here has no
UI assets; its API has everything the UI would draw."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Row:
    depth: int
    name: str
    service: str
    start_ms: float  # from the trace's first span
    duration_ms: float
    error: bool
    links: int  # span links (FOLLOWS_FROM references): a flush to its turns


def fetch_trace(query_url: str, trace_id: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """The trace as Jaeger's API gives it (``/api/traces/<id>``)."""
    with urllib.request.urlopen(f"{query_url.rstrip('/')}/api/traces/{trace_id}", timeout=timeout_s) as response:
        data = json.loads(response.read())["data"]
    if not data:
        raise LookupError(f"Jaeger at {query_url} has no trace {trace_id}")
    return data[0]


def waterfall_rows(trace: dict[str, Any]) -> list[Row]:
    """Spans depth-first from the roots, children by start time; a span whose parent is not in the
    trace (lost, or not sampled) counts as a root."""
    spans = {s["spanID"]: s for s in trace["spans"]}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for span in spans.values():
        parent = next((r["spanID"] for r in span.get("references", []) if r["refType"] == "CHILD_OF"), None)
        children.setdefault(parent if parent in spans else None, []).append(span)
    t0 = min((s["startTime"] for s in spans.values()), default=0)
    services = {pid: p["serviceName"] for pid, p in trace.get("processes", {}).items()}
    rows: list[Row] = []

    def walk(parent: str | None, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: s["startTime"]):
            tags = {t["key"]: t["value"] for t in span.get("tags", [])}
            rows.append(
                Row(
                    depth=depth,
                    name=span["operationName"],
                    service=services.get(span.get("processID", ""), "?"),
                    start_ms=(span["startTime"] - t0) / 1000.0,
                    duration_ms=span["duration"] / 1000.0,
                    error=tags.get("otel.status_code") == "ERROR" or tags.get("error") is True,
                    links=sum(1 for r in span.get("references", []) if r["refType"] == "FOLLOWS_FROM"),
                )
            )
            walk(span["spanID"], depth + 1)

    walk(None, 0)
    return rows


def plot_waterfall(rows: list[Row], out: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, ax = plt.subplots(figsize=(11, 0.32 * len(rows) + 1.4))
    colours: dict[str, str] = {}
    palette = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown"]
    for i, row in enumerate(rows):
        colour = "tab:red" if row.error else colours.setdefault(row.service, palette[len(colours) % len(palette)])
        ax.barh(i, max(row.duration_ms, 0.05), left=row.start_ms, color=colour, height=0.6)
        ax.text(row.start_ms + row.duration_ms, i, f" {row.duration_ms:.1f} ms", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(["· " * r.depth + r.name + (f" ({r.links} links)" if r.links else "") for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms from the trace's first span")
    ax.set_title(title, fontsize=10)
    handles = [Patch(color=colour, label=service) for service, colour in colours.items()]
    if any(r.error for r in rows):
        handles.append(Patch(color="tab:red", label="error"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
