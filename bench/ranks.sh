#!/bin/sh
# What the benchmark's ranks run. The rank comes from RANK (sgpu, torchrun,
# the floor) or OMPI_COMM_WORLD_RANK (mpirun).
#   ranks.sh mark DIR    leave a file DIR/<rank>: proof that every rank ran
#   ranks.sh fail SECS   rank 0 writes the time to $BENCH_STAMP and exits 3 at
#                        once; the other ranks sleep SECS
rank=${RANK:-${OMPI_COMM_WORLD_RANK:-unknown}}
case "$1" in
  mark) : > "$2/$rank" ;;
  fail)
    if [ "$rank" = 0 ]; then
      date +%s.%N > "$BENCH_STAMP.tmp" && mv "$BENCH_STAMP.tmp" "$BENCH_STAMP"
      exit 3
    fi
    exec sleep "$2" ;;
  *) echo "ranks.sh: unknown mode '$1' (valid: mark, fail)" >&2; exit 2 ;;
esac
