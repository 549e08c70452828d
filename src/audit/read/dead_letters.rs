//! The dead-letter topic's copies of the audited input records ([`dead_letters`]): what the
//! filter let past on purpose, read once before the partitions' walks.

use super::*;

/// The copies in `fingerprint.dead_letter_topic` (none when it is not set, or the topic does not
/// exist) of the input records `plans` read, by input partition and input offset: every
/// partition of the topic is read from its log start to its end as of now (read_committed), and
/// a record is taken when its provenance (`kafka-dedup.source`, the last naming the input topic)
/// names an input partition planned, at an offset in `[input_read_from, to_offset)`. Its reason
/// is its last `kafka-dedup.reason` header; copies with the reason `duplicate` (a duplicates
/// topic shared with the dead letters) are left out: the walk judges replays itself. The first
/// copy of an input record is kept. Memory: one map entry (about 100 B) per copy taken; the
/// topic's other records are only read. Errors: Kafka failures, a partition that stalls.
pub(super) fn dead_letters(
    cfg: &Config,
    plans: &[(i32, Plan)],
) -> Result<BTreeMap<i32, BTreeMap<i64, DeadLetter>>, AuditError> {
    let mut found: BTreeMap<i32, BTreeMap<i64, DeadLetter>> = BTreeMap::new();
    let topic = cfg.fingerprint.dead_letter_topic.as_str();
    if topic.is_empty() || plans.is_empty() {
        return Ok(found);
    }
    let wanted: BTreeMap<i32, (i64, i64)> = plans
        .iter()
        .map(|(p, plan)| (*p, (plan.range.input_read_from, plan.range.to_offset)))
        .collect();
    let r = reader(cfg)?;
    let Some(n) = kafka::partition_count_for(r.client(), "fingerprint.dead_letter_topic", topic, REQUEST_TIMEOUT)?
    else {
        return Ok(found);
    };
    // Per dead-letter partition: (the next offset expected, its end).
    let mut open: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
    let mut tpl = TopicPartitionList::new();
    for q in 0..n.min(i32::MAX as usize) as i32 {
        let (low, high) = r.fetch_watermarks(topic, q, REQUEST_TIMEOUT)?;
        if low < high {
            tpl.add_partition_offset(topic, q, Offset::Offset(low))?;
            open.insert(q, (low, high));
        }
    }
    if open.is_empty() {
        return Ok(found);
    }
    r.assign(&tpl)?;
    let (mut last, mut errors) = (Instant::now(), 0);
    while let Some((&q, &(next, _))) = open.iter().next() {
        match r.poll(Duration::from_millis(200)) {
            Some(Ok(m)) if m.topic() == topic => {
                last = Instant::now();
                let q = m.partition();
                let Some(&(_, end)) = open.get(&q) else { continue };
                if m.offset() >= end {
                    open.remove(&q);
                    continue;
                }
                if let Some(src) = crate::provenance::Provenance::of(&m, &cfg.input.topic) {
                    let in_range = wanted
                        .get(&src.partition)
                        .is_some_and(|(from, to)| (*from..*to).contains(&src.offset));
                    let mut reason = None;
                    m.for_each_header(crate::provenance::REASON_HEADER.as_bytes(), &mut |v| {
                        reason = Some(v.map_or_else(String::new, |v| String::from_utf8_lossy(v).into_owned()));
                    });
                    let reason = reason.filter(|r| !r.is_empty()).unwrap_or_else(|| "?".to_string());
                    if in_range && reason != "duplicate" {
                        found
                            .entry(src.partition)
                            .or_default()
                            .entry(src.offset)
                            .or_insert(DeadLetter {
                                reason,
                                partition: q,
                                offset: m.offset(),
                            });
                    }
                }
                if m.offset() + 1 >= end {
                    open.remove(&q);
                } else {
                    open.insert(q, (m.offset() + 1, end));
                }
            }
            Some(Ok(_)) => {}
            Some(Err(KafkaError::PartitionEOF(q))) => {
                open.remove(&q);
            }
            Some(Err(e)) => {
                errors += 1;
                if errors > MAX_ERRORS {
                    return Err(e.into());
                }
            }
            None => {
                if last.elapsed() > STALL_TIMEOUT {
                    return Err(AuditError::Stalled {
                        topic: topic.to_string(),
                        partition: q,
                        offset: next,
                        seconds: STALL_TIMEOUT.as_secs(),
                    });
                }
            }
        }
    }
    Ok(found)
}
