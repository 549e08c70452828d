//! When partitions paused for a full producer queue resume ([`BackedOff`]): the filter's
//! (`pipeline::backpressure`) and the route stage's (`global::route::pause`).

use std::time::Instant;

/// Partitions paused: since when, and, for the producer whose queue was full, how many messages
/// it held then (`in_flight_count`: queued or in flight; `None`: no condition on that producer:
/// not the full one (a side producer retrying a halted partition's few copies must not hold the
/// others back), one that does not exist, or a pause for another reason, a pending transaction
/// commit or the schema registry).
///
/// They resume once every such producer has drained to half of what it held ([`Self::drained`]).
/// Half of what it held, not of `queue.buffering.max.messages`: librdkafka's queue is also full at
/// `queue.buffering.max.kbytes` (1 GiB by default), which records of 100 KB reach at about
/// 10,000 messages, so a queue full by its size held far fewer messages than half its message
/// limit, and a rule on the message limit resumed at once: each record taken then waited
/// `produce::QUEUE_WAIT` (1 s) in `send` and paused everything again, a pause and a resume a
/// second for as long as the output was away, each resume fetching records only to give them back.
/// Resuming before half has drained would do the same on a slow output.
#[derive(Clone, Copy, Debug)]
pub struct BackedOff {
    /// When the partitions paused.
    pub since: Instant,
    held: [Option<i32>; 2],
}

impl BackedOff {
    /// Paused now, the producers holding `held` messages (see [`BackedOff`]).
    pub fn new(held: [Option<i32>; 2]) -> BackedOff {
        BackedOff {
            since: Instant::now(),
            held,
        }
    }

    /// Whether every producer with a condition (the one whose queue was full), holding `queued`
    /// messages now (the same order as [`Self::new`]'s), has drained to half of what it held when
    /// the partitions paused.
    pub fn drained(&self, queued: [Option<i32>; 2]) -> bool {
        self.held.iter().zip(queued).all(|(held, now)| match held {
            None => true,
            Some(held) => now.unwrap_or(0) <= held / 2,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::BackedOff;

    #[test]
    fn the_partitions_resume_once_every_producer_drained_to_half_of_what_it_held() {
        #[rustfmt::skip]
        let rows = [
            ([Some(100), None], [Some(50), None], true, "full by its message limit, half drained"),
            ([Some(100), None], [Some(51), None], false, "not yet half"),
            ([Some(900), None], [Some(800), None], false, "full by its size at 900 messages: not at 800"),
            ([Some(900), None], [Some(450), None], true, "full by its size at 900 messages: half drained"),
            ([None, Some(100)], [Some(10), Some(100)], false, "the side producer full: still full"),
            ([None, Some(100)], [Some(90_000), Some(50)], true, "the side producer full: drained, the output's busy"),
            ([Some(100), None], [Some(50), Some(3)], true, "the output's full: a side producer retrying a few copies does not count"),
            ([Some(0), None], [Some(0), None], true, "held nothing: resumes empty"),
            ([Some(1), None], [Some(1), None], false, "one message held: until it is delivered"),
            ([None, None], [Some(40_000), Some(7)], true, "paused for a pending commit or the registry: no condition"),
        ];
        for (held, now, want, case) in rows {
            assert_eq!(BackedOff::new(held).drained(now), want, "{case}");
        }
    }
}
