#!/usr/bin/env bash
# The tenth cut (programmatic dependent launches of the op kernels) through
# the daemon, before and after in one run: the same binaries, the bench's
# client-executed ops launched plainly (COLLECTIVED_PROGRAMMATIC_LAUNCH=0)
# and programmatically (the default), alternated per rank count and round.
# Zero copy on the heap, ranks as sessions, graph-replayed: issue 19's small
# sizes with the reference beside (-r 1), then its 16-64 MiB range with the
# lone copies of that traffic measured first. Outputs under $OUT.
#   RANKS="2 4 8" ROUNDS=1 PARTS="small mid" bash gpu-bundle/launch_ab_probe.sh
source "$(dirname "$0")/gpu_bundle_env.sh"
run() {  # bounded, line-buffered: a killed run still shows its rows
  timeout "${RUN_S:-60}" stdbuf -oL ./bin/collective-bench "$@" 2>&1 | grep -v "^# least"
  [ "${PIPESTATUS[0]}" = 124 ] && echo "## timed out after ${RUN_S:-60} s"
  return 0
}
work=$(mktemp -d)
./bin/collectived --socket "$work/c.sock" --backend cuda --max-message-bytes $((64 << 20)) \
  --max-buffer-bytes $((32 << 30)) --log-level warn > "$work/d.log" 2>&1 &
d=$!
for _ in $(seq 200); do [ -S "$work/c.sock" ] && break; sleep 0.05; done
parts=${PARTS:-small mid}
{
  echo "## $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader)"
  case " $parts " in *" mid "*) run -t ceilings -b 8M -e 256M -f 2 -n 20 -w 3 ;; esac
  for round in $(seq "${ROUNDS:-1}"); do
    for g in ${RANKS:-2 4 8}; do
      c=0; [ "$g" = 2 ] && c=1
      for launch in 0 1; do
        name=programmatic; [ $launch = 0 ] && name=plain
        for part in $parts; do
          if [ "$part" = small ]; then
            echo "## round $round, $g ranks, small, $name launch, reference beside (-r 1)"
            COLLECTIVED_PROGRAMMATIC_LAUNCH=$launch run -D "$work/c.sock" -k "s$g$round$launch" -t all_reduce -g "$g" \
              -b 16K -e 1M -f 4 -z 1 -G 10 -c 1 -n 50 -w 20 -r 1
          else
            for t in all_reduce all_gather; do
              echo "## round $round, $g ranks, mid, $t, $name launch"
              COLLECTIVED_PROGRAMMATIC_LAUNCH=$launch run -D "$work/c.sock" -k "m$t$g$round$launch" -t "$t" -g "$g" \
                -b 16M -e 64M -f 4 -z 1 -G 5 -c "$c" -n 20 -w 5
            done
          fi
        done
      done
    done
  done
} > "$out/launch_ab.txt" 2>&1
kill "$d"; wait "$d"
cp "$work/d.log" "$out/daemon.log"
rm -rf "$work"
grep -E "^## |^ +(16384|262144|1048576|16777216|67108864) " "$out/launch_ab.txt" | cut -c1-220
