#!/usr/bin/env bash
# The throughput table of issue 3 in one device call over a bundle
# (tools/gpu-lab/make_gpu_bundle.sh): all-reduce and all-gather through the daemon,
# client-executed, zero-copy on the symmetric heap, 2/4/8 ranks, 16 MiB-1 GiB,
# graph-replayed (-G 5) and eager; 2-rank sweeps check every element. Then
# the in-process kernel at one and two blocks per SM (-B; two is
# experimental: residency is not guaranteed), to see what occupancy would
# give. Outputs under $OUT.
#   bash gpu-bundle/sweep_probe.sh
# MIDSIZE=1: only issue 19's 16-64 MiB range through the daemon, graph-replayed,
# with the lone copy of each size's traffic in the same run (-t ceilings).
source "$(dirname "$0")/gpu_bundle_env.sh"
bench=./bin/collective-bench
work=$(mktemp -d)
./bin/collectived --socket "$work/c.sock" --backend cuda --max-message-bytes $((64 << 20)) \
  --max-buffer-bytes $((32 << 30)) --log-level warn > "$work/d.log" 2>&1 &
daemon=$!
for _ in $(seq 200); do [ -S "$work/c.sock" ] && break; sleep 0.05; done
{
  date -u +"# %Y-%m-%dT%H:%MZ"
  if [ -n "${MIDSIZE:-}" ]; then $bench -t ceilings -b 8M -e 2G -f 2 -n 20 -w 3; else $bench -t ceilings -b 1G -e 2G -n 20 -w 3; fi
  for g in 2 4 8; do
    c=0; [ $g = 2 ] && c=1
    for t in all_reduce all_gather; do
      Gs="5 0"; [ -n "${MIDSIZE:-}" ] && Gs=5
      for G in $Gs; do
        echo "## daemon $t, $g ranks, -z 1 -G $G -c $c"
        timeout 100 $bench -D "$work/c.sock" -k "$t-$g-$G" -t $t -g $g -b 16M -e "${MIDSIZE:+64M}${MIDSIZE:-1G}" -f 4 -z 1 -G $G -c $c \
          -n 20 -w 5 | grep -v "^# least"
      done
    done
  done
} > "$out/sweep_daemon.txt" 2>&1
echo "daemon sweep rc=$?"
kill -TERM $daemon; wait $daemon
cp "$work/d.log" "$out/daemon.log"
rm -rf "$work"
[ -n "${MIDSIZE:-}" ] && { grep -E "^## |^ +(16777216|67108864) " "$out"/sweep_daemon.txt | cut -c1-200; exit 0; }
{
  for g in 2 8; do
    for t in all_reduce all_gather; do
      for B in 1 2; do
        echo "## in-process $t, $g ranks, -p single -G 5 -B $B"
        timeout 40 $bench -t $t -g $g -b 64M -e 1G -f 4 -p single -G 5 -B $B -c 0 -n 20 -w 5 | grep -v "^# least"
      done
    done
  done
} > "$out/sweep_blocks.txt" 2>&1
echo "blocks rc=$?"
grep -E "^## |^ +(16777216|67108864|268435456|1073741824) " "$out"/sweep_*.txt | cut -c1-200
