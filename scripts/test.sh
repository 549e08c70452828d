#!/usr/bin/env bash
# The test command (README, first lines). On a fresh machine it installs what the tests need:
#   - Debian packages: librdkafka's build (OpenSSL for TLS and SASL/SCRAM, zlib, a C toolchain),
#     Java 17 and Maven for the broker, `prometheus` (2.42: `promtool` checks and unit-tests the
#     alerting rules and `prometheus` scrapes a live kafka-dedup in tests/prometheus.rs; its own
#     service is not started, the tests run their own on free ports);
#   - Apache Kafka 4.2.0's jars (java/broker/pom.xml, through Maven, about 45 MB; cached in
#     $KAFKA_DEDUP_CACHE, default ~/.cache/kafka-dedup, outside the clone, with Maven's downloads
#     in ~/.m2);
#   - the Flink example's jars (examples/flink-replay, Maven, about 85 MB) for tests/flink.rs;
#   - a Schema Registry (Apicurio 2.4.2, scripts/schema-registry.sh --build, Maven) and, from PyPI,
#     the Python client's Avro and Protobuf serializers (confluent-kafka, protobuf) that write its
#     records, for tests/schema_registry.rs.
# Each is installed once per machine (the first run: a few minutes more, besides librdkafka's
# first build: the jars 10-30 s, the Flink example about 2 minutes, the Schema Registry about 1).
# Then it starts one Apache Kafka node (KRaft, broker and controller) on free loopback ports, with
# a PLAINTEXT listener and a SASL_SSL one (SCRAM-SHA-512, a CA made for the run), runs
# `cargo test` with any arguments given (e.g. `scripts/test.sh --test filter`), and stops the
# broker, whatever the tests did. The whole suite takes about 20 minutes on 2 cores.
#
# KAFKA_DEDUP_TEST_BROKER set beforehand: the tests use that broker instead and none is started
# (a developer's long-lived broker; the SASL tests then need KAFKA_DEDUP_TEST_SASL_* too).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/help.sh
source scripts/help.sh
help_on_request "$@"

log() { echo "[test.sh] $*" >&2; }
# shellcheck source=scripts/brokers.sh
source scripts/brokers.sh

install_packages build-essential pkg-config libssl-dev zlib1g-dev python3 prometheus openjdk-17-jre-headless maven openssl
install_kafka
install_flink  # examples/flink-replay, for tests/flink.rs
# tests/schema_registry.rs: a real Schema Registry (Apicurio, built by Maven once) and the Python
# client's Avro and Protobuf serializers (PyPI) that write its records.
install_packages openjdk-17-jdk-headless python3-pip
scripts/schema-registry.sh --build
python3 -c 'import confluent_kafka.schema_registry.avro, confluent_kafka.schema_registry.protobuf, fastavro
import google.protobuf; assert google.protobuf.__version__ == "7.36.2"' 2>/dev/null ||
  PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q 'confluent-kafka[avro,schemaregistry,protobuf]==2.16.1' 'protobuf==7.36.2'

if [ -z "${KAFKA_DEDUP_TEST_BROKER:-}" ]; then
  start_kafka kafka sasl
  export KAFKA_DEDUP_TEST_BROKER="127.0.0.1:$KAFKA_PORT"
  export KAFKA_DEDUP_TEST_SASL_BROKER="127.0.0.1:$KAFKA_SASL_PORT"
  export KAFKA_DEDUP_TEST_SASL_CA="$KAFKA_DIR/tls/ca.pem"
  export KAFKA_DEDUP_TEST_SASL_USER=kafka-dedup
  KAFKA_DEDUP_TEST_SASL_PASSWORD="$(cat "$KAFKA_DIR/tls/password")"
  export KAFKA_DEDUP_TEST_SASL_PASSWORD
fi
# Tests that need a broker of their own (behind a proxy, tests/common/proxy.rs) start one with
# scripts/kafka-broker.sh and these jars.
export KAFKA_LIBS
cargo test --locked "$@"
