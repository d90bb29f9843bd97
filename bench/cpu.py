"""CPU-seconds of processes between two points in time, read from ``/proc/<pid>/stat``.

A process's CPU is its ``utime + stime`` plus ``cutime + cstime`` (the children it has waited for),
and a role's is the sum over its live process tree: the ``memstream worker`` supervisor and the worker
it runs, a restarted child included (a dead child's time moves into its parent's ``cutime``); the tree
stops at another role's process (the bench starts the workers it measures). A
process gone between the two samples counts what it had at the first (its later time is lost).
Linux only."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Collection, Iterable, Iterator, Mapping, Sequence

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(pid: int, proc: Path = PROC) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (field 3 onwards), None if it is gone."""
    try:
        raw = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # the name may hold spaces and parentheses


def own_ticks(pid: int, proc: Path = PROC) -> int:
    """utime + stime + cutime + cstime of one process, in clock ticks (0 if it is gone)."""
    fields = _stat_fields(pid, proc)
    if fields is None:
        return 0
    # fields[0] is field 3 (state): utime is field 14, stime 15, cutime 16, cstime 17
    return sum(int(fields[i]) for i in (11, 12, 13, 14))


def children_of(proc: Path = PROC) -> dict[int, list[int]]:
    """Parent pid -> its live children's pids, over every process."""
    out: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name), proc)
        if fields is not None:
            out.setdefault(int(fields[1]), []).append(int(entry.name))  # field 4: ppid
    return out


def process_tree(pid: int, children: Mapping[int, list[int]], stop: Collection[int] = ()) -> list[int]:
    """``pid`` and its live descendants, but none at or below a pid in ``stop``."""
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo += [c for c in children.get(p, []) if c not in stop]
    return tree


def tree_seconds(
    pid: int, *, children: Mapping[int, list[int]] | None = None, proc: Path = PROC, stop: Collection[int] = ()
) -> float:
    """CPU-seconds of ``pid`` and its descendants so far (their own and their waited-for children's),
    those at or below a pid in ``stop`` left out."""
    children = children_of(proc) if children is None else children
    return sum(own_ticks(p, proc) for p in process_tree(pid, children, stop)) / CLOCK_TICKS


def sample(pids: Mapping[str, int], proc: Path = PROC) -> dict[str, float]:
    """Role -> CPU-seconds so far of the process tree of its pid (one scan of /proc for all). A role's
    tree stops at another role's pid: the bench client starts the workers it measures, and their CPU
    is theirs, not the client's too."""
    children = children_of(proc)
    roots = set(pids.values())
    return {role: tree_seconds(pid, children=children, proc=proc, stop=roots - {pid}) for role, pid in pids.items()}


@dataclass
class CpuMeter:
    """CPU-seconds of named processes (roles, each the tree of a pid) from :meth:`start` to :meth:`stop`.

    >>> meter = CpuMeter({"client": os.getpid()}).start()
    >>> ...  # the work
    >>> meter.stop()["client"]  # CPU-seconds the client spent"""

    pids: dict[str, int]
    proc: Path = PROC
    first: dict[str, float] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)

    def start(self) -> CpuMeter:
        self.first = sample(self.pids, self.proc)
        return self

    def stop(self) -> dict[str, float]:
        self.last = sample(self.pids, self.proc)
        return self.seconds()

    def seconds(self) -> dict[str, float]:
        return {role: max(0.0, self.last.get(role, 0.0) - self.first.get(role, 0.0)) for role in self.pids}


def per_unit_ms(seconds: Mapping[str, float], units: int, groups: Mapping[str, Iterable[str]] = {}) -> dict[str, float]:
    """CPU-milliseconds per unit (turn, query) of every role, plus each group's sum (e.g. ``ingest``:
    all ingest workers) and ``total``."""
    units = max(units, 1)
    out = {role: round(1000.0 * s / units, 3) for role, s in seconds.items()}
    for name, roles in groups.items():
        out[name] = round(1000.0 * sum(seconds.get(r, 0.0) for r in roles) / units, 3)
    out["total"] = round(1000.0 * sum(seconds.values()) / units, 3)
    return out


def rss_bytes(pid: int, proc: Path = PROC) -> int:
    """Resident memory of one process (VmRSS), 0 if it is gone."""
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _files_under(path: Path, prefix: str, suffix: str) -> Iterator[Path]:
    """The files under ``path`` whose top-level entry starts with ``prefix`` and whose name ends with ``suffix``."""
    if not path.is_dir():
        return
    for top in path.iterdir():
        if not top.name.startswith(prefix):
            continue
        files = [top] if top.is_file() else [p for p in top.rglob("*") if p.is_file()]
        yield from (f for f in files if f.name.endswith(suffix))


def _sum_sizes(files: Iterator[Path], size: Callable[[os.stat_result], int]) -> int:
    total = 0
    for f in files:
        try:
            total += size(f.stat())
        except OSError:  # gone meanwhile
            pass
    return total


def disk_bytes(path: Path, *, prefix: str = "", suffix: str = "") -> int:
    """Bytes on disk (allocated blocks, as ``du``) of the files under ``path`` whose top-level entry
    starts with ``prefix`` and whose name ends with ``suffix``."""
    return _sum_sizes(_files_under(path, prefix, suffix), lambda st: st.st_blocks * 512)


def file_bytes(path: Path, *, prefix: str = "", suffix: str = "") -> int:
    """Like :func:`disk_bytes`, but the files' sizes (what was written, not the blocks allocated)."""
    return _sum_sizes(_files_under(path, prefix, suffix), lambda st: st.st_size)


def lowest_rates(samples: Sequence[tuple[float, Mapping[str, float]]]) -> dict[str, float]:
    """From successive ``(time, role -> CPU-seconds so far)`` samples, each role's lowest CPU-seconds
    per second over one interval: the idle cost without a start-up's tail (a new cluster's brokers
    warming up, a rebalance settling), which lands in one interval and not in all."""
    rates: dict[str, float] = {}
    for (t0, a), (t1, b) in zip(samples, samples[1:]):
        if t1 <= t0:
            continue
        for role, seconds in b.items():
            rate = max(0.0, seconds - a.get(role, 0.0)) / (t1 - t0)
            rates[role] = min(rates.get(role, rate), rate)
    return rates


def net_of_idle(seconds: Mapping[str, float], idle_cores: Mapping[str, float], window_s: float) -> dict[str, float]:
    """CPU-seconds over a window of ``window_s`` less what each role spends idle (``idle_cores``:
    CPU-seconds per second measured before the load): the cost of the work itself, never below 0."""
    return {role: max(0.0, s - idle_cores.get(role, 0.0) * window_s) for role, s in seconds.items()}
