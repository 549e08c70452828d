package kafkadedup.peers;

import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.WindowStore;
import org.apache.kafka.streams.state.WindowStoreIterator;

/**
 * The dedup a JVM user writes with Kafka Streams ("finding distinct events"): each record's id
 * (its value) is looked up in a persistent window store (RocksDB, changelogged) over the last
 * HORIZON_MS of record time; absent, the record is forwarded and its id stored; present, it is
 * dropped. The window store's retention expires ids after the horizon.
 *
 * <pre>java -cp 'target/classes:target/lib/*' kafkadedup.peers.StreamsDedup \
 *     BROKERS INPUT OUTPUT APPLICATION_ID at_least_once|exactly_once_v2 HORIZON_MS STATE_DIR</pre>
 *
 * Runs until SIGTERM (or exits 1 when the client shuts down on an error). Everything else is Kafka Streams' default configuration.
 */
public final class StreamsDedup {
  private static final String STORE = "ids";

  /** Forwards a record whose id the store does not hold within the horizon, and stores it. */
  static final class Dedup implements Processor<Bytes, Bytes, Bytes, Bytes> {
    private final long horizonMs;
    private ProcessorContext<Bytes, Bytes> context;
    private WindowStore<Bytes, Long> ids;

    Dedup(long horizonMs) {
      this.horizonMs = horizonMs;
    }

    @Override
    public void init(ProcessorContext<Bytes, Bytes> context) {
      this.context = context;
      this.ids = context.getStateStore(STORE);
    }

    @Override
    public void process(Record<Bytes, Bytes> record) {
      Bytes id = record.value();
      if (id == null) {
        context.forward(record);
        return;
      }
      long ts = record.timestamp();
      boolean seen;
      try (WindowStoreIterator<Long> it = ids.fetch(id, ts - horizonMs, ts + horizonMs)) {
        seen = it.hasNext();
      }
      if (!seen) {
        ids.put(id, ts, ts);
        context.forward(record);
      }
    }
  }

  public static void main(String[] args) throws InterruptedException {
    if (args.length != 7) {
      System.err.println(
          "usage: StreamsDedup BROKERS INPUT OUTPUT APPLICATION_ID GUARANTEE HORIZON_MS STATE_DIR");
      System.exit(2);
    }
    String brokers = args[0], input = args[1], output = args[2], app = args[3], guarantee = args[4];
    long horizonMs = Long.parseLong(args[5]);
    Properties p = new Properties();
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
    p.put(StreamsConfig.STATE_DIR_CONFIG, args[6]);
    p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");

    StreamsBuilder b = new StreamsBuilder();
    b.addStateStore(
        Stores.windowStoreBuilder(
            Stores.persistentWindowStore(
                STORE, Duration.ofMillis(horizonMs * 2), Duration.ofMillis(horizonMs), false),
            Serdes.Bytes(),
            Serdes.Long()));
    b.stream(input, Consumed.with(Serdes.Bytes(), Serdes.Bytes()))
        .process(() -> new Dedup(horizonMs), STORE)
        .to(output, Produced.with(Serdes.Bytes(), Serdes.Bytes()));

    KafkaStreams streams = new KafkaStreams(b.build(), p);
    CountDownLatch stopped = new CountDownLatch(1);
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  streams.close(Duration.ofSeconds(30));
                  stopped.countDown();
                }));
    streams.setUncaughtExceptionHandler(
        e -> {
          e.printStackTrace();
          return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
              .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
    // A client shut down by an error exits (1), so the benchmark sees it end.
    streams.setStateListener(
        (now, before) -> {
          if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
            stopped.countDown();
          }
        });
    streams.start();
    stopped.await();
    if (streams.state() == KafkaStreams.State.ERROR) {
      System.exit(1);
    }
  }
}
