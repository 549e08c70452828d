//! Topics deleted, or deleted and created again, while kafka-dedup runs (issue 23 item 4).
//!
//! A Kafka partition's end offset never goes down while its topic lives, and a topic's partition
//! count never shrinks; librdkafka 2.12 notices a topic's new id but leaves the consumer's
//! position and the committed offsets as they were (`rdkafka_topic.c`, "FIXME: an offset reset
//! must be triggered"), so a recreated input was read from the old topic's offsets: records
//! skipped or re-read, without a word. [`watch`] asks the brokers every [`WATCH_INTERVAL`] for
//! the end offsets of every configured topic (input, output, side topics, the route topic of the
//! global scope) and [`change`] (a pure function) compares them with the highest seen: a topic
//! gone from the metadata was deleted, a partition whose end went down (or that no longer
//! exists) belongs to a topic created again. Either is kept in [`crate::status::Status`] until
//! the process stops: `/readyz` answers 503 naming the topic and its configuration key, and the
//! log says what to do. A topic deleted and created again that has grown past the old one's end
//! between two looks is not seen (librdkafka's C API gives no topic id).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use tracing::error;

use crate::config::{Config, Scope};
use crate::kafka;
use crate::pipeline::Shutdown;
use crate::status::Status;

/// How often [`watch`] looks at the topics.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(5);

/// Timeout of each metadata and end-offset request of [`watch`].
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What one look found of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// The brokers do not know it (`UNKNOWN_TOPIC_OR_PARTITION`).
    Missing,
    /// Partition -> end offset (the high watermark).
    Ends(BTreeMap<i32, i64>),
}

/// What happened to a topic between two looks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// It is gone.
    Deleted,
    /// It was deleted and created again: `partition` ended at `was`, it ends at `now` (`None`: the
    /// new topic has no such partition).
    Recreated {
        /// The partition.
        partition: i32,
        /// Its highest end offset seen before.
        was: i64,
        /// Its end offset now.
        now: Option<i64>,
    },
}

/// Compares `now` with `before` (the highest end offset seen of each partition). A rule of
/// Kafka's: end offsets never go down and partitions are never removed while a topic lives.
/// Partitions added since are no change.
pub fn change(before: &BTreeMap<i32, i64>, now: &Seen) -> Option<Change> {
    match now {
        Seen::Missing if !before.is_empty() => Some(Change::Deleted),
        Seen::Missing => None,
        Seen::Ends(ends) => before.iter().find_map(|(p, was)| match ends.get(p) {
            Some(end) if end >= was => None,
            now => Some(Change::Recreated {
                partition: *p,
                was: *was,
                now: now.copied(),
            }),
        }),
    }
}

/// The topics [`watch`] looks at: (configuration key, topic), every one that is set.
pub fn watched(cfg: &Config) -> Vec<(&'static str, String)> {
    let route = (cfg.fingerprint.scope == Scope::Global).then(|| cfg.fingerprint.route_topic.clone());
    [
        ("input.topic", Some(cfg.input.topic.clone())),
        ("output.topic", Some(cfg.output.topic.clone())),
        ("output.duplicates_topic", Some(cfg.output.duplicates_topic.clone())),
        (
            "fingerprint.dead_letter_topic",
            Some(cfg.fingerprint.dead_letter_topic.clone()),
        ),
        ("fingerprint.route_topic", route),
    ]
    .into_iter()
    .filter_map(|(k, t)| t.filter(|t| !t.is_empty()).map(|t| (k, t)))
    .collect()
}

/// One look at `topic`: `None` when the brokers gave no clear answer (unreachable, a leader
/// election), which is no evidence either way.
fn look(client: &BaseConsumer<kafka::Logged>, topic: &str) -> Option<Seen> {
    let md = client.fetch_metadata(Some(topic), REQUEST_TIMEOUT).ok()?;
    let t = md.topics().iter().find(|t| t.name() == topic)?;
    match t.error().map(RDKafkaErrorCode::from) {
        Some(RDKafkaErrorCode::UnknownTopicOrPartition) => return Some(Seen::Missing),
        Some(_) => return None,
        None => {}
    }
    let mut tpl = TopicPartitionList::new();
    for p in t.partitions() {
        tpl.add_partition_offset(topic, p.id(), Offset::End).ok()?;
    }
    // ListOffsets with timestamp -1 (Offset::End) answers the end offset of each partition.
    let ends = client.offsets_for_times(tpl, REQUEST_TIMEOUT).ok()?;
    let mut seen = BTreeMap::new();
    for e in ends.elements() {
        match (e.error(), e.offset()) {
            (Ok(()), Offset::Offset(o)) => {
                seen.insert(e.partition(), o);
            }
            _ => return None,
        }
    }
    Some(Seen::Ends(seen))
}

/// What the operator reads, in the log and in `/readyz`.
fn describe(key: &str, topic: &str, c: &Change) -> String {
    let what = match c {
        Change::Deleted => "was deleted while kafka-dedup ran".to_string(),
        Change::Recreated { partition, was, now } => format!(
            "was deleted and created again while kafka-dedup ran (partition {partition} ended at offset {was}, now {})",
            now.map_or_else(|| "does not exist".to_string(), |n| format!("at {n}"))
        ),
    };
    format!(
        "topic \"{topic}\" ({key}) {what}: the committed offsets and the store describe the old topic. Stop every \
         instance, reset the group's offsets of a recreated input (kafka-consumer-groups.sh --reset-offsets), remove \
         the store directories, then start again"
    )
}

/// Looks at the configured topics every [`WATCH_INTERVAL`] until `shutdown`, and records each
/// deleted or recreated one in `status` (once; `/readyz` names it until the process stops).
/// Errors: the client cannot be created (the configuration was checked at start, so only a
/// resource failure), in which case nothing is watched.
pub fn watch(cfg: Arc<Config>, status: Arc<Status>, shutdown: Shutdown) -> Result<(), KafkaError> {
    crate::crash::segv_point("segv");
    let client: BaseConsumer<kafka::Logged> =
        kafka::reader_config(&cfg).create_with_context(kafka::Logged::new("topics watcher"))?;
    let topics = watched(&cfg);
    let mut highest: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
    while !shutdown.is_triggered() {
        for (key, topic) in &topics {
            if status.topic_changed(topic) {
                continue;
            }
            let Some(seen) = look(&client, topic) else { continue };
            let before = highest.entry(topic.clone()).or_default();
            if let Some(c) = change(before, &seen) {
                let why = describe(key, topic, &c);
                error!(topic = %topic, key = *key, change = ?c, "{why}");
                status.set_topic_changed(topic, why);
            } else if let Seen::Ends(ends) = seen {
                if *key == "input.topic" {
                    crate::telemetry::input_partitions(ends.len());
                }
                for (p, end) in ends {
                    let e = before.entry(p).or_insert(end);
                    *e = (*e).max(end);
                }
            }
        }
        let next = std::time::Instant::now() + WATCH_INTERVAL;
        while !shutdown.is_triggered() && std::time::Instant::now() < next {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(e: &[(i32, i64)]) -> BTreeMap<i32, i64> {
        e.iter().copied().collect()
    }

    /// A row: its name, the highest ends seen, the look now, the change expected.
    type Row = (&'static str, BTreeMap<i32, i64>, Seen, Option<Change>);

    #[test]
    fn changes_follow_from_end_offsets_that_never_go_down() {
        let rows: Vec<Row> = vec![
            ("first look", ends(&[]), Seen::Ends(ends(&[(0, 5)])), None),
            ("first look, missing", ends(&[]), Seen::Missing, None),
            (
                "grown",
                ends(&[(0, 5), (1, 7)]),
                Seen::Ends(ends(&[(0, 5), (1, 9)])),
                None,
            ),
            (
                "partition added",
                ends(&[(0, 5)]),
                Seen::Ends(ends(&[(0, 5), (1, 0)])),
                None,
            ),
            ("deleted", ends(&[(0, 5)]), Seen::Missing, Some(Change::Deleted)),
            (
                "recreated, shorter",
                ends(&[(0, 5), (1, 7)]),
                Seen::Ends(ends(&[(0, 5), (1, 2)])),
                Some(Change::Recreated {
                    partition: 1,
                    was: 7,
                    now: Some(2),
                }),
            ),
            (
                "recreated with fewer partitions",
                ends(&[(0, 0), (1, 0)]),
                Seen::Ends(ends(&[(0, 0)])),
                Some(Change::Recreated {
                    partition: 1,
                    was: 0,
                    now: None,
                }),
            ),
            (
                "empty topic recreated empty: not seen",
                ends(&[(0, 0)]),
                Seen::Ends(ends(&[(0, 0)])),
                None,
            ),
        ];
        for (name, before, now, want) in rows {
            assert_eq!(change(&before, &now), want, "{name}");
        }
    }
}
