//! Issue 5's cases: `kafka-dedup inspect` offline, the live `/store/*` routes, refusals that touch
//! nothing, a dump of a million fingerprints in bounded memory, and committed fixture stores of
//! earlier formats. The binary runs as its own process; the broker is Apache Kafka (scripts/test.sh).

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;
use kafka_dedup::generations::{Generation, Positions};
use kafka_dedup::store::{Identity, PartitionWrite, Store, FORMAT_VERSION};
use serde_json::Value;

const CONSUMED: &str = "kafka_dedup_records_consumed_total";
const FORWARDED: &str = "kafka_dedup_records_forwarded_total";
const DROPPED: &str = "kafka_dedup_duplicates_dropped_total";

/// Runs the binary with `args`.
fn kd(args: &[&str]) -> Output {
    kafka_dedup_command()
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run kafka-dedup")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs the binary, expects exit 0, parses stdout as JSON.
fn kd_json(args: &[&str]) -> Value {
    let out = kd(args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", text(&out.stdout)))
}

/// Every file and directory under `dir`: (path, size, modification time, content).
type Listing = Vec<(PathBuf, u64, std::time::SystemTime, Vec<u8>)>;

fn listing(dir: &Path) -> Listing {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            let content = if m.is_dir() {
                stack.push(e.path());
                Vec::new()
            } else {
                std::fs::read(e.path()).unwrap()
            };
            out.push((e.path(), m.len(), m.modified().unwrap(), content));
        }
    }
    out.sort();
    out
}

fn identity(source: &str) -> Identity {
    Identity {
        group_id: "g".into(),
        input_topic: "in".into(),
        output_topic: "out".into(),
        source: source.into(),
    }
}

/// The record `i` of the retried-batch case: key `k<i>`, value `<i>`, header `trace: t<i>`.
fn rec(i: u32) -> Raw {
    raw(
        Some(&format!("k{i}")),
        Some(&i.to_string()),
        &[("trace", &format!("t{i}"))],
    )
}

/// Cases 1 and 2. Partition 0 gets 1..500, then 401..500 again (same key, value, headers), then
/// 501..1000. After a clean stop, `inspect` offline finds value 450 at its first offset (449),
/// not 5000, and `stats` counts exactly the records forwarded in the live generations' input
/// ranges. Started again on the same store, the service makes the CLI refuse with its HTTP
/// address, and `/store/lookup` and the live part of `/store/stats` answer as the CLI did.
#[test]
fn retried_batch_inspected_offline_then_live() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("insp-in"), unique("insp-out"));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    let mut records: Vec<Raw> = (1..=500).map(rec).collect();
    records.extend((401..=500).map(rec));
    records.extend((501..=1000).map(rec));
    kafka().produce_raw(&input, 0, &records);
    // Input offsets of the records forwarded: the first copies. 500..599 are the repeats.
    let forwarded: BTreeSet<i64> = (0..500).chain(600..1100).collect();

    let spec = FilterSpec::new(&input, &output, dir.path());
    let mut filter = spec.start(dir.path());
    filter.wait_metric(CONSUMED, &[], 1100.0, Duration::from_secs(60));
    filter.wait_metric(FORWARDED, &[], 1000.0, Duration::from_secs(60));
    assert_eq!(metric(&filter.scrape(), DROPPED, &[]), 100.0);
    assert!(filter.terminate().success(), "{}", filter.logs());

    // --- Offline.
    let store = spec.store.to_str().unwrap().to_string();
    let inspect = |args: &[&str]| -> Vec<String> {
        let mut a = vec!["inspect".to_string(), "--store".to_string(), store.clone()];
        a.extend(args.iter().map(|s| s.to_string()));
        a
    };
    let run = |args: &[&str]| kd(&inspect(args).iter().map(String::as_str).collect::<Vec<_>>());
    let json = |args: &[&str]| {
        let mut a = inspect(args);
        a.insert(3, "--json".into());
        kd_json(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };

    let stats = json(&["stats"]);
    assert_eq!(stats["format_version"], FORMAT_VERSION);
    assert_eq!(stats["identity"]["source"], "value");
    let partitions = stats["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), 1, "{stats:#}");
    let p0 = &partitions[0];
    assert_eq!(p0["partition"], 0);
    assert_eq!(p0["committed_offset"], 1100);
    assert_eq!(p0["clean"], true, "a SIGTERM hands over cleanly: {stats:#}");
    let gens = p0["generations"].as_array().unwrap();
    let mut total = 0;
    for g in gens {
        let (start, end) = (g["input_start"].as_i64().unwrap(), g["input_end"].as_i64().unwrap());
        let expect = forwarded.range(start..end).count() as u64;
        assert_eq!(
            g["fingerprints"].as_u64(),
            Some(expect),
            "generation {} covers input [{start}, {end}): {stats:#}",
            g["epoch"]
        );
        total += expect;
    }
    let oldest = gens[0]["input_start"].as_i64().unwrap();
    assert_eq!(gens.last().unwrap()["input_end"], 1100);
    assert_eq!(p0["fingerprints"].as_u64(), Some(total));
    assert_eq!(total, forwarded.range(oldest..).count() as u64);

    let held = json(&["lookup", "--value", "450"]);
    assert_eq!(held["held"], true, "{held:#}");
    let holdings = held["holdings"].as_array().unwrap();
    assert_eq!(holdings.len(), 1, "{held:#}");
    assert_eq!(holdings[0]["partition"], 0);
    assert_eq!(
        holdings[0]["first_seen_offset"], 449,
        "the first copy, not the repeat at 549"
    );
    let epoch = holdings[0]["generation"].as_u64().unwrap();
    let g450 = gens.iter().find(|g| g["epoch"] == epoch).expect("a live generation");
    assert!(g450["input_start"].as_i64().unwrap() <= 449 && 449 < g450["input_end"].as_i64().unwrap());
    assert!(held.get("incomplete").is_none(), "{held:#}");
    let fp = held["fingerprint"].as_str().unwrap().to_string();

    let out = run(&["lookup", "--value", "450"]);
    assert_eq!(out.status.code(), Some(0));
    let said = text(&out.stdout);
    assert!(
        said.contains(&format!("held by partition 0 generation {epoch}"))
            && said.contains("first seen at input offset 449"),
        "{said}"
    );

    let not_held = json(&["lookup", "--value", "5000"]);
    assert_eq!(not_held["held"], false);
    assert_eq!(not_held["holdings"], Value::Array(vec![]));
    assert!(text(&run(&["lookup", "--value", "5000"]).stdout).contains("not held"));

    // The same event named other ways.
    let value_file = dir.path().join("value.txt");
    std::fs::write(&value_file, "450").unwrap();
    let config = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "toml"))
        .expect("the filter's configuration");
    assert_eq!(json(&["lookup", "--fingerprint", &fp]), held);
    assert_eq!(json(&["lookup", "--json-file", value_file.to_str().unwrap()]), held);
    assert_eq!(
        json(&["lookup", "--value", "450", "--config", config.to_str().unwrap()]),
        held
    );
    let no_fp = run(&["lookup", "--key", "k450"]);
    assert_eq!(no_fp.status.code(), Some(2), "source value needs a value");
    assert!(
        text(&no_fp.stderr).contains("no fingerprint"),
        "{}",
        text(&no_fp.stderr)
    );

    // dump: every fingerprint once, with its first offset; exactly the forwarded offsets.
    let out = run(&["dump", "--partition", "0"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mut offsets = BTreeSet::new();
    let mut lines = 0;
    for line in text(&out.stdout).lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        lines += 1;
        offsets.insert(v["first_seen_offset"].as_i64().expect("known offsets"));
        if v["fingerprint"] == fp.as_str() {
            assert_eq!(v["first_seen_offset"], 449);
        }
    }
    assert_eq!(lines, total);
    assert_eq!(offsets, forwarded.range(oldest..).copied().collect::<BTreeSet<_>>());

    let out = run(&["verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("consistent"));

    // --- Live: the same store, in use by a running kafka-dedup.
    let mut again = spec.start(dir.path());
    again.wait_ready(Duration::from_secs(90));
    let hint = format!("http://{}/store/", again.http);
    for args in [
        inspect(&["stats"]),
        inspect(&["lookup", "--value", "450"]),
        inspect(&["verify"]),
        vec!["migrate".into(), "--store".into(), store.clone()],
    ] {
        let out = kd(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("in use by a running kafka-dedup") && err.contains(&hint),
            "{args:?}: {err}"
        );
    }

    let http = again.http.clone();
    let ask = |query: &str| -> Value {
        let (code, body) = http_get(&http, &format!("/store/lookup?{query}")).expect("http");
        assert_eq!(code, 200, "{query}: {body}");
        serde_json::from_str(&body).unwrap()
    };
    assert_eq!(ask("value=450"), held);
    assert_eq!(ask("value=5000"), not_held);
    assert_eq!(ask(&format!("fingerprint={fp}")), held);
    // Key and header are part of the record, but the source is the value.
    assert_eq!(ask("key=k450&value=450&header=trace%3Dt450"), held);
    let (code, body) = http_get(&again.http, "/store/lookup?key=k450").unwrap();
    assert_eq!(code, 400, "{body}");
    let (code, body) = http_get(&again.http, "/store/lookup?valu=450").unwrap();
    assert_eq!(code, 400, "{body}");

    let (code, body) = http_get(&again.http, "/store/stats").unwrap();
    assert_eq!(code, 200, "{body}");
    let live: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(live["live"][0]["state"], "running", "{live:#}");
    assert_eq!(live["live"][0]["next_offset"], 1100);
    assert_eq!(
        live["live"][0]["generations"], p0["generations"],
        "the live generations are the ones stored at the clean stop: {live:#}"
    );

    // A record forwarded now is known to the live answer at once (from memory, not from the
    // last checkpoint), and to the offline one after the next clean stop.
    kafka().produce_raw(&input, 0, &[rec(2000)]);
    again.wait_metric(FORWARDED, &[], 1.0, Duration::from_secs(60));
    let now = ask("value=2000");
    assert_eq!(now["held"], true, "{now:#}");
    assert_eq!(now["holdings"][0]["first_seen_offset"], 1100, "{now:#}");
    assert_eq!(now["holdings"][0]["age"], 0, "{now:#}");
    assert!(again.terminate().success(), "{}", again.logs());
    assert_eq!(json(&["lookup", "--value", "2000"]), now);
    let out = run(&["verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}

/// Writes a store at `path` through the library: partition 0, one generation starting at input
/// offset 0 holding `xxh3_128(i)` first seen at offset `i`, for `i` in `0..n`; then stamps it
/// with format version `stamp` if given (through the same handle: no reopen in this process).
fn write_store(path: &Path, n: u64, stamp: Option<u32>) {
    let (store, _) = Store::open_for_run(path, &identity("value")).unwrap();
    let out: Positions = [(0, 0)].into_iter().collect();
    let mut g = Generation::new(1, 0, out.clone(), n as usize);
    for i in 0..n {
        g.table.insert(xxhash_rust::xxh3::xxh3_128(&i.to_le_bytes()), i as u32);
    }
    store
        .save(&[PartitionWrite {
            partition: 0,
            epoch: 1,
            ckpt: "bulk".into(),
            committed_offset: n as i64,
            out_covered: [(0, n as i64)].into_iter().collect(),
            generations: vec![&g],
            clean: true,
            clock: None,
        }])
        .unwrap();
    if let Some(v) = stamp {
        store.set_format_version(v).unwrap();
    }
}

/// A configuration for `run` with the store at `store`. The bootstrap address has no broker:
/// a refused store must be refused before any Kafka contact.
fn offline_config(dir: &Path, store: &Path) -> PathBuf {
    let path = dir.join(format!("config-{}.toml", unique("c")));
    std::fs::write(
        &path,
        format!(
            "[kafka]\nbootstrap_servers = \"127.0.0.1:1\"\n[input]\ntopic = \"in\"\ngroup_id = \"g\"\n\
             [output]\ntopic = \"out\"\n[store]\npath = \"{}\"\n[http]\nlisten = \"127.0.0.1:{}\"\n",
            store.display(),
            free_port()
        ),
    )
    .unwrap();
    path
}

/// Runs `run --config` and expects it to stop by itself with exit 2 (a process that got past the
/// store would keep retrying the missing broker: it is killed after 60 s and the test fails).
fn run_refused(config: &Path) -> String {
    let mut child = kafka_dedup_command()
        .args(["run", "--config"])
        .arg(config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`run` did not refuse the store");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    err
}

/// Case 3. A store stamped with a future version, an empty directory and a directory of
/// unrelated files: `inspect` (every subcommand), `migrate` and (where it would not simply create
/// a store) `run` refuse each with its own message and exit 2, and no file changes (names,
/// sizes, modification times, contents). A store stamped 0 (a version that never existed) is
/// refused by `run` with the `migrate` command, and `migrate` says no step leads from it.
#[test]
fn refusals_leave_the_directory_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let future = dir.path().join("future");
    write_store(&future, 100, Some(FORMAT_VERSION + 1));
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let unrelated = dir.path().join("unrelated");
    std::fs::create_dir_all(unrelated.join("sub")).unwrap();
    std::fs::write(unrelated.join("notes.txt"), "hello").unwrap();
    std::fs::write(unrelated.join("data.csv"), "a,b\n1,2\n").unwrap();
    std::fs::write(unrelated.join("sub").join("x"), [0u8; 10]).unwrap();
    let old = dir.path().join("old");
    write_store(&old, 10, Some(0));

    let newer_msg = format!(
        "has format version {}, newer than this build supports ({FORMAT_VERSION}); use a newer kafka-dedup",
        FORMAT_VERSION + 1
    );
    let cases: [(&Path, &str, bool); 3] = [
        (&future, &newer_msg, true),
        (&empty, "is not a kafka-dedup store: the directory is empty", false),
        (
            &unrelated,
            "is not a kafka-dedup store: it holds other files (data.csv, notes.txt, sub) and no `kafka-dedup.format`",
            true,
        ),
    ];
    for (path, message, run_too) in cases {
        let before = listing(path);
        let p = path.to_str().unwrap();
        let commands: Vec<Vec<&str>> = vec![
            vec!["inspect", "--store", p, "stats"],
            vec!["inspect", "--store", p, "--json", "lookup", "--value", "1"],
            vec![
                "inspect",
                "--store",
                p,
                "lookup",
                "--fingerprint",
                "0123456789abcdef0123456789abcdef",
            ],
            vec!["inspect", "--store", p, "dump", "--partition", "0"],
            vec!["inspect", "--store", p, "verify"],
            vec!["migrate", "--store", p],
        ];
        for args in commands {
            let out = kd(&args);
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains(message), "{args:?}: {err}");
            assert!(err.contains("nothing was modified"), "{args:?}: {err}");
            assert!(out.stdout.is_empty(), "{args:?}");
        }
        if run_too {
            let err = run_refused(&offline_config(dir.path(), path));
            assert!(err.contains(message), "{err}");
        }
        assert_eq!(listing(path), before, "{} changed", path.display());
    }

    let before = listing(&old);
    let err = run_refused(&offline_config(dir.path(), &old));
    assert!(
        err.contains(&format!(
            "has format version 0, this build uses {FORMAT_VERSION}; run `kafka-dedup migrate --store {}`",
            old.display()
        )),
        "{err}"
    );
    let out = kd(&["inspect", "--store", old.to_str().unwrap(), "stats"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("run `kafka-dedup migrate"),
        "{}",
        text(&out.stderr)
    );
    let out = kd(&["migrate", "--store", old.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("has format version 0: this build knows no migration from it to 1 (known steps: none)"),
        "{err}"
    );
    assert_eq!(listing(&old), before);
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Runs the binary under `python3`, which reports the child's peak resident set size
/// (`getrusage(RUSAGE_CHILDREN).ru_maxrss`, KiB on Linux) on stderr after it exits. Calls
/// `each_line` with every line of its stdout as it streams. Returns (exit code, peak KiB).
fn peak_rss(args: &[&str], mut each_line: impl FnMut(&str)) -> (Option<i32>, u64) {
    const WRAPPER: &str = "import resource, subprocess, sys\n\
        r = subprocess.run(sys.argv[1:])\n\
        print('peak_rss_kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n\
        sys.exit(r.returncode)\n";
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(WRAPPER)
        .arg(env!("CARGO_BIN_EXE_kafka-dedup"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (installed by scripts/test.sh)");
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        each_line(&line.unwrap());
    }
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    let kib = err
        .lines()
        .find_map(|l| l.strip_prefix("peak_rss_kib "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS reported: {err}"));
    (out.status.code(), kib)
}

/// Case 4. `dump` of a store holding 1,000,000 fingerprints streams them: every fingerprint comes
/// out once with its first-seen offset, and memory does not grow with the store. The peak RSS of
/// the process (measured by the kernel, through `python3`) is compared with dumps of a
/// 1,000-fingerprint and a 4,000,000-fingerprint store: within 32 MiB of the first (measured:
/// 19 MB more; loading the entries as a vector would add 32 MB on top) and within 24 MiB of the
/// 1M dump for the 4M one (measured: 11 MB more; sled's page cache, unreleased, adds 63 MB).
#[test]
fn dump_of_a_million_fingerprints_runs_in_bounded_memory() {
    const N: u64 = 1_000_000;
    const FOUR_N: u64 = 4 * N;
    let dir = tempfile::tempdir().unwrap();
    let (small, big, bigger) = (
        dir.path().join("small"),
        dir.path().join("big"),
        dir.path().join("bigger"),
    );
    write_store(&small, 1_000, None);
    write_store(&big, N, None);
    write_store(&bigger, FOUR_N, None);
    let dump = |store: &Path| -> Vec<String> {
        [
            "inspect",
            "--store",
            store.to_str().unwrap(),
            "dump",
            "--partition",
            "0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };

    let small_args = dump(&small);
    let (code, small_kib) = peak_rss(&strs(&small_args), |_| {});
    assert_eq!(code, Some(0));

    let mut seen = vec![false; N as usize];
    let mut lines = 0u64;
    let big_args = dump(&big);
    let (code, big_kib) = peak_rss(&strs(&big_args), |line| {
        // {"partition":0,"generation":1,"fingerprint":"<32 hex>","first_seen_offset":<i>}
        lines += 1;
        let hex = &line[line.find("\"fingerprint\":\"").expect(line) + 15..][..32];
        let offset: u64 = line[line.find("\"first_seen_offset\":").expect(line) + 20..line.len() - 1]
            .parse()
            .expect(line);
        assert!(line.starts_with("{\"partition\":0,\"generation\":1,"), "{line}");
        assert_eq!(
            u128::from_str_radix(hex, 16).unwrap(),
            xxhash_rust::xxh3::xxh3_128(&offset.to_le_bytes()),
            "{line}"
        );
        assert!(!std::mem::replace(&mut seen[offset as usize], true), "twice: {line}");
    });
    assert_eq!(code, Some(0));
    assert_eq!(lines, N);
    assert!(seen.iter().all(|s| *s));

    let mut bigger_lines = 0u64;
    let bigger_args = dump(&bigger);
    let (code, bigger_kib) = peak_rss(&strs(&bigger_args), |_| bigger_lines += 1);
    assert_eq!(code, Some(0));
    assert_eq!(bigger_lines, FOUR_N);

    let (code, verify_kib) = peak_rss(&["inspect", "--store", big.to_str().unwrap(), "verify"], |_| {});
    assert_eq!(code, Some(0));
    eprintln!(
        "peak RSS (KiB): dump of 1,000 fingerprints {small_kib}, of {N} {big_kib}, of {FOUR_N} {bigger_kib}; \
         verify of {N} {verify_kib}"
    );
    assert!(
        big_kib < small_kib + 32 * 1024,
        "dump of {N}: {big_kib} KiB, of 1,000: {small_kib} KiB"
    );
    assert!(
        bigger_kib < big_kib + 24 * 1024,
        "dump of {FOUR_N}: {bigger_kib} KiB, of {N}: {big_kib} KiB"
    );
    assert!(verify_kib < small_kib + 32 * 1024, "verify of {N}: {verify_kib} KiB");
}

/// What the fixture stores hold: per partition, its generations as (epoch, first input offset,
/// values with their first-seen offsets; `None`: not known, re-learned from an output record
/// without provenance). Fingerprint source `value`.
type FixtureGeneration = (u64, i64, Vec<(String, Option<i64>)>);

fn fixture_content() -> Vec<(i32, Vec<FixtureGeneration>)> {
    let values = |range: std::ops::Range<i64>| -> Vec<(String, Option<i64>)> {
        range.map(|o| (format!("fixture-{o}"), Some(o))).collect()
    };
    let mut current = values(110..115);
    current.push(("fixture-relearned".into(), None));
    vec![
        (0, vec![(4, 100, values(100..110)), (5, 110, current)]),
        (3, vec![(1, 0, vec![("fixture-p3".into(), Some(0))])]),
    ]
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("fixtures")
}

/// Writes `tests/fixtures/store-format-<FORMAT_VERSION>` with [`fixture_content`], using this
/// build's store code. Run it once per format version, before the format changes (see
/// migrations/README.md): `cargo test --test inspect write_format_fixture -- --ignored`.
#[test]
#[ignore]
fn write_format_fixture() {
    use kafka_dedup::fingerprint::{Fingerprinter, OwnedRecord, Source};
    let path = fixtures_dir().join(format!("store-format-{FORMAT_VERSION}"));
    assert!(
        !path.exists(),
        "{} exists: a fixture is written once, by the build of its format",
        path.display()
    );
    let f = Fingerprinter::new(Source::Value);
    let (store, _) = Store::open_for_run(&path, &identity("value")).unwrap();
    let mut partitions = Vec::new();
    for (p, gens) in fixture_content() {
        let mut built = Vec::new();
        for (epoch, in_start, values) in gens {
            let out: Positions = [(p, in_start)].into_iter().collect();
            let mut g = Generation::new(epoch, in_start, out, 0);
            for (v, offset) in values {
                let fp = f
                    .fingerprint(&OwnedRecord {
                        key: None,
                        value: Some(v.into_bytes()),
                        headers: Vec::new(),
                    })
                    .unwrap();
                let rel = g.relative_offset(offset);
                g.table.insert(fp.0, rel);
            }
            built.push(g);
        }
        partitions.push((p, built));
    }
    let writes: Vec<PartitionWrite<'_>> = partitions
        .iter()
        .map(|(p, gens)| {
            let last = gens.last().unwrap();
            let end = last.in_start + last.len() as i64;
            PartitionWrite {
                partition: *p,
                epoch: last.epoch,
                ckpt: format!("fixture-{p}"),
                committed_offset: end,
                out_covered: [(*p, end)].into_iter().collect(),
                generations: gens.iter().collect(),
                clean: true,
                clock: None,
            }
        })
        .collect();
    store.save(&writes).unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Every committed fixture store (`tests/fixtures/store-format-N`, written by the build of format
/// N) is read by this build: a copy is migrated when N is older, then `verify` passes and every
/// value of [`fixture_content`] is found where it was stored. A fixture must exist for every
/// format older than this build's (migrations/README.md, checklist).
#[test]
fn committed_fixtures_read_or_migrate() {
    let mut versions = Vec::new();
    for e in std::fs::read_dir(fixtures_dir()).expect("tests/fixtures") {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(v) = name.strip_prefix("store-format-").and_then(|v| v.parse::<u32>().ok()) {
            versions.push(v);
        }
    }
    versions.sort();
    // Every format before this build's (none while FORMAT_VERSION is 1).
    for v in (1..).take_while(|v| *v < FORMAT_VERSION) {
        assert!(
            versions.contains(&v),
            "no fixture of format {v}: tests/fixtures/store-format-{v} (migrations/README.md)"
        );
    }
    assert!(!versions.is_empty(), "no fixture store under tests/fixtures");
    let dir = tempfile::tempdir().unwrap();
    for v in versions {
        let copy = dir.path().join(format!("format-{v}"));
        copy_dir(&fixtures_dir().join(format!("store-format-{v}")), &copy);
        let store = copy.to_str().unwrap();
        if v < FORMAT_VERSION {
            let out = kd(&["migrate", "--store", store]);
            assert_eq!(out.status.code(), Some(0), "format {v}: {}", text(&out.stderr));
        }
        let out = kd(&["inspect", "--store", store, "verify"]);
        assert_eq!(out.status.code(), Some(0), "format {v}: {}", text(&out.stdout));
        let stats = kd_json(&["inspect", "--store", store, "--json", "stats"]);
        assert_eq!(stats["format_version"], FORMAT_VERSION);
        for (p, gens) in fixture_content() {
            let n = gens.len();
            for (i, (epoch, _, values)) in gens.into_iter().enumerate() {
                for (value, offset) in values {
                    let l = kd_json(&["inspect", "--store", store, "--json", "lookup", "--value", &value]);
                    assert_eq!(
                        l["holdings"],
                        serde_json::json!([{"partition": p, "generation": epoch, "age": n - 1 - i, "first_seen_offset": offset}]),
                        "format {v}, value {value}"
                    );
                }
            }
        }
        let l = kd_json(&[
            "inspect",
            "--store",
            store,
            "--json",
            "lookup",
            "--value",
            "fixture-absent",
        ]);
        assert_eq!(l["held"], false);
    }
}

/// Issue 23, item 5: a store whose last snapshot is a clean hand-over from an earlier run, then
/// a run that forwards more and is killed before its first periodic checkpoint. Offline,
/// `lookup` of a record the killed run forwarded is not held, and must say why: the answer is
/// `incomplete` (the killed run's live-marker file shows the store was not closed cleanly).
#[test]
fn a_killed_run_after_a_clean_restart_makes_the_offline_answer_incomplete() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("killed-in"), unique("killed-out"));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    let values = |r: std::ops::Range<u64>| r.map(|v| (0, v)).collect::<Vec<_>>();
    kafka().produce_values(&input, &values(0..10), Duration::ZERO);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    let mut filter = spec.start(dir.path());
    filter.wait_metric(FORWARDED, &[], 10.0, Duration::from_secs(60));
    assert!(filter.terminate().success(), "{}", filter.logs());

    spec.interval = "1h";
    let mut filter = spec.start(dir.path());
    filter.wait_ready(Duration::from_secs(60));
    kafka().produce_values(&input, &values(10..20), Duration::ZERO);
    filter.wait_metric(FORWARDED, &[], 10.0, Duration::from_secs(60));
    filter.kill9();

    let store = spec.store.to_str().unwrap();
    let old = kd_json(&["inspect", "--json", "--store", store, "lookup", "--value", "5"]);
    assert_eq!(old["held"], true, "{old:#}");
    let new = kd_json(&["inspect", "--json", "--store", store, "lookup", "--value", "15"]);
    assert_eq!(new["held"], false, "{new:#}");
    let incomplete = new["incomplete"]
        .as_array()
        .unwrap_or_else(|| panic!("no incomplete note: {new:#}"));
    assert_eq!(incomplete.len(), 1, "{new:#}");
    assert_eq!(incomplete[0]["partition"], 0, "{new:#}");
    assert!(
        incomplete[0]["reason"].as_str().unwrap().contains("not closed cleanly"),
        "{new:#}"
    );
    let out = kd(&["inspect", "--store", store, "lookup", "--value", "15"]);
    assert!(
        text(&out.stdout).contains("not closed cleanly"),
        "{}",
        text(&out.stdout)
    );
}
