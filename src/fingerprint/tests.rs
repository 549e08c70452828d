use super::*;

/// A record with text key, value and headers (`None`: null). Shared with the identity tests.
pub(super) fn rec(key: Option<&str>, value: Option<&str>, headers: &[(&str, Option<&str>)]) -> OwnedRecord {
    OwnedRecord {
        key: key.map(|k| k.as_bytes().to_vec()),
        value: value.map(|v| v.as_bytes().to_vec()),
        headers: headers
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec())))
            .collect(),
    }
}

fn fp(source: &str, r: &OwnedRecord) -> Result<Fingerprint, Unfingerprintable> {
    Fingerprinter::new(Source::try_from(source.to_string()).unwrap()).fingerprint(r)
}

#[test]
fn null_differs_from_empty_and_boundaries_matter() {
    let kv = |k, v| fp("key_value", &rec(k, v, &[])).unwrap();
    assert_ne!(kv(Some("k"), None), kv(Some("k"), Some("")));
    assert_ne!(kv(None, Some("v")), kv(Some(""), Some("v")));
    assert_ne!(kv(Some("ab"), Some("c")), kv(Some("a"), Some("bc")));
    assert_eq!(kv(Some("ab"), Some("c")), kv(Some("ab"), Some("c")));
}

/// Issue 18: in the filter stage of the global scope, a record without fingerprint is
/// identified by its provenance in the routed-from topic: two copies of one input record
/// share it, two input records do not, and it is no value's fingerprint.
#[test]
fn a_stand_in_is_the_provenance_of_the_routed_from_topic() {
    let f = Fingerprinter::new(Source::Key).with_stand_in("events");
    let copy = |source: &str, value: &str| rec(None, Some(value), &[("kafka-dedup.source", Some(source))]);
    let first = f.stand_in(&copy("events/2/17", "a")).unwrap();
    assert_eq!(f.stand_in(&copy("events/2/17", "b")), Some(first), "a second copy");
    assert_ne!(f.stand_in(&copy("events/2/18", "a")), Some(first));
    assert_ne!(f.stand_in(&copy("events/1/17", "a")), Some(first));
    assert_eq!(f.stand_in(&copy("other/2/17", "a")), None, "another topic's provenance");
    assert_eq!(f.stand_in(&rec(None, Some("a"), &[])), None, "no provenance");
    assert_eq!(
        Fingerprinter::new(Source::Key).stand_in(&copy("events/2/17", "a")),
        None
    );
    let as_value = fp("value", &rec(None, Some("events/2/17"), &[])).unwrap();
    assert_ne!(as_value, first);
    // Issue 22, item 2: the stand-in a record is learned by when it is forwarded (from its own
    // coordinates) is the one recovery re-learns from the output copy's provenance.
    assert_eq!(stand_in_at("events", 2, 17), first);
    assert_ne!(stand_in_at("events", 2, 18), first);
    let long = "t".repeat(300);
    assert_eq!(
        Fingerprinter::new(Source::Value)
            .with_stand_in(&long)
            .stand_in(&copy(&format!("{long}/0/1"), "a")),
        Some(stand_in_at(&long, 0, 1)),
        "a topic name longer than the buffer"
    );
    // The stand-in's bytes never change (stores and running peers hold them): digests of this
    // encoding as it was first written.
    assert_eq!(format!("{:032x}", stand_in_at("events", 2, 17).0), STAND_IN_EVENTS_2_17);
}

/// `stand_in_at("events", 2, 17)`, computed by the first release that had stand-ins.
const STAND_IN_EVENTS_2_17: &str = "6f78526bdb3abab9ab1b82c84fef32d1";

#[test]
fn absent_sources_are_reported() {
    assert_eq!(fp("value", &rec(Some("k"), None, &[])), Err(Unfingerprintable::Absent));
    assert_eq!(fp("key", &rec(None, Some("v"), &[])), Err(Unfingerprintable::Absent));
    assert_eq!(
        fp("header:id", &rec(None, Some("v"), &[("other", Some("x"))])),
        Err(Unfingerprintable::Absent)
    );
    assert!(fp("key_value", &rec(None, None, &[])).is_ok());
}

#[test]
fn sources_do_not_collide() {
    let r = rec(Some("x"), Some("x"), &[("h", Some("x"))]);
    let all: Vec<_> = ["value", "key", "key_value", "header:h", "json:"]
        .iter()
        .filter_map(|s| fp(s, &r).ok())
        .collect();
    let mut dedup = all.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(all.len(), 4, "json of a non-JSON value has no fingerprint");
    assert_eq!(dedup.len(), all.len());
}

#[test]
fn header_source_uses_every_value_in_order_and_ignores_other_headers() {
    let a = fp("header:id", &rec(None, Some("v"), &[("id", Some("A"))])).unwrap();
    let a_extra = fp(
        "header:id",
        &rec(None, Some("w"), &[("trace", Some("t")), ("id", Some("A"))]),
    )
    .unwrap();
    let b = fp("header:id", &rec(None, Some("v"), &[("id", Some("B"))])).unwrap();
    assert_eq!(a, a_extra);
    assert_ne!(a, b);
    let ab = fp("header:id", &rec(None, None, &[("id", Some("A")), ("id", Some("B"))])).unwrap();
    let ba = fp("header:id", &rec(None, None, &[("id", Some("B")), ("id", Some("A"))])).unwrap();
    assert_ne!(ab, ba);
    assert_ne!(ab, a);
    let null_a = fp("header:id", &rec(None, None, &[("id", None), ("id", Some("A"))])).unwrap();
    let empty_a = fp("header:id", &rec(None, None, &[("id", Some("")), ("id", Some("A"))])).unwrap();
    assert_ne!(null_a, empty_a);
    assert_ne!(null_a, ab);
}

#[test]
fn json_pointer_is_canonical() {
    let f = |v: &str| fp("json:/event/id", &rec(None, Some(v), &[]));
    let a = f(r#"{"event":{"id":{"x":1,"y":"é"}},"ts":1}"#).unwrap();
    let b = f(r#"{ "ts" : 2, "event" : { "id" : { "y" : "\u00e9", "x" : 1 } } }"#).unwrap();
    assert_eq!(a, b);
    assert_ne!(
        f(r#"{"event":{"id":1}}"#).unwrap(),
        f(r#"{"event":{"id":1.0}}"#).unwrap()
    );
    assert_ne!(
        f(r#"{"event":{"id":12345678901234567890123}}"#).unwrap(),
        f(r#"{"event":{"id":12345678901234567890124}}"#).unwrap()
    );
    assert_eq!(f(r#"{"event":{}}"#), Err(Unfingerprintable::PointerNotFound));
    assert!(matches!(f("not json"), Err(Unfingerprintable::NotJson(_))));
    let arr = fp("json:/a/1", &rec(None, Some(r#"{"a":[10,20]}"#), &[])).unwrap();
    let twenty = fp("json:/a/0", &rec(None, Some(r#"{"a":[20]}"#), &[])).unwrap();
    assert_eq!(arr, twenty);
    // RFC 6901 array indexes: digits, no leading zero, no sign, within the array.
    let items = r#"{"a":[10,20,30,40,50,60,70,80,90,100,110]}"#;
    for (pointer, found) in [
        ("json:/a/0", true),
        ("json:/a/10", true),
        ("json:/a/11", false),
        ("json:/a/01", false),
        ("json:/a/00", false),
        ("json:/a/", false),
        ("json:/a/-1", false),
        ("json:/a/+1", false),
        ("json:/a/1a", false),
    ] {
        let got = fp(pointer, &rec(None, Some(items), &[]));
        assert_eq!(got.is_ok(), found, "{pointer}: {got:?}");
        if !found {
            assert_eq!(got, Err(Unfingerprintable::PointerNotFound), "{pointer}");
        }
    }
    let escaped = fp("json:/a~1b/c~0d", &rec(None, Some(r#"{"a/b":{"c~d":7}}"#), &[])).unwrap();
    let plain = fp("json:/x", &rec(None, Some(r#"{"x":7}"#), &[])).unwrap();
    assert_eq!(escaped, plain);
}

#[test]
fn source_parsing() {
    assert!(Source::try_from("json:no-slash".to_string()).is_err());
    assert!(Source::try_from("header:".to_string()).is_err());
    assert!(Source::try_from("json:/a~2".to_string()).is_err());
    assert_eq!(
        Source::try_from("json:".to_string()).unwrap(),
        Source::Json(String::new())
    );
    assert_eq!(
        Source::try_from("header:x".to_string()).unwrap().to_string(),
        "header:x"
    );
    let f: Fingerprint = "000000000000000000000000000000ff".parse().unwrap();
    assert_eq!(f.0, 255);
    assert_eq!(f.to_string(), "000000000000000000000000000000ff");
}

/// Fingerprints written by earlier versions, computed with the implementation before issue
/// 12 (recursive re-parsing canonical JSON, header names as text): stores and outputs hold
/// them, so every valid record must keep its fingerprint.
#[test]
fn known_fingerprints_are_kept() {
    /// Source, key, value, headers, the fingerprint.
    type Case<'a> = (
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        &'a [(&'a str, Option<&'a str>)],
        &'a str,
    );
    #[rustfmt::skip]
        let cases: [Case<'_>; 11] = [
            ("value", None, Some("450"), &[], "c07cae09189d72657018d38bc30f98ee"),
            ("value", None, Some(""), &[], "15d45c6fd9e206530e9e0c3408a60921"),
            ("key", Some("k1"), None, &[], "f7cec8891564cae138733304b6402828"),
            ("key_value", Some("k1"), None, &[], "00410405e806fa603b543bfdf1e3679e"),
            ("key_value", None, Some("v"), &[], "d5edca024c5c333d8c6a8604c723c845"),
            ("header:event-id", None, None, &[("event-id", Some("A"))], "f6db24e4533377ae414e4ffa3510444d"),
            ("header:event-id", None, None, &[("event-id", Some("A")), ("x", None), ("event-id", None)],
                "6697b74bece24dba9925146d633e60bc"),
            ("json:/event_id", None, Some(r#"{"event_id":"a1","n":1}"#), &[], "1586fa94f116807498d7331d61e70206"),
            ("json:/event_id", None,
                Some(r#"{"event_id":{"b":[1,1.0,-0,1e5,12345678901234567890123],"a":"\u00e9\n\"\u001f\/"},"n":1}"#),
                &[], "25b87cb7effcc04dabcbde024f0ba6ff"),
            ("json:", None, Some(r#" { "z" : [ true , false , null ] , "a" : { } , "m" : [ ] , "k" : "x\ty" } "#),
                &[], "aeb3dae7b14d1eba5f0c639b7fce6196"),
            ("json:/a/1", None, Some(r#"{"a":[10,{"d":1,"d":2,"c":"\ud83d\ude00"}]}"#), &[],
                "0bcc9e9e160b2433c522ae7b0558ac92"),
        ];
    for (source, key, value, headers, want) in cases {
        let got = fp(source, &rec(key, value, headers)).unwrap();
        assert_eq!(got.to_string(), want, "{source} {key:?} {value:?} {headers:?}");
    }
}

/// Values on both sides of the length the hasher encodes in place ([`super::hasher`]: one-shot
/// xxh3 up to its buffer, streaming beyond): the fingerprints of the streaming implementation
/// before it, kept whatever the value's length.
#[test]
fn long_values_keep_their_fingerprints() {
    let value = |n: usize| (0..n).map(|i| char::from(b'a' + (i % 26) as u8)).collect::<String>();
    let cases: [(&str, usize, &str); 9] = [
        ("value", 245, "6513aaced372f60ffe8b1755cf762599"),
        ("value", 246, "b62ed95805c8d1619bbc01463286e947"),
        ("value", 247, "f4552429c3edd7ec7c157c1c05d2eb40"),
        ("value", 1000, "b35618dfd599b0a1ce55f25d7689fb66"),
        ("value", 1029, "8528540412cc97dbb66197f176e29f17"),
        ("value", 1030, "4693fb5c026f6481dbfe2b5ad496cd38"),
        ("value", 1031, "25626259bd544b85061510efe4d7528a"),
        ("key_value", 1025, "bcd64030935f2ce5c03251f4e25c3771"),
        ("json:", 1100, "3a3199e0437a49a8907670466e0d57c5"),
    ];
    for (source, n, want) in cases {
        let v = if source == "json:" {
            format!("\"{}\"", value(n))
        } else {
            value(n)
        };
        let got = fp(source, &rec(Some("k"), Some(&v), &[])).unwrap();
        assert_eq!(got.to_string(), want, "{source} {n}");
    }
}

/// Issue 12, case 1: a null or empty id names no event (module documentation, the tables).
#[test]
fn null_and_empty_ids_are_not_identities() {
    let json = |v: &str| fp("json:/id", &rec(None, Some(v), &[]));
    assert_eq!(json(r#"{"id":null}"#), Err(Unfingerprintable::NullId));
    assert_eq!(json(r#"{"id" : null , "n":2}"#), Err(Unfingerprintable::NullId));
    assert_eq!(json(r#"{"id":""}"#), Err(Unfingerprintable::EmptyId));
    assert_eq!(
        fp("json:", &rec(None, Some(" null "), &[])),
        Err(Unfingerprintable::NullId)
    );
    assert_eq!(
        fp("json:", &rec(None, Some(r#""""#), &[])),
        Err(Unfingerprintable::EmptyId)
    );
    for id in [
        "0",
        "false",
        r#"" ""#,
        "[]",
        "{}",
        "[null]",
        r#"{"a":null}"#,
        r#""\u0000""#,
    ] {
        assert!(json(&format!(r#"{{"id":{id}}}"#)).is_ok(), "{id} is an identity");
    }
    assert_ne!(json(r#"{"id":[]}"#), json(r#"{"id":{}}"#));

    let header = |hs: &[(&str, Option<&str>)]| fp("header:id", &rec(None, Some("v"), hs));
    assert_eq!(header(&[("other", Some("x"))]), Err(Unfingerprintable::Absent));
    assert_eq!(header(&[("id", None)]), Err(Unfingerprintable::NullId));
    assert_eq!(
        header(&[("id", None), ("x", Some("y")), ("id", None)]),
        Err(Unfingerprintable::NullId)
    );
    assert_eq!(header(&[("id", Some(""))]), Err(Unfingerprintable::EmptyId));
    assert_eq!(
        header(&[("id", None), ("id", Some(""))]),
        Err(Unfingerprintable::EmptyId)
    );
    let a = header(&[("id", Some("A"))]).unwrap();
    let null_a = header(&[("id", None), ("id", Some("A"))]).unwrap();
    let a_null = header(&[("id", Some("A")), ("id", None)]).unwrap();
    let empty_a = header(&[("id", Some("")), ("id", Some("A"))]).unwrap();
    let all = [a, null_a, a_null, empty_a];
    for (i, x) in all.iter().enumerate() {
        for y in &all[i + 1..] {
            assert_ne!(
                x, y,
                "positions of nulls and empties count once a value names the event"
            );
        }
    }
    // The content sources are unchanged: an empty value is content.
    assert!(fp("value", &rec(None, Some(""), &[])).is_ok());
    assert!(fp("key", &rec(Some(""), None, &[])).is_ok());
    assert_eq!(Unfingerprintable::NullId.reason(), "null_id");
    assert_eq!(Unfingerprintable::EmptyId.reason(), "empty_id");
    assert!(Unfingerprintable::REASONS.contains(&Unfingerprintable::NotJson(String::new()).reason()));
}

/// `depth` nested arrays around `inner`.
fn nested(depth: usize, inner: &str) -> String {
    format!("{}{inner}{}", "[".repeat(depth), "]".repeat(depth))
}

/// Issue 12, case 2: the target may nest [`MAX_JSON_DEPTH`] levels (as many as serde_json
/// parses); deeper is `not_json`, whatever the depth, without recursion; deep members off
/// the pointer's path are only validated, as before.
#[test]
fn deep_json_is_bounded() {
    let json = |v: &str| fp("json:/id", &rec(None, Some(v), &[]));
    let at_limit = nested(MAX_JSON_DEPTH, "1");
    assert!(serde_json::from_str::<serde_json::Value>(&at_limit).is_ok());
    assert!(serde_json::from_str::<serde_json::Value>(&nested(MAX_JSON_DEPTH + 1, "1")).is_err());
    assert!(json(&format!(r#"{{"id":{at_limit}}}"#)).is_ok());
    let objects = format!("{}1{}", r#"{"a":"#.repeat(MAX_JSON_DEPTH), "}".repeat(MAX_JSON_DEPTH));
    assert!(json(&format!(r#"{{"id":{objects}}}"#)).is_ok());
    for depth in [MAX_JSON_DEPTH + 1, 1_000, 100_000] {
        let r = json(&format!(r#"{{"id":{}}}"#, nested(depth, "")));
        assert!(
            matches!(&r, Err(Unfingerprintable::NotJson(m)) if m.contains("deeper than 127")),
            "{depth}: {r:?}"
        );
        let whole = fp("json:", &rec(None, Some(&nested(depth, "")), &[]));
        assert!(matches!(whole, Err(Unfingerprintable::NotJson(_))), "{depth}");
    }
    let off_path = format!(r#"{{"id":7,"payload":{}}}"#, nested(100_000, ""));
    assert_eq!(json(&off_path), json(r#"{"id":7}"#));
    assert!(json(&off_path).is_ok());
    // Unbalanced: not JSON at all.
    assert!(matches!(json(&"[".repeat(100_000)), Err(Unfingerprintable::NotJson(_))));
    // Wide is fine: a long array is one level.
    let wide = format!(r#"{{"id":[{}1]}}"#, "1,".repeat(200_000));
    assert!(json(&wide).is_ok());
}

/// Issue 12, case 3: header names are bytes; one that is not UTF-8 is just another name.
#[test]
fn header_names_are_compared_as_bytes() {
    let r = |headers: Vec<(Vec<u8>, Option<Vec<u8>>)>| OwnedRecord {
        key: None,
        value: None,
        headers,
    };
    let f = Fingerprinter::new(Source::Header("id".into()));
    let plain = f.fingerprint(&r(vec![(b"id".to_vec(), Some(b"A".to_vec()))]));
    let with_odd = f.fingerprint(&r(vec![
        (b"\xffid".to_vec(), Some(b"B".to_vec())),
        (b"id".to_vec(), Some(b"A".to_vec())),
        (b"id\xfe".to_vec(), None),
    ]));
    assert_eq!(plain, with_odd);
    assert!(plain.is_ok());
    assert_eq!(
        f.fingerprint(&r(vec![(b"\xc3\x28".to_vec(), Some(b"A".to_vec()))])),
        Err(Unfingerprintable::Absent)
    );
    let utf8 = Fingerprinter::new(Source::Header("é".into()));
    assert!(utf8
        .fingerprint(&r(vec![("é".as_bytes().to_vec(), Some(b"x".to_vec()))]))
        .is_ok());
}

/// The canonical JSON writer before issue 12, kept to compare against: recursive, one
/// re-parse of each subtree per level.
fn legacy_canonical(raw: &RawValue, out: &mut String) -> Result<(), Unfingerprintable> {
    let text = raw.get().trim();
    let bad = |e: serde_json::Error| Unfingerprintable::NotJson(e.to_string());
    match text.as_bytes().first() {
        Some(b'{') => {
            let map: BTreeMap<String, &RawValue> = serde_json::from_str(text).map_err(bad)?;
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).map_err(bad)?);
                out.push(':');
                legacy_canonical(v, out)?;
            }
            out.push('}');
        }
        Some(b'[') => {
            let items: Vec<&RawValue> = serde_json::from_str(text).map_err(bad)?;
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                legacy_canonical(v, out)?;
            }
            out.push(']');
        }
        Some(b'"') => {
            let s: String = serde_json::from_str(text).map_err(bad)?;
            out.push_str(&serde_json::to_string(&s).map_err(bad)?);
        }
        _ => out.push_str(text),
    }
    Ok(())
}

/// The legacy canonical form of a JSON text, `None` where the legacy code refused it.
fn legacy(text: &str) -> Option<Vec<u8>> {
    let raw: &RawValue = serde_json::from_str(text).ok()?;
    let mut out = String::new();
    legacy_canonical(raw, &mut out).ok()?;
    Some(out.into_bytes())
}

/// The new canonical form, after the same whole-document validation `json_target` does.
fn current(text: &str) -> Option<Vec<u8>> {
    let raw: &RawValue = serde_json::from_str(text).ok()?;
    canonical_json(raw.get()).ok()
}

#[test]
fn canonical_form_matches_the_previous_implementation_on_edge_cases() {
    for text in [
        r#""\ud800""#,
        r#""\udc00x""#,
        r#"{"\ud800":1}"#,
        r#"["\ud83d\ude00", "\u0000", "\/", "\b\f\n\r\t", "\u007f", "\u2028"]"#,
        r#"{"b":1,"a":2,"b":3}"#,
        r#"{"é":1,"e":2,"\u00e9":3,"z":{}}"#,
        r#"[-0, 0.0, 1E+2, 1e-2, 123456789012345678901234567890, -1.5e300]"#,
        " [ 1 , [ ] , { } , \"\" , true , false , null ] ",
        "\t\r\n 7 \n",
        r#"{"a" : {"b" : [ {"c":"d"} ] } }"#,
        r#"[{"":"\\"}]"#,
    ] {
        assert_eq!(current(text), legacy(text), "{text}");
    }
}

/// A JSON value for the property tests.
#[derive(Debug, Clone)]
enum J {
    Null,
    Bool(bool),
    /// A number as written.
    Num(String),
    Str(String),
    Arr(Vec<J>),
    /// Members with distinct keys.
    Obj(Vec<(String, J)>),
}

fn json_value() -> impl proptest::strategy::Strategy<Value = J> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,4})?([eE][+-]?[0-9]{1,3})?".prop_map(J::Num),
        any::<String>().prop_map(J::Str),
        "[\"\\\\/a\u{0}-\u{1f}\u{7f}é\u{2028}😀]{0,6}".prop_map(J::Str),
    ];
    leaf.prop_recursive(5, 48, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(J::Arr),
            proptest::collection::btree_map("[a-cé\"\\\\\u{0}-\u{3}😀]{0,3}", inner, 0..5)
                .prop_map(|m| J::Obj(m.into_iter().collect())),
        ]
    })
}

/// Renders `j` as JSON text, the choices (white space, escapes, member order) drawn from
/// `seed`: every rendering of one value is the same JSON value.
fn render(j: &J, seed: &mut u64, out: &mut String) {
    fn next(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }
    fn ws(seed: &mut u64, out: &mut String) {
        for _ in 0..next(seed) % 3 {
            out.push([' ', '\n', '\t', '\r'][(next(seed) % 4) as usize]);
        }
    }
    fn string(s: &str, seed: &mut u64, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            let escape = next(seed).is_multiple_of(4);
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' if !escape => out.push_str("\\n"),
                '/' if escape => out.push_str("\\/"),
                c if (c as u32) < 0x20 || escape => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        if next(seed).is_multiple_of(2) {
                            out.push_str(&format!("\\u{u:04x}"));
                        } else {
                            out.push_str(&format!("\\u{u:04X}"));
                        }
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
    ws(seed, out);
    match j {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Num(n) => out.push_str(n),
        J::Str(s) => string(s, seed, out),
        J::Arr(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                render(v, seed, out);
            }
            ws(seed, out);
            out.push(']');
        }
        J::Obj(members) => {
            let mut order: Vec<&(String, J)> = members.iter().collect();
            for i in (1..order.len()).rev() {
                order.swap(i, (next(seed) % (i as u64 + 1)) as usize);
            }
            out.push('{');
            for (i, (k, v)) in order.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                ws(seed, out);
                string(k, seed, out);
                ws(seed, out);
                out.push(':');
                render(v, seed, out);
            }
            ws(seed, out);
            out.push('}');
        }
    }
    ws(seed, out);
}

fn rendered(j: &J, seed: u64) -> String {
    let mut out = String::new();
    render(j, &mut (seed | 1), &mut out);
    out
}

/// Header names for the property tests: the configured one, near misses, bytes that are not
/// UTF-8.
fn header_name() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    prop_oneof![
        Just(b"id".to_vec()),
        Just(b"id".to_vec()),
        Just(b"ID".to_vec()),
        Just(b"\xffid".to_vec()),
        Just(b"id\xfe".to_vec()),
        Just(b"\xc3\x28".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..4),
    ]
}

fn maybe_bytes() -> impl proptest::strategy::Strategy<Value = Option<Vec<u8>>> {
    use proptest::prelude::*;
    proptest::option::of(prop_oneof![
        Just(Vec::new()),
        proptest::collection::vec(any::<u8>(), 0..24),
    ])
}

/// An arbitrary record: random bytes, or JSON, as the value.
fn record() -> impl proptest::strategy::Strategy<Value = OwnedRecord> {
    use proptest::prelude::*;
    let value = prop_oneof![
        maybe_bytes(),
        (json_value(), any::<u64>()).prop_map(|(j, seed)| Some(rendered(&j, seed).into_bytes())),
        (json_value(), any::<u64>()).prop_map(|(j, seed)| {
            Some(format!(r#"{{"id":{},"a":[{}]}}"#, rendered(&j, seed), rendered(&j, !seed)).into_bytes())
        }),
        (0..300usize, any::<bool>()).prop_map(|(depth, objects)| {
            let (open, close) = if objects { (r#"{"a":"#, "}") } else { ("[", "]") };
            Some(format!(r#"{{"id":{}0{}}}"#, open.repeat(depth), close.repeat(depth)).into_bytes())
        }),
    ];
    let headers = proptest::collection::vec((header_name(), maybe_bytes()), 0..5);
    (maybe_bytes(), value, headers).prop_map(|(key, value, headers)| OwnedRecord { key, value, headers })
}

const SOURCES: [&str; 8] = [
    "value",
    "key",
    "key_value",
    "header:id",
    "json:",
    "json:/id",
    "json:/a/0",
    "json:/id/a",
];

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

    /// Never panics, for every source; the same record always gets the same answer.
    #[test]
    fn any_record_any_source_is_deterministic(r in record()) {
        for source in SOURCES {
            let once = fp(source, &r);
            proptest::prop_assert_eq!(&once, &fp(source, &r.clone()), "{}", source);
        }
    }

    /// A null or missing source never yields a fingerprint; a header source reads only the
    /// headers of its name (as bytes), and needs a value that is neither null nor empty.
    #[test]
    fn null_or_missing_sources_never_yield_a_fingerprint(r in record()) {
        if r.value.is_none() {
            for source in ["value", "json:", "json:/id", "json:/a/0"] {
                proptest::prop_assert_eq!(fp(source, &r), Err(Unfingerprintable::Absent));
            }
        }
        if r.key.is_none() {
            proptest::prop_assert_eq!(fp("key", &r), Err(Unfingerprintable::Absent));
        }
        let ids: Vec<&Option<Vec<u8>>> = r.headers.iter().filter(|(k, _)| k.as_slice() == b"id").map(|(_, v)| v).collect();
        let named = ids.iter().any(|v| v.as_ref().is_some_and(|v| !v.is_empty()));
        proptest::prop_assert_eq!(fp("header:id", &r).is_ok(), named);
        let only_ids = OwnedRecord {
            key: None,
            value: None,
            headers: r.headers.iter().filter(|(k, _)| k.as_slice() == b"id").cloned().collect(),
        };
        proptest::prop_assert_eq!(fp("header:id", &r), fp("header:id", &only_ids));
        if let Some(v) = &r.value {
            if let Ok(doc) = serde_json::from_slice::<serde_json::Value>(v) {
                let target = doc.get("id");
                if target.is_some_and(|t| t.is_null() || t.as_str() == Some("")) {
                    proptest::prop_assert!(fp("json:/id", &r).is_err());
                }
            }
        }
    }

    /// Key order, white space and string escapes do not change a JSON fingerprint; the
    /// canonical form is the previous implementation's.
    #[test]
    fn json_renderings_share_one_fingerprint(j in json_value(), a in proptest::prelude::any::<u64>(), b in proptest::prelude::any::<u64>()) {
        let (x, y) = (rendered(&j, a), rendered(&j, b));
        let fx = fp("json:", &rec(None, Some(&x), &[]));
        let fy = fp("json:", &rec(None, Some(&y), &[]));
        proptest::prop_assert_eq!(&fx, &fy, "{} / {}", x, y);
        let expect_err = matches!(&j, J::Null) || matches!(&j, J::Str(s) if s.is_empty());
        proptest::prop_assert_eq!(fx.is_err(), expect_err, "{}", x);
        proptest::prop_assert_eq!(current(&x), legacy(&x), "{}", x);
        let wrapped = format!(r#"{{"n":1,"id":{x}}}"#);
        proptest::prop_assert_eq!(fp("json:/id", &rec(None, Some(&wrapped), &[])), fx);
    }

    /// Arbitrary text (mostly not JSON): the new and the previous canonical forms agree on
    /// what is refused and on what is written.
    #[test]
    fn canonical_form_matches_the_previous_implementation(text in "[\\[\\]{}\" ,:0-9.eE+\\-a-z\\\\u\u{1}é]{0,40}") {
        proptest::prop_assert_eq!(current(&text), legacy(&text), "{}", text);
    }
}
