#!/usr/bin/env bash
# A real Schema Registry on loopback for the tests of the avro: and protobuf: fingerprint sources: Apicurio Registry
# 2.4.2.Final (java/schema-registry/pom.xml), its Confluent-compatible API at
# http://127.0.0.1:PORT/apis/ccompat/v7, schemas kept in an H2 database under DATA_DIR (so a
# registry stopped and started again on the same DATA_DIR keeps its schemas and ids).
#
#   scripts/schema-registry.sh PORT DATA_DIR      # runs in the foreground until killed
#   scripts/schema-registry.sh --build            # only builds it (once per version of java/schema-registry)
#
# Built by Maven from Maven Central only (java/schema-registry/settings.xml mirrors every
# repository to it), once per version of java/schema-registry, into
# ${KAFKA_DEDUP_CACHE:-~/.cache/kafka-dedup}/schema-registry-HASH. Needs Java 17 and Maven.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/help.sh
source scripts/help.sh
help_on_request "$@"
CACHE="${KAFKA_DEDUP_CACHE:-$HOME/.cache/kafka-dedup}"
src=java/schema-registry
hash="$(cat "$src/pom.xml" "$src/settings.xml" $(find "$src/src" -type f | sort) | sha256sum | cut -c1-12)"
out="$CACHE/schema-registry-$hash"
if [ ! -f "$out/.complete" ]; then
  echo "[schema-registry] building Apicurio Registry into $out (Maven; once per version)" >&2
  rm -rf "$out" && mkdir -p "$out"
  cp -r "$src/pom.xml" "$src/src" "$out/"
  build=(mvn -q -B -s "$src/settings.xml" -f "$out/pom.xml" package -DskipTests)
  "${build[@]}" -o >/dev/null 2>&1 || "${build[@]}"
  touch "$out/.complete"
fi
[ "${1:-}" = --build ] && exit 0
port="${1:?usage: scripts/schema-registry.sh PORT DATA_DIR}"
data="${2:?usage: scripts/schema-registry.sh PORT DATA_DIR}"
mkdir -p "$data"
exec java -Xmx256m -XX:+UseSerialGC \
  -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$port" \
  "-Dquarkus.datasource.jdbc.url=jdbc:h2:file:$data/registry;DB_CLOSE_ON_EXIT=FALSE" \
  -jar "$out/target/test-schema-registry-1-runner.jar"
