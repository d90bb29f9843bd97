"""The app factory: a faust app running the chosen stages, with ordered commits, the freeze fence, the
watchdog and the consumer-lag gauges. Values travel as raw bytes and are validated by the stages."""

from __future__ import annotations

import logging
import os
from typing import Any, Sequence

import faust

from memstream.config import Settings
from memstream.topology import group_id

from ..kafka_options import faust_credentials
from ..lag import group_positions
from ..services import Services
from ..stages import REGISTRY
from . import faust_compat
from .context import WorkerContext
from .fence import FreezeFence
from .offsets import SafeCommits
from .processes import EXIT_RESTART
from .watchdog import lag_gauges, watchdog

log = logging.getLogger(__name__)

SESSION_TIMEOUT_S = 10.0  # a worker silent this long leaves its group; its partitions move


def exit_for_restart(gap_s: float) -> None:
    """A freeze long enough for the group to move partitions: in-memory tables may be stale (see
    ``fence``), so the supervisor restarts the worker and it recovers them from the changelogs."""
    log.error("frozen for %.1fs: exiting for a restart, tables recover from changelogs (%d)", gap_s, EXIT_RESTART)
    logging.shutdown()
    os._exit(EXIT_RESTART)


def exit_for_restart_expelled(reason: str) -> None:
    """Expelled from the group while not frozen (a loop too busy to heartbeat, on a loaded machine):
    the same stale-table hazard as a freeze (``faust_compat.watch_expulsion``), the same remedy."""
    log.error("expelled from the consumer group (%s): exiting for a restart, tables recover (%d)", reason, EXIT_RESTART)
    logging.shutdown()
    os._exit(EXIT_RESTART)


def kafka_config(s: Settings) -> dict[str, Any]:
    """The faust settings of the broker side: where, how, and how durably. Topics faust declares (its
    leader-assignor topic; the changelogs, which ``ensure_topics`` makes first) get the configured
    replication factor; the producer waits for acks=all, so that with min.insync.replicas a write the
    broker acknowledged survives the loss of a broker."""
    return {
        "broker": [f"kafka://{h.strip()}" for h in s.kafka_bootstrap.split(",")],
        "broker_credentials": faust_credentials(s),
        "topic_partitions": s.topic_partitions,
        "topic_replication_factor": s.topic_replication_factor,
        "topic_allow_declare": True,
        "producer_max_request_size": s.max_message_bytes,
        "consumer_max_fetch_size": s.max_message_bytes,
        "producer_acks": -1,  # all in-sync replicas
    }


def create_app(settings: Settings, services: Services, stages: Sequence[str] | None = None) -> faust.App:
    stages = list(stages or settings.stage_list())
    s = settings
    app_id = group_id(s.topic_prefix, stages)
    datadir = s.data_dir / "workers" / app_id
    datadir.parent.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        app_id,
        **kafka_config(s),
        value_serializer="raw",
        key_serializer="raw",
        table_standby_replicas=0,
        store="memory://",
        datadir=str(datadir),
        web_enabled=False,
        broker_commit_interval=1.0,
        broker_session_timeout=SESSION_TIMEOUT_S,
        broker_heartbeat_interval=1.0,
        stream_wait_empty=False,
        **faust_compat.delivery_config(s.stream_buffer_records, s.topic_partitions),
        logging_config=None,
    )
    commits = SafeCommits(app, lambda tps: group_positions(settings, app_id, tps))
    commits.install()
    fence = FreezeFence(SESSION_TIMEOUT_S, on_freeze=exit_for_restart)

    def expelled(reason: str) -> None:
        if not app.should_stop:  # a stopping worker leaves its group: not an expulsion
            exit_for_restart_expelled(reason)

    def rejoined(*_args: object, **_kwargs: object) -> None:
        fence.rejoined()
        faust_compat.watch_expulsion(app, expelled)

    app.on_partitions_assigned.connect(rejoined)
    fence.start()
    ctx = WorkerContext(app, s, services, commits, fence)
    commits.before_revoke = ctx.settle
    for stage in stages:
        REGISTRY[stage].register(ctx)
    if s.stall_s > 0:
        watchdog(ctx)
    lag_gauges(ctx)
    log.info("app %s runs stages: %s", app.conf.id, ", ".join(stages))
    return app
