"""A write stage's per-conversation state as its changelog-backed table holds it: a dataclass written
as a JSON object and read back."""

from __future__ import annotations

import copy
from dataclasses import Field, fields
from typing import Any, ClassVar, Self


class TableEntry:
    """Mixin for a dataclass of JSON values: ``to_dict`` is the table entry, ``from_dict`` reads one."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Self:
        if not data:
            return cls()
        known = {f.name for f in fields(cls)}  # an entry saved by an older worker may hold a field since dropped
        # A copy: the live table entry must not change before the stage writes the new one (a
        # handler tried again after a failed produce would otherwise see its turn as seen).
        return cls(**{k: copy.deepcopy(v) for k, v in data.items() if k in known})
