"""The layout reads like the architecture: one module per stage, each declaring its topics and
tables; the production CLI does not import the benchmarks."""

import subprocess
import sys

from memstream.schemas.topics import TOPIC_PAYLOADS
from memstream.streams.stages import REGISTRY
from memstream.topology import STAGES, TOPOLOGY


def test_every_stage_has_a_module_and_topics_that_exist():
    assert tuple(REGISTRY) == STAGES
    for name, module in REGISTRY.items():
        assert module.STAGE == name
        assert set(TOPOLOGY[name].inputs) | set(TOPOLOGY[name].outputs) <= set(TOPIC_PAYLOADS)


def test_the_production_cli_does_not_import_the_benchmarks():
    code = "import sys, memstream.streams.cli; sys.exit(any(m.startswith('memstream.bench') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_the_distribution_claims_no_generic_top_level_name():
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    setup = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    names = [*setup["packages"], *setup["package-dir"]]
    assert all(n == "memstream" or n.startswith("memstream.") for n in names)
    # Imported from elsewhere (no checkout on the path), the CLI and the stages load only memstream.*.
    code = (
        "import sys, memstream.streams.cli, memstream.streams.stages; "
        "found = {m.split('.')[0] for m in sys.modules} & {'schemas', 'processors', 'streams', 'bench'}; "
        "print(sorted(found)); sys.exit(1 if found else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_worker_image_copies_every_folder_the_package_maps():
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    folders = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values())
    dockerfile = (root / "infra" / "Dockerfile").read_text()
    assert all(f"COPY {folder} {folder}" in dockerfile for folder in folders), folders


def test_every_package_folder_is_in_the_distribution():
    """A package missing from pyproject's list is missing from the wheel (memstream.streams.cli was)."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    setup = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set()
    for package, folder in setup["package-dir"].items():
        for init in (root / folder).rglob("__init__.py"):
            if "node_modules" not in init.parts:
                rel = init.parent.relative_to(root / folder).parts
                found.add(".".join([package, *rel]))
    assert found <= set(setup["packages"]), sorted(found - set(setup["packages"]))
