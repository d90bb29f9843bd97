"""Every Grafana dashboard in dashboards/*.json is a valid classic dashboard JSON model.

The schema, dashboards/schema/dashboard.schema.json, is the `Dashboard` interface of the pinned
@grafana/schema converted to JSON Schema (draft 7) by dashboards/schema/generate.sh. Objects are
open (additional properties allowed, as in dashboards Grafana itself exports), but types, enums and
required keys are enforced; the negative tests below prove validation can actually fail.
"""

import copy
import json
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
SCHEMA_PATH = ROOT / "dashboards" / "schema" / "dashboard.schema.json"


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert jsonschema.validators.validator_for(schema) is jsonschema.Draft7Validator
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def _leaves(error):
    # An anyOf failure (a panel is `Panel | RowPanel`) only says "not valid under any of the given
    # schemas" about the whole panel; report the errors of the branch(es) that came closest instead.
    if not error.context:
        return [error]
    branches = {}
    for sub in error.context:
        branches.setdefault(sub.relative_schema_path[0], []).extend(_leaves(sub))
    fewest = min(len(errs) for errs in branches.values())
    return [e for errs in branches.values() if len(errs) == fewest for e in errs]


def _errors(validator, dashboard):
    """Readable `path: message` lines for everything wrong with `dashboard`; empty when it is valid."""
    lines = {
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for top in validator.iter_errors(dashboard)
        for e in _leaves(top)
    }
    return sorted(lines)


def test_schema_is_the_classic_dashboard_model():
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert schema["$ref"] == "#/definitions/Dashboard"
    dashboard = schema["definitions"]["Dashboard"]
    assert {"panels", "templating", "schemaVersion", "title", "uid"} <= set(dashboard["properties"])
    assert "schemaVersion" in dashboard["required"]
    assert {"Panel", "RowPanel", "GridPos", "VariableModel"} <= set(schema["definitions"])


def test_at_least_one_dashboard_exists():
    assert DASHBOARDS, "no dashboards/*.json found"


@pytest.mark.parametrize("path", DASHBOARDS, ids=[p.name for p in DASHBOARDS])
def test_dashboard_validates_against_grafana_schema(validator, path):
    dashboard = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(dashboard, dict), f"{path.name}: top level must be a JSON object"
    errors = _errors(validator, dashboard)
    assert not errors, f"{path.name} does not match the Grafana dashboard schema:\n" + "\n".join(errors)


def _ds():
    return {"type": "prometheus", "uid": "${datasource}"}


# A dashboard as Grafana 11/12 writes it ("Export for sharing externally"), with the keys that the
# TS types do not list (__inputs, __requires, a query variable's `definition`).
WELL_FORMED = {
    "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus", "type": "datasource", "pluginId": "prometheus"}],
    "__requires": [{"type": "panel", "id": "timeseries", "name": "Time series", "version": ""}],
    "annotations": {
        "list": [
            {
                "builtIn": 1,
                "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                "enable": True,
                "hide": True,
                "iconColor": "rgba(0, 211, 255, 1)",
                "name": "Annotations & Alerts",
                "target": {"limit": 100, "matchAny": False, "tags": [], "type": "dashboard"},
                "type": "dashboard",
            }
        ]
    },
    "editable": True,
    "fiscalYearStartMonth": 0,
    "graphTooltip": 1,
    "id": None,
    "links": [],
    "panels": [
        {
            "collapsed": False,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": 0},
            "id": 10,
            "panels": [],
            "title": "Throughput",
            "type": "row",
        },
        {
            "datasource": _ds(),
            "fieldConfig": {
                "defaults": {
                    "color": {"mode": "palette-classic"},
                    "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10},
                    "thresholds": {
                        "mode": "absolute",
                        "steps": [{"color": "green", "value": None}, {"color": "red", "value": 80}],
                    },
                    "unit": "ops",
                },
                "overrides": [],
            },
            "gridPos": {"h": 8, "w": 12, "x": 0, "y": 1},
            "id": 1,
            "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}},
            "pluginVersion": "11.3.0",
            "targets": [
                {
                    "datasource": _ds(),
                    "editorMode": "code",
                    "expr": "sum by (stage) (rate(memstream_stage_messages_in_total[1m]))",
                    "legendFormat": "{{stage}}",
                    "range": True,
                    "refId": "A",
                }
            ],
            "title": "Messages in per stage",
            "type": "timeseries",
        },
        {
            "datasource": _ds(),
            "fieldConfig": {
                "defaults": {
                    "mappings": [{"type": "value", "options": {"0": {"text": "down", "color": "red"}}}],
                    "unit": "short",
                },
                "overrides": [],
            },
            "gridPos": {"h": 8, "w": 6, "x": 12, "y": 1},
            "id": 2,
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
            "targets": [{"datasource": _ds(), "expr": "sum(memstream_consumer_lag)", "refId": "A"}],
            "title": "Consumer lag",
            "type": "stat",
        },
        {
            "datasource": _ds(),
            "fieldConfig": {
                "defaults": {},
                "overrides": [
                    {
                        "matcher": {"id": "byName", "options": "Value"},
                        "properties": [{"id": "unit", "value": "s"}],
                    }
                ],
            },
            "gridPos": {"h": 8, "w": 6, "x": 18, "y": 1},
            "id": 3,
            "targets": [
                {
                    "datasource": _ds(),
                    "expr": "topk(5, memstream_stage_latency_seconds)",
                    "format": "table",
                    "instant": True,
                    "refId": "A",
                }
            ],
            "transformations": [{"id": "organize", "options": {"excludeByName": {"Time": True}}}],
            "title": "Slowest stages",
            "type": "table",
        },
    ],
    "refresh": "10s",
    "schemaVersion": 39,
    "tags": ["memstream"],
    "templating": {
        "list": [
            {
                "current": {"selected": False, "text": "Prometheus", "value": "PBFA97CFB590B2093"},
                "hide": 0,
                "includeAll": False,
                "label": "Prometheus",
                "multi": False,
                "name": "datasource",
                "options": [],
                "query": "prometheus",
                "refresh": 1,
                "regex": "",
                "skipUrlSync": False,
                "type": "datasource",
            },
            {
                "datasource": _ds(),
                "definition": "label_values(memstream_stage_messages_in_total, stage)",
                "includeAll": True,
                "multi": True,
                "name": "stage",
                "query": {
                    "qryType": 1,
                    "query": "label_values(memstream_stage_messages_in_total, stage)",
                    "refId": "PrometheusVariableQueryEditor-VariableQuery",
                },
                "refresh": 2,
                "sort": 1,
                "type": "query",
            },
        ]
    },
    "time": {"from": "now-1h", "to": "now"},
    "timepicker": {},
    "timezone": "browser",
    "title": "memstream overview",
    "uid": "memstream-overview",
    "version": 1,
    "weekStart": "",
}


def test_a_well_formed_grafana_export_validates(validator):
    assert _errors(validator, WELL_FORMED) == []


def _broken(mutate):
    dashboard = copy.deepcopy(WELL_FORMED)
    mutate(dashboard)
    return dashboard


def _set(path, value):
    def mutate(d):
        *parents, last = path
        for key in parents:
            d = d[key]
        d[last] = value

    return mutate


def _drop(path):
    def mutate(d):
        *parents, last = path
        for key in parents:
            d = d[key]
        del d[last]

    return mutate


@pytest.mark.parametrize(
    "mutate, where",
    [
        pytest.param(_set(["panels"], {"1": {"type": "stat"}}), "panels", id="panels-not-a-list"),
        pytest.param(_set(["panels", 1, "gridPos", "h"], "8"), "panels/1/gridPos/h", id="gridPos-h-string"),
        pytest.param(_drop(["panels", 1, "gridPos", "w"]), "panels/1/gridPos", id="gridPos-missing-w"),
        pytest.param(_drop(["panels", 2, "type"]), "panels/2", id="panel-without-type"),
        pytest.param(_set(["panels", 3, "targets"], {"expr": "up"}), "panels/3/targets", id="targets-not-a-list"),
        pytest.param(_set(["panels", 3, "targets", 0], "up"), "panels/3/targets/0", id="target-not-an-object"),
        pytest.param(_drop(["schemaVersion"]), "<root>", id="missing-schemaVersion"),
        pytest.param(_set(["schemaVersion"], "39"), "schemaVersion", id="schemaVersion-string"),
        pytest.param(_set(["title"], 42), "title", id="title-not-a-string"),
        pytest.param(_set(["tags"], "memstream"), "tags", id="tags-not-a-list"),
        pytest.param(
            _set(["templating", "list", 0, "type"], "prom"), "templating/list/0/type", id="unknown-variable-type"
        ),
        pytest.param(_drop(["templating", "list", 0, "name"]), "templating/list/0", id="variable-without-name"),
        pytest.param(_drop(["time", "to"]), "time", id="time-without-to"),
        pytest.param(_set(["graphTooltip"], 7), "graphTooltip", id="graphTooltip-out-of-enum"),
        pytest.param(
            _set(["panels", 1, "fieldConfig", "defaults", "thresholds", "mode"], "relative-ish"),
            "panels/1/fieldConfig/defaults/thresholds/mode",
            id="thresholds-mode-out-of-enum",
        ),
    ],
)
def test_broken_dashboard_is_rejected(validator, mutate, where):
    errors = _errors(validator, _broken(mutate))
    assert errors, "the schema accepted a broken dashboard"
    assert any(e.startswith(where) for e in errors), errors


def test_repo_dashboards_would_fail_if_broken(validator):
    # The same check as the per-file test, against a corrupted copy of each repo dashboard.
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text(encoding="utf-8"))
        dashboard["panels"] = {"not": "a list"}
        assert _errors(validator, dashboard), path.name
