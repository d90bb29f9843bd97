"""The Qdrant server settings reach the client: https and the API key, which is never sent in the
clear (no server is needed: the client connects on first use)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memstream.adapters import open_store
from memstream.config import Settings


# qdrant-client asks the server for its version when it is created: nothing listens on port 9 here.
@pytest.mark.filterwarnings("ignore:Failed to obtain server version")
def test_an_https_url_and_api_key_go_to_the_client():
    store = open_store(Settings(qdrant_url="https://127.0.0.1:9", qdrant_api_key="k3y"))
    remote = store._client._client  # qdrant-client's REST client
    assert remote._https and remote.rest_uri == "https://127.0.0.1:9" and remote._api_key == "k3y"
    assert not store.embedded and "k3y" not in repr(Settings(qdrant_api_key="k3y", qdrant_url="https://q"))


def test_an_api_key_is_refused_over_plain_http_except_to_this_machine():
    with pytest.raises(ValidationError, match="only over https"):
        Settings(qdrant_url="http://qdrant.example:6333", qdrant_api_key="k3y")
    Settings(qdrant_url="http://127.0.0.1:6333", qdrant_api_key="k3y")  # loopback: allowed
