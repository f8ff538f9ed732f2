#!/usr/bin/env bash
# Run every TrainCheck gap reproducer in this folder, each in a fresh container of the
# treatment image with no network, one at a time, and print each script's last line
# ("GAP <name>: ..." or "NO GAP <name>: ..."). Full output goes to $LOG_DIR/<script>.log.
#
#   scripts/traincheck_gaps/run_all.sh            # all reproducers
#   scripts/traincheck_gaps/run_all.sh 01 06      # only those whose name starts with 01 / 06
#
# IMAGE (default harness-treatment:local) must have TrainCheck and torch in /opt/venv.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
IMAGE="${IMAGE:-harness-treatment:local}"
LOG_DIR="${LOG_DIR:-$(mktemp -d -t traincheck-gaps.XXXXXX)}"
mkdir -p "$LOG_DIR"

selected=()
for script in "$HERE"/[0-9][0-9]_*.py; do
    name="$(basename "$script")"
    if [ "$#" -eq 0 ]; then
        selected+=("$name")
    else
        for prefix in "$@"; do
            [[ "$name" == "$prefix"* ]] && selected+=("$name")
        done
    fi
done

echo "image: $IMAGE; logs: $LOG_DIR"
status=0
for name in "${selected[@]}"; do
    start=$SECONDS
    docker run --rm --network none -v "$HERE":/gaps:ro "$IMAGE" \
        /opt/venv/bin/python "/gaps/$name" >"$LOG_DIR/${name%.py}.log" 2>&1
    rc=$?
    last="$(tail -n 1 "$LOG_DIR/${name%.py}.log")"
    echo "$name (exit $rc, $((SECONDS - start)) s): $last"
    [[ "$rc" -ne 0 ]] && status=1
done
exit "$status"
