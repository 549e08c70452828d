#!/usr/bin/env bash
# The benchmarks (BENCHMARKS.md). Starts a fresh tansu broker (its own temporary directory and
# SQLite database: tansu slows as its database grows, so every run starts empty) on a free loopback
# port, runs the end-to-end benchmark against it with any arguments given (e.g.
# `scripts/bench.sh --records 500000`), and stops the broker. tansu is installed as scripts/test.sh
# installs it. `scripts/bench.sh --criterion` runs `cargo bench` (micro-benchmarks) first.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${KAFKA_DEDUP_CACHE:-$HOME/.cache/kafka-dedup}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE/target}"
TANSU_VERSION=0.6.0
TANSU="$CACHE/tansu-$TANSU_VERSION/bin/tansu"
log() { echo "[bench.sh] $*" >&2; }

if [ "${1:-}" = "--criterion" ]; then
  shift
  cargo bench --locked --bench fingerprint --bench table --bench checkpoint --bench recovery --bench memory
fi
if [ ! -x "$TANSU" ]; then
  log "building tansu $TANSU_VERSION with the SQLite engine into $CACHE (once per machine, ~15 min)"
  cargo install tansu --version "$TANSU_VERSION" --locked --features libsql --root "$CACHE/tansu-$TANSU_VERSION"
fi
cargo build --release --locked --bench e2e

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
WORK="$(mktemp -d)"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
PORT="$(free_port)"
(cd "$WORK" && exec "$TANSU" broker --listener-url "tcp://127.0.0.1:$PORT" \
  --advertised-listener-url "tcp://127.0.0.1:$PORT" --storage-engine sqlite://tansu.db) >"$WORK/tansu.log" 2>&1 &
pid=$!
wait_port "$PORT" || { cat "$WORK/tansu.log"; log "tansu did not start"; exit 1; }
log "tansu $TANSU_VERSION (sqlite, fresh database) on 127.0.0.1:$PORT"
cargo bench --locked --bench e2e -- --brokers "127.0.0.1:$PORT" "$@"
