"""How every Kafka client of memstream connects: bootstrap servers plus the security settings
(TLS with a CA file, SASL PLAIN or SCRAM), for aiokafka clients and for faust, from one place."""

from __future__ import annotations

import ssl
from typing import Any

import faust
from aiokafka.helpers import create_ssl_context

from memstream.config import Settings


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The TLS context of a SSL or SASL_SSL connection (None for plaintext)."""
    if not settings.kafka_security_protocol.endswith("SSL"):
        return None
    context = create_ssl_context(
        cafile=str(settings.kafka_ssl_cafile) if settings.kafka_ssl_cafile else None,
        certfile=str(settings.kafka_ssl_certfile) if settings.kafka_ssl_certfile else None,
        keyfile=str(settings.kafka_ssl_keyfile) if settings.kafka_ssl_keyfile else None,
    )
    context.check_hostname = settings.kafka_ssl_check_hostname
    return context


def client_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for every aiokafka producer, consumer, admin and plain client."""
    options: dict[str, Any] = {
        "bootstrap_servers": settings.kafka_bootstrap,
        "security_protocol": settings.kafka_security_protocol,
    }
    context = ssl_context(settings)
    if context is not None:
        options["ssl_context"] = context
    if settings.kafka_security_protocol.startswith("SASL"):
        assert settings.kafka_sasl_password is not None  # Settings checked it
        options |= {
            "sasl_mechanism": settings.kafka_sasl_mechanism,
            "sasl_plain_username": settings.kafka_sasl_username,
            "sasl_plain_password": settings.kafka_sasl_password.get_secret_value(),
        }
    return options


def faust_credentials(settings: Settings) -> Any:
    """``broker_credentials`` for faust (None for plaintext)."""
    context = ssl_context(settings)
    if settings.kafka_security_protocol.startswith("SASL"):
        assert settings.kafka_sasl_password is not None
        return faust.SASLCredentials(
            username=settings.kafka_sasl_username,
            password=settings.kafka_sasl_password.get_secret_value(),
            ssl_context=context,
            mechanism=settings.kafka_sasl_mechanism,
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None
