//! Tests of [`super`]: every metric described, named and rendered as documented.

use std::collections::{BTreeMap, BTreeSet};

use metrics_exporter_prometheus::PrometheusBuilder;

use super::*;
use crate::fingerprint::Unfingerprintable;

/// One sample of a scrape: its labels, sorted.
type Labels = BTreeMap<String, String>;

/// The samples of a Prometheus text scrape: name -> (labels -> value).
fn samples(text: &str) -> BTreeMap<String, BTreeMap<Labels, f64>> {
    let mut out: BTreeMap<String, BTreeMap<Labels, f64>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.strip_suffix('}').unwrap()),
            None => (series, ""),
        };
        let labels = labels
            .split(',')
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once('=').unwrap();
                (k.to_string(), v.trim_matches('"').to_string())
            })
            .collect();
        out.entry(name.to_string())
            .or_default()
            .insert(labels, value.parse().unwrap());
    }
    out
}

fn config(generations: u32, on_missing: &str) -> Config {
    let text = format!(
        "[input]\ntopic = \"in\"\n[output]\ntopic = \"out\"\n[fingerprint]\non_missing = \"{on_missing}\"\n\
         [checkpoint]\ngenerations = {generations}\n"
    );
    Config::from_toml_str(&text, Some(Default::default())).unwrap()
}

/// Every label set of the product of `dims` (label name, values).
fn product(dims: &[(&str, Vec<String>)]) -> BTreeSet<Labels> {
    let mut out = vec![Labels::new()];
    for (name, values) in dims {
        out = out
            .iter()
            .flat_map(|l| {
                values.iter().map(move |v| {
                    let mut l = l.clone();
                    l.insert(name.to_string(), v.clone());
                    l
                })
            })
            .collect();
    }
    out.into_iter().collect()
}

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| v.to_string()).collect()
}

/// What a process that was just assigned partitions 0 and 1 exports, before any record: the
/// recorder as `run` installs it, [`describe`], then [`PartitionMetrics::new`] per partition.
fn first_scrape(cfg: &Config) -> (PrometheusHandle, Vec<PartitionMetrics>) {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let partitions = metrics::with_local_recorder(&recorder, || {
        describe();
        vec![PartitionMetrics::new(0, cfg), PartitionMetrics::new(1, cfg)]
    });
    (handle, partitions)
}

/// Item 1 of issue 16: every counter is in the first scrape, at 0, with exactly its known
/// label values (for three generations and `on_missing = "drop"`).
#[test]
fn every_counter_is_in_the_first_scrape_at_zero_with_its_label_values() {
    let cfg = config(3, "drop");
    let (handle, _partitions) = first_scrape(&cfg);
    let scrape = samples(&render(&handle, |_| true));
    let partition = ("partition", strings(&["0", "1"]));
    let expected: BTreeMap<&str, BTreeSet<Labels>> = [
        (RECORDS_CONSUMED, product(std::slice::from_ref(&partition))),
        (RECORDS_FORWARDED, product(std::slice::from_ref(&partition))),
        (RECOVERY_SCANNED, product(std::slice::from_ref(&partition))),
        (
            DUPLICATES_DROPPED,
            product(&[partition.clone(), ("generation", strings(&["0", "1", "2"]))]),
        ),
        (
            UNFINGERPRINTABLE,
            product(&[
                partition.clone(),
                ("action", strings(&["drop"])),
                ("reason", strings(&UNFINGERPRINTABLE_REASONS)),
            ]),
        ),
        (
            OUT_OF_SCOPE,
            product(&[partition.clone(), ("reason", strings(&OUT_OF_SCOPE_REASONS))]),
        ),
        (CHECKPOINTS, product(&[("result", strings(&CHECKPOINT_RESULTS))])),
        (STORE_REBUILDS, product(&[("reason", strings(&STORE_REBUILD_REASONS))])),
        (
            POSITIONS_FROM_OUTPUT,
            product(&[("reason", strings(&POSITION_FROM_OUTPUT_REASONS))]),
        ),
        (SIDE_REFUSED, product(&[partition.clone(), ("side", strings(&SIDES))])),
        (
            OUTPUT_REFUSED,
            product(&[partition.clone(), ("action", strings(&OUTPUT_REFUSED_ACTIONS))]),
        ),
        (SKIPPED, product(std::slice::from_ref(&partition))),
        (INPUT_REWOUND, product(std::slice::from_ref(&partition))),
        (INPUT_RETAKEN, product(std::slice::from_ref(&partition))),
        (REGISTRY_UNAVAILABLE, product(std::slice::from_ref(&partition))),
        (RECOVERY_PANICS, product(std::slice::from_ref(&partition))),
        (STORE_WRITE_FAILURES, product(&[])),
        (
            CHANGELOG_FALLBACKS,
            product(&[("reason", strings(&crate::changelog::FALLBACK_REASONS))]),
        ),
        (CHANGELOG_LOADED_BYTES, product(&[])),
        (CHANGELOG_WRITTEN_BYTES, product(&[])),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        expected.keys().copied().collect::<BTreeSet<_>>(),
        COUNTERS.into_iter().collect::<BTreeSet<_>>(),
        "this test covers every counter"
    );
    for (name, label_sets) in &expected {
        let got = scrape
            .get(*name)
            .unwrap_or_else(|| panic!("{name} is missing from the first scrape"));
        assert_eq!(&got.keys().cloned().collect::<BTreeSet<_>>(), label_sets, "{name}");
        assert!(got.values().all(|v| *v == 0.0), "{name}: {got:?}");
    }
    // The oldest generation is named, the start time is set, the histograms are there.
    let oldest = &scrape[OLDEST_GENERATION];
    assert_eq!(oldest.len(), 1, "{oldest:?}");
    assert_eq!(oldest.keys().next().unwrap()["generation"], "2");
    assert!(
        scrape[START_TIME].values().all(|t| *t > 1.7e9),
        "{:?}",
        scrape[START_TIME]
    );
    for h in [
        CHECKPOINT_DURATION,
        RECOVERY_DURATION,
        DUPLICATE_DISTANCE,
        HANDOVER_DURATION,
    ] {
        assert!(scrape.contains_key(&format!("{h}_count")), "{h} is missing");
    }
}

/// [`COUNTERS`] lists every counter name defined in this file.
#[test]
fn counters_lists_every_counter_of_this_file() {
    let defined: BTreeSet<&str> = include_str!("../telemetry.rs")
        .lines()
        .filter(|l| l.starts_with("pub const ") && l.contains(": &str = \""))
        .filter_map(|l| l.split('"').nth(1))
        .filter(|name| name.ends_with("_total"))
        .collect();
    assert_eq!(defined, COUNTERS.into_iter().collect::<BTreeSet<_>>());
}

/// Every reason a record can lack a fingerprint for is registered at 0.
#[test]
fn every_unfingerprintable_reason_is_known() {
    for why in [
        Unfingerprintable::Absent,
        Unfingerprintable::NotJson(String::new()),
        Unfingerprintable::PointerNotFound,
    ] {
        assert!(UNFINGERPRINTABLE_REASONS.contains(&why.reason()), "{why:?}");
    }
}

/// A partition this process no longer owns leaves the scrape, with every series of it; the
/// others and the process-wide series stay; owned again, it shows its counters where they
/// were.
#[test]
fn a_released_partition_leaves_the_scrape_and_comes_back_with_its_counts() {
    let (handle, partitions) = first_scrape(&config(2, "forward"));
    partitions[1].consumed.increment(5);
    partitions[1].unfingerprintable(OnMissing::Forward, "absent");
    let with_both = render(&handle, |_| true);
    let only_0 = render(&handle, |p| p == 0);
    let has = |text: &str, p: &str| text.lines().any(|l| l.contains(&format!("partition=\"{p}\"")));
    assert!(has(&with_both, "1") && has(&only_0, "0"), "{only_0}");
    assert!(!has(&only_0, "1"), "{only_0}");
    let (all, kept) = (samples(&with_both), samples(&only_0));
    for (name, series) in &all {
        let expected: BTreeMap<&Labels, &f64> = series
            .iter()
            .filter(|(l, _)| l.get("partition").is_none_or(|p| p == "0"))
            .collect();
        let got: BTreeMap<&Labels, &f64> = kept.get(name).into_iter().flatten().collect();
        assert_eq!(got, expected, "{name}");
    }
    let back = samples(&render(&handle, |_| true));
    let one = |name: &str, extra: &[(&str, &str)]| {
        let mut l = Labels::from([("partition".to_string(), "1".to_string())]);
        l.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        back[name][&l]
    };
    assert_eq!(one(RECORDS_CONSUMED, &[]), 5.0);
    assert_eq!(
        one(UNFINGERPRINTABLE, &[("action", "forward"), ("reason", "absent")]),
        1.0
    );
}

#[test]
fn partition_label_of_a_sample_line() {
    assert_eq!(partition_of("a_total{partition=\"12\"} 3\n"), Some(12));
    assert_eq!(partition_of("a_total{generation=\"1\",partition=\"0\"} 1"), Some(0));
    assert_eq!(partition_of("a{version=\"0.1.0\"} 1"), None);
    assert_eq!(partition_of("a 1"), None);
    assert_eq!(partition_of("# HELP a{partition=\"1\"} x"), None);
}

/// `Progress::since`: the counts between two reads, field by field; an `earlier` read after
/// `self` (a line logged from another read) gives 0, never a wrapped count.
#[test]
fn progress_since_counts_between_two_reads() {
    let p = |consumed, forwarded, replays_dropped, unfingerprintable, retaken| Progress {
        consumed,
        forwarded,
        replays_dropped,
        unfingerprintable,
        retaken,
    };
    let table = [
        (p(0, 0, 0, 0, 0), p(0, 0, 0, 0, 0), p(0, 0, 0, 0, 0)),
        (p(1100, 1000, 100, 0, 0), p(0, 0, 0, 0, 0), p(1100, 1000, 100, 0, 0)),
        (p(1100, 1000, 100, 3, 0), p(600, 500, 100, 1, 0), p(500, 500, 0, 2, 0)),
        (
            p(2250, 100, 150, 0, 1000),
            p(1050, 0, 50, 0, 0),
            p(1200, 100, 100, 0, 1000),
        ),
        (p(5, 5, 0, 0, 0), p(7, 6, 1, 1, 1), p(0, 0, 0, 0, 0)),
    ];
    for (now, earlier, want) in table {
        assert_eq!(now.since(earlier), want, "{now:?} since {earlier:?}");
    }
    let totals = Totals::default();
    for _ in 0..3 {
        Totals::bump(&totals.consumed);
    }
    Totals::bump(&totals.forwarded);
    Totals::bump(&totals.duplicates);
    Totals::bump(&totals.unfingerprintable);
    Totals::bump(&totals.retaken);
    assert_eq!(totals.progress(), p(3, 1, 1, 1, 1));
}
