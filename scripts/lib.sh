# Shell functions shared by scripts/demo.sh and examples/*/run.sh; source it.

# wait_for_endpoint LOG PID: prints the tcp://127.0.0.1:PORT endpoint the process PID wrote
# to LOG (an aggregator binds port 0 and logs the port it got). Fails, printing LOG, when
# the process exits first or nothing shows within 10 s.
wait_for_endpoint() {
  local log=$1 pid=$2 endpoint=""
  for _ in $(seq 1 100); do
    endpoint=$(grep -o "tcp://127.0.0.1:[0-9]*" "$log" 2>/dev/null | head -1 || true)
    if [[ -n "$endpoint" ]]; then
      echo "$endpoint"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "no endpoint in $log:" >&2
  cat "$log" >&2
  return 1
}

# ensure_package PACKAGE WHAT: installs Debian's PACKAGE (WHAT: what an example needs it for)
# when it is missing.
ensure_package() {
  if ! dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; then
    echo "installing $1 ($2)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$1" >/dev/null
  fi
}

# gen_site_keys BIN COORDINATOR SITE...: a key pair per party in keys/ (fedmesh-keys from
# BIN), and the sites' public keys in keys/allow, the coordinator's allowlist.
gen_site_keys() {
  local bin=$1 coordinator=$2
  shift 2
  # Not group-writable whatever the umask: the aggregator refuses an allowlist others can write.
  mkdir -p -m 755 keys/allow
  "$bin/fedmesh-keys" gen --out "keys/$coordinator" >/dev/null
  for who in "$@"; do
    "$bin/fedmesh-keys" gen --out "keys/$who" >/dev/null
    cp "keys/$who.pub" keys/allow/
  done
}

# start_coordinator BIN ROUNDS: starts fedmesh-aggregator --config aggregator.toml on a port
# the OS picks, logging to coordinator.log, with the process killed when the script exits;
# sets agg (its pid) and endpoint. Other background processes go into the pids array.
pids=()
kill_started() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
start_coordinator() {
  trap kill_started EXIT
  "$1/fedmesh-aggregator" --config aggregator.toml --set "aggregator.listen=tcp://127.0.0.1:*" \
    --set "rounds.total=$2" >coordinator.log 2>&1 &
  agg=$!
  pids+=("$agg")
  endpoint=$(wait_for_endpoint coordinator.log "$agg")
}

# bench_ort_python BUILD: prints an interpreter with onnxruntime, onnx and numpy for the
# bench checks that compare with onnxruntime: $ORT_PYTHON when set, else the venv
# BUILD/bench-venv, made with pip (and $VENV_PYTHON, default python3) when missing.
# onnxruntime is a dependency of those checks only.
bench_ort_python() {
  if [[ -n "${ORT_PYTHON:-}" ]]; then
    echo "$ORT_PYTHON"
    return 0
  fi
  local venv="$1/bench-venv"
  if ! "$venv/bin/python" -c 'import onnxruntime, onnx, numpy' 2>/dev/null; then
    echo "creating $venv (pip install onnxruntime onnx numpy)" >&2
    "${VENV_PYTHON:-python3}" -m venv "$venv" >&2
    "$venv/bin/pip" install -q onnxruntime onnx numpy >&2
  fi
  echo "$venv/bin/python"
}
