#!/usr/bin/env bash
# Set-up shared by the README's commands, for a Debian 12 machine as root: installs what is
# missing (Docker engine, debootstrap, git, venv, chromium, npm), starts dockerd if it is not
# running, installs the Python package into .venv and builds the images (the coding-agent CLIs'
# too). Idempotent: a second run
# installs nothing and rebuilds no image whose inputs are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v git >/dev/null 2>&1 || missing+=(git)
# The replay viewer's test opens its page in headless Chromium (playwright drives Debian's).
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
# npm fetches the coding-agent CLIs' pinned binaries (npm pack) for their images; no Node runs
# in any image.
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  echo "setup: starting dockerd (log: /var/log/harness-dockerd.log)"
  # PID files left by daemons killed without a shutdown (a restored CI machine) may name a
  # number another process now holds; dockerd then refuses to start ("pid file found") and
  # its containerd supervisor waits on a stranger. Drop any that does not name its daemon.
  for pidfile in /var/run/docker.pid:dockerd /var/run/docker/containerd/containerd.pid:containerd; do
    file=${pidfile%%:*} name=${pidfile##*:}
    if [ -f "$file" ] && [ "$(cat "/proc/$(cat "$file")/comm" 2>/dev/null)" != "$name" ]; then
      rm -f "$file"
    fi
  done
  nohup dockerd >/var/log/harness-dockerd.log 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  if ! docker info >/dev/null 2>&1; then
    echo "error: dockerd did not start (fix: see /var/log/harness-dockerd.log)" >&2
    exit 1
  fi
fi

if [ ! -x .venv/bin/harness ] || [ pyproject.toml -nt .venv/.installed ]; then
  echo "setup: installing the harness into .venv"
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -e '.[dev]' 2>&1 | grep -v 'is ignored' || true
  .venv/bin/harness --help >/dev/null
  touch .venv/.installed
fi

.venv/bin/harness images build --agent claude-code --agent codex
