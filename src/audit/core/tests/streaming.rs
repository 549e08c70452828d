//! The audit's walk over long partitions: memory bounded by the horizon, the input read
//! lazily; and the horizon the audit measures with, from `[checkpoint]`.

use super::*;

/// Input records, one per millisecond, `n` of them, with a replay of the record 250 ms earlier
/// every 100 records.
fn long_input(n: i64) -> impl Iterator<Item = Result<AuditRecord, Infallible>> {
    (0..n).map(|i| {
        let event = if i % 100 == 99 { i - 250 } else { i };
        Ok(AuditRecord {
            offset: i,
            timestamp: Some(T0 + i),
            identity: Identity::Fingerprint(Fingerprint(event.max(0) as u128)),
            origin: None,
        })
    })
}

/// The filter's output for [`long_input`]: every record but the replays, with or without
/// provenance; input offsets for which `lost` is true left out.
fn long_output(
    n: i64,
    provenance: bool,
    lost: fn(i64) -> bool,
) -> impl Iterator<Item = Result<AuditRecord, Infallible>> {
    (0..n)
        .filter(move |i| i % 100 != 99 && !lost(*i))
        .enumerate()
        .map(move |(o, i)| {
            Ok(AuditRecord {
                offset: o as i64,
                timestamp: Some(T0 + i),
                identity: Identity::Fingerprint(Fingerprint(i as u128)),
                origin: provenance.then_some(Origin {
                    partition: 0,
                    offset: i,
                }),
            })
        })
}

/// The memory bound: the window holds about two horizons of input (one behind the newest match,
/// one ahead of the newest output record), whatever the length of the partition.
#[test]
fn memory_is_bounded_by_the_horizon() {
    let n = 200_000;
    let r = rules(Bounds::ALL, OnMissing::Forward);
    // Two records lost, and a gap of 30,000 (15 horizons), whose 300 replays are replays of
    // lost events.
    let lost = |i: i64| i == 50_000 || i == 150_001 || (100_000..130_000).contains(&i);
    for provenance in [false, true] {
        let a = match audit_partition(&r, long_input(n), long_output(n, provenance, lost)) {
            Ok(a) => a,
            Err(never) => match never {},
        };
        assert_eq!(found(&a), want(0, 2 + 30_000 - 300, 0, 0, (n / 100) as u64), "{a:#?}");
        // One record per ms: H_max = 2,000 records; 2 x H_max plus the record being matched.
        assert!(
            a.peak_window_records <= 2 * 2000 + 2,
            "provenance {provenance}: window {}",
            a.peak_window_records
        );
        assert!(a.peak_window_records >= 2000, "the window spans the horizon");
    }
}

/// The input is read no further than the range, and not ahead of the output by more than the
/// horizon.
#[test]
fn input_is_read_lazily() {
    use std::cell::Cell;
    let pulled = Cell::new(0i64);
    let counting = || {
        long_input(1_000_000).inspect(|r| {
            if let Ok(r) = r {
                pulled.set(r.offset);
            }
        })
    };
    let bounded = rules(
        Bounds {
            to_offset: 10_000,
            ..Bounds::ALL
        },
        OnMissing::Forward,
    );
    let a = match audit_partition(&bounded, counting(), long_output(20_000, true, |_| false)) {
        Ok(a) => a,
        Err(never) => match never {},
    };
    assert_eq!(pulled.get(), 9_999, "read up to the range's end");
    assert_eq!(a.input_records, 10_000);
    assert!(a.clean(), "{a:#?}");
    // ... and the output until its clock is H_max (2,000 records) past the range, give or take
    // the 256 records between two checks.
    assert!(
        (12_000..12_300).contains(&(a.output_records + 100)),
        "output read: {}",
        a.output_records
    );

    pulled.set(0);
    let r = rules(Bounds::ALL, OnMissing::Forward);
    let mut output = long_output(1_000_000, false, |_| false).take(1000);
    let mut a = Auditor::new(&r);
    let mut input = counting();
    for o in output.by_ref() {
        a.on_output(o.unwrap(), &mut input).unwrap();
    }
    assert!(
        pulled.get() <= 1010 + 2000,
        "the input is read at most H_max ahead of the output: {}",
        pulled.get()
    );
}

/// H_min and H_max from `[checkpoint]`, as the README states them.
#[test]
fn the_horizon_from_the_configuration() {
    let of = |interval: &str, generations: u32| {
        Horizon::of(&CheckpointConfig {
            interval: humantime::parse_duration(interval).unwrap(),
            generations,
        })
    };
    assert_eq!(
        of("20s", 2),
        Horizon {
            min_ms: 20_000,
            max_ms: 40_000
        }
    );
    assert_eq!(
        of("1m", 3),
        Horizon {
            min_ms: 120_000,
            max_ms: 180_000
        },
        "the defaults"
    );
    assert_eq!(Horizon::of(&CheckpointConfig::default()), of("1m", 3), "the defaults");
    assert_eq!(
        of("1s", 1),
        Horizon {
            min_ms: 0,
            max_ms: 1000
        },
        "one generation: no replay is sure to be dropped"
    );
}
