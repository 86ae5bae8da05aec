#!/usr/bin/env bash
# Federated normalization in onnxruntime: runs the two federation tests that export a
# normalized model (a table with the breast-cancer MLP; 8 x 8 RGB images with the built-in
# mlp, per channel), keeps their folders, and checks the exported files in onnxruntime:
# onnx.checker full_check, accuracy on the sites' raw rows / raw NCHW images, and that a
# missing cell (NaN) gives exactly the output of the row with the federation's mean there.
#   bench/normalized_export.sh
# Environment: BUILD (build), ORT_PYTHON (an interpreter with onnxruntime, onnx and numpy;
#   default: the venv BUILD/bench-venv, made with pip if missing: scripts/lib.sh bench_ort_python).
# onnxruntime is a dependency of this check only.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$root/build}
[[ -x "$build/node_tests" ]] || { echo "build first: scripts/build.sh (with tests)" >&2; exit 2; }
source "$root/scripts/lib.sh"
ort_py=$(bench_ort_python "$build")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
TEST_TMPDIR=$work TMPDIR=$work FEDMESH_KEEP_TEST_DIRS=1 "$build/node_tests" \
  --gtest_filter='FederationTest.FederationNormalizes*' | grep -E '^\[ +(OK|FAILED) '
"$ort_py" "$root/bench/normalized_export.py" "$work"/fedmesh_fed_FederationNormalizesInputs*/ \
  "$work"/fedmesh_fed_FederationNormalizesImages*/
