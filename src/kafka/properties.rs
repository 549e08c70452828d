//! Which librdkafka properties kafka-dedup sets itself ([`ENFORCED`], refused with another value
//! under `[kafka.properties]`: [`refused_override`]) and which concern only one kind of client
//! ([`CONSUMER_ONLY`], [`PRODUCER_ONLY`]).

use crate::config::Delivery;

/// A librdkafka property kafka-dedup sets itself on its clients, after `[kafka.properties]`
/// (a row of [`ENFORCED`]).
#[derive(Debug, Clone, Copy)]
pub struct Enforced {
    /// The property.
    pub name: &'static str,
    /// The value kafka-dedup sets, which `[kafka.properties]` may repeat; `None`: taken from
    /// another key ([`Enforced::why`] names it), so any value there is refused.
    pub value: Option<&'static str>,
    /// Only in this delivery mode (`None`: in both).
    pub delivery: Option<Delivery>,
    /// Why, as the refusal says it.
    pub why: &'static str,
}

const fn fixed(name: &'static str, value: &'static str, why: &'static str) -> Enforced {
    Enforced {
        name,
        value: Some(value),
        delivery: None,
        why,
    }
}

const fn from_key(name: &'static str, why: &'static str) -> Enforced {
    Enforced {
        name,
        value: None,
        delivery: None,
        why,
    }
}

/// Idempotent mode's producer timeout: a record waits for its acknowledgement as long as it
/// takes (an unreachable output pauses the filter, it does not fail records; librdkafka's
/// default would give up after 5 minutes, possibly while later records get through).
const NO_TIMEOUT: &str = "a record waits for its acknowledgement as long as it takes; a delivery that gave up \
                          while later records got through would leave a gap that a restart can only fill out \
                          of order";

/// What kafka-dedup sets itself on its clients, after `[kafka.properties]`: `[kafka.properties]`
/// may name one only with the value kafka-dedup sets (in the delivery mode it applies to); any
/// other value is refused when the configuration is loaded (exit 2 naming the key,
/// [`refused_override`]), since it would be silently overridden. `message.timeout.ms` and
/// `delivery.timeout.ms` are one setting in librdkafka (aliases).
pub const ENFORCED: &[Enforced] = &[
    from_key("bootstrap.servers", "from kafka.bootstrap_servers"),
    from_key("group.id", "from input.group_id"),
    from_key(
        "transactional.id",
        "from output.transactional_id (or input.group_instance_id)",
    ),
    fixed(
        "enable.auto.commit",
        "false",
        "offsets are committed only at checkpoints, after delivery",
    ),
    fixed(
        "auto.commit.enable",
        "false",
        "offsets are committed only at checkpoints, after delivery",
    ),
    fixed(
        "enable.auto.offset.store",
        "false",
        "offsets are stored only at checkpoints, after delivery",
    ),
    fixed(
        "enable.idempotence",
        "true",
        "no duplicates or reordering from producer retries",
    ),
    fixed(
        "allow.auto.create.topics",
        "false",
        "kafka-dedup creates no topic: librdkafka's producer default (true) lets a metadata request create the \
         topic it names on a broker with auto.create.topics.enable (Apache Kafka's default), a deleted output \
         with the broker's partition count",
    ),
    fixed(
        "auto.offset.reset",
        "earliest",
        "a committed offset that retention deleted resumes at the oldest record left, never at the \
         end; where a partition without a committed offset starts is `input.start`",
    ),
    Enforced {
        delivery: Some(Delivery::Idempotent),
        ..fixed("message.timeout.ms", "0", NO_TIMEOUT)
    },
    Enforced {
        delivery: Some(Delivery::Idempotent),
        ..fixed("delivery.timeout.ms", "0", NO_TIMEOUT)
    },
    Enforced {
        delivery: Some(Delivery::Idempotent),
        ..fixed(
            "enable.gapless.guarantee",
            "true",
            "without it librdkafka lets later records through after a batch failed",
        )
    },
];

/// Why `[kafka.properties]` may not set `name` to `value` under `delivery`: `Some` when `name` is
/// one of [`ENFORCED`] in that mode and `value` is not the value kafka-dedup sets (any case, space
/// around it ignored; `auto.offset.reset`'s synonyms `smallest` and `beginning` are its
/// `earliest`), or is taken from another key; `None` otherwise. The text names the value
/// kafka-dedup sets (or the key it comes from) and the reason.
pub fn refused_override(name: &str, value: &str, delivery: Delivery) -> Option<String> {
    let e = ENFORCED
        .iter()
        .find(|e| e.name == name && e.delivery.is_none_or(|d| d == delivery))?;
    let Some(fixed) = e.value else {
        return Some(format!("set by kafka-dedup {}; remove it here", e.why));
    };
    let v = value.trim().to_ascii_lowercase();
    let same = match fixed {
        "earliest" => matches!(v.as_str(), "earliest" | "smallest" | "beginning"),
        other => v == other,
    };
    let mode = match e.delivery {
        Some(Delivery::Idempotent) => " with output.delivery = \"idempotent\"",
        Some(Delivery::Transactional) => " with output.delivery = \"transactional\"",
        None => "",
    };
    (!same).then(|| {
        format!(
            "kafka-dedup sets it to {fixed}{mode} whatever is written here ({}); remove it",
            e.why
        )
    })
}

/// Properties that concern only consumers ("C" in the C/P column of librdkafka 2.12.1's
/// CONFIGURATION.md, global and topic tables).
pub const CONSUMER_ONLY: &[&str] = &[
    "auto.commit.enable",
    "auto.commit.interval.ms",
    "auto.offset.reset",
    "check.crcs",
    "consume.callback.max.messages",
    "coordinator.query.interval.ms",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.partition.eof",
    "fetch.error.backoff.ms",
    "fetch.max.bytes",
    "fetch.message.max.bytes",
    "fetch.min.bytes",
    "fetch.queue.backoff.ms",
    "fetch.wait.max.ms",
    "group.id",
    "group.instance.id",
    "group.protocol",
    "group.protocol.type",
    "group.remote.assignor",
    "heartbeat.interval.ms",
    "isolation.level",
    "max.partition.fetch.bytes",
    "max.poll.interval.ms",
    "offset.store.method",
    "offset.store.path",
    "offset.store.sync.interval.ms",
    "partition.assignment.strategy",
    "queued.max.messages.kbytes",
    "queued.min.messages",
    "session.timeout.ms",
];

/// Properties that concern only producers ("P" in the same column).
pub const PRODUCER_ONLY: &[&str] = &[
    "acks",
    "batch.num.messages",
    "batch.size",
    "compression.codec",
    "compression.level",
    "compression.type",
    "delivery.report.only.error",
    "delivery.timeout.ms",
    "enable.gapless.guarantee",
    "enable.idempotence",
    "linger.ms",
    "message.send.max.retries",
    "message.timeout.ms",
    "partitioner",
    "produce.offset.report",
    "queue.buffering.backpressure.threshold",
    "queue.buffering.max.kbytes",
    "queue.buffering.max.messages",
    "queue.buffering.max.ms",
    "queuing.strategy",
    "request.required.acks",
    "request.timeout.ms",
    "retries",
    "sticky.partitioning.linger.ms",
    "transaction.timeout.ms",
    "transactional.id",
];
