//! Issue 26: the fingerprint changelog (`store.changelog_topic`). A hand-over to an owner
//! without a local store loads the older generations from the changelog and stays exact; each
//! fallback that can be forced cheaply re-reads the output, stays exact, and counts its reason.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;

const FORWARDED: &str = "kafka_dedup_records_forwarded_total";
const WRITTEN: &str = "kafka_dedup_changelog_written_bytes_total";
const LOADED: &str = "kafka_dedup_changelog_loaded_bytes_total";
const FALLBACKS: &str = "kafka_dedup_changelog_fallbacks_total";
const HANDOVERS: &str = "kafka_dedup_handover_duration_seconds_count";

/// Records in the first owner's older generation.
const K: u64 = 3_000;
/// Records in the older generation when it must span several chunks (3 of 32,768).
const SEVERAL_CHUNKS: u64 = 70_000;
/// New records the second owner forwards.
const M: u64 = 500;

/// What happens to the changelog between the two owners.
#[derive(Clone, Copy, PartialEq)]
enum Sabotage {
    None,
    /// Deleted and created again, empty.
    Recreated,
    /// Recreated, then filled with records that are no chunks.
    Garbled,
    /// Recreated, then filled with valid chunks of another deployment.
    OtherGroup,
    /// Left alone; the second owner has another `fingerprint.source`.
    OtherSource,
    /// The log start moved past the first chunk the commit names (retention or DeleteRecords),
    /// the later chunks of its generation still there.
    DeletedBelow,
    /// Every chunk the commit names superseded by a newer record of its key (a tombstone) and
    /// compacted away by the log cleaner; the newer records stay.
    Compacted,
}

fn create_changelog(name: &str) {
    create_changelog_with(name, &[]);
}

fn create_changelog_with(name: &str, extra: &[(&str, &str)]) {
    let mut configs = vec![("cleanup.policy", "compact"), ("max.message.bytes", "2000000")];
    configs.retain(|(k, _)| extra.iter().all(|(e, _)| e != k));
    configs.extend_from_slice(extra);
    kafka().create_topic_with(name, 1, &configs);
}

/// The changelog checkpoint the group's commit of input partition 0 names.
fn committed_ref(spec: &FilterSpec) -> kafka_dedup::changelog::ChangelogRef {
    let committed = kafka().committed(&spec.group, &spec.input, 1);
    let meta = kafka_dedup::metadata::CheckpointMeta::decode(&committed[&0].1).expect("metadata committed");
    meta.cl.expect("the commit names a changelog checkpoint")
}

/// Offset and key of the records of `topic`/0 from `from` on, up to `n` of them or the end.
fn records_from(topic: &str, from: i64, n: usize) -> Vec<(i64, Option<Vec<u8>>)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::{Message, Offset, TopicPartitionList};
    let mut c = kafka().client();
    c.set("group.id", unique("cl-peek"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true");
    let consumer: BaseConsumer = c.create().unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(from)).unwrap();
    consumer.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while out.len() < n {
        assert!(std::time::Instant::now() < deadline, "reading {topic} timed out");
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => out.push((m.offset(), m.key().map(|k| k.to_vec()))),
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => break,
            _ => {}
        }
    }
    out
}

/// Supersedes every chunk record `r` names with a tombstone of its key and waits until the log
/// cleaner has removed them (the changelog was made with `segment.ms` short, so that each append
/// after it rolls a segment the cleaner may compact; the filler records appended while waiting
/// roll the tombstones' segment).
fn compact_away(topic: &str, r: &kafka_dedup::changelog::ChangelogRef) {
    use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
    let keys: Vec<Vec<u8>> = records_from(topic, r.o, r.n as usize)
        .into_iter()
        .map(|(_, k)| k.expect("chunks have keys"))
        .collect();
    assert_eq!(keys.len(), r.n as usize);
    let producer: ThreadedProducer<_> = kafka().client().create().unwrap();
    for k in &keys {
        producer
            .send(BaseRecord::<Vec<u8>, Vec<u8>>::to(topic).partition(0).key(k))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut i = 0u32;
    while records_from(topic, r.o, 1).first().map(|(o, _)| *o) == Some(r.o) {
        assert!(
            std::time::Instant::now() < deadline,
            "the log cleaner did not compact {topic}"
        );
        let key = format!("filler{i}");
        producer
            .send(BaseRecord::to(topic).partition(0).key(&key).payload("filler"))
            .map_err(|(e, _)| e)
            .unwrap();
        producer.flush(Duration::from_secs(30)).unwrap();
        i += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn fill(topic: &str, values: impl Fn(u32) -> Vec<u8>) {
    use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
    let producer: ThreadedProducer<_> = kafka().client().create().unwrap();
    for i in 0..200u32 {
        let key = format!("k{i}");
        let value = values(i);
        producer
            .send(BaseRecord::to(topic).partition(0).key(&key).payload(&value))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// One owner forwards `K` records in one bucket of record time and one in the next (the first
/// generation is frozen, so its checkpoint writes it to the changelog), and stops; its store is
/// deleted; after `sabotage`, a second owner takes the partition, with replays of all `K + 1`
/// and `M` new records waiting. The output must hold every value once. Returns the second
/// owner's scrape.
fn handover(dir: &Path, sabotage: Sabotage, kill: bool) -> String {
    handover_of(dir, K, sabotage, kill, true).0
}

/// [`handover`] with `k` records in the older generation, the changelog on or off; also returns
/// the second owner's log.
fn handover_of(dir: &Path, k: u64, sabotage: Sabotage, kill: bool, on: bool) -> (String, String) {
    let o = handover_run(dir, k, sabotage, kill, on, false);
    (o.scrape, o.logs)
}

/// What a hand-over run leaves: the second owner's scrape and log, and resident memory (KiB,
/// `VmRSS` of `/proc/<pid>/status`) of the first owner before it stopped, of the second at its
/// highest from its start to its first forward (sampled every 50 ms), and of the second at the
/// end.
struct Outcome {
    scrape: String,
    logs: String,
    rss_a_kib: u64,
    rss_b_peak_kib: u64,
    rss_b_end_kib: u64,
}

/// `VmRSS` of process `pid`, KiB (0 once it is gone).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Interval of record time (ms) of a run with advancing timestamps: `checkpoint.interval`.
const ADVANCING_INTERVAL_MS: i64 = 20_000;

/// [`handover_of`]; with `advancing`, the records are stamped as a producer stamps them (now,
/// advancing: each batch of 50,000 with the wall clock when it is sent), with
/// `checkpoint.interval = "20s"` and 6 generations (H_min 100 s), so that millions of records
/// written over a minute or more stay in the horizon; the record that rotates the generations is
/// written once the wall clock is in the next bucket, the replays keep their first copies'
/// stamps, and the new records carry the rotating record's.
fn handover_run(dir: &Path, k: u64, sabotage: Sabotage, kill: bool, on: bool, advancing: bool) -> Outcome {
    let (input, output, changelog) = (unique("cl-in"), unique("cl-out"), unique("cl-log"));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    if sabotage == Sabotage::Compacted {
        create_changelog_with(
            &changelog,
            &[
                ("segment.ms", "1000"),
                ("min.cleanable.dirty.ratio", "0.01"),
                ("min.compaction.lag.ms", "0"),
            ],
        );
    } else if sabotage == Sabotage::DeletedBelow {
        // Retention applies with `delete` in the policy (and DeleteRecords only then).
        create_changelog_with(&changelog, &[("cleanup.policy", "compact,delete")]);
    } else {
        create_changelog(&changelog);
    }
    let mut spec = FilterSpec::new(&input, &output, dir);
    spec.interval = "3s";
    spec.generations = 3;
    if on {
        spec.changelog = changelog.clone();
    }
    if kill {
        spec = spec.killable();
    }
    if advancing {
        spec.interval = "20s";
        spec.generations = 6;
    }
    let t0 = wall_ms() - 20_000;
    // The stamp of each batch of 50,000 records (the last: the record that rotates).
    let mut stamps = Vec::new();
    let first: Vec<(i32, u64)> = (0..k).map(|v| (0, v)).collect();
    for part in first.chunks(50_000) {
        let t = if advancing { wall_ms() } else { t0 };
        kafka().produce_values_at(&input, part, t);
        stamps.push(t);
    }
    let rotate_at = if advancing {
        let last = *stamps.last().unwrap_or(&wall_ms());
        while wall_ms().div_euclid(ADVANCING_INTERVAL_MS) == last.div_euclid(ADVANCING_INTERVAL_MS) {
            std::thread::sleep(Duration::from_millis(100));
        }
        wall_ms()
    } else {
        t0 + 4_000
    };
    kafka().produce_values_at(&input, &[(0, k)], rotate_at);
    stamps.push(rotate_at);
    let mut a = spec.start(dir);
    a.wait_metric(FORWARDED, &[], (k + 1) as f64, Duration::from_secs(600));
    if on {
        // A checkpoint after every record was taken wrote the frozen generations (16 B per
        // fingerprint): the counter sums every checkpoint's write, so wait for one more than
        // those before (a report's earlier checkpoints wrote parts of the first records).
        let before = metric(&a.scrape(), WRITTEN, &[]);
        a.wait_metric(WRITTEN, &[], before + (k * 16) as f64, Duration::from_secs(120));
    }
    std::thread::sleep(Duration::from_secs(4));
    let rss_a_kib = rss_kib(a.pid());
    if kill {
        a.kill9();
    } else {
        assert!(a.terminate().success(), "{}", a.logs());
    }
    std::fs::remove_dir_all(&spec.store).unwrap();
    match sabotage {
        Sabotage::None | Sabotage::OtherSource => {}
        Sabotage::DeletedBelow => {
            let r = committed_ref(&spec);
            assert!(r.n > 1, "a generation of several chunks: {r:?}");
            kafka().delete_records(&changelog, r.p, r.o + 1);
        }
        Sabotage::Compacted => compact_away(&changelog, &committed_ref(&spec)),
        Sabotage::Recreated | Sabotage::Garbled | Sabotage::OtherGroup => {
            kafka().delete_topic(&changelog);
            create_changelog(&changelog);
        }
    }
    match sabotage {
        Sabotage::Garbled => fill(&changelog, |i| format!("not a chunk {i}").into_bytes()),
        Sabotage::OtherGroup => fill(&changelog, |i| {
            kafka_dedup::changelog::encode(&kafka_dedup::changelog::Chunk {
                identity: 42,
                source: 42,
                ckpt: "0123456789abcdef".into(),
                partition: 0,
                epoch: u64::from(i),
                chunk: 0,
                chunks: 1,
                count: 1,
                in_start: 0,
                bucket: None,
                created_at_ms: 0,
                out_start: Default::default(),
                fingerprints: vec![u128::from(i)],
            })
        }),
        _ => {}
    }
    // Replays of everything and new records, in the second bucket of record time: the replays
    // first; in a report (a large `k`) the new records first, so that the first forward follows
    // the recovery at once.
    let replays: Vec<(i32, u64)> = (0..=k).map(|v| (0, v)).collect();
    let new: Vec<(i32, u64)> = (k + 1..=k + M).map(|v| (0, v)).collect();
    let report = k > 100_000;
    // The new records in the rotating record's bucket: stamped minutes later (when this runs),
    // they would move the second owner's clock past the horizon before the replays arrive, and
    // the replays would rightly pass.
    let new_at = rotate_at;
    if report {
        kafka().produce_values_at(&input, &new, new_at);
    }
    for (i, part) in replays.chunks(50_000).enumerate() {
        if advancing {
            // Each replay keeps its first copy's stamp: batch i's, or the rotating record's.
            let (head, tail): (Vec<_>, Vec<_>) = part.iter().partition(|(_, v)| *v < k);
            if !head.is_empty() {
                kafka().produce_values_at(&input, &head, stamps[i]);
            }
            if !tail.is_empty() {
                kafka().produce_values_at(&input, &tail, rotate_at);
            }
        } else {
            kafka().produce_values_at(&input, part, t0 + 4_000);
        }
    }
    if !report {
        kafka().produce_values_at(&input, &new, new_at);
    }
    let mut b_spec = spec.clone();
    b_spec.store = dir.join("store-b");
    if sabotage == Sabotage::OtherSource {
        b_spec.fingerprint = "[fingerprint]\nsource = \"key_value\"\n".into();
    }
    let mut b = b_spec.start(dir);
    let peak = {
        let (pid, stop) = (b.pid(), std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)));
        let sampler = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut peak = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    peak = peak.max(rss_kib(pid));
                    std::thread::sleep(Duration::from_millis(50));
                }
                peak
            })
        };
        b.wait_metric(FORWARDED, &[], 1.0, Duration::from_secs(600));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        sampler.join().unwrap()
    };
    b.wait_metric(FORWARDED, &[], M as f64, Duration::from_secs(600));
    if report {
        // Every replay taken (and dropped) before the output is counted.
        b.wait_metric(
            "kafka_dedup_records_consumed_total",
            &[],
            (k + 1 + M) as f64,
            Duration::from_secs(600),
        );
    }
    std::thread::sleep(Duration::from_secs(2));
    let scrape = b.scrape();
    let rss_b_end_kib = rss_kib(b.pid());
    assert!(b.terminate().success(), "{}", b.logs());
    if report {
        // Said before the output is checked, so that a failed check still reports the times.
        for l in b.logs().lines().filter(|l| {
            l.contains("recovery steps") || l.contains("partition running") || l.contains("first record forwarded")
        }) {
            eprintln!("{l}");
        }
    }
    if k <= 2_000_000 {
        let out = kafka().read_values(&output, 1);
        let want: Vec<u64> = (0..=k + M).collect();
        assert!(out.get(&0).is_some_and(|o| *o == want), "output differs:\n{}", b.logs());
    } else {
        // Too many to read back here: as many output records as distinct values.
        assert_eq!(kafka().end_offsets(&output, 1)[&0], (k + 1 + M) as i64, "{}", b.logs());
    }
    Outcome {
        scrape,
        logs: b.logs(),
        rss_a_kib,
        rss_b_peak_kib: peak,
        rss_b_end_kib,
    }
}

/// Report (issue 26): assignment to first forward of a partition with `KD_HELD` (default
/// 1,000,000) fingerprints in its frozen generations, by hand-over (clean, SIGKILL) and source
/// (changelog off: the output re-read; on: the changelog), with what the time is spent on and
/// the resident memory of both owners; records stamped as a producer stamps them
/// ([`handover_run`] with `advancing`).
/// `KD_HELD=1000000 cargo test --test changelog -- --ignored --nocapture report_` (`KD_KILL=clean` or
/// `kill` for one kind only).
#[test]
#[ignore = "report; run on demand"]
fn report_handover_by_source() {
    let k: u64 = std::env::var("KD_HELD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    eprintln!("| hand-over | changelog | assignment to running (s) | first forward (s) | load (s) | fence (s) | re-read (s) | records re-read | RSS first owner (MiB) | RSS loading, peak (MiB) | RSS after (MiB) |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    // KD_KILL: "clean" or "kill" for one kind of hand-over only.
    let kinds: Vec<bool> = match std::env::var("KD_KILL").as_deref() {
        Ok("clean") => vec![false],
        Ok("kill") => vec![true],
        _ => vec![false, true],
    };
    for kill in kinds {
        // KD_ON: "off" or "on" for one side only.
        let sides: Vec<bool> = match std::env::var("KD_ON").as_deref() {
            Ok("off") => vec![false],
            Ok("on") => vec![true],
            _ => vec![false, true],
        };
        for on in sides {
            let dir = tempfile::tempdir().unwrap();
            let o = handover_run(dir.path(), k, Sabotage::None, kill, on, true);
            let logs = o.logs;
            let field = |marker: &str, name: &str| {
                logs.lines()
                    .find(|l| l.contains(marker))
                    .and_then(|l| {
                        l.split_whitespace()
                            .find_map(|w| w.strip_prefix(&format!("{name}=")).map(str::to_string))
                    })
                    .unwrap_or_else(|| "?".into())
            };
            let steps = "recovery steps";
            eprintln!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                if kill { "SIGKILL" } else { "clean" },
                if on { "on" } else { "off" },
                field("partition running", "seconds"),
                field("first record forwarded since", "seconds"),
                field(steps, "load_seconds"),
                field(steps, "fence_seconds"),
                field(steps, "reread_seconds"),
                field(steps, "rescanned"),
                o.rss_a_kib / 1024,
                o.rss_b_peak_kib / 1024,
                o.rss_b_end_kib / 1024,
            );
        }
    }
}

/// Fingerprints in the older generation of the tests at scale (issue 26: at least 1M).
const MILLION: u64 = 1_000_000;

/// A scale-out with 1,000,001 fingerprints in the horizon: the new owner loads them from the
/// changelog, drops all 1,000,001 replays and forwards the new records once.
#[test]
fn a_clean_handover_of_a_million_fingerprints_loads_the_changelog_and_stays_exact() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = handover_of(dir.path(), MILLION, Sabotage::None, false, true);
    assert_eq!(metric(&s, HANDOVERS, &["source=\"changelog\""]), 1.0, "{s}");
    assert!(metric(&s, LOADED, &[]) >= (MILLION * 16) as f64, "{s}");
    assert_eq!(metric(&s, FALLBACKS, &[]), 0.0, "{s}");
}

/// [`a_clean_handover_of_a_million_fingerprints_loads_the_changelog_and_stays_exact`] after a
/// SIGKILL of the first owner.
#[test]
fn a_handover_of_a_million_fingerprints_after_sigkill_loads_the_changelog_and_stays_exact() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = handover_of(dir.path(), MILLION, Sabotage::None, true, true);
    assert_eq!(metric(&s, HANDOVERS, &["source=\"changelog\""]), 1.0, "{s}");
    assert!(metric(&s, LOADED, &[]) >= (MILLION * 16) as f64, "{s}");
    assert_eq!(metric(&s, FALLBACKS, &[]), 0.0, "{s}");
}

#[test]
fn a_clean_handover_loads_the_changelog_and_stays_exact() {
    let dir = tempfile::tempdir().unwrap();
    let s = handover(dir.path(), Sabotage::None, false);
    assert_eq!(metric(&s, HANDOVERS, &["source=\"changelog\""]), 1.0, "{s}");
    assert!(metric(&s, LOADED, &[]) >= (K * 16) as f64, "{s}");
    assert_eq!(metric(&s, FALLBACKS, &[]), 0.0, "{s}");
}

#[test]
fn a_handover_after_sigkill_loads_the_changelog_and_stays_exact() {
    let dir = tempfile::tempdir().unwrap();
    let s = handover(dir.path(), Sabotage::None, true);
    assert_eq!(metric(&s, HANDOVERS, &["source=\"changelog\""]), 1.0, "{s}");
    assert_eq!(metric(&s, FALLBACKS, &[]), 0.0, "{s}");
}

fn falls_back(sabotage: Sabotage, reason: &str) {
    let dir = tempfile::tempdir().unwrap();
    let s = handover(dir.path(), sabotage, false);
    assert_eq!(metric(&s, FALLBACKS, &[&format!("reason=\"{reason}\"")]), 1.0, "{s}");
    assert_eq!(metric(&s, HANDOVERS, &["source=\"output\""]), 1.0, "{s}");
    assert_eq!(metric(&s, LOADED, &[]), 0.0, "{s}");
}

/// Retention (issue 26): the log start moved past the first chunk of the changelog checkpoint
/// the commit names; the later chunks of the generation are still there. Loaded, they would
/// hold only part of the generation and let the replays of the rest through.
#[test]
fn chunks_below_the_log_start_fall_back_and_the_replays_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = handover_of(dir.path(), SEVERAL_CHUNKS, Sabotage::DeletedBelow, false, true);
    assert_eq!(metric(&s, FALLBACKS, &["reason=\"missing\""]), 1.0, "{s}");
    assert_eq!(metric(&s, HANDOVERS, &["source=\"output\""]), 1.0, "{s}");
}

/// Compaction (issue 26): the chunks the commit names were superseded by newer records of their
/// keys and compacted away; the newer records follow where they were.
#[test]
fn chunks_compacted_away_fall_back_and_the_replays_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = handover_of(dir.path(), SEVERAL_CHUNKS, Sabotage::Compacted, false, true);
    assert_eq!(metric(&s, FALLBACKS, &["reason=\"missing\""]), 1.0, "{s}");
    assert_eq!(metric(&s, HANDOVERS, &["source=\"output\""]), 1.0, "{s}");
}

#[test]
fn a_recreated_changelog_falls_back_as_missing() {
    falls_back(Sabotage::Recreated, "missing");
}

#[test]
fn a_garbled_changelog_falls_back_as_corrupt() {
    falls_back(Sabotage::Garbled, "corrupt");
}

#[test]
fn another_deployments_changelog_falls_back() {
    falls_back(Sabotage::OtherGroup, "other_deployment");
}

#[test]
fn a_changed_fingerprint_source_falls_back() {
    falls_back(Sabotage::OtherSource, "other_source");
}

/// A changelog topic that does not exist: exit 2 with the command that creates it.
#[test]
fn a_missing_changelog_topic_exits_2_with_the_create_command() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("cl-in"), unique("cl-out"));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.changelog = unique("cl-none");
    let mut p = spec.start(dir.path());
    let status = p.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(2), "{}", p.logs());
    assert!(p.logs().contains("cleanup.policy=compact"), "{}", p.logs());
}
