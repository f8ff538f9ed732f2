#!/usr/bin/env bash
# The test suite after the same set-up: lint, import contracts (lint-imports), types (mypy),
# then the unit layer with no Docker engine reachable, then the integration layer against the
# real Docker engine and a real single-node Slurm cluster (installed from Debian packages and
# started on loopback by scripts/slurm/cluster.sh; idempotent, it reuses a running one).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/slurm/cluster.sh start
export SLURM_CONF
SLURM_CONF=$(scripts/slurm/cluster.sh conf)
.venv/bin/ruff check .
.venv/bin/lint-imports
.venv/bin/mypy
# The unit layer first, with no engine reachable: it must never need one. Two workers: its
# tests are many short CPU-bound ones, so the 2 cores halve it.
DOCKER_HOST=unix:///nonexistent/docker.sock .venv/bin/python -m pytest -q -p no:cacheprovider \
  -n 2 tests/unit
# Two workers, a file each at a time: most of this layer waits on containers and
# single-threaded training, so two share the 2 cores. Files are handed out in collection order
# (--no-loadscope-reorder; by default xdist starts the files with the most tests first, which
# left the one-test grader-suite file running alone at the end), and tests/conftest.py puts
# the longest files first.
.venv/bin/python -m pytest -q -p no:cacheprovider -m integration -n 2 --dist loadfile \
  --no-loadscope-reorder --durations=25 "${@:-tests/integration}"
