"""CPU-seconds of process trees from /proc (bench/cpu.py), measured on this process and a child."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memstream.bench.cpu import (
    CpuMeter,
    children_of,
    disk_bytes,
    file_bytes,
    lowest_rates,
    own_ticks,
    per_unit_ms,
    process_tree,
    rss_bytes,
    sample,
    tree_seconds,
)

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def burn(seconds: float) -> None:
    end = time.process_time() + seconds
    x = 0
    while time.process_time() < end:
        x += 1


def test_the_meter_sees_this_process_burn_cpu_and_not_more_than_the_wall_clock():
    meter = CpuMeter({"client": os.getpid()}).start()
    t0 = time.monotonic()
    burn(0.3)
    wall = time.monotonic() - t0
    spent = meter.stop()["client"]
    assert 0.2 <= spent <= wall + 0.1
    assert meter.seconds() == {"client": spent}


def test_a_tree_counts_its_live_children_and_the_ones_it_waited_for():
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nend=time.process_time()+0.4\nwhile time.process_time()<end: pass\ntime.sleep(30)",
        ]
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and own_ticks(child.pid) / os.sysconf("SC_CLK_TCK") < 0.35:
            time.sleep(0.05)
        assert child.pid in process_tree(os.getpid(), children_of())
        mine = own_ticks(os.getpid()) / os.sysconf("SC_CLK_TCK")
        assert tree_seconds(os.getpid()) >= mine + 0.3  # the live child's time is in the tree
    finally:
        child.kill()
        child.wait()
    # reaped: its time moved into our cutime, so the tree keeps it
    assert tree_seconds(os.getpid()) >= mine + 0.3


def test_a_gone_process_counts_zero_and_names_with_spaces_and_parentheses_parse(tmp_path: Path):
    assert own_ticks(2**22 + 12345) == 0
    assert rss_bytes(2**22 + 12345) == 0
    proc = tmp_path / "proc"
    (proc / "10").mkdir(parents=True)
    (proc / "11").mkdir()
    # pid (comm) state ppid ... utime(14) stime(15) cutime(16) cstime(17)
    fields = ["S", "1"] + ["0"] * 9 + ["100", "50", "7", "3"] + ["0"] * 30
    (proc / "10" / "stat").write_text("10 (a (weird) name) " + " ".join(fields))
    child = ["S", "10"] + ["0"] * 9 + ["40", "0", "0", "0"] + ["0"] * 30
    (proc / "11" / "stat").write_text("11 (child) " + " ".join(child))
    assert own_ticks(10, proc) == 160
    assert process_tree(10, children_of(proc)) == [10, 11]
    ticks = os.sysconf("SC_CLK_TCK")
    assert sample({"w": 10}, proc) == {"w": pytest.approx(200 / ticks)}


def test_per_unit_sums_groups_and_the_total():
    out = per_unit_ms({"ingest-1": 2.0, "ingest-2": 1.0, "broker-1": 0.5}, 100, {"ingest": ["ingest-1", "ingest-2"]})
    assert out == {"ingest-1": 20.0, "ingest-2": 10.0, "broker-1": 5.0, "ingest": 30.0, "total": 35.0}
    assert per_unit_ms({"a": 1.0}, 0)["a"] == 1000.0  # no division by zero


def test_rss_and_disk_sizes(tmp_path: Path):
    assert rss_bytes(os.getpid()) > 10 * 1024 * 1024
    (tmp_path / "p.turns-0").mkdir()
    (tmp_path / "p.turns-0" / "00.log").write_bytes(b"x" * 5000)
    (tmp_path / "p.turns-0" / "00.index").write_bytes(b"x" * 100)
    (tmp_path / "other-0").mkdir()
    (tmp_path / "other-0" / "00.log").write_bytes(b"x" * 7)
    assert file_bytes(tmp_path, prefix="p.", suffix=".log") == 5000
    assert file_bytes(tmp_path) == 5107
    assert disk_bytes(tmp_path, prefix="p.") >= 5100  # allocated blocks
    assert file_bytes(tmp_path / "missing") == 0


def test_idle_cpu_is_taken_off_the_window_never_below_zero():
    from memstream.bench.cpu import net_of_idle

    assert net_of_idle({"broker-1": 3.0, "w": 0.1}, {"broker-1": 0.1, "w": 0.5}, 10.0) == {"broker-1": 2.0, "w": 0.0}


def test_a_roles_tree_stops_at_another_roles_process(tmp_path: Path):
    """The bench client starts the workers it measures: their CPU is theirs, not the client's too."""
    proc = tmp_path / "proc"

    def process(pid: int, ppid: int, utime: int) -> None:
        (proc / str(pid)).mkdir(parents=True)
        fields = ["S", str(ppid)] + ["0"] * 9 + [str(utime), "0", "0", "0"] + ["0"] * 30
        (proc / str(pid) / "stat").write_text(f"{pid} (p{pid}) " + " ".join(fields))

    process(10, 1, 10)  # the bench
    process(20, 10, 500)  # a worker's supervisor, the bench's child
    process(21, 20, 300)  # the worker it runs
    ticks = os.sysconf("SC_CLK_TCK")
    seconds = sample({"client": 10, "ingest-1": 20}, proc)
    assert seconds == {"client": pytest.approx(10 / ticks), "ingest-1": pytest.approx(800 / ticks)}
    assert sum(seconds.values()) == pytest.approx(tree_seconds(10, proc=proc))


def test_idle_is_each_roles_quietest_interval_so_a_warm_up_in_one_is_left_out():
    samples = [(0.0, {"broker": 0.0, "worker": 0.0}), (5.0, {"broker": 1.0, "worker": 0.1}), (10.0, {"broker": 1.3})]
    rates = lowest_rates(samples)
    # the broker's first 5 s (0.2 cores: warming up) are not its idle cost, its next 5 s (0.06) are
    assert rates["broker"] == pytest.approx(0.06) and rates["worker"] == pytest.approx(0.02)
    # a role missing from a sample (gone) has no rate for that interval; a clock that did not move is skipped
    assert lowest_rates([(1.0, {"a": 1.0}), (1.0, {"a": 2.0})]) == {}
