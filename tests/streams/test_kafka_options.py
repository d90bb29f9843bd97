"""Every Kafka client gets the same security options from Settings (no broker needed)."""

from __future__ import annotations

import ssl

import faust
import pytest
from pydantic import ValidationError

from memstream.config import Settings
from memstream.streams.kafka_options import client_options, faust_credentials


def test_plaintext_by_default():
    s = Settings(kafka_bootstrap="b1:9092,b2:9092")
    assert client_options(s) == {"bootstrap_servers": "b1:9092,b2:9092", "security_protocol": "PLAINTEXT"}
    assert faust_credentials(s) is None


def test_sasl_ssl_scram_gives_every_client_the_same_credentials_and_tls():
    s = Settings(
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_username="memstream",
        kafka_sasl_password="s3cret",
        kafka_ssl_check_hostname=False,
    )
    options = client_options(s)
    assert options["security_protocol"] == "SASL_SSL" and options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (options["sasl_plain_username"], options["sasl_plain_password"]) == ("memstream", "s3cret")
    assert isinstance(options["ssl_context"], ssl.SSLContext) and not options["ssl_context"].check_hostname
    credentials = faust_credentials(s)
    assert isinstance(credentials, faust.SASLCredentials)
    assert credentials.protocol.value == "SASL_SSL" and credentials.mechanism.value == "SCRAM-SHA-512"
    assert "s3cret" not in repr(s) and "s3cret" not in repr(credentials)  # the password is no log line


def test_tls_only_and_incomplete_settings_are_refused():
    assert isinstance(faust_credentials(Settings(kafka_security_protocol="SSL")), faust.SSLCredentials)
    with pytest.raises(ValidationError, match="SASL_USERNAME"):
        Settings(kafka_security_protocol="SASL_SSL", kafka_sasl_username="u")
    with pytest.raises(ValidationError, match="go together"):
        Settings(kafka_ssl_certfile="/tmp/c.pem")
