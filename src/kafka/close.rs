//! The bounded close of kafka-dedup's group consumers ([`close_within`]).
//!
//! Why: closing a group consumer can wait for ever inside librdkafka. rust-rdkafka's
//! `BaseConsumer::drop` polls, and so serves rebalance events, until the group is closed, with
//! no bound; librdkafka 2.12.1's consumer group, once terminated, destroys a request that was
//! queued to it before it terminated without replying (`rd_kafka_cgrp_op_serve` when
//! `rkcg_terminated`), and `rd_kafka_rebalance_protocol`, `rd_kafka_assign` and
//! `rd_kafka_incremental_(un)assign`, which rust-rdkafka's default rebalance callback makes for
//! every event, wait for that reply with no timeout (`RD_POLL_INFINITE`). A revocation served
//! while the group terminated hung the thread that closed the consumer for ever, in
//! `rd_kafka_rebalance_protocol` (the route stage of the global scope after its hand-over timed
//! out, `tests/scope_global.rs`, about one run in ten): the process never exited. The same class
//! upstream: librdkafka issues #4884 and #4041. No librdkafka setting bounds it; the Java
//! consumer's `close(Duration)` is the model.

use std::sync::mpsc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, ConsumerContext};
use tracing::{error, warn};

/// How long [`close_within`] waits for a consumer to close: the Java consumer's default close
/// timeout (`KafkaConsumer.close()`, 30 s).
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(30);

/// A group consumer that is closed within [`CLOSE_TIMEOUT`] ([`close_within`]) when it is
/// [`close`](Self::close)d or dropped, a panic's unwinding included; derefs to the consumer.
pub struct Bounded<C: ConsumerContext + 'static>
where
    BaseConsumer<C>: Send,
{
    consumer: Option<BaseConsumer<C>>,
    what: &'static str,
}

impl<C: ConsumerContext + 'static> Bounded<C>
where
    BaseConsumer<C>: Send,
{
    /// `consumer`, closed within the bound; `what` names it in the log.
    pub fn new(consumer: BaseConsumer<C>, what: &'static str) -> Self {
        Bounded {
            consumer: Some(consumer),
            what,
        }
    }

    /// Closes it now: [`close_within`] with [`CLOSE_TIMEOUT`]. `true` when it closed in time.
    pub fn close(mut self) -> bool {
        let consumer = self.consumer.take().expect("closed once");
        close_within(consumer, CLOSE_TIMEOUT, self.what)
    }
}

impl<C: ConsumerContext + 'static> std::ops::Deref for Bounded<C>
where
    BaseConsumer<C>: Send,
{
    type Target = BaseConsumer<C>;

    fn deref(&self) -> &BaseConsumer<C> {
        self.consumer.as_ref().expect("not closed yet")
    }
}

impl<C: ConsumerContext + 'static> Drop for Bounded<C>
where
    BaseConsumer<C>: Send,
{
    fn drop(&mut self) {
        if let Some(consumer) = self.consumer.take() {
            // Not closed by `close`: a panic unwinds through its owner.
            close_within(consumer, CLOSE_TIMEOUT, self.what);
        }
    }
}

/// Closes `consumer` (leaves its group: rust-rdkafka's `BaseConsumer::drop`, which serves the
/// rebalance events of the close and then destroys the client) on a thread of its own, and
/// waits up to `timeout` for it. `true` when it closed. Otherwise (`false`, logged with `what`)
/// the close is left running and the caller goes on: the process exits without it, as after a
/// crash, which every recovery already handles, and the group sees the member leave after
/// `session.timeout.ms`. The context's `Drop` runs on that thread. A panic there (a rebalance
/// callback served by the close) goes on unwinding in the caller, as it did before the close
/// had a thread of its own (unless the caller is unwinding already: then it is logged).
pub fn close_within<C: ConsumerContext + 'static>(consumer: BaseConsumer<C>, timeout: Duration, what: &str) -> bool
where
    BaseConsumer<C>: Send,
{
    let (done_tx, done) = mpsc::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name(format!("close {what}"))
        .spawn(move || {
            drop(consumer);
            let _ = done_tx.send(());
        });
    let closing = match spawned {
        Ok(handle) => handle,
        Err(e) => {
            // The closure, and the consumer in it, was dropped by `spawn`: closed here, unbounded.
            warn!(error = %e, what, "cannot start a thread to close the consumer; it was closed on this thread");
            return true;
        }
    };
    match done.recv_timeout(timeout) {
        Ok(()) => true,
        Err(mpsc::RecvTimeoutError::Disconnected) => match closing.join() {
            Ok(()) => true,
            Err(panic) if !std::thread::panicking() => std::panic::resume_unwind(panic),
            Err(_) => {
                error!(what, "closing the consumer panicked while its owner was unwinding");
                true
            }
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            warn!(
                what,
                timeout_seconds = timeout.as_secs_f64(),
                "the consumer did not close in time (librdkafka did not answer); going on without it: the group \
                 sees the member leave after session.timeout.ms"
            );
            false
        }
    }
}
