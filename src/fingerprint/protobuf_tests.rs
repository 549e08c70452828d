//! The `protobuf:` and key sources (issue 27): records in the Schema Registry wire format,
//! encoded in-test with prost-reflect, their writer schemas (`.proto` text and the base64
//! `FileDescriptorProto` Confluent's clients register) served by the avro tests' `FakeRegistry`.

use prost_reflect::prost::Message;
use prost_reflect::{DynamicMessage, Value};

use super::avro_tests::FakeRegistry;
use super::*;

/// Version 1: `Event` alone (message indexes `[0]`).
const V1: &str = r#"syntax = "proto3"; package t;
message Event { string event_id = 1; int32 n = 2; }"#;

/// Version 2: a message in front (`Event` is `[1]`), the id renumbered, `n` an int64, and a
/// nested message, an enum, bytes, a repeated field, a map, an optional field.
const V2: &str = r#"syntax = "proto3"; package t;
import "google/protobuf/timestamp.proto";
message Meta { string trace = 1; }
message Event {
  enum Kind { A = 0; B = 1; }
  int64 processed_at = 1;
  int64 n = 2;
  string event_id = 3;
  Meta meta = 4;
  Kind kind = 5;
  bytes raw = 6;
  repeated string tags = 7;
  map<string, int32> counts = 8;
  optional string note = 9;
  google.protobuf.Timestamp at = 10;
  message Inner { string id = 1; }
}"#;

/// The message `name` of `schema`, with `fields` set, in the wire format under `id` with the
/// message indexes `indexes` (already zig-zag encoded).
fn wire(id: u32, schema: &ProtoSchema, name: &str, indexes: &[u8], fields: Vec<(&str, Value)>) -> Vec<u8> {
    let mut m = DynamicMessage::new(schema.descriptor(name).unwrap());
    for (k, v) in fields {
        m.set_field_by_name(k, v);
    }
    let mut bytes = vec![0];
    bytes.extend_from_slice(&id.to_be_bytes());
    bytes.extend_from_slice(indexes);
    bytes.extend(m.encode_to_vec());
    bytes
}

fn record(value: Vec<u8>) -> OwnedRecord {
    OwnedRecord {
        value: Some(value),
        ..OwnedRecord::default()
    }
}

fn registry() -> (FakeRegistry, ProtoSchema, ProtoSchema) {
    let r = FakeRegistry::start(None);
    r.register_protobuf(1, V1);
    r.register_protobuf(2, V2);
    (r, ProtoSchema::parse(V1).unwrap(), ProtoSchema::parse(V2).unwrap())
}

fn fingerprinter(source: &str, r: &FakeRegistry) -> Fingerprinter {
    Fingerprinter::new(Source::try_from(source.to_string()).unwrap()).with_registry(r.client())
}

fn v1(s: &ProtoSchema, event_id: &str, n: i32) -> Vec<u8> {
    wire(
        1,
        s,
        "t.Event",
        &[0],
        vec![("event_id", Value::String(event_id.into())), ("n", Value::I32(n))],
    )
}

fn v2(s: &ProtoSchema, event_id: &str, n: i64) -> Vec<u8> {
    wire(
        2,
        s,
        "t.Event",
        &[2, 2],
        vec![
            ("processed_at", Value::I64(1_700_000_000_000)),
            ("n", Value::I64(n)),
            ("event_id", Value::String(event_id.into())),
        ],
    )
}

#[test]
fn two_schema_versions_give_one_event_one_fingerprint() {
    let (r, s1, s2) = registry();
    let f = fingerprinter("protobuf:/event_id", &r);
    let a = f.fingerprint(&record(v1(&s1, "e-1", 1))).unwrap();
    assert_eq!(
        a,
        f.fingerprint(&record(v2(&s2, "e-1", 9))).unwrap(),
        "v1 and v2 of e-1"
    );
    assert_ne!(a, f.fingerprint(&record(v1(&s1, "e-2", 1))).unwrap(), "another event");
    // int32 7 and int64 7 are one value.
    let n = fingerprinter("protobuf:/n", &r);
    assert_eq!(
        n.fingerprint(&record(v1(&s1, "x", 7))).unwrap(),
        n.fingerprint(&record(v2(&s2, "y", 7))).unwrap()
    );
    // Not the fingerprint of the same id read from Avro or JSON: sources never share an encoding.
    let json = Fingerprinter::new(Source::Json("/event_id".into()))
        .fingerprint(&record(br#"{"event_id":"e-1"}"#.to_vec()))
        .unwrap();
    assert_ne!(a, json);
}

#[test]
fn the_json_form_reads_values_not_numbers() {
    let (r, _, s2) = registry();
    let mut counts = std::collections::HashMap::new();
    counts.insert(prost_reflect::MapKey::String("b".into()), Value::I32(2));
    counts.insert(prost_reflect::MapKey::String("a".into()), Value::I32(1));
    let full = record(wire(
        2,
        &s2,
        "t.Event",
        &[2, 2],
        vec![
            ("event_id", Value::String("e".into())),
            ("kind", Value::EnumNumber(1)),
            ("raw", Value::Bytes(prost_reflect::bytes::Bytes::from(vec![0u8, 255]))),
            (
                "tags",
                Value::List(vec![Value::String("x".into()), Value::String("y".into())]),
            ),
            ("counts", Value::Map(counts)),
        ],
    ));
    let target = |ptr: &str| {
        let f = fingerprinter(&format!("protobuf:{ptr}"), &r);
        String::from_utf8(f.protobuf_target(full.value.as_deref().unwrap()).unwrap()).unwrap()
    };
    assert_eq!(target("/kind"), r#""B""#, "an enum is its name");
    assert_eq!(target("/raw"), r#""\u0000ÿ""#, "bytes: a character per byte");
    assert_eq!(target("/tags"), r#"["x","y"]"#);
    assert_eq!(target("/counts"), r#"{"a":1,"b":2}"#);
    assert_eq!(target("/n"), "0", "an unset proto3 scalar is its default");
    assert_eq!(target("/tags/1"), r#""y""#);
    let f = |ptr: &str| fingerprinter(&format!("protobuf:{ptr}"), &r).fingerprint(&full);
    assert_eq!(f("/note"), Err(Unfingerprintable::PointerNotFound), "optional, unset");
    assert_eq!(f("/meta"), Err(Unfingerprintable::PointerNotFound), "a message, unset");
    assert_eq!(f("/nope"), Err(Unfingerprintable::PointerNotFound));
    let empty = record(v2(&s2, "", 1));
    assert_eq!(
        fingerprinter("protobuf:/event_id", &r).fingerprint(&empty),
        Err(Unfingerprintable::EmptyId),
        "a proto3 string left unset is \"\""
    );
}

#[test]
fn message_indexes_name_nested_messages() {
    let (r, _, s2) = registry();
    let inner = wire(
        2,
        &s2,
        "t.Event.Inner",
        // count 2, [1, 1]: the second top-level message's second nested one (the first is the
        // entry message of the map field `counts`, which counts, as in Confluent's clients).
        &[4, 2, 2],
        vec![("id", Value::String("i".into()))],
    );
    let f = fingerprinter("protobuf:/id", &r);
    assert!(f.fingerprint(&record(inner.clone())).is_ok());
    // The same payload read as [1] (Event, whose field 1 is an int64) does not decode.
    let mut as_event = inner[..5].to_vec();
    as_event.extend([2, 2]);
    as_event.extend(&inner[8..]);
    assert_eq!(f.fingerprint(&record(as_event)).unwrap_err().reason(), "not_protobuf");
}

#[test]
fn bad_records_have_their_reasons() {
    let (r, s1, _) = registry();
    let f = fingerprinter("protobuf:/event_id", &r);
    let reason = |bytes: Vec<u8>| f.fingerprint(&record(bytes)).unwrap_err().reason();
    assert_eq!(reason(b"{\"event_id\":\"e\"}".to_vec()), "no_magic_byte");
    assert_eq!(reason(vec![0, 0, 0, 0, 9, 0, 0x0a, 1, b'e']), "unknown_schema_id");
    let good = v1(&s1, "e", 1);
    let mut cut = good.clone();
    cut.pop();
    cut[7] = 50; // the string's length, past the end
    assert_eq!(reason(cut), "not_protobuf");
    let mut out_of_range = good[..5].to_vec();
    out_of_range.extend([2, 6]); // [3]: the file has one message
    out_of_range.extend(&good[6..]);
    assert_eq!(reason(out_of_range), "not_protobuf");
    let mut negative = good[..5].to_vec();
    negative.push(1); // zig-zag -1
    assert_eq!(reason(negative), "not_protobuf");
    // An Avro schema under a protobuf source.
    r.register(3, r#""string""#);
    assert_eq!(reason(vec![0, 0, 0, 0, 3, 0]), "not_protobuf");
    assert!(Unfingerprintable::REASONS.contains(&"not_protobuf"));
    // A tombstone.
    assert_eq!(f.fingerprint(&OwnedRecord::default()), Err(Unfingerprintable::Absent));
}

#[test]
fn the_base64_form_confluent_clients_register_is_read() {
    // protobuf_records.py's v1 as the registry holds it (`GET /schemas/ids/2` of Apicurio after
    // the Python ProtobufSerializer registered it).
    let b64 = "Cgh2MS5wcm90bxIEdC52MSIkCgVFdmVudBIQCghldmVudF9pZBgBIAEoCRIJCgFuGAIgASgFYgZwcm90bzM=";
    let r = FakeRegistry::start(None);
    r.register_protobuf(7, b64);
    let s = ProtoSchema::parse(b64).unwrap();
    assert!(s.descriptor("t.v1.Event").is_some());
    // The bytes the Python client wrote for e-1 (n = 1), with the id changed to 7.
    let bytes = vec![0, 0, 0, 0, 7, 0, 0x0a, 3, b'e', b'-', b'1', 0x10, 1];
    let f = fingerprinter("protobuf:/event_id", &r);
    let (r1, s1, _) = registry();
    assert_eq!(
        f.fingerprint(&record(bytes)).unwrap(),
        fingerprinter("protobuf:/event_id", &r1)
            .fingerprint(&record(v1(&s1, "e-1", 5)))
            .unwrap(),
        "one event, whichever form the schema was registered in"
    );
    assert!(ProtoSchema::parse("message {").is_err());
    assert!(ProtoSchema::parse(r#"syntax = "proto3"; import "other.proto"; message A {}"#).is_err());
}

#[test]
fn keys_are_read_by_the_key_forms() {
    let (r, s1, s2) = registry();
    let keyed = |key: Vec<u8>, value: &[u8]| OwnedRecord {
        key: Some(key),
        value: Some(value.to_vec()),
        ..OwnedRecord::default()
    };
    let f = fingerprinter("protobuf-key:/event_id", &r);
    let a = f.fingerprint(&keyed(v1(&s1, "k-1", 1), b"x")).unwrap();
    assert_eq!(
        a,
        f.fingerprint(&keyed(v2(&s2, "k-1", 2), b"y")).unwrap(),
        "the value does not count"
    );
    assert_ne!(
        a,
        fingerprinter("protobuf:/event_id", &r)
            .fingerprint(&record(v1(&s1, "k-1", 1)))
            .unwrap(),
        "a key's identity is not a value's"
    );
    assert_eq!(
        f.fingerprint(&record(v1(&s1, "k-1", 1))),
        Err(Unfingerprintable::Absent),
        "a null key"
    );
    // Composite: tenant from the key, event from the value.
    let both = fingerprinter(r#"["protobuf-key:/event_id","protobuf:/event_id"]"#, &r);
    let x = both.fingerprint(&keyed(v1(&s1, "t-1", 1), &v1(&s1, "e-1", 1))).unwrap();
    assert_eq!(
        x,
        both.fingerprint(&keyed(v1(&s1, "t-1", 9), &v2(&s2, "e-1", 9))).unwrap()
    );
    assert_ne!(
        x,
        both.fingerprint(&keyed(v1(&s1, "t-2", 1), &v1(&s1, "e-1", 1))).unwrap()
    );
}

#[test]
fn the_wire_sources_have_text_forms() {
    for text in [
        "protobuf:/event_id",
        "protobuf:",
        "avro-key:/id",
        "protobuf-key:/a~1b",
        "avro:/e",
    ] {
        let s = Source::try_from(text.to_string()).unwrap();
        assert_eq!(s.to_string(), text);
        assert!(s.reads_registry(), "{text}");
    }
    for bad in ["protobuf:event_id", "avro-key:x", "protobuf-key:/a~2"] {
        assert!(Source::try_from(bad.to_string()).is_err(), "{bad}");
    }
    assert_eq!(
        Source::try_from("protobuf-key:/id".to_string()).unwrap(),
        Source::ProtobufKey("/id".into())
    );
}

/// Issue 27, item 3: a lookup names a Protobuf event by its JSON form (fields by name).
#[test]
fn a_lookup_reads_a_protobuf_record_given_as_json() {
    let (r, s1, _) = registry();
    let f = fingerprinter("protobuf-key:/event_id", &r);
    let wire = OwnedRecord {
        key: Some(v1(&s1, "k-1", 1)),
        ..OwnedRecord::default()
    };
    let json = OwnedRecord {
        key: Some(br#"{"event_id":"k-1"}"#.to_vec()),
        ..OwnedRecord::default()
    };
    assert_eq!(f.clone().for_lookup().fingerprint(&json), f.fingerprint(&wire));
    assert_eq!(f.fingerprint(&json).unwrap_err().reason(), "no_magic_byte");
    // The whole message: every proto3 field, defaults included.
    let whole = fingerprinter("protobuf:", &r);
    assert_eq!(
        whole
            .clone()
            .for_lookup()
            .fingerprint(&record(br#"{"n":0,"event_id":"e"}"#.to_vec())),
        whole.fingerprint(&record(v1(&s1, "e", 0)))
    );
}

#[test]
fn references_to_well_known_files_need_no_fetch_and_others_are_refused() {
    let (r, _, s2) = registry();
    let reference = |name: &str| serde_json::json!({"name": name, "subject": name, "version": 1});
    r.register_answer(
        5,
        serde_json::json!({"schema": V2, "schemaType": "PROTOBUF",
            "references": [reference("google/protobuf/timestamp.proto")]}),
    );
    r.register_answer(
        6,
        serde_json::json!({"schema": V1, "schemaType": "PROTOBUF", "references": [reference("other.proto")]}),
    );
    let f = fingerprinter("protobuf:/event_id", &r);
    let mut five = v2(&s2, "e-1", 1);
    five[4] = 5;
    assert!(f.fingerprint(&record(five)).is_ok());
    let e = f
        .fingerprint(&record(vec![0, 0, 0, 0, 6, 0, 0x0a, 1, b'e']))
        .unwrap_err();
    assert_eq!(e.reason(), "not_protobuf", "{e}");
    assert!(e.to_string().contains("references"), "{e}");
}
