"""infra/compose.yaml stays consistent with what the tests run natively: the same settings, stage
groups, ports, Prometheus job and Kafka version."""

import re
from pathlib import Path

import yaml

from memstream.config import STAGES, STORE_STAGES, Settings

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
        unknown = set(service["environment"]) - fields
        assert not unknown, f"{name}: {unknown} are not memstream settings"
        Settings(
            **{
                k.removeprefix("MEMSTREAM_").lower(): v
                for k, v in service["environment"].items()
                if not str(v).startswith("${")
            }
        )


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
