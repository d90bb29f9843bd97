"""A worker's start-up, phase by phase, timed from its process's own start: each phase's end is logged
as ``startup phase NAME at t=S.SSSs (epoch E)`` and set on ``memstream_worker_startup_seconds``, so
that `memstream bench startup` (and an operator) reads where the seconds went instead of guessing."""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

PHASE_LINE = "startup phase %s at t=%.3fs (epoch %.3f)"
PHASE_PATTERN = re.compile(r"startup phase (\w+) at t=(-?[\d.]+)s \(epoch ([\d.]+)\)")


def process_start_epoch(stat: str | None = None, now: float | None = None, boot_now: float | None = None) -> float:
    """When this process started (``time.time()`` scale), from /proc/self/stat: the interpreter's own
    start and imports count. Elsewhere than Linux: now (the phases then start at the first mark)."""
    try:
        stat = stat if stat is not None else Path("/proc/self/stat").read_text()
        now = time.time() if now is None else now
        boot_now = time.clock_gettime(time.CLOCK_BOOTTIME) if boot_now is None else boot_now
    except (OSError, AttributeError):
        return time.time()
    # starttime (field 22) counts clock ticks since boot; the name (field 2) may hold spaces and ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    started_after_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    return now - (boot_now - started_after_boot)


class StartupClock:
    """Marks the end of each start-up phase, seconds since the process started."""

    def __init__(self, started: float | None = None, on_mark: Callable[[str, float], None] | None = None):
        self.started = process_start_epoch() if started is None else started
        self.on_mark = on_mark  # e.g. a gauge's setter, once the metrics exist
        self.marks: dict[str, float] = {}

    def mark_start(self, phase: str = "process") -> None:
        """The process's start as a mark of its own (t=0), which later marks count from."""
        self.marks[phase] = 0.0
        log.info(PHASE_LINE, phase, 0.0, self.started)

    def mark(self, phase: str) -> float:
        now = time.time()
        since = now - self.started
        self.marks[phase] = since
        log.info(PHASE_LINE, phase, since, now)
        if self.on_mark is not None:
            self.on_mark(phase, since)
        return since

    def publish(self, on_mark: Callable[[str, float], None]) -> None:
        """From now on each mark goes to ``on_mark`` too, and so do the marks made so far."""
        self.on_mark = on_mark
        for phase, since in self.marks.items():
            on_mark(phase, since)


def phase_epochs(log_text: str) -> dict[str, float]:
    """The start-up marks of a log (phase -> epoch seconds), the first of each phase: a restarted
    worker's later start-up is not this one's."""
    marks: dict[str, float] = {}
    for match in PHASE_PATTERN.finditer(log_text):
        marks.setdefault(match.group(1), float(match.group(3)))
    return marks
