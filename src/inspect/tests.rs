//! Offline and live answers checked against each other, `dump`, `verify` on damaged stores, lookup inputs.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use super::*;
use crate::fingerprint::{Fingerprint, Fingerprinter, Source};
use crate::generations::{Generation, Generations, Positions};
use crate::store::{PartitionSnapshot, Store, CHUNK_ENTRIES, FORMAT_FILE};
use crate::store::{PartitionWrite, FORMAT_VERSION};
use xxhash_rust::xxh3::xxh3_128;

use crate::generations::pos;
use crate::store::test_identity as identity;

fn fp(i: u64) -> u128 {
    xxh3_128(&i.to_le_bytes())
}

/// Partition 2 with generations 4 (input 100.., CHUNK_ENTRIES + 5 fingerprints, so two
/// chunks) and 5 (input 200.., 3 fingerprints), written by a clean hand-over.
fn generations() -> Generations {
    let mut g4 = Generation::new(4, 100, pos(2, 50), 0);
    for i in 0..(CHUNK_ENTRIES as u64 + 5) {
        g4.table.insert(fp(i), (i % 100) as u32);
    }
    let mut gens = Generations::from_parts(vec![g4], 2);
    gens.rotate(200, pos(2, 150));
    for i in 0..3u64 {
        gens.insert(fp(1_000_000 + i), Some(200 + i as i64));
    }
    gens.insert(fp(2_000_000), None);
    gens
}

fn save(store: &Store, gens: &Generations, clean: bool) {
    store
        .save(&[PartitionWrite {
            partition: 2,
            epoch: 5,
            ckpt: "c".into(),
            committed_offset: 210,
            out_covered: pos(2, 160),
            generations: gens.iter().collect(),
            clean,
            clock: None,
        }])
        .unwrap();
}

fn store_with(dir: &Path) -> (Store, Generations) {
    let (store, _) = Store::open_for_run(dir, &identity()).unwrap();
    let gens = generations();
    save(&store, &gens, true);
    (store, gens)
}

fn view(gens: &Generations) -> BTreeMap<i32, PartitionView<'_>> {
    static OUT: std::sync::OnceLock<Positions> = std::sync::OnceLock::new();
    [(
        2,
        PartitionView::Running {
            gens,
            next_offset: 210,
            output_position: OUT.get_or_init(|| pos(2, 160)),
        },
    )]
    .into_iter()
    .collect()
}

#[test]
fn offline_and_live_answers_agree_after_a_clean_hand_over() {
    let dir = tempfile::tempdir().unwrap();
    let (store, gens) = store_with(dir.path());
    let v = view(&gens);
    // A budget of one byte reopens the store before every chunk: same answers.
    let mut tiny = Scan::with_budget(store, 1);
    for probe in [fp(7), fp(1_000_001), fp(2_000_000), fp(99_999_999), 0] {
        let offline = lookup(&mut tiny, Fingerprint(probe)).unwrap();
        let live = live_lookup(&v, Fingerprint(probe));
        assert_eq!(offline, live, "fingerprint {probe:032x}");
    }
    assert!(
        tiny.reopens() >= 5,
        "one per chunk read after the first: {}",
        tiny.reopens()
    );
    let mut scan = Scan::new(tiny.into_store());
    let l = lookup(&mut scan, Fingerprint(fp(7))).unwrap();
    assert_eq!(
        l.holdings,
        vec![Holding {
            partition: 2,
            generation: 4,
            age: 1,
            first_seen_offset: Some(107)
        }]
    );
    let l = lookup(&mut scan, Fingerprint(fp(1_000_001))).unwrap();
    assert_eq!((l.holdings[0].generation, l.holdings[0].age), (5, 0));
    assert_eq!(l.holdings[0].first_seen_offset, Some(201));
    assert_eq!(
        lookup(&mut scan, Fingerprint(fp(2_000_000))).unwrap().holdings[0].first_seen_offset,
        None,
        "an unknown first-seen offset stays unknown"
    );
    assert!(!lookup(&mut scan, Fingerprint(fp(99_999_999))).unwrap().held);

    let s = stats(scan.store()).unwrap();
    let live = live_partitions(&v);
    assert_eq!(s.partitions[0].generations, live[0].generations);
    assert_eq!(s.partitions[0].fingerprints, CHUNK_ENTRIES as u64 + 5 + 4);
    assert_eq!(
        (
            s.partitions[0].generations[0].input_start,
            s.partitions[0].generations[0].input_end
        ),
        (100, 200)
    );
    assert_eq!(s.partitions[0].generations[1].input_end, 210);
    assert_eq!(s.format_version, FORMAT_VERSION);
}

/// Issue 23, item 5: a clean hand-over's snapshot is complete only if the store was closed
/// cleanly afterwards; the live-marker file a killed run left behind says it was not.
#[test]
fn a_store_not_closed_cleanly_makes_a_clean_snapshot_incomplete() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _gens) = store_with(dir.path());
    let mut scan = Scan::new(store);
    assert!(lookup(&mut scan, Fingerprint(fp(7))).unwrap().incomplete.is_empty());
    scan.store().write_live_file("");
    let l = lookup(&mut scan, Fingerprint(fp(7))).unwrap();
    assert!(l.held);
    assert_eq!(l.incomplete.len(), 1, "{l:?}");
    assert_eq!(l.incomplete[0].partition, 2);
    assert!(l.incomplete[0].reason.contains("not closed cleanly"), "{l:?}");
}

#[test]
fn a_periodic_snapshot_makes_the_offline_answer_incomplete() {
    let dir = tempfile::tempdir().unwrap();
    let (store, gens) = store_with(dir.path());
    save(&store, &gens, false);
    let l = lookup(&mut Scan::new(store), Fingerprint(fp(7))).unwrap();
    assert!(l.held);
    assert_eq!(l.incomplete.len(), 1);
    assert!(l.incomplete[0].reason.contains("not in the store"), "{l:?}");
    let mut v = view(&gens);
    v.insert(3, PartitionView::Recovering);
    let live = live_lookup(&v, Fingerprint(fp(7)));
    assert_eq!(live.incomplete[0].partition, 3);
    assert!(live.incomplete[0].reason.starts_with("recovering"));
}

#[test]
fn dump_streams_every_entry_and_stops_quietly_on_a_closed_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let (store, gens) = store_with(dir.path());
    let mut scan = Scan::new(store);
    let mut out = Vec::new();
    dump(&mut scan, 2, None, &mut out).unwrap();
    let lines: Vec<serde_json::Value> = out
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(lines.len(), gens.total_len());
    for l in &lines {
        let f = u128::from_str_radix(l["fingerprint"].as_str().unwrap(), 16).unwrap();
        let hit = gens.lookup(f).expect("dumped fingerprints are held");
        assert_eq!(l["generation"].as_u64(), Some(hit.epoch));
        assert_eq!(l["first_seen_offset"].as_i64(), hit.first_offset);
    }
    let mut only5 = Vec::new();
    dump(&mut scan, 2, Some(5), &mut only5).unwrap();
    assert_eq!(only5.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count(), 4);
    assert!(matches!(
        dump(&mut scan, 2, Some(9), &mut Vec::new()),
        Err(InspectError::Usage(_))
    ));
    assert!(matches!(
        dump(&mut scan, 0, None, &mut Vec::new()),
        Err(InspectError::Usage(_))
    ));
    let mut tiny = Scan::with_budget(scan.into_store(), 1);
    let mut again = Vec::new();
    dump(&mut tiny, 2, None, &mut again).unwrap();
    assert_eq!(again, out, "reopening between chunks changes nothing");
    assert_eq!(tiny.reopens(), 2, "3 chunks");
    let mut scan = Scan::new(tiny.into_store());

    struct Closed(usize);
    impl Write for Closed {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.0 == 0 {
                return Err(std::io::ErrorKind::BrokenPipe.into());
            }
            self.0 -= 1;
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    dump(&mut scan, 2, None, &mut Closed(10)).unwrap();
}

/// Damages a clean store with `damage` and expects `verify` to report `expect`, the same
/// with a scan that reopens the store before every entry.
fn damaged(damage: impl FnOnce(&Store), expect: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = store_with(dir.path());
    let mut scan = Scan::new(store);
    assert_eq!(
        verify(&mut scan).unwrap(),
        Vec::<String>::new(),
        "clean before the damage"
    );
    damage(scan.store());
    let problems = verify(&mut scan).unwrap();
    assert!(
        problems.iter().any(|p| p.contains(expect)),
        "expected {expect:?} in {problems:#?}"
    );
    let mut tiny = Scan::with_budget(scan.into_store(), 1);
    assert_eq!(verify(&mut tiny).unwrap(), problems);
    assert!(tiny.reopens() >= 4, "one per entry after the first: {}", tiny.reopens());
}

fn chunk_key(p: u32, epoch: u64, c: u32) -> Vec<u8> {
    let mut k = b"g".to_vec();
    k.extend_from_slice(&p.to_be_bytes());
    k.extend_from_slice(&epoch.to_be_bytes());
    k.extend_from_slice(&c.to_be_bytes());
    k
}

fn edit_snapshot(store: &Store, f: impl FnOnce(&mut PartitionSnapshot)) {
    let mut s = store.snapshot(2).unwrap().unwrap();
    f(&mut s);
    let mut k = b"s".to_vec();
    k.extend_from_slice(&2u32.to_be_bytes());
    store.db().insert(k, serde_json::to_vec(&s).unwrap()).unwrap();
}

#[test]
fn verify_finds_orphan_missing_and_damaged_chunks() {
    damaged(
        |s| {
            let v = s.db().get(chunk_key(2, 5, 0)).unwrap().unwrap();
            s.db().insert(chunk_key(2, 3, 0), v).unwrap();
        },
        "generation 3: 1 orphan chunk(s), no live generation",
    );
    damaged(
        |s| {
            let v = s.db().get(chunk_key(2, 5, 0)).unwrap().unwrap();
            s.db().insert(chunk_key(9, 1, 0), v).unwrap();
        },
        "partition 9 generation 1: 1 orphan chunk(s), no snapshot of that partition",
    );
    damaged(
        |s| {
            s.db().remove(chunk_key(2, 4, 1)).unwrap();
        },
        "partition 2 generation 4: chunk(s) 1 of 2 missing",
    );
    damaged(
        |s| {
            let mut v = s.db().get(chunk_key(2, 4, 0)).unwrap().unwrap().to_vec();
            v[100] ^= 1;
            s.db().insert(chunk_key(2, 4, 0), v).unwrap();
        },
        "partition 2 generation 4 chunk 0: chunk checksum mismatch",
    );
    damaged(
        |s| {
            let v = s.db().get(chunk_key(2, 5, 0)).unwrap().unwrap();
            s.db().insert(chunk_key(2, 5, 1), v).unwrap();
        },
        "chunk 1 beyond its 1 chunks",
    );
}

#[test]
fn verify_finds_snapshots_that_disagree_with_their_chunks() {
    damaged(
        |s| edit_snapshot(s, |snap| snap.generations[1].count = 5),
        "generation 5: 4 fingerprints stored, the snapshot counts 5",
    );
    damaged(
        |s| edit_snapshot(s, |snap| snap.generations[0].chunks = 3),
        "3 chunks recorded for",
    );
    damaged(|s| edit_snapshot(s, |snap| snap.epoch = 6), "snapshot epoch 6");
    damaged(
        |s| edit_snapshot(s, |snap| snap.generations[0].epoch = 2),
        "not consecutive (2 then 5)",
    );
    damaged(
        |s| edit_snapshot(s, |snap| snap.committed_offset = 150),
        "after the committed offset 150",
    );
    damaged(
        |s| edit_snapshot(s, |snap| snap.generations[1].in_start = 150),
        "first-seen offset(s) outside its input range [100, 150)",
    );
    damaged(
        |s| edit_snapshot(s, |snap| snap.out_covered = pos(2, 10)),
        "output covered up to 2:10",
    );
    damaged(
        |s| {
            let mut k = b"s".to_vec();
            k.extend_from_slice(&2u32.to_be_bytes());
            s.db().insert(k, b"{not json".to_vec()).unwrap();
        },
        "snapshot of partition 2",
    );
}

#[test]
fn verify_finds_bad_stamps_and_foreign_keys() {
    damaged(
        |s| {
            s.db().insert(b"zz:other", b"x".to_vec()).unwrap();
        },
        "1 key(s) outside the store layout",
    );
    damaged(
        |s| {
            s.db().insert(b"m:format", &7u32.to_be_bytes()).unwrap();
        },
        "says format version 1, the database (m:format) 7",
    );
    damaged(
        |s| std::fs::remove_file(s.path().join(FORMAT_FILE)).unwrap(),
        "kafka-dedup.format` is missing",
    );
    damaged(
        |s| {
            s.db().insert(b"m:identity", b"[]".to_vec()).unwrap();
        },
        "identity",
    );
}

#[test]
fn lookup_inputs_from_the_cli_and_the_query() {
    assert!(matches!(
        LookupInput::from_args(None, None, None, &[], None, &[]),
        Err(InspectError::Usage(_))
    ));
    assert!(matches!(
        LookupInput::from_args(Some("xyz"), None, None, &[], None, &[]),
        Err(InspectError::Usage(_))
    ));
    let cli = LookupInput::from_args(
        None,
        Some("v".into()),
        Some("k".into()),
        &["h=1".into(), "h=2".into()],
        None,
        &[],
    )
    .unwrap();
    let q = LookupInput::from_query("key=k&header=h%3D1&value=v&&header=h=2").unwrap();
    assert_eq!(cli, q);
    let f = Fingerprinter::new(Source::Header("h".into()));
    assert_eq!(cli.fingerprint(&f), q.fingerprint(&f));
    let key_only = LookupInput::from_query("key=k").unwrap();
    assert!(key_only.fingerprint(&Fingerprinter::new(Source::Value)).is_err());
    assert_eq!(LookupInput::from_query(""), Err(QueryError::Nothing));
    // A name other than fingerprint, value, key, header is a field of the identity, refused
    // when the source has no pointer it begins.
    let typo = LookupInput::from_query("valu=x").unwrap();
    let refused = typo.fingerprint(&Fingerprinter::new(Source::Value));
    assert!(matches!(
        &refused,
        Err(NoFingerprint::UnknownField { field, .. }) if field == "valu"
    ));
    // Said to a user of the command line and of HTTP alike: both forms (a new user at the
    // command line was shown only HTTP's `value=`).
    let said = refused.unwrap_err().to_string();
    assert!(
        said.contains("--value, --key, --header NAME=VALUE") && said.contains("value=, key="),
        "{said}"
    );
    assert_eq!(
        LookupInput::from_query(&format!("fingerprint={}&value=x", "0".repeat(32))),
        Err(QueryError::Both)
    );
    assert_eq!(
        LookupInput::from_query(&format!("fingerprint={:032x}", 5u128)).unwrap(),
        LookupInput::Fingerprint(Fingerprint(5))
    );
}

/// Query strings are decoded strictly, to bytes: a bad `%` escape is an error (a 400), never a
/// literal; values, keys and header names may be any bytes.
#[test]
fn lookup_queries_decode_to_bytes_strictly() {
    for (query, at) in [("value=%ZZ", 6), ("value=%4", 6), ("key=a&value=ok%", 14), ("%G1=x", 0)] {
        assert_eq!(LookupInput::from_query(query), Err(QueryError::Encoding(at)), "{query}");
    }
    let LookupInput::Record(r) = LookupInput::from_query("value=%FF%00+x&header=%FEid=%3D&key=").unwrap() else {
        panic!("a record");
    };
    assert_eq!(r.value.as_deref(), Some(&b"\xff\x00 x"[..]));
    assert_eq!(r.key.as_deref(), Some(&b""[..]));
    assert_eq!(r.headers, vec![(b"\xfeid".to_vec(), Some(b"=".to_vec()))]);
    assert!(matches!(
        LookupInput::from_query("header=%3Dx"),
        Err(QueryError::Header(HeaderError::EmptyName(_)))
    ));
    assert!(matches!(
        LookupInput::from_query("header=x"),
        Err(QueryError::Header(HeaderError::NoValue(_)))
    ));
    assert!(matches!(
        LookupInput::from_query("fingerprint=%FF"),
        Err(QueryError::Fingerprint(_))
    ));
}

/// Issue 27, item 3: a lookup names an event by the fields of its identity (`?tenant_id=a&
/// event_id=e-1`, `--field`), and the document they make fingerprints as the record would.
#[test]
fn lookups_by_the_fields_of_a_composite_identity() {
    let source = Source::try_from(r#"["json:/tenant_id","json:/event_id"]"#.to_string()).unwrap();
    let f = Fingerprinter::new(source);
    let record = crate::fingerprint::OwnedRecord {
        value: Some(br#"{ "event_id": "e-1", "n": 3, "tenant_id": "a" }"#.to_vec()),
        ..Default::default()
    };
    let want = f.fingerprint(&record).unwrap();
    let q = LookupInput::from_query("tenant_id=a&event_id=e-1").unwrap();
    assert_eq!(q.fingerprint(&f), Ok(want));
    let cli = LookupInput::from_args(
        None,
        None,
        None,
        &[],
        None,
        &["event_id=e-1".into(), "tenant_id=a".into()],
    )
    .unwrap();
    assert_eq!(cli.fingerprint(&f), Ok(want), "order does not matter");
    // As a JSON document (the existing way) too.
    let doc = LookupInput::from_query("value=%7B%22tenant_id%22%3A%22a%22%2C%22event_id%22%3A%22e-1%22%7D").unwrap();
    assert_eq!(doc.fingerprint(&f), Ok(want));
    // Another tenant, another event.
    let other = LookupInput::from_query("tenant_id=b&event_id=e-1").unwrap();
    assert_ne!(other.fingerprint(&f), Ok(want));
    // A value that is JSON is read as JSON: 7 is a number, "7" (quoted) a string.
    let g = Fingerprinter::new(Source::Json("/n".into()));
    let n = |doc: &[u8]| {
        g.fingerprint(&crate::fingerprint::OwnedRecord {
            value: Some(doc.to_vec()),
            ..Default::default()
        })
    };
    assert_eq!(
        LookupInput::from_query("n=7").unwrap().fingerprint(&g),
        Ok(n(b"{\"n\":7}").unwrap())
    );
    assert_eq!(
        LookupInput::from_query("n=%227%22").unwrap().fingerprint(&g),
        Ok(n(b"{\"n\":\"7\"}").unwrap())
    );
    // A missing part is reported as for a record; an unknown field names the known ones.
    let half = LookupInput::from_query("tenant_id=a")
        .unwrap()
        .fingerprint(&f)
        .unwrap_err();
    assert!(half.to_string().contains("part 2"), "{half}");
    let typo = LookupInput::from_query("tenant_id=a&evnt_id=e-1")
        .unwrap()
        .fingerprint(&f)
        .unwrap_err();
    assert!(typo.to_string().contains("tenant_id, event_id"), "{typo}");
    assert_eq!(
        LookupInput::from_query(&format!("fingerprint={}&event_id=x", "0".repeat(32))),
        Err(QueryError::Both)
    );
    assert!(matches!(
        LookupInput::from_args(None, None, None, &[], None, &["noequals".into()]),
        Err(InspectError::Usage(_))
    ));
}
