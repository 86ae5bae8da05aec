#!/usr/bin/env bash
# Installs every Debian package fedmesh needs to build, test, run the demo and the
# benchmarks. Idempotent: packages already installed are skipped, and apt is not touched
# when nothing is missing. The list below is the one place dependencies are named.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake pkg-config git
  # libraries the product links
  libzmq3-dev cppzmq-dev libsodium-dev libssl-dev libprotobuf-dev protobuf-compiler libsqlite3-dev
  libopenblas-dev libopenblas-openmp-dev zlib1g-dev libzstd-dev libcli11-dev libspdlog-dev libtomlplusplus-dev
  libonnx-dev libdnnl-dev libstb-dev nlohmann-json3-dev prometheus-cpp-dev libcpp-httplib-dev
  # Debian's oneDNN CMake config (dnnl-config.cmake) fails without OpenCL's library and headers
  ocl-icd-opencl-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # fedmesh-sim sharded over MPI ranks (mpirun -n R fedmesh-sim; docs/simulation.md)
  libopenmpi-dev openmpi-bin
  # the external trainer's tests: the python/ package (pytest, a venv install) and the
  # PyTorch sites of examples/pytorch
  python3-numpy python3-pytest python3-venv python3-setuptools python3-torch python3-onnx
  # real tabular data (breast_cancer.csv) for the vertical/split tests and examples
  python3-sklearn
  # a second parser of the Prometheus endpoints (tests only)
  python3-prometheus-client
  # headless screenshots of the aggregator's status page (tests only)
  chromium
  # demo: data and plots
  dataset-fashion-mnist gnuplot-nox
)
# Baselines used only by bench/ (never linked into the product).
BENCH_PACKAGES=(python3-pip libgloo-dev)

want=("${PACKAGES[@]}")
if [[ "${FEDMESH_SETUP_BENCH:-0}" == "1" ]]; then want+=("${BENCH_PACKAGES[@]}"); fi

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all ${#want[@]} packages present"
  exit 0
fi

echo "setup: installing ${#missing[@]} missing package(s): ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=sudo
  else
    echo "setup: not root and no passwordless sudo. Run as root, or ask an administrator:" >&2
    echo "  apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
