"""A worker's exit code decides whether its supervisor starts it again (no broker, no model)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
from aiokafka.errors import KafkaConnectionError

from memstream.streams.runtime.processes import EXIT_RESTART, supervise_worker
from memstream.streams.runtime.worker import broker_lost_at_start


def exit_inside_except(error: Exception) -> SystemExit:
    """What mode's worker does with a start-up error: ``sys.exit(1)`` in its ``except`` block."""
    try:
        try:
            raise error
        except Exception:
            sys.exit(1)
    except SystemExit as exit_:
        return exit_
    raise AssertionError("unreachable")


def test_a_connection_error_at_start_up_asks_for_a_restart():
    assert broker_lost_at_start(exit_inside_except(KafkaConnectionError("Unable to bootstrap from [...]")))


def test_a_connection_error_wrapped_in_another_one_still_counts():
    try:
        try:
            raise KafkaConnectionError("Unable to bootstrap")
        except KafkaConnectionError:
            raise RuntimeError("Error while stopping child")  # as mode's stop does
    except RuntimeError as error:
        assert broker_lost_at_start(exit_inside_except(error))


@pytest.mark.parametrize("error", [ValueError("bad setting"), RuntimeError("table recovery failed")])
def test_any_other_start_up_error_is_a_failure(error):
    assert not broker_lost_at_start(exit_inside_except(error))
    assert not broker_lost_at_start(SystemExit(1))


def counting_child(counter: Path, restarts: int, final_code: int) -> list[str]:
    """A child that exits with EXIT_RESTART ``restarts`` times, then with ``final_code``."""
    code = (
        "import pathlib, sys\n"
        f"p = pathlib.Path({str(counter)!r})\n"
        "n = int(p.read_text()) if p.exists() else 0\n"
        "p.write_text(str(n + 1))\n"
        f"sys.exit({EXIT_RESTART} if n < {restarts} else {final_code})\n"
    )
    return [sys.executable, "-c", code]


def test_the_supervisor_restarts_a_worker_that_asks_for_it_and_returns_its_last_code(tmp_path):
    counter = tmp_path / "starts"
    assert supervise_worker(counting_child(counter, restarts=2, final_code=0), restart_pause_s=0) == 0
    assert counter.read_text() == "3"


def test_the_supervisor_does_not_restart_a_failed_worker(tmp_path):
    counter = tmp_path / "starts"
    assert supervise_worker(counting_child(counter, restarts=0, final_code=1), restart_pause_s=0) == 1
    assert counter.read_text() == "1"


def test_a_supervisor_told_to_stop_while_its_worker_exits_for_a_restart_does_not_start_it_again(tmp_path):
    """The worker asks for a restart at the moment its supervisor is stopped (seen: a worker paused
    past its session, expelled on waking as the SIGTERM lands): the supervisor exits, it does not run
    a new worker that then ignores the stop until it is killed."""
    counter = tmp_path / "starts"
    code = (
        "import os, pathlib, signal, sys, time\n"
        f"p = pathlib.Path({str(counter)!r})\n"
        "n = int(p.read_text()) if p.exists() else 0\n"
        "p.write_text(str(n + 1))\n"
        "if n:\n"
        "    sys.exit(0)  # a second start: should not happen\n"
        f"signal.signal(signal.SIGTERM, lambda *_: sys.exit({EXIT_RESTART}))  # stopped: asks for a restart\n"
        "os.kill(os.getppid(), signal.SIGTERM)  # the stop reaches the supervisor\n"
        "time.sleep(60)\n"
    )
    before = signal.getsignal(signal.SIGTERM)
    assert supervise_worker([sys.executable, "-c", code], restart_pause_s=0) == EXIT_RESTART
    assert counter.read_text() == "1"
    assert signal.getsignal(signal.SIGTERM) is before  # its handler given back
