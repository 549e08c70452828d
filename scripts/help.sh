# shellcheck shell=bash
# Sourced first by every script a person runs:
# `help_on_request "$@"` prints the script's header comment, its usage, and exits 0 when the first
# argument is `-h` or `--help`, before anything is installed, built or started (before it,
# `scripts/bench.sh --help` started a release build and `scripts/mutants.sh --help` would have
# installed cargo-mutants).

# The header of the calling script: the comment lines between its shebang and `set -euo pipefail`.
# ($0 as called, or under scripts/ once the caller has changed to the repository's root.)
help_on_request() {
  case "${1:-}" in
    -h | --help)
      local self="$0"
      [ -f "$self" ] || self="scripts/$(basename "$0")"
      sed -n '2,/^set -euo/p' "$self" | sed '$d' | sed 's/^# \{0,1\}//'
      exit 0
      ;;
  esac
}
