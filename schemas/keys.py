"""The Kafka key must be the one the payload names. A conversation's order and its state (the sensory
window, the STM buffer, their changelogs) rest on it living on one partition, which the key picks:
a record keyed by another conversation would split it over two partitions and two workers."""

from __future__ import annotations

from typing import Protocol

from .base import SchemaError


class Keyed(Protocol):
    @property
    def key(self) -> str:
        """``tenant_id/conversation_id``, or a broadcast's ``tenant_id/*`` (``*/*``)."""
        ...


class KeyMismatch(SchemaError):
    """A record whose key is missing, not UTF-8, or not the one its payload names: a dead letter."""

    label = "wrong key"  # the dead-letter metric's reason: bounded, unlike the keys in the message


def key_problem(key: bytes | None, payload: Keyed) -> str | None:
    """Why ``key`` (as consumed) is not ``payload``'s key; None when it is."""
    expected = payload.key
    if not key:
        return f"no key (expected {expected!r})"
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return f"key is not UTF-8 (expected {expected!r})"
    if text != expected:
        return f"key {text!r} does not match the payload's {expected!r}"
    return None


def check_key(key: bytes | None, payload: Keyed) -> None:
    """Raises ``KeyMismatch`` with the reason when ``key`` is not ``payload``'s key."""
    problem = key_problem(key, payload)
    if problem:
        raise KeyMismatch(problem)
