"""The broker: how every client reaches it, the topics memstream creates, what a message may carry
and how often a failing one is retried."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, Field, SecretStr, model_validator

from memstream.settings.paths import AbsolutePath


class KafkaSettings(BaseModel):
    """Connection and security of every producer, consumer, admin client and worker; the topics."""

    kafka_bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers, host:port[,host:port]")
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="How every producer, consumer, admin client and faust worker talks to the broker"
    )
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        "SCRAM-SHA-512", description="SASL mechanism (with a SASL_* protocol)"
    )
    kafka_sasl_username: str | None = Field(None, description="SASL user (with a SASL_* protocol)")
    kafka_sasl_password: SecretStr | None = Field(None, description="SASL password (with a SASL_* protocol)")
    kafka_ssl_cafile: AbsolutePath | None = Field(
        None, description="CA bundle that signed the broker's certificate (TLS)"
    )
    kafka_ssl_certfile: AbsolutePath | None = Field(
        None, description="Client certificate, for brokers that require one"
    )
    kafka_ssl_keyfile: AbsolutePath | None = Field(None, description="Client key, with kafka_ssl_certfile")
    kafka_ssl_check_hostname: bool = Field(True, description="Check the broker's certificate names its host")
    broker_wait_s: float = Field(
        300.0,
        ge=0,
        description="How long a starting worker (and topic creation) waits for an unreachable broker before failing",
    )
    topic_partitions: int = Field(4, ge=1, description="Partitions of every memstream topic")
    topic_replication_factor: int = Field(
        1,
        ge=1,
        description="Replicas of every topic memstream creates (its own, the changelogs, faust's internal ones); "
        "3 on a cluster of 3 or more brokers",
    )
    topic_min_insync_replicas: int = Field(
        1,
        ge=1,
        description="min.insync.replicas of those topics: an acks=all write (every memstream producer) succeeds "
        "only once this many replicas have it; 2 with a replication factor of 3 survives the loss of a broker",
    )
    topic_retention_s: float = Field(
        7 * 86400.0,
        gt=0,
        description="How long topics keep records (raw text in turns, segments, flushes, cards, replies: "
        "a forget cannot delete them one by one); also the most a compacted changelog keeps a replaced record",
    )
    topic_prefix: str = Field("memory", description="Prefix of every topic name")
    max_message_bytes: int = Field(16 * 1024 * 1024, description="Largest Kafka message produced (DLQ keeps originals)")
    max_turn_chars: int = Field(
        32_000, ge=1000, description="Longer turn texts are split into chunks of at most this many characters"
    )
    max_turn_chars_hard: int = Field(
        262_144, ge=1000, description="Longer turn texts are rejected to the dead-letter topic, not split"
    )
    processing_retries: int = Field(3, ge=0, description="Retries of a failing message before it is dead-lettered")
    tenant_write_secrets: dict[str, dict[str, SecretStr]] = Field(
        default_factory=dict,
        description="Tenant -> {key id: secret} (JSON). Set: every record on an input topic (turns, control, "
        "queries) must carry an HMAC signature made with a secret of the tenant its key names, or it is "
        "dead-lettered (docs/security.md); the first listed signs, every listed verifies (rotation). "
        "Workers and the gateway hold every tenant's; a tenant's own producer only its own. Tenant '*': "
        "an operator's, for what concerns every tenant",
    )

    @model_validator(mode="after")
    def _replication_is_possible(self) -> Self:
        if self.topic_min_insync_replicas > self.topic_replication_factor:
            raise ValueError(
                f"MEMSTREAM_TOPIC_MIN_INSYNC_REPLICAS={self.topic_min_insync_replicas} is more than "
                f"MEMSTREAM_TOPIC_REPLICATION_FACTOR={self.topic_replication_factor}: no write could succeed"
            )
        return self

    @model_validator(mode="after")
    def _write_secrets_are_usable(self) -> Self:
        for tenant, keys in self.tenant_write_secrets.items():
            if not keys:
                raise ValueError(f"MEMSTREAM_TENANT_WRITE_SECRETS: tenant {tenant!r} has no secret")
            for key_id, secret in keys.items():
                if not key_id or ":" in key_id or not key_id.isascii():
                    raise ValueError(
                        f"MEMSTREAM_TENANT_WRITE_SECRETS: key id {key_id!r} must be non-empty ASCII, no ':'"
                    )
                if len(secret.get_secret_value()) < 16:
                    raise ValueError(
                        f"MEMSTREAM_TENANT_WRITE_SECRETS: secret {key_id!r} of tenant {tenant!r} is shorter than 16"
                    )
        return self

    @property
    def write_secrets(self) -> dict[str, list[tuple[str, bytes]]]:
        """Tenant -> [(key id, secret)], the signing one first (schemas.signature.TenantSecrets)."""
        return {
            tenant: [(key_id, secret.get_secret_value().encode()) for key_id, secret in keys.items()]
            for tenant, keys in self.tenant_write_secrets.items()
        }

    @model_validator(mode="after")
    def _kafka_security_is_complete(self) -> Self:
        if self.kafka_security_protocol.startswith("SASL") and not (
            self.kafka_sasl_username and self.kafka_sasl_password
        ):
            raise ValueError(
                f"MEMSTREAM_KAFKA_SECURITY_PROTOCOL={self.kafka_security_protocol} needs "
                "MEMSTREAM_KAFKA_SASL_USERNAME and MEMSTREAM_KAFKA_SASL_PASSWORD"
            )
        if bool(self.kafka_ssl_certfile) != bool(self.kafka_ssl_keyfile):
            raise ValueError("MEMSTREAM_KAFKA_SSL_CERTFILE and MEMSTREAM_KAFKA_SSL_KEYFILE go together")
        return self

    @property
    def topic_segment_s(self) -> float:
        """Kafka deletes a log segment once its newest record is past retention: segments roll this
        often, so a record outlives the retention by at most this much."""
        return max(60.0, self.topic_retention_s / 7)

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}.{name}"
