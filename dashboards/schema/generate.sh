#!/usr/bin/env bash
# Convert the classic Grafana dashboard JSON model (the `Dashboard` interface of @grafana/schema,
# pinned in package-lock.json) to JSON Schema (draft 7) in dashboard.schema.json, which
# tests/dashboards/test_dashboard_schema.py validates every dashboards/*.json against.
# The schema file is committed for machines without node; scripts/install.sh reruns this when npm
# is on PATH. Idempotent: `npm ci` runs only when package-lock.json changed since the last install
# (sha256 stamp in node_modules), and the schema is always regenerated (~3 s) but the file is only
# rewritten when its content changes, so a second run leaves it byte-identical and untouched.
set -euo pipefail
cd "$(dirname "$0")"

# The classic (v1, "schemaVersion" 3x/4x) dashboard model: raw/dashboard/x/types.gen.d.ts. It is a
# self-contained declaration file (no imports). Not the v2 API (DashboardV2Spec, schema/dashboard/v2*).
TYPE_FILE=node_modules/@grafana/schema/dist/types/raw/dashboard/x/types.gen.d.ts
TYPE_NAME=Dashboard
OUT=dashboard.schema.json

die() { echo "dashboards/schema/generate.sh: $*" >&2; exit 1; }

command -v npm >/dev/null 2>&1 || die "npm not found on PATH (install Node.js >= 20 with npm); the committed $OUT stays in use"
command -v node >/dev/null 2>&1 || die "node not found on PATH (install Node.js >= 20)"
node_major=$(node -p 'process.versions.node.split(".")[0]')
(( node_major >= 20 )) || die "Node.js >= 20 required (ts-json-schema-generator 2.4 / glob 11), found $(node --version)"

stamp=node_modules/.memstream-lock.sha256
lock_sum=$(sha256sum package-lock.json | cut -d' ' -f1)
if [[ ! -f $stamp || "$(cat "$stamp")" != "$lock_sum" || ! -f $TYPE_FILE ]]; then
    npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null \
        || die "npm ci failed (is the npm registry reachable?)"
    echo "$lock_sum" > "$stamp"
fi
[[ -f $TYPE_FILE ]] || die "$TYPE_FILE not found: this @grafana/schema keeps the classic dashboard types" \
    "elsewhere; find 'export interface Dashboard ' under node_modules/@grafana/schema/dist and update TYPE_FILE"

# Generator flags:
#   --additional-properties  objects with no index signature get no `additionalProperties: false`.
#       The TS types do not list everything Grafana itself writes into and accepts in a dashboard:
#       query variables carry `definition`, "export for sharing externally" adds `__inputs`,
#       `__elements` and `__requires`, old panels keep legacy keys. Closed objects would reject
#       real, well-formed dashboards. Types, enums and required keys are still enforced
#       (e.g. `panels` must be an array, `gridPos.h` a number, `schemaVersion` and a panel's `type`
#       are required), but a misspelled optional key is NOT caught.
#   --no-type-check  the input is a published, already-compiled .d.ts; skipping the TypeScript
#       semantic check avoids needing a tsconfig/lib setup and halves the run time. It does not
#       change the output.
#   --expose export (default) + top-level $ref (default): every exported type referenced from
#       Dashboard becomes one entry under `definitions` and the root is {"$ref": "#/definitions/Dashboard"};
#       validators must resolve local $refs (jsonschema.Draft7Validator does).
#   --jsDoc extended (default): TS doc comments become `description`s.
#   Property order is sorted (default; --unstable is not passed), so the output is deterministic.
tmp=$(mktemp "${TMPDIR:-/tmp}/dashboard.schema.XXXXXX")
trap 'rm -f "$tmp"' EXIT
./node_modules/.bin/ts-json-schema-generator \
    --path "$TYPE_FILE" \
    --type "$TYPE_NAME" \
    --additional-properties \
    --no-type-check \
    --out "$tmp" \
    || die "ts-json-schema-generator failed on $TYPE_FILE ($TYPE_NAME)"
# The generator writes no final newline; add one so the committed file is a proper text file.
if [[ -n $(tail -c1 "$tmp") ]]; then echo >> "$tmp"; fi
node -e 'JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"))' "$tmp" \
    || die "generated schema is not valid JSON"

version=$(node -p 'require("@grafana/schema/package.json").version')
if cmp -s "$tmp" "$OUT"; then
    echo "dashboards/schema: $OUT up to date (@grafana/schema $version)"
else
    mv "$tmp" "$OUT"
    chmod 644 "$OUT"
    echo "dashboards/schema: wrote $OUT (@grafana/schema $version)"
fi
