#!/usr/bin/env bash
# The static checks: ruff (lint + format) and mypy, after installing what they need. `make check` runs
# them before the unit tests; CI runs them before `make test`, which runs the unit tests itself.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh >/dev/null
bash scripts/test_tools.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
bash scripts/typecheck.sh
