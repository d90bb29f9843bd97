"""Reading a table entry: a copy for handlers, in place for checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memstream.processors.write.table_entry import TableEntry, copy_json


@dataclass
class Window(TableEntry):
    pending: list[dict[str, Any]] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)
    last_activity: float = 0.0


def entry() -> dict[str, Any]:
    return {"pending": [{"turn": {"id": "t1", "meta": {"seq": 1}}, "tags": ["a"]}], "seen": ["t0"], "gone": 1}


def test_a_copied_json_value_equals_the_original_and_shares_nothing_mutable() -> None:
    original = entry()
    copied = copy_json(original)
    assert copied == original
    copied["pending"][0]["turn"]["meta"]["seq"] = 2
    copied["pending"][0]["tags"].append("b")
    copied["seen"].append("t1")
    assert original == entry()


def test_from_dict_gives_the_handler_an_entry_of_its_own() -> None:
    data = entry()
    window = Window.from_dict(data)
    window.pending[0]["turn"]["id"] = "changed"
    window.seen.append("t1")
    assert data == entry()  # a handler tried again reads the entry as it was


def test_peek_reads_in_place_and_both_drop_fields_no_longer_declared() -> None:
    data = entry()
    peeked = Window.peek(data)
    assert peeked.pending is data["pending"]
    assert Window.from_dict(data).pending == peeked.pending
    assert not hasattr(peeked, "gone")
    assert Window.peek(None) == Window() == Window.from_dict({})
