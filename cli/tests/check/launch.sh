#!/bin/sh
# Starts $RANKS (4) copies of a command as the ranks of one job, the way
# torchrun does (RANK, WORLD_SIZE, LOCAL_RANK in each one's environment),
# waits for all of them, and exits 1 when any failed. With LAUNCHER_PRELOAD
# set it adds that library to LD_PRELOAD for the ranks, after what is there,
# as launchers that preload their own library do.
n=${RANKS:-4}
if [ -n "$LAUNCHER_PRELOAD" ]; then
  LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD:}$LAUNCHER_PRELOAD"
  export LD_PRELOAD
fi
pids=""
r=0
while [ "$r" -lt "$n" ]; do
  RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r "$@" &
  pids="$pids $!"
  r=$((r + 1))
done
rc=0
for p in $pids; do
  wait "$p" || rc=1
done
exit $rc
