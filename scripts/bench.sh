#!/usr/bin/env bash
# The benchmarks (BENCHMARKS.md). Starts a fresh Apache Kafka node (scripts/brokers.sh, the same
# broker and install as scripts/test.sh) on free loopback ports, runs the end-to-end benchmark
# against it with any arguments given (e.g. `scripts/bench.sh --records 1000000`), and stops the
# broker. `--criterion` runs `cargo bench` (micro-benchmarks) first.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[bench.sh] $*" >&2; }
# shellcheck source=scripts/brokers.sh
source scripts/brokers.sh

criterion=0
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --criterion) criterion=1; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

install_packages build-essential pkg-config libssl-dev zlib1g-dev python3 openjdk-17-jre-headless maven openssl
install_kafka
if [ "$criterion" = 1 ]; then
  cargo bench --locked --bench fingerprint --bench table --bench checkpoint --bench recovery --bench memory
fi
cargo build --release --locked --bench e2e
start_kafka bench
cargo bench --locked --bench e2e -- --brokers "127.0.0.1:$KAFKA_PORT" "${args[@]}"
