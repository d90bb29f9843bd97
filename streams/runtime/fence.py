"""Keeping a worker that was frozen from writing as a zombie.

A worker frozen longer than its session timeout (SIGSTOP, a paused VM, heavy swapping) is expelled
from its consumer group and its partitions go to another worker, which recovers their tables from
the changelogs and carries on. When the frozen worker wakes up it does not know yet: it finishes the
message it was handling and may take a few more, with the table state it had. Its changelog
records then land after the new owner's, and the last record of a key wins at the next recovery,
so the turns the new owner had added to a window were lost (8 of 2,910 in a 20-minute chaos run).

A thread that ticks every quarter second tells a frozen process apart from a busy event loop: a
freeze stops every thread, a long computation on the loop does not stop this one. After a gap of
half the session timeout, the worker counts as suspect: stages write neither state nor output
(:class:`Fenced`), and no new message is handled, until a rebalance has assigned partitions again
or three session timeouts have passed (a freeze too short to be expelled). A handler that was
fenced does not count as finished, so its message comes again, to whoever owns it then.

The fence alone is not enough for the tables. While the process was frozen the group may give its
partitions to another worker and, once it woke, back to it; a chaos run then saw the woken worker
write a window as it was before the freeze, over the other owner's newer one, with the input offsets
already past the turns in between (18 lost). So a worker (``on_freeze``) exits for a restart as soon
as it notices a freeze: a fresh process recovers every table from its changelogs before it handles
anything, and what it had not committed comes again.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)


class Fenced(RuntimeError):
    """This worker may have been expelled from its group while frozen: it must not write."""


class FreezeFence:
    def __init__(
        self,
        session_timeout_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        tick_s: float = 0.25,
        on_freeze: Callable[[float], None] | None = None,
    ):
        self.on_freeze = on_freeze  # called with the gap (seconds) when a freeze is noticed
        self.threshold_s = session_timeout_s / 2
        self.hold_s = session_timeout_s * 3
        self.tick_s = tick_s
        self._clock = clock
        self._last_alive = clock()
        self._suspect_until = 0.0
        self.freezes = 0

    def start(self) -> None:
        """Tick from a daemon thread for as long as the process lives."""

        def run() -> None:
            while True:
                time.sleep(self.tick_s)
                self.tick()

        threading.Thread(target=run, name="memstream-freeze-fence", daemon=True).start()

    def tick(self) -> None:
        now = self._clock()
        gap = now - self._last_alive
        if gap > self.threshold_s:
            self._suspect_until = now + self.hold_s
            self.freezes += 1
            log.warning("this process was frozen for %.1fs: no writes until the group has rebalanced", gap)
            if self.on_freeze is not None:
                self.on_freeze(gap)
        self._last_alive = now

    def suspect(self) -> bool:
        """Frozen lately (or right now: the ticker has not run for too long), and not rejoined since."""
        now = self._clock()
        return now < self._suspect_until or now - self._last_alive > self.threshold_s

    def check(self) -> None:
        if self.suspect():
            raise Fenced("this worker was frozen and may have lost its partitions: not writing")

    def rejoined(self) -> None:
        """Partitions were assigned: whatever this worker owns now, it owns in the current generation."""
        if self._suspect_until:
            log.info("rebalanced after a freeze: writing again")
        self._suspect_until = 0.0
