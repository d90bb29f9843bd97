#!/usr/bin/env bash
# Tools only the tests use: helm (tests/infra/test_helm.py) and Jaeger (the tracing tests' backend),
# built once from the Go module proxy into ~/.cache/memstream (later runs check a file); the
# inspector's browser tests' Playwright (the `browser` extra) and the system's chromium (Debian's
# package: Playwright downloads no browser). The demo needs none of them, so scripts/install.sh
# leaves them out. A tool that cannot be had is named; the tests that need it fail saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v go >/dev/null 2>&1; then
    bash infra/helm/helm.sh >/dev/null
    bash infra/jaeger/jaeger.sh build >/dev/null
    bash infra/toxiproxy/toxiproxy.sh build >/dev/null
else
    echo "test tools: go not found: tests/infra/test_helm.py and the tracing tests will fail without Go (they build helm and Jaeger from the module proxy)"
fi
# Once per pyproject change (like install.sh): CI runs this script from suites that run side by side,
# and a pip install under a running suite would swap the package beneath it.
stamp=.venv/.memstream-test-tools
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
    UV_COMPILE_BYTECODE=1 .venv/bin/uv pip install -q --python .venv/bin/python -e ".[dev,browser]"  # as scripts/install.sh
    touch "$stamp"
fi
if ! command -v chromium >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        echo "test tools: installing Debian's chromium for the inspector's browser tests"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null \
            || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }
    else
        echo "test tools: no chromium (install Debian's chromium package, or set MEMSTREAM_CHROMIUM): the browser tests will fail"
    fi
fi
