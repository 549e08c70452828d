#!/usr/bin/env bash
# The benchmarks (BENCHMARKS.md). Starts a fresh tansu broker (its own temporary directory and
# SQLite database: tansu slows as its database grows, so every run starts empty) on a free loopback
# port, runs the end-to-end benchmark against it with any arguments given (e.g.
# `scripts/bench.sh --records 500000`), and stops the broker. tansu is installed as scripts/test.sh
# installs it. `scripts/bench.sh --criterion` runs `cargo bench` (micro-benchmarks) first.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[bench.sh] $*" >&2; }
# shellcheck source=scripts/brokers.sh
source scripts/brokers.sh

if [ "${1:-}" = "--criterion" ]; then
  shift
  cargo bench --locked --bench fingerprint --bench table --bench checkpoint --bench recovery --bench memory
fi
install_tansu
cargo build --release --locked --bench e2e

start_broker tansu "$TANSU" sqlite://tansu.db
PORT="$BROKER_PORT"
log "tansu $TANSU_VERSION (sqlite, fresh database) on 127.0.0.1:$PORT"
cargo bench --locked --bench e2e -- --brokers "127.0.0.1:$PORT" "$@"
