#!/usr/bin/env bash
# One daemon per node of HOSTFILE under mpirun (docs/multinode.md).
# --enable-recovery keeps the others running when one daemon dies (without
# it mpirun ends the whole job). Extra arguments go to collectived.
#   bash deploy/cluster/launch-mpirun.sh HOSTFILE [collectived flags...]
set -eu
hostfile=${1:?usage: launch-mpirun.sh HOSTFILE [collectived flags...]}; shift
nodes=$(grep -cv '^\s*\(#\|$\)' "$hostfile")
as_root=(); [ "$(id -u)" = 0 ] && as_root=(--allow-run-as-root)
exec mpirun "${as_root[@]}" --hostfile "$hostfile" -np "$nodes" --map-by ppr:1:node --bind-to none \
  --enable-recovery collectived --cluster mpi "$@"
