//! `inspect verify`: the store's internal consistency. [`verify`] reads the stamps, then every
//! snapshot (what chunks to expect), then every entry once, then reports what did not add up.

use std::collections::BTreeMap;

use super::offline::Scan;
use super::report::partition_stats;
use crate::fingerprint::Source;
use crate::store::{
    decode_chunk, format_file_version, GenerationMeta, PartitionSnapshot, Store, StoreError, StoreKey, CHUNK_ENTRIES,
    FORMAT_FILE,
};
use crate::table::UNKNOWN_OFFSET;

/// Expected chunks of one stored generation, and what `verify` found of them.
struct Expected {
    /// The generation as its snapshot describes it.
    meta: GenerationMeta,
    /// End of the generation's input range (exclusive).
    in_end: i64,
    /// Chunk index -> seen.
    seen: Vec<bool>,
    /// Entries in chunks that decoded.
    stored: u64,
    /// A chunk failed to decode (its entries are not counted).
    damaged: bool,
    /// Entries whose first-seen offset lies outside the input range.
    out_of_range: u64,
    /// The first of them: fingerprint and first-seen offset.
    first_out_of_range: Option<(u128, i64)>,
    /// Entries with fingerprint 0 (never stored: the table keeps 0 as 1).
    zero: u64,
}

impl Expected {
    /// Nothing found yet of generation `meta`, whose input range ends at `in_end`.
    fn new(meta: &GenerationMeta, in_end: i64) -> Self {
        Expected {
            meta: meta.clone(),
            in_end,
            seen: vec![false; meta.chunks as usize],
            stored: 0,
            damaged: false,
            out_of_range: 0,
            first_out_of_range: None,
            zero: 0,
        }
    }
}

/// What the snapshots say should be in the store.
#[derive(Default)]
struct Layout {
    /// (partition, epoch) -> the generation's chunks.
    expected: BTreeMap<(i32, u64), Expected>,
    /// Partition -> epochs of its live generations (none when its snapshot is unreadable).
    live_epochs: BTreeMap<i32, Vec<u64>>,
}

/// Entries that belong to no live generation, or to no layout at all.
#[derive(Default)]
struct Strays {
    /// (partition, epoch) -> chunks of a generation no snapshot lists.
    orphans: BTreeMap<(i32, u64), u32>,
    /// The first few keys outside the layout.
    unknown: Vec<Vec<u8>>,
    /// How many keys lie outside the layout.
    unknown_count: u64,
}

/// Checks the store's internal consistency; returns the problems found, empty when consistent.
/// Reads every entry once, one at a time, in bounded memory ([`Scan`]). Checks:
/// - the format file and the database's `m:format` agree; the identity parses and names a valid
///   fingerprint source; no key outside the layout;
/// - per snapshot: it parses; at least one generation; epochs consecutive, the last equal to the
///   snapshot's epoch; input starts non-decreasing and at most the committed offset; output
///   starts non-decreasing and at most `out_covered`; `chunks = ceil(count / CHUNK_ENTRIES)`;
/// - per chunk: it belongs to a live generation of a stored partition (not an orphan of a dropped
///   generation or partition), its index is below the generation's chunk count, it decodes
///   (magic, length, xxh3 checksum), holds no fingerprint 0, and every known first-seen offset
///   lies in the generation's input range;
/// - per generation: no chunk is missing and the entries add up to its count.
///
/// Errors: sled I/O only; everything else is a problem in the list.
pub fn verify(scan: &mut Scan) -> Result<Vec<String>, StoreError> {
    let mut problems = Vec::new();
    let partitions = scan.store().partitions()?;
    check_stamps(scan.store(), &partitions, &mut problems);
    let mut layout = Layout::default();
    for &p in &partitions {
        check_snapshot(scan.store(), p, &mut layout, &mut problems);
    }
    let strays = walk_entries(scan, &mut layout, &mut problems)?;
    report_generations(&layout, &mut problems);
    report_strays(strays, &layout, &mut problems);
    Ok(problems)
}

/// The format file and `m:format` agree; the identity parses and names a valid source.
fn check_stamps(store: &Store, partitions: &[i32], problems: &mut Vec<String>) {
    let inside = match store.format_version() {
        Ok(v) => v,
        Err(e) => {
            problems.push(e.to_string());
            None
        }
    };
    match format_file_version(store.path()) {
        Ok(Some(f)) => {
            if let Some(i) = inside.filter(|i| *i != f) {
                problems.push(format!(
                    "`{FORMAT_FILE}` says format version {f}, the database (m:format) {i}"
                ));
            }
        }
        Ok(None) => problems.push(format!("`{FORMAT_FILE}` is missing")),
        Err(e) => problems.push(e.to_string()),
    }
    if inside.is_none() && !partitions.is_empty() {
        problems.push("the database holds no format version (m:format)".into());
    }
    match store.identity() {
        Ok(Some(id)) => {
            if let Err(e) = Source::try_from(id.source.clone()) {
                problems.push(format!("identity: fingerprint source: {e}"));
            }
        }
        Ok(None) if !partitions.is_empty() => {
            problems.push("the database holds no identity (m:identity) although partitions are stored".into())
        }
        Ok(None) => {}
        Err(e) => problems.push(e.to_string()),
    }
}

/// Checks partition `p`'s snapshot and adds the chunks it expects to `layout`.
fn check_snapshot(store: &Store, p: i32, layout: &mut Layout, problems: &mut Vec<String>) {
    let s = match store.snapshot(p) {
        Ok(Some(s)) => s,
        Ok(None) => return,
        Err(e) => {
            problems.push(e.to_string());
            layout.live_epochs.insert(p, Vec::new());
            return;
        }
    };
    let mut problem = |m: String| problems.push(format!("partition {p}: {m}"));
    if s.generations.is_empty() {
        problem("snapshot without generations".into());
    }
    check_generation_order(&s, &mut problem);
    check_current(&s, &mut problem);
    let stats = partition_stats(p, &s);
    for (meta, g) in s.generations.iter().zip(&stats.generations) {
        let want = meta.count.div_ceil(CHUNK_ENTRIES as u64);
        if meta.chunks as u64 != want {
            problem(format!(
                "generation {}: {} chunks recorded for {} fingerprints (expected {want})",
                meta.epoch, meta.chunks, meta.count
            ));
        }
        layout
            .expected
            .insert((p, meta.epoch), Expected::new(meta, g.input_end));
    }
    layout
        .live_epochs
        .insert(p, s.generations.iter().map(|g| g.epoch).collect());
}

/// Epochs consecutive; input and output starts non-decreasing.
fn check_generation_order(s: &PartitionSnapshot, problem: &mut impl FnMut(String)) {
    for w in s.generations.windows(2) {
        if w[1].epoch != w[0].epoch + 1 {
            problem(format!(
                "generation epochs are not consecutive ({} then {})",
                w[0].epoch, w[1].epoch
            ));
        }
        if w[1].in_start < w[0].in_start {
            problem(format!(
                "generation {} starts at input offset {}, before generation {} ({})",
                w[1].epoch, w[1].in_start, w[0].epoch, w[0].in_start
            ));
        }
        for (q, start) in &w[1].out_start {
            if w[0].out_start.get(q).is_some_and(|prev| start < prev) {
                problem(format!(
                    "generation {} starts at output {q}:{start}, before generation {}",
                    w[1].epoch, w[0].epoch
                ));
            }
        }
    }
}

/// The current generation is the snapshot's epoch, starts at most at the committed offset, and
/// `out_covered` is not before its output start.
fn check_current(s: &PartitionSnapshot, problem: &mut impl FnMut(String)) {
    let Some(last) = s.generations.last() else { return };
    if last.epoch != s.epoch {
        problem(format!(
            "snapshot epoch {} is not the current generation's ({})",
            s.epoch, last.epoch
        ));
    }
    if last.in_start > s.committed_offset {
        problem(format!(
            "the current generation starts at input offset {}, after the committed offset {}",
            last.in_start, s.committed_offset
        ));
    }
    for (q, start) in &last.out_start {
        if s.out_covered.get(q).is_some_and(|covered| covered < start) {
            problem(format!(
                "output covered up to {q}:{}, before the current generation's start {start}",
                s.out_covered[q]
            ));
        }
    }
}

/// Reads every entry once, checking each chunk against `layout`. The walk resumes from the key
/// after the last one read when the scan reopens the store.
fn walk_entries(scan: &mut Scan, layout: &mut Layout, problems: &mut Vec<String>) -> Result<Strays, StoreError> {
    let mut strays = Strays::default();
    let mut from: Vec<u8> = Vec::new();
    loop {
        scan.relieve()?;
        let store = scan.store();
        let mut read = 0u64;
        let mut resume = None;
        for entry in store.entries_from(&from) {
            let (raw, key, value) = entry?;
            // At least one entry per open, so any budget makes progress.
            if read > 0 && scan.read + read >= scan.budget {
                resume = Some(raw.to_vec());
                break;
            }
            read += value.len() as u64;
            match key {
                StoreKey::Chunk {
                    partition,
                    epoch,
                    chunk,
                } => check_chunk(layout, &mut strays, (partition, epoch, chunk), &value, problems),
                StoreKey::Unknown(k) => {
                    strays.unknown_count += 1;
                    if strays.unknown.len() < 3 {
                        strays.unknown.push(k);
                    }
                }
                _ => {}
            }
        }
        scan.read += read;
        match resume {
            // Unread: the entry at `k` is read again after the reopen.
            Some(k) => {
                scan.read = scan.read.max(scan.budget);
                from = k;
            }
            None => return Ok(strays),
        }
    }
}

/// Checks chunk `c` of generation `epoch` of partition `p` (its value `value`).
fn check_chunk(
    layout: &mut Layout,
    strays: &mut Strays,
    (p, epoch, c): (i32, u64, u32),
    value: &[u8],
    problems: &mut Vec<String>,
) {
    let Some(x) = layout.expected.get_mut(&(p, epoch)) else {
        *strays.orphans.entry((p, epoch)).or_default() += 1;
        return;
    };
    if c >= x.meta.chunks {
        problems.push(format!(
            "partition {p} generation {epoch}: chunk {c} beyond its {} chunks",
            x.meta.chunks
        ));
        return;
    }
    x.seen[c as usize] = true;
    let entries = match decode_chunk(value) {
        Ok(entries) => entries,
        Err(e) => {
            x.damaged = true;
            problems.push(format!("partition {p} generation {epoch} chunk {c}: {e}"));
            return;
        }
    };
    x.stored += entries.len() as u64;
    for (fp, rel) in entries {
        if fp == 0 {
            x.zero += 1;
        }
        if rel != UNKNOWN_OFFSET {
            let offset = x.meta.in_start + rel as i64;
            if offset >= x.in_end {
                x.out_of_range += 1;
                x.first_out_of_range.get_or_insert((fp, offset));
            }
        }
    }
}

/// Per generation: missing chunks, counts that do not add up, offsets out of range, zeros.
fn report_generations(layout: &Layout, problems: &mut Vec<String>) {
    for ((p, epoch), x) in &layout.expected {
        let missing: Vec<String> = x
            .seen
            .iter()
            .enumerate()
            .filter(|(_, s)| !**s)
            .map(|(c, _)| c.to_string())
            .collect();
        if !missing.is_empty() {
            problems.push(format!(
                "partition {p} generation {epoch}: chunk(s) {} of {} missing",
                missing.join(", "),
                x.meta.chunks
            ));
        } else if !x.damaged && x.stored != x.meta.count {
            problems.push(format!(
                "partition {p} generation {epoch}: {} fingerprints stored, the snapshot counts {}",
                x.stored, x.meta.count
            ));
        }
        if let Some((fp, offset)) = x.first_out_of_range {
            problems.push(format!(
                "partition {p} generation {epoch}: {} first-seen offset(s) outside its input range [{}, {}) \
                 (first: fingerprint {fp:032x} at {offset})",
                x.out_of_range, x.meta.in_start, x.in_end
            ));
        }
        if x.zero > 0 {
            problems.push(format!(
                "partition {p} generation {epoch}: {} entries with fingerprint 0 (never stored)",
                x.zero
            ));
        }
    }
}

/// Orphan chunks and keys outside the layout.
fn report_strays(strays: Strays, layout: &Layout, problems: &mut Vec<String>) {
    for ((p, epoch), chunks) in strays.orphans {
        let why = match layout.live_epochs.get(&p) {
            Some(live) => format!("no live generation (live: {live:?}): left over from a dropped generation"),
            None => "no snapshot of that partition".to_string(),
        };
        problems.push(format!(
            "partition {p} generation {epoch}: {chunks} orphan chunk(s), {why}"
        ));
    }
    if strays.unknown_count > 0 {
        let shown: Vec<String> = strays
            .unknown
            .iter()
            .map(|k| format!("{:?}", String::from_utf8_lossy(k)))
            .collect();
        problems.push(format!(
            "{} key(s) outside the store layout (first: {})",
            strays.unknown_count,
            shown.join(", ")
        ));
    }
}
