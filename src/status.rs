//! What the running filter tells the outside: per-partition life-cycle state, broker
//! reachability, a fatal error, totals. Read by `/healthz`, `/readyz`, `/store/*` and `demo`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::inspect::LiveRequest;
use crate::store::Store;
use crate::telemetry::Totals;

/// Shared status of one filter process.
#[derive(Default)]
pub struct Status {
    /// Process totals.
    pub totals: Arc<Totals>,
    /// Input partition -> state description (`recovering`, `running`, or a retry reason).
    partitions: Mutex<BTreeMap<i32, String>>,
    /// True after the first assignment from the consumer group.
    joined: AtomicBool,
    /// Last broker problem, cleared when statistics show a broker up.
    broker_error: Mutex<Option<String>>,
    /// Set when the pipeline stopped on an error.
    fatal: Mutex<Option<String>>,
    /// The open store, for `/store/*`.
    store: Mutex<Option<Store>>,
    /// Questions for the pipeline thread (live `/store/*` answers); its receiver is drained by
    /// `Filter::tick`. Sending fails once the pipeline has stopped.
    live: Mutex<Option<Sender<LiveRequest>>>,
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
}

impl Status {
    /// A new status with fresh totals.
    pub fn new() -> Arc<Self> {
        Arc::new(Status::default())
    }

    /// Records a partition's state.
    pub fn set_partition(&self, p: i32, state: &str) {
        self.partitions
            .lock()
            .expect("not poisoned")
            .insert(p, state.to_string());
    }

    /// Records a partition's state with a reason.
    pub fn set_partition_reason(&self, p: i32, reason: String) {
        self.partitions.lock().expect("not poisoned").insert(p, reason);
    }

    /// Forgets a released partition.
    pub fn remove_partition(&self, p: i32) {
        self.partitions.lock().expect("not poisoned").remove(&p);
    }

    /// Marks the consumer group joined (first assignment received).
    pub fn set_joined(&self) {
        self.joined.store(true, Ordering::SeqCst);
    }

    /// Records broker reachability: `up` clears the error, otherwise `error` is kept.
    pub fn set_broker(&self, up: bool, error: Option<String>) {
        let mut b = self.broker_error.lock().expect("not poisoned");
        if up {
            *b = None;
        } else if error.is_some() {
            *b = error;
        }
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
    pub fn set_live(&self, tx: Sender<LiveRequest>) {
        *self.live.lock().expect("not poisoned") = Some(tx);
    }

    /// The pipeline's request channel, once the filter has started.
    pub fn live(&self) -> Option<Sender<LiveRequest>> {
        self.live.lock().expect("not poisoned").clone()
    }

    /// States of the owned partitions.
    pub fn partitions(&self) -> BTreeMap<i32, String> {
        self.partitions.lock().expect("not poisoned").clone()
    }

    /// True when every owned partition is running and the group was joined.
    pub fn all_running(&self) -> bool {
        self.joined.load(Ordering::SeqCst) && self.partitions().values().all(|s| s == "running")
    }

    /// The `/readyz` answer.
    pub fn readiness(&self) -> Readiness {
        let partitions = self.partitions();
        let reason = if let Some(f) = self.fatal.lock().expect("not poisoned").clone() {
            Some(format!("stopped: {f}"))
        } else if let Some(b) = self.broker_error.lock().expect("not poisoned").clone() {
            Some(format!("broker not reachable: {b}"))
        } else if !self.joined.load(Ordering::SeqCst) {
            Some("waiting for a partition assignment from the consumer group".to_string())
        } else {
            let recovering: Vec<String> = partitions
                .iter()
                .filter(|(_, s)| s.as_str() != "running")
                .map(|(p, s)| format!("{p}: {s}"))
                .collect();
            (!recovering.is_empty()).then(|| format!("recovering partitions ({})", recovering.join(", ")))
        };
        Readiness {
            ready: reason.is_none(),
            reason,
            partitions,
        }
    }
}
