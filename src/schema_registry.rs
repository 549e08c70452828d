//! The Schema Registry client of the `avro:` and `protobuf:` fingerprint sources (and their
//! `-key:` forms): writer schemas fetched by id (Confluent's REST API,
//! `GET {url}/schemas/ids/{id}`), parsed once (by `schemaType`: Avro, or Protobuf,
//! [`ProtoSchema`]) and cached.
//!
//! A record in the Schema Registry wire format is a magic byte `0`, the schema id (4 bytes, big
//! endian) and the record encoded with that schema ([`split_wire_format`]). The id is all a
//! consumer needs: the registry keeps every schema it ever registered under its id, immutable,
//! so a schema fetched once is kept (up to [`SchemaRegistryConfig::cache_schemas`] of them,
//! the oldest fetched left out first when more are needed).
//!
//! What a fetch can end in, and what the fingerprint then is ([`SchemaError`]):
//! - the schema: the record is decoded with it;
//! - the registry says 404 with Confluent's error code 40403 ("schema not found") in its body:
//!   the id names no schema, the record has no fingerprint (reason `unknown_schema_id`). Only
//!   once the registry has said so for [`NOT_FOUND_GRACE`]: until then the id counts as not
//!   known *yet* and the registry as unavailable for it (a registry just started answers 40403
//!   for ids it has not read back from its `_schemas` topic yet; a record forwarded without its
//!   fingerprint then would let its replay pass). The final answer is kept for
//!   [`NOT_FOUND_TTL`], so a run of such records costs one request;
//! - any other 404 (an ingress's default backend, a URL without the API's path: Apicurio answers
//!   `error_code` 0 there) is no answer about the id: the registry is unavailable, as below;
//! - anything else (no connection, a timeout, TLS refused, 401/403, 5xx, an answer that is not
//!   a schema): the registry is *unavailable*. The record is not fingerprinted and must not be
//!   forwarded as if it had no identity: the pipeline halts its partition and tries again
//!   ([`crate::pipeline`], "halt"). After a failure, requests fail at once for a back-off
//!   (1 s doubling to 30 s) instead of each waiting for its own timeout, so that a registry that
//!   does not answer stalls the consumer loop once per back-off, not once per record.
//!
//! Requests are blocking (`ureq`, with [`SchemaRegistryConfig::timeout`]): they are made from the
//! consumer loop's thread, and only for an id not seen yet.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::SchemaRegistryConfig;

/// How long a "no schema with this id" answer is kept before the registry is asked again.
pub const NOT_FOUND_TTL: Duration = Duration::from_secs(30);
/// How long the registry must keep answering 40403 for an id before the id counts as unknown
/// (`unknown_schema_id`): until then its records wait as for an unavailable registry. 30 s: a
/// registry's restart reads its `_schemas` topic back within seconds on a healthy cluster.
pub const NOT_FOUND_GRACE: Duration = Duration::from_secs(30);
/// The wait between requests for an id the registry does not know yet (within the grace).
const NOT_FOUND_RETRY: Duration = Duration::from_secs(1);
/// The first wait after a failed request before the registry is asked again.
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between requests while the registry fails.
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Splits a record in the Schema Registry wire format into its schema id and the encoded record.
/// `None` when it does not start with the magic byte `0` followed by a 4-byte id.
pub fn split_wire_format(bytes: &[u8]) -> Option<(u32, &[u8])> {
    match bytes {
        [0, a, b, c, d, rest @ ..] => Some((u32::from_be_bytes([*a, *b, *c, *d]), rest)),
        _ => None,
    }
}

pub use crate::fingerprint::ProtoSchema;

/// A parsed writer schema, of the `schemaType` the registry gave it.
#[derive(Debug, Clone)]
pub enum WriterSchema {
    /// `AVRO` (or no `schemaType`).
    Avro(Arc<apache_avro::Schema>),
    /// `PROTOBUF`.
    Protobuf(Arc<ProtoSchema>),
}

/// Why no schema came back for an id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The registry has no schema with this id (it answered 404).
    #[error("the schema registry has no schema with id {0}")]
    NotFound(u32),
    /// The registry's schema with this id is not an Avro schema (its `schemaType`, or a schema
    /// text apache-avro does not parse: the message says which).
    #[error("schema id {0} is not an Avro schema this build reads: {1}")]
    NotAvro(u32, String),
    /// The registry's schema with this id is not a Protobuf schema this build reads (its
    /// `schemaType`, a schema text that does not compile, an import of a schema other than the
    /// well-known `google/protobuf/*` files: the message says which).
    #[error("schema id {0} is not a Protobuf schema this build reads: {1}")]
    NotProtobuf(u32, String),
    /// The registry could not be asked, or did not answer with a schema (the reason, naming the
    /// URL without credentials).
    #[error("the schema registry is unavailable: {0}")]
    Unavailable(String),
}

/// A cached answer for one id.
enum Entry {
    /// The parsed writer schema.
    Found(WriterSchema),
    /// The registry had no such schema at this instant (kept for [`NOT_FOUND_TTL`]).
    NotFound(Instant),
    /// The registry answered 40403 for it first at `since`, within [`NOT_FOUND_GRACE`]: not
    /// known yet; asked again from `retry`.
    NotYet { since: Instant, retry: Instant },
    /// The registry's schema for this id is not one this build reads (kept like a schema: ids
    /// are immutable): its `schemaType` (`AVRO`, `PROTOBUF`, `JSON`, ...) and why.
    Unreadable(String, String),
}

/// The cache and the back-off state, under one lock.
#[derive(Default)]
struct State {
    /// Answers by schema id.
    entries: HashMap<u32, Entry>,
    /// Ids in the order they were cached, to leave the oldest out when the cache is full.
    order: VecDeque<u32>,
    /// While the registry fails: until when requests fail at once, the reason, and how many
    /// requests failed in a row (for the back-off).
    down: Option<(Instant, String, u32)>,
}

/// A Schema Registry client with a bounded cache of writer schemas. Shared (`Arc`) by the
/// fingerprinters of one process.
pub struct SchemaRegistry {
    /// `fingerprint.schema_registry.url` without a trailing `/`.
    base: String,
    /// The HTTP agent (timeouts, TLS roots).
    agent: ureq::Agent,
    /// `Authorization` header value for basic auth, when a username is set.
    authorization: Option<String>,
    /// Most schemas kept (at least 1).
    capacity: usize,
    /// [`NOT_FOUND_GRACE`] (shorter in tests).
    not_found_grace: Duration,
    /// Cache and back-off.
    state: Mutex<State>,
}

impl fmt::Debug for SchemaRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchemaRegistry")
            .field("base", &self.base)
            .field("basic_auth", &self.authorization.is_some())
            .field("capacity", &self.capacity)
            .finish()
    }
}

/// A `fingerprint.schema_registry` setting that cannot be used (the key, why).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fingerprint.schema_registry.{key}: {reason}")]
pub struct RegistryConfigError {
    /// The key under `fingerprint.schema_registry`.
    pub key: &'static str,
    /// Why (naming paths, never secrets).
    pub reason: String,
}

impl SchemaRegistry {
    /// A client for `cfg` (whose `password` was already read from its file, if any). Errors: a
    /// CA file that cannot be read or is not PEM, a TLS set-up that fails.
    pub fn new(cfg: &SchemaRegistryConfig) -> Result<Self, RegistryConfigError> {
        let mut builder = ureq::AgentBuilder::new()
            .timeout_connect(cfg.timeout)
            .timeout(cfg.timeout)
            .user_agent(concat!("kafka-dedup/", env!("CARGO_PKG_VERSION")));
        let mut tls = native_tls::TlsConnector::builder();
        if !cfg.ca_file.is_empty() {
            let pem = std::fs::read(&cfg.ca_file).map_err(|e| RegistryConfigError {
                key: "ca_file",
                reason: format!("cannot read {}: {e}", cfg.ca_file),
            })?;
            let cert = native_tls::Certificate::from_pem(&pem).map_err(|e| RegistryConfigError {
                key: "ca_file",
                reason: format!("{} is not a PEM certificate: {e}", cfg.ca_file),
            })?;
            tls.add_root_certificate(cert);
        }
        let tls = tls.build().map_err(|e| RegistryConfigError {
            key: "ca_file",
            reason: format!("cannot set up TLS: {e}"),
        })?;
        builder = builder.tls_connector(Arc::new(tls));
        let authorization = (!cfg.username.is_empty()).then(|| {
            use base64::Engine;
            let pair = format!("{}:{}", cfg.username, cfg.password);
            format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair))
        });
        Ok(SchemaRegistry {
            base: cfg.url.trim_end_matches('/').to_string(),
            agent: builder.build(),
            authorization,
            capacity: cfg.cache_schemas.max(1),
            not_found_grace: NOT_FOUND_GRACE,
            state: Mutex::new(State::default()),
        })
    }

    /// The same client with another grace for ids answered 40403 (tests).
    #[cfg(test)]
    pub(crate) fn with_not_found_grace(mut self, grace: Duration) -> Self {
        self.not_found_grace = grace;
        self
    }

    /// The Avro writer schema with id `id`: from the cache, or fetched (see the module
    /// documentation for what each failure means); [`SchemaError::NotAvro`] for a schema of
    /// another type.
    pub fn schema(&self, id: u32) -> Result<Arc<apache_avro::Schema>, SchemaError> {
        match self.writer_schema(id)? {
            Ok(WriterSchema::Avro(schema)) => Ok(schema),
            Ok(WriterSchema::Protobuf(_)) => Err(SchemaError::NotAvro(id, "its schemaType is PROTOBUF".into())),
            Err((kind, why)) if kind == "AVRO" => Err(SchemaError::NotAvro(id, why)),
            Err((kind, _)) => Err(SchemaError::NotAvro(id, format!("its schemaType is {kind}"))),
        }
    }

    /// The Protobuf writer schema with id `id`, as [`Self::schema`] for Avro;
    /// [`SchemaError::NotProtobuf`] for a schema of another type.
    pub fn protobuf_schema(&self, id: u32) -> Result<Arc<ProtoSchema>, SchemaError> {
        match self.writer_schema(id)? {
            Ok(WriterSchema::Protobuf(schema)) => Ok(schema),
            Ok(WriterSchema::Avro(_)) => Err(SchemaError::NotProtobuf(id, "its schemaType is AVRO".into())),
            Err((kind, why)) if kind == "PROTOBUF" => Err(SchemaError::NotProtobuf(id, why)),
            Err((kind, _)) => Err(SchemaError::NotProtobuf(id, format!("its schemaType is {kind}"))),
        }
    }

    /// The writer schema with id `id`, or (inner error) its `schemaType` and why this build does
    /// not read it; the outer error for an id the registry lacks or a registry that cannot be
    /// asked.
    fn writer_schema(&self, id: u32) -> Result<Result<WriterSchema, (String, String)>, SchemaError> {
        let now = Instant::now();
        {
            let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            match state.entries.get(&id) {
                Some(Entry::Found(schema)) => return Ok(Ok(schema.clone())),
                Some(Entry::Unreadable(kind, why)) => return Ok(Err((kind.clone(), why.clone()))),
                Some(Entry::NotFound(at)) if now.duration_since(*at) < NOT_FOUND_TTL => {
                    return Err(SchemaError::NotFound(id))
                }
                Some(Entry::NotYet { since, retry }) if now < *retry => {
                    return Err(not_yet(id, now.duration_since(*since), self.not_found_grace))
                }
                _ => {}
            }
            if let Some((until, why, _)) = &state.down {
                if now < *until {
                    return Err(SchemaError::Unavailable(why.clone()));
                }
            }
        }
        // Not under the lock: a request may take up to the timeout.
        let fetched = self.fetch(id);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let entry = match &fetched {
            Ok(Ok(schema)) => Entry::Found(schema.clone()),
            Ok(Err((kind, why))) => Entry::Unreadable(kind.clone(), why.clone()),
            Err(SchemaError::NotFound(_)) => {
                // Final once the registry said so for the grace, or said so before (an answer
                // kept past its TTL and asked again); until then: not known yet.
                let since = match state.entries.get(&id) {
                    Some(Entry::NotYet { since, .. }) => Some(*since),
                    Some(Entry::NotFound(_)) => None,
                    _ => Some(now),
                };
                match since.filter(|s| now.duration_since(*s) < self.not_found_grace) {
                    Some(since) => {
                        state.down = None;
                        let retry = now + NOT_FOUND_RETRY;
                        if state.entries.insert(id, Entry::NotYet { since, retry }).is_none() {
                            state.order.push_back(id);
                        }
                        return Err(not_yet(id, now.duration_since(since), self.not_found_grace));
                    }
                    None => Entry::NotFound(now),
                }
            }
            // `fetch` answers these inside `Ok`; passed on uncached should that change.
            Err(other @ (SchemaError::NotAvro(..) | SchemaError::NotProtobuf(..))) => return Err(other.clone()),
            Err(SchemaError::Unavailable(why)) => {
                let failures = state.down.as_ref().map_or(0, |d| d.2).saturating_add(1);
                let wait = BACKOFF_FIRST
                    .saturating_mul(1 << (failures - 1).min(5))
                    .min(BACKOFF_MAX);
                state.down = Some((Instant::now() + wait, why.clone(), failures));
                return Err(SchemaError::Unavailable(why.clone()));
            }
        };
        state.down = None;
        if state.entries.insert(id, entry).is_none() {
            state.order.push_back(id);
        }
        while state.order.len() > self.capacity {
            if let Some(old) = state.order.pop_front() {
                state.entries.remove(&old);
            }
        }
        fetched
    }

    /// Asks the registry for schema `id` once (the inner error as for [`Self::writer_schema`]).
    fn fetch(&self, id: u32) -> Result<Result<WriterSchema, (String, String)>, SchemaError> {
        let url = format!("{}/schemas/ids/{id}", self.base);
        let mut request = self
            .agent
            .get(&url)
            .set("Accept", "application/vnd.schemaregistry.v1+json, application/json");
        if let Some(auth) = &self.authorization {
            request = request.set("Authorization", auth);
        }
        let response = match request.call() {
            Ok(r) => r,
            Err(ureq::Error::Status(404, r)) => {
                // Only Confluent's "schema not found" is an answer about the id; any other 404 (a
                // wrong path, a proxy's default page) says nothing about it.
                let body = r.into_string().unwrap_or_default();
                return match serde_json::from_str::<ErrorAnswer>(&body) {
                    Ok(ErrorAnswer { error_code: 40403 }) => Err(SchemaError::NotFound(id)),
                    _ => Err(SchemaError::Unavailable(format!(
                        "GET {url} answered 404 without Confluent's error code 40403 (is the URL the \
                         registry's API base?): {}",
                        body.chars().take(200).collect::<String>()
                    ))),
                };
            }
            Err(ureq::Error::Status(code, r)) => {
                return Err(SchemaError::Unavailable(format!(
                    "GET {url} answered {code} {}",
                    r.status_text()
                )))
            }
            Err(ureq::Error::Transport(t)) => return Err(SchemaError::Unavailable(format!("GET {url}: {t}"))),
        };
        let text = response
            .into_string()
            .map_err(|e| SchemaError::Unavailable(format!("GET {url}: reading the answer: {e}")))?;
        let answer: SchemaAnswer = serde_json::from_str(&text)
            .map_err(|e| SchemaError::Unavailable(format!("GET {url}: not a schema answer: {e}")))?;
        let kind = answer.schema_type.unwrap_or_else(|| "AVRO".to_string());
        // A Protobuf schema's references to the well-known `google/protobuf/*.proto` files (some
        // serializers register them) need no fetch: the parser has them.
        let well_known = |r: &serde_json::Value| {
            kind == "PROTOBUF" && r["name"].as_str().is_some_and(|n| n.starts_with("google/protobuf/"))
        };
        if !answer.references.iter().all(well_known) {
            return Ok(Err((
                kind,
                "it references other schemas, which this build does not fetch".to_string(),
            )));
        }
        Ok(match kind.as_str() {
            "AVRO" => apache_avro::Schema::parse_str(&answer.schema)
                .map(|s| WriterSchema::Avro(Arc::new(s)))
                .map_err(|e| (kind, e.to_string())),
            "PROTOBUF" => ProtoSchema::parse(&answer.schema)
                .map(|s| WriterSchema::Protobuf(Arc::new(s)))
                .map_err(|e| (kind, e)),
            _ => Err((kind.clone(), format!("its schemaType is {kind}"))),
        })
    }

    /// How many answers the cache holds (schemas, and ids recently not found).
    pub fn cached(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).entries.len()
    }
}

/// The body of an error answer of Confluent's API (`{"error_code": 40403, "message": ...}`).
#[derive(serde::Deserialize)]
struct ErrorAnswer {
    /// Confluent's error code (40403: schema not found).
    error_code: i64,
}

/// The error of an id the registry answered 40403 for within the grace.
fn not_yet(id: u32, for_: Duration, grace: Duration) -> SchemaError {
    SchemaError::Unavailable(format!(
        "the schema registry does not know schema id {id} yet (40403 for {:.0?}): its records wait \
         until it does, or for {grace:?} before they count as unknown_schema_id",
        for_
    ))
}

/// The body of `GET /schemas/ids/{id}` (Confluent's API; Apicurio's `ccompat` API answers the
/// same). `schemaType` is absent for Avro.
#[derive(serde::Deserialize)]
struct SchemaAnswer {
    /// The schema text.
    schema: String,
    /// `AVRO` (or absent), `PROTOBUF`, `JSON`.
    #[serde(rename = "schemaType", default)]
    schema_type: Option<String>,
    /// Schemas this one references by name.
    #[serde(default)]
    references: Vec<serde_json::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_format_is_a_zero_byte_and_a_big_endian_id() {
        assert_eq!(split_wire_format(&[0, 0, 0, 1, 2, 9, 9]), Some((258, &[9u8, 9][..])));
        assert_eq!(split_wire_format(&[0, 0, 0, 0, 7]), Some((7, &[][..])));
        assert_eq!(split_wire_format(&[1, 0, 0, 0, 7, 1]), None, "magic byte 1");
        assert_eq!(split_wire_format(&[0, 0, 0, 7]), None, "id cut short");
        assert_eq!(split_wire_format(b"{\"a\":1}"), None);
    }
}
