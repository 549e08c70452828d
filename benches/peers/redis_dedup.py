#!/usr/bin/env python3
"""A peer of the end-to-end benchmark (benches/e2e.rs, `--peers`): the dedup a Python user writes
with confluent-kafka and Redis. Each record's id (its value) is claimed in Redis with
`SET <group>:<id> 1 NX PX <horizon>` (a run's ids apart from another's) (pipelined per polled batch, in record order); a record whose
claim succeeds is produced to the output (same partition, key, value, timestamp), the others are
dropped. Every 5 s the producer is flushed and the consumer's position committed (at least once).

    redis_dedup.py BROKERS INPUT OUTPUT GROUP REDIS_PORT HORIZON_MS

Runs until SIGTERM.
"""
import signal
import sys
import time

import redis
from confluent_kafka import Consumer, KafkaException, Producer


def main():
    brokers, input_topic, output, group, redis_port, horizon_ms = sys.argv[1:7]
    horizon_ms = int(horizon_ms)
    r = redis.Redis(host="127.0.0.1", port=int(redis_port))
    prefix = group.encode() + b":"
    consumer = Consumer(
        {
            "bootstrap.servers": brokers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    producer = Producer({"bootstrap.servers": brokers, "linger.ms": 5})
    consumer.subscribe([input_topic])
    running = [True]
    signal.signal(signal.SIGTERM, lambda *_: running.__setitem__(0, False))
    next_commit = time.monotonic() + 5.0
    while running[0]:
        batch = consumer.consume(num_messages=1000, timeout=0.1)
        records = [m for m in batch if m.error() is None]
        if records:
            pipe = r.pipeline(transaction=False)
            for m in records:
                pipe.set(prefix + m.value(), b"1", nx=True, px=horizon_ms)
            for m, claimed in zip(records, pipe.execute()):
                if not claimed:
                    continue
                while True:
                    try:
                        producer.produce(
                            output,
                            value=m.value(),
                            key=m.key(),
                            partition=m.partition(),
                            timestamp=m.timestamp()[1],
                        )
                        break
                    except BufferError:
                        producer.poll(0.01)
            producer.poll(0)
        if time.monotonic() >= next_commit:
            producer.flush()
            try:
                consumer.commit(asynchronous=False)
            except KafkaException:
                pass  # nothing consumed yet
            next_commit = time.monotonic() + 5.0
    producer.flush()
    consumer.close()


if __name__ == "__main__":
    main()
