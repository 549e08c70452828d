#!/usr/bin/env bash
# One Apache Kafka node in KRaft mode (broker and controller in one JVM), run from the jars that
# java/broker/pom.xml names (scripts/brokers.sh installs them). Used by scripts/test.sh and
# scripts/bench.sh for the suite's shared broker, and by tests that need a broker of their own
# (tests/common/proxy.rs).
#
#   scripts/kafka-broker.sh DIR PORT [ADVERTISED_PORT [SASL_PORT]]
#
# DIR: a fresh directory (config, data, TLS material, server.log go there); PORT: the PLAINTEXT
# listener; ADVERTISED_PORT: the port the broker tells clients to use (a proxy in front of it; 0
# or absent: PORT); SASL_PORT: a second listener speaking SASL_SSL with SCRAM-SHA-512, with a CA
# and a broker certificate made here (DIR/tls/ca.pem for clients; the user `kafka-dedup` with
# the password in DIR/tls/password). KAFKA_LIBS: the jar directory (required).
#
# Formats the data directory, then runs the broker in the foreground (exec): the caller sends
# SIGTERM to stop it and waits for "Kafka Server started" in DIR/server.log to know it is ready.
# The broker settings this script writes into DIR/server.properties are one node's (replication
# factor 1) and a test's (fast group joins, short sessions allowed); each is Apache Kafka's
# documented broker config (kafka.apache.org, "Broker Configs").
set -euo pipefail
# shellcheck source=scripts/help.sh
source "$(dirname "$0")/help.sh"
help_on_request "$@"

dir="$1" port="$2" advertised="${3:-0}" sasl="${4:-0}"
[ "$advertised" != 0 ] || advertised="$port"
: "${KAFKA_LIBS:?KAFKA_LIBS: the directory of the broker jars (scripts/brokers.sh installs them)}"
mkdir -p "$dir/data"
controller="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"

listeners="PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller"
advertised_listeners="PLAINTEXT://127.0.0.1:$advertised"
protocols="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
if [ "$sasl" != 0 ]; then
  # A CA, and a broker certificate for 127.0.0.1 and localhost signed by it, in a PKCS#12 keystore.
  tls="$dir/tls"
  mkdir -p "$tls"
  pass="$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  echo "$pass" >"$tls/password"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=kafka-dedup test CA" \
    -keyout "$tls/ca.key" -out "$tls/ca.pem" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$tls/broker.key" -out "$tls/broker.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$tls/san.ext"
  openssl x509 -req -in "$tls/broker.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial -days 2 \
    -extfile "$tls/san.ext" -out "$tls/broker.pem" 2>/dev/null
  openssl pkcs12 -export -in "$tls/broker.pem" -inkey "$tls/broker.key" -certfile "$tls/ca.pem" \
    -passout "pass:$pass" -out "$tls/broker.p12"
  listeners="$listeners,SASL_SSL://127.0.0.1:$sasl"
  advertised_listeners="$advertised_listeners,SASL_SSL://127.0.0.1:$sasl"
  protocols="$protocols,SASL_SSL:SASL_SSL"
fi

cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller
listeners=$listeners
advertised.listeners=$advertised_listeners
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$protocols
log.dirs=$dir/data
num.partitions=1
# One node: every internal topic with one replica, one partition (a first join is fast).
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# Groups as a test wants them: no initial rebalance delay, sessions down to 1 s (classic) and
# 3 s (the KIP-848 consumer protocol, whose timeouts the broker decides).
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
group.consumer.min.session.timeout.ms=3000
group.consumer.session.timeout.ms=6000
group.consumer.min.heartbeat.interval.ms=500
group.consumer.heartbeat.interval.ms=1000
# Flink's KafkaSink opens transactions of up to an hour (above the 15 min default maximum).
transaction.max.timeout.ms=7200000
# Retention checks every 5 s, so a test that lowers a topic's retention sees it applied.
log.retention.check.interval.ms=5000
# Two cores.
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
auto.create.topics.enable=false
delete.topic.enable=true
EOF
if [ "$sasl" != 0 ]; then
  cat >>"$dir/server.properties" <<EOF
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PKCS12
ssl.keystore.location=$tls/broker.p12
ssl.keystore.password=$pass
ssl.key.password=$pass
ssl.client.auth=none
EOF
fi

cat >"$dir/log4j2.xml" <<EOF
<Configuration status="WARN">
  <Appenders>
    <File name="file" fileName="$dir/server.log"><PatternLayout pattern="[%d] %p %m (%c)%n"/></File>
  </Appenders>
  <Loggers>
    <Logger name="kafka" level="INFO"/>
    <Logger name="org.apache.kafka" level="INFO"/>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="state.change.logger" level="WARN"/>
    <Root level="WARN"><AppenderRef ref="file"/></Root>
  </Loggers>
</Configuration>
EOF

java=(java -Xms256m -Xmx1g -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError
  -Djava.awt.headless=true -Dkafka.logs.dir="$dir" -Dlog4j2.configurationFile="$dir/log4j2.xml" -cp "$KAFKA_LIBS/*")
cluster="$("${java[@]}" kafka.tools.StorageTool random-uuid)"
scram=()
[ "$sasl" = 0 ] || scram=(--add-scram "SCRAM-SHA-512=[name=kafka-dedup,password=$pass]")
"${java[@]}" kafka.tools.StorageTool format -t "$cluster" -c "$dir/server.properties" "${scram[@]}" >"$dir/format.log"
exec "${java[@]}" kafka.Kafka "$dir/server.properties"
