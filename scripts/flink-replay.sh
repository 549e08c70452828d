#!/usr/bin/env bash
# A real Flink job replaying into kafka-dedup: a Flink job (examples/flink-replay, a MiniCluster in one JVM) copies
# increasing integers from one topic to another with KafkaSink; its JVM is SIGKILLed a few times at
# random moments between checkpoints and relaunched from its newest retained checkpoint; kafka-dedup
# runs between the job's output and a final topic. At the end it prints, for each topic read: records,
# distinct integers, duplicates, missing, out of order per partition, the latency from the integer's
# produce time to the reader's receipt (p50/p99/max), and the records around each kill.
#
#   scripts/flink-replay.sh                      # both guarantees side by side: the latency table
#   scripts/flink-replay.sh --guarantee at-least-once --kills 3 --checkpoint 2 --every-ms 20
#
# Options:
#   --guarantee G       at-least-once | exactly-once | both (default both: two jobs on the same input,
#                       killed at the same moments; the rows of BENCHMARKS.md "Flink's replays")
#   --kills N           SIGKILLs of the job's JVM (default 3)
#   --checkpoint S      the job's checkpoint interval, seconds (default 5)
#   --every-ms MS       one integer every MS ms (default 5), over --partitions P (default 2)
#   --dedup-interval D  kafka-dedup's checkpoint.interval (default 40s) and
#   --dedup-generations G  checkpoint.generations (default 3): H_min = (G-1) x D = 80 s, above the
#                       job's checkpoint interval plus its restart time
#   --broker HOST:PORT  use that broker (and its topics get unique names) instead of starting one
#   --bin PATH          the kafka-dedup binary (default: `cargo build` debug, or --release)
#   --release           build and use the release binary
#   --dir DIR           keep the run's files there (configs, readers' records, logs); default: a
#                       temporary directory removed at exit
#   --audit             run `kafka-dedup audit` on each kafka-dedup at the end (exit 1 if one fails)
#
# It installs what it needs (Apache Kafka's and the job's jars through Maven, scripts/brokers.sh) and
# starts its own broker (scripts/brokers.sh start_kafka) unless --broker is given. Prints the topic
# names and, with --dir, leaves DIR/run.env with them (tests/flink.rs reads it).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/help.sh
source scripts/help.sh
help_on_request "$@"

log() { echo "[flink-replay] $(date +%H:%M:%S) $*" >&2; }
# shellcheck source=scripts/brokers.sh
source scripts/brokers.sh

guarantee=both kills=3 checkpoint=5 every_ms=5 partitions=2 broker="" bin="" release=0 dir=""
dedup_interval=40s dedup_generations=3 audit=0
while [ $# -gt 0 ]; do
  case "$1" in
    --guarantee) guarantee="$2"; shift ;;
    --kills) kills="$2"; shift ;;
    --checkpoint) checkpoint="$2"; shift ;;
    --every-ms) every_ms="$2"; shift ;;
    --partitions) partitions="$2"; shift ;;
    --dedup-interval) dedup_interval="$2"; shift ;;
    --dedup-generations) dedup_generations="$2"; shift ;;
    --broker) broker="$2"; shift ;;
    --bin) bin="$2"; shift ;;
    --release) release=1 ;;
    --dir) dir="$2"; shift ;;
    --audit) audit=1 ;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
  shift
done
case "$guarantee" in
  both) jobs=(alo eo) ;;
  at-least-once) jobs=(alo) ;;
  exactly-once) jobs=(eo) ;;
  *) echo "--guarantee: at-least-once | exactly-once | both" >&2; exit 2 ;;
esac

install_flink
if [ -z "$broker" ]; then
  install_kafka
  start_kafka flink
  broker="127.0.0.1:$KAFKA_PORT"
fi
if [ -z "$bin" ]; then
  if [ "$release" = 1 ]; then
    cargo build --locked -q --release --bin kafka-dedup
    bin="$CARGO_TARGET_DIR/release/kafka-dedup"
  else
    cargo build --locked -q --bin kafka-dedup
    bin="$CARGO_TARGET_DIR/debug/kafka-dedup"
  fi
fi
run="${dir:-$WORK/run}"
mkdir -p "$run"
run="$(cd "$run" && pwd)"

# Flink's JVM flags (its config.yaml's env.java.opts.all) for JDK 17; the client compiler only and
# the serial collector: a relaunch starts faster on 2 cores, and 200 records/s need no more.
# java.io.tmpdir in $WORK (removed at exit): the MiniCluster unpacks its RPC jar (21 MB) and makes
# its io, netty-shuffle, dist-cache and minicluster_ directories there, which only a shutdown hook
# removes, and a SIGKILLed JVM runs none: in /tmp each kill left them behind.
java_tmp="$WORK/java-tmp"
mkdir -p "$java_tmp"
flink_java=(java -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 "-Djava.io.tmpdir=$java_tmp"
  --add-exports=java.base/sun.net.util=ALL-UNNAMED --add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED
  --add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED
  --add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.net=ALL-UNNAMED
  --add-opens=java.base/java.io=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED
  --add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
  --add-opens=java.base/java.text=ALL-UNNAMED --add-opens=java.base/java.time=ALL-UNNAMED
  --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED
  -cp "$FLINK_REPLAY_LIBS/*" kafkadedup.flinkreplay.Main)
tool_java=(java -Xmx256m -XX:+UseSerialGC "-Djava.io.tmpdir=$java_tmp" -cp "$FLINK_REPLAY_LIBS/*" kafkadedup.flinkreplay.Main)

p="flink-replay-$(date +%s)-$$"
input="$p.in"
topics=("$input")
declare -A job_out
for j in "${jobs[@]}"; do job_out[$j]="$p.$j.out"; topics+=("${job_out[$j]}"); done
# kafka-dedup instances: NAME INPUT ISOLATION. Behind the at-least-once job (the seed's answer),
# and behind the exactly-once job at each isolation level (what a user of that sink should set).
dedups=()
for j in "${jobs[@]}"; do
  if [ "$j" = alo ]; then dedups+=("alo.dedup ${job_out[alo]} read_committed")
  else dedups+=("eo.dedup-rc ${job_out[eo]} read_committed" "eo.dedup-ru ${job_out[eo]} read_uncommitted"); fi
done
for d in "${dedups[@]}"; do set -- $d; topics+=("$p.$1"); done
"${tool_java[@]}" topics --bootstrap "$broker" --partitions "$partitions" "${topics[@]}"
log "broker $broker; topics ${topics[*]}"
{
  echo "BROKER=$broker"; echo "INPUT=$input"; echo "PARTITIONS=$partitions"
  for j in "${jobs[@]}"; do echo "JOB_OUT_${j^^}=${job_out[$j]}"; done
} >"$run/run.env"

# kafka-dedup, one per entry of $dedups, each with its configuration file in $run.
dedup_pids=()
for d in "${dedups[@]}"; do
  set -- $d
  name="$1" from="$2" isolation="$3" port="$(free_port)"
  cat >"$run/$name.toml" <<EOF
[kafka]
bootstrap_servers = "$broker"
[kafka.properties]
"isolation.level" = "$isolation"

[input]
topic = "$from"
group_id = "$p.$name"

[output]
topic = "$p.$name"
delivery = "idempotent"

[checkpoint]
interval = "$dedup_interval"
generations = $dedup_generations

[store]
path = "$run/$name.store"

[http]
listen = "127.0.0.1:$port"
EOF
  "$bin" run --config "$run/$name.toml" >"$run/$name.log" 2>&1 &
  pids+=($!) dedup_pids+=($!)
  key="DEDUP_${name//[.-]/_}"
  echo "${key^^}=$p.$name" >>"$run/run.env"
  for _ in $(seq 1 600); do
    curl -fs "http://127.0.0.1:$port/readyz" >/dev/null && break
    kill -0 "${dedup_pids[-1]}" 2>/dev/null || { cat "$run/$name.log"; log "kafka-dedup $name exited"; exit 1; }
    sleep 0.1
  done
  log "kafka-dedup $name ready: $from ($isolation) -> $p.$name"
done

# The readers: the job's output at both isolation levels (exactly-once) or one (at-least-once), and
# each kafka-dedup's output; each writes what it receives, with the time, to $run/NAME.records.
count="$run/produced"
readers=()
for j in "${jobs[@]}"; do
  if [ "$j" = alo ]; then readers+=("alo.out=${job_out[alo]}:read_uncommitted:$run/alo.out.records")
  else readers+=("eo.out-rc=${job_out[eo]}:read_committed:$run/eo.out-rc.records"
    "eo.out-ru=${job_out[eo]}:read_uncommitted:$run/eo.out-ru.records"); fi
done
for d in "${dedups[@]}"; do set -- $d; readers+=("$1=$p.$1:read_committed:$run/$1.records"); done
"${tool_java[@]}" read --bootstrap "$broker" --count-file "$count" --linger-ms 120000 "${readers[@]}" \
  >"$run/readers.log" 2>&1 &
reader_pid=$!
pids+=("$reader_pid")

# launch JOB [CHECKPOINT]: starts the job's JVM (restored from CHECKPOINT if given).
declare -A job_pid launched
launch() {
  local j="$1" restore="${2:-}" g=AT_LEAST_ONCE
  [ "$j" = eo ] && g=EXACTLY_ONCE
  touch "$run/$j.mark"
  launched[$j]=$(date +%s%3N)
  "${flink_java[@]}" job --bootstrap "$broker" --input "$input" --output "${job_out[$j]}" --group "$p.$j.job" \
    --guarantee "$g" --checkpoint-ms "$((checkpoint * 1000))" --checkpoint-dir "$run/$j.checkpoints" \
    --txn-prefix "$p.$j" ${restore:+--restore "$restore"} >>"$run/$j.job.log" 2>&1 &
  job_pid[$j]=$!
  pids+=("${job_pid[$j]}")
}
# newest JOB: the newest completed checkpoint (a chk-N directory with its _metadata).
newest() { { ls -t "$run/$1.checkpoints"/*/chk-*/_metadata 2>/dev/null || true; } | head -n 1 | xargs -r dirname; }
# wait_checkpoint JOB: until the job completes a checkpoint after its mark (its launch, or the
# producer's start), 3 minutes at most.
wait_checkpoint() {
  local j="$1" m
  for _ in $(seq 1 1800); do
    m="$(newest "$j")"
    [ -n "$m" ] && [ "$m/_metadata" -nt "$run/$j.mark" ] && {
      log "$j: checkpoint $(basename "$m"), $(( $(date +%s%3N) - launched[$j] )) ms after its launch"
      return 0
    }
    kill -0 "${job_pid[$j]}" 2>/dev/null || { tail -n 40 "$run/$j.job.log"; log "job $j exited"; exit 1; }
    sleep 0.1
  done
  tail -n 40 "$run/$j.job.log"
  log "job $j: no checkpoint within 3 minutes"
  exit 1
}

# The jobs first, up to their first checkpoint, then the producer: the latency measured is the
# running job's, not its first start's.
for j in "${jobs[@]}"; do launch "$j"; done
for j in "${jobs[@]}"; do wait_checkpoint "$j"; done
"${tool_java[@]}" produce --bootstrap "$broker" --topic "$input" --partitions "$partitions" \
  --every-ms "$every_ms" --stop-file "$run/stop" --count-file "$count" >"$run/producer.log" 2>&1 &
producer_pid=$!
pids+=("$producer_pid")
while [ ! -f "$count.started" ]; do
  kill -0 "$producer_pid" 2>/dev/null || { cat "$run/producer.log"; log "the producer exited"; exit 1; }
  sleep 0.1
done
for j in "${jobs[@]}"; do touch "$run/$j.mark"; done
log "producing one integer every $every_ms ms"
for k in $(seq 1 "$kills"); do
  for j in "${jobs[@]}"; do wait_checkpoint "$j"; done
  # A random moment between two checkpoints: 20-80 % of an interval after one completed.
  sleep "$(python3 -c "import random; print(round($checkpoint * random.uniform(0.2, 0.8), 2))")"
  for j in "${jobs[@]}"; do kill -9 "${job_pid[$j]}"; done
  for j in "${jobs[@]}"; do wait "${job_pid[$j]}" 2>/dev/null || true; done
  # The kill's time, for the report: once the JVMs are gone, nothing more comes from them.
  killed=$(date +%s%3N) restored=$killed
  for j in "${jobs[@]}"; do
    c="$(newest "$j")"
    t="$(date -r "$c/_metadata" +%s%3N)"
    [ "$t" -lt "$restored" ] && restored=$t
    log "kill $k: SIGKILLed $j (pid ${job_pid[$j]}); relaunching from $(basename "$c"), $((killed - t)) ms old"
    launch "$j" "$c"
  done
  # The kill's time and the oldest checkpoint restored (the report leaves the integers produced
  # from it until the jobs caught up out of the steady latency).
  echo "$killed $restored" >>"$run/kills"
  for j in "${jobs[@]}"; do wait_checkpoint "$j"; done
done

touch "$run/stop"
wait "$producer_pid"
log "$(cat "$run/producer.log"); waiting for every reader to have every integer (2 minutes at most)"
wait "$reader_pid" || { cat "$run/readers.log"; exit 1; }
for j in "${jobs[@]}"; do kill -9 "${job_pid[$j]}"; wait "${job_pid[$j]}" 2>/dev/null || true; done
for d in "${dedup_pids[@]}"; do kill -TERM "$d"; done
for d in "${dedup_pids[@]}"; do wait "$d" || { log "kafka-dedup (pid $d) did not exit cleanly"; exit 1; }; done

report=()
for r in "${readers[@]}"; do report+=("${r%%=*}=$run/${r%%=*}.records"); done
recovered=alo.out
[ "$guarantee" = exactly-once ] && recovered=eo.out-ru
[ "$guarantee" = both ] && recovered=alo.out,eo.out-ru
"${tool_java[@]}" report --count-file "$count" --kills "$run/kills" --recovered "$recovered" \
  --checkpoint-ms "$((checkpoint * 1000))" "${report[@]}"
echo
echo "job checkpoints every ${checkpoint}s; kafka-dedup checkpoint.interval $dedup_interval x $dedup_generations generations; one integer every ${every_ms} ms over $partitions partitions; kafka-dedup: $bin"

status=0
if [ "$audit" = 1 ]; then
  for d in "${dedups[@]}"; do
    set -- $d
    if "$bin" audit --config "$run/$1.toml" >"$run/$1.audit" 2>&1; then log "audit $1: clean"
    else status=1; cat "$run/$1.audit"; log "audit $1: findings (exit 1)"; fi
  done
fi
exit "$status"
