"""One module per stage. Each reads its topics and state table from ``memstream.topology`` (declared
once there) and has ``register(ctx)``, which wires its processor to the runtime. ``REGISTRY`` is the
only place that maps stage names to modules."""

from __future__ import annotations

from types import ModuleType

from memstream.topology import STAGES

from . import compress, consolidate, extract, index, query, segment, stm

REGISTRY: dict[str, ModuleType] = {
    "compress": compress,
    "segment": segment,
    "stm": stm,
    "extract": extract,
    "index": index,
    "consolidate": consolidate,
    "query": query,
}
assert tuple(REGISTRY) == STAGES, "every stage of memstream.topology has its module, in order"
