# Sourced by scripts/test.sh and scripts/bench.sh (which define `log` first): where things are
# cached, tansu's install, and brokers started on free loopback ports in a temporary directory,
# all stopped (and the directory removed) when the script exits.

CACHE="${KAFKA_DEDUP_CACHE:-$HOME/.cache/kafka-dedup}"
mkdir -p "$CACHE"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE/target}"
TANSU_VERSION=0.6.0
TANSU="$CACHE/tansu-$TANSU_VERSION/bin/tansu"

# tansu built from crates.io with its SQLite engine, once per machine.
install_tansu() {
  if [ ! -x "$TANSU" ]; then
    log "building tansu $TANSU_VERSION with the SQLite engine into $CACHE (once per machine, ~15 min)"
    cargo install tansu --version "$TANSU_VERSION" --locked --features libsql --root "$CACHE/tansu-$TANSU_VERSION"
  fi
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

WORK="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# start_broker NAME BINARY STORAGE_ENGINE: starts a tansu broker on a free port, waits until it
# listens (exits with its log otherwise) and sets BROKER_PORT.
start_broker() {
  local name="$1" bin="$2" storage="$3" port
  port="$(free_port)"
  (cd "$WORK" && exec "$bin" broker --listener-url "tcp://127.0.0.1:$port" \
    --advertised-listener-url "tcp://127.0.0.1:$port" --storage-engine "$storage") >"$WORK/$name.log" 2>&1 &
  pids+=($!)
  wait_port "$port" || { cat "$WORK/$name.log"; log "$name did not start"; exit 1; }
  BROKER_PORT="$port"
}
