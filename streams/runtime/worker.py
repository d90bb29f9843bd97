"""Running one worker process: topics and changelogs first, then the faust worker for the stages."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys

from memstream.config import Settings
from memstream.schemas.topics import ALL_TOPICS
from memstream.topology import changelog_topics

from .processes import EXIT_RESTART, configure_logging
from .startup import StartupClock

log = logging.getLogger(__name__)


def apply_torch_threads(settings: Settings, *, if_loaded: bool = False) -> None:
    """Spinning OpenMP threads of two processes on two cores slow small forward passes ~10x.
    ``if_loaded``: only where a model brought torch in (the torch backends, the compressor), as the
    worker does once its models are loaded: importing torch for nothing cost an ONNX worker seconds
    of its start."""
    if settings.torch_threads and (not if_loaded or "torch" in sys.modules):
        import torch

        torch.set_num_threads(settings.torch_threads)


def freeze_startup_heap() -> None:
    """Models and libraries stay for the process's life, yet each full collection walked all of them
    with the loop stopped, longer than a question's whole reply takes. Frozen, a collection walks only
    what came after; a frozen object dropped later (an evicted table entry) is still freed by its
    reference count, only a cycle among frozen objects would stay. Only the young generations are
    collected first: a full one, with the models loaded, found 26 unreachable objects and held the
    loop 0.15-0.35 s just as the first messages came."""
    gc.collect(1)
    gc.freeze()
    log.info("startup heap frozen: %d objects left out of later collections", gc.get_freeze_count())


def set_gil_switch_interval(settings: Settings) -> None:
    """Every socket write of the event loop and every store, model or numpy call of a question's
    engine gives up the GIL, and getting it back waits up to the holder's switch interval while other
    threads run Python: under a history import the loop spent about a tenth of its time so waiting (a
    py-spy profile). 1 ms against the interpreter's 5 made no difference beyond the spread of two runs
    of bench fairness, so the default stays; the setting is there to try on other machines."""
    sys.setswitchinterval(settings.gil_switch_ms / 1000.0)


def run_worker(settings: Settings) -> None:
    """Run a faust worker for the configured stages in this process (blocks until SIGTERM/SIGINT)."""
    import faust

    from ..services import Services
    from ..topics import ensure_topics, wait_for_broker
    from . import faust_compat
    from .app import create_app

    configure_logging(settings.log_level, settings.log_format)
    clock = StartupClock()
    clock.mark_start()
    clock.mark("imports")
    set_gil_switch_interval(settings)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    stages = settings.stage_list()
    loop.run_until_complete(ensure_topics(settings, stages=stages))
    clock.mark("topics")
    services = Services(settings)
    services.on_loaded = clock.mark  # embedder, attention, compressor, store: as the stages load them
    clock.publish(lambda phase, since: services.metrics.startup.labels(phase).set(since))
    services.metrics.serve(settings.metrics_port, settings.metrics_host)
    app = create_app(settings, services)  # the stages' registrations load the models they use
    apply_torch_threads(settings, if_loaded=True)  # before any message: no forward pass ran yet
    clock.mark("app")

    def assigned(*_args: object, **_kwargs: object) -> None:
        if "assigned" not in clock.marks:  # the first assignment: the group joined
            clock.mark("assigned")

    app.on_partitions_assigned.connect(assigned)
    faust_compat.require(app)
    faust_compat.fetch_promptly()
    faust_compat.start_tables_promptly()
    # With a broker of several down, faust's own topic declarations may draw it: tried again elsewhere.
    # Those ensure_topics made sure of above are not declared again.
    declared = [settings.topic(name) for name in ALL_TOPICS] + changelog_topics(settings.topic_prefix, stages)
    faust_compat.retry_topic_declarations(app, settings.broker_wait_s, declared)

    async def announce_ready() -> None:
        # Ready = partitions assigned *and* tables recovered from their changelogs.
        await app.tables.recovery.completed.wait()  # type: ignore[attr-defined]  # TableManagerT omits it
        clock.mark("ready")
        # Installed now so it replaces mode's own handler, which would open a debugger prompt.
        running = asyncio.get_running_loop()
        running.add_signal_handler(signal.SIGUSR2, lambda: log.warning(faust_compat.consumer_state(app.consumer)))
        log.info("memstream worker ready: %d partitions assigned, tables recovered", len(app.consumer.assignment()))
        freeze_startup_heap()

    app.task(announce_ready)

    worker = faust.Worker(
        app, loop=loop, loglevel=settings.log_level, quiet=True, redirect_stdouts=False, override_logging=False
    )
    # Loading the models took seconds; the broker may have gone meanwhile (a restart).
    loop.run_until_complete(wait_for_broker(settings))
    try:
        worker.execute_from_commandline()
    except SystemExit as exit_:
        if exit_.code not in (0, None) and broker_lost_at_start(exit_):
            log.warning("the broker went away while the worker started: exiting for a restart (%d)", EXIT_RESTART)
            raise SystemExit(EXIT_RESTART) from exit_
        raise
    finally:
        services.close()


def broker_lost_at_start(exit_: SystemExit) -> bool:
    """mode's worker turns any start-up error into ``sys.exit(1)`` inside its ``except`` block, so
    the error is the exit's ``__context__``: a connection error there means faust could not reach
    the broker (it does not retry bootstrap), which a fresh start fixes."""
    from aiokafka.errors import KafkaConnectionError

    cause: BaseException | None = exit_.__context__
    while cause is not None:
        if isinstance(cause, KafkaConnectionError):
            return True
        cause = cause.__context__
    return False
