#!/usr/bin/env bash
# The main job: set up, build the images, run one offline demo session end to end, grade it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/harness demo --study studies/demo.yaml
