//! What the running filter tells the outside: per-partition life-cycle state, broker
//! reachability, a fatal error, totals. Read by `/healthz`, `/readyz`, `/store/*` and `demo`.
//!
//! The partition state gauge (`kafka_dedup_partition_state`) is set here, on every state change,
//! so that the metric and `/readyz` always tell the same story.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::inspect::live::LiveRequest;
use crate::state::PartitionState;
use crate::store::Store;
use crate::telemetry::{self, Totals};

/// A broker problem that retrying the connection does not fix: configuration or credentials
/// must change. `/readyz` names it until a broker connection is up again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerFailure {
    /// SASL authentication failed (wrong credentials, a mechanism the listener does not accept,
    /// a listener without SASL).
    Authentication,
    /// The TLS handshake failed (untrusted certificate, a listener without TLS, ...).
    Tls,
}

impl BrokerFailure {
    fn describe(self) -> &'static str {
        match self {
            BrokerFailure::Authentication => "authentication with the brokers failed",
            BrokerFailure::Tls => "TLS handshake with the brokers failed",
        }
    }
}

/// Shared status of one filter process.
#[derive(Default)]
pub struct Status {
    /// Process totals.
    pub totals: Arc<Totals>,
    /// Input partition -> its state, and why its recovery is being retried.
    partitions: Mutex<BTreeMap<i32, Owned>>,
    /// True after the first assignment from the consumer group.
    joined: AtomicBool,
    /// Last broker problem, cleared when statistics show a broker up.
    broker_error: Mutex<Option<String>>,
    /// Last authentication or TLS failure; kept over the generic errors that follow it (a
    /// metadata timeout), cleared when statistics show a broker up.
    broker_failure: Mutex<Option<(BrokerFailure, String)>>,
    /// Set when the pipeline stopped on an error.
    fatal: Mutex<Option<String>>,
    /// Set while the local store cannot be written (shown by `/readyz`, ready all the same).
    store_warning: Mutex<Option<String>>,
    /// The open store, for `/store/*`.
    store: Mutex<Option<Store>>,
    /// Questions for the pipeline thread (live `/store/*` answers); its receiver is drained by
    /// `Filter::tick`. Sending fails once the pipeline has stopped.
    live: Mutex<Option<SyncSender<LiveRequest>>>,
    /// Global scope: the input partitions the route stage owns (`None` in the partition scope).
    route_partitions: Mutex<Option<BTreeSet<i32>>>,
    /// Global scope: why the route stage waits (the schema registry cannot be asked), while it
    /// does.
    route_waiting: Mutex<Option<String>>,
    /// The route stage's input partitions held at a record too large for the route topic, each
    /// with what to do (global scope).
    route_halted: Mutex<BTreeMap<i32, String>>,
    /// Transactional mode: why a transaction commit is pending (every partition paused), while
    /// it is.
    commit_waiting: Mutex<Option<String>>,
    /// Topics deleted or created again while running ([`crate::topics::watch`]): topic -> what
    /// the operator reads. Kept until the process stops.
    topics_changed: Mutex<BTreeMap<String, String>>,
}

/// What the status knows of one owned partition.
#[derive(Debug, Clone)]
struct Owned {
    /// Its life-cycle state.
    state: PartitionState,
    /// While recovering: why the last attempt failed (it is retried). While halted: why.
    retrying: Option<String>,
    /// While held (not recovered, paused): the output partition it needs does not exist.
    held: Option<String>,
}

impl Owned {
    /// A partition in `state`, neither retrying nor held.
    fn new(state: PartitionState) -> Self {
        Owned {
            state,
            retrying: None,
            held: None,
        }
    }

    /// As `/readyz` shows it: the state's name, `recovering (retrying: REASON)`,
    /// `recovering (held: REASON)` or `halted (REASON)`.
    fn describe(&self) -> String {
        match (&self.held, &self.retrying, self.state) {
            (Some(why), _, _) => format!("{} (held: {why})", self.state),
            (None, Some(why), PartitionState::Halted) => format!("{} ({why})", self.state),
            (None, Some(why), _) => format!("{} (retrying: {why})", self.state),
            (None, None, _) => self.state.name().to_string(),
        }
    }
}

/// The answer of `/readyz`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Readiness {
    /// True when every owned partition runs, the group was joined and a broker is reachable.
    pub ready: bool,
    /// Why not, when not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// State of each owned input partition.
    pub partitions: BTreeMap<i32, String>,
    /// Something the operator should know that does not make the process unready: the local
    /// store cannot be written (a full disk). It is a cache: forwarding goes on, correct, from
    /// memory; only a restart or a rebalance costs more (a re-read of the output topic).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// Global scope only: the input partitions the route stage owns (`partitions` are then the
    /// filter stage's, partitions of the route topic). Not part of readiness: the route stage
    /// keeps no state to recover.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route_partitions: Option<Vec<i32>>,
}

impl Status {
    /// A new status with fresh totals.
    pub fn new() -> Arc<Self> {
        Arc::new(Status::default())
    }

    /// Records a partition's state.
    pub fn set_partition(&self, p: i32, state: PartitionState) {
        self.partitions
            .lock()
            .expect("not poisoned")
            .insert(p, Owned::new(state));
        telemetry::partition_state(p, Some(state));
    }

    /// Records that partition `p` is held: it cannot be recovered or forwarded because the output
    /// partition it writes to does not exist (`output.partitioning = "preserve"`); `why` says so.
    /// `/readyz` names it until the partition runs or is released.
    pub fn set_held(&self, p: i32, why: &str) {
        let mut owned = Owned::new(PartitionState::Recovering);
        owned.held = Some(why.to_string());
        self.partitions.lock().expect("not poisoned").insert(p, owned);
        telemetry::partition_state(p, Some(PartitionState::Recovering));
    }

    /// Records that a partition's recovery failed with `why` and is retried (`/readyz` shows
    /// `recovering (retrying: WHY)`).
    pub fn set_retrying(&self, p: i32, why: &str) {
        let mut owned = Owned::new(PartitionState::Recovering);
        owned.retrying = Some(why.to_string());
        self.partitions.lock().expect("not poisoned").insert(p, owned);
        telemetry::partition_state(p, Some(PartitionState::Recovering));
    }

    /// Records that running partition `p` halted because a side topic refused a copy, and `why`
    /// (`/readyz` shows `halted (WHY)` and is not ready).
    pub fn set_halted(&self, p: i32, why: &str) {
        let mut owned = Owned::new(PartitionState::Halted);
        owned.retrying = Some(why.to_string());
        self.partitions.lock().expect("not poisoned").insert(p, owned);
        telemetry::partition_state(p, Some(PartitionState::Halted));
    }

    /// Forgets a released partition; its state and lag gauges go to 0, so that sums over the
    /// replicas of a consumer group count each partition once after a rebalance.
    pub fn remove_partition(&self, p: i32) {
        self.partitions.lock().expect("not poisoned").remove(&p);
        telemetry::partition_state(p, None);
        telemetry::consumer_lag(p, 0);
    }

    /// Marks the consumer group joined (first assignment received).
    pub fn set_joined(&self) {
        self.joined.store(true, Ordering::SeqCst);
    }

    /// Records broker reachability: `up` clears the error (and any [`BrokerFailure`]), otherwise
    /// `error` is kept.
    pub fn set_broker(&self, up: bool, error: Option<String>) {
        let mut b = self.broker_error.lock().expect("not poisoned");
        if up {
            *b = None;
            *self.broker_failure.lock().expect("not poisoned") = None;
        } else if error.is_some() {
            *b = error;
        }
    }

    /// Records an authentication or TLS failure reported by a Kafka client; `/readyz` names it
    /// (before any generic broker error) until a broker connection is up.
    pub fn set_broker_failure(&self, kind: BrokerFailure, detail: String) {
        *self.broker_failure.lock().expect("not poisoned") = Some((kind, detail));
    }

    /// Looks at an error a Kafka client reported (`reason`: librdkafka's explanation, may be
    /// empty) and records it as a [`BrokerFailure`] when it is one: librdkafka's
    /// `_AUTHENTICATION` and `SASL_AUTHENTICATION_FAILED` codes, and `_SSL`. Other errors are
    /// left to the callers (retries, `set_broker`).
    pub fn note_client_error(&self, error: &rdkafka::error::KafkaError, reason: &str) {
        use rdkafka::types::RDKafkaErrorCode as Code;
        let kind = match error.rdkafka_error_code() {
            Some(Code::Authentication) | Some(Code::SaslAuthenticationFailed) => BrokerFailure::Authentication,
            Some(Code::SSL) => BrokerFailure::Tls,
            _ => return,
        };
        let detail = if reason.is_empty() {
            error.to_string()
        } else {
            reason.to_string()
        };
        self.set_broker_failure(kind, detail);
    }

    /// Sets (or clears) the warning that the local store cannot be written ([`Readiness::warning`]).
    pub fn set_store_warning(&self, warning: Option<String>) {
        *self.store_warning.lock().expect("not poisoned") = warning;
    }

    /// Records a fatal error.
    pub fn set_fatal(&self, e: String) {
        *self.fatal.lock().expect("not poisoned") = Some(e);
    }

    /// Makes the store available to `/store/*`.
    pub fn set_store(&self, store: Store) {
        *self.store.lock().expect("not poisoned") = Some(store);
    }

    /// The open store, if the filter has one.
    pub fn store(&self) -> Option<Store> {
        self.store.lock().expect("not poisoned").clone()
    }

    /// Makes the pipeline's request channel available to the live `/store/*` routes.
    pub fn set_live(&self, tx: SyncSender<LiveRequest>) {
        *self.live.lock().expect("not poisoned") = Some(tx);
    }

    /// The pipeline's request channel, once the filter has started.
    pub fn live(&self) -> Option<SyncSender<LiveRequest>> {
        self.live.lock().expect("not poisoned").clone()
    }

    /// States of the owned partitions, as `/readyz` shows them (`running`, `recovering`, or
    /// `recovering (retrying: REASON)`).
    pub fn partitions(&self) -> BTreeMap<i32, String> {
        let owned = self.partitions.lock().expect("not poisoned");
        owned.iter().map(|(p, o)| (*p, o.describe())).collect()
    }

    /// True when every owned partition is running and the group was joined.
    pub fn all_running(&self) -> bool {
        self.joined.load(Ordering::SeqCst)
            && (self.partitions.lock().expect("not poisoned").values()).all(|o| o.state == PartitionState::Running)
    }

    /// True when partition `p` is owned.
    pub fn owns(&self, p: i32) -> bool {
        self.partitions.lock().expect("not poisoned").contains_key(&p)
    }

    /// Global scope: the route stage now owns `assigned` input partitions in addition, and no
    /// longer `revoked` ones (shown by `/readyz` as `route_partitions`).
    pub fn set_route_partitions(&self, assigned: &[i32], revoked: &[i32]) {
        let mut r = self.route_partitions.lock().expect("not poisoned");
        let owned = r.get_or_insert_with(BTreeSet::new);
        owned.extend(assigned);
        for p in revoked {
            owned.remove(p);
        }
    }

    /// Global scope: the route stage waits for `why` (`Some`: its input partitions are paused,
    /// `/readyz` is not ready and says why), or no longer (`None`).
    pub fn set_route_waiting(&self, why: Option<String>) {
        *self.route_waiting.lock().expect("not poisoned") = why;
    }

    /// The route stage holds input partition `p` at a record too large for the route topic
    /// (`Some(why)`), or no longer (`None`: revoked). `/readyz` is not ready while any is held.
    pub fn set_route_halted(&self, p: i32, why: Option<String>) {
        let mut halted = self.route_halted.lock().expect("not poisoned");
        match why {
            Some(why) => halted.insert(p, why),
            None => halted.remove(&p),
        };
    }

    /// Transactional mode: a transaction commit is pending for `why` (`Some`: every partition
    /// is paused, `/readyz` is not ready and says why), or no longer (`None`).
    pub fn set_commit_waiting(&self, why: Option<String>) {
        *self.commit_waiting.lock().expect("not poisoned") = why;
    }

    /// Records that `topic` was deleted or created again while running; `why` says so and what
    /// to do. `/readyz` is not ready, naming it, until the process stops.
    pub fn set_topic_changed(&self, topic: &str, why: String) {
        self.topics_changed
            .lock()
            .expect("not poisoned")
            .insert(topic.to_string(), why);
    }

    /// True once [`Self::set_topic_changed`] recorded `topic`.
    pub fn topic_changed(&self, topic: &str) -> bool {
        self.topics_changed.lock().expect("not poisoned").contains_key(topic)
    }

    /// The `/readyz` answer.
    pub fn readiness(&self) -> Readiness {
        let changed: Vec<String> = self
            .topics_changed
            .lock()
            .expect("not poisoned")
            .values()
            .cloned()
            .collect();
        let owned = self.partitions.lock().expect("not poisoned").clone();
        let partitions = owned.iter().map(|(p, o)| (*p, o.describe())).collect();
        let reason = if let Some(f) = self.fatal.lock().expect("not poisoned").clone() {
            Some(format!("stopped: {f}"))
        } else if !changed.is_empty() {
            Some(changed.join("; "))
        } else if let Some((kind, detail)) = self.broker_failure.lock().expect("not poisoned").clone() {
            Some(format!("{}: {detail}", kind.describe()))
        } else if let Some(b) = self.broker_error.lock().expect("not poisoned").clone() {
            Some(format!("broker not reachable: {b}"))
        } else if !self.joined.load(Ordering::SeqCst) {
            Some(
                "waiting for a partition assignment from the consumer group (a rebalance waits for members that \
                 stopped without leaving the group, a SIGKILL, up to their session.timeout.ms: 45 s by default; \
                 input.group_instance_id avoids the wait)"
                    .to_string(),
            )
        } else {
            let held: Vec<String> = owned
                .iter()
                .filter_map(|(p, o)| o.held.as_ref().map(|why| format!("{p}: {why}")))
                .collect();
            let listed = |state: PartitionState| -> Vec<String> {
                owned
                    .iter()
                    .filter(|(_, o)| o.state == state && o.held.is_none())
                    .map(|(p, o)| format!("{p}: {}", o.describe()))
                    .collect()
            };
            let (halted, recovering) = (listed(PartitionState::Halted), listed(PartitionState::Recovering));
            let route_waiting = self.route_waiting.lock().expect("not poisoned").clone();
            let route_halted: Vec<String> = self
                .route_halted
                .lock()
                .expect("not poisoned")
                .values()
                .cloned()
                .collect();
            let commit_waiting = self.commit_waiting.lock().expect("not poisoned").clone();
            let reasons: Vec<String> = [
                commit_waiting,
                route_waiting.map(|why| format!("the route stage waits: {why}")),
                (!route_halted.is_empty()).then(|| format!("the route stage holds {}", route_halted.join("; "))),
                (!halted.is_empty()).then(|| format!("halted partitions ({})", halted.join(", "))),
                (!held.is_empty()).then(|| {
                    format!(
                        "input partitions without an output partition, held until the output topic has them ({})",
                        held.join(", ")
                    )
                }),
                (!recovering.is_empty()).then(|| format!("recovering partitions ({})", recovering.join(", "))),
            ]
            .into_iter()
            .flatten()
            .collect();
            (!reasons.is_empty()).then(|| reasons.join("; "))
        };
        Readiness {
            ready: reason.is_none(),
            reason,
            partitions,
            warning: self.store_warning.lock().expect("not poisoned").clone(),
            route_partitions: self
                .route_partitions
                .lock()
                .expect("not poisoned")
                .as_ref()
                .map(|r| r.iter().copied().collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 18: in the global scope `/readyz` also lists the route stage's input partitions;
    /// in the partition scope the field is left out.
    #[test]
    fn route_partitions_are_listed_in_the_global_scope_only() {
        let s = Status::new();
        assert_eq!(s.readiness().route_partitions, None);
        let json = serde_json::to_string(&s.readiness()).unwrap();
        assert!(!json.contains("route_partitions"), "{json}");
        s.set_route_partitions(&[], &[]);
        assert_eq!(s.readiness().route_partitions, Some(vec![]));
        s.set_route_partitions(&[2, 0], &[]);
        s.set_route_partitions(&[1], &[2]);
        assert_eq!(s.readiness().route_partitions, Some(vec![0, 1]));
        let json = serde_json::to_string(&s.readiness()).unwrap();
        assert!(json.contains("\"route_partitions\":[0,1]"), "{json}");
    }

    #[test]
    fn readiness_reasons_in_order_of_what_to_fix_first() {
        let s = Status::new();
        let r = s.readiness();
        assert!(!r.ready);
        assert!(r.reason.unwrap().contains("waiting for a partition assignment"));

        s.set_broker_failure(BrokerFailure::Authentication, "SASL handshake failed".into());
        s.set_broker(false, Some("metadata: timed out".into()));
        let r = s.readiness();
        assert_eq!(
            r.reason.as_deref(),
            Some("authentication with the brokers failed: SASL handshake failed"),
            "the specific failure outlives the generic error that follows it"
        );
        s.set_broker(true, None);
        s.set_joined();
        s.set_partition(0, PartitionState::Recovering);
        s.set_partition(1, PartitionState::Running);
        let r = s.readiness();
        assert_eq!(r.reason.as_deref(), Some("recovering partitions (0: recovering)"));
        s.set_retrying(0, "metadata: timed out");
        assert_eq!(
            s.readiness().reason.as_deref(),
            Some("recovering partitions (0: recovering (retrying: metadata: timed out))")
        );
        s.set_partition(0, PartitionState::Running);
        assert!(s.readiness().ready);
        s.set_halted(1, "the dead-letter topic refused a copy");
        assert_eq!(
            s.readiness().reason.as_deref(),
            Some("halted partitions (1: halted (the dead-letter topic refused a copy))")
        );
        assert_eq!(s.partitions()[&1], "halted (the dead-letter topic refused a copy)");
        s.set_partition(1, PartitionState::Running);
        assert!(s.readiness().ready);
        s.set_held(2, "output topic \"out\" has 2 partitions");
        let r = s.readiness();
        assert_eq!(
            r.reason.as_deref(),
            Some(
                "input partitions without an output partition, held until the output topic has them \
                 (2: output topic \"out\" has 2 partitions)"
            )
        );
        assert_eq!(
            r.partitions[&2],
            "recovering (held: output topic \"out\" has 2 partitions)"
        );
        s.set_partition(2, PartitionState::Running);
        assert!(s.readiness().ready);
        s.set_store_warning(Some("the local store cannot be written".into()));
        let r = s.readiness();
        assert!(
            r.ready,
            "a cache that cannot be written does not make the process unready"
        );
        assert_eq!(r.warning.as_deref(), Some("the local store cannot be written"));
        s.set_store_warning(None);
        assert_eq!(s.readiness().warning, None);
        s.set_fatal("delivery failed".into());
        assert_eq!(s.readiness().reason.as_deref(), Some("stopped: delivery failed"));
    }
}
