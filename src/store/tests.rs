use super::*;
use crate::generations::pos;
use test_identity as identity;
use xxhash_rust::xxh3::xxh3_64;

#[test]
fn save_load_round_trip_and_rotation_cleanup() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let (store, opened) = Store::open_for_run(&path, &identity()).unwrap();
    assert_eq!(opened, Opened::Created);
    let mut g1 = Generation::new(1, 0, pos(0, 0), 0);
    // Keys spread over the high 64 bits, which pick the table's home slot.
    let key = |i: u128| xxhash_rust::xxh3::xxh3_128(&i.to_le_bytes());
    for i in 1..=(CHUNK_ENTRIES as u128 + 10) {
        g1.table.insert(key(i), i as u32);
    }
    let g2 = Generation::new(2, 100, pos(0, 90), 0);
    store
        .save(&[PartitionWrite {
            partition: 0,
            epoch: 2,
            ckpt: "a".into(),
            committed_offset: 100,
            out_covered: pos(0, 90),
            generations: vec![&g1, &g2],
            clean: false,
            clock: None,
        }])
        .unwrap();
    assert!(g1.is_stored());
    let snap = store.snapshot(0).unwrap().unwrap();
    assert_eq!(snap.generations[0].chunks, 2);
    let loaded = store.load_generations(0, &snap).unwrap();
    assert_eq!(loaded[0].len(), g1.len());
    assert_eq!(loaded[0].table.get(key(1)), Some(1));
    drop(store);

    // Reopen: same identity, existing.
    let (store, opened) = Store::open_for_run(&path, &identity()).unwrap();
    assert_eq!(opened, Opened::Existing);
    // Rotate: g1 drops out; its chunks are removed.
    let g3 = Generation::new(3, 200, pos(0, 180), 0);
    store
        .save(&[PartitionWrite {
            partition: 0,
            epoch: 3,
            ckpt: "b".into(),
            committed_offset: 200,
            out_covered: pos(0, 180),
            generations: vec![&g2, &g3],
            clean: false,
            clock: None,
        }])
        .unwrap();
    let keys = store.db().scan_prefix(chunk_prefix(0)).count();
    assert_eq!(keys, 0, "g2 and g3 are empty, g1's chunks are gone");
    assert_eq!(store.partitions().unwrap(), vec![0]);
}

/// Issue 16, item 6: the size reported (gauge and `inspect stats`) is what the directory
/// occupies, as `du` says.
#[test]
fn the_size_on_disk_is_what_du_counts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    saved_store(&path);
    let store = Store::open_existing(&path).unwrap();
    let du = std::process::Command::new("du")
        .args(["-s", "-B1"])
        .arg(&path)
        .output()
        .unwrap();
    let du: u64 = String::from_utf8_lossy(&du.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(store.size_on_disk(), du);
    assert_eq!(crate::inspect::stats(&store).unwrap().size_on_disk_bytes, du);
}

#[test]
fn garbled_chunk_is_reported_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open_for_run(dir.path(), &identity()).unwrap();
    let mut g = Generation::new(1, 0, pos(0, 0), 0);
    g.table.insert(42, 0);
    store
        .save(&[PartitionWrite {
            partition: 3,
            epoch: 1,
            ckpt: "c".into(),
            committed_offset: 1,
            out_covered: pos(3, 1),
            generations: vec![&g],
            clean: false,
            clock: None,
        }])
        .unwrap();
    let k = chunk_key(3, 1, 0);
    let mut v = store.db().get(&k).unwrap().unwrap().to_vec();
    v[10] ^= 0xff;
    store.db().insert(&k, v).unwrap();
    let snap = store.snapshot(3).unwrap().unwrap();
    let err = store.load_generations(3, &snap).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
}

#[test]
fn other_deployment_is_cleared_and_foreign_dirs_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    {
        let (store, _) = Store::open_for_run(&path, &identity()).unwrap();
        let g = Generation::new(1, 0, pos(0, 0), 0);
        store
            .save(&[PartitionWrite {
                partition: 0,
                epoch: 1,
                ckpt: "x".into(),
                committed_offset: 0,
                out_covered: pos(0, 0),
                generations: vec![&g],
                clean: false,
                clock: None,
            }])
            .unwrap();
    }
    let mut other = identity();
    other.output_topic = "elsewhere".into();
    let (store, opened) = Store::open_for_run(&path, &other).unwrap();
    assert!(matches!(
        opened,
        Opened::Replaced {
            reason: "other_deployment",
            ..
        }
    ));
    assert!(store.partitions().unwrap().is_empty());
    drop(store);

    let foreign = dir.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("notes.txt"), "hello").unwrap();
    assert!(matches!(
        Store::open_for_run(&foreign, &identity()),
        Err(StoreError::NotAStore { .. })
    ));
    assert_eq!(std::fs::read_dir(&foreign).unwrap().count(), 1);
}

/// Every file and directory under `dir`: (path, size, modification time, xxh3 of the content).
fn listing(dir: &Path) -> Vec<(PathBuf, u64, std::time::SystemTime, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            let hash = if m.is_dir() {
                stack.push(e.path());
                0
            } else {
                xxh3_64(&std::fs::read(e.path()).unwrap())
            };
            out.push((e.path(), m.len(), m.modified().unwrap(), hash));
        }
    }
    out.sort();
    out
}

fn saved_store(path: &Path) {
    let (store, _) = Store::open_for_run(path, &identity()).unwrap();
    let mut g = Generation::new(1, 0, pos(0, 0), 0);
    for i in 0..1000u64 {
        g.table.insert(xxhash_rust::xxh3::xxh3_128(&i.to_le_bytes()), i as u32);
    }
    store
        .save(&[PartitionWrite {
            partition: 0,
            epoch: 1,
            ckpt: "a".into(),
            committed_offset: 1000,
            out_covered: pos(0, 1000),
            generations: vec![&g],
            clean: true,
            clock: None,
        }])
        .unwrap();
}

/// Opens `path` every way and expects each to fail with `check`, leaving every file as it was.
fn refused_untouched(path: &Path, run_too: bool, check: impl Fn(&StoreError) -> bool) {
    let before = listing(path);
    let mut errors = vec![
        Store::open_existing(path).err().expect("open_existing refuses"),
        Store::open_for_migration(path, FORMAT_VERSION)
            .err()
            .expect("open_for_migration refuses"),
    ];
    if run_too {
        errors.push(
            Store::open_for_run(path, &identity())
                .err()
                .expect("open_for_run refuses"),
        );
    }
    for e in &errors {
        assert!(check(e), "unexpected: {e}");
        assert!(e.to_string().contains("nothing was modified"), "{e}");
    }
    assert_eq!(listing(path), before, "files changed");
}

#[test]
fn refusals_touch_nothing() {
    let dir = tempfile::tempdir().unwrap();

    let newer = dir.path().join("newer");
    saved_store(&newer);
    Store::open_existing(&newer)
        .unwrap()
        .set_format_version(FORMAT_VERSION + 1)
        .unwrap();
    refused_untouched(&newer, true, |e| matches!(e, StoreError::NewerFormat { .. }));

    let older = dir.path().join("older");
    saved_store(&older);
    Store::open_existing(&older).unwrap().set_format_version(0).unwrap();
    let before = listing(&older);
    for e in [
        Store::open_for_run(&older, &identity()).err().unwrap(),
        Store::open_existing(&older).err().unwrap(),
    ] {
        assert!(matches!(e, StoreError::OlderFormat { found: 0, .. }), "{e}");
        assert!(e.to_string().contains("kafka-dedup migrate --store"), "{e}");
    }
    assert_eq!(listing(&older), before);

    let foreign = dir.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("notes.txt"), "hello").unwrap();
    std::fs::create_dir(foreign.join("sub")).unwrap();
    refused_untouched(&foreign, true, |e| {
        matches!(e, StoreError::NotAStore { .. }) && e.to_string().contains("notes.txt")
    });

    let other_sled = dir.path().join("sled-only");
    drop(sled::open(&other_sled).unwrap());
    refused_untouched(&other_sled, true, |e| {
        matches!(e, StoreError::NotAStore { .. }) && e.to_string().contains("sled database but no")
    });

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    refused_untouched(&empty, false, |e| e.to_string().contains("the directory is empty"));

    let missing = dir.path().join("missing");
    assert!(Store::open_existing(&missing).is_err());
    assert!(!missing.exists());
}

#[test]
fn a_new_store_carries_both_stamps() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new");
    let (store, opened) = Store::open_for_run(&path, &identity()).unwrap();
    assert_eq!(opened, Opened::Created);
    assert_eq!(store.format_version().unwrap(), Some(FORMAT_VERSION));
    assert_eq!(format_file_version(&path), Ok(Some(FORMAT_VERSION)));
    assert_eq!(
        std::fs::read_to_string(path.join(FORMAT_FILE)).unwrap(),
        format!("{FORMAT_VERSION}\n")
    );
}

#[test]
fn keys_are_classified_by_the_layout() {
    assert_eq!(StoreKey::parse(KEY_FORMAT), StoreKey::Format);
    assert_eq!(StoreKey::parse(KEY_IDENTITY), StoreKey::Identity);
    assert_eq!(StoreKey::parse(&snapshot_key(7)), StoreKey::Snapshot(7));
    assert_eq!(
        StoreKey::parse(&chunk_key(3, 9, 2)),
        StoreKey::Chunk {
            partition: 3,
            epoch: 9,
            chunk: 2
        }
    );
    assert_eq!(StoreKey::parse(b"s12"), StoreKey::Unknown(b"s12".to_vec()));
    assert_eq!(StoreKey::parse(b"x"), StoreKey::Unknown(b"x".to_vec()));
}

#[test]
fn second_opener_is_told_the_store_is_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open_for_run(dir.path(), &identity()).unwrap();
    store.write_live_file("127.0.0.1:9999");
    let err = Store::open_existing(dir.path()).err().expect("locked");
    let msg = err.to_string();
    assert!(
        msg.contains("in use by a running kafka-dedup") && msg.contains("http://127.0.0.1:9999/store/"),
        "{msg}"
    );
    store.write_live_file("0.0.0.0:9998");
    let msg = Store::open_existing(dir.path()).err().expect("locked").to_string();
    assert!(msg.contains("http://127.0.0.1:9998/store/lookup"), "{msg}");
}

/// Issue 22 (low): a snapshot that cannot describe what was stored is refused as corrupt (the
/// recovery then rebuilds from the output topic) before anything is sized from it: no
/// generation at all, a count that does not fit its chunks (a damaged count sized the table),
/// a count that fits chunks that are not there.
#[test]
fn a_snapshot_that_cannot_be_loaded_is_corrupt_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open_for_run(dir.path(), &identity()).unwrap();
    let mut g = Generation::new(1, 0, pos(0, 0), 0);
    for i in 1..=10u128 {
        g.table.insert(i << 64, i as u32);
    }
    store
        .save(&[PartitionWrite {
            partition: 0,
            epoch: 1,
            ckpt: "a".into(),
            committed_offset: 10,
            out_covered: pos(0, 10),
            generations: vec![&g],
            clean: true,
            clock: None,
        }])
        .unwrap();
    let good = store.snapshot(0).unwrap().unwrap();
    assert_eq!(store.load_generations(0, &good).unwrap()[0].len(), 10);
    let damaged = |f: &dyn Fn(&mut PartitionSnapshot)| {
        let mut s = good.clone();
        f(&mut s);
        store
            .db()
            .insert(snapshot_key(0), serde_json::to_vec(&s).unwrap())
            .unwrap();
        let s = store.snapshot(0).unwrap().unwrap();
        match store.load_generations(0, &s) {
            Err(StoreError::Corrupt { reason, .. }) => reason,
            other => panic!("{other:?}"),
        }
    };
    /// (case, the damage, what the refusal says).
    type Row<'a> = (&'a str, &'a dyn Fn(&mut PartitionSnapshot), &'a str);
    #[rustfmt::skip]
    let rows: [Row; 3] = [
        ("no generation", &|s| s.generations.clear(), "lists no generation"),
        ("a count far beyond its chunks", &|s| s.generations[0].count = 1 << 40, "cannot fill 1 chunks"),
        ("a count that fits chunks that are not there", &|s| {
            s.generations[0].count = (CHUNK_ENTRIES as u64) << 20;
            s.generations[0].chunks = 1 << 20;
        }, "missing"),
    ];
    for (case, f, why) in rows {
        let reason = damaged(f);
        assert!(reason.contains(why), "{case}: {reason}");
    }
}

/// Issue 23, item 6: a second `run` on a store in use is told what to do (give each instance its
/// own `store.path`), not how to ask the running one.
#[test]
fn a_second_run_is_told_to_give_each_instance_its_own_store_path() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open_for_run(dir.path(), &identity()).unwrap();
    store.write_live_file("127.0.0.1:9999");
    let msg = Store::open_for_run(dir.path(), &identity())
        .err()
        .expect("locked")
        .to_string();
    assert!(
        msg.contains("in use by a running kafka-dedup") && msg.contains("give each instance its own `store.path`"),
        "{msg}"
    );
    assert!(!msg.contains("ask it over HTTP"), "{msg}");
}

/// Issue 25 (memory): the current generation is loaded with room for a quarter more
/// fingerprints, so its first inserts after a recovery do not grow it (a growth holds the old
/// and the new slots at once: 2.25x the table at the peak of RSS, and a copy of every entry on
/// the poll thread); the frozen generations, which never grow, are loaded at their size.
#[test]
fn the_current_generation_is_loaded_with_room_to_grow() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open_for_run(&dir.path().join("store"), &identity()).unwrap();
    let key = |i: u128| xxhash_rust::xxh3::xxh3_128(&i.to_le_bytes());
    let n = 10_000u128;
    let mut frozen = Generation::new(1, 0, pos(0, 0), 0);
    let mut current = Generation::new(2, 0, pos(0, 0), 0);
    for i in 0..n {
        frozen.table.insert(key(i), 0);
        current.table.insert(key(n + i), 0);
    }
    store
        .save(&[PartitionWrite {
            partition: 0,
            epoch: 2,
            ckpt: "a".into(),
            committed_offset: 0,
            out_covered: pos(0, 0),
            generations: vec![&frozen, &current],
            clean: false,
            clock: None,
        }])
        .unwrap();
    let snap = store.snapshot(0).unwrap().unwrap();
    let mut loaded = store.load_generations(0, &snap).unwrap();
    assert_eq!(
        loaded[0].table.capacity(),
        crate::table::FingerprintTable::with_capacity(n as usize).capacity(),
        "a frozen generation at its size"
    );
    let cur = &mut loaded[1].table;
    let capacity = cur.capacity();
    for i in 0..n / 4 {
        cur.insert(key(2 * n + i), 0);
    }
    assert_eq!(cur.len(), (n + n / 4) as usize);
    assert_eq!(
        cur.capacity(),
        capacity,
        "a quarter more fingerprints fit without growing"
    );
}

/// Issue 25 (memory): sled 0.34 keeps every page a one-pass read brings in (its LRU evicts after
/// 64 accesses to one of 256 shards, and a 10M-fingerprint load is 2,441 reads), so `run`'s
/// store is closed and opened again whenever the chunks read since it was opened reach a quarter
/// of its page cache: the load goes on against the new database and finds every fingerprint.
#[test]
fn a_long_load_releases_sleds_cache_as_it_goes() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = Store::open_for_run(&dir.path().join("store"), &identity()).unwrap();
    let key = |i: u128| xxhash_rust::xxh3::xxh3_128(&i.to_le_bytes());
    let n = 3 * CHUNK_ENTRIES as u128 + 5;
    let mut current = Generation::new(1, 0, pos(0, 0), 0);
    for i in 0..n {
        current.table.insert(key(i), i as u32);
    }
    store
        .save(&[PartitionWrite {
            partition: 0,
            epoch: 1,
            ckpt: "a".into(),
            committed_offset: 0,
            out_covered: pos(0, 0),
            generations: vec![&current],
            clean: false,
            clock: None,
        }])
        .unwrap();
    // One chunk's worth (80 KiB) instead of 16 MiB.
    store.release_after = (CHUNK_ENTRIES * 20) as u64;
    let snap = store.snapshot(0).unwrap().unwrap();
    let loaded = store.load_generations(0, &snap).unwrap();
    assert_eq!(loaded[0].len(), n as usize);
    assert!((0..n).all(|i| loaded[0].table.get(key(i)) == Some(i as u32)));
    assert!(store.cache_releases() >= 3, "released {} times", store.cache_releases());
    // The store still takes checkpoints.
    store
        .save(&[PartitionWrite {
            partition: 0,
            epoch: 1,
            ckpt: "b".into(),
            committed_offset: 1,
            out_covered: pos(0, 0),
            generations: vec![&loaded[0]],
            clean: false,
            clock: None,
        }])
        .unwrap();
    assert_eq!(store.snapshot(0).unwrap().unwrap().ckpt, "b");
}

/// Issue 25 (memory): loads of several partitions at once (recovery workers run in parallel)
/// while the page cache is released under them: every load finds every fingerprint.
#[test]
fn parallel_loads_survive_the_cache_releases() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = Store::open_for_run(&dir.path().join("store"), &identity()).unwrap();
    let key = |p: i32, i: u128| xxhash_rust::xxh3::xxh3_128(&(i + ((p as u128) << 64)).to_le_bytes());
    let n = 4 * CHUNK_ENTRIES as u128;
    for p in 0..3 {
        let mut g = Generation::new(1, 0, pos(p, 0), 0);
        for i in 0..n {
            g.table.insert(key(p, i), i as u32);
        }
        store
            .save(&[PartitionWrite {
                partition: p,
                epoch: 1,
                ckpt: format!("c{p}"),
                committed_offset: 0,
                out_covered: pos(p, 0),
                generations: vec![&g],
                clean: false,
                clock: None,
            }])
            .unwrap();
    }
    store.release_after = (CHUNK_ENTRIES * 20) as u64;
    let workers: Vec<_> = (0..3)
        .map(|p| {
            let store = store.clone();
            std::thread::spawn(move || {
                let snap = store.snapshot(p).unwrap().unwrap();
                let loaded = store.load_generations(p, &snap).unwrap();
                assert_eq!(loaded[0].len(), n as usize);
                assert!((0..n).all(|i| loaded[0].table.get(key(p, i)) == Some(i as u32)));
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert!(store.cache_releases() >= 3, "released {} times", store.cache_releases());
}

/// A page-cache release while a checkpoint's save holds its own handle of the database (a large
/// write and flush, held here at a gate until the load is done): the release must not close the
/// database under it. Closed, sled's file lock stays with the save's handle, the reopen gives
/// up after its wait, and the store is left closed: the load fails with `Closed` (recovery reads
/// that as a missing snapshot) and the save's success marks the store sound while it is closed.
#[test]
fn a_cache_release_during_a_save_leaves_the_store_open() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = Store::open_for_run(&dir.path().join("store"), &identity()).unwrap();
    let key = |p: i32, i: u128| xxhash_rust::xxh3::xxh3_128(&(i + ((p as u128) << 64)).to_le_bytes());
    let write = |store: &Store, p: i32, g: &Generation| {
        let g: &Generation = g;
        store.save(&[PartitionWrite {
            partition: p,
            epoch: 1,
            ckpt: format!("c{p}"),
            committed_offset: 0,
            out_covered: pos(p, 0),
            generations: vec![g],
            clean: false,
            clock: None,
        }])
    };
    let n = 3 * CHUNK_ENTRIES as u128;
    let mut small = Generation::new(1, 0, pos(0, 0), 0);
    for i in 0..n {
        small.table.insert(key(0, i), i as u32);
    }
    write(&store, 0, &small).unwrap();
    // A few KiB: every chunk read asks for a release.
    store.release_after = 4096;
    let big_n = 16 * CHUNK_ENTRIES as u128;
    let mut big = Generation::new(1, 0, pos(1, 0), 0);
    for i in 0..big_n {
        big.table.insert(key(1, i), i as u32);
    }
    let (holding_tx, holding) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel();
    *store.save_gate.lock().unwrap() = Some((holding_tx, go_rx));
    let saver = {
        let store = store.clone();
        std::thread::spawn(move || {
            store.save(&[PartitionWrite {
                partition: 1,
                epoch: 1,
                ckpt: "c1".into(),
                committed_offset: 0,
                out_covered: pos(1, 0),
                generations: vec![&big],
                clean: false,
                clock: None,
            }])
        })
    };
    holding.recv().unwrap();
    let snap = store.snapshot(0).unwrap().unwrap();
    let loaded = store.load_generations(0, &snap);
    go.send(()).unwrap();
    let saved = saver.join().unwrap();
    let loaded = loaded.expect("the load during the save");
    saved.expect("the save");
    assert!(!store.is_broken());
    assert_eq!(loaded[0].len(), n as usize);
    assert!((0..n).all(|i| loaded[0].table.get(key(0, i)) == Some(i as u32)));
    // Open, both partitions found, and releases go on once nobody else holds the database.
    let snap1 = store.snapshot(1).expect("open").expect("saved");
    let loaded1 = store.load_generations(1, &snap1).unwrap();
    assert_eq!(loaded1[0].len(), big_n as usize);
    assert!((0..big_n).all(|i| loaded1[0].table.get(key(1, i)) == Some(i as u32)));
    assert!(store.cache_releases() >= 3, "released {} times", store.cache_releases());
    let again = store.load_generations(0, &store.snapshot(0).unwrap().unwrap()).unwrap();
    assert_eq!(again[0].len(), n as usize);
    write(&store, 0, &again[0]).expect("the next checkpoint");
}

/// A release whose reopen failed (sled's own threads kept the file lock past the wait) leaves the
/// store closed and broken; the next read opens it again instead of leaving it closed until a
/// checkpoint, and the store is sound again.
#[test]
fn a_store_a_failed_release_left_closed_is_opened_at_the_next_read() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open_for_run(&dir.path().join("store"), &identity()).unwrap();
    let g = Generation::new(1, 0, pos(0, 0), 0);
    store
        .save(&[PartitionWrite {
            partition: 0,
            epoch: 1,
            ckpt: "a".into(),
            committed_offset: 0,
            out_covered: pos(0, 0),
            generations: vec![&g],
            clean: false,
            clock: None,
        }])
        .unwrap();
    // What `release_cache` leaves after a failed reopen.
    drop(store.db.write().unwrap().take());
    store.broken.store(true, Ordering::SeqCst);
    store.release_pending.store(true, Ordering::SeqCst);
    assert_eq!(store.snapshot(0).expect("opened again").expect("saved").ckpt, "a");
    assert!(!store.is_broken());
}

/// A directory that passes the start's check (access(2) lets root write /proc) but cannot be
/// created (procfs answers mkdir(2) with ENOENT): refused as not writable, naming `store.path`
/// (exit 2), where a new user's trial got exit 1 and "IO error: No such file or directory".
#[test]
fn a_store_directory_the_file_system_will_not_create_is_not_writable() {
    let path = Path::new("/proc/kafka-dedup-store");
    match Store::open_for_run(path, &identity()) {
        Err(e @ StoreError::NotWritable { .. }) => {
            assert!(e.to_string().contains("`store.path`"), "{e}");
        }
        other => panic!("{:?}", other.map(|(_, o)| o)),
    }
}
