#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test with CTest.
# Exits non-zero if any step or any test fails.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FEDMESH_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
# Explicit, so a build folder configured by demo.sh or by hand still builds every test.
"$root/scripts/build.sh" -DFEDMESH_BUILD_TESTS=ON "$@"
cd "$build"
# Unit tests run two at a time; the training runs (node_tests, each using both cores)
# are marked RUN_SERIAL in CMakeLists.txt so they never share the machine.
# --no-tests=error: a build that somehow produced no tests must not pass as green.
# The longest serial runs (an ONNX ResNet federated to 0.85, about 65 s on 2 cores; the cnn
# trained locally to 0.89, about 85 s; six gossip sites with two killed, about 42 s; external
# PyTorch trainers under secure aggregation with a kill, about 40 s) keep CI under its 30
# minutes by running only with FEDMESH_SLOW_TESTS=1 (or by hand:
# ctest -R 'FederationOnnx|CnnReaches|GossipSixSites|ExternalPyTorchTrainersLearnUnderSecure').
slow='FederationTest.FederationOnnxModelFromTheAggregatorReachesTarget|FedmeshNodeCli.CnnReachesAccuracyTarget'
slow+='|GossipTest.GossipSixSitesSurviveTwoKilledAndAgree'
slow+='|FederationTest.ExternalPyTorchTrainersLearnUnderSecureAggregationAndSurviveAKill'
exclude=()
[[ ${FEDMESH_SLOW_TESTS:-0} == 1 ]] || exclude=(-E "$slow")
ctest --output-on-failure --no-tests=error -j "${FEDMESH_TEST_JOBS:-2}" --timeout 1200 "${exclude[@]}"
