"""memstream installed from a wheel (not editable, no checkout on the path), run from a directory
outside the checkout: `memstream worker` against a given broker and store turns what it reads into
memories, and `memstream up` starts a broker from the infra scripts the wheel ships (their data under
the user's data folder, never in site-packages) and `down` stops it.

The venv holds only the wheel; the dependencies come from the checkout's .venv through a .pth file
(no download: the test runs offline)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from memstream.bench import clusters
from memstream.datasets import demo_conversation_path

from .test_any_directory import CHECKOUT, run, stop_pid_file, user_env

pytestmark = pytest.mark.integration

# Caches too: a developer's .mypy_cache alone is ~150 MB, copied for nothing before every build.
SKIP_COPY = shutil.ignore_patterns(
    ".git", ".venv", ".data", "build", "dist", "*.egg-info", "__pycache__", "node_modules", ".pytest_cache", "*.whl",
    ".mypy_cache", ".ruff_cache", ".hypothesis",
)  # fmt: skip


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    """A fresh venv with memstream installed from a wheel built from a copy of the checkout."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(CHECKOUT, source, ignore=SKIP_COPY, symlinks=True)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(root), str(source)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = root.glob("memstream-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    # The dependencies: the checkout venv's site-packages, after the venv's own (its memstream is the
    # editable one, whose finder is a .pth hook that a directory added by a .pth file never runs).
    purelib = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True
        ).strip()
    )
    (purelib / "checkout-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return venv


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    return folder


def test_the_installed_package_is_the_wheels_with_its_infra_scripts(wheel_venv, elsewhere):
    code = (
        "import json, memstream, memstream.streams.runtime as r; "
        "print(json.dumps([memstream.__file__, str(r.INFRA), (r.INFRA / 'kafka' / 'kafka.sh').is_file()]))"
    )
    out = subprocess.run(
        [str(wheel_venv / "bin" / "python"), "-c", code], cwd=elsewhere, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    module, infra, has_kafka = json.loads(out.stdout)
    assert Path(module).is_relative_to(wheel_venv) and Path(infra).is_relative_to(wheel_venv) and has_kafka
    # The Prometheus script runs from the wheel: what it sources (infra/lib) is shipped with it.
    status = subprocess.run(
        ["bash", str(Path(infra) / "prometheus" / "prometheus.sh"), "status"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env={**os.environ, "MEMSTREAM_PROMETHEUS_DATA": str(elsewhere / "prometheus")},
    )
    assert (status.returncode, status.stdout.strip()) == (3, "not running"), status.stderr


def test_a_worker_from_the_wheel_turns_turns_into_memories(kafka, wheel_venv, elsewhere):
    memstream = str(wheel_venv / "bin" / "memstream")
    env = user_env(kafka, MEMSTREAM_DATA_DIR="store")
    log = elsewhere / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [memstream, "worker"], cwd=elsewhere, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 240
        while "memstream worker ready" not in log.read_text(errors="replace"):
            assert worker.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        ingest = run(
            [memstream, "ingest", str(demo_conversation_path()), "--tenant", "acme", "--sessions", "1", "--wait"],
            elsewhere,
            env,
        )
        assert ingest.returncode == 0, ingest.stdout + ingest.stderr
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    export = run([memstream, "export", "--tenant", "acme", "--out", "-"], elsewhere, env)
    assert export.returncode == 0, export.stdout + export.stderr
    records = [json.loads(line) for line in export.stdout.splitlines()]
    assert any(r["collection"] == "turns" for r in records) and any(r["collection"] == "cards" for r in records)
    assert (elsewhere / "store" / "qdrant-edge").is_dir()


def test_up_and_down_from_the_wheel_run_its_own_broker_with_data_in_the_users_folder(kafka, wheel_venv, elsewhere):
    memstream = str(wheel_venv / "bin" / "memstream")
    # Below the kernel's ephemeral range (controller port + 1 free too), clear of the other brokers here.
    port = clusters.free_base_port(25092, [0, 1], step=10)
    env = user_env(kafka, MEMSTREAM_KAFKA_BOOTSTRAP=f"127.0.0.1:{port}")  # the default data folder: ./.data
    try:
        up = run([memstream, "up"], elsewhere, env, timeout_s=420)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "memstream is up" in up.stdout and "already answers" not in up.stdout
        assert (elsewhere / ".data" / "kafka" / "kafka.pid").exists(), "the broker's data is in the user's folder"
    finally:
        down = run([memstream, "down"], elsewhere, env)
        stop_pid_file(elsewhere / ".data" / "worker.pid")
    assert down.returncode == 0, down.stdout + down.stderr
    assert (
        not (elsewhere / ".data" / "kafka" / "kafka.pid").exists() and not (elsewhere / ".data" / "worker.pid").exists()
    )
    assert not list(wheel_venv.rglob(".data")), "nothing written into the installed package"
