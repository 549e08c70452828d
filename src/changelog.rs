//! The fingerprint changelog (`store.changelog_topic`, off by default; README, "Hand-overs
//! without the re-read"): at each periodic checkpoint (idempotent mode) the frozen generations'
//! fingerprints (16 bytes each) go to a compacted topic of the user's, and the offset metadata
//! names them ([`ChangelogRef`], the `cl` field of [`crate::metadata::CheckpointMeta`]). A new
//! owner without a usable local store loads them instead of re-reading the frozen generations'
//! records from the output, and re-reads the output only from where the checkpoint's current
//! generation begins (`recovery::plan`, `Plan::Changelog`). The output stays the truth: whatever
//! is wrong with the changelog (missing, behind or ahead, corrupt, another deployment's, another
//! fingerprint source) falls back to today's re-read, counted by [`FALLBACK_REASONS`].
//!
//! Only checkpoints whose commit carries the reference are ever loaded, and the reference is
//! attached after every chunk was acknowledged: what is loaded was forwarded and acknowledged
//! before input offsets that were committed.
//!
//! A chunk is one record. Key `kd1/<group>/<input topic>/<partition>/<epoch>/<chunk>`, so that
//! compaction keeps the newest chunk per (deployment, partition, generation, chunk). Value (all
//! integers little-endian):
//!
//! ```text
//! "KDCL" | version u8 = 1 | identity u128 | source u128 | ckpt [16] (hex ascii) | partition i32 |
//! epoch u64 | chunk u32 | chunks u32 | count u64 | in_start i64 | bucket i64 (i64::MIN: none) |
//! created_at_ms i64 | n_out u32 | (out partition i32, out start i64) * n_out | n u32 |
//! fingerprint u128 * n | xxh3-64 of everything before
//! ```
//!
//! `identity` is the xxh3-128 of the group, the input and the output topic; `source` that of the
//! configured fingerprint source. A reference in the metadata names the checkpoint id, the epoch
//! current at that checkpoint (every live generation before it is in the changelog), the
//! changelog partition and the offset of the first of its `n` chunk records.

use std::sync::OnceLock;
use std::time::Duration;

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::{xxh3_128, xxh3_64};

use crate::config::Config;
use crate::generations::{Generation, Positions};
use crate::kafka;
use crate::table::FingerprintTable;

/// Fingerprints per chunk record: 32,768 x 16 B = 512 KiB, below Kafka's default 1 MB.
pub const CHUNK_FINGERPRINTS: usize = 32 * 1024;

const MAGIC: &[u8; 4] = b"KDCL";
const VERSION: u8 = 1;

/// The values of the `reason` label of `kafka_dedup_changelog_fallbacks_total`: `missing` (no
/// reference in the commit, or its chunks are not in the topic: deleted, recreated, compacted
/// away), `unreadable` (reading it failed: no READ permission, a broker error, or slower than
/// [`LOAD_DEADLINE`]), `behind_or_ahead` (chunks of another checkpoint, or a reference outside the live
/// generations), `corrupt` (a chunk that does not decode or fails its checksum),
/// `other_deployment` (another group's or topics' chunks), `other_source` (written with another
/// fingerprint source).
pub const FALLBACK_REASONS: [&str; 6] = [
    "missing",
    "unreadable",
    "behind_or_ahead",
    "corrupt",
    "other_deployment",
    "other_source",
];

/// How long a load may take before the changelog counts as `unreadable` (10M fingerprints are
/// 160 MB of chunks: seconds on a healthy broker).
const LOAD_DEADLINE: Duration = Duration::from_secs(120);

/// What the offset metadata says the changelog holds for a partition (the `cl` field).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangelogRef {
    /// The checkpoint id the chunks were written for.
    pub ck: String,
    /// The epoch current at that checkpoint: every live generation before it is in the chunks.
    pub e: u64,
    /// Changelog partition.
    pub p: i32,
    /// Offset of the first chunk record.
    pub o: i64,
    /// Number of chunk records.
    pub n: u32,
}

/// Why a changelog was not used (a label of [`FALLBACK_REASONS`]) and the log's explanation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fallback {
    /// The metric label.
    pub reason: &'static str,
    /// What was wrong.
    pub detail: String,
}

impl Fallback {
    fn new(reason: &'static str, detail: impl Into<String>) -> Self {
        Fallback {
            reason,
            detail: detail.into(),
        }
    }
}

/// The deployment identity chunks carry: group, input and output topic.
pub fn identity(cfg: &Config) -> u128 {
    let s = format!("{}\0{}\0{}", cfg.input.group_id, cfg.input.topic, cfg.output.topic);
    xxh3_128(s.as_bytes())
}

/// The fingerprint identity chunks carry: `fingerprint.source` with `fingerprint.ignore` folded
/// in ([`crate::config::FingerprintConfig::identity`]), as the store's identity has it. Without
/// `ignore` the identity is the source itself, so the value is what it was before `ignore` was
/// part of it (existing changelogs stay loadable).
pub fn source_id(cfg: &Config) -> u128 {
    xxh3_128(format!("{:?}", cfg.fingerprint.identity()).as_bytes())
}

/// The record key of chunk `chunk` of generation `epoch` of partition `p`.
pub fn key(cfg: &Config, p: i32, epoch: u64, chunk: u32) -> String {
    format!("kd1/{}/{}/{p}/{epoch}/{chunk}", cfg.input.group_id, cfg.input.topic)
}

/// One decoded chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Deployment identity ([`identity`]).
    pub identity: u128,
    /// Fingerprint source ([`source_id`]).
    pub source: u128,
    /// Checkpoint id it was written for.
    pub ckpt: String,
    /// Input partition.
    pub partition: i32,
    /// Generation epoch.
    pub epoch: u64,
    /// Index of this chunk in its generation.
    pub chunk: u32,
    /// Chunks of its generation.
    pub chunks: u32,
    /// Fingerprints of its generation.
    pub count: u64,
    /// The generation's input start.
    pub in_start: i64,
    /// The generation's bucket.
    pub bucket: Option<i64>,
    /// The generation's creation time.
    pub created_at_ms: i64,
    /// The generation's output starts.
    pub out_start: Positions,
    /// The fingerprints.
    pub fingerprints: Vec<u128>,
}

/// Encodes a chunk.
pub fn encode(c: &Chunk) -> Vec<u8> {
    let mut v = Vec::with_capacity(128 + c.fingerprints.len() * 16);
    v.extend_from_slice(MAGIC);
    v.push(VERSION);
    v.extend_from_slice(&c.identity.to_le_bytes());
    v.extend_from_slice(&c.source.to_le_bytes());
    let mut ck = [b'0'; 16];
    for (d, s) in ck.iter_mut().zip(c.ckpt.bytes()) {
        *d = s;
    }
    v.extend_from_slice(&ck);
    v.extend_from_slice(&c.partition.to_le_bytes());
    v.extend_from_slice(&c.epoch.to_le_bytes());
    v.extend_from_slice(&c.chunk.to_le_bytes());
    v.extend_from_slice(&c.chunks.to_le_bytes());
    v.extend_from_slice(&c.count.to_le_bytes());
    v.extend_from_slice(&c.in_start.to_le_bytes());
    v.extend_from_slice(&c.bucket.unwrap_or(i64::MIN).to_le_bytes());
    v.extend_from_slice(&c.created_at_ms.to_le_bytes());
    v.extend_from_slice(&(c.out_start.len() as u32).to_le_bytes());
    for (q, o) in &c.out_start {
        v.extend_from_slice(&q.to_le_bytes());
        v.extend_from_slice(&o.to_le_bytes());
    }
    v.extend_from_slice(&(c.fingerprints.len() as u32).to_le_bytes());
    for fp in &c.fingerprints {
        v.extend_from_slice(&fp.to_le_bytes());
    }
    let sum = xxh3_64(&v);
    v.extend_from_slice(&sum.to_le_bytes());
    v
}

/// Reads fixed-size fields off a byte slice.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_at_checked(N)?;
        self.0 = rest;
        head.try_into().ok()
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn i32(&mut self) -> Option<i32> {
        self.take().map(i32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
    fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_le_bytes)
    }
    fn u128(&mut self) -> Option<u128> {
        self.take().map(u128::from_le_bytes)
    }
}

/// Decodes a chunk; `None` when it is not one (wrong magic or version, truncated, checksum).
pub fn decode(bytes: &[u8]) -> Option<Chunk> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(8)?)?;
    if xxh3_64(body) != u64::from_le_bytes(sum.try_into().ok()?) {
        return None;
    }
    let mut c = Cursor(body);
    if &c.take::<4>()? != MAGIC || c.take::<1>()?[0] != VERSION {
        return None;
    }
    let identity = c.u128()?;
    let source = c.u128()?;
    let ckpt = String::from_utf8(c.take::<16>()?.to_vec()).ok()?;
    let partition = c.i32()?;
    let epoch = c.u64()?;
    let chunk = c.u32()?;
    let chunks = c.u32()?;
    let count = c.u64()?;
    let in_start = c.i64()?;
    let bucket = Some(c.i64()?).filter(|b| *b != i64::MIN);
    let created_at_ms = c.i64()?;
    let n_out = c.u32()? as usize;
    let mut out_start = Positions::new();
    for _ in 0..n_out.min(body.len()) {
        let q = c.i32()?;
        out_start.insert(q, c.i64()?);
    }
    let n = c.u32()? as usize;
    if c.0.len() != n.checked_mul(16)? {
        return None;
    }
    let fingerprints = (0..n).map(|_| c.u128()).collect::<Option<Vec<_>>>()?;
    Some(Chunk {
        identity,
        source,
        ckpt,
        partition,
        epoch,
        chunk,
        chunks,
        count,
        in_start,
        bucket,
        created_at_ms,
        out_start,
        fingerprints,
    })
}

/// The chunks of `gens` (frozen generations of partition `p` at checkpoint `ckpt`), in order.
pub fn chunks_of<'a>(
    cfg: &'a Config,
    p: i32,
    ckpt: &'a str,
    gens: &'a [&'a Generation],
) -> impl Iterator<Item = (String, Chunk)> + 'a {
    let (identity, source) = (identity(cfg), source_id(cfg));
    gens.iter().flat_map(move |g| {
        let fps: Vec<u128> = g.table.iter().map(|(fp, _)| fp).collect();
        let chunks = fps.len().div_ceil(CHUNK_FINGERPRINTS).max(1) as u32;
        let count = fps.len() as u64;
        (0..chunks).map(move |i| {
            let lo = (i as usize * CHUNK_FINGERPRINTS).min(fps.len());
            let hi = (lo + CHUNK_FINGERPRINTS).min(fps.len());
            let chunk = Chunk {
                identity,
                source,
                ckpt: ckpt.to_string(),
                partition: p,
                epoch: g.epoch,
                chunk: i,
                chunks,
                count,
                in_start: g.in_start,
                bucket: g.bucket,
                created_at_ms: g.created_at_ms,
                out_start: g.out_start.clone(),
                fingerprints: fps[lo..hi].to_vec(),
            };
            (key(cfg, p, g.epoch, i), chunk)
        })
    })
}

/// The changelog's producer, made on first use (idempotent, `acks = all`).
fn producer(cfg: &Config) -> Result<&'static FutureProducer<kafka::Logged>, KafkaError> {
    static PRODUCER: OnceLock<FutureProducer<kafka::Logged>> = OnceLock::new();
    if let Some(p) = PRODUCER.get() {
        return Ok(p);
    }
    let mut c = kafka::side_producer_config(cfg);
    c.set("message.max.bytes", "2000000");
    let p: FutureProducer<kafka::Logged> = c.create_with_context(kafka::Logged::new("changelog producer"))?;
    Ok(PRODUCER.get_or_init(|| p))
}

/// Writes the frozen generations `gens` of partition `p` at checkpoint `ckpt` (current epoch
/// `epoch`) and waits for every chunk's acknowledgement. Returns the reference to commit and the
/// bytes written; `Ok(None)` when there is nothing frozen.
pub fn write(
    cfg: &Config,
    p: i32,
    ckpt: &str,
    epoch: u64,
    gens: &[&Generation],
) -> Result<Option<(ChangelogRef, u64)>, KafkaError> {
    if gens.is_empty() {
        return Ok(None);
    }
    let topic = &cfg.store.changelog_topic;
    let producer = producer(cfg)?;
    let parts = kafka::partition_count(producer.client(), topic, Duration::from_secs(10))?.ok_or(
        KafkaError::MetadataFetch(rdkafka::types::RDKafkaErrorCode::UnknownTopic),
    )?;
    let cp = p.rem_euclid(parts as i32);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|_| KafkaError::Canceled)?;
    let mut pending = Vec::new();
    let mut bytes = 0u64;
    for (k, chunk) in chunks_of(cfg, p, ckpt, gens) {
        let value = encode(&chunk);
        bytes += value.len() as u64;
        let mut record = FutureRecord::to(topic).partition(cp).key(&k).payload(&value);
        loop {
            match producer.send_result(record) {
                Ok(d) => {
                    pending.push(d);
                    break;
                }
                Err((KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(50));
                }
                Err((e, _)) => return Err(e),
            }
        }
    }
    let mut futures = Vec::with_capacity(pending.len());
    for d in pending {
        match rt.block_on(d) {
            Ok(Ok(delivery)) => futures.push(delivery),
            Ok(Err((e, _))) => return Err(e),
            Err(_) => return Err(KafkaError::Canceled),
        }
    }
    let first = futures.iter().map(|d| d.offset).min().unwrap_or(0);
    let last = futures.iter().map(|d| d.offset).max().unwrap_or(0);
    if last - first + 1 != futures.len() as i64 {
        // Another writer interleaved (two owners for a moment): not one contiguous range.
        return Err(KafkaError::Canceled);
    }
    Ok(Some((
        ChangelogRef {
            ck: ckpt.to_string(),
            e: epoch,
            p: cp,
            o: first,
            n: futures.len() as u32,
        },
        bytes,
    )))
}

/// What a load found: the generations (by epoch) and the bytes read.
pub struct LoadedChangelog {
    /// The generations, oldest first.
    pub gens: Vec<Generation>,
    /// Bytes of chunk records read.
    pub bytes: u64,
}

/// Loads the chunks `r` names for partition `p`, checking each against this deployment
/// (identity, source, checkpoint id, partition) and against `want` (the epochs to load, oldest
/// first). Chunks of other epochs in the range (generations rotated away since) are skipped.
pub fn load(
    cfg: &Config,
    reader: &kafka::Reader,
    p: i32,
    r: &ChangelogRef,
    want: &[u64],
) -> Result<Result<LoadedChangelog, Fallback>, KafkaError> {
    let topic = &cfg.store.changelog_topic;
    let (low, high) = match reader.fetch_watermarks(topic, r.p, Duration::from_secs(10)) {
        Ok(w) => w,
        Err(e) => {
            return Ok(Err(Fallback::new(
                "missing",
                format!("the changelog topic {topic} cannot be read: {e}"),
            )))
        }
    };
    let end = r.o + i64::from(r.n);
    if r.o < low || end > high {
        return Ok(Err(Fallback::new(
            "missing",
            format!(
                "the changelog partition {} holds {low}..{high}, not the chunks at {}..{end}",
                r.p, r.o
            ),
        )));
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, r.p, Offset::Offset(r.o))?;
    reader.assign(&tpl)?;
    let (identity, source) = (identity(cfg), source_id(cfg));
    let mut tables: Vec<Option<(Chunk, FingerprintTable, u32)>> = want.iter().map(|_| None).collect();
    let mut bytes = 0u64;
    let deadline = std::time::Instant::now() + LOAD_DEADLINE;
    let mut next = r.o;
    while next < end {
        // A changelog that cannot be read to the end (no READ permission on it, a broker error,
        // a load slower than the deadline) is unusable like a missing one: the output is re-read
        // instead, not the changelog tried again for ever.
        if std::time::Instant::now() > deadline {
            return Ok(Err(Fallback::new(
                "unreadable",
                format!("the changelog's chunks {next}..{end} were not read within {LOAD_DEADLINE:?}"),
            )));
        }
        let m = match reader.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => m,
            Some(Err(KafkaError::PartitionEOF(_))) | None => continue,
            Some(Err(e)) => {
                return Ok(Err(Fallback::new(
                    "unreadable",
                    format!("reading the changelog topic {topic} at {next}: {e}"),
                )))
            }
        };
        if m.topic() != topic || m.partition() != r.p {
            continue;
        }
        if m.offset() != next {
            return Ok(Err(Fallback::new(
                "missing",
                format!(
                    "chunk record {next} is gone (compacted away?): the next is {}",
                    m.offset()
                ),
            )));
        }
        next += 1;
        let payload = m.payload().unwrap_or_default();
        bytes += payload.len() as u64;
        let Some(c) = decode(payload) else {
            return Ok(Err(Fallback::new(
                "corrupt",
                format!("changelog record {} does not decode", m.offset()),
            )));
        };
        if c.identity != identity || c.partition != p {
            return Ok(Err(Fallback::new(
                "other_deployment",
                format!(
                    "changelog record {} was written by another deployment (group, topics) or partition",
                    m.offset()
                ),
            )));
        }
        if c.source != source {
            return Ok(Err(Fallback::new(
                "other_source",
                "the changelog was written with another fingerprint.source",
            )));
        }
        if c.ckpt != r.ck {
            return Ok(Err(Fallback::new(
                "behind_or_ahead",
                format!(
                    "changelog record {} is of checkpoint {}, not {}",
                    m.offset(),
                    c.ckpt,
                    r.ck
                ),
            )));
        }
        let Some(i) = want.iter().position(|e| *e == c.epoch) else {
            continue;
        };
        let slot = &mut tables[i];
        if slot.is_none() {
            if c.chunk != 0 || c.count > u64::from(c.chunks) * CHUNK_FINGERPRINTS as u64 {
                return Ok(Err(Fallback::new(
                    "corrupt",
                    format!("generation {} does not begin with its first chunk", c.epoch),
                )));
            }
            let table = FingerprintTable::with_capacity(c.count as usize);
            *slot = Some((c.clone(), table, 0));
        }
        let (head, table, seen) = slot.as_mut().expect("set above");
        if c.chunk != *seen || c.chunks != head.chunks {
            return Ok(Err(Fallback::new(
                "corrupt",
                format!("generation {}: chunk {} out of order", c.epoch, c.chunk),
            )));
        }
        *seen += 1;
        for fp in &c.fingerprints {
            table.insert(*fp, crate::table::UNKNOWN_OFFSET);
        }
    }
    let mut gens = Vec::new();
    for (epoch, slot) in want.iter().zip(tables) {
        let Some((head, table, seen)) = slot else {
            return Ok(Err(Fallback::new(
                "behind_or_ahead",
                format!("generation {epoch} is not in the changelog checkpoint {}", r.ck),
            )));
        };
        if seen != head.chunks || table.len() as u64 != head.count {
            return Ok(Err(Fallback::new(
                "corrupt",
                format!("generation {epoch}: {seen} of {} chunks", head.chunks),
            )));
        }
        let g = Generation {
            epoch: *epoch,
            bucket: head.bucket,
            created_at_ms: head.created_at_ms,
            in_start: head.in_start,
            out_start: head.out_start,
            table,
            stored_len: Default::default(),
        };
        gens.push(g);
    }
    Ok(Ok(LoadedChangelog { gens, bytes }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_round_trips_and_damage_is_found() {
        let c = Chunk {
            identity: 7,
            source: 9,
            ckpt: "0123456789abcdef".into(),
            partition: 3,
            epoch: 12,
            chunk: 1,
            chunks: 2,
            count: 40_000,
            in_start: 100,
            bucket: None,
            created_at_ms: 5,
            out_start: [(3, 1000)].into_iter().collect(),
            fingerprints: (0..10u128).collect(),
        };
        let bytes = encode(&c);
        assert_eq!(
            bytes.len(),
            4 + 1 + 16 + 16 + 16 + 4 + 8 + 4 + 4 + 8 + 24 + 4 + 12 + 4 + 160 + 8
        );
        assert_eq!(decode(&bytes), Some(c));
        for i in [0, 10, 60, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[i] ^= 1;
            assert_eq!(decode(&bad), None, "byte {i}");
        }
        assert_eq!(decode(&bytes[..bytes.len() - 3]), None);
        assert_eq!(decode(b"garbage"), None);
        assert_eq!(decode(b""), None);
    }

    /// A changed `fingerprint.ignore` changes the fingerprints as a changed source does: chunks
    /// of the other identity must fall back as `other_source` (they were accepted before, and
    /// adding an ignored field let a replay pass, removing one dropped new records); a plain
    /// source keeps the value chunks were written with before `ignore` existed.
    #[test]
    fn the_source_id_is_the_fingerprint_identity() {
        let cfg = |fingerprint: &str| {
            Config::from_toml_str(
                &format!("[input]\ntopic = \"i\"\n[output]\ntopic = \"o\"\n[fingerprint]\n{fingerprint}\n"),
                Some(Default::default()),
            )
            .unwrap()
        };
        let plain = cfg("source = \"json:/id\"");
        let ignoring = cfg("source = \"json:\"\nignore = [\"/seen_at\"]");
        let ignoring_more = cfg("source = \"json:\"\nignore = [\"/seen_at\", \"/trace\"]");
        let whole = cfg("source = \"json:\"");
        assert_eq!(
            source_id(&plain),
            xxh3_128(format!("{:?}", plain.fingerprint.source).as_bytes())
        );
        assert_ne!(source_id(&ignoring), source_id(&whole));
        assert_ne!(source_id(&ignoring), source_id(&ignoring_more));
        assert_eq!(
            source_id(&ignoring),
            source_id(&cfg("source = \"json:\"\nignore = [\"/seen_at\"]"))
        );
    }
}

#[cfg(test)]
mod load_cost {
    use super::*;

    /// Profiling aid (issue 26; BENCHMARKS.md, "Hand-over time by source"): where `load`'s CPU
    /// time goes for 10M fingerprints (306 chunks): the checksums, the decode, the inserts.
    /// `cargo test --lib load_cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "measurement"]
    fn decode_and_insert_ten_million() {
        let n = 10_000_000usize;
        let fps: Vec<u128> = (0..n as u128).map(|i| xxh3_128(&i.to_le_bytes())).collect();
        let chunk = |f: &[u128]| Chunk {
            identity: 1,
            source: 2,
            ckpt: "0123456789abcdef".into(),
            partition: 0,
            epoch: 1,
            chunk: 0,
            chunks: 1,
            count: 1,
            in_start: 0,
            bucket: None,
            created_at_ms: 0,
            out_start: Default::default(),
            fingerprints: f.to_vec(),
        };
        let mut table = FingerprintTable::with_capacity(n);
        for fp in &fps {
            table.insert(*fp, crate::table::UNKNOWN_OFFSET);
        }
        // As written: in the table's order.
        let ordered: Vec<u128> = table.iter().map(|(fp, _)| fp).collect();
        let bytes: Vec<Vec<u8>> = ordered.chunks(CHUNK_FINGERPRINTS).map(|f| encode(&chunk(f))).collect();
        let t = std::time::Instant::now();
        let sums: u64 = bytes.iter().map(|b| xxh3_64(b)).fold(0, u64::wrapping_add);
        let checksum_s = t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        let chunks: Vec<Chunk> = bytes.iter().map(|b| decode(b).unwrap()).collect();
        let decode_s = t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        let mut table = FingerprintTable::with_capacity(n);
        for c in &chunks {
            for fp in &c.fingerprints {
                table.insert(*fp, crate::table::UNKNOWN_OFFSET);
            }
        }
        eprintln!(
            "checksums {checksum_s:.2} s ({sums:x}), decode with checksums {decode_s:.2} s, inserts {:.2} s",
            t.elapsed().as_secs_f64()
        );
    }
}
