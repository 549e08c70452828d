//! The `avro:` source (issue 27): records in the Schema Registry wire format, encoded in-test
//! with apache-avro, their writer schemas served by [`FakeRegistry`], a test double (an HTTP
//! server on 127.0.0.1 that answers `GET /schemas/ids/{id}` as Confluent's API does), not a real
//! registry.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apache_avro::types::Value;

use super::*;
use crate::config::SchemaRegistryConfig;
use crate::schema_registry::SchemaRegistry;

/// A test double of a Schema Registry: answers `GET /schemas/ids/{id}` with
/// `{"schema": "..."}` for the ids it holds, 404 (`{"error_code":40403}`) for others; 503 while
/// `down`; 401 when it wants basic auth and the request lacks it. Also used by the protobuf
/// tests ([`Self::register_protobuf`]).
pub(super) struct FakeRegistry {
    /// Base URL, `http://127.0.0.1:PORT`.
    url: String,
    /// Answers by id (changed while it runs).
    schemas: Arc<Mutex<HashMap<u32, serde_json::Value>>>,
    /// Answers 503 to everything while set.
    down: Arc<AtomicBool>,
    /// Requests answered.
    requests: Arc<AtomicUsize>,
    /// Answers a plain 404 (no Confluent error code, as a proxy's default page) while set.
    plain_404: Arc<AtomicBool>,
}

impl FakeRegistry {
    /// Starts one, requiring `Authorization: {auth}` when `auth` is set.
    pub(super) fn start(auth: Option<&str>) -> FakeRegistry {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let schemas: Arc<Mutex<HashMap<u32, serde_json::Value>>> = Arc::default();
        let down = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicUsize::new(0));
        let plain_404 = Arc::new(AtomicBool::new(false));
        let (s, d, r, p4, auth) = (
            schemas.clone(),
            down.clone(),
            requests.clone(),
            plain_404.clone(),
            auth.map(str::to_string),
        );
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                let _ = reader.read_line(&mut line);
                let mut authorized = auth.is_none();
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                    if let (Some(want), Some((name, value))) = (&auth, h.split_once(':')) {
                        authorized |= name.eq_ignore_ascii_case("authorization") && value.trim() == want;
                    }
                }
                r.fetch_add(1, Ordering::SeqCst);
                let id = line
                    .split_whitespace()
                    .nth(1)
                    .and_then(|path| path.strip_prefix("/schemas/ids/"))
                    .and_then(|id| id.parse::<u32>().ok());
                let (status, body) = if p4.load(Ordering::SeqCst) {
                    ("404 Not Found", "<html>default backend - 404</html>".to_string())
                } else if d.load(Ordering::SeqCst) {
                    ("503 Service Unavailable", r#"{"error_code":50301}"#.to_string())
                } else if !authorized {
                    ("401 Unauthorized", r#"{"error_code":401}"#.to_string())
                } else {
                    match id.and_then(|id| s.lock().unwrap().get(&id).cloned()) {
                        Some(answer) => ("200 OK", answer.to_string()),
                        None => (
                            "404 Not Found",
                            r#"{"error_code":40403,"message":"Schema not found"}"#.to_string(),
                        ),
                    }
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        FakeRegistry {
            url,
            schemas,
            down,
            requests,
            plain_404,
        }
    }

    /// Registers `schema` under `id`.
    pub(super) fn register(&self, id: u32, schema: &str) {
        self.schemas
            .lock()
            .unwrap()
            .insert(id, serde_json::json!({ "schema": schema }));
    }

    /// Registers the Protobuf schema `text` (`.proto` source or base64) under `id`.
    pub(super) fn register_protobuf(&self, id: u32, text: &str) {
        self.schemas
            .lock()
            .unwrap()
            .insert(id, serde_json::json!({ "schema": text, "schemaType": "PROTOBUF" }));
    }

    /// Answers `answer` (the whole JSON body) for `id`.
    pub(super) fn register_answer(&self, id: u32, answer: serde_json::Value) {
        self.schemas.lock().unwrap().insert(id, answer);
    }

    /// A client of it, for which a first 40403 is final (no grace: see
    /// [`an_id_the_registry_does_not_know_yet_waits_before_it_counts_as_unknown`]).
    pub(super) fn client(&self) -> Arc<SchemaRegistry> {
        self.client_with_grace(Duration::ZERO)
    }

    /// A client of it with `grace` for ids answered 40403.
    fn client_with_grace(&self, grace: Duration) -> Arc<SchemaRegistry> {
        Arc::new(SchemaRegistry::new(&self.config()).unwrap().with_not_found_grace(grace))
    }

    /// `fingerprint.schema_registry` for it.
    fn config(&self) -> SchemaRegistryConfig {
        SchemaRegistryConfig {
            url: self.url.clone(),
            timeout: Duration::from_secs(2),
            ..SchemaRegistryConfig::default()
        }
    }
}

/// Version 1 of subject `events-value`.
const V1: &str = r#"{"type":"record","name":"Event","namespace":"t","fields":[
    {"name":"event_id","type":"string"},
    {"name":"n","type":"int"}]}"#;

/// Version 2: a field added in front, the id's field moved after `n`, an enum and a union.
const V2: &str = r#"{"type":"record","name":"Event","namespace":"t","fields":[
    {"name":"processed_at","type":{"type":"long","logicalType":"timestamp-millis"}},
    {"name":"n","type":"long"},
    {"name":"event_id","type":"string"},
    {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B"]},"default":"A"},
    {"name":"trace","type":["null","string"],"default":null}]}"#;

/// The record `fields` encoded with `schema` in the wire format under schema id `id`.
fn wire(id: u32, schema: &str, fields: Vec<(&str, Value)>) -> OwnedRecord {
    let schema = apache_avro::Schema::parse_str(schema).unwrap();
    let record = Value::Record(fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    let mut bytes = vec![0];
    bytes.extend_from_slice(&id.to_be_bytes());
    bytes.extend(
        apache_avro::writer::datum::GenericDatumWriter::builder(&schema)
            .build()
            .unwrap()
            .write_value_to_vec(record)
            .unwrap(),
    );
    OwnedRecord {
        value: Some(bytes),
        ..OwnedRecord::default()
    }
}

fn v1(event_id: &str, n: i32) -> OwnedRecord {
    wire(
        1,
        V1,
        vec![("event_id", Value::String(event_id.into())), ("n", Value::Int(n))],
    )
}

fn v2(event_id: &str, n: i64, trace: Option<&str>) -> OwnedRecord {
    wire(
        2,
        V2,
        vec![
            ("processed_at", Value::TimestampMillis(1_700_000_000_000)),
            ("n", Value::Long(n)),
            ("event_id", Value::String(event_id.into())),
            ("kind", Value::Enum(1, "B".into())),
            (
                "trace",
                match trace {
                    Some(t) => Value::Union(1, Box::new(Value::String(t.into()))),
                    None => Value::Union(0, Box::new(Value::Null)),
                },
            ),
        ],
    )
}

fn avro(source: &str, registry: &FakeRegistry) -> Fingerprinter {
    Fingerprinter::new(Source::try_from(source.to_string()).unwrap()).with_registry(registry.client())
}

fn two_versions() -> FakeRegistry {
    let r = FakeRegistry::start(None);
    r.register(1, V1);
    r.register(2, V2);
    r
}

#[test]
fn two_schema_versions_give_one_event_one_fingerprint() {
    let r = two_versions();
    let f = avro("avro:/event_id", &r);
    let a = f.fingerprint(&v1("e-1", 1)).unwrap();
    assert_eq!(a, f.fingerprint(&v2("e-1", 99, Some("x"))).unwrap(), "v1 and v2 of e-1");
    assert_eq!(a, f.fingerprint(&v1("e-1", 2)).unwrap(), "other fields do not count");
    assert_ne!(a, f.fingerprint(&v1("e-2", 1)).unwrap(), "another event");
    assert_ne!(a, f.fingerprint(&v2("e-2", 1, None)).unwrap(), "another event, v2");
    // Not the fingerprint of the same id read from JSON: sources never share an encoding.
    let json = Fingerprinter::new(Source::Json("/event_id".into())).fingerprint(&OwnedRecord {
        value: Some(br#"{"event_id":"e-1"}"#.to_vec()),
        ..OwnedRecord::default()
    });
    assert_ne!(Ok(a), json);
    // Fetched once per id.
    for i in 0..20 {
        f.fingerprint(&v1(&format!("e-{i}"), i)).unwrap();
    }
    assert_eq!(r.requests.load(Ordering::SeqCst), 2, "one request per schema id");
}

#[test]
fn the_canonical_form_ignores_the_schema_layout() {
    let r = two_versions();
    // The whole record: field order (v1 `event_id, n` and a reordered copy), int and long of
    // one number, collapse.
    let reordered = r#"{"type":"record","name":"Event","namespace":"t","fields":[
        {"name":"n","type":"long"},{"name":"event_id","type":"string"}]}"#;
    r.register(3, reordered);
    let f = avro("avro:", &r);
    let a = f.fingerprint(&v1("e-1", 5)).unwrap();
    let b = f
        .fingerprint(&wire(
            3,
            reordered,
            vec![("n", Value::Long(5)), ("event_id", Value::String("e-1".into()))],
        ))
        .unwrap();
    assert_eq!(a, b);
    // An enum by its symbol, a union by its branch's value (not their indices).
    let g = avro("avro:/kind", &r);
    let by_symbol = g.fingerprint(&v2("e", 1, None)).unwrap();
    let moved = r#"{"type":"record","name":"Event","namespace":"t","fields":[
        {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["Z","B","A"]}},
        {"name":"trace","type":["string","null"]}]}"#;
    r.register(4, moved);
    let rec4 = wire(
        4,
        moved,
        vec![
            ("kind", Value::Enum(1, "B".into())),
            ("trace", Value::Union(0, Box::new(Value::String("x".into())))),
        ],
    );
    assert_eq!(by_symbol, g.fingerprint(&rec4).unwrap());
    let t = avro("avro:/trace", &r);
    assert_eq!(
        t.fingerprint(&v2("e", 1, Some("x"))).unwrap(),
        t.fingerprint(&rec4).unwrap()
    );
}

#[test]
fn a_null_or_empty_id_names_no_event() {
    let r = two_versions();
    let f = avro("avro:/trace", &r);
    assert_eq!(f.fingerprint(&v2("e", 1, None)), Err(Unfingerprintable::NullId));
    assert_eq!(f.fingerprint(&v2("e", 1, Some(""))), Err(Unfingerprintable::EmptyId));
    assert_eq!(
        avro("avro:/nope", &r).fingerprint(&v1("e", 1)),
        Err(Unfingerprintable::PointerNotFound)
    );
    assert_eq!(
        avro("avro:/event_id", &r).fingerprint(&OwnedRecord::default()),
        Err(Unfingerprintable::Absent),
        "tombstone"
    );
}

#[test]
fn bad_input_has_its_own_reasons() {
    let r = two_versions();
    let f = avro("avro:/event_id", &r);
    let value = |bytes: &[u8]| OwnedRecord {
        value: Some(bytes.to_vec()),
        ..OwnedRecord::default()
    };
    let no_magic = f.fingerprint(&value(br#"{"event_id":"e"}"#)).unwrap_err();
    assert_eq!(no_magic, Unfingerprintable::NoMagicByte);
    assert_eq!(
        f.fingerprint(&value(&[0, 0, 0])).unwrap_err(),
        Unfingerprintable::NoMagicByte
    );
    let unknown = f.fingerprint(&value(&[0, 0, 0, 0, 42, 2, b'e'])).unwrap_err();
    assert_eq!(unknown, Unfingerprintable::UnknownSchemaId(42));
    // A string whose length runs past the end, and a record with bytes after it.
    let cut = f.fingerprint(&value(&[0, 0, 0, 0, 1, 20, b'e'])).unwrap_err();
    assert_eq!(cut.reason(), "not_avro", "{cut}");
    let mut long = v1("e", 1).value.unwrap();
    long.push(0);
    let trailing = f.fingerprint(&value(&long)).unwrap_err();
    assert_eq!(trailing.reason(), "not_avro", "{trailing}");
    for e in [&no_magic, &unknown, &cut, &trailing] {
        assert!(Unfingerprintable::REASONS.contains(&e.reason()), "{}", e.reason());
        assert!(!e.must_wait());
    }
    // A schema that is not Avro.
    r.register(9, r#"syntax = "proto3"; message M { string id = 1; }"#);
    let not_avro = f.fingerprint(&value(&[0, 0, 0, 0, 9, 2, b'e'])).unwrap_err();
    assert_eq!(not_avro.reason(), "not_avro", "{not_avro}");
}

#[test]
fn an_unavailable_registry_makes_the_record_wait() {
    let r = two_versions();
    let f = avro("avro:/event_id", &r);
    let known = f.fingerprint(&v1("e", 1)).unwrap();
    r.down.store(true, Ordering::SeqCst);
    // A cached schema needs no registry.
    assert_eq!(f.fingerprint(&v1("e", 1)), Ok(known));
    let e = f.fingerprint(&v2("e", 1, None)).unwrap_err();
    assert!(e.must_wait(), "{e}");
    assert_eq!(e.reason(), "registry_unavailable");
    assert!(!Unfingerprintable::REASONS.contains(&e.reason()), "never counted");
    assert!(e.to_string().contains("503"), "{e}");
    // As a part of a composite too.
    let both = Fingerprinter::new(Source::try_from(r#"["key","avro:/event_id"]"#.to_string()).unwrap())
        .with_registry(r.client());
    let mut rec = v2("e", 1, None);
    rec.key = Some(b"k".to_vec());
    let e = both.fingerprint(&rec).unwrap_err();
    assert!(e.must_wait(), "{e}");
    // Back: the record gets its fingerprint (after the client's back-off).
    r.down.store(false, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(f.fingerprint(&v2("e", 1, None)), Ok(known));
    // Nothing listening at all.
    let gone = SchemaRegistryConfig {
        url: "http://127.0.0.1:9".into(),
        ..r.config()
    };
    let g = Fingerprinter::new(Source::Avro("/event_id".into()))
        .with_registry(Arc::new(SchemaRegistry::new(&gone).unwrap()));
    assert!(g.fingerprint(&v1("e", 1)).unwrap_err().must_wait());
    // No registry client at all (a fingerprinter built without one) waits too.
    assert!(Fingerprinter::new(Source::Avro("/event_id".into()))
        .fingerprint(&v1("e", 1))
        .unwrap_err()
        .must_wait());
}

/// A 404 that is not Confluent's 40403 (a URL without the API's path, an ingress's default page
/// while the registry restarts) says nothing about the id: the record waits. Before, it counted
/// as `unknown_schema_id` and followed `on_missing` (forwarded without its fingerprint, so its
/// replay passed; or dropped).
#[test]
fn a_404_without_confluents_error_code_makes_the_record_wait() {
    let r = two_versions();
    let f = avro("avro:/event_id", &r);
    r.plain_404.store(true, Ordering::SeqCst);
    let e = f.fingerprint(&v1("e", 1)).unwrap_err();
    assert!(e.must_wait(), "{e}");
    assert!(e.to_string().contains("40403"), "{e}");
    r.plain_404.store(false, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(1100)); // the client's back-off after a failure
    assert!(f.fingerprint(&v1("e", 1)).is_ok());
}

/// A registry just started answers 40403 for ids it has not read back yet: within the grace the
/// id is not known *yet* (the record waits, asked again at most once a second), after it the id
/// is unknown (`unknown_schema_id`); an id registered within the grace is found.
#[test]
fn an_id_the_registry_does_not_know_yet_waits_before_it_counts_as_unknown() {
    let r = FakeRegistry::start(None);
    let f =
        Fingerprinter::new(Source::Avro("/event_id".into())).with_registry(r.client_with_grace(Duration::from_secs(3)));
    let e = f.fingerprint(&v1("e", 1)).unwrap_err();
    assert!(e.must_wait(), "{e}");
    let asked = r.requests.load(Ordering::SeqCst);
    assert!(f.fingerprint(&v1("e", 1)).unwrap_err().must_wait());
    assert_eq!(
        r.requests.load(Ordering::SeqCst),
        asked,
        "asked again within the second"
    );
    // Registered within the grace (the registry caught up): found.
    r.register(1, V1);
    std::thread::sleep(Duration::from_millis(1100));
    assert!(f.fingerprint(&v1("e", 1)).is_ok());
    // Never registered: unknown once the grace is over, and stays so.
    let started = std::time::Instant::now();
    let unknown = wire(
        77,
        V1,
        vec![("event_id", Value::String("x".into())), ("n", Value::Int(1))],
    );
    while f.fingerprint(&unknown).unwrap_err().must_wait() {
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "still waiting after the grace"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(started.elapsed() >= Duration::from_secs(2), "{:?}", started.elapsed());
    assert_eq!(f.fingerprint(&unknown), Err(Unfingerprintable::UnknownSchemaId(77)));
}

/// A union of several types besides null keeps its branch's type name: two record types with
/// the same fields are two events (they collided before: "cancelled 42" was dropped as a
/// replay of "created 42"), as are an enum symbol and the same string; a pointer goes through
/// the union (`/event/id` is the id whichever type). An optional field (`["null", T]`) keeps the
/// fingerprints of `T`, and `int`/`long` in a union are one type (the promotion).
#[test]
fn a_unions_branch_type_is_part_of_the_value() {
    const EVENTS: &str = r#"{"type":"record","name":"Envelope","namespace":"t","fields":[
        {"name":"event","type":[
            {"type":"record","name":"OrderCreated","fields":[{"name":"id","type":"long"}]},
            {"type":"record","name":"OrderCancelled","fields":[{"name":"id","type":"long"}]},
            {"type":"enum","name":"Kind","symbols":["X"]},
            "string"]}]}"#;
    let r = FakeRegistry::start(None);
    r.register(1, EVENTS);
    let event = |branch: u32, v: Value| wire(1, EVENTS, vec![("event", Value::Union(branch, Box::new(v)))]);
    let order = |id: i64| Value::Record(vec![("id".into(), Value::Long(id))]);
    let (created, cancelled) = (event(0, order(42)), event(1, order(42)));
    for source in ["avro:", "avro:/event"] {
        let f = avro(source, &r);
        assert_ne!(
            f.fingerprint(&created).unwrap(),
            f.fingerprint(&cancelled).unwrap(),
            "{source}"
        );
        assert_eq!(
            f.fingerprint(&created).unwrap(),
            f.fingerprint(&event(0, order(42))).unwrap()
        );
        assert_ne!(
            f.fingerprint(&event(2, Value::Enum(0, "X".into()))).unwrap(),
            f.fingerprint(&event(3, Value::String("X".into()))).unwrap(),
            "{source}: enum X and string X"
        );
    }
    let id = avro("avro:/event/id", &r);
    assert_eq!(id.fingerprint(&created).unwrap(), id.fingerprint(&cancelled).unwrap());
    assert_eq!(
        id.fingerprint(&event(3, Value::String("X".into()))),
        Err(Unfingerprintable::PointerNotFound)
    );

    // Making a field optional, and int -> long inside a union, keep fingerprints.
    const PLAIN: &str = r#"{"type":"record","name":"E","fields":[
        {"name":"id","type":"string"},{"name":"n","type":["int","string"]}]}"#;
    const EVOLVED: &str = r#"{"type":"record","name":"E","fields":[
        {"name":"id","type":["null","string"]},{"name":"n","type":["string","long"]}]}"#;
    r.register(2, PLAIN);
    r.register(3, EVOLVED);
    let plain = wire(
        2,
        PLAIN,
        vec![
            ("id", Value::String("a".into())),
            ("n", Value::Union(0, Box::new(Value::Int(7)))),
        ],
    );
    let evolved = wire(
        3,
        EVOLVED,
        vec![
            ("id", Value::Union(1, Box::new(Value::String("a".into())))),
            ("n", Value::Union(1, Box::new(Value::Long(7)))),
        ],
    );
    for source in ["avro:", "avro:/id", "avro:/n"] {
        let f = avro(source, &r);
        assert_eq!(
            f.fingerprint(&plain).unwrap(),
            f.fingerprint(&evolved).unwrap(),
            "{source}"
        );
    }
}

#[test]
fn basic_auth_is_sent_and_the_cache_is_bounded() {
    // "user:secret" in base64.
    let r = FakeRegistry::start(Some("Basic dXNlcjpzZWNyZXQ="));
    r.register(1, V1);
    r.register(2, V2);
    let anonymous = avro("avro:/event_id", &r);
    assert!(anonymous
        .fingerprint(&v1("e", 1))
        .unwrap_err()
        .to_string()
        .contains("401"));
    let cfg = SchemaRegistryConfig {
        username: "user".into(),
        password: "secret".into(),
        cache_schemas: 1,
        ..r.config()
    };
    assert!(!format!("{cfg:?}").contains("secret"), "Debug redacts the password");
    let client = Arc::new(SchemaRegistry::new(&cfg).unwrap());
    let f = Fingerprinter::new(Source::Avro("/event_id".into())).with_registry(client.clone());
    let before = r.requests.load(Ordering::SeqCst);
    f.fingerprint(&v1("e", 1)).unwrap();
    f.fingerprint(&v2("e", 1, None)).unwrap();
    f.fingerprint(&v1("e", 1)).unwrap();
    assert_eq!(client.cached(), 1, "at most cache_schemas");
    assert_eq!(
        r.requests.load(Ordering::SeqCst) - before,
        3,
        "id 1 was left out, fetched again"
    );
}

#[test]
fn the_avro_source_has_a_text_form() {
    for text in ["avro:/event_id", "avro:", "avro:/a~1b"] {
        let s = Source::try_from(text.to_string()).unwrap();
        assert_eq!(s.to_string(), text);
        assert!(s.reads_registry());
    }
    assert!(Source::try_from("avro:event_id".to_string()).is_err());
    assert!(Source::try_from("avro:/a~2".to_string()).is_err());
    let both = Source::try_from(r#"["json:/t","avro:/e"]"#.to_string()).unwrap();
    assert!(both.reads_registry());
    assert!(!Source::Json("/e".into()).reads_registry());
}

#[test]
fn the_avro_key_form_reads_the_key() {
    let r = two_versions();
    let f = avro("avro-key:/event_id", &r);
    let keyed = |key: OwnedRecord, value: &[u8]| OwnedRecord {
        key: key.value,
        value: Some(value.to_vec()),
        ..OwnedRecord::default()
    };
    let a = f.fingerprint(&keyed(v1("k-1", 1), b"x")).unwrap();
    assert_eq!(
        a,
        f.fingerprint(&keyed(v2("k-1", 5, None), b"y")).unwrap(),
        "v1 and v2 keys, values aside"
    );
    assert_ne!(a, f.fingerprint(&keyed(v1("k-2", 1), b"x")).unwrap());
    assert_ne!(
        a,
        avro("avro:/event_id", &r).fingerprint(&v1("k-1", 1)).unwrap(),
        "a key is not a value"
    );
    assert_eq!(
        f.fingerprint(&v1("k-1", 1)),
        Err(Unfingerprintable::Absent),
        "a null key"
    );
    let no_wire = keyed(
        OwnedRecord {
            value: Some(b"k".to_vec()),
            ..OwnedRecord::default()
        },
        b"x",
    );
    assert_eq!(f.fingerprint(&no_wire).unwrap_err().reason(), "no_magic_byte");
}

/// Issue 27, item 3: a lookup names an Avro event by its JSON form.
#[test]
fn a_lookup_reads_an_avro_record_given_as_json() {
    let r = two_versions();
    let f = avro("avro:/event_id", &r);
    let json = OwnedRecord {
        value: Some(br#"{"event_id": "e-1", "n": 1}"#.to_vec()),
        ..OwnedRecord::default()
    };
    let want = f.fingerprint(&v1("e-1", 1)).unwrap();
    assert_eq!(f.clone().for_lookup().fingerprint(&json), Ok(want));
    assert_eq!(
        f.fingerprint(&json).unwrap_err().reason(),
        "no_magic_byte",
        "never in the pipeline"
    );
    assert_eq!(
        f.clone().for_lookup().fingerprint(&v2("e-1", 3, None)),
        Ok(want),
        "wire format still read"
    );
    // The whole record: the JSON form of v1's e-1 (n an integer).
    let whole = avro("avro:", &r);
    assert_eq!(
        whole.clone().for_lookup().fingerprint(&json),
        whole.fingerprint(&v1("e-1", 1))
    );
    // A key form and a composite.
    let both = Fingerprinter::new(Source::try_from(r#"["avro-key:/event_id","avro:/event_id"]"#.to_string()).unwrap())
        .with_registry(r.client());
    let mut rec = v1("e-1", 1);
    rec.key = v1("k", 1).value;
    let keyed_json = OwnedRecord {
        key: Some(br#"{"event_id":"k"}"#.to_vec()),
        ..json.clone()
    };
    assert_eq!(
        both.clone().for_lookup().fingerprint(&keyed_json),
        both.fingerprint(&rec)
    );
}
