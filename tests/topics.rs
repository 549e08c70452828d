//! Issue 23 item 4: topics deleted and created again while kafka-dedup runs. With two instances
//! in the group, each topic kind (input, output, a side topic, the global scope's route topic) is
//! deleted and recreated under them: both must say so (`/readyz` 503 naming the topic), not go on
//! silently (a recreated input was read from the old topic's offsets: its first records skipped)
//! nor die without a word (librdkafka 2.12.1 crashed in its metadata cache on tansu).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

const FORWARDED: &str = "kafka_dedup_records_forwarded_total";

/// Which topic a test deletes and creates again.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Input,
    Output,
    Duplicates,
    Route,
}

/// Two instances on 2-partition topics; 200 records (100 values, each twice, so the duplicates
/// topic has copies too), then `kind`'s topic deleted and created again, and 40 records (20
/// values twice) more: every partition of the new topic ends below the old one's end.
fn deleted_and_recreated(kind: Kind, dir: &Path) {
    let name = format!("{kind:?}").to_lowercase();
    let [input, output, side, route] = ["in", "out", "dups", "route"].map(|t| unique(&format!("recreated-{name}-{t}")));
    let k = kafka();
    for t in [&input, &output, &side, &route] {
        k.create_topic(t, 2);
    }
    let mut spec = FilterSpec::new(&input, &output, dir);
    spec.env
        .push(("KAFKA_DEDUP__OUTPUT__DUPLICATES_TOPIC".into(), side.clone()));
    if matches!(kind, Kind::Route) {
        spec.fingerprint =
            format!("[fingerprint]\nsource = \"value\"\nscope = \"global\"\nroute_topic = \"{route}\"\n");
    }
    let mut spec_b = spec.clone();
    spec_b.store = dir.join("store-b");
    let mut filters = [spec.start(dir), spec_b.start(dir)];
    for f in &mut filters {
        f.wait_ready(Duration::from_secs(60));
    }
    let records: Vec<(i32, u64)> = (0..200).map(|v| ((v % 2) as i32, v % 100)).collect();
    k.produce_values(&input, &records, Duration::ZERO);
    let deadline = Instant::now() + Duration::from_secs(60);
    while filters.iter().map(|f| metric(&f.scrape(), FORWARDED, &[])).sum::<f64>() < 100.0 {
        assert!(Instant::now() < deadline, "not forwarded:\n{}", filters[0].logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    let topic = match kind {
        Kind::Input => &input,
        Kind::Output => &output,
        Kind::Duplicates => &side,
        Kind::Route => &route,
    };
    // Every copy acknowledged, and the watcher's next look has seen the ends (it looks every 5 s).
    std::thread::sleep(Duration::from_secs(6));
    k.delete_topic(topic);
    k.create_topic(topic, 2);
    let more: Vec<(i32, u64)> = (0..40).map(|v| ((v % 2) as i32, 1000 + v % 20)).collect();
    k.produce_values(&input, &more, Duration::ZERO);
    let deadline = Instant::now() + Duration::from_secs(30);
    for f in &mut filters {
        loop {
            assert!(f.running(), "kafka-dedup exited:\n{}", f.logs());
            let answer = http_get(&f.http, "/readyz");
            if let Some((503, body)) = &answer {
                if body.contains(&format!("topic \\\"{topic}\\\"")) {
                    assert!(body.contains("created again") || body.contains("deleted"), "{body}");
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "/readyz does not name the recreated topic {topic}: {answer:?}\n{}",
                f.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(f.logs().contains(&format!("topic \"{topic}\"")), "{}", f.logs());
    }
}

#[test]
fn an_input_topic_deleted_and_recreated_is_named() {
    deleted_and_recreated(Kind::Input, tempfile::tempdir().unwrap().path());
}

#[test]
fn an_output_topic_deleted_and_recreated_is_named() {
    deleted_and_recreated(Kind::Output, tempfile::tempdir().unwrap().path());
}

#[test]
fn a_side_topic_deleted_and_recreated_is_named() {
    deleted_and_recreated(Kind::Duplicates, tempfile::tempdir().unwrap().path());
}

#[test]
fn a_route_topic_deleted_and_recreated_is_named() {
    deleted_and_recreated(Kind::Route, tempfile::tempdir().unwrap().path());
}
