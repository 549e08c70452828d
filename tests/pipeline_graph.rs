//! The files of `src/pipeline/` import each other one way only (issue 28; the layers are drawn in
//! docs/ARCHITECTURE.md, "The pipeline's import graph"). This test reads the sources, builds the
//! graph of `use super::X` / `super::X::` / `crate::pipeline::X` references between sibling
//! files, and fails on a cycle. `mod.rs` (the parent: start-up, the poll loop, the shared error
//! types) is left out: every child may use it and it declares them all.
//!
//! No broker needed: it only reads files.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Edges allowed to close a cycle, each with the move that removes it. Keep this list empty:
/// a new entry needs a justification and the move that will remove it. (The last one, `mode →
/// checkpoint`, went when the checkpoint's state moved into `checkpoint_state.rs`, below `mode`.)
const ALLOWED: &[(&str, &str)] = &[];

/// The sibling modules each file of `src/pipeline/` refers to, by file stem.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/pipeline");
    let mut sources = BTreeMap::new();
    for entry in fs::read_dir(&dir).expect("src/pipeline") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        if stem == "mod" {
            continue;
        }
        sources.insert(stem, fs::read_to_string(&path).expect("readable"));
    }
    let names: BTreeSet<String> = sources.keys().cloned().collect();
    sources
        .iter()
        .map(|(stem, text)| {
            let deps = references(text)
                .into_iter()
                .filter(|m| names.contains(m) && m != stem)
                .collect();
            (stem.clone(), deps)
        })
        .collect()
}

/// The first path segments after `super::` or `crate::pipeline::` in `text`'s code (comments
/// and the `#[cfg(test)] mod tests` at the end left out), including inside `use super::{a::X, b}`.
fn references(text: &str) -> BTreeSet<String> {
    let code: String = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = BTreeSet::new();
    for prefix in ["super::", "crate::pipeline::"] {
        let mut rest = code.as_str();
        while let Some(i) = rest.find(prefix) {
            rest = &rest[i + prefix.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    found.insert(segment(item.trim()));
                }
            } else {
                found.insert(segment(rest));
            }
        }
    }
    found
}

/// The leading identifier of `s`.
fn segment(s: &str) -> String {
    s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// A cycle of `g`, if any, as the list of its files.
fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(n) {
            Some(1) => {
                let at = path.iter().position(|p| p == n).unwrap();
                let mut c = path[at..].to_vec();
                c.push(n.to_string());
                return Some(c);
            }
            Some(2) => return None,
            _ => {}
        }
        state.insert(n.to_string(), 1);
        path.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, g, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    g.keys().find_map(|n| visit(n, g, &mut state, &mut Vec::new()))
}

fn render(g: &BTreeMap<String, BTreeSet<String>>) -> String {
    g.iter()
        .map(|(n, d)| format!("  {n} -> {}", d.iter().cloned().collect::<Vec<_>>().join(", ")))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_pipeline_files_import_each_other_one_way() {
    let mut g = graph();
    for (from, to) in ALLOWED {
        let present = g.get_mut(*from).is_some_and(|d| d.remove(*to));
        assert!(
            present,
            "{from} -> {to} no longer exists: remove it from ALLOWED (and from docs/ARCHITECTURE.md)"
        );
    }
    if let Some(c) = cycle(&g) {
        panic!(
            "import cycle in src/pipeline: {}\ngraph:\n{}",
            c.join(" -> "),
            render(&g)
        );
    }
}

/// The reader sees what it should: without it the test above could pass on an empty graph.
#[test]
fn the_reader_finds_the_known_edges() {
    let g = graph();
    let has = |a: &str, b: &str| g.get(a).is_some_and(|d| d.contains(b));
    assert!(has("context", "filter"), "context holds the Filter:\n{}", render(&g));
    assert!(has("filter", "route"), "filter asks route:\n{}", render(&g));
    assert!(
        has("checkpoint", "filter"),
        "checkpoint drives the Filter:\n{}",
        render(&g)
    );
    assert!(
        !has("filter", "context"),
        "filter must not know the consumer context:\n{}",
        render(&g)
    );
    let refs = references("use super::{a::X, b};\n// use super::c::Y;\nfn f() { super::d::g() }\n");
    assert_eq!(refs, ["a", "b", "d"].iter().map(|s| s.to_string()).collect());
    let mut cyclic = BTreeMap::new();
    cyclic.insert("x".to_string(), BTreeSet::from(["y".to_string()]));
    cyclic.insert("y".to_string(), BTreeSet::from(["x".to_string()]));
    assert!(cycle(&cyclic).is_some());
}
