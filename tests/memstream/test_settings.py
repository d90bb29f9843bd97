"""Settings is made of groups (memstream/settings/): each group's fields read their MEMSTREAM_*
variable and each group's checks run, as when they were one class."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from memstream.config import Settings

GROUPS = [
    base
    for base in Settings.__mro__[1:]
    if issubclass(base, BaseModel) and base.__module__.startswith("memstream.settings.")
]


def test_every_field_belongs_to_one_group_and_none_shadows_another():
    owners: dict[str, list[str]] = {}
    for group in GROUPS:
        for name in group.model_fields:
            owners.setdefault(name, []).append(group.__name__)
    assert {name: groups for name, groups in owners.items() if len(groups) > 1} == {}
    assert set(owners) == set(Settings.model_fields)
    assert list(Settings.model_fields)[:2] == ["kafka_bootstrap", "kafka_security_protocol"]  # the order of old


def test_each_groups_fields_read_their_prefixed_variables(monkeypatch):
    variables = {
        "MEMSTREAM_KAFKA_BOOTSTRAP": "broker:9093",
        "MEMSTREAM_STALL_S": "7",
        "MEMSTREAM_QDRANT_SHARDS": "3",
        "MEMSTREAM_LLM_IN_FLIGHT": "5",
        "MEMSTREAM_EMBEDDING_BATCH": "32",
        "MEMSTREAM_STM_TOKENS": "512",
        "MEMSTREAM_GRAPH_HOPS": "2",
        "MEMSTREAM_CONSOLIDATE_TOP_N": "4",
        "MEMSTREAM_GATEWAY_API_KEYS": '{"acme": ["ab"]}',
    }
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    s = Settings()
    assert (s.kafka_bootstrap, s.stall_s, s.qdrant_shards, s.llm_in_flight) == ("broker:9093", 7.0, 3, 5)
    assert (s.embedding_batch, s.stm_tokens, s.graph_hops, s.consolidate_top_n) == (32, 512, 2, 4)
    assert s.gateway_api_keys == {"acme": ["ab"]} and s.in_flight("query") == 5
    monkeypatch.setenv("MEMSTREAM_GRAPH_HOPS", "4")
    with pytest.raises(ValidationError, match="graph_hops"):
        Settings()


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"topic_min_insync_replicas": 2}, "MEMSTREAM_TOPIC_MIN_INSYNC_REPLICAS=2 is more than"),
        ({"kafka_security_protocol": "SASL_SSL"}, "needs MEMSTREAM_KAFKA_SASL_USERNAME"),
        ({"kafka_ssl_certfile": "c.pem"}, "MEMSTREAM_KAFKA_SSL_CERTFILE and MEMSTREAM_KAFKA_SSL_KEYFILE go together"),
        ({"qdrant_write_consistency": 3}, "MEMSTREAM_QDRANT_WRITE_CONSISTENCY=3 is more than"),
        ({"qdrant_api_key": "k", "qdrant_url": "https://a:6333,http://b:6333"}, "sent only over https"),
        # one error at a time, the Kafka group's first (as when one class checked them in this order)
        ({"topic_min_insync_replicas": 2, "kafka_security_protocol": "SASL_SSL"}, "MIN_INSYNC_REPLICAS=2"),
        ({"kafka_security_protocol": "SASL_SSL", "qdrant_write_consistency": 3}, "SASL_USERNAME"),
    ],
)
def test_each_groups_checks_still_apply(given, error):
    with pytest.raises(ValidationError, match=error) as raised:
        Settings(**given)
    assert raised.value.error_count() == 1


def test_tenant_write_secrets_come_as_json_the_signing_one_first_and_stay_out_of_the_repr(monkeypatch):
    monkeypatch.setenv(
        "MEMSTREAM_TENANT_WRITE_SECRETS", '{"acme": {"2026-12": "new-secret-0123456", "2026-06": "old-secret-0123456"}}'
    )
    s = Settings()
    assert s.write_secrets == {"acme": [("2026-12", b"new-secret-0123456"), ("2026-06", b"old-secret-0123456")]}
    assert "new-secret" not in repr(s) and "new-secret" not in str(s.model_dump())


@pytest.mark.parametrize(
    ("secrets", "reason"),
    [
        ({"acme": {}}, "has no secret"),
        ({"acme": {"a:b": "x" * 16}}, "no ':'"),
        ({"acme": {"": "x" * 16}}, "non-empty"),
        ({"acme": {"clé": "x" * 16}}, "ASCII"),  # the header is ASCII: such a key id could never verify
        ({"acme": {"k1": "short"}}, "shorter than 16"),
    ],
)
def test_unusable_write_secrets_are_refused_with_the_reason(secrets, reason):
    with pytest.raises(ValidationError, match=reason):
        Settings(tenant_write_secrets=secrets)
