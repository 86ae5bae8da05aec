#!/usr/bin/env bash
# Runs every fuzz target built by fuzz/build.sh for N executions (default 1,000,000), seeded
# from a fresh seed corpus (make_corpus for the codec targets, the fixture models of
# tests/fixtures/onnx for onnx), one target at a time (JOBS=2: two at a time), and prints
# libFuzzer's execution count per target. New corpus entries go to
# build-fuzz/corpus/<target>, crash reproducers and logs to build-fuzz/runs/.
# Usage: fuzz/run.sh [runs] [target...]
#        env: MAX_LEN (default 4096 for the codec targets, 200000 for onnx), JOBS=1
# Reproduce a crash: build-fuzz/<target>_fuzz <crash file>
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/build-fuzz"
runs="${1:-1000000}"
shift || true
max_len="${MAX_LEN:-}"
jobs="${JOBS:-1}"
if [[ $# -gt 0 ]]; then
  targets=("$@")
else
  targets=()
  for f in "$root"/fuzz/*_fuzz.cc; do targets+=("$(basename "$f" _fuzz.cc)"); done
fi
codec=false
for t in "${targets[@]}"; do
  [[ -x "$out/${t}_fuzz" ]] || { echo "no $out/${t}_fuzz: run fuzz/build.sh first" >&2; exit 1; }
  if [[ $t == onnx ]]; then
    mkdir -p "$out/corpus/onnx"
    for f in "$root"/tests/fixtures/onnx/*/*.onnx; do
      cp "$f" "$out/corpus/onnx/seed-$(basename "$(dirname "$f")")-$(basename "$f")"
    done
  else
    codec=true
  fi
done
if $codec; then
  [[ -x "$out/make_corpus" ]] || { echo "run fuzz/build.sh first" >&2; exit 1; }
  "$out/make_corpus" "$out/corpus" >/dev/null
fi
mkdir -p "$out/runs"

run_one() {  # <target>
  local t=$1 log="$out/runs/$1.log" rc=0 len="$max_len"
  # ONNX models are kilobytes (the fixtures up to 23 KB): a codec-sized limit would cut them.
  [[ -z $len ]] && { [[ $t == onnx ]] && len=200000 || len=4096; }
  "$out/${t}_fuzz" -runs="$runs" -max_len="$len" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$out/runs/${t}-" "$out/corpus/$t" \
      >"$log" 2>&1 || rc=$?
  local done_line
  done_line="$(grep -E '^Done [0-9]+ runs' "$log" | tail -1 || true)"
  if [[ $rc -eq 0 && -n $done_line ]]; then
    printf '%-8s %s\n' "$t" "$done_line"
  else
    printf '%-8s FAILED (exit %d), see %s\n' "$t" "$rc" "$log"
    return 1
  fi
}
export -f run_one
export out runs max_len
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one {}'
