#!/usr/bin/env bash
# Static checks and the unit tests: ruff (lint + format), mypy, then every test that needs no service.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh >/dev/null
.venv/bin/ruff check .
.venv/bin/ruff format --check .
bash scripts/typecheck.sh
.venv/bin/python -m pytest tests -m "not integration" -q "$@"
