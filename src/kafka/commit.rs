//! The bounded synchronous offset commit ([`commit_within`]).

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::TopicPartitionList;

/// Commits `offsets` for `consumer`'s group and waits at most `timeout` for the group
/// coordinator's answer: what `consumer.commit(offsets, CommitMode::Sync)` does, bounded.
///
/// Why: rust-rdkafka's synchronous commit is librdkafka's `rd_kafka_commit`, which waits for the
/// result with no bound (`RD_POLL_INFINITE`, rdkafka_offset.c). A stop whose hand-over commit was
/// on the wire when the broker went away waited in it for as long as the test watched (more than
/// 2 minutes, `tests/ops.rs`, `stopping_with_the_broker_gone_logs_client_errors_at_a_bounded_rate`),
/// past every bound the stop promises. Here the commit's result goes to a queue of its own
/// (`rd_kafka_commit_queue`), polled with `timeout`.
///
/// Errors: the coordinator's or librdkafka's error ([`KafkaError::ConsumerCommit`]), or
/// `OperationTimedOut` when no answer came within `timeout`: then the commit may still land
/// later, with these offsets (of records already acknowledged), which the caller treats as not
/// committed.
pub fn commit_within<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    offsets: &TopicPartitionList,
    timeout: Duration,
) -> KafkaResult<()> {
    use rdkafka::bindings as rd;
    let rk = consumer.client().native_ptr();
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: `rk` lives as long as `consumer`, `offsets` for the call (librdkafka copies the
    // list); the queue created here is destroyed here, once, after its last use, and an answer
    // arriving after that is dropped by librdkafka (the queue is reference-counted); the event is
    // read before it is destroyed.
    let code = unsafe {
        let queue = rd::rd_kafka_queue_new(rk);
        let sent = rd::rd_kafka_commit_queue(rk, offsets.ptr(), queue, None, std::ptr::null_mut());
        let code = if sent != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            sent
        } else {
            let event = rd::rd_kafka_queue_poll(queue, ms);
            if event.is_null() {
                rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__TIMED_OUT
            } else {
                let code = rd::rd_kafka_event_error(event);
                rd::rd_kafka_event_destroy(event);
                code
            }
        };
        rd::rd_kafka_queue_destroy(queue);
        code
    };
    match RDKafkaErrorCode::from(code) {
        RDKafkaErrorCode::NoError => Ok(()),
        other => Err(KafkaError::ConsumerCommit(other)),
    }
}
