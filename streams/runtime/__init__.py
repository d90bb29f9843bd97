"""The runtime under the stages: the app factory (``app``), what a stage sees of it (``context``),
ordered commits (``offsets``), the watchdog (``watchdog``), everything that reaches into faust
(``faust_compat``), and the processes around a worker (``processes``: broker, LLM server, worker
subprocesses and their supervisor; ``worker``: one worker process)."""

from .processes import (
    EXIT_RESTART,
    INFRA,
    KAFKA,
    LOCAL_LLM,
    PROMETHEUS,
    REPO_ROOT,
    LocalService,
    WorkerProcess,
    configure_logging,
    infra_env,
    local_llm_available,
    local_llm_env,
    local_llm_url,
    path_env,
    spawn_worker,
    supervise_worker,
    wait_worker_ready,
)
from .worker import apply_torch_threads, run_worker

__all__ = [
    "EXIT_RESTART",
    "INFRA",
    "KAFKA",
    "LOCAL_LLM",
    "PROMETHEUS",
    "REPO_ROOT",
    "LocalService",
    "WorkerProcess",
    "apply_torch_threads",
    "configure_logging",
    "infra_env",
    "local_llm_available",
    "local_llm_env",
    "local_llm_url",
    "path_env",
    "run_worker",
    "spawn_worker",
    "supervise_worker",
    "wait_worker_ready",
]
