"""The steps of a processor's work, timed into its latency figures and reported to whoever watches
(a span each when tracing is on: ``memstream.tracing.Tracing.steps``). Processors know only the
``Steps`` port: a name in, a dict of attributes to fill out."""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator

from memstream.ports import Steps


@contextlib.contextmanager
def no_steps(_name: str) -> Iterator[dict[str, Any]]:
    yield {}


@contextlib.contextmanager
def timed(latency: dict[str, float], name: str, steps: Steps = no_steps) -> Iterator[dict[str, Any]]:
    """``latency[name + "_ms"]`` gets the block's milliseconds; the block fills in what the step did."""
    started = time.perf_counter()
    try:
        with steps(name) as attributes:
            yield attributes
    finally:
        latency[f"{name}_ms"] = round((time.perf_counter() - started) * 1000.0, 3)
