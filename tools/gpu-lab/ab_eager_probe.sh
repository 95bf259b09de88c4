#!/usr/bin/env bash
# A/B in one device call: eager (and graph-replayed) small all-reduce latency
# through the daemon, this tree's binaries against an older tree's, alternated
# ROUNDS times so machine drift shows. The older binaries go in
# gpu-bundle/old/{bin,lib} (collectived, collective-bench, libcollectived_client).
#   ROUNDS=3 bash gpu-bundle/ab_eager_probe.sh
source "$(dirname "$0")/gpu_bundle_env.sh"
rounds=${ROUNDS:-3}
run() {  # VARIANT BIN_DIR LIB_PREFIX
  local v=$1 bin=$2 lib=$3 work
  work=$(mktemp -d)
  LD_LIBRARY_PATH=$lib$LD_LIBRARY_PATH "$bin/collectived" --socket "$work/c.sock" --backend cuda \
    --max-message-bytes $((64 << 20)) --max-buffer-bytes $((32 << 30)) --log-level warn > "$work/d.log" 2>&1 &
  local daemon=$!
  for _ in $(seq 200); do [ -S "$work/c.sock" ] && break; sleep 0.05; done
  for g in 2 8; do
    for G in 0 10; do
      echo "## $v, round $r, $g ranks, -G $G"
      LD_LIBRARY_PATH=$lib$LD_LIBRARY_PATH timeout 60 "$bin/collective-bench" -D "$work/c.sock" -k "ab-$g-$G" \
        -g $g -b 16K -e 1M -f 4 -c 1 -n 50 -w 20 -G $G -z 1 | grep -E '^ +[0-9]'
    done
  done
  kill -TERM $daemon; wait $daemon
  rm -rf "$work"
}
for r in $(seq "$rounds"); do
  run new ./bin ""
  run old ./old/bin "$PWD/old/lib:"
done > "$out/ab_eager.txt" 2>&1
echo "ab rc=$?"
