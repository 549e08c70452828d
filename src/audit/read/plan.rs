//! Where each partition's range begins and ends ([`plan`]): the offset bounds, the committed
//! offset, the floors where records are gone, the lead-ins found by ListOffsets and checked
//! against the records there ([`checked_start`]).

use super::*;

/// A partition's range, resolved.
pub(super) struct Plan {
    pub(super) bounds: Bounds,
    pub(super) range: Range,
}

/// Resolves where partition `p`'s range begins and ends (see the module documentation).
pub(super) fn plan(
    meta: &Reader,
    cfg: &Config,
    request: &Request,
    horizon: Horizon,
    p: i32,
    committed: Option<i64>,
) -> Result<Plan, AuditError> {
    let (input, output) = (cfg.input.topic.as_str(), cfg.output.topic.as_str());
    // The output's end first: whatever the filter forwarded before it copies input before the
    // input's end read after it (the walk's `Rules::input_end`).
    let (out_low, out_high) = meta.fetch_watermarks(output, p, REQUEST_TIMEOUT)?;
    let (in_low, in_high) = meta.fetch_watermarks(input, p, REQUEST_TIMEOUT)?;
    let (to_offset, to) = match (request.to_offset, committed) {
        (Some(o), _) => (o, UpperBound::ToOffset),
        (None, Some(c)) => (c, UpperBound::Committed),
        (None, None) => (in_high, UpperBound::End),
    };
    let to_offset = to_offset.clamp(in_low, in_high);
    let mut from_offset = request.from_offset.unwrap_or(in_low).max(in_low);
    // `input.start = "latest"` and an empty output: the filter started at the end, at or before
    // the committed offset (its start-of-ownership commit), and has forwarded nothing: the
    // records before that offset were never its to take (they would all be counted lost).
    if let (Start::Latest, true, Some(c)) = (cfg.input.start, out_low == out_high, committed) {
        from_offset = from_offset.max(c.min(in_high));
    }

    // The floor where records are gone, or the filter started at the end (each first record is
    // read only then: reading one can take a second on a slow broker).
    let mut floor = None;
    if in_low > 0 {
        floor = first_record(meta, input, p, in_low)?.map(|r| r.1.saturating_add(horizon.max_ms));
    }
    if out_low > 0 || cfg.input.start == Start::Latest {
        if let Some((_, t)) = first_record(meta, output, p, out_low)? {
            floor = Some(floor.map_or(t, |f: i64| f.max(t)));
        }
    }
    let (since_ms, since) = match (request.since_ms, floor) {
        (Some(s), Some(f)) if f > s => (Some(f), LowerBound::Retention),
        (Some(s), _) => (Some(s), LowerBound::Since),
        (None, Some(f)) => (Some(f), LowerBound::Retention),
        (None, None) => (None, LowerBound::None),
    };

    // Where the range begins in record time, for the lead-ins.
    let at_from = if from_offset > in_low {
        first_record(meta, input, p, from_offset)?.map(|r| r.1)
    } else {
        None
    };
    let start_ms = match (since_ms, at_from) {
        (Some(s), Some(f)) => Some(s.max(f)),
        (s, f) => s.or(f),
    };
    let (input_read_from, output_read_from) = match start_ms {
        None => (in_low, out_low),
        Some(t) => (
            // Never after an offset bound given (a record stamped earlier than the ones before it
            // would put the answer past it).
            offset_for_time(meta, input, p, t.saturating_sub(horizon.max_ms), (in_low, in_high))?
                .min(request.from_offset.unwrap_or(i64::MAX)),
            offset_for_time(
                meta,
                output,
                p,
                t.saturating_sub(horizon.max_ms.saturating_mul(2)),
                (out_low, out_high),
            )?,
        ),
    };
    let bounds = Bounds {
        from_offset,
        to_offset,
        since_ms: since_ms.unwrap_or(i64::MIN),
        until_ms: request.until_ms.unwrap_or(i64::MAX),
    };
    Ok(Plan {
        bounds,
        range: Range {
            input_read_from,
            from_offset,
            to_offset,
            to,
            since_ms,
            since,
            until_ms: request.until_ms,
            output_read_from,
            output_end: out_high,
            input_end: in_high,
        },
    })
}

/// The offset and timestamp of the first record of `topic`/`p` at or after `offset`; `None` when
/// there is none (the end) or it has no timestamp.
pub(super) fn first_record(meta: &Reader, topic: &str, p: i32, offset: i64) -> Result<Option<(i64, i64)>, AuditError> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, p, Offset::Offset(offset))?;
    meta.assign(&tpl)?;
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    let mut errors = 0;
    while Instant::now() < deadline {
        match meta.poll(Duration::from_millis(200)) {
            Some(Ok(m)) if m.topic() == topic && m.partition() == p && m.offset() >= offset => {
                return Ok(m.timestamp().to_millis().filter(|t| *t >= 0).map(|t| (m.offset(), t)));
            }
            Some(Err(KafkaError::PartitionEOF(q))) if q == p => return Ok(None),
            Some(Err(e)) => {
                errors += 1;
                if errors > MAX_ERRORS {
                    return Err(e.into());
                }
            }
            _ => {}
        }
    }
    Err(AuditError::Stalled {
        topic: topic.to_string(),
        partition: p,
        offset,
        seconds: REQUEST_TIMEOUT.as_secs(),
    })
}

/// The first offset of `topic`/`p` whose record is stamped at or after `t` (ms), by ListOffsets,
/// checked by [`checked_start`].
pub(super) fn offset_for_time(
    meta: &Reader,
    topic: &str,
    p: i32,
    t: i64,
    (low, high): (i64, i64),
) -> Result<i64, AuditError> {
    if t <= 0 || low >= high {
        return Ok(low);
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, p, Offset::Offset(t))?;
    let found = meta.offsets_for_times(tpl, REQUEST_TIMEOUT)?;
    let answer = kafka::answered(&found, topic, p)?.offset();
    checked_start(t, (low, high), answer, |offset| first_record(meta, topic, p, offset))
}

/// Where to start reading for records stamped at or after `t`, given the broker's ListOffsets
/// `answer` and `probe` (the offset and timestamp of the first record at or after an offset).
/// An answer inside the log is taken when the record there is stamped at or after `t` and the
/// record before it (within [`PROBE_BACK`] offsets) earlier; an answer past the end (none stamped so late) when the last record is older
/// than `t`. Anything else gives the log start `low`: reading more is always safe (tansu 0.6
/// answers offset 0 for a time past its last record).
pub(super) fn checked_start<E>(
    t: i64,
    (low, high): (i64, i64),
    answer: Offset,
    mut probe: impl FnMut(i64) -> Result<Option<(i64, i64)>, E>,
) -> Result<i64, E> {
    Ok(match answer {
        Offset::Offset(o) if o <= low => low,
        Offset::Offset(o) if o < high => {
            let stamped_after = probe(o)?.is_some_and(|(_, ts)| ts >= t);
            // The record before `o`: offsets without one (control records, compaction) are
            // skipped, up to a few; none found is no objection.
            let mut previous_before = true;
            for before in ((o - PROBE_BACK).max(low)..o).rev() {
                if let Some((at, ts)) = probe(before)? {
                    if at < o {
                        previous_before = ts < t;
                        break;
                    }
                }
            }
            if stamped_after && previous_before {
                o
            } else {
                low
            }
        }
        _ => {
            let last_older = probe(high - 1)?.is_some_and(|(_, ts)| ts < t);
            if last_older {
                high
            } else {
                low
            }
        }
    })
}

/// How many offsets [`checked_start`] looks back for the record before an answer.
pub(super) const PROBE_BACK: i64 = 8;
