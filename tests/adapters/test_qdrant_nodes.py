"""Failing over between a cluster's nodes (pure logic: clients stand in for qdrant-client)."""

from __future__ import annotations

import httpx
import pytest
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from memstream.adapters.qdrant_nodes import QdrantNodes, split_urls
from memstream.ports import StoreUnavailable


class Node:
    def __init__(self, url: str, failures: dict[str, BaseException], calls: list[str], **_: object):
        self.url, self._failures, self._calls = url, failures, calls

    def count(self, name: str) -> str:
        self._calls.append(self.url)
        if self.url in self._failures:
            raise self._failures[self.url]
        return f"{name}@{self.url}"


def nodes(urls: list[str], failures: dict[str, BaseException]) -> tuple[QdrantNodes, list[str]]:
    calls: list[str] = []
    return QdrantNodes(urls, connect=lambda url, **kw: Node(url, failures, calls, **kw)), calls


def refused() -> ResponseHandlingException:
    return ResponseHandlingException(httpx.ConnectError("Connection refused"))


def server_error(status: int) -> UnexpectedResponse:
    return UnexpectedResponse(status, "err", b"{}", httpx.Headers())


def test_urls_are_split_and_trimmed():
    assert split_urls(" http://a:6333/, http://b:6333 ,") == ["http://a:6333", "http://b:6333"]
    with pytest.raises(ValueError):
        split_urls(" , ")


def test_a_call_moves_on_to_the_next_node_and_stays_there():
    store, calls = nodes(["a", "b", "c"], {"a": refused()})
    assert store.count("x") == "x@b"
    assert store.count("y") == "y@b"  # the node that answered is asked first from now on
    assert calls == ["a", "b", "b"] and store.current_url == "b"


def test_a_server_error_fails_over_but_a_refused_request_does_not():
    store, calls = nodes(["a", "b"], {"a": server_error(503)})
    assert store.count("x") == "x@b"
    store, calls = nodes(["a", "b"], {"a": server_error(400)})
    with pytest.raises(UnexpectedResponse):
        store.count("x")  # a bad request is not an outage: no other node is asked
    assert calls == ["a"]


def test_no_node_answering_is_an_outage_naming_every_node():
    store, calls = nodes(["a", "b"], {"a": refused(), "b": refused()})
    with pytest.raises(StoreUnavailable, match="no Qdrant node answers \\(a, b\\)"):
        store.count("x")
    assert calls == ["a", "b"]  # each node once per call
