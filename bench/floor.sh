#!/usr/bin/env bash
# The floor: N ranks started by hand with `&` and reaped with `wait -n`, no
# launcher. The first rank to fail gets the others SIGTERMed and its exit code
# becomes the script's, like a launcher. Ranks get the torchrun variables a
# DDP job reads (MASTER_PORT comes from the caller).
#   floor.sh [--pipe | --tee DIR] N program [args...]
# --pipe: each rank's stdout goes through its own pipe into `cat`, which
# writes to the script's stdout: the "plain pipes" a launcher is compared with.
# --tee DIR: the same through `tee DIR/<rank>.log` instead of `cat`: every
# byte also lands in a log file per rank, the two copies a launcher that
# keeps lossless logs (sgpu, torchrun --tee) makes.
set -u
pipe=0
tee_dir=
if [ "$1" = --pipe ]; then pipe=1; shift; fi
if [ "$1" = --tee ]; then tee_dir=$2; shift 2; mkdir -p "$tee_dir"; fi
n=$1; shift
export WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n MASTER_ADDR=${MASTER_ADDR:-127.0.0.1} MASTER_PORT=${MASTER_PORT:-29500}
pids=()
for ((r = 0; r < n; r++)); do
  if [ -n "$tee_dir" ]; then
    (set -o pipefail; RANK=$r LOCAL_RANK=$r "$@" | tee "$tee_dir/$r.log") &
  elif [ $pipe = 1 ]; then
    (set -o pipefail; RANK=$r LOCAL_RANK=$r "$@" | cat) &
  else
    RANK=$r LOCAL_RANK=$r "$@" &
  fi
  pids+=($!)
done
for ((i = 0; i < n; i++)); do
  # -p: which rank ended. Without a pid, bash had no child left to wait for
  # (now and then it returns 127 for one reaped before the call), not a rank's 127.
  unset done_pid
  wait -n -p done_pid
  rc=$?
  [ -n "${done_pid:-}" ] || break
  if [ $rc -ne 0 ]; then
    kill -TERM "${pids[@]}" 2>/dev/null
    wait
    exit $rc
  fi
done
