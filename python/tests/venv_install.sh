#!/usr/bin/env bash
# `pip install ./python` into a fresh venv (offline: Debian's numpy and torch through
# --system-site-packages, setuptools as the build backend), then import the package, its
# torch helpers and the example trainer's module, from outside the source tree.
# Usage: venv_install.sh VENV_DIR
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv=$1
rm -rf "$venv"
/usr/bin/python3 -m venv --system-site-packages "$venv"
# A copy, so that the install writes no build files into the source tree.
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cp -r "$root/python" "$src/"
rm -rf "$src/python/tests"
"$venv/bin/pip" install --quiet --no-build-isolation --no-deps --no-index "$src/python"
cd "$src"
"$venv/bin/python" - "$root" <<'PY'
import importlib.util, os, sys
import fedmesh, fedmesh.torch
assert fedmesh.__file__.startswith(sys.prefix), fedmesh.__file__  # the installed copy
print("fedmesh", fedmesh.__version__, "installed at", os.path.dirname(fedmesh.__file__))
root = sys.argv[1]
sys.path.insert(0, os.path.join(root, "examples", "pytorch"))
spec = importlib.util.spec_from_file_location("train", os.path.join(root, "examples", "pytorch", "train.py"))
train = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train)
assert train.fedmesh is fedmesh, "the example must use the installed package"
print("examples/pytorch/train.py imports cleanly")
PY
