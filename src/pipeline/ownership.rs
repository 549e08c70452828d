//! Taking input partitions on: assignment (pause, start the recovery), the recovery's result
//! (commit, resume, seek, run). Giving them up (revocation, release, shutdown, the abort after a
//! fatal error) is `handover`. See docs/ARCHITECTURE.md, "The partition life cycle", and
//! [`crate::partition`].

use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::producer::{Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, error, info, warn};

use super::checkpoint::commit_list;
use super::checkpoint_state::CheckpointRecord;
use super::context::FilterConsumer;
use super::delivery::DeliveryContext;
use super::filter::Filter;
use super::mode::Mode;
use super::recoveries::{Finished, NotRecovered};
use super::{Fatal, TopicCounts, KAFKA_TIMEOUT};
use crate::config::{Config, Partitioning};
use crate::horizon::Clock;
use crate::kafka;
use crate::partition::{FirstForward, InFlight, Partition, Recovering, Running};
use crate::recovery::{recover, Recovered, RecoveryEnv, RecoveryError, RecoveryRequest};
use crate::telemetry::{self, PartitionMetrics};

/// Delay before retrying a recovery that failed (broker unreachable, ...).
const RECOVERY_RETRY: Duration = Duration::from_secs(2);
/// Panics in a row of one partition's recovery after which the process stops (exit 1,
/// [`Fatal::RecoveryPanicked`]): a panic is a bug, and one that recurs at every attempt would
/// otherwise leave the partition recovering for ever, unnoticed. Before that, each retry waits
/// twice as long as the one before, from [`RECOVERY_RETRY`] ([`after_panic`]).
pub(super) const RECOVERY_PANICS_MAX: u32 = 3;

/// What follows the `n`-th panic in a row (`n` from 1) of a partition's recovery: a retry after
/// this delay ([`RECOVERY_RETRY`], doubling), or `None` from the [`RECOVERY_PANICS_MAX`]-th on:
/// the process stops.
fn after_panic(n: u32) -> Option<Duration> {
    (n < RECOVERY_PANICS_MAX).then(|| RECOVERY_RETRY.saturating_mul(1u32 << n.saturating_sub(1).min(16)))
}

/// How long after its first failed seek a partition may still fail to start (its recovery retried
/// every [`RECOVERY_RETRY`] meanwhile, or, paused for back-pressure, its resume tried every tick)
/// before the process stops ([`Fatal::SeekFailing`], exit 1): [`SEEK_FAILING_MAX`]; in
/// transactional mode longer, [`seek_failing_max`].
///
/// Why: librdkafka seeks only a partition whose fetcher has started (`rd_kafka_toppar_seek`,
/// rdkafka_partition.c: `_STATE` otherwise), and it starts the fetcher once its own fetch of the
/// group's committed offsets for the assignment has answered (rdkafka_assignment.c). When that
/// fetch fails with an error it does not retry (a `GROUP_AUTHORIZATION_FAILED` while ACLs change,
/// any partition-level error), the partition stays in the assignment unstarted until the next
/// assignment: every seek fails, and the partition recovered again and again for ever, running
/// never (`mock::a_partition_librdkafka_never_starts_stops_the_process`). A restart joins the
/// group anew, and the new assignment fetches the offsets again. A fetcher that is merely slow to
/// start (that fetch retried while the coordinator loads) starts within seconds.
pub(super) const SEEK_FAILING_MAX: Duration = Duration::from_secs(30);

/// [`SEEK_FAILING_MAX`], and in transactional mode `transaction.timeout.ms` more: librdkafka's
/// fetch for the assignment asks for stable offsets and is retried, for every partition it names,
/// while one of them has offsets in an open transaction (`UNSTABLE_OFFSET_COMMIT`,
/// rdkafka_request.c `rd_kafka_handle_OffsetFetch`): a killed previous owner's transaction holds
/// them until the broker aborts it at that timeout, while the filter's own fetch of another
/// partition answers at once.
pub(super) fn seek_failing_max(cfg: &Config) -> Duration {
    match cfg.output.delivery {
        crate::config::Delivery::Idempotent => SEEK_FAILING_MAX,
        crate::config::Delivery::Transactional => SEEK_FAILING_MAX + super::transaction::transaction_timeout(cfg),
    }
}

/// How often a held partition (no output partition for it) looks again whether the output
/// topic has grown.
const HOLD_RETRY: Duration = Duration::from_secs(5);

/// Timeout of the metadata requests a recovery worker makes before recovering.
const TOPOLOGY_TIMEOUT: Duration = Duration::from_secs(10);

/// Before a recovery: how many partitions the input and output topics have now, asked through
/// the producer's client (which thereby knows an output partition added since its last
/// metadata refresh, and takes records for it: `kafka::partition_count`). With
/// `partitioning = "preserve"`, input partition `p` needs output partition `p`: without it,
/// [`NotRecovered::NoOutputPartition`]. A record for it would be refused by the producer
/// (`Local: Unknown partition`), which stopped the pipeline; the restart then exited 2 at the
/// topic check, in a loop that stopped every partition.
fn topology(producer: &ThreadedProducer<DeliveryContext>, cfg: &Config, p: i32) -> Result<TopicCounts, NotRecovered> {
    let count = |topic: &str| {
        kafka::partition_count(producer.client(), topic, TOPOLOGY_TIMEOUT)
            .map(Option::unwrap_or_default)
            .map_err(|e| NotRecovered::Recovery(RecoveryError::Kafka(e)))
    };
    let output = count(&cfg.output.topic)?;
    let input = count(&cfg.input.topic)?;
    if cfg.output.partitioning == Partitioning::Preserve && p as usize >= output {
        return Err(NotRecovered::NoOutputPartition {
            topic: cfg.output.topic.clone(),
            partition: p,
            partitions: output,
        });
    }
    Ok(TopicCounts { input, output })
}

/// Why a recovered partition could not start running (its recovery is retried), or a halted
/// one could not resume (retried).
#[derive(Debug, thiserror::Error)]
pub(super) enum StartError {
    /// Idempotent mode: the start-of-ownership commit failed.
    #[error("commit before resuming: {0}")]
    Commit(KafkaError),
    /// The consumer did not resume the partition.
    #[error("resume: {0}")]
    Resume(KafkaError),
    /// The consumer did not seek the partition to the offset to resume at.
    #[error("seek to {offset}: {error}")]
    Seek {
        /// The input offset to resume at.
        offset: i64,
        /// librdkafka's error.
        error: KafkaError,
    },
}

impl Filter {
    /// New partitions: pause them and start their recovery.
    pub fn assign(&mut self, consumer: &FilterConsumer, parts: &[i32]) {
        let mut tpl = TopicPartitionList::new();
        for p in parts {
            tpl.add_partition(&self.cfg.input.topic, *p);
        }
        if let Err(e) = consumer.pause(&tpl) {
            warn!(error = %e, "pausing newly assigned partitions failed");
        }
        for &p in parts {
            if self.partitions.contains_key(&p) {
                continue;
            }
            self.recoveries.incarnations += 1;
            self.recoveries.panics.remove(&p);
            let rec = Recovering {
                incarnation: self.recoveries.incarnations,
                since: Instant::now(),
                cancel: Arc::new(AtomicBool::new(false)),
                retry_at: None,
            };
            info!(partition = p, "partition assigned; recovering its generations");
            self.spawn_recovery(p, &rec);
            self.install(p, Partition::Recovering(rec));
        }
    }

    /// Starts a worker thread recovering partition `p` for ownership `rec`, once [`topology`]
    /// found its output partition.
    fn spawn_recovery(&self, p: i32, rec: &Recovering) {
        let mut env = RecoveryEnv {
            cfg: self.cfg.clone(),
            store: self.store.clone(),
            fingerprinter: self.fingerprinter.clone(),
            output_partitions: self.topics.output,
            totals: self.totals.clone(),
        };
        let req = RecoveryRequest {
            partition: p,
            incarnation: rec.incarnation,
            since: rec.since,
            attempt: Instant::now(),
            cancel: rec.cancel.clone(),
        };
        let tx = self.recoveries.tx.clone();
        let producer = self.producer.clone();
        let spawned = std::thread::Builder::new().name(format!("recover-{p}")).spawn(move || {
            let (topics, result) = match topology(&producer, &env.cfg, p) {
                Ok(t) => {
                    env.output_partitions = env.output_partitions.max(t.output);
                    // A panic must not leave the partition recovering for ever: it becomes the
                    // result.
                    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        crate::crash::panic_point("recovery");
                        recover(&env, &req)
                    }))
                    .unwrap_or_else(|panic| Err(RecoveryError::Panicked(panic_message(panic.as_ref()))));
                    (Some(t), result.map_err(NotRecovered::from))
                }
                Err(e) => (None, Err(e)),
            };
            drop(producer);
            let _ = tx.send(Finished {
                partition: req.partition,
                incarnation: req.incarnation,
                topics,
                result,
            });
        });
        if let Err(e) = spawned {
            error!(partition = p, error = %e, "cannot start a recovery thread; retrying");
            let _ = self.recoveries.tx.send(Finished {
                partition: p,
                incarnation: rec.incarnation,
                topics: None,
                result: Err(NotRecovered::Recovery(RecoveryError::Thread(e.to_string()))),
            });
        }
    }

    /// True while a recovery worker runs (a partition recovering and not waiting for a retry or
    /// held): the poll loop then waits [`super::RECOVERY_POLL_WAIT`] at most, so that the next
    /// tick installs a finished recovery at once.
    pub(super) fn recovery_running(&self) -> bool {
        self.partitions
            .values()
            .any(|s| matches!(s, Partition::Recovering(r) if r.retry_at.is_none()))
    }

    /// Restarts the recoveries whose retry time has come.
    pub(super) fn retry_recoveries(&mut self) {
        let now = Instant::now();
        let due: Vec<i32> = self
            .partitions
            .iter()
            .filter_map(|(p, s)| match s {
                Partition::Recovering(r) if r.retry_at.is_some_and(|t| t <= now) => Some(*p),
                _ => None,
            })
            .collect();
        for p in due {
            if let Some(Partition::Recovering(r)) = self.partitions.get_mut(&p) {
                r.retry_at = None;
                let snapshot = Recovering {
                    incarnation: r.incarnation,
                    since: r.since,
                    cancel: r.cancel.clone(),
                    retry_at: None,
                };
                self.spawn_recovery(p, &snapshot);
            }
        }
    }

    /// A recovery step of partition `p` failed: retry in [`RECOVERY_RETRY`].
    fn schedule_retry(&mut self, p: i32, why: &str) {
        self.schedule_retry_in(p, why, RECOVERY_RETRY);
    }

    /// A recovery step of partition `p` failed: retry in `delay`.
    fn schedule_retry_in(&mut self, p: i32, why: &str, delay: Duration) {
        if let Some(Partition::Recovering(r)) = self.partitions.get_mut(&p) {
            warn!(partition = p, error = why, retry_in = ?delay, "recovery failed; retrying");
            self.status.set_retrying(p, why);
            r.retry_at = Some(Instant::now() + delay);
        }
    }

    /// The recovery worker of partition `p` panicked: count it and retry with back-off, or, the
    /// [`RECOVERY_PANICS_MAX`]-th time in a row, stop the pipeline ([`Fatal::RecoveryPanicked`]).
    fn recovery_panicked(&mut self, p: i32, e: &RecoveryError) {
        telemetry::recovery_panic(p);
        let n = self.recoveries.panics.entry(p).or_insert(0);
        *n = n.saturating_add(1);
        let panics = *n;
        let Some(delay) = after_panic(panics) else {
            error!(partition = p, error = %e, panics, "recovery worker panicked again (a bug: please report it); stopping");
            return self.fail(Fatal::RecoveryPanicked {
                partition: p,
                panics,
                error: e.to_string(),
            });
        };
        error!(partition = p, error = %e, panics, "recovery worker panicked (a bug: please report it); retrying");
        self.schedule_retry_in(p, &e.to_string(), delay);
    }

    /// Partition `p` has no output partition (`why`): it stays paused and unrecovered, so
    /// nothing of it is forwarded, sent elsewhere or committed, while the other partitions run;
    /// `/readyz` names it; every [`HOLD_RETRY`] its worker looks again, and the partition is
    /// recovered and runs once partitions were added to the output topic, without a restart.
    /// Logged once per ownership.
    fn hold(&mut self, p: i32, why: &NotRecovered) {
        if let Some(Partition::Recovering(r)) = self.partitions.get_mut(&p) {
            if self.held.insert(p) {
                error!(
                    partition = p,
                    reason = %why,
                    "input partition held: nothing of it is forwarded or committed until the output topic has \
                     its partition; the other partitions run"
                );
            }
            self.status.set_held(p, &why.to_string());
            r.retry_at = Some(Instant::now() + HOLD_RETRY);
        }
    }

    /// A recovery worker finished: installs the partition as running (idempotent mode: after a
    /// start-of-ownership commit), resumes and seeks it; or schedules a retry.
    pub(super) fn on_recovered(&mut self, consumer: &FilterConsumer, finished: Finished) {
        let Finished {
            partition: p,
            incarnation: inc,
            topics,
            result,
        } = finished;
        if let Some(t) = topics {
            // Partitions are only ever added.
            self.topics.input = self.topics.input.max(t.input);
            self.topics.output = self.topics.output.max(t.output);
        }
        match self.partitions.get(&p) {
            Some(Partition::Recovering(r)) if r.incarnation == inc => {}
            _ => return, // revoked meanwhile, or an older attempt
        }
        let rec = match result {
            Ok(rec) => rec,
            Err(NotRecovered::Recovery(RecoveryError::Cancelled)) => return,
            Err(NotRecovered::Recovery(e @ RecoveryError::Panicked(_))) => return self.recovery_panicked(p, &e),
            Err(e @ NotRecovered::NoOutputPartition { .. }) => return self.hold(p, &e),
            Err(e) => return self.schedule_retry(p, &e.to_string()),
        };
        if self.held.remove(&p) {
            info!(
                partition = p,
                "the output topic now has this partition: recovered, no longer held"
            );
        }
        let commit = match self.mode {
            Mode::Idempotent { .. } => true,
            // Nothing committed yet (a first start at `input.start`): a crash before the first
            // transaction commits must not make the next start look for `input.start` again
            // (with `latest`, the records in between would be skipped).
            Mode::Transactional { .. } => rec.fresh,
        };
        if commit {
            if let Err(e) = self.commit_ownership(consumer, p, &rec) {
                return self.schedule_retry(p, &StartError::Commit(e).to_string());
            }
        }
        // Backed off (the producer's queue is full): it stays paused, and is resumed at its
        // first record with the others ([`Filter::drive_backpressure`]); resumed now, its records
        // would be fetched only to be thrown away.
        if self.backpressure.is_none() {
            if let Err(e) = resume_at(consumer, &self.cfg.input.topic, p, rec.resume) {
                if self.seek_failed(p, &e) {
                    return;
                }
                return self.schedule_retry(p, &e.to_string());
            }
            self.seeks.insert(p, rec.resume);
        }
        self.run(p, inc, rec);
    }

    /// The seek that starts partition `p` failed (`error`): notes since when, and past
    /// [`seek_failing_max`] since the first failure stops the pipeline ([`Fatal::SeekFailing`];
    /// true then).
    pub(super) fn seek_failed(&mut self, p: i32, error: &StartError) -> bool {
        let since = *self.recoveries.seek_failing.entry(p).or_insert_with(Instant::now);
        if since.elapsed() < seek_failing_max(&self.cfg) {
            return false;
        }
        self.fail(Fatal::SeekFailing {
            partition: p,
            seconds: since.elapsed().as_secs(),
            error: error.to_string(),
        });
        true
    }

    /// Commits the position a recovered partition starts at. Idempotent mode: tells later owners
    /// that someone produces for this partition now (`clean = false`), and makes sure a crash
    /// before the first checkpoint still leaves metadata to recover from. Transactional mode
    /// (first start only): pins the start position, with the output's end as the committed
    /// transaction's end (nothing of this owner is there yet).
    fn commit_ownership(&self, consumer: &FilterConsumer, p: i32, rec: &Recovered) -> Result<(), KafkaError> {
        let out_end = match self.mode {
            Mode::Idempotent { .. } => None,
            Mode::Transactional { .. } => Some(rec.out_positions.clone()),
        };
        let mut record = CheckpointRecord::new(p, rec.resume, &rec.gens, rec.clock, rec.ckpt.clone(), false, out_end)
            .with_high_water(rec.high_water.clone());
        record.changelog = rec.changelog.clone();
        let t = Instant::now();
        let committed =
            commit_list(&self.cfg, &[&record]).and_then(|tpl| kafka::commit_within(consumer, &tpl, KAFKA_TIMEOUT));
        debug!(
            partition = p,
            seconds = t.elapsed().as_secs_f64(),
            "start-of-ownership commit"
        );
        committed
    }

    /// Installs recovered partition `p` (ownership `inc`) as running.
    fn run(&mut self, p: i32, inc: u64, rec: Recovered) {
        self.recoveries.panics.remove(&p);
        self.recoveries.seek_failing.remove(&p);
        // A record given back by a former ownership was never taken: counted again from here.
        self.counted.remove(&p);
        let metrics = PartitionMetrics::new(p, &self.cfg);
        metrics.set_state(crate::state::PartitionState::Running);
        let took = rec.since.elapsed();
        telemetry::recovery(took.as_secs_f64());
        telemetry::handover(rec.source, took.as_secs_f64());
        info!(
            partition = p,
            offset = rec.resume,
            generations = rec.gens.iter().count(),
            fingerprints = rec.gens.total_len(),
            rescanned = rec.scanned,
            fresh = rec.fresh,
            source = rec.source,
            seconds = took.as_secs_f64(),
            "partition running"
        );
        let run = Running {
            incarnation: inc,
            gens: rec.gens,
            inflight: InFlight::new(rec.resume),
            out_positions: rec.out_positions,
            ckpt: rec.ckpt,
            clock: Clock::resumed(rec.clock),
            high_water: crate::global::Marks::resumed(rec.high_water),
            changelog: rec.changelog,
            first_forward: Some(FirstForward {
                assigned: rec.since,
                running: Instant::now(),
                rescanned: rec.scanned,
            }),
            metrics,
            key_hash: Default::default(),
        };
        self.install(p, Partition::Running(Box::new(run)));
    }

    /// Makes `state` partition `p`'s state, and says so in the status.
    fn install(&mut self, p: i32, state: Partition) {
        self.status.set_partition(p, state.state());
        self.partitions.insert(p, state);
    }
}

/// The message of a caught panic (its payload is usually a `&str` or a `String`).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string())
}

/// Resumes partition `p` and seeks it to `offset`.
///
/// Resume, then seek. librdkafka wakes a partition's fetcher only when the partition's fetch
/// state changes (`rd_kafka_toppar_set_fetch_state`, rdkafka_partition.c): a seek changes it
/// (offset validation, or the lookup of a logical offset), a resume does not. Seeking first,
/// while paused, left the fetcher asleep for up to its 1 s idle wait (`rd_kafka_max_block_ms`,
/// rdkafka_broker.c) after every assignment. Records fetched between the resume and the seek
/// carry the older op version, and librdkafka discards them. Offset 0 is sought as `Beginning`
/// (the same records: nothing precedes the log start; and no fall-back to `auto.offset.reset`
/// if retention moved the log start): an absolute 0 changes no state, the lookup of the log
/// start does (unless librdkafka answers it from a log start it has cached, and then the
/// fetcher may idle as before).
pub(super) fn resume_at(consumer: &FilterConsumer, topic: &str, p: i32, offset: i64) -> Result<(), StartError> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, p);
    consumer.resume(&tpl).map_err(StartError::Resume)?;
    let t = Instant::now();
    let to = match offset {
        0 => Offset::Beginning,
        o => Offset::Offset(o),
    };
    let sought = consumer.seek(topic, p, to, KAFKA_TIMEOUT);
    debug!(partition = p, seconds = t.elapsed().as_secs_f64(), "seek");
    if let Err(e) = sought {
        // Paused again until the retry; records fetched meanwhile were never taken.
        let _ = consumer.pause(&tpl);
        return Err(StartError::Seek { offset, error: e });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After the n-th panic in a row of a partition's recovery: a retry after a doubling delay,
    /// then a stop.
    #[test]
    fn a_recovery_that_keeps_panicking_is_retried_then_stops_the_pipeline() {
        let s = Duration::from_secs;
        #[rustfmt::skip]
        let rows = [
            (1, Some(s(2)), "the first panic: retried after the usual delay"),
            (2, Some(s(4)), "the second in a row: twice as long"),
            (3, None, "the third in a row: a bug that recurs; the process stops (exit 1)"),
            (4, None, "never retried past it"),
        ];
        for (n, want, case) in rows {
            assert_eq!(after_panic(n), want, "{case}");
        }
    }

    /// A partition that does not start stops the process 30 s after its first failed seek; in
    /// transactional mode a transaction timeout later (an open transaction's offsets hold
    /// librdkafka's fetch for the assignment that long).
    #[test]
    fn how_long_a_partition_may_fail_to_start() {
        let cfg = |delivery: &str| {
            let text = format!(
                "[kafka]\nbootstrap_servers = \"127.0.0.1:1\"\n[input]\ntopic = \"in\"\ngroup_id = \"g\"\n\
                 [output]\ntopic = \"out\"\n{delivery}\n[checkpoint]\ninterval = \"2s\"\n"
            );
            Config::from_toml_str(&text, Some(Default::default())).unwrap()
        };
        assert_eq!(seek_failing_max(&cfg("")), Duration::from_secs(30));
        let txn = cfg("delivery = \"transactional\"\ntransactional_id = \"t\"");
        assert_eq!(
            seek_failing_max(&txn),
            Duration::from_secs(30 + 62),
            "the interval plus 60 s, plus 30 s"
        );
    }
}
