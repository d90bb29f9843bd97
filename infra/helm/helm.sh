#!/usr/bin/env bash
# Print the path of a helm binary (Helm v4), building it from the Go module proxy the first time:
#   GOBIN=<tmp> go install helm.sh/helm/v4/cmd/helm@$MEMSTREAM_HELM_VERSION
# into ${MEMSTREAM_CACHE_DIR:-~/.cache/memstream}/helm/<version>/helm. Later calls only check the file.
# Concurrent calls wait on a lock (flock) and build once; the build goes to a temporary folder that is
# renamed into place, so a half-built binary is never found. Progress goes to stderr, the path to stdout.
#
# Usage: path=$(bash infra/helm/helm.sh)      (needs go >= the version helm's go.mod asks for)
# Environment:
#   MEMSTREAM_HELM_VERSION   helm module version (default: the pinned one below)
#   MEMSTREAM_CACHE_DIR      cache root (default: ~/.cache/memstream)
set -euo pipefail

VERSION="${MEMSTREAM_HELM_VERSION:-v4.3.2}"
CACHE="${MEMSTREAM_CACHE_DIR:-$HOME/.cache/memstream}/helm"
DEST="$CACHE/$VERSION"
BIN="$DEST/helm"

if [[ -x $BIN ]]; then
    echo "$BIN"
    exit 0
fi
if ! command -v go >/dev/null 2>&1; then
    echo "helm.sh: go not found on PATH: helm $VERSION is built from source (go install helm.sh/helm/v4/cmd/helm@$VERSION)" >&2
    exit 1
fi
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [[ ! -x $BIN ]]; then   # another call may have built it while this one waited
    tmp=$(mktemp -d "$CACHE/.build-$VERSION.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    echo "helm.sh: building helm $VERSION with $(go version | cut -d' ' -f3) (go install helm.sh/helm/v4/cmd/helm@$VERSION; a few minutes the first time)" >&2
    start=$SECONDS
    # CGO off: a static binary, no C toolchain needed. -trimpath: no build paths in it. The -X flags
    # stamp the version as helm's own Makefile does for a release (else `helm version` says "v4.3").
    ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$VERSION -X helm.sh/helm/v4/internal/version.metadata="
    if ! CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath" GOBIN="$tmp" \
            go install -ldflags "$ldflags" "helm.sh/helm/v4/cmd/helm@$VERSION" >&2; then
        echo "helm.sh: go install helm.sh/helm/v4/cmd/helm@$VERSION failed" >&2
        exit 1
    fi
    "$tmp/helm" version --short >&2
    rm -rf "$DEST"
    mv "$tmp" "$DEST"
    trap - EXIT
    echo "helm.sh: built $BIN in $((SECONDS - start))s" >&2
fi
echo "$BIN"
