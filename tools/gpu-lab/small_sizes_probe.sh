#!/usr/bin/env bash
# Where the time of a 16-256 MiB op goes (the sizes below the 85 % target),
# in one device call over a bundle (tools/gpu-lab/make_gpu_bundle.sh): a lone copy's
# share of the ceiling at each traffic size, then the in-process kernel with
# one launch per op against post + collective + complete, eager against
# graph-replayed, one-shot against two-shot, then the same ops through the
# daemon, and the latency of 16 KiB-1 MiB all-reduces. Optional first: GPU
# daemon tests named by TESTS. Outputs under $OUT.
#   [TESTS=gtest-filter] [RANKS="2 8"] bash gpu-bundle/small_sizes_probe.sh
source "$(dirname "$0")/gpu_bundle_env.sh"
if [ -n "${TESTS:-}" ]; then
  timeout 200 ./bin/gpu_daemon_test --gtest_filter="$TESTS" > "$out/gpu_daemon.txt" 2>&1
  echo "gpu tests rc=$?"
  grep -E "^\[ +(OK|FAILED|PASSED) |Failure|Expected|Which|wrong|status:" "$out/gpu_daemon.txt" | head -40
fi
bench=./bin/collective-bench
{
  date -u +"# %Y-%m-%dT%H:%MZ"
  echo "## copy and memset ceilings per size"
  timeout 60 $bench -t ceilings -b 8M -e 2G -f 2 -n 20 -w 3
  for g in ${RANKS:-2 8}; do
    for t in all_reduce all_gather; do
      algos="auto"; [ $t = all_reduce ] && algos="oneshot twoshot"
      for a in $algos; do
        for p in single post; do
          for G in 0 5; do
            echo "## in-process $t, $g ranks, -a $a -p $p -G $G"
            timeout 60 $bench -t $t -g $g -b 16M -e 256M -f 4 -a $a -p $p -G $G -c 0 -n 20 -w 5 | grep -v "^# least"
          done
        done
      done
    done
  done
  # The fixed cost per op against the number of ranks: a tiny op, replayed,
  # with one launch per rank (start and end barriers) and with one fused
  # launch for every rank (no barriers): launches of ranks sharing a GPU
  # start one after another, and the start barrier waits for the last.
  for g in 2 4 8; do
    for a in twoshot fused; do
      echo "## fixed cost: in-process all_reduce, $g ranks, -a $a -p single -G 5"
      timeout 30 $bench -t all_reduce -g $g -b 64K -e 16M -f 16 -a $a -p single -G 5 -c 0 -n 20 -w 5 | grep -v "^# least"
    done
  done
} > "$out/small_sizes_inproc.txt" 2>&1
echo "in-process rc=$?"
work=$(mktemp -d)
./bin/collectived --socket "$work/c.sock" --backend cuda --max-message-bytes $((64 << 20)) \
  --max-buffer-bytes $((16 << 30)) --log-level warn > "$work/d.log" 2>&1 &
daemon=$!
for _ in $(seq 200); do [ -S "$work/c.sock" ] && break; sleep 0.05; done
{
  for g in ${RANKS:-2 8}; do
    for t in all_reduce all_gather; do
      for G in 0 5; do
        echo "## daemon $t, $g ranks, -z 1 -G $G"
        timeout 60 $bench -D "$work/c.sock" -k "s-$t-$g-$G" -t $t -g $g -b 16M -e 256M -f 4 -z 1 -G $G -c 0 \
          -n 20 -w 5 | grep -v "^# least"
      done
    done
  done
  # Latency, 16 KiB-1 MiB (the issue's sizes), eager and graph-replayed,
  # next to the in-process single launch of the same run.
  for g in 2 8; do
    for G in 0 10; do
      echo "## latency: in-process all_reduce, $g ranks, -p single -G $G"
      timeout 30 $bench -t all_reduce -g $g -b 16K -e 1M -f 4 -p single -G $G -c 0 -n 50 -w 20 | grep -v "^# least"
      echo "## latency: daemon all_reduce, $g ranks, -z 1 -G $G"
      timeout 30 $bench -D "$work/c.sock" -k "l-$g-$G" -t all_reduce -g $g -b 16K -e 1M -f 4 -z 1 -G $G -c 1 \
        -n 50 -w 20 | grep -v "^# least"
    done
  done
} > "$out/small_sizes_daemon.txt" 2>&1
echo "daemon rc=$?"
kill -TERM $daemon; wait $daemon
cp "$work/d.log" "$out/daemon.log"
rm -rf "$work"
grep -E "^## |^ +(16384|65536|1048576|16777216|67108864) " "$out"/small_sizes_*.txt | cut -c1-220
