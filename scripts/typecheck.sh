#!/usr/bin/env bash
# mypy over the package as it installs: the top-level folders (schemas/, processors/, streams/,
# bench/) are memstream.schemas, ... only through setuptools' package-dir mapping, which mypy cannot
# follow (it would see those imports as missing and skip them). A tree of links lays the package out
# as the wheel does, and mypy checks that.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=build/typecheck
rm -rf "$tree"
mkdir -p "$tree/memstream"
for entry in memstream/*; do ln -s "$PWD/$entry" "$tree/memstream/"; done
for pkg in schemas processors streams bench; do ln -s "$PWD/$pkg" "$tree/memstream/$pkg"; done
# The cache outlives the checkout (a fresh clone's run checks only what changed: ~10 s against ~2 min);
# mypy compares each module's hash, so a cache from another clone or commit is safe to reuse.
export MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/memstream/mypy}"
MYPYPATH="$tree" .venv/bin/mypy -p memstream "$@"
