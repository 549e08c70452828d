//! `inspect verify`: the store's internal consistency.

use std::collections::BTreeMap;

use super::offline::Scan;
use super::report::partition_stats;
use crate::fingerprint::Source;
use crate::store::{format_file_version, GenerationMeta, StoreError, StoreKey, CHUNK_ENTRIES, FORMAT_FILE};
use crate::table::UNKNOWN_OFFSET;

/// Expected chunks of one stored generation, and what `verify` found of them.
struct Expected {
    meta: GenerationMeta,
    /// End of the generation's input range (exclusive).
    in_end: i64,
    /// Chunk index -> seen.
    seen: Vec<bool>,
    /// Entries in chunks that decoded.
    stored: u64,
    /// A chunk failed to decode (its entries are not counted).
    damaged: bool,
    /// Entries whose first-seen offset lies outside the input range, and the first of them.
    out_of_range: u64,
    first_out_of_range: Option<(u128, i64)>,
    /// Entries with fingerprint 0 (never stored: the table keeps 0 as 1).
    zero: u64,
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
    let store = scan.store();

    // Stamps.
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
        Err(e) => problems.push(e),
    }
    let partitions = store.partitions()?;
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

    // Snapshots.
    let mut expected: BTreeMap<(i32, u64), Expected> = BTreeMap::new();
    let mut live_epochs: BTreeMap<i32, Vec<u64>> = BTreeMap::new();
    for &p in &partitions {
        let s = match store.snapshot(p) {
            Ok(Some(s)) => s,
            Ok(None) => continue,
            Err(e) => {
                problems.push(e.to_string());
                live_epochs.insert(p, Vec::new());
                continue;
            }
        };
        let mut problem = |m: String| problems.push(format!("partition {p}: {m}"));
        if s.generations.is_empty() {
            problem("snapshot without generations".into());
        }
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
        if let Some(last) = s.generations.last() {
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
        let stats = partition_stats(p, &s);
        for (meta, g) in s.generations.iter().zip(&stats.generations) {
            let want = meta.count.div_ceil(CHUNK_ENTRIES as u64);
            if meta.chunks as u64 != want {
                problem(format!(
                    "generation {}: {} chunks recorded for {} fingerprints (expected {want})",
                    meta.epoch, meta.chunks, meta.count
                ));
            }
            expected.insert(
                (p, meta.epoch),
                Expected {
                    meta: meta.clone(),
                    in_end: g.input_end,
                    seen: vec![false; meta.chunks as usize],
                    stored: 0,
                    damaged: false,
                    out_of_range: 0,
                    first_out_of_range: None,
                    zero: 0,
                },
            );
        }
        live_epochs.insert(p, s.generations.iter().map(|g| g.epoch).collect());
    }

    // Every entry once.
    let mut orphans: BTreeMap<(i32, u64), u32> = BTreeMap::new();
    let mut unknown: Vec<Vec<u8>> = Vec::new();
    let mut unknown_count = 0u64;
    // The walk resumes from the key after the last one read when the scan reopens the store.
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
            let (p, epoch, c) = match key {
                StoreKey::Chunk {
                    partition,
                    epoch,
                    chunk,
                } => (partition, epoch, chunk),
                StoreKey::Unknown(k) => {
                    unknown_count += 1;
                    if unknown.len() < 3 {
                        unknown.push(k);
                    }
                    continue;
                }
                _ => continue,
            };
            let Some(x) = expected.get_mut(&(p, epoch)) else {
                *orphans.entry((p, epoch)).or_default() += 1;
                continue;
            };
            if c >= x.meta.chunks {
                problems.push(format!(
                    "partition {p} generation {epoch}: chunk {c} beyond its {} chunks",
                    x.meta.chunks
                ));
                continue;
            }
            x.seen[c as usize] = true;
            match crate::store::decode_chunk(&value) {
                Err(e) => {
                    x.damaged = true;
                    problems.push(format!("partition {p} generation {epoch} chunk {c}: {e}"));
                }
                Ok(entries) => {
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
            }
        }
        scan.read += read;
        match resume {
            // Unread: the entry at `k` is read again after the reopen.
            Some(k) => {
                scan.read = scan.read.max(scan.budget);
                from = k;
            }
            None => break,
        }
    }
    for ((p, epoch), x) in &expected {
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
    for ((p, epoch), chunks) in orphans {
        let why = match live_epochs.get(&p) {
            Some(live) => format!("no live generation (live: {live:?}): left over from a dropped generation"),
            None => "no snapshot of that partition".to_string(),
        };
        problems.push(format!(
            "partition {p} generation {epoch}: {chunks} orphan chunk(s), {why}"
        ));
    }
    if unknown_count > 0 {
        let shown: Vec<String> = unknown
            .iter()
            .map(|k| format!("{:?}", String::from_utf8_lossy(k)))
            .collect();
        problems.push(format!(
            "{unknown_count} key(s) outside the store layout (first: {})",
            shown.join(", ")
        ));
    }
    Ok(problems)
}
