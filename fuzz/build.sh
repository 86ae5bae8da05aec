#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*_fuzz.cc) with ASan + UBSan into build-fuzz/: the codec
# targets, with make_corpus, which writes their seed corpus; and the onnx target (ONNX reader
# and graph executor), whose seed corpus is the fixture models of tests/fixtures/onnx.
# Needs clang++ (14 or newer) and libzstd; the onnx target also libonnx-dev, libprotobuf-dev
# and libopenblas-openmp-dev.
# Usage: fuzz/build.sh [target...]   (default: every target; e.g. fuzz/build.sh onnx)
#        env: CXX=clang++-15, JOBS=4, FUZZ_ARCH="-march=x86-64-v3"
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/build-fuzz"
cxx="${CXX:-clang++}"
jobs="${JOBS:-$(nproc)}"
# The codec stages and graph ops are built with -march=x86-64-v3 in CMake (F16C fp16 path);
# fuzz the same code unless the CPU lacks it (FUZZ_ARCH= to force the portable path).
if [[ -z "${FUZZ_ARCH+x}" ]]; then
  FUZZ_ARCH=""
  grep -qw avx2 /proc/cpuinfo && grep -qw f16c /proc/cpuinfo && FUZZ_ARCH="-march=x86-64-v3"
fi
common=(-std=c++20 -O1 -g -I"$root" -Wall -Wextra -fno-sanitize-recover=all)
fuzz_flags=(-fsanitize=fuzzer,address,undefined)
plain_flags=(-fsanitize=address,undefined)
blas_dir=/usr/lib/x86_64-linux-gnu/openblas-openmp
# Only for the sources of the onnx target (ONNX's generated types, cblas.h, OpenMP).
onnx_flags=(-DONNX_ML=1 -DONNX_NAMESPACE=onnx -I/usr/include/x86_64-linux-gnu/openblas-openmp
            -fopenmp)
onnx_libs=(-fopenmp -lonnx_proto -lprotobuf "$blas_dir/libopenblas.so" -Wl,-rpath,"$blas_dir")

shared_srcs=("$root/core/rng.cc" "$root/core/status.cc")
codec_srcs=("$root/fuzz/codec_fuzz_targets.cc")
# The codec stages, without update_prediction.cc: no decoder, and it needs the wire library.
for s in "$root"/core/codec/*.cc; do
  [[ $s == */update_prediction.cc ]] || codec_srcs+=("$s")
done
onnx_srcs=("$root/core/onnx/onnx_reader.cc" "$root"/core/graph/*.cc "$root"/core/graph/ops/*.cc
           "$root/core/cpu/cpu_backend.cc" "$root/core/sha256.cc" "$root/fuzz/onnx_fuzz_target.cc"
           "$root/core/cuda_stub.cc")  # no CUDA here: MakeCudaKernel refuses every op

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  for f in "$root"/fuzz/*_fuzz.cc; do targets+=("$(basename "$f" _fuzz.cc)"); done
fi
want_codec=false want_onnx=false
for t in "${targets[@]}"; do
  [[ -f "$root/fuzz/${t}_fuzz.cc" ]] || { echo "no target $t (fuzz/${t}_fuzz.cc)" >&2; exit 2; }
  if [[ $t == onnx ]]; then want_onnx=true; else want_codec=true; fi
done
mkdir -p "$out/obj-fuzz" "$out/obj-plain"

obj_name() { echo "$(echo "${1#$root/}" | tr / _).o"; }
# Every library source twice: with libFuzzer's coverage instrumentation for the targets,
# without it for make_corpus (a plain main cannot link the fuzzer's coverage hooks).
compile() {  # <flavour> <group> <source>
  local flavour=$1 group=$2 src=$3 obj extra=()
  obj="$out/obj-$flavour/$(echo "${src#$root/}" | tr / _).o"
  [[ $group == onnx ]] && extra=("${onnx_flags[@]}")
  if [[ $flavour == fuzz ]]; then
    "$cxx" "${common[@]}" "${fuzz_flags[@]}" "${extra[@]}" $FUZZ_ARCH -c "$src" -o "$obj"
  else
    "$cxx" "${common[@]}" "${plain_flags[@]}" "${extra[@]}" $FUZZ_ARCH -c "$src" -o "$obj"
  fi
}
export -f compile
export root out cxx FUZZ_ARCH
{
  for s in "${shared_srcs[@]}"; do
    echo "fuzz shared $s"
    $want_codec && echo "plain shared $s"
  done
  if $want_codec; then
    for s in "${codec_srcs[@]}"; do echo "fuzz codec $s"; echo "plain codec $s"; done
    echo "plain codec $root/fuzz/make_corpus.cc"
  fi
  if $want_onnx; then
    for s in "${onnx_srcs[@]}"; do echo "fuzz onnx $s"; done
  fi
} | xargs -P "$jobs" -L 1 bash -c \
    "$(declare -p common fuzz_flags plain_flags onnx_flags); compile \$0 \$1 \$2"

lib_codec=() lib_codec_plain=() lib_onnx=()
for s in "${shared_srcs[@]}" "${codec_srcs[@]}"; do
  lib_codec+=("$out/obj-fuzz/$(obj_name "$s")")
  lib_codec_plain+=("$out/obj-plain/$(obj_name "$s")")
done
for s in "${shared_srcs[@]}" "${onnx_srcs[@]}"; do lib_onnx+=("$out/obj-fuzz/$(obj_name "$s")"); done

link() {  # <target>
  local t=$1
  if [[ $t == onnx ]]; then
    "$cxx" "${common[@]}" "${fuzz_flags[@]}" $FUZZ_ARCH "$root/fuzz/onnx_fuzz.cc" "${lib_onnx[@]}" \
      "${onnx_libs[@]}" -o "$out/onnx_fuzz"
  else
    "$cxx" "${common[@]}" "${fuzz_flags[@]}" $FUZZ_ARCH "$root/fuzz/${t}_fuzz.cc" \
      "${lib_codec[@]}" -lzstd -o "$out/${t}_fuzz"
  fi
}
export -f link
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c \
  "$(declare -p common fuzz_flags onnx_libs lib_codec lib_onnx); link {}"
built=()
for t in "${targets[@]}"; do built+=("${t}_fuzz"); done
if $want_codec; then
  "$cxx" "${common[@]}" "${plain_flags[@]}" "$out/obj-plain/fuzz_make_corpus.cc.o" \
    "${lib_codec_plain[@]}" -lzstd -o "$out/make_corpus"
  built+=(make_corpus)
fi
if $want_onnx; then
  # The onnx seed corpus: every fixture model (run.sh refreshes it the same way).
  mkdir -p "$out/corpus/onnx"
  for f in "$root"/tests/fixtures/onnx/*/*.onnx; do
    cp "$f" "$out/corpus/onnx/seed-$(basename "$(dirname "$f")")-$(basename "$f")"
  done
fi
echo "built ${built[*]} in $out"
