#!/usr/bin/env bash
# The benchmarks (BENCHMARKS.md). Starts a fresh Apache Kafka node (scripts/brokers.sh, the same
# broker and install as scripts/test.sh) on free loopback ports, runs the end-to-end benchmark
# against it with any arguments given (e.g. `scripts/bench.sh --records 1000000`), and stops the
# broker. `--criterion` runs `cargo bench` (micro-benchmarks) first. `--peers` (passed on to the
# benchmark) also builds and runs the peers of benches/peers/: the Kafka Streams dedup (Maven,
# offline first, its jars in target/lib of its folder), the Python one (confluent-kafka and redis
# installed with pip into $CACHE/peers/python) with a redis-server of its own on a free loopback
# port; none of it is installed without `--peers`. `--callgrind DIR` installs valgrind. The
# broker's pid goes to the benchmark in KD_E2E_BROKER_PID (its CPU per record).
#
# The benchmark's own options (benches/e2e.rs) pass through, among them --records N (default
# 100000), --record-bytes 100,1000, --partitions 3,30, --duplicates 0.1, --rounds N,
# --latency-seconds S and --binary NAME=PATH (an older release side by side). All of them, with
# their defaults: `cargo bench --bench e2e -- --help` (builds the benchmark; no broker needed).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/help.sh
source scripts/help.sh
help_on_request "$@"

log() { echo "[bench.sh] $*" >&2; }
# shellcheck source=scripts/brokers.sh
source scripts/brokers.sh

criterion=0
peers=0
callgrind=0
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --criterion) criterion=1; shift ;;
    --peers) peers=1; args+=("$1"); shift ;;
    --callgrind) callgrind=1; args+=("$1"); shift ;;
    *) args+=("$1"); shift ;;
  esac
done

install_packages build-essential pkg-config libssl-dev zlib1g-dev python3 openjdk-17-jre-headless maven openssl
if [ "$callgrind" = 1 ]; then
  install_packages valgrind
fi
install_kafka
if [ "$criterion" = 1 ]; then
  cargo bench --locked --bench fingerprint --bench table --bench checkpoint --bench recovery --bench memory
fi
cargo build --release --locked --bench e2e
start_kafka bench
export KD_E2E_BROKER_PID="${pids[-1]}"
if [ "$peers" = 1 ]; then
  install_packages redis-server python3-pip
  streams=benches/peers/kafka-streams-dedup
  build=(mvn -q -B -f "$streams/pom.xml" package)
  "${build[@]}" -o >/dev/null 2>&1 || "${build[@]}"
  export KD_E2E_STREAMS_CP="$PWD/$streams/target/classes:$PWD/$streams/target/lib/*"
  export KD_E2E_PYTHONPATH="$CACHE/peers/python"
  [ -f "$KD_E2E_PYTHONPATH/.complete" ] || {
    log "installing confluent-kafka and redis (pip) into $KD_E2E_PYTHONPATH"
    python3 -m pip install -q --target "$KD_E2E_PYTHONPATH" confluent-kafka==2.16.1 redis==8.1.0
    touch "$KD_E2E_PYTHONPATH/.complete"
  }
  KD_E2E_REDIS_PORT="$(free_port)"
  mkdir -p "$WORK/redis"
  redis-server --port "$KD_E2E_REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK/redis" \
    --logfile "$WORK/redis/redis.log" &
  pids+=("$!")
  export KD_E2E_REDIS_PORT KD_E2E_REDIS_PID="${pids[-1]}"
  for _ in $(seq 1 50); do redis-cli -p "$KD_E2E_REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi
cargo bench --locked --bench e2e -- --brokers "127.0.0.1:$KAFKA_PORT" "${args[@]}"
