#!/usr/bin/env bash
# Apache Kafka on this machine, to try the README's quick start without a cluster. Installs the
# broker's jars once (java/broker/pom.xml through Maven; Java 17 and Maven from Debian if missing;
# about 45 MB, the suite's own install) and then:
#
#   scripts/local-kafka.sh [PORT]           one node (KRaft, scripts/kafka-broker.sh) with a
#                                           PLAINTEXT listener on 127.0.0.1:PORT (default 9092),
#                                           in the foreground until Ctrl-C (or SIGTERM to
#                                           this script, when it runs in the background); its data and
#                                           server.log go to a temporary directory, removed
#                                           when it stops (its last line says so)
#   scripts/local-kafka.sh topics ARGS...   Apache Kafka's kafka-topics.sh (TopicCommand), e.g.
#     scripts/local-kafka.sh topics --bootstrap-server 127.0.0.1:9092 --create --topic events --partitions 6
#   scripts/local-kafka.sh produce ARGS...  kafka-console-producer.sh (ConsoleProducer): a record
#                                           per line of stdin, e.g. with a key before a tab:
#     printf 'k1\t{"event_id":"e1"}\n' | scripts/local-kafka.sh produce --bootstrap-server 127.0.0.1:9092 \
#       --topic events --reader-property parse.key=true
#   scripts/local-kafka.sh consume ARGS...  kafka-console-consumer.sh (ConsoleConsumer), e.g.
#     scripts/local-kafka.sh consume --bootstrap-server 127.0.0.1:9092 --topic events.dedup --from-beginning \
#       --formatter-property print.headers=true
#
# The node's settings are the test suite's (replication factor 1, short group sessions allowed):
# for a try, not for production.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[local-kafka] $*" >&2; }

# Before anything is installed: the usage, and a port that is not one.
# shellcheck source=scripts/help.sh
source scripts/help.sh
help_on_request "$@"
case "${1:-}" in
  topics | produce | consume | "") ;;
  *)
    if ! [[ "$1" =~ ^[0-9]+$ ]] || [ "$1" -lt 1 ] || [ "$1" -gt 65535 ]; then
      log "not a port: '$1' (usage: scripts/local-kafka.sh [PORT] | topics|produce|consume ARGS... | --help)"
      exit 2
    fi
    ;;
esac
# shellcheck source=scripts/brokers.sh
source scripts/brokers.sh
install_kafka

# Apache Kafka's command-line tools, by the name of their shell script less `kafka-`.
tool=""
case "${1:-}" in
  topics) tool=org.apache.kafka.tools.TopicCommand ;;
  produce) tool=org.apache.kafka.tools.ConsoleProducer ;;
  consume) tool=org.apache.kafka.tools.consumer.ConsoleConsumer ;;
esac
if [ -n "$tool" ]; then
  shift
  # Warnings and errors only (the tools' log4j default would print nothing but errors anyway).
  exec java -Dlog4j2.level=WARN -cp "$KAFKA_LIBS/*" "$tool" "$@"
fi

port="${1:-9092}"
dir="$WORK/kafka"
mkdir -p "$dir"
scripts/kafka-broker.sh "$dir" "$port" >"$dir/stdout.log" 2>&1 &
pids+=("$!")
for _ in $(seq 1 900); do
  if grep -qs "Kafka Server started" "$dir/server.log"; then
    trap 'cleanup; log "Apache Kafka stopped; its data and log removed"' EXIT
    log "Apache Kafka $KAFKA_VERSION ready on 127.0.0.1:$port (log: $dir/server.log); Ctrl-C (or SIGTERM to pid $$) stops it"
    # Returns only when the broker ended by itself (a signal to this script ends it first).
    wait "${pids[0]}" || true
    tail -n 50 "$dir/server.log" 2>/dev/null || true
    log "Apache Kafka ended by itself (its log above)"
    exit 1
  fi
  kill -0 "${pids[0]}" 2>/dev/null || break
  sleep 0.2
done
cat "$dir/stdout.log" 2>/dev/null || true
tail -n 50 "$dir/server.log" 2>/dev/null || true
log "Apache Kafka did not start (is port $port taken?)"
exit 1
