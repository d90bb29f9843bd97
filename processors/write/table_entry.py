"""A write stage's per-conversation state as its changelog-backed table holds it: a dataclass written
as a JSON object and read back."""

from __future__ import annotations

import copy
from dataclasses import Field, fields
from typing import Any, Callable, ClassVar, Self


class TableEntry:
    """Mixin for a dataclass of JSON values: ``to_dict`` is the table entry, ``from_dict`` reads one."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Self:
        """The entry as an object of its own: the live table entry must not change before the stage
        writes the new one (a handler tried again after a failed produce would otherwise see its turn
        as seen)."""
        return cls._read(data, copy_json)

    @classmethod
    def peek(cls, data: dict[str, Any] | None) -> Self:
        """The entry read in place, for checks that change nothing: timers look at every entry of a
        table each tick, on the event loop, and a copy of each was work for nothing."""
        return cls._read(data, lambda value: value)

    @classmethod
    def _read(cls, data: dict[str, Any] | None, copy_value: Callable[[Any], Any]) -> Self:
        if not data:
            return cls()
        known = {f.name for f in fields(cls)}  # an entry saved by an older worker may hold a field since dropped
        return cls(**{k: copy_value(v) for k, v in data.items() if k in known})


IMMUTABLE = (str, int, float, bool, type(None))


def copy_json(value: Any) -> Any:
    """A deep copy of a JSON-like value; several times the speed of ``copy.deepcopy``, which keeps a
    memo for shared and cyclic references that table entries never hold."""
    if isinstance(value, IMMUTABLE):
        return value
    if isinstance(value, dict):
        return {k: copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_json(v) for v in value]
    return copy.deepcopy(value)
