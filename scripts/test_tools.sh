#!/usr/bin/env bash
# Tools only the tests use, built once from the Go module proxy into ~/.cache/memstream (later runs
# check a file): helm (tests/infra/test_helm.py) and Jaeger (the tracing tests' backend). The demo
# does not need them, so scripts/install.sh leaves them out. Without Go, those tests fail saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v go >/dev/null 2>&1; then
    bash infra/helm/helm.sh >/dev/null
    bash infra/jaeger/jaeger.sh build >/dev/null
else
    echo "test tools: go not found: tests/infra/test_helm.py and the tracing tests will fail without Go (they build helm and Jaeger from the module proxy)"
fi
