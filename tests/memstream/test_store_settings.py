"""The Qdrant server settings reach the client: https and the API key, which is never sent in the
clear (no server is needed: the client connects on first use)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memstream.adapters import open_store
from memstream.config import Settings


def test_an_https_url_and_api_key_go_to_the_client():
    store = open_store(Settings(qdrant_url="https://127.0.0.1:9", qdrant_api_key="k3y"))
    remote = store._client._clients[0]._client  # qdrant-client's REST client (nothing listens on port 9)
    assert remote._https and remote.rest_uri == "https://127.0.0.1:9" and remote._api_key == "k3y"
    assert not store.embedded and "k3y" not in repr(Settings(qdrant_api_key="k3y", qdrant_url="https://q"))


def test_every_node_of_a_cluster_gets_the_key_and_each_must_be_safe_to_send_it_to():
    store = open_store(Settings(qdrant_url="https://a:6333, https://b:6333", qdrant_api_key="k3y"))
    assert [c._client.rest_uri for c in store._client._clients] == ["https://a:6333", "https://b:6333"]
    assert all(c._client._api_key == "k3y" for c in store._client._clients)
    with pytest.raises(ValidationError, match="only over https"):
        Settings(qdrant_url="https://a:6333,http://b:6333", qdrant_api_key="k3y")


def test_a_write_consistency_above_the_replicas_is_refused():
    with pytest.raises(ValidationError, match="no write could succeed"):
        Settings(qdrant_replication_factor=2, qdrant_write_consistency=3)


def test_an_api_key_is_refused_over_plain_http_except_to_this_machine():
    with pytest.raises(ValidationError, match="only over https"):
        Settings(qdrant_url="http://qdrant.example:6333", qdrant_api_key="k3y")
    Settings(qdrant_url="http://127.0.0.1:6333", qdrant_api_key="k3y")  # loopback: allowed
