#!/bin/sh
# Slurm Epilog for harness matrix jobs: remove the containers and volumes of the job that
# just ended. Slurm kills a cancelled or timed-out job's processes (the harness worker among
# them) but not the containers the worker started: they belong to dockerd. Every container and
# volume a matrix worker creates carries the label org.harness.slurm-job=<job id>
# (harness/infra/sandbox.py PROCESS_LABELS), so only this job's are touched.
#
# Install: copy to each node and set `Epilog=/path/epilog.sh` in slurm.conf (scripts/slurm/
# cluster.sh does both for the single-node cluster). It runs as root on the node after every
# job, cancelled and timed-out ones included, and must always exit 0: a failing Epilog drains
# the node.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
[ -n "${SLURM_JOB_ID:-}" ] || exit 0
command -v docker >/dev/null 2>&1 || exit 0
label="org.harness.slurm-job=${SLURM_JOB_ID}"
containers=$(docker ps -aq --filter "label=$label" 2>/dev/null)
if [ -n "$containers" ]; then
  # shellcheck disable=SC2086  # one ID per word
  docker rm -f -v $containers >/dev/null 2>&1
fi
volumes=$(docker volume ls -q --filter "label=$label" 2>/dev/null)
if [ -n "$volumes" ]; then
  # shellcheck disable=SC2086
  docker volume rm -f $volumes >/dev/null 2>&1
fi
if [ -n "${HARNESS_EPILOG_LOG:-}" ] || [ -w /var/log ]; then
  n_c=$(printf '%s\n' "$containers" | grep -c . || true)
  n_v=$(printf '%s\n' "$volumes" | grep -c . || true)
  echo "$(date -u +%FT%TZ) job $SLURM_JOB_ID: removed $n_c container(s), $n_v volume(s)" \
    >>"${HARNESS_EPILOG_LOG:-/var/log/harness-slurm-epilog.log}" 2>/dev/null
fi
exit 0
