#!/usr/bin/env bash
# Two sides through the daemon, alternated per rank count and round, the
# same binaries: by default the tenth cut (the bench's client-executed ops
# launched plainly, COLLECTIVED_PROGRAMMATIC_LAUNCH=0, against
# programmatically, the default). A_DAEMON / B_DAEMON (extra daemon flags,
# each side its own daemon), A_ENV / B_ENV (the bench's environment) and
# A_NAME / B_NAME pick other sides: the thirteenth cut is
#   A_NAME=system A_ENV= A_DAEMON=--gpu-system-end-fence B_NAME=gpu-scope
# Zero copy on the heap, ranks as sessions, graph-replayed: issue 19's small
# sizes with the reference beside (-r 1), then its 16-64 MiB range with the
# lone copies of that traffic measured first. Outputs under $OUT.
# PARTS also takes shape (1-16 MiB by doubling, for a fixed cost and a slope)
# and large (256 MiB-1 GiB). MID_N / MID_G: ops a graph (20) and graphs a
# timing (5) of those parts: more ops a graph spread a graph's launch and
# its streams' join over more ops.
#   RANKS="2 4 8" ROUNDS=1 PARTS="small mid" bash gpu-bundle/launch_ab_probe.sh
source "$(dirname "$0")/gpu_bundle_env.sh"
run() {  # bounded, line-buffered: a killed run still shows its rows
  timeout "${RUN_S:-60}" stdbuf -oL ./bin/collective-bench "$@" 2>&1 | grep -v "^# least"
  [ "${PIPESTATUS[0]}" = 124 ] && echo "## timed out after ${RUN_S:-60} s"
  return 0
}
declare -A name=([a]=${A_NAME:-plain} [b]=${B_NAME:-programmatic})
declare -A env=([a]=${A_ENV-COLLECTIVED_PROGRAMMATIC_LAUNCH=0} [b]=${B_ENV:-})
declare -A flags=([a]=${A_DAEMON:-} [b]=${B_DAEMON:-})
# In the subshell of one side's run: its environment.
# shellcheck disable=SC2086  # NAME=value words
side_env() { if [ -n "${env[$side]}" ]; then export ${env[$side]}; fi; }
work=$(mktemp -d)
pids=()
for side in a b; do
  # shellcheck disable=SC2086  # the extra flags split into words
  ./bin/collectived --socket "$work/$side.sock" --backend cuda --max-message-bytes $((64 << 20)) \
    --max-buffer-bytes $((32 << 30)) --log-level warn ${flags[$side]} > "$work/$side.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 200); do [ -S "$work/$side.sock" ] && break; sleep 0.05; done
done
parts=${PARTS:-small mid}
{
  echo "## $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader)"
  for side in a b; do echo "## side ${name[$side]}: env '${env[$side]}', daemon flags '${flags[$side]}'"; done
  case " $parts " in
    *" shape "*) run -t ceilings -b 512K -e 256M -f 2 -n 20 -w 3 ;;
    *" mid "*) run -t ceilings -b 8M -e 256M -f 2 -n 20 -w 3 ;;
  esac
  for round in $(seq "${ROUNDS:-1}"); do
    for g in ${RANKS:-2 4 8}; do
      c=0; [ "$g" = 2 ] && c=1
      for side in a b; do
        n=${name[$side]} sock="$work/$side.sock"
        for part in $parts; do
          if [ "$part" = small ]; then
            echo "## round $round, $g ranks, small, $n, reference beside (-r 1)"
            (side_env; run -D "$sock" -k "s$g$round$side" -t all_reduce -g "$g" \
              -b 16K -e 1M -f 4 -z 1 -G 10 -c 1 -n 50 -w 20 -r 1)
          else
            # mid: issue 19's 16-64 MiB; shape: 1-16 MiB by doubling, to fit
            # time = fixed + slope x size beside the copies' fit; large:
            # 256 MiB-1 GiB, unchecked (the throughput no-regression rows).
            declare -A range=([mid]="-b 16M -e 64M -f 4 -c $c -n ${MID_N:-20} -w 5" [shape]="-b 1M -e 16M -f 2 -c $c -n 20 -w 5"
              [large]="-b 256M -e 1G -f 4 -c 0 -n 10 -w 3")
            for t in all_reduce all_gather; do
              echo "## round $round, $g ranks, $part, $t, $n"
              # shellcheck disable=SC2086  # the range's flags split into words
              (side_env; run -D "$sock" -k "$part$t$g$round$side" -t "$t" -g "$g" -z 1 -G "${MID_G:-5}" ${range[$part]})
            done
          fi
        done
      done
    done
  done
} > "$out/launch_ab.txt" 2>&1
kill "${pids[@]}"; wait "${pids[@]}"
for side in a b; do cp "$work/$side.log" "$out/daemon-${name[$side]}.log"; done
rm -rf "$work"
grep -E "^## |^ +[0-9]+ +[0-9]+ " "$out/launch_ab.txt" | cut -c1-220
