#!/usr/bin/env bash
# Ring all-reduce, side by side on this machine: fedmesh (unencrypted, CurveZMQ, AES-256-GCM
# sealed links) vs gloo's ring
# all-reduce (plain and chunked, TCP) vs OpenMPI's MPI_Allreduce (shared memory, and TCP
# only), float32 sum in place, 1 KiB .. 256 MiB, 2 and 4 ranks (threads for fedmesh and gloo,
# processes for MPI). Prints every line and the ratios fedmesh / gloo-ring-chunked.
# Needs: FEDMESH_SETUP_BENCH=1 scripts/setup.sh (libgloo-dev, libopenmpi-dev, openmpi-bin),
# then a build (scripts/build.sh). Usage: bench/collective_allreduce.sh [RANKS...]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bench=${FEDMESH_BUILD_DIR:-$root/build}/bench
ranks_list=("${@:-2 4}")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ranks in ${ranks_list[@]}; do
  for impl in fedmesh-plain fedmesh fedmesh-gcm gloo-chunked gloo; do
    "$bench/fedmesh_collective_allreduce" --impl "$impl" --ranks "$ranks" | tee -a "$out"
  done
  if [[ -x "$bench/fedmesh_mpi_allreduce" ]] && command -v mpirun >/dev/null; then
    mpirun --allow-run-as-root --oversubscribe -n "$ranks" "$bench/fedmesh_mpi_allreduce" | tee -a "$out"
    mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self -n "$ranks" "$bench/fedmesh_mpi_allreduce" |
      sed 's/^openmpi /openmpi-tcp /' | tee -a "$out"
  fi
done
echo
echo "ratios (busbw): fedmesh (plain, CurveZMQ, AES-256-GCM) / gloo-ring-chunked, and fedmesh / openmpi-tcp"
awk '{ bw[$1 " " $2 " " $3] = $6; if ($1 == "gloo-ring-chunked") keys[$2 " " $3] = 1 }
     END {
       printf "%-6s %-11s %-11s %-11s %-11s %-14s %-14s %-10s\n", "ranks", "bytes", "plain/gloo", "curve/gloo",
              "gcm/gloo", "plain/mpi-tcp", "curve/mpi-tcp", "gloo GB/s"
       for (k in keys) {
         g = bw["gloo-ring-chunked " k]; m = bw["openmpi-tcp " k]; split(k, f, " ")
         printf "%-6s %-11s %-11.2f %-11.2f %-11.2f %-14s %-14s %-10.3f\n", f[1], f[2], bw["fedmesh-plain " k] / g,
                bw["fedmesh-curve " k] / g, bw["fedmesh-gcm " k] / g,
                (m == "" ? "-" : sprintf("%.2f", bw["fedmesh-plain " k] / m)),
                (m == "" ? "-" : sprintf("%.2f", bw["fedmesh-curve " k] / m)), g
       }
     }' "$out" | sort -k1,1n -k2,2n
