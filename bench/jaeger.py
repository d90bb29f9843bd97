"""A Jaeger of a bench run's own (``infra/jaeger/jaeger.sh``): the traces the tracing benches read."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from typing import Iterator, Mapping

from memstream.streams import runtime


@contextlib.contextmanager
def local_jaeger(otlp_port: int, query_port: int, env: Mapping[str, str]) -> Iterator[None]:
    """Jaeger on these ports with a fresh data folder, started with ``env`` and stopped afterwards."""
    jaeger_env = {
        **env,
        "MEMSTREAM_JAEGER_DATA": tempfile.mkdtemp(prefix="memstream-jaeger-"),
        "MEMSTREAM_JAEGER_OTLP_PORT": str(otlp_port),
        "MEMSTREAM_JAEGER_QUERY_PORT": str(query_port),
    }
    script = str(runtime.INFRA / "jaeger" / "jaeger.sh")
    subprocess.run(["bash", script, "start"], env=jaeger_env, check=True)
    try:
        yield
    finally:
        subprocess.run(["bash", script, "stop"], env=jaeger_env, check=False)
