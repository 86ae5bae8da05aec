#!/usr/bin/env bash
# Packs a CUDA build into one folder that runs on a GPU machine which has the NVIDIA driver,
# CUDA 13 and PyTorch but none of fedmesh's Debian libraries and no network (the device
# machine lent to some sessions): the GPU tests, fedmesh-sim, fedmesh-node and the GPU
# benchmarks, stripped, with RPATH $ORIGIN/lib, plus every shared library they need that is
# not glibc, libstdc++ or CUDA (those come from the GPU machine), in one .tar.xz, and
# Fashion-MNIST beside it. bench/gpu_device_run.sh unpacks and runs it there.
#   bench/gpu_bundle.sh [BUILD] [DEST]        # defaults: build/ and .gpu/
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
dest=${2:-$root/.gpu}
[[ -e "$build/libfedmesh_core_cuda.a" ]] || { echo "bundle: $build is not a CUDA build" >&2; exit 2; }
bins=(core_tests sim_tests bin/fedmesh-sim bin/fedmesh-node bin/fedmesh-aggregator bin/fedmesh-keys
      bench/fedmesh_train_throughput
      bench/fedmesh_gpu_codec_throughput)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib" "$stage/bin" "$stage/bench" "$dest"
for b in "${bins[@]}"; do
  cp "$build/$b" "$stage/$b"
  strip --strip-unneeded "$stage/$b"
  # DT_RPATH (not RUNPATH): it also serves the libraries' own dependencies (OpenBLAS's
  # libgfortran), and it holds whether the binary sits in the top folder or one below.
  patchelf --force-rpath --set-rpath '$ORIGIN/lib:$ORIGIN/../lib' "$stage/$b"
  ldd "$build/$b" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libresolv*|libutil*|ld-linux*) ;;
    # Used only where the GPU machine's own are older than the build's (device_run.sh checks).
    libstdc++*|libgcc_s*) mkdir -p "$stage/compat" && cp -L "$lib" "$stage/compat/" ;;
    libcud*|libcublas*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
tar -C "$stage" -cJf "$dest/bundle.tar.xz" .
# The imported models of the graph step (PyTorch exports them here; the device's PyTorch
# trains the same nn.Modules from examples/pytorch/models.py).
/usr/bin/python3 "$root/examples/pytorch/models.py" --out "$dest/onnx" --models fmnist_mlp,fmnist_resnet >/dev/null
mkdir -p "$dest/fashion-mnist"
cp -u /usr/share/datasets/fashion-mnist/*.gz "$dest/fashion-mnist/"
du -sh "$dest"/*
