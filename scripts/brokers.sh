# Sourced by scripts/test.sh, scripts/bench.sh, scripts/mutants.sh, scripts/flink-replay.sh and
# scripts/local-kafka.sh: where things are cached, the install of Apache Kafka's jars, and
# brokers started on free loopback ports in a temporary directory, all stopped (and the
# directory removed) when the script exits. A caller may define `log` first (its prefix).

declare -F log >/dev/null || log() { echo "[kafka-dedup] $*" >&2; }

CACHE="${KAFKA_DEDUP_CACHE:-$HOME/.cache/kafka-dedup}"
mkdir -p "$CACHE"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE/target}"
# The broker's version is java/broker/pom.xml's; the jars go to a directory named after it and
# the POM's hash (a changed POM installs again).
KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' java/broker/pom.xml)"
export KAFKA_LIBS="$CACHE/kafka-$KAFKA_VERSION-$(sha256sum java/broker/pom.xml | cut -c1-12)/libs"

# install_packages PKG...: the Debian packages not installed yet, without starting their services
# (Prometheus on :9090): Debian's maintainer scripts ask /usr/sbin/policy-rc.d, and 101 means
# "not allowed" (set only if no policy is in place).
install_packages() {
  local missing=() pkg policy="" status=0 SUDO=""
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  log "installing Debian packages: ${missing[*]}"
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null && $SUDO chmod +x "$policy"
  fi
  { $SUDO apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; } || status=$?
  [ -z "$policy" ] || $SUDO rm -f "$policy"
  [ "$status" -eq 0 ] || exit "$status"
}

# install_kafka: Apache Kafka's jars (java/broker/pom.xml) copied into $KAFKA_LIBS by Maven, once
# per machine and POM (about 50 MB; Maven's own cache ~/.m2 keeps the downloads). Offline first, so a
# warm machine asks no registry.
install_kafka() {
  [ -f "$KAFKA_LIBS/.complete" ] && return 0
  install_packages openjdk-17-jre-headless maven openssl
  log "installing Apache Kafka $KAFKA_VERSION's jars into $KAFKA_LIBS (Maven; once per machine)"
  rm -rf "$KAFKA_LIBS"
  local copy=(mvn -q -B -f java/broker/pom.xml dependency:copy-dependencies -DincludeScope=runtime
    "-DoutputDirectory=$KAFKA_LIBS")
  "${copy[@]}" -o >/dev/null 2>&1 || "${copy[@]}"
  touch "$KAFKA_LIBS/.complete"
}

# install_flink: the Flink job of examples/flink-replay (scripts/flink-replay.sh, tests/flink.rs)
# built by Maven with its jars (Flink 2.2, its Kafka connector, about 85 MB) copied into
# $FLINK_REPLAY_LIBS, once per version of the example's pom.xml and sources (Maven's own cache
# ~/.m2 keeps the downloads). Offline first, so a warm machine asks no registry.
install_flink() {
  local src=examples/flink-replay hash
  hash="$(cat "$src/pom.xml" $(find "$src/src" -type f | sort) | sha256sum | cut -c1-12)"
  export FLINK_REPLAY_LIBS="$CACHE/flink-replay-$hash/libs"
  [ -f "$FLINK_REPLAY_LIBS/.complete" ] && return 0
  install_packages openjdk-17-jdk-headless maven
  log "building examples/flink-replay with its jars into $FLINK_REPLAY_LIBS (Maven; once per version)"
  rm -rf "$CACHE/flink-replay-$hash"
  local build=(mvn -q -B -f "$src/pom.xml" package dependency:copy-dependencies -DincludeScope=runtime
    "-Dflink.out=$CACHE/flink-replay-$hash/build" "-DoutputDirectory=$FLINK_REPLAY_LIBS")
  "${build[@]}" -o >/dev/null 2>&1 || "${build[@]}"
  cp "$CACHE/flink-replay-$hash/build/flink-replay.jar" "$FLINK_REPLAY_LIBS/"
  touch "$FLINK_REPLAY_LIBS/.complete"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

WORK="$(mktemp -d)"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  # A broker stops cleanly within seconds of SIGTERM; one that does not is killed.
  for _ in $(seq 1 100); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.2
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# start_kafka NAME [sasl]: starts an Apache Kafka node (scripts/kafka-broker.sh) in $WORK/NAME on
# free loopback ports and waits until it logs "Kafka Server started" (up to 3 minutes; exits with
# its log if it dies or does not get there). Sets KAFKA_PORT (PLAINTEXT), KAFKA_DIR and, with
# `sasl`, KAFKA_SASL_PORT (SASL_SSL, SCRAM-SHA-512; CA in $KAFKA_DIR/tls/ca.pem). A port is free
# when chosen and bound by the JVM seconds later: a node that exits with "Address already in use"
# (another process took the port meanwhile) is started again on other ports, up to three times.
start_kafka() {
  local name="$1" sasl=0 started attempt
  for attempt in 1 2 3; do
    KAFKA_DIR="$WORK/$name"
    [ "$attempt" = 1 ] || KAFKA_DIR="$WORK/$name-$attempt"
    KAFKA_PORT="$(free_port)"
    KAFKA_SASL_PORT=0
    [ "${2:-}" = sasl ] && { KAFKA_SASL_PORT="$(free_port)"; sasl="$KAFKA_SASL_PORT"; }
    mkdir -p "$KAFKA_DIR"
    started=$(date +%s)
    scripts/kafka-broker.sh "$KAFKA_DIR" "$KAFKA_PORT" 0 "$sasl" >"$KAFKA_DIR/stdout.log" 2>&1 &
    local pid=$!
    pids+=("$pid")
    for _ in $(seq 1 900); do
      grep -qs "Kafka Server started" "$KAFKA_DIR/server.log" && {
        log "Apache Kafka $KAFKA_VERSION ($name) ready in $(($(date +%s) - started)) s on 127.0.0.1:$KAFKA_PORT"
        return 0
      }
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    if ! kill -0 "$pid" 2>/dev/null &&
      grep -qs "Address already in use" "$KAFKA_DIR/server.log" "$KAFKA_DIR/stdout.log"; then
      log "Apache Kafka ($name): a port was taken before the broker bound it; starting it again on other ports"
      wait "$pid" 2>/dev/null || true
      unset 'pids[-1]' # reaped: its pid may be reused, `cleanup` must not signal it
      continue
    fi
    break
  done
  cat "$KAFKA_DIR/stdout.log" "$KAFKA_DIR/format.log" 2>/dev/null || true
  tail -n 50 "$KAFKA_DIR/server.log" 2>/dev/null || true
  log "Apache Kafka ($name) did not start"
  exit 1
}
