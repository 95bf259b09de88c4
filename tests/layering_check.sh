#!/usr/bin/env bash
# The floors of the house: a folder may include only from its own floor's
# folders and those below (docs/architecture.md). Test files (*_test.cc) may
# also use tests/support. Prints every include that runs up a floor; exit 1
# if there is one.
#   layering_check.sh SOURCE_DIR
set -u
src=${1:?usage: layering_check.sh SOURCE_DIR}
# folder -> the top-level folders it may include from ("collectived" is include/collectived).
declare -A allowed=(
  [include]="collectived"
  [base]="collectived base"
  [ring]="collectived base ring"
  [ipc]="collectived base ipc"
  [proto]="collectived base proto"
  [kernels]="collectived base ring kernels"
  [executor]="collectived base ring kernels executor"
  [cluster]="collectived base ring kernels executor cluster"
  [client]="collectived base ring ipc proto kernels executor client"
  [daemon]="collectived base ring ipc proto kernels executor cluster daemon"
  [nccl]="collectived base ipc client nccl"
)
bad=0
for folder in "${!allowed[@]}"; do
  [ -d "$src/$folder" ] || continue
  while IFS= read -r hit; do
    file=${hit%%:*}
    target=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"${hit#*:}")
    top=${target%%/*}
    [ "$top" = "$target" ] && continue  # a same-folder header without a path
    # Generated protobuf/gRPC headers belong to proto/; the client API header to client/.
    case "$target" in collectived/v1/* | grpc/*) top=proto ;; collectived/client.h) top=client ;; esac
    case " ${allowed[$folder]} " in *" $top "*) continue ;; esac
    if [ "$top" = tests ] && [[ "$file" == *_test.cc || "$file" == */tests/* ]]; then continue; fi
    echo "up a floor: ${file#$src/} includes \"$target\" ($folder may use: ${allowed[$folder]})"
    bad=1
  done < <(grep -rn --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' -E '^#include "' "$src/$folder" |
           sed -E 's/^([^:]+):[0-9]+:/\1:/')
done
if [ "$bad" -eq 0 ]; then echo "layering: no include runs up a floor"; fi
exit $bad
