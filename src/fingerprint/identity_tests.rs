//! Identities of several parts (`source = [...]`) and JSON members left out (`ignore`), issue 27.

use super::tests::rec;
use super::*;

fn source(text: &str) -> Source {
    Source::try_from(text.to_string()).unwrap()
}

fn fp(identity: &Source, value: &str) -> Result<Fingerprint, Unfingerprintable> {
    Fingerprinter::new(identity.clone()).fingerprint(&rec(None, Some(value), &[]))
}

const TENANT_EVENT: &str = r#"["json:/tenant_id","json:/event_id"]"#;

#[test]
fn a_tuple_is_one_identity() {
    let id = source(TENANT_EVENT);
    let a = fp(&id, r#"{"tenant_id":"t1","event_id":"e1","n":1}"#).unwrap();
    assert_eq!(
        a,
        fp(&id, r#"{ "event_id": "e1", "n": 2, "tenant_id": "t1" }"#).unwrap(),
        "same tuple"
    );
    assert_ne!(
        a,
        fp(&id, r#"{"tenant_id":"t2","event_id":"e1"}"#).unwrap(),
        "other tenant"
    );
    assert_ne!(
        a,
        fp(&id, r#"{"tenant_id":"t1","event_id":"e2"}"#).unwrap(),
        "other event"
    );
    assert_ne!(
        a,
        fp(
            &source(r#"["json:/event_id","json:/tenant_id"]"#),
            r#"{"tenant_id":"t1","event_id":"e1"}"#
        )
        .unwrap(),
        "the parts' order is part of the identity"
    );
    // No part's bytes run into the next one.
    assert_ne!(
        fp(&id, r#"{"tenant_id":"ab","event_id":"c"}"#).unwrap(),
        fp(&id, r#"{"tenant_id":"a","event_id":"bc"}"#).unwrap()
    );
}

#[test]
fn key_with_a_header() {
    let id = source(r#"["key","header:event-id"]"#);
    let f = Fingerprinter::new(id);
    let r = |k: &str, h: &str| rec(Some(k), Some("any"), &[("event-id", Some(h))]);
    assert_eq!(f.fingerprint(&r("k1", "e1")), f.fingerprint(&r("k1", "e1")));
    assert_ne!(
        f.fingerprint(&r("k1", "e1")).unwrap(),
        f.fingerprint(&r("k2", "e1")).unwrap()
    );
    assert_ne!(
        f.fingerprint(&r("k1", "e1")).unwrap(),
        f.fingerprint(&r("k1", "e2")).unwrap()
    );
}

/// A part without identity makes the record have none, with the part named; the metric label
/// stays the part's own reason.
#[test]
fn a_missing_part_is_named() {
    let id = source(TENANT_EVENT);
    let why = fp(&id, r#"{"tenant_id":"t1","event_id":null}"#).unwrap_err();
    assert_eq!(why.reason(), "null_id");
    assert_eq!(why.to_string(), "part 2 (json:/event_id): the id is null");
    let why = fp(&id, r#"{"event_id":"e1"}"#).unwrap_err();
    assert_eq!(why.reason(), "pointer_not_found");
    assert!(why.to_string().starts_with("part 1 (json:/tenant_id)"), "{why}");
    let tombstone = Fingerprinter::new(id)
        .fingerprint(&rec(Some("k"), None, &[]))
        .unwrap_err();
    assert_eq!(tombstone.reason(), "absent");
}

/// A single string keeps its meaning and fingerprints; a one-element list is that string.
#[test]
fn a_single_source_is_unchanged() {
    assert_eq!(source(r#"["json:/event_id"]"#), source("json:/event_id"));
    assert_eq!(Source::ignoring(source("value"), &[]).unwrap(), Source::Value);
    let doc = r#"{"event_id":"e1"}"#;
    assert_eq!(
        fp(&source(r#"["json:/event_id"]"#), doc),
        fp(&source("json:/event_id"), doc)
    );
}

/// The text form kept in the store parses back to the same identity, for every kind.
#[test]
fn text_forms_round_trip() {
    let ignoring = Source::ignoring(source("json:"), &["/trace".into(), "/processed_at".into()]).unwrap();
    let composite_ignoring = Source::ignoring(source(TENANT_EVENT), &["/event_id/at".into()]).unwrap();
    for id in [
        Source::Value,
        source("header:event-id"),
        source("json:/a~1b"),
        source(TENANT_EVENT),
        source(r#"["key","header:a,b","json:/x"]"#),
        ignoring.clone(),
        composite_ignoring,
    ] {
        let text = id.to_string();
        assert_eq!(Source::try_from(text.clone()).unwrap(), id, "{text}");
    }
    assert_eq!(
        ignoring.to_string(),
        r#"{"source":"json:","ignore":["/processed_at","/trace"]}"#
    );
    assert_eq!(source(TENANT_EVENT).to_string(), TENANT_EVENT);
}

#[test]
fn bad_identities_are_refused_with_a_reason() {
    let err = |text: &str| Source::try_from(text.to_string()).unwrap_err().to_string();
    assert!(err("[]").contains("empty list"), "{}", err("[]"));
    assert!(
        err(r#"["json:/a", ["key"]]"#).contains("[\"json:/a\""),
        "{}",
        err(r#"["json:/a", ["key"]]"#)
    );
    assert!(err(r#"["json:/a","nope"]"#).contains("\"nope\" is not a fingerprint source"));
    let ignoring = |s: &str, ignore: &[&str]| {
        Source::ignoring(source(s), &ignore.iter().map(|p| p.to_string()).collect::<Vec<_>>())
            .unwrap_err()
            .to_string()
    };
    assert!(ignoring("value", &["/a"]).contains("has no json: part"));
    assert!(ignoring("json:", &["a"]).contains("starts with '/'"));
    assert!(ignoring("json:/event/id", &["/event"]).contains("would leave out the id"));
    assert!(ignoring("json:/event_id", &["/event_id"]).contains("would leave out the id"));
}

#[test]
fn ignored_members_do_not_count() {
    let id = Source::ignoring(source("json:"), &["/processed_at".into(), "/trace/span".into()]).unwrap();
    let a = fp(
        &id,
        r#"{"id":7,"processed_at":"12:00","trace":{"span":"s1","root":"r"}}"#,
    )
    .unwrap();
    assert_eq!(
        a,
        fp(
            &id,
            r#"{"trace":{"root":"r","span":"s2"},"id":7,"processed_at":"12:01"}"#
        )
        .unwrap(),
        "a replay stamped again"
    );
    assert_eq!(
        a,
        fp(&id, r#"{"id":7,"trace":{"root":"r"}}"#).unwrap(),
        "the members absent"
    );
    assert_ne!(
        a,
        fp(
            &id,
            r#"{"id":8,"processed_at":"12:00","trace":{"span":"s1","root":"r"}}"#
        )
        .unwrap()
    );
    assert_ne!(
        a,
        fp(
            &id,
            r#"{"id":7,"processed_at":"12:00","trace":{"span":"s1","root":"x"}}"#
        )
        .unwrap()
    );
    // Without `ignore`, the stamp is part of the event.
    assert_ne!(
        fp(&source("json:"), r#"{"id":7,"processed_at":"12:00"}"#).unwrap(),
        fp(&source("json:"), r#"{"id":7,"processed_at":"12:01"}"#).unwrap()
    );
}

/// `ignore` applies below a json part's target, relative to the document's root; array
/// elements are left out by index without shifting the others' indices.
#[test]
fn ignore_below_a_target_and_in_arrays() {
    let id = Source::ignoring(
        source(r#"["json:/tenant","json:/event"]"#),
        &["/event/seen_at".into(), "/event/tags/0".into()],
    )
    .unwrap();
    let a = fp(&id, r#"{"tenant":"t","event":{"id":1,"seen_at":1,"tags":["x","y"]}}"#).unwrap();
    assert_eq!(
        a,
        fp(&id, r#"{"tenant":"t","event":{"id":1,"seen_at":2,"tags":["z","y"]}}"#).unwrap()
    );
    assert_ne!(
        a,
        fp(&id, r#"{"tenant":"t","event":{"id":1,"seen_at":2,"tags":["x","w"]}}"#).unwrap()
    );
}

proptest::proptest! {
    /// Composite identities never collide across part boundaries: two tuples of strings share
    /// a fingerprint only when they are equal.
    #[test]
    fn composite_parts_never_run_together(a in "[a-c]{0,3}", b in "[a-c]{0,3}", c in "[a-c]{0,3}", d in "[a-c]{0,3}") {
        let id = source(r#"["json:/a","json:/b"]"#);
        let doc = |x: &str, y: &str| format!(r#"{{"a":"{x}","b":"{y}"}}"#);
        let (one, two) = (fp(&id, &doc(&a, &b)), fp(&id, &doc(&c, &d)));
        if one.is_ok() && two.is_ok() {
            proptest::prop_assert_eq!(one == two, (&a, &b) == (&c, &d));
        }
    }

    /// `ignore` is order-insensitive (the identity and its fingerprints), and white space and
    /// member order of the document change nothing, as for the rest of the canonical form.
    #[test]
    fn ignore_is_order_and_whitespace_insensitive(x in 0u32..5, y in 0u32..5, stamp in "[0-9]{1,4}", spaced in proptest::bool::ANY) {
        let one = Source::ignoring(source("json:"), &["/at".into(), "/trace".into()]).unwrap();
        let two = Source::ignoring(source("json:"), &["/trace".into(), "/at".into(), "/at".into()]).unwrap();
        proptest::prop_assert_eq!(&one, &two);
        let compact = format!(r#"{{"x":{x},"at":"{stamp}","y":{y},"trace":[1]}}"#);
        let other = if spaced {
            format!("{{ \"trace\" : [ 1 ] ,\n \"y\" : {y}, \"x\":{x} }}")
        } else {
            format!(r#"{{"y":{y},"x":{x},"at":"0"}}"#)
        };
        proptest::prop_assert_eq!(fp(&one, &compact).unwrap(), fp(&two, &other).unwrap());
    }
}
