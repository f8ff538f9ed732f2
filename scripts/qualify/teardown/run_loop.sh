#!/usr/bin/env bash
# The packets' teardown loop, run inside the control image from the root of a task's repo:
# N two-rank runs (gloo-ddp-2 and gloo-fsdp-2 in turn) of `train.py ARGS...`, PAR at a time,
# with HOGS busy loops competing for the cores. One line per run:
#   run <i> <config> rc=<exit code> abort=<0|1> gloo_threads_at_exit=<count over ranks>
# A failed run's last lines follow it, indented. With PROGRAM set (outlive_group.py), every
# run launches that program instead of train.py (the detector's positive control).
#   usage: run_loop.sh N PAR HOGS [train.py arguments...]
set -u
n=$1 par=$2 hogs=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
export TRAIN_ARGS="$*" HERE=$here
for _ in $(seq "$hogs"); do (while :; do :; done) & done

one_run() {
  i=$1
  configs=(gloo-ddp-2 gloo-fsdp-2)
  config=${configs[$((i % 2))]}
  work=/tmp/teardown-run-$i
  mkdir -p "$work/census"
  if [ -n "${PROGRAM:-}" ]; then
    target=("$HERE/$PROGRAM")
  else
    # {work} in the arguments names this run's scratch folder (checkpoints, export).
    # shellcheck disable=SC2086
    target=(train.py --config "$config" ${TRAIN_ARGS//\{work\}/$work} --out "$work/out")
  fi
  # Ranks still running 30 s before the time limit write their stacks (sitecustomize.py).
  TEARDOWN_CENSUS_DIR=$work/census TEARDOWN_STACKS_AFTER_S=270 PYTHONPATH=$HERE \
    GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 \
    timeout 300 python -m torch.distributed.run --nnodes 1 --nproc-per-node 2 \
    --master-addr 127.0.0.1 --master-port $((20000 + i % 20000)) "${target[@]}" \
    >"$work/log" 2>&1
  rc=$?
  abort=0
  grep -q "terminate called\|Fatal Python error: Aborted\|exitcode *: -6" "$work/log" && abort=1
  threads=$(cat "$work"/census/*.threads 2>/dev/null | tr ' ' '\n' | grep -c '^\(pt_\)\?gloo')
  echo "run $i $config rc=$rc abort=$abort gloo_threads_at_exit=$threads"
  if [ "$rc" -eq 124 ]; then
    # Timed out: the ranks' stacks (written before the limit), then the end of the log.
    { grep -A 40 "^Thread 0x\|most recent call first" "$work/log" | head -n 120
      tail -n 10 "$work/log"; } | sed 's/^/    /'
  elif [ "$rc" -ne 0 ] || [ "$abort" -ne 0 ]; then
    grep -v "socket.cpp" "$work/log" | tail -n 15 | sed 's/^/    /'
  fi
  rm -rf "$work"
}
export -f one_run
seq 0 $((n - 1)) | xargs -P "$par" -I{} bash -c 'one_run {}'
jobs -p | xargs -r kill 2>/dev/null
exit 0
