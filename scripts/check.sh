#!/usr/bin/env bash
# Static checks and the unit tests: ruff (lint + format), mypy, then every test that needs no service.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/static_checks.sh
# The store tests open many embedded Qdrant shards; on a memory-backed temp dir they run in half the time.
tmp_root=/tmp
if [ -d /dev/shm ] && [ -w /dev/shm ]; then tmp_root=/dev/shm; fi
basetemp=$(mktemp -d "$tmp_root/memstream-check.XXXXXX")
trap 'rm -rf "$basetemp"' EXIT
.venv/bin/python -m pytest tests -m "not integration and not cluster" -q -n 2 --basetemp="$basetemp" "$@"
