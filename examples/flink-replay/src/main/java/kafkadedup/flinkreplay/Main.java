package kafkadedup.flinkreplay;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.locks.LockSupport;
import java.util.stream.Collectors;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The Flink side of scripts/flink-replay.sh, one program with five modes (the first argument):
 *
 * <ul>
 *   <li>{@code topics}: creates topics;
 *   <li>{@code produce}: writes increasing integers (decimal text), one every few ms, each stamped
 *       with the time it is sent, integer i to partition i mod P, until a stop file appears;
 *   <li>{@code job}: the Flink job, in this JVM (a MiniCluster): a KafkaSource reading the
 *       integers, a KafkaSink writing each to the same partition of another topic with its
 *       original timestamp, AT_LEAST_ONCE or EXACTLY_ONCE, checkpoints every N ms retained in a
 *       directory, optionally restored from one ({@code execution.state-recovery.path});
 *   <li>{@code read}: readers (one thread each) that write every record of a topic, with the time
 *       it was received, to a file, at read_committed or read_uncommitted;
 *   <li>{@code report}: the table of those files: records, distinct, duplicates, missing, out of
 *       order, latency from produce to receipt, and the records around each kill.
 * </ul>
 *
 * Options are {@code --name value} pairs; {@code read} and {@code report} also take
 * {@code NAME=...} specs. See scripts/flink-replay.sh for how they fit together.
 */
public final class Main {
    private Main() {}

    /** Dispatches on the mode. */
    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            System.err.println("usage: Main topics|produce|job|read|report --option value ...");
            System.exit(2);
        }
        Map<String, String> opt = new HashMap<>();
        List<String> specs = new ArrayList<>();
        for (int i = 1; i < args.length; i++) {
            if (args[i].startsWith("--") && i + 1 < args.length) {
                opt.put(args[i].substring(2), args[++i]);
            } else {
                specs.add(args[i]);
            }
        }
        switch (args[0]) {
            case "topics" -> topics(opt, specs);
            case "produce" -> produce(opt);
            case "job" -> job(opt);
            case "read" -> read(opt, specs);
            case "report" -> report(opt, specs);
            default -> {
                System.err.println("unknown mode " + args[0]);
                System.exit(2);
            }
        }
    }

    private static String need(Map<String, String> opt, String name) {
        String v = opt.get(name);
        if (v == null) {
            throw new IllegalArgumentException("missing --" + name);
        }
        return v;
    }

    // ---------------------------------------------------------------- topics

    private static void topics(Map<String, String> opt, List<String> names) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, need(opt, "bootstrap"));
        int partitions = Integer.parseInt(need(opt, "partitions"));
        try (Admin admin = Admin.create(p)) {
            List<NewTopic> topics =
                    names.stream().map(n -> new NewTopic(n, partitions, (short) 1)).collect(Collectors.toList());
            admin.createTopics(topics).all().get();
        }
    }

    // ---------------------------------------------------------------- produce

    private static void produce(Map<String, String> opt) throws Exception {
        String topic = need(opt, "topic");
        int partitions = Integer.parseInt(need(opt, "partitions"));
        long everyNanos = (long) (Double.parseDouble(need(opt, "every-ms")) * 1_000_000);
        Path stop = Paths.get(need(opt, "stop-file"));
        Path countFile = Paths.get(need(opt, "count-file"));
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, need(opt, "bootstrap"));
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        long n = 0;
        try (KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            long start = System.nanoTime();
            while (!Files.exists(stop)) {
                long due = start + n * everyNanos;
                long wait = due - System.nanoTime();
                if (wait > 0) {
                    LockSupport.parkNanos(wait);
                }
                byte[] value = Long.toString(n).getBytes(StandardCharsets.UTF_8);
                producer.send(new ProducerRecord<>(
                        topic, (int) (n % partitions), System.currentTimeMillis(), null, value));
                if (n == 0) {
                    // The script starts its kills once integers flow.
                    producer.flush();
                    Files.writeString(Paths.get(countFile + ".started"), "started\n");
                }
                n++;
            }
            producer.flush();
        }
        Path tmp = Paths.get(countFile + ".tmp");
        Files.writeString(tmp, n + "\n");
        Files.move(tmp, countFile, StandardCopyOption.ATOMIC_MOVE);
        System.out.println("produced " + n);
    }

    // ---------------------------------------------------------------- job

    /** A record in flight: input partition, timestamp, value. */
    static final class Deserializer implements KafkaRecordDeserializationSchema<Tuple3<Integer, Long, byte[]>> {
        private static final long serialVersionUID = 1L;

        @Override
        public void deserialize(ConsumerRecord<byte[], byte[]> r, Collector<Tuple3<Integer, Long, byte[]>> out) {
            out.collect(Tuple3.of(r.partition(), r.timestamp(), r.value()));
        }

        @Override
        public TypeInformation<Tuple3<Integer, Long, byte[]>> getProducedType() {
            return Types.TUPLE(Types.INT, Types.LONG, Types.PRIMITIVE_ARRAY(Types.BYTE));
        }
    }

    /** Same partition, same timestamp, same value: the job is a copy. */
    static final class Serializer implements KafkaRecordSerializationSchema<Tuple3<Integer, Long, byte[]>> {
        private static final long serialVersionUID = 1L;
        private final String topic;

        Serializer(String topic) {
            this.topic = topic;
        }

        @Override
        public ProducerRecord<byte[], byte[]> serialize(
                Tuple3<Integer, Long, byte[]> e, KafkaSinkContext context, Long timestamp) {
            return new ProducerRecord<>(topic, e.f0, e.f1, null, e.f2);
        }
    }

    private static void job(Map<String, String> opt) throws Exception {
        String bootstrap = need(opt, "bootstrap");
        DeliveryGuarantee guarantee = DeliveryGuarantee.valueOf(need(opt, "guarantee").toUpperCase(Locale.ROOT));
        Map<String, String> conf = new HashMap<>();
        conf.put("execution.checkpointing.interval", need(opt, "checkpoint-ms") + "ms");
        conf.put("execution.checkpointing.dir", Paths.get(need(opt, "checkpoint-dir")).toUri().toString());
        conf.put("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION");
        conf.put("execution.checkpointing.num-retained", "2");
        conf.put("parallelism.default", "1");
        // A failure inside the JVM restarts the job from its last checkpoint; the script's SIGKILL
        // ends the JVM, and the next launch restores the newest retained checkpoint.
        conf.put("restart-strategy.type", "fixed-delay");
        conf.put("restart-strategy.fixed-delay.attempts", "3");
        conf.put("restart-strategy.fixed-delay.delay", "1s");
        String restore = opt.get("restore");
        if (restore != null && !restore.isEmpty()) {
            conf.put("execution.state-recovery.path", Paths.get(restore).toUri().toString());
        }
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(Configuration.fromMap(conf));

        KafkaSource<Tuple3<Integer, Long, byte[]>> source = KafkaSource.<Tuple3<Integer, Long, byte[]>>builder()
                .setBootstrapServers(bootstrap)
                .setTopics(need(opt, "input"))
                .setGroupId(need(opt, "group"))
                .setStartingOffsets(OffsetsInitializer.earliest())
                .setDeserializer(new Deserializer())
                .build();

        Properties producer = new Properties();
        // A killed job's open transaction holds read_committed readers back until the job comes
        // back with the same prefix or this times out (Flink's default is an hour).
        producer.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "60000");
        producer.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        var sink = KafkaSink.<Tuple3<Integer, Long, byte[]>>builder()
                .setBootstrapServers(bootstrap)
                .setRecordSerializer(new Serializer(need(opt, "output")))
                .setDeliveryGuarantee(guarantee)
                .setKafkaProducerConfig(producer);
        if (guarantee == DeliveryGuarantee.EXACTLY_ONCE) {
            sink.setTransactionalIdPrefix(need(opt, "txn-prefix"));
        }
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "integers")
                .uid("integers")
                .sinkTo(sink.build())
                .uid("copy");
        System.err.println("flink-replay job: " + guarantee + (restore == null ? "" : " restored from " + restore));
        env.execute("flink-replay " + guarantee);
    }

    // ---------------------------------------------------------------- read

    /**
     * {@code NAME=TOPIC:ISOLATION:FILE} per reader. Each writes "partition offset value timestamp
     * received" lines; it ends once the count file exists and it has every integer below that count
     * (or --linger-ms after the count file appeared, whichever is first).
     */
    private static void read(Map<String, String> opt, List<String> specs) throws Exception {
        String bootstrap = need(opt, "bootstrap");
        Path countFile = Paths.get(need(opt, "count-file"));
        long linger = Long.parseLong(opt.getOrDefault("linger-ms", "60000"));
        List<Thread> threads = new ArrayList<>();
        for (String spec : specs) {
            String[] nameRest = spec.split("=", 2);
            String[] parts = nameRest[1].split(":", 3);
            Thread t = new Thread(() -> {
                try {
                    readOne(bootstrap, parts[0], parts[1], Paths.get(parts[2]), countFile, linger);
                } catch (Exception e) {
                    e.printStackTrace();
                    System.exit(1);
                }
            }, nameRest[0]);
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join();
        }
    }

    private static void readOne(String bootstrap, String topic, String isolation, Path file, Path countFile, long linger)
            throws Exception {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        Set<Long> seen = new HashSet<>();
        long expected = -1;
        long deadline = Long.MAX_VALUE;
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
                BufferedWriter w = Files.newBufferedWriter(file)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo info : c.partitionsFor(topic)) {
                tps.add(new TopicPartition(topic, info.partition()));
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            while (true) {
                ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(100));
                long now = System.currentTimeMillis();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    String v = new String(r.value(), StandardCharsets.UTF_8);
                    seen.add(Long.parseLong(v));
                    w.write(r.partition() + " " + r.offset() + " " + v + " " + r.timestamp() + " " + now + "\n");
                }
                if (expected < 0 && Files.exists(countFile)) {
                    expected = Long.parseLong(Files.readString(countFile).trim());
                    deadline = now + linger;
                }
                if (expected >= 0) {
                    long e = expected;
                    boolean all = seen.size() >= e && seen.stream().filter(x -> x < e).count() == e;
                    if (all || now > deadline) {
                        break;
                    }
                }
            }
        }
    }

    // ---------------------------------------------------------------- report

    private record Rec(int partition, long offset, long value, long timestamp, long received) {}

    private static List<Rec> load(Path file) throws IOException {
        List<Rec> out = new ArrayList<>();
        for (String line : Files.readAllLines(file)) {
            String[] f = line.split(" ");
            out.add(new Rec(Integer.parseInt(f[0]), Long.parseLong(f[1]), Long.parseLong(f[2]),
                    Long.parseLong(f[3]), Long.parseLong(f[4])));
        }
        return out;
    }

    /**
     * {@code NAME=FILE} per source (a reader's file). --count-file: how many integers were
     * produced; --kills: a file with, per SIGKILL, its wall time (ms) and the time of the oldest
     * checkpoint restored; --recovered: the job outputs (reader names) that say when the jobs had
     * caught up; --checkpoint-ms: the jobs' checkpoint interval.
     */
    private static void report(Map<String, String> opt, List<String> specs) throws Exception {
        long expected = Long.parseLong(Files.readString(Paths.get(need(opt, "count-file"))).trim());
        // Per kill: {start, kill time... see below}. The steady latency leaves out the integers
        // produced from one checkpoint interval before the restored checkpoint completed (an
        // exactly-once sink commits a checkpoint's transaction after the checkpoint completes: a
        // kill soon after it leaves that transaction to the relaunch), or the oldest replayed
        // integer if older, to the moment the job had caught up. d = {kill, start, caught up}.
        long interval = Long.parseLong(opt.getOrDefault("checkpoint-ms", "0"));
        List<long[]> down = new ArrayList<>();
        Map<long[], Long> restored = new java.util.IdentityHashMap<>();
        String killFile = opt.get("kills");
        if (killFile != null && Files.exists(Paths.get(killFile))) {
            for (String l : Files.readAllLines(Paths.get(killFile))) {
                if (!l.isBlank()) {
                    String[] f = l.trim().split(" ");
                    long[] d = {Long.parseLong(f[0]), Long.parseLong(f[1]) - interval, Long.parseLong(f[0])};
                    down.add(d);
                    restored.put(d, Long.parseLong(f[1]));
                }
            }
        }
        Map<String, String> files = new java.util.LinkedHashMap<>();
        for (String spec : specs) {
            String[] kv = spec.split("=", 2);
            files.put(kv[0], kv[1]);
        }
        // Caught up: the first receipt after the kill, in every job output named by --recovered,
        // of a record produced less than a second before.
        for (String name : opt.getOrDefault("recovered", "").split(",")) {
            if (name.isEmpty()) {
                continue;
            }
            List<Rec> recs = load(Paths.get(files.get(name)));
            for (long[] d : down) {
                long caught = recs.stream().filter(r -> r.received > d[0] && r.received - r.timestamp < 1000)
                        .mapToLong(Rec::received).min().orElse(Long.MAX_VALUE);
                d[2] = Math.max(d[2], caught);
                // A kill while the job works through a backlog goes back further than the
                // checkpoint's completion says (its barrier left the source earlier): from the
                // oldest integer replayed after the kill.
                Set<Long> before = recs.stream().filter(r -> r.received <= d[0]).map(Rec::value)
                        .collect(Collectors.toSet());
                recs.stream().filter(r -> r.received > d[0] && before.contains(r.value)).mapToLong(Rec::timestamp)
                        .min().ifPresent(t -> d[1] = Math.min(d[1], t));
            }
        }
        PrintWriter out = new PrintWriter(System.out, true);
        out.printf("%d integers produced, %d kills%n", expected, down.size());
        for (long[] d : down) {
            out.printf("  kill at %s: restored a checkpoint completed %d ms before it; left out of the steady "
                    + "latency: integers produced from %d ms before it to %d ms after it (caught up)%n",
                    java.time.Instant.ofEpochMilli(d[0]), d[0] - restored.get(d), d[0] - d[1], d[2] - d[0]);
        }
        out.println();
        out.printf("%-12s %8s %8s %6s %7s %6s | %-26s | %-17s%n", "", "", "", "", "", "",
                "steady (between kills)", "all integers");
        out.printf("%-12s %8s %8s %6s %7s %6s | %8s %8s %8s | %8s %8s%n", "source", "records", "distinct", "dups",
                "missing", "order", "p50 ms", "p99 ms", "max ms", "p99 ms", "max ms");
        Map<String, List<Rec>> all = new java.util.LinkedHashMap<>();
        for (Map.Entry<String, String> kv : files.entrySet()) {
            List<Rec> recs = load(Paths.get(kv.getValue()));
            all.put(kv.getKey(), recs);
            Map<Long, Long> firstReceipt = new HashMap<>();
            List<Long> up = new ArrayList<>();
            Map<Integer, Long> newestFirst = new HashMap<>();
            long outOfOrder = 0;
            for (Rec r : recs) {
                if (firstReceipt.putIfAbsent(r.value, r.received - r.timestamp) == null) {
                    if (down.stream().noneMatch(d -> r.timestamp >= d[1] && r.timestamp <= d[2])) {
                        up.add(r.received - r.timestamp);
                    }
                    Long prev = newestFirst.get(r.partition);
                    if (prev != null && r.value < prev) {
                        outOfOrder++;
                    } else {
                        newestFirst.put(r.partition, r.value);
                    }
                }
            }
            long distinct = firstReceipt.size();
            long missing = 0;
            for (long i = 0; i < expected; i++) {
                if (!firstReceipt.containsKey(i)) {
                    missing++;
                }
            }
            long[] lat = firstReceipt.values().stream().mapToLong(Long::longValue).sorted().toArray();
            long[] upLat = up.stream().mapToLong(Long::longValue).sorted().toArray();
            out.printf("%-12s %8d %8d %6d %7d %6d | %8s %8s %8s | %8s %8s%n", kv.getKey(), recs.size(), distinct,
                    recs.size() - distinct, missing, outOfOrder, pct(upLat, 0.50), pct(upLat, 0.99), pct(upLat, 1.0),
                    pct(lat, 0.99), pct(lat, 1.0));
        }
        out.println();
        out.println("(dups: records - distinct; order: first copies below an earlier first copy in their partition;");
        out.println(" latency: produce time to the reader's first receipt of each integer; steady: without the");
        out.println(" integers produced from one checkpoint interval before the checkpoint each kill went back to");
        out.println(" (or the oldest integer replayed, if older) until the job had caught up: a record reached its");
        out.println(" output within 1 s of being produced)");
        for (Map.Entry<String, List<Rec>> e : all.entrySet()) {
            out.printf("%nAround each kill, partition 0 of %s (received before | after the SIGKILL):%n", e.getKey());
            List<Rec> p0 = e.getValue().stream().filter(r -> r.partition == 0).collect(Collectors.toList());
            for (long[] d : down) {
                out.println("  " + pattern(p0, d[0]));
            }
        }
    }

    private static String pct(long[] sorted, double q) {
        if (sorted.length == 0) {
            return "-";
        }
        int i = (int) Math.ceil(q * sorted.length) - 1;
        return Long.toString(sorted[Math.max(0, Math.min(sorted.length - 1, i))]);
    }

    /** `a b c … x y | SIGKILL | r s t … (N replays: lo..hi)` for one kill. */
    private static String pattern(List<Rec> p, long kill) {
        List<Long> before = new ArrayList<>();
        List<Long> after = new ArrayList<>();
        Set<Long> seenBefore = new HashSet<>();
        for (Rec r : p) {
            if (r.received <= kill) {
                before.add(r.value);
                seenBefore.add(r.value);
            }
        }
        long replays = 0;
        long lo = Long.MAX_VALUE;
        long hi = Long.MIN_VALUE;
        for (Rec r : p) {
            if (r.received > kill) {
                after.add(r.value);
                if (seenBefore.contains(r.value)) {
                    replays++;
                    lo = Math.min(lo, r.value);
                    hi = Math.max(hi, r.value);
                }
            }
        }
        StringBuilder s = new StringBuilder();
        int n = before.size();
        if (n > 5) {
            s.append("… ");
            before = before.subList(n - 5, n);
        }
        s.append(before.stream().map(String::valueOf).collect(Collectors.joining(" ")));
        s.append("  | SIGKILL |  ");
        s.append(after.stream().limit(8).map(String::valueOf).collect(Collectors.joining(" ")));
        if (after.size() > 8) {
            s.append(" …");
        }
        s.append(replays == 0 ? "  (no replays)" : "  (" + replays + " replays: " + lo + ".." + hi + ")");
        return s.toString();
    }
}
