#!/usr/bin/env bash
# Mutation testing with cargo-mutants over the modules that hold the safety rules: a measure of
# whether the tests catch the bugs that matter (docs/TESTING.md has the last run's score and
# what each surviving mutant means). Run before a release; not in CI: it takes hours.
#
#   scripts/mutants.sh unit [FILE...]   each mutant against the unit tests (`cargo test --lib`):
#                                       about half a minute a mutant on 2 cores
#   scripts/mutants.sh full [FILE...]   each mutant against the unit tests and the fault-injection
#                                       and crash tests (mock cluster + Apache Kafka, started here; not the
#                                       random chaos test): a few minutes a mutant
#
# FILE defaults to the safety modules. Results go to mutants.out/ (cargo-mutants' own layout:
# caught.txt, missed.txt, timeout.txt, unviable.txt); `--iterate` (passed through with
# CARGO_MUTANTS_ARGS) re-tests only what was missed last time.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/help.sh
source scripts/help.sh
help_on_request "$@"

log() { echo "[mutants.sh] $*" >&2; }
mode="${1:-unit}"
shift || true
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  files=(src/pipeline src/recovery src/generations.rs src/partition.rs src/metadata.rs src/fingerprint.rs)
fi

if ! command -v cargo-mutants >/dev/null 2>&1; then
  log "installing cargo-mutants from crates.io"
  cargo install --locked cargo-mutants
fi

args=()
for f in "${files[@]}"; do
  if [ -d "$f" ]; then
    args+=(--file "$f/**/*.rs")
  elif [ -e "$f" ]; then
    args+=(--file "$f")
  else
    # A module may be one file or a directory of them.
    if [ -d "${f%.rs}" ]; then args+=(--file "${f%.rs}/**/*.rs"); else args+=(--file "$f"); fi
  fi
done

CACHE="${KAFKA_DEDUP_CACHE:-$HOME/.cache/kafka-dedup}"
# Its own build directory: mutants are built in a copy of the tree, so sharing the test suite's
# would rebuild the crate back and forth.
export CARGO_TARGET_DIR="$CACHE/mutants-target"

case "$mode" in
  unit)
    # shellcheck disable=SC2086
    cargo mutants --no-shuffle "${args[@]}" ${CARGO_MUTANTS_ARGS:-} -- --lib
    ;;
  full)
    # shellcheck source=scripts/brokers.sh
    source scripts/brokers.sh
    install_kafka
    start_kafka kafka
    export KAFKA_DEDUP_TEST_BROKER="127.0.0.1:$KAFKA_PORT" KAFKA_LIBS
    # shellcheck disable=SC2086
    cargo mutants --no-shuffle --timeout 900 "${args[@]}" ${CARGO_MUTANTS_ARGS:-} -- \
      --lib --test mock --test crash -- --skip chaos
    ;;
  *)
    log "usage: scripts/mutants.sh unit|full [FILE...]"
    exit 2
    ;;
esac
