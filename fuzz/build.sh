#!/usr/bin/env bash
# Builds the codec libFuzzer targets (fuzz/*_fuzz.cc) with ASan + UBSan into build-fuzz/,
# and make_corpus, which writes their seed corpus. Needs clang++ (14 or newer) and libzstd.
# Usage: fuzz/build.sh          (env: CXX=clang++-15, JOBS=4, FUZZ_ARCH="-march=x86-64-v3")
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/build-fuzz"
cxx="${CXX:-clang++}"
jobs="${JOBS:-$(nproc)}"
# The codec stages are built with -march=x86-64-v3 in CMake (F16C fp16 path); fuzz the same
# code unless the CPU lacks it (FUZZ_ARCH= to force the portable path).
if [[ -z "${FUZZ_ARCH+x}" ]]; then
  FUZZ_ARCH=""
  grep -qw avx2 /proc/cpuinfo && grep -qw f16c /proc/cpuinfo && FUZZ_ARCH="-march=x86-64-v3"
fi
common=(-std=c++20 -O1 -g -I"$root" -Wall -Wextra -fno-sanitize-recover=all)
fuzz_flags=(-fsanitize=fuzzer,address,undefined)
plain_flags=(-fsanitize=address,undefined)

srcs=("$root"/core/codec/*.cc "$root/core/rng.cc" "$root/core/status.cc"
      "$root/fuzz/codec_fuzz_targets.cc")
mkdir -p "$out/obj-fuzz" "$out/obj-plain"

# Every library source twice: with libFuzzer's coverage instrumentation for the targets,
# without it for make_corpus (a plain main cannot link the fuzzer's coverage hooks).
compile() {  # <flavour> <source>
  local flavour=$1 src=$2 obj
  obj="$out/obj-$flavour/$(echo "${src#$root/}" | tr / _).o"
  if [[ $flavour == fuzz ]]; then
    "$cxx" "${common[@]}" "${fuzz_flags[@]}" $FUZZ_ARCH -c "$src" -o "$obj"
  else
    "$cxx" "${common[@]}" "${plain_flags[@]}" $FUZZ_ARCH -c "$src" -o "$obj"
  fi
}
export -f compile
export root out cxx FUZZ_ARCH
{
  for s in "${srcs[@]}"; do echo "fuzz $s"; echo "plain $s"; done
  echo "plain $root/fuzz/make_corpus.cc"
} | xargs -P "$jobs" -L 1 bash -c "$(declare -p common fuzz_flags plain_flags); compile \$0 \$1"

lib_fuzz=()
lib_plain=()
for s in "${srcs[@]}"; do
  name="$(echo "${s#$root/}" | tr / _).o"
  lib_fuzz+=("$out/obj-fuzz/$name")
  lib_plain+=("$out/obj-plain/$name")
done

targets=()
for f in "$root"/fuzz/*_fuzz.cc; do targets+=("$(basename "$f" .cc)"); done
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} \
  "$cxx" "${common[@]}" "${fuzz_flags[@]}" $FUZZ_ARCH "$root/fuzz/{}.cc" "${lib_fuzz[@]}" \
  -lzstd -o "$out/{}"
"$cxx" "${common[@]}" "${plain_flags[@]}" "$out/obj-plain/fuzz_make_corpus.cc.o" \
  "${lib_plain[@]}" -lzstd -o "$out/make_corpus"
echo "built ${targets[*]} make_corpus in $out"
