#!/usr/bin/env bash
# The test suite after the same set-up: lint, then pytest against the real Docker engine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
