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
