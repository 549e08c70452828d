//! Memory accounting: bytes of resident memory per held fingerprint, at 1M and 10M.
//!
//! Each case runs in a fresh child process (this binary re-executed), which reads its resident
//! set size (`/proc/self/statm`) before and after inserting N distinct fingerprints, and its
//! peak (`VmHWM`) after. Cases:
//! - `grown`: one [`FingerprintTable`] from empty, growing as records arrive (the first interval
//!   after a start, or a rate that keeps rising);
//! - `presized`: a table sized as a rotation sizes the next generation (previous count + 1/8),
//!   the steady state of a constant rate;
//! - `generations`: N held in two live generations (N/2 frozen, N/2 current, presized).
//!
//! Figure: (RSS after - RSS before) / N. `cargo bench --bench memory`; BENCHMARKS.md.

use kafka_dedup::table::FingerprintTable;

#[path = "support/mod.rs"]
mod support;
use support::{fp, peak_rss_bytes, rss_bytes};

const CASES: [&str; 3] = ["grown", "presized", "generations"];
const SIZES: [u64; 2] = [1_000_000, 10_000_000];

fn child(case: &str, n: u64) {
    let before = rss_bytes();
    let peak_before = peak_rss_bytes();
    let (held, heap) = match case {
        "grown" => {
            let mut t = FingerprintTable::default();
            for i in 0..n {
                t.insert(fp(7, i), i as u32);
            }
            let r = (t.len(), t.heap_bytes());
            std::mem::forget(t);
            r
        }
        "presized" => {
            let t = support::table(7, n);
            let r = (t.len(), t.heap_bytes());
            std::mem::forget(t);
            r
        }
        "generations" => {
            let g = support::generations(n);
            let r = (g.total_len(), g.iter().map(|g| g.table.heap_bytes()).sum());
            std::mem::forget(g);
            r
        }
        _ => panic!("unknown case {case}"),
    };
    let after = rss_bytes();
    if std::env::var("KD_MEMORY_THP").is_ok() {
        let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
        eprintln!(
            "{}",
            rollup
                .lines()
                .filter(|l| l.contains("AnonHuge") || l.starts_with("Rss"))
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    let peak = peak_rss_bytes();
    println!(
        "{case} {n} {held} {} {} {}",
        after.saturating_sub(before),
        heap,
        peak.saturating_sub(peak_before.min(before))
    );
}

fn main() {
    if let (Ok(case), Ok(n)) = (std::env::var("KD_MEMORY_CASE"), std::env::var("KD_MEMORY_N")) {
        child(&case, n.parse().expect("a count"));
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    println!("memory per held fingerprint (RSS growth / fingerprints; a fingerprint is 16 bytes)");
    println!(
        "{:<12} {:>12} {:>14} {:>14} {:>16}",
        "case", "fingerprints", "RSS B/fp", "heap B/fp", "peak RSS B/fp"
    );
    for n in SIZES {
        for case in CASES {
            let out = std::process::Command::new(&exe)
                .env("KD_MEMORY_CASE", case)
                .env("KD_MEMORY_N", n.to_string())
                .output()
                .expect("child runs");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let text = String::from_utf8_lossy(&out.stdout);
            let f: Vec<u64> = text
                .split_whitespace()
                .skip(1)
                .map(|s| s.parse().unwrap_or(0))
                .collect();
            let (held, rss, heap, peak) = (f[1] as f64, f[2] as f64, f[3] as f64, f[4] as f64);
            println!(
                "{case:<12} {n:>12} {:>14.1} {:>14.1} {:>16.1}",
                rss / held,
                heap / held,
                peak / held
            );
        }
    }
}
