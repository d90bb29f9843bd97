# Sourced by the service scripts of infra/ whose tool is built from the Go module proxy (Jaeger,
# Toxiproxy); uses the script's SCRIPT_DIR (its go.mod pins the tool), log and die.

# go_tool NAME MODULE PACKAGE BINARY OVERRIDE_VAR [NOTE]: print the path of the tool's binary, the
# one $OVERRIDE_VAR names when set. Else ${MEMSTREAM_CACHE_DIR:-~/.cache/memstream}/<name, lower
# case>/<MODULE's version in go.mod>/BINARY, built there by go build of PACKAGE the first time (once,
# under a lock, for callers that come at the same time); NOTE ends the "building" message.
go_tool() {
    local name="$1" module="$2" package="$3" binary="$4" override="${!5:-}" note="${6:-}"
    if [[ -n $override ]]; then echo "$override"; return 0; fi
    local version cache
    version="$(awk -v m="$module" '$1 == m {print $2; exit}' "$SCRIPT_DIR/go.mod")"
    cache="${MEMSTREAM_CACHE_DIR:-$HOME/.cache/memstream}/${name,,}"
    [[ -n $version ]] || die "no $module version in $SCRIPT_DIR/go.mod"
    local dest="$cache/$version" bin="$cache/$version/$binary"
    if [[ -x $bin ]]; then echo "$bin"; return 0; fi
    command -v go >/dev/null 2>&1 \
        || die "go not found on PATH: $name $version is built from source (or set $5 to a release binary)"
    mkdir -p "$cache"
    exec 9>"$cache/.lock"
    flock 9
    if [[ ! -x $bin ]]; then  # another call may have built it while this one waited
        local tmp; tmp="$(mktemp -d "$cache/.build-$version.XXXXXX")"
        log "building $name $version with $(go version | cut -d' ' -f3) (go build of the tool in $SCRIPT_DIR/go.mod$note)"
        local start=$SECONDS
        # CGO off: a static binary, no C toolchain. -trimpath: no build paths in it.
        if ! (cd "$SCRIPT_DIR" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/$binary" \
                "$package" >&2); then
            rm -rf "$tmp"
            die "go build of $package@$version failed"
        fi
        rm -rf "$dest"
        mv "$tmp" "$dest"
        log "built $bin in $((SECONDS - start))s"
    fi
    echo "$bin"
}
