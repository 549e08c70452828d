//! The queue the producers' delivery reports take to the pipeline thread: many senders (the
//! producers' contexts, on librdkafka's polling threads), one receiver (the pipeline thread),
//! unbounded, in order of sending, drained a batch at a time ([`queue`]).
//!
//! Why not `std::sync::mpsc`: its unbounded channel allocates a block every 31 events on the
//! sending thread and frees it on the receiving one, and a receive is a few atomic operations
//! per event: about 140 instructions a record on the pipeline thread for `try_recv` alone
//! (`scripts/bench.sh --callgrind`, BENCHMARKS.md). Here a send is a lock and a push, and the
//! receiver swaps the whole vector out under one lock: the vectors are reused, so in a steady
//! stream nothing is allocated. The receiver is woken only while it waits ([`DeliveryReceiver::wait`]),
//! so a send makes no system call otherwise.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// A new queue: its first sender and its receiver.
pub(super) fn queue<T>() -> (DeliverySender<T>, DeliveryReceiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            events: Vec::new(),
            senders: 1,
            waiting: false,
        }),
        ready: Condvar::new(),
    });
    (DeliverySender { shared: shared.clone() }, DeliveryReceiver { shared })
}

struct Shared<T> {
    state: Mutex<State<T>>,
    /// Signalled when an event arrives or the last sender goes, while the receiver waits.
    ready: Condvar,
}

struct State<T> {
    /// Sent, not yet taken, in order of sending.
    events: Vec<T>,
    /// Live senders: none left and nothing queued is the end ([`Waited::Disconnected`]).
    senders: usize,
    /// The receiver waits in [`DeliveryReceiver::wait`]: a send signals [`Shared::ready`].
    waiting: bool,
}

impl<T> Shared<T> {
    /// The state; a panic of another thread holding it (poisoning) leaves the vector and the
    /// counters consistent (each change is one step), so it is used as it is.
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The sending side; cloned for each producer. Dropping the last one disconnects the queue.
pub(super) struct DeliverySender<T> {
    shared: Arc<Shared<T>>,
}

impl<T> DeliverySender<T> {
    /// Queues `event` (never blocks but for the lock, never fails: a receiver gone drops it
    /// with the queue).
    pub(super) fn send(&self, event: T) {
        let mut state = self.shared.lock();
        state.events.push(event);
        if state.waiting {
            state.waiting = false;
            self.shared.ready.notify_one();
        }
    }
}

impl<T> Clone for DeliverySender<T> {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        DeliverySender {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for DeliverySender<T> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.senders -= 1;
        if state.senders == 0 && state.waiting {
            state.waiting = false;
            self.shared.ready.notify_one();
        }
    }
}

/// What [`DeliveryReceiver::wait`] found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Waited {
    /// Events are queued.
    Ready,
    /// None arrived within the timeout.
    Timeout,
    /// None is queued and every sender is gone: none will come.
    Disconnected,
}

/// The receiving side, the pipeline thread's.
pub(super) struct DeliveryReceiver<T> {
    shared: Arc<Shared<T>>,
}

impl<T> DeliveryReceiver<T> {
    /// Moves every queued event, in order of sending, to the end of `into` (which the caller
    /// passes empty and keeps for the next call, so that the two vectors trade places and are
    /// reused: in a steady stream no call allocates).
    pub(super) fn take_into(&self, into: &mut Vec<T>) {
        let mut state = self.shared.lock();
        if into.is_empty() {
            std::mem::swap(&mut state.events, into);
        } else {
            into.append(&mut state.events);
        }
    }

    /// Waits up to `timeout` for an event to be queued (or the last sender to go); takes none.
    pub(super) fn wait(&self, timeout: Duration) -> Waited {
        let mut state = self.shared.lock();
        if state.events.is_empty() && state.senders > 0 {
            state.waiting = true;
            state = self
                .shared
                .ready
                .wait_timeout_while(state, timeout, |s| s.events.is_empty() && s.senders > 0)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            state.waiting = false;
        }
        match (state.events.is_empty(), state.senders) {
            (false, _) => Waited::Ready,
            (true, 0) => Waited::Disconnected,
            (true, _) => Waited::Timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    fn taken(rx: &DeliveryReceiver<u32>) -> Vec<u32> {
        let mut v = Vec::new();
        rx.take_into(&mut v);
        v
    }

    #[test]
    fn events_come_out_in_order_of_sending_and_the_vectors_are_reused() {
        let (tx, rx) = queue();
        let tx2 = tx.clone();
        tx.send(1);
        tx2.send(2);
        tx.send(3);
        let mut batch = Vec::with_capacity(8);
        let kept = batch.as_ptr();
        rx.take_into(&mut batch);
        assert_eq!(batch, [1, 2, 3]);
        batch.clear();
        tx.send(4);
        rx.take_into(&mut batch);
        assert_eq!(batch, [4]);
        assert_eq!(
            batch.as_ptr(),
            kept,
            "the vectors traded places twice: the caller's is back, reused"
        );
        // Not empty: appended, not swapped (nothing of the caller's is lost).
        tx.send(5);
        rx.take_into(&mut batch);
        assert_eq!(batch, [4, 5]);
        assert!(taken(&rx).is_empty());
    }

    #[test]
    fn wait_returns_on_an_event_from_another_thread_at_the_timeout_or_when_the_senders_are_gone() {
        let (tx, rx) = queue::<u32>();
        let started = Instant::now();
        assert_eq!(rx.wait(Duration::from_millis(50)), Waited::Timeout);
        assert!(started.elapsed() >= Duration::from_millis(50));

        // An event sent while the receiver waits wakes it long before its timeout.
        let sender = std::thread::spawn({
            let tx = tx.clone();
            move || {
                std::thread::sleep(Duration::from_millis(20));
                tx.send(7);
            }
        });
        let started = Instant::now();
        assert_eq!(rx.wait(Duration::from_secs(30)), Waited::Ready);
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        sender.join().unwrap();
        assert_eq!(rx.wait(Duration::ZERO), Waited::Ready, "still queued: wait takes none");
        assert_eq!(taken(&rx), [7]);

        // Queued events outlive their senders; then the queue is disconnected, at once.
        tx.send(8);
        drop(tx);
        assert_eq!(rx.wait(Duration::from_secs(30)), Waited::Ready);
        assert_eq!(taken(&rx), [8]);
        let started = Instant::now();
        assert_eq!(rx.wait(Duration::from_secs(30)), Waited::Disconnected);
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn the_last_sender_leaving_wakes_a_waiting_receiver() {
        let (tx, rx) = queue::<u32>();
        let leaver = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(tx);
        });
        let started = Instant::now();
        assert_eq!(rx.wait(Duration::from_secs(30)), Waited::Disconnected);
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        leaver.join().unwrap();
    }
}
