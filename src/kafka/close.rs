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
    /// [`CLOSE_TIMEOUT`] (shorter in tests).
    timeout: Duration,
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
            timeout: CLOSE_TIMEOUT,
        }
    }

    /// Closes it now: [`close_within`] with [`CLOSE_TIMEOUT`]. `true` when it closed in time.
    pub fn close(mut self) -> bool {
        let consumer = self.consumer.take().expect("closed once");
        close_within(consumer, self.timeout, self.what)
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
            close_within(consumer, self.timeout, self.what);
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

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use rdkafka::client::ClientContext;
    use rdkafka::ClientConfig;

    use super::*;

    /// A context whose drop (on the close thread, after the client's) takes `linger` and then
    /// panics when `panics`: a close that does not end in time, or that panics.
    struct Slow {
        linger: Duration,
        panics: bool,
    }

    impl ClientContext for Slow {}
    impl ConsumerContext for Slow {}

    impl Drop for Slow {
        fn drop(&mut self) {
            std::thread::sleep(self.linger);
            if self.panics {
                panic!("a callback of the close panicked");
            }
        }
    }

    /// A consumer of nothing (no broker needed to create one) with context `slow`.
    fn consumer(slow: Slow) -> BaseConsumer<Slow> {
        ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:9")
            .set("group.id", "close-test")
            .create_with_context(slow)
            .expect("a consumer")
    }

    #[test]
    fn a_close_that_ends_in_time_says_so() {
        let c = consumer(Slow {
            linger: Duration::ZERO,
            panics: false,
        });
        assert!(close_within(c, Duration::from_secs(20), "test"));
    }

    #[test]
    fn a_close_past_the_timeout_is_left_running_and_the_caller_goes_on() {
        let c = consumer(Slow {
            linger: Duration::from_secs(30),
            panics: false,
        });
        let started = Instant::now();
        assert!(!close_within(c, Duration::from_millis(300), "test"));
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "waited {:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_panic_in_the_close_goes_on_in_the_caller() {
        let c = consumer(Slow {
            linger: Duration::ZERO,
            panics: true,
        });
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            close_within(c, Duration::from_secs(20), "test")
        }));
        let panic = caught.expect_err("the close's panic reaches the caller, not a timeout");
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"a callback of the close panicked"));
    }

    #[test]
    fn a_bounded_consumer_dropped_unclosed_is_closed_within_the_bound() {
        let mut bounded = Bounded::new(
            consumer(Slow {
                linger: Duration::from_secs(30),
                panics: false,
            }),
            "test",
        );
        bounded.timeout = Duration::from_millis(300);
        let started = Instant::now();
        drop(bounded); // as a panic's unwinding drops it
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "waited {:?}",
            started.elapsed()
        );
    }
}
