"""The layout reads like the architecture: one module per stage, each declaring its topics and
tables; the production CLI does not import the benchmarks."""

import subprocess
import sys

from memstream.config import STAGE_INPUTS, STAGE_TABLES, STAGES
from schemas.topics import TOPIC_PAYLOADS
from streams.stages import REGISTRY


def test_every_stage_module_declares_topics_that_exist_and_tables_that_are_listed():
    assert tuple(REGISTRY) == STAGES
    for name, module in REGISTRY.items():
        assert module.STAGE == name
        assert module.INPUT == STAGE_INPUTS[name][0]
        assert set(module.OUTPUTS) <= set(TOPIC_PAYLOADS)
        assert getattr(module, "TABLE", None) in (*STAGE_TABLES.get(name, ()), None)
        assert set(STAGE_INPUTS[name]) <= set(TOPIC_PAYLOADS)


def test_the_production_cli_does_not_import_the_benchmarks():
    code = "import sys, streams.cli; sys.exit(any(m == 'bench' or m.startswith('bench.') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
