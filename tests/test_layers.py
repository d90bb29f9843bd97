"""The dependency order of docs/architecture.md, read from the source: every import of every module
(those inside functions too) goes to its own floor or one below, and the product never imports the
benchmark and test harness. What still breaks the order is listed in EXCEPTIONS with its reason;
an arrow not listed fails, and so does an exception that no longer happens (the list only shrinks)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path
from typing import Iterator, NamedTuple

ROOT = Path(__file__).resolve().parents[1]

# Floors, lowest first: a module may import its own floor and the floors below.
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("schemas", ("memstream.schemas",)),
    (
        "core",
        (
            "memstream",
            "memstream.config",
            "memstream.settings",
            "memstream.topology",
            "memstream.ports",
            "memstream.metrics",
            "memstream.tracing",
            "memstream.logs",
            "memstream.cache",
            "memstream.data",
            "memstream.streams.kafka_options",
        ),
    ),
    (
        "adapters and processors",
        (
            "memstream.adapters",
            "memstream.processors",
            "memstream.platforms",
            "memstream.instrumented",
            "memstream.llm_limits",
            "memstream.localllm",
            "memstream.datasets",
        ),
    ),
    ("stages", ("memstream.streams.stages", "memstream.streams.services")),
    (
        "runtime",
        (
            "memstream.streams",
            "memstream.streams.runtime",
            "memstream.streams.topics",
            "memstream.streams.lag",
        ),
    ),
    (
        "entry points",
        (
            "memstream.streams.cli",
            "memstream.client",
            "memstream.gateway",
            "memstream.dashboards",
            "memstream.trace_waterfall",
            "memstream.infra",
            "memstream.bench",
            "memstream.bench.deployment",
        ),
    ),
)
# The benchmark and test harness: the product (everything else) never imports it.
HARNESS = ("memstream.bench", "memstream.bench.deployment")

# (importer, imported): why it is still allowed. To be moved (issue 45), never added to.
EXCEPTIONS: dict[tuple[str, str], str] = {}


class Import(NamedTuple):
    importer: str
    imported: str
    line: int


def package_dirs() -> dict[str, str]:
    """Folder -> package, from pyproject's package-dir (schemas/ is memstream.schemas, ...)."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {folder: package for package, folder in setup["package-dir"].items()}


def module_name(path: Path, dirs: dict[str, str]) -> str:
    parts = [dirs[path.parts[0]], *path.parts[1:]]
    parts[-1] = parts[-1].removesuffix(".py")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    dirs = package_dirs()
    found = {}
    for folder in dirs:
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT)
            if not {"node_modules", "__pycache__"} & set(rel.parts):
                found[module_name(rel, dirs)] = path
    return found


def imports_in(source: str, module: str, is_package: bool, known: set[str]) -> Iterator[Import]:
    """Every memstream import in ``source``, at any depth (inside functions too), resolved to a module."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = module if is_package else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            prefix = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
            # `from package import module` names the module; `from module import name` the module
            targets = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in known else prefix for a in node.names]
        else:
            continue
        for target in targets:
            if target == "memstream" or target.startswith("memstream."):
                yield Import(module, target, node.lineno)


def floor_of(module: str) -> int:
    best, floor = "", -1
    for i, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, floor = prefix, i
    assert floor >= 0, f"{module} is on no floor: add it to FLOORS"
    return floor


def in_harness(module: str) -> bool:
    return any(module == h or module.startswith(h + ".") for h in HARNESS)


def against_the_order(imp: Import) -> str | None:
    """Why ``imp`` breaks the order, or None."""
    up, down = floor_of(imp.importer), floor_of(imp.imported)
    if down > up:
        return f"{FLOORS[up][0]} imports {FLOORS[down][0]}"
    if in_harness(imp.imported) and not in_harness(imp.importer):
        return "the product imports the harness"
    return None


def all_imports() -> list[Import]:
    found = modules()
    known = set(found)
    return [
        imp
        for module, path in sorted(found.items())
        for imp in imports_in(path.read_text(), module, path.name == "__init__.py", known)
    ]


def test_every_import_follows_the_order_or_is_a_listed_exception():
    broken = {(i.importer, i.imported): (i, why) for i in all_imports() if (why := against_the_order(i))}
    unlisted = [
        f"{i.importer}:{i.line} -> {i.imported} ({why})" for k, (i, why) in broken.items() if k not in EXCEPTIONS
    ]
    assert not unlisted, "imports against docs/architecture.md's order:\n" + "\n".join(unlisted)
    gone = [k for k in EXCEPTIONS if k not in broken]
    assert not gone, f"exceptions that no longer happen (delete them): {gone}"


def test_an_upward_import_is_caught_even_inside_a_function():
    known = {"memstream.processors.query.engine", "memstream.streams.runtime.app", "memstream.bench.scale"}
    source = "def run():\n    from memstream.streams.runtime.app import build\n    return build\n"
    [imp] = imports_in(source, "memstream.processors.query.engine", False, known)
    assert imp == Import("memstream.processors.query.engine", "memstream.streams.runtime.app", 2)
    assert against_the_order(imp) == "adapters and processors imports runtime"
    relative = imports_in("from ..bench import scale\n", "memstream.streams.cli", False, known)
    assert [against_the_order(i) for i in relative] == ["the product imports the harness"]
    downward = imports_in("from memstream.schemas import Turn\n", "memstream.processors.query.engine", False, known)
    assert [against_the_order(i) for i in downward] == [None]


def test_every_module_is_on_a_floor():
    assert all(floor_of(module) >= 0 for module in modules())
