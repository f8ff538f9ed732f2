#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, on loopback: what CI runs the Slurm
# executor against, and a way to try `harness matrix run --executor slurm` without a cluster.
# Debian 12 packages (Slurm 22.05), no systemd, daemons started by hand, as root.
#
#   scripts/slurm/cluster.sh install   # packages only (slurmctld slurmd slurm-client munge)
#   scripts/slurm/cluster.sh start     # install if needed, write the config, start munged,
#                                      # slurmctld and slurmd, wait until the node is idle
#   scripts/slurm/cluster.sh stop      # stop slurmd and slurmctld (by their PID files)
#   scripts/slurm/cluster.sh status    # sinfo, or non-zero when the cluster is down
#   scripts/slurm/cluster.sh conf      # print the SLURM_CONF path to export for clients
#
# Idempotent: `start` on a running cluster only refreshes the Epilog. Everything lives under
# $HARNESS_SLURM_ROOT (default /var/lib/harness-slurm). Clients (sbatch, squeue, the harness)
# need `export SLURM_CONF=$(scripts/slurm/cluster.sh conf)`.
#
# Measured facts behind the choices (docs/slurm.md has them in full): the node gets the
# topology `slurmd -C` prints (CPUs=N alone made slurmd report N sockets); batch_sched_delay=0
# brings submit-to-start under 1 s (the default delays batch starts up to 3 s); with no
# accounting daemon `sacct` fails, so the harness reads job states with squeue/scontrol; the
# Epilog removes a cancelled job's containers (Slurm kills the client, not the container).
set -euo pipefail
cd "$(dirname "$0")/../.."

ROOT=${HARNESS_SLURM_ROOT:-/var/lib/harness-slurm}
CONF=$ROOT/etc/slurm.conf
export SLURM_CONF=$CONF

install_packages() {
  local missing=()
  for bin in slurmctld slurmd sbatch munged; do
    command -v "$bin" >/dev/null 2>&1 || missing+=("$bin")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "slurm: installing slurmctld slurmd slurm-client munge"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      slurmctld slurmd slurm-client munge >/dev/null
  fi
}

write_conf() {
  mkdir -p "$ROOT"/{etc,state,spool,run,log}
  # The Epilog is copied, not linked: it runs as root after every job, so it must not change
  # under a running cluster when the checkout does.
  install -m 0755 scripts/slurm/epilog.sh "$ROOT/etc/epilog.sh"
  local host node
  host=$(hostname -s)
  # e.g. "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1
  # RealMemory=7937": keep everything after the name.
  node=$(slurmd -C | head -n1 | sed 's/^NodeName=[^ ]* //')
  cat >"$CONF.tmp" <<EOF
# Written by scripts/slurm/cluster.sh: a single-node cluster on loopback.
ClusterName=harness
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
CryptoType=crypto/munge
StateSaveLocation=$ROOT/state
SlurmdSpoolDir=$ROOT/spool
SlurmctldPidFile=$ROOT/run/slurmctld.pid
SlurmdPidFile=$ROOT/run/slurmd.pid
SlurmctldLogFile=$ROOT/log/slurmctld.log
SlurmdLogFile=$ROOT/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobCompType=jobcomp/filetxt
JobCompLoc=$ROOT/log/jobcomp.txt
AccountingStorageType=accounting_storage/none
Epilog=$ROOT/etc/epilog.sh
NodeName=$host $node State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  mv "$CONF.tmp" "$CONF"
}

alive() {  # a daemon by its PID file (procps' pgrep is not on a minimal Debian)
  # The PID file outlives its daemon when the machine's processes are killed without a
  # `stop` (a restored or recycled CI machine): its number may by then belong to another
  # process, so the process must also be the daemon, by name.
  local pid
  [ -f "$ROOT/run/$1.pid" ] || return 1
  pid=$(cat "$ROOT/run/$1.pid")
  [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ]
}

running() {
  scontrol ping 2>/dev/null | grep -q "is UP"
}

node_idle() {
  sinfo -h -N -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'
}

start() {
  install_packages
  if running && node_idle; then
    install -m 0755 scripts/slurm/epilog.sh "$ROOT/etc/epilog.sh"
    echo "slurm: already running ($CONF)"
    return
  fi
  write_conf
  if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    mkdir -p /run/munge && chown munge:munge /run/munge
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  fi
  running || slurmctld -f "$CONF"
  alive slurmd || slurmd -f "$CONF"
  for _ in $(seq 300); do node_idle && break; sleep 0.1; done
  if ! node_idle; then
    # A node left DOWN/DRAIN by an earlier run: ReturnToService=2 does not undo a drain.
    scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
    for _ in $(seq 100); do node_idle && break; sleep 0.1; done
  fi
  if ! node_idle; then
    echo "error: the Slurm node did not become idle (fix: see $ROOT/log/slurmctld.log and slurmd.log)" >&2
    exit 1
  fi
  echo "slurm: up ($CONF)"
}

stop() {
  for daemon in slurmd slurmctld; do
    if alive "$daemon"; then  # never signal a stranger that inherited a stale PID
      pid=$(cat "$ROOT/run/$daemon.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
  done
}

case "${1:-start}" in
  install) install_packages ;;
  start) start ;;
  stop) stop ;;
  status) running && sinfo ;;
  conf) echo "$CONF" ;;
  *) echo "usage: $0 install|start|stop|status|conf" >&2; exit 2 ;;
esac
