#!/usr/bin/env bash
# One daemon per node of HOSTFILE under mpirun (docs/multinode.md).
# --enable-recovery keeps the others running when one daemon dies (without
# it mpirun ends the whole job). Extra arguments go to collectived; UCX_*
# variables set here (UCX_NET_DEVICES, UCX_TLS) reach every node.
#   UCX_NET_DEVICES=eth0 bash deploy/cluster/launch-mpirun.sh HOSTFILE [collectived flags...]
set -eu
hostfile=${1:?usage: launch-mpirun.sh HOSTFILE [collectived flags...]}; shift
nodes=$(grep -cv '^\s*\(#\|$\)' "$hostfile")
as_root=(); [ "$(id -u)" = 0 ] && as_root=(--allow-run-as-root)
ucx=(); for v in $(env | sed -n 's/^\(UCX_[A-Za-z0-9_]*\)=.*/\1/p'); do ucx+=(-x "$v"); done
exec mpirun "${as_root[@]}" --hostfile "$hostfile" -np "$nodes" --map-by ppr:1:node --bind-to none \
  --enable-recovery "${ucx[@]}" collectived --cluster mpi "$@"
