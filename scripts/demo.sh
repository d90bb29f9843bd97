#!/usr/bin/env bash
# The main job: install what is missing, then stream a real conversation through Kafka and answer
# questions (memstream demo starts and stops the broker, the LLM server and a worker itself).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/memstream demo "$@"
