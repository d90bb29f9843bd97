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
MYPYPATH="$tree" .venv/bin/mypy -p memstream "$@"
