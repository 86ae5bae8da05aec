# Sourced by the bench scripts that start fedmesh-node ranks in [train] mode = "allreduce"
# (bench/allreduce_accuracy.sh, bench/gpu_device_run.sh); not run on its own.
#
# allreduce_keys DIR N BIN: keys/site-1..N and keys/allow (mode 755) under DIR, made with
#   BIN/fedmesh-keys.
# allreduce_configs DIR N TRAIN [MODEL]: DIR/site-1..N.toml for an N-rank group on free
#   loopback ports, Fashion-MNIST in N partitions (rank i - 1 holds partition i - 1), the
#   store, metrics and logs under DIR/run. TRAIN: the [train] keys after mode (one per line);
#   MODEL: [model] keys (e.g. "seed = 3"), none when empty.

allreduce_keys() {
  local dir=$1 n=$2 bin=$3 i
  mkdir -p "$dir/keys/allow" "$dir/run"
  chmod 755 "$dir/keys/allow"  # fedmesh refuses a group- or world-writable allowlist
  for ((i = 1; i <= n; ++i)); do
    (cd "$dir" && "$bin/fedmesh-keys" gen --out "keys/site-$i" >/dev/null) || return 1
    cp "$dir/keys/site-$i.pub" "$dir/keys/allow/"
  done
}

allreduce_configs() {
  local dir=$1 n=$2 train=$3 model=${4:-} i group=""
  local ports
  read -r -a ports <<<"$(python3 -c 'import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$n")"
  for ((i = 1; i <= n; ++i)); do group+="${group:+, }\"site-$i@tcp://127.0.0.1:${ports[$((i - 1))]}\""; done
  for ((i = 1; i <= n; ++i)); do
    {
      printf '[federation]\nid = "ar"\n[node]\nid = "site-%d"\nkey = "keys/site-%d.key"\n' "$i" "$i"
      printf 'db = "run/site-%d.db"\nmetrics = "run/site-%d.jsonl"\n' "$i" "$i"
      [[ -n "$model" ]] && printf '[model]\n%s\n' "$model"
      printf '[train]\nmode = "allreduce"\n%s\n' "$train"
      printf '[data]\ndataset = "fashion-mnist"\nnum_partitions = %d\nindex = %d\n' "$n" "$((i - 1))"
      printf '[collective]\nlisten = "tcp://127.0.0.1:%d"\ngroup = [%s]\nallow = "keys/allow"\n' \
        "${ports[$((i - 1))]}" "$group"
      printf 'timeout_ms = 60000\n'
    } >"$dir/site-$i.toml"
  done
}
