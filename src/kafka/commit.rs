//! The bounded synchronous offset commit ([`commit_within`]), the committed offsets' fetch
//! that waits for a group coordinator still starting ([`committed_when_ready`]), and the one way
//! to read a partition out of librdkafka's answer to such a fetch or to a ListOffsets
//! ([`answered`]).

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::topic_partition_list::TopicPartitionListElem;
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

/// How long [`committed_when_ready`] asks again while the group coordinator is being elected or
/// loads its offsets ([`coordinator_not_ready`]): Kafka's `__consumer_offsets` load on a broker
/// just started takes seconds.
pub const COORDINATOR_WAIT: Duration = Duration::from_secs(30);

/// Pause between two committed-offsets fetches while the coordinator is not ready.
const COORDINATOR_RETRY: Duration = Duration::from_millis(500);

/// Whether `code` from an OffsetFetch says the group coordinator is not ready yet, which Kafka's
/// protocol marks retriable (`NOT_COORDINATOR`, `COORDINATOR_LOAD_IN_PROGRESS`,
/// `COORDINATOR_NOT_AVAILABLE`; Kafka's `Errors` enum): a broker that just started answers so
/// while it elects the coordinator and loads `__consumer_offsets`. librdkafka's
/// `rd_kafka_committed` returns them to the caller instead of waiting.
pub fn coordinator_not_ready(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as E;
    matches!(
        code,
        E::NotCoordinator | E::CoordinatorLoadInProgress | E::CoordinatorNotAvailable
    )
}

/// The offsets `consumer`'s group committed on `tpl` (`consumer.committed_offsets`, each ask
/// bounded by `timeout`), asked again every 500 ms for up to [`COORDINATOR_WAIT`] while the
/// coordinator is not ready ([`coordinator_not_ready`]). For the one-shot readers of committed
/// offsets (`audit`, `check-config --connect`); a partition's recovery retries its whole read
/// instead, cancellable by a revocation, and the route stage's start asks once (it runs in the
/// rebalance callback, which must not block for 30 s).
///
/// Errors: any other error at once, or the last "not ready" one when the wait is over.
pub fn committed_when_ready<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    tpl: &TopicPartitionList,
    timeout: Duration,
) -> KafkaResult<TopicPartitionList> {
    let deadline = Instant::now() + COORDINATOR_WAIT;
    loop {
        match consumer.committed_offsets(tpl.clone(), timeout) {
            Err(e)
                if e.rdkafka_error_code().is_some_and(coordinator_not_ready)
                    && Instant::now() + COORDINATOR_RETRY < deadline =>
            {
                std::thread::sleep(COORDINATOR_RETRY);
            }
            other => return other,
        }
    }
}

/// The offset librdkafka answered for `topic`/`partition` in `list`, a list returned by
/// `committed_offsets` (OffsetFetch) or `offsets_for_times` (ListOffsets), checked.
///
/// Why: a partition-level error of the broker's answer (the per-partition `ErrorCode`:
/// `UNKNOWN_TOPIC_OR_PARTITION`, `TOPIC_AUTHORIZATION_FAILED`, `UNSTABLE_OFFSET_COMMIT` once
/// librdkafka stops retrying it, a partition without a leader) is set on the list's element while
/// the call itself returns `Ok` (`rd_kafka_handle_OffsetFetch`, rdkafka_request.c), and the
/// element's offset is then `Offset::Invalid` (OffsetFetch: reads as "nothing committed") or
/// still the timestamp asked (ListOffsets: reads as an offset). Reading the offset alone took an
/// error for an answer.
///
/// Returns the element: its offset is `Offset::Offset(n)`, or `Offset::Invalid` when the group
/// has nothing committed there; an OffsetFetch answer's carries the commit's metadata string.
/// Errors: the element's error, or `UnknownPartition` when the answer left the partition out.
pub fn answered<'a>(
    list: &'a TopicPartitionList,
    topic: &str,
    partition: i32,
) -> KafkaResult<TopicPartitionListElem<'a>> {
    let elem = list
        .find_partition(topic, partition)
        .ok_or(KafkaError::OffsetFetch(RDKafkaErrorCode::UnknownPartition))?;
    elem.error()?;
    Ok(elem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::config::ClientConfig;
    use rdkafka::mocking::MockCluster;
    use rdkafka::Offset;

    /// librdkafka's mock cluster answers OffsetFetch for a partition it does not have with a
    /// partition-level `UNKNOWN_TOPIC_OR_PARTITION` and the call succeeds: the answer for that
    /// partition is an error, not "nothing committed"; a committed partition and an uncommitted
    /// one read as such.
    #[test]
    fn a_partition_level_error_in_an_answer_is_an_error() {
        let cluster = MockCluster::new(1).unwrap();
        cluster.create_topic("in", 2, 1).unwrap();
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .set("group.id", "g")
            .create()
            .unwrap();
        let mut commit = TopicPartitionList::new();
        commit.add_partition_offset("in", 1, Offset::Offset(0)).unwrap();
        commit_within(&consumer, &commit, Duration::from_secs(10)).unwrap();
        let mut tpl = TopicPartitionList::new();
        for p in [0, 1, 7] {
            tpl.add_partition("in", p);
        }
        let got = committed_when_ready(&consumer, &tpl, Duration::from_secs(10)).expect("the call succeeds");
        assert!(
            got.find_partition("in", 7)
                .is_some_and(|e| e.offset() == Offset::Invalid),
            "the element of the missing partition reads as nothing committed: {got:?}"
        );
        assert_eq!(
            answered(&got, "in", 0).unwrap().offset(),
            Offset::Invalid,
            "nothing committed"
        );
        assert_eq!(
            answered(&got, "in", 1).unwrap().offset(),
            Offset::Offset(0),
            "committed"
        );
        let err = answered(&got, "in", 7).expect_err("a partition-level error");
        assert_eq!(
            err.rdkafka_error_code(),
            Some(RDKafkaErrorCode::UnknownTopicOrPartition)
        );
        let err = answered(&got, "other", 0).expect_err("left out of the answer");
        assert_eq!(err.rdkafka_error_code(), Some(RDKafkaErrorCode::UnknownPartition));
    }
}
