#!/usr/bin/env bash
# The GPU issue's checks, from a bundle made by bench/gpu_bundle.sh, on a GPU machine with the
# NVIDIA driver, CUDA 13 and PyTorch but no fedmesh dependencies and no network. Run from
# the repository root with .gpu/ beside it; logs go to OUT. Prints, in this order:
#   the machine (GPU, driver, CUDA, PyTorch);
#   tests: every CUDA test (core_tests and sim_tests, '*Cuda*:*Batched*'; a skip counts as a failure);
#   full: core_tests and sim_tests in full on the GPU build (4 shards each, in parallel);
#   fedmesh-node --local-only, one cnn epoch on cuda, and the same on the CPU for comparison;
#   bench/gpu_train_throughput.sh, bench/gpu_batched_clients.sh, fedmesh_gpu_codec_throughput;
#   graph: imported ONNX models (.gpu/onnx/, exported by bench/gpu_bundle.sh) trained for an
#     epoch on the GPU by fedmesh-node vs PyTorch on the same GPU (bench/graph_train_torch.py);
#   allreduce: two fedmesh-node ranks in [train] mode = "allreduce" with device = "cuda";
#   engine: the built-ins on the GPU on the graph executor vs their layer code
#     (bench/builtin_engine_throughput.sh with DEVICE, one epoch each, best of REPEATS): what
#     [train] engine = "auto" should pick on a GPU.
#   OUT=/tmp/out STEPS="tests full node train batched codec graph allreduce engine" bench/gpu_device_run.sh
# Environment: OUT (runs/gpu), STEPS (all nine), REPEATS (2), ROUNDS (3), FULL_TIMEOUT (400 s
# per shard of the full suites).
# DRY_RUN=1 checks the graph and allreduce steps on a machine without a GPU before device time
# is spent on them: no bundle, the local build (build/), ONNX models exported into a scratch
# folder, everything on device cpu (PyTorch too):
#   DRY_RUN=1 STEPS="graph allreduce engine" REPEATS=1 bench/gpu_device_run.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# Logs are written to a scratch folder and packed into OUT/logs.tar.gz at the end (the device
# tool returns at most 8 files); the summary is printed.
final=${OUT:-$root/runs/gpu}
out=$(mktemp -d)
steps=${STEPS:-tests full node train batched codec graph allreduce engine}
build=$root/build
mkdir -p "$final" "$build"
status=0
step() { echo; echo "== $* ($(date -u +%T))"; }
want() { [[ " $steps " == *" $1 "* ]]; }

device=cuda
onnx=.gpu/onnx
py=python3  # the device machine's, with PyTorch for CUDA
if [[ "${DRY_RUN:-0}" == 1 ]]; then
  device=cpu
  py=/usr/bin/python3  # Debian's, with python3-torch
  [[ -e "$build/CMakeCache.txt" ]] || { echo "DRY_RUN needs a local build in $build" >&2; exit 2; }
  onnx=$out/onnx
  /usr/bin/python3 examples/pytorch/models.py --out "$onnx" --models fmnist_mlp,fmnist_resnet >/dev/null || exit 1
else
  step machine
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
    --format=csv | tee "$out/device.txt"
  { nvcc --version | tail -1; ldd --version | head -1; grep PRETTY /etc/os-release; nproc
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
  torch.cuda.get_device_name(0))'; } 2>&1 | tee -a "$out/device.txt"

  # The bundle unpacks into build/ because the test binaries were built there; never over a real build.
  [[ -e "$build/CMakeCache.txt" ]] && { echo "refusing: $build is a CMake build folder" >&2; exit 2; }
  tar -C "$build" -xJf .gpu/bundle.tar.xz || exit 1
  # The machine's CUDA libraries, linked beside the bundle's (its RPATH is $ORIGIN/lib).
  for l in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
    p=$(ldconfig -p | awk -v l="$l" '$1 == l {print $NF; exit}')
    [[ -n "$p" ]] || p=$(find /usr/local/cuda/ /usr/local/ /opt/ /usr/lib/ -name "$l" 2>/dev/null | head -1)
    [[ -n "$p" ]] || { echo "no $l on this machine" >&2; exit 1; }
    ln -sf "$p" "$build/lib/$l"
  done
  # cuDNN (the GPU convolutions): the machine's libcudnn.so.9, often inside PyTorch's Python
  # packages; it loads its sub-libraries (libcudnn_cnn.so.9, ...) from the loader's path.
  p=$(ldconfig -p | awk '$1 == "libcudnn.so.9" {print $NF; exit}')
  [[ -n "$p" ]] || p=$(find /usr/local/cuda/ /usr/local/ /opt/ /usr/lib/ -name libcudnn.so.9 2>/dev/null | head -1)
  if [[ -n "$p" ]]; then
    ln -sf "$p" "$build/lib/libcudnn.so.9"
    export LD_LIBRARY_PATH=$(dirname "$p")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "cuDNN: $p" | tee -a "$out/device.txt"
  else
    echo "no libcudnn.so.9 on this machine" >&2
    exit 1
  fi
  # The build's libstdc++ where the machine's is older (GLIBCXX_3.4.30 is GCC 12's).
  sys_cxx=$(ldconfig -p | awk '$1 == "libstdc++.so.6" {print $NF; exit}')
  grep -qa GLIBCXX_3.4.30 "$sys_cxx" || cp "$build"/compat/* "$build/lib/"
  if [[ ! -e /usr/share/datasets/fashion-mnist ]]; then
    mkdir -p /usr/share/datasets && ln -s "$root/.gpu/fashion-mnist" /usr/share/datasets/fashion-mnist
  fi
  # The test binaries look for fixtures under the source folder they were built in.
  if [[ "$root" != /work/main && ! -e /work/main ]]; then mkdir -p /work && ln -s "$root" /work/main; fi
fi

if want tests; then
  step "CUDA tests"
  for t in core_tests sim_tests; do
    (cd "$build" && timeout 300 "./$t" --gtest_filter='*Cuda*:*Batched*' >"$out/$t.cuda.log" 2>&1) ||
      status=1
    grep -E "^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]|tests ran" "$out/$t.cuda.log"
    grep -E "^\[  (FAILED|SKIPPED) *\] [A-Za-z]" "$out/$t.cuda.log" | sort -u
    # Tests of the no-device path skip with "a CUDA device is present"; a GPU test may not skip.
    if grep -q "^no CUDA device" "$out/$t.cuda.log"; then echo "$t: GPU tests skipped"; status=1; fi
  done
fi

if want full; then
  step "core_tests and sim_tests in full, 4 shards each"
  pids=()
  for t in core_tests sim_tests; do
    for i in 0 1 2 3; do
      (cd "$build" && GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout "${FULL_TIMEOUT:-400}" "./$t" \
        >"$out/$t.shard$i.log" 2>&1) &
      pids+=($!)
    done
  done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  cat "$out"/*.shard*.log | grep -E "^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]" | awk '{n[$2]+=$4} END {
    for (k in n) printf "%s %d\n", k, n[k]}'
  cat "$out"/*.shard*.log | grep -E "^\[  (FAILED|SKIPPED) *\] [A-Za-z].*\)$" | sort -u
fi

if want node; then
  step "fedmesh-node --local-only cnn, 1 epoch: cuda, then cpu"
  for d in cuda cpu; do
    timeout 300 "$build/bin/fedmesh-node" --local-only --model cnn --epochs 1 --batch 64 --lr 0.05 \
      --momentum 0.9 --device "$d" 2>&1 | tee "$out/node_$d.log" | grep -E "model cnn|done:" ||
      status=1
  done
fi

if want train; then
  step "training throughput vs PyTorch"
  BUILD=$build REPEATS=${REPEATS:-2} timeout 400 bench/gpu_train_throughput.sh 2>&1 |
    tee "$out/train_throughput.txt" || status=1
fi

if want batched; then
  step "batched clients vs sequential"
  for e in 1 5; do
    echo "local epochs: $e"
    EPOCHS=$e BUILD=$build ROUNDS=${ROUNDS:-3} REPEATS=${REPEATS:-2} LOG="$out/batched_sim.log" \
      timeout 400 bench/gpu_batched_clients.sh 2>&1 | tee -a "$out/batched_clients.txt" || status=1
    # Where the batched runs' rounds went (Train vs finishing vs the rest), last two runs.
    grep "batched rounds" "$out/batched_sim.log" | tail -2
  done
fi

if want codec; then
  step "GPU codecs vs device memcpy and the CPU codec"
  timeout 300 "$build/bench/fedmesh_gpu_codec_throughput" 2>&1 | tee "$out/codec.txt" || status=1
  python3 -c '
import torch
x = torch.empty(1 << 28, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
t = []
for _ in range(10):
    s.record(); y.copy_(x); e.record(); e.synchronize(); t.append(s.elapsed_time(e) / 1e3)
t.sort(); print("torch device copy: %.0f GB/s (read + write)" % (2 * x.numel() / t[5] / 1e9))
' 2>&1 | tee -a "$out/codec.txt"
fi
if want graph; then
  step "graph models (ONNX) on device $device: fedmesh-node vs PyTorch, one epoch, best of ${REPEATS:-2}"
  field() { sed -n "s/.*\"$1\": *\"\{0,1\}\([^,\"}]*\).*/\1/p" | tail -1; }
  printf "%-8s %-6s %8s %12s %12s %7s\n" model batch samples fedmesh_sps torch_sps ratio
  for cfg in "mlp 32 1" "mlp 256 1" "resnet 32 5" "resnet 256 5"; do
    read -r model batch parts <<<"$cfg"
    f=0 p=0 samples=0
    for ((r = 0; r < ${REPEATS:-2}; ++r)); do
      rm -f "$out/graph.jsonl"
      timeout 300 "$build/bin/fedmesh-node" --local-only --model "$onnx/fmnist_$model.onnx" --device "$device" \
        --data fashion-mnist --num-partitions "$parts" --index 0 --epochs 1 --batch "$batch" --lr 0.01 \
        --momentum 0.9 --metrics "$out/graph.jsonl" >>"$out/graph_node.log" 2>&1 || status=1
      v=$(field epoch_samples_per_s <"$out/graph.jsonl"); samples=$(field train_samples <"$out/graph.jsonl")
      f=$(awk -v a="$f" -v b="${v:-0}" 'BEGIN{print (b > a ? b : a)}')
      v=$(timeout 300 "$py" bench/graph_train_torch.py --model "$model" --batch "$batch" --threads 1 \
            --samples "${samples:-1}" --device "$device" --blas system --json 2>>"$out/graph_torch.log" |
          field epoch_samples_per_s)
      p=$(awk -v a="$p" -v b="${v:-0}" 'BEGIN{print (b > a ? b : a)}')
    done
    printf "%-8s %-6s %8s %12.0f %12.0f %7.2f\n" "$model" "$batch" "$samples" "$f" "$p" \
      "$(awk -v a="$f" -v b="$p" 'BEGIN{print (b > 0 ? a / b : 0)}')"
  done | tee "$out/graph.txt"
  grep -m1 "device\|cuda" "$out/graph_node.log" || true
fi

if want allreduce; then
  step "allreduce mode, 2 ranks with device = $device, 2 epochs of the mlp"
  ar=$(mktemp -d)
  source bench/allreduce_ranks.sh
  allreduce_keys "$ar" 2 "$build/bin" || status=1
  allreduce_configs "$ar" 2 "device = \"$device\"
threads = 1
epochs = 2
batch = 32
lr = 0.1"
  pids=()
  for i in 1 2; do
    (cd "$ar" && timeout 300 "$build/bin/fedmesh-node" --config "site-$i.toml" >"$out/allreduce_rank$i.log" 2>&1) &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  grep -h "rank \|device\|cuda" "$out"/allreduce_rank*.log | head -4
  for i in 1 2; do tail -1 "$ar/run/site-$i.jsonl" | tee "$out/allreduce_last$i.json" | grep -o '"test_accuracy":[0-9.]*\|"model_sha256":"[0-9a-f]*"'; done
  s1=$(grep -o '"model_sha256":"[0-9a-f]*"' "$out/allreduce_last1.json"); s2=$(grep -o '"model_sha256":"[0-9a-f]*"' "$out/allreduce_last2.json")
  if [[ -n "$s1" && "$s1" == "$s2" ]]; then echo "allreduce: both ranks end with the same model"; else echo "allreduce: models differ"; status=1; fi
fi
if want engine; then
  step "built-in models on device $device: graph executor vs layer code, one epoch, best of ${REPEATS:-2}"
  DEVICE=$device REPEATS=${REPEATS:-2} THREADS=1 BUILD=$build WORK=$out/engine \
    timeout 900 bash bench/builtin_engine_throughput.sh 2>"$out/engine.log" | tee "$out/engine.txt" || status=1
fi
tar -C "$out" -czf "$final/logs.tar.gz" .
step "done: status $status"
exit $status
