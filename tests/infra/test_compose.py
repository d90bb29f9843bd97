"""infra/compose.yaml stays consistent with what the tests run natively: the same settings, stage
groups, ports, Prometheus job and Kafka version."""

import re
from pathlib import Path

import yaml

from memstream.config import Settings
from memstream.topology import STAGES, STORE_STAGES

INFRA = Path(__file__).resolve().parents[2] / "infra"
COMPOSE = yaml.safe_load((INFRA / "compose.yaml").read_text())
SERVICES = COMPOSE["services"]
WORKERS = {name: s for name, s in SERVICES.items() if s.get("command") == ["memstream", "worker"]}


def test_worker_groups_cover_every_stage_once():
    stages = [st for s in WORKERS.values() for st in s["environment"]["MEMSTREAM_STAGES"].split(",")]
    assert sorted(stages) == sorted(STAGES)


def test_every_worker_variable_is_a_setting():
    fields = {f"MEMSTREAM_{name.upper()}" for name in Settings.model_fields}
    for name, service in WORKERS.items():
        # OTEL_*: OpenTelemetry's own variables, read by its SDK (memstream.tracing).
        unknown = {k for k in service["environment"] if not k.startswith("OTEL_")} - fields
        assert not unknown, f"{name}: {unknown} are not memstream settings"
        _settings_of(service)


def test_store_stages_scale_only_with_a_qdrant_server():
    for name, service in WORKERS.items():
        env = service["environment"]
        if set(env["MEMSTREAM_STAGES"].split(",")) & STORE_STAGES and service.get("deploy", {}).get("replicas", 1) > 1:
            assert env.get("MEMSTREAM_QDRANT_URL"), f"{name}: an embedded store is single-process"


def test_prometheus_scrapes_every_worker_group_on_the_metrics_port():
    prometheus = yaml.safe_load((INFRA / "prometheus" / "prometheus.yml").read_text())
    local = yaml.safe_load((INFRA / "prometheus" / "prometheus-local.yml").read_text())
    [job] = prometheus["scrape_configs"]
    [local_job] = local["scrape_configs"]
    assert job["job_name"] == local_job["job_name"] == "memstream"
    assert prometheus["global"] == local["global"]
    [dns] = job["dns_sd_configs"]
    assert set(dns["names"]) == set(WORKERS)
    ports = {int(s["environment"]["MEMSTREAM_METRICS_PORT"]) for s in WORKERS.values()}
    assert ports == {dns["port"], Settings.model_fields["metrics_port"].default}
    assert all(s["environment"]["MEMSTREAM_METRICS_HOST"] == "0.0.0.0" for s in WORKERS.values())


def test_kafka_matches_the_local_broker():
    pom = (INFRA / "kafka" / "pom.xml").read_text()
    version = re.search(r"<kafka.version>(.+)</kafka.version>", pom).group(1)
    assert SERVICES["kafka"]["image"] == f"apache/kafka:{version}"
    assert all(s["environment"]["MEMSTREAM_KAFKA_BOOTSTRAP"] == "kafka:9092" for s in WORKERS.values())
    assert "9092:9092" in SERVICES["kafka"]["ports"]


def test_workers_replicate_their_topics_as_far_as_the_brokers_can():
    brokers = [s for s in SERVICES.values() if str(s.get("image", "")).startswith("apache/kafka:")]
    for name, service in WORKERS.items():
        env = service["environment"]
        replicas = int(env["MEMSTREAM_TOPIC_REPLICATION_FACTOR"])
        assert int(env["MEMSTREAM_TOPIC_MIN_INSYNC_REPLICAS"]) <= replicas <= len(brokers), name


def test_grafana_provisions_the_dashboards_folder():
    volumes = SERVICES["grafana"]["volumes"]
    assert "../dashboards:/var/lib/grafana/dashboards/memstream:ro" in volumes
    provider = yaml.safe_load((INFRA / "grafana" / "provisioning" / "dashboards" / "memstream.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards/memstream"
    datasource = yaml.safe_load((INFRA / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"


def test_qdrant_is_a_cluster_of_the_tested_version_and_every_worker_knows_every_node():
    from tests.qdrant_servers import TESTED_VERSION

    nodes = sorted(name for name in SERVICES if name.startswith("qdrant-"))
    assert len(nodes) == 3
    assert {SERVICES[n]["image"] for n in nodes} == {f"qdrant/qdrant:v{TESTED_VERSION}"}
    assert all(SERVICES[n]["environment"]["QDRANT__CLUSTER__ENABLED"] == "true" for n in nodes)
    for name, service in WORKERS.items():
        urls = service["environment"]["MEMSTREAM_QDRANT_URL"].split(",")
        assert urls == [f"http://{n}:6333" for n in nodes], name
        settings = Settings(qdrant_url=service["environment"]["MEMSTREAM_QDRANT_URL"])
        assert settings.qdrant_replication_factor == int(service["environment"]["MEMSTREAM_QDRANT_REPLICATION_FACTOR"])


def _settings_of(service: dict) -> Settings:
    """The service's memstream variables as settings (those taken from the shell left out)."""
    env = service["environment"]
    return Settings(
        **{
            k.removeprefix("MEMSTREAM_").lower(): v
            for k, v in env.items()
            if k.startswith("MEMSTREAM_") and v is not None and not str(v).startswith("${")
        }
    )


def test_traces_of_every_memstream_service_go_to_the_jaeger_service():
    jaeger = SERVICES["jaeger"]
    gomod = (INFRA / "jaeger" / "go.mod").read_text()
    v1_minor = int(re.search(r"github.com/jaegertracing/jaeger v1\.(\d+)\.\d+", gomod).group(1))
    image, tag = jaeger["image"].split(":")
    # Jaeger tags each release twice, v1.N and v2.(N-63) (v1.74.0 / v2.11.0): the native build's source.
    assert image == "jaegertracing/jaeger" and tag == f"2.{v1_minor - 63}.0"
    for name, service in {**WORKERS, "gateway": SERVICES["gateway"]}.items():
        endpoint = service["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"]
        assert endpoint == "http://jaeger:4318", name  # OTLP over HTTP, what memstream.tracing exports
    assert any(p.endswith(":16686") for p in jaeger["ports"])


def test_the_gateway_runs_from_the_worker_image_reachable_on_its_port():
    gateway = SERVICES["gateway"]
    worker = next(iter(WORKERS.values()))
    assert gateway["command"] == ["memstream", "gateway"]
    assert gateway["build"] == worker["build"] and gateway["image"] == worker["image"]
    s = _settings_of(gateway)
    assert s.gateway_host == "0.0.0.0" and s.kafka_bootstrap == worker["environment"]["MEMSTREAM_KAFKA_BOOTSTRAP"]
    unknown = {k for k in gateway["environment"] if not k.startswith("OTEL_")} - {
        f"MEMSTREAM_{n.upper()}" for n in Settings.model_fields
    }
    assert not unknown
    # Published on the host's loopback only: TLS goes in front of it to serve it further.
    assert gateway["ports"] == [f"127.0.0.1:{s.gateway_port}:{s.gateway_port}"]
    # Keys and the session secret come from the shell, never a value written here.
    assert gateway["environment"]["MEMSTREAM_GATEWAY_API_KEYS"] is None
    assert gateway["environment"]["MEMSTREAM_GATEWAY_SESSION_SECRET"] is None
