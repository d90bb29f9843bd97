"""infra/helm/memstream: `helm lint` passes and `helm template` renders the two worker groups as
compose.yaml runs them, with a KEDA ScaledObject per group on the consumer group memstream uses, and
the gateway with its keys and session secret from a Secret.

helm comes from infra/helm/helm.sh: built once from the Go module proxy (helm.sh/helm/v4) into the
cache (scripts/install.sh does it), found there afterwards."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import pytest
import yaml

from memstream.config import Settings
from memstream.topology import STAGES, STORE_STAGES, TOPOLOGY, group_id

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "infra" / "helm" / "memstream"
COMPOSE = yaml.safe_load((ROOT / "infra" / "compose.yaml").read_text())
QDRANT = "http://qdrant-0.qdrant:6333,http://qdrant-1.qdrant:6333,http://qdrant-2.qdrant:6333"
SETTINGS = {f"MEMSTREAM_{name.upper()}" for name in Settings.model_fields}


@cache
def helm() -> str:
    done = subprocess.run(
        ["bash", str(ROOT / "infra" / "helm" / "helm.sh")], capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        hint = "" if shutil.which("go") else " (go is not on PATH: helm is built from helm.sh/helm/v4 with Go)"
        pytest.fail(f"infra/helm/helm.sh failed{hint}:\n{done.stderr[-4000:]}")
    return done.stdout.strip().splitlines()[-1]


def run_helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([helm(), *args], capture_output=True, text=True, timeout=120)


def values_file(values: dict[str, object]) -> str:
    """A values file of ``values`` (dotted keys nested): commas in a URL list need no escaping."""
    tree: dict = {}
    for key, value in values.items():
        *path, last = key.split(".")
        node = tree
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(tree, f)
    return f.name


def run_chart(command: str, values: dict[str, object], *args: str) -> subprocess.CompletedProcess:
    path = values_file(values)
    try:
        return run_helm(command, *args, str(CHART), "-f", path)
    finally:
        os.unlink(path)


def render(values: dict[str, object] | None = None) -> list[dict]:
    values = {"qdrant.url": QDRANT, **(values or {})}
    done = run_chart("template", values, "mem")
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def of_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in docs if d["kind"] == kind}


def workers(docs: list[dict]) -> dict[str, dict]:
    """The worker groups' Deployments (the gateway's aside)."""
    return {group: d for group, d in of_kind(docs, "Deployment").items() if group != "gateway"}


def container(deployment: dict) -> dict:
    [worker] = deployment["spec"]["template"]["spec"]["containers"]
    return worker


def env(deployment: dict) -> dict[str, object]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(deployment)["env"]}


def stages(deployment: dict) -> list[str]:
    return str(env(deployment)["MEMSTREAM_STAGES"]).split(",")


def test_lint():
    for values in (
        {},
        {"keda.enabled": False, "metrics.serviceMonitor.enabled": True, "gateway.enabled": False},
        {"gateway.apiKeys": {"acme": ["ab" * 32]}, "tracing.otlpEndpoint": "http://jaeger:4318"},
    ):
        done = run_chart("lint", {"qdrant.url": QDRANT, **values}, "--strict")
        assert done.returncode == 0, done.stdout + done.stderr


def test_two_deployments_run_every_stage_once():
    deployments = workers(render())
    assert set(deployments) == {"ingest", "store"}
    assert sorted(st for d in deployments.values() for st in stages(d)) == sorted(STAGES)
    assert not set(stages(deployments["ingest"])) & STORE_STAGES
    for group, deployment in deployments.items():
        assert stages(deployment) == COMPOSE["services"][group]["environment"]["MEMSTREAM_STAGES"].split(",")


def test_every_variable_is_a_setting_and_valid():
    values = {"qdrant.apiKey": "secret", "llm.apiKey": "key", "llm.baseUrl": "https://llm.example/v1"}
    values["extraEnv.MEMSTREAM_LOG_LEVEL"] = "debug"
    for deployment in workers(render(values)).values():
        variables = env(deployment)
        assert set(variables) <= SETTINGS, set(variables) - SETTINGS
        Settings(**{k.removeprefix("MEMSTREAM_").lower(): v for k, v in variables.items() if isinstance(v, str)})
        assert variables["MEMSTREAM_LOG_LEVEL"] == "debug"


def test_deployment_runs_the_worker_with_metrics_probe_and_data_dir():
    for group, deployment in workers(render()).items():
        pod = deployment["spec"]["template"]
        worker = container(deployment)
        variables = env(deployment)
        assert worker["command"] == ["memstream", "worker"]
        assert worker["image"] == "memstream:latest"
        assert variables["MEMSTREAM_METRICS_HOST"] == "0.0.0.0"
        assert variables["MEMSTREAM_METRICS_PORT"] == "9464" == str(Settings.model_fields["metrics_port"].default)
        [port] = worker["ports"]
        assert (port["name"], port["containerPort"]) == ("metrics", 9464)
        assert worker["readinessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}
        assert worker["resources"]["requests"] and worker["resources"]["limits"]
        annotations = pod["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert (annotations["prometheus.io/port"], annotations["prometheus.io/path"]) == ("9464", "/metrics")
        assert pod["spec"]["terminationGracePeriodSeconds"] >= 30
        assert variables["MEMSTREAM_DATA_DIR"] == "/data"
        assert worker["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
        assert "emptyDir" in pod["spec"]["volumes"][0]
        assert deployment["metadata"]["annotations"]["memstream/consumer-group"] == group_id(
            "memory", stages(deployment)
        )


def test_services_expose_metrics_and_service_monitors_on_request():
    docs = render()
    services = {g: s for g, s in of_kind(docs, "Service").items() if g != "gateway"}
    assert set(services) == {"ingest", "store"}
    deployments = workers(docs)
    for group, service in services.items():
        assert service["spec"]["ports"][0]["targetPort"] == "metrics"
        assert service["spec"]["selector"] == deployments[group]["spec"]["selector"]["matchLabels"]
    assert not of_kind(docs, "ServiceMonitor")
    monitors = of_kind(render({"metrics.serviceMonitor.enabled": True}), "ServiceMonitor")
    assert set(monitors) == {"ingest", "store"}
    for group, monitor in monitors.items():
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
        assert monitor["spec"]["selector"]["matchLabels"] == services[group]["spec"]["selector"]


@pytest.mark.parametrize(("prefix", "partitions"), [("memory", 4), ("prod", 12)])
def test_scaled_objects_scale_each_consumer_group_on_its_lag(prefix, partitions):
    docs = render({"topics.prefix": prefix, "topics.partitions": partitions, "kafka.bootstrap": "k-0:9092,k-1:9092"})
    deployments = workers(docs)
    scaled = of_kind(docs, "ScaledObject")
    assert set(scaled) == {"ingest", "store"}
    for group, so in scaled.items():
        assert so["apiVersion"] == "keda.sh/v1alpha1"
        assert so["spec"]["scaleTargetRef"]["name"] == deployments[group]["metadata"]["name"]
        assert "replicas" not in deployments[group]["spec"]  # KEDA owns it
        assert so["spec"]["maxReplicaCount"] == partitions
        assert so["spec"]["minReplicaCount"] >= 1  # the store group answers queries: never scaled to zero
        [trigger] = so["spec"]["triggers"]
        assert trigger["type"] == "kafka"
        meta = trigger["metadata"]
        assert meta["consumerGroup"] == group_id(prefix, stages(deployments[group]))
        assert meta["bootstrapServers"] == "k-0:9092,k-1:9092" == env(deployments[group])["MEMSTREAM_KAFKA_BOOTSTRAP"]
        assert "topic" not in meta  # the lag over every topic the group reads
        assert all(isinstance(v, str) for v in meta.values())  # KEDA metadata is a map of strings
        assert env(deployments[group])["MEMSTREAM_TOPIC_PREFIX"] == prefix
        assert env(deployments[group])["MEMSTREAM_TOPIC_PARTITIONS"] == str(partitions)
        assert {t for st in stages(deployments[group]) for t in TOPOLOGY[st].inputs}  # the group reads topics


def test_one_group_of_every_stage_is_named_like_group_id():
    docs = render({"ingest.stages": list(STAGES), "store.stages": ["query"]})
    scaled = of_kind(docs, "ScaledObject")
    assert scaled["ingest"]["spec"]["triggers"][0]["metadata"]["consumerGroup"] == group_id("memory", STAGES)
    assert scaled["store"]["spec"]["triggers"][0]["metadata"]["consumerGroup"] == group_id("memory", ["query"])


def test_max_replicas_override_and_keda_disabled_sets_replicas():
    scaled = of_kind(render({"store.maxReplicas": 2, "store.minReplicas": 2}), "ScaledObject")
    assert (scaled["store"]["spec"]["minReplicaCount"], scaled["store"]["spec"]["maxReplicaCount"]) == (2, 2)
    docs = render({"keda.enabled": False, "ingest.replicas": 3, "store.replicas": 2})
    assert not of_kind(docs, "ScaledObject")
    replicas = {g: d["spec"]["replicas"] for g, d in workers(docs).items()}
    assert replicas == {"ingest": 3, "store": 2}


def test_qdrant_url_reaches_the_store_and_is_required():
    deployments = workers(render())
    assert env(deployments["store"])["MEMSTREAM_QDRANT_URL"] == QDRANT
    done = run_helm("template", "mem", str(CHART))
    assert done.returncode != 0
    assert "qdrant.url is required" in done.stderr
    assert "embedded store" in done.stderr


def test_api_keys_come_from_secrets():
    variables = env(workers(render())["store"])
    assert "MEMSTREAM_QDRANT_API_KEY" not in variables and "MEMSTREAM_LLM_API_KEY" not in variables
    docs = render({"qdrant.apiKey": "q-secret", "llm.existingSecret": "llm-creds", "llm.existingSecretKey": "token"})
    variables = env(workers(docs)["store"])
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    assert variables["MEMSTREAM_QDRANT_API_KEY"] == {"secretKeyRef": {"name": "mem-memstream-qdrant", "key": "api-key"}}
    assert variables["MEMSTREAM_LLM_API_KEY"] == {"secretKeyRef": {"name": "llm-creds", "key": "token"}}
    assert set(secrets) == {"mem-memstream-qdrant", "mem-memstream-gateway"}  # an existing one is not created
    assert "q-secret" not in yaml.safe_dump([d for d in docs if d["kind"] != "Secret"])


def test_chart_defaults_match_compose():
    """Where the chart and infra/compose.yaml set the same variable, they set the same value (the
    addresses of Kafka and Qdrant and the LLM key aside: given per deployment)."""
    compose_env = COMPOSE["x-memstream"]["environment"]
    own = {"MEMSTREAM_KAFKA_BOOTSTRAP", "MEMSTREAM_QDRANT_URL", "MEMSTREAM_LLM_API_KEY", "MEMSTREAM_LLM_BASE_URL"}
    for group, deployment in workers(render()).items():
        variables = {k: v for k, v in env(deployment).items() if isinstance(v, str)}
        shared = (set(variables) & set(compose_env)) - own
        assert shared >= {"MEMSTREAM_TOPIC_PARTITIONS", "MEMSTREAM_QDRANT_REPLICATION_FACTOR", "MEMSTREAM_DATA_DIR"}
        for name in shared:
            expected = str(compose_env[name]).removeprefix("${MEMSTREAM_LLM_MODEL:-").removesuffix("}")
            assert variables[name] == expected, (group, name)
        replicas = COMPOSE["services"][group]["deploy"]["replicas"]
        assert yaml.safe_load(CHART.joinpath("values.yaml").read_text())[group]["replicas"] == replicas


def test_the_gateway_reads_its_keys_and_one_session_secret_from_a_secret(monkeypatch):
    digest = "ab" * 32
    docs = render({"gateway.apiKeys": {"acme": [digest]}, "tracing.otlpEndpoint": "http://jaeger:4318"})
    gateway = of_kind(docs, "Deployment")["gateway"]
    pod, variables, store = container(gateway), env(gateway), workers(docs)["store"]
    assert pod["command"] == ["memstream", "gateway"] and pod["image"] == container(store)["image"]
    assert set(variables) - {"OTEL_EXPORTER_OTLP_ENDPOINT"} <= SETTINGS
    for name in ("MEMSTREAM_KAFKA_BOOTSTRAP", "MEMSTREAM_TOPIC_PREFIX"):  # the workers' topics
        assert variables[name] == env(store)[name]
    ref = {"name": "mem-memstream-gateway"}
    assert variables["MEMSTREAM_GATEWAY_API_KEYS"] == {"secretKeyRef": {**ref, "key": "api-keys"}}
    assert variables["MEMSTREAM_GATEWAY_SESSION_SECRET"] == {"secretKeyRef": {**ref, "key": "session-secret"}}
    data = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}["mem-memstream-gateway"]["data"]
    assert len(base64.b64decode(data["session-secret"])) >= 32
    # What the pods get is what the gateway parses: MEMSTREAM_GATEWAY_API_KEYS as JSON, host 0.0.0.0.
    monkeypatch.setenv("MEMSTREAM_GATEWAY_API_KEYS", base64.b64decode(data["api-keys"]).decode())
    monkeypatch.setenv("MEMSTREAM_GATEWAY_SESSION_SECRET", base64.b64decode(data["session-secret"]).decode())
    settings = Settings(**{k.removeprefix("MEMSTREAM_").lower(): v for k, v in variables.items() if isinstance(v, str)})
    assert settings.gateway_api_keys == {"acme": [digest]} and settings.gateway_session_secret
    assert settings.gateway_host == "0.0.0.0" and settings.gateway_port == 8480
    assert pod["ports"] == [{"name": "http", "containerPort": 8480, "protocol": "TCP"}]
    assert pod["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    service = of_kind(docs, "Service")["gateway"]
    assert service["spec"]["selector"] == gateway["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"][0]["port"] == 8480 and "clusterIP" not in service["spec"]
    assert gateway["spec"]["replicas"] == 2  # stateless: not a consumer group, KEDA scales the workers only
    assert set(of_kind(docs, "ScaledObject")) == {"ingest", "store"}
    for deployment in of_kind(docs, "Deployment").values():  # every pod's traces
        assert env(deployment)["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4318"
    # New keys restart the pods (a variable from a Secret is read when the pod starts).
    other = of_kind(render({"gateway.apiKeys": {"acme": [digest, "cd" * 32]}}), "Deployment")["gateway"]
    checksum = "checksum/api-keys"
    annotations = gateway["spec"]["template"]["metadata"]["annotations"]
    assert other["spec"]["template"]["metadata"]["annotations"][checksum] != annotations[checksum]


def test_gateway_keys_from_an_existing_secret_a_given_session_secret_and_off():
    docs = render(
        {
            "gateway.existingSecret": "tenant-keys",
            "gateway.existingSecretKey": "keys.json",
            "gateway.sessionSecret": "s" * 40,
        }
    )
    variables = env(of_kind(docs, "Deployment")["gateway"])
    assert variables["MEMSTREAM_GATEWAY_API_KEYS"] == {"secretKeyRef": {"name": "tenant-keys", "key": "keys.json"}}
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in variables  # no endpoint, no traces
    data = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}["mem-memstream-gateway"]["data"]
    assert set(data) == {"session-secret"} and base64.b64decode(data["session-secret"]) == b"s" * 40
    assert "MEMSTREAM_GATEWAY_API_KEYS" not in env(of_kind(render(), "Deployment")["gateway"])  # none: 401s
    off = render({"gateway.enabled": False})
    assert not [d for d in off if d["metadata"]["labels"].get("app.kubernetes.io/component") == "gateway"]
    assert set(workers(off)) == {"ingest", "store"}
