//! Configuration: the TOML file of `--config`, overridden key by key by environment variables
//! `KAFKA_DEDUP__SECTION__KEY`, validated before anything connects to Kafka.
//!
//! The key names are a contract (docs/configuration.md, "Configuration"). Every struct denies unknown
//! fields, so a typo in a file or an environment variable is an error, not a silently ignored
//! setting. Every error names the key (`checkpoint.interval`) and the reason; `main` turns it into
//! exit code 2.
//!
//! The rooms: this file loads ([`Config::from_toml_str`]: the file, the environment, the error
//! naming the key); `config/client.rs` is `[kafka]` and its group protocol;
//! `config/sections.rs` the other sections with their defaults; `config/validate.rs` the checks
//! serde cannot make; `config/messages.rs` turns serde's and TOML's errors into key and reason.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::fingerprint::Source;
pub use crate::security::is_secret;
use crate::security::{self, SecurityError};

/// Prefix of the environment variables that override configuration keys:
/// `KAFKA_DEDUP__CHECKPOINT__INTERVAL=5s` sets `checkpoint.interval`.
pub const ENV_PREFIX: &str = "KAFKA_DEDUP";

/// A configuration that cannot be used. `main` prints it and exits with code 2.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file named by `--config` could not be read.
    #[error("cannot read configuration file {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    /// A key holds a value of the wrong shape, is unknown, is missing, or fails validation.
    #[error("configuration key `{key}`: {reason}")]
    Key { key: String, reason: String },
    /// The text is not valid TOML at a line that holds no key (a line with a key or a table
    /// header is reported as [`ConfigError::Key`] of it, with the position in the reason).
    #[error("not valid TOML at line {line}, column {column}: {reason}")]
    Syntax {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column (in characters) of the error.
        column: usize,
        /// toml's message.
        reason: String,
    },
}

impl ConfigError {
    fn key(key: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError::Key {
            key: key.into(),
            reason: reason.into(),
        }
    }

    /// The dotted key the error is about (`output.topic`), if it is about one.
    pub fn key_name(&self) -> Option<&str> {
        match self {
            ConfigError::Key { key, .. } => Some(key),
            ConfigError::Read { .. } | ConfigError::Syntax { .. } => None,
        }
    }
}

impl From<SecurityError> for ConfigError {
    fn from(e: SecurityError) -> Self {
        ConfigError::key(format!("kafka.properties.{}", e.property), e.reason)
    }
}

/// The whole configuration (docs/configuration.md, "Configuration").
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where the brokers are and how to talk to them.
    #[serde(default)]
    pub kafka: KafkaConfig,
    /// The topic read, and the consumer group that reads it.
    pub input: InputConfig,
    /// The topic written, and how.
    pub output: OutputConfig,
    /// What identifies an event, and what happens when a record has no identity.
    #[serde(default)]
    pub fingerprint: FingerprintConfig,
    /// How often state is made durable and generations rotate.
    #[serde(default)]
    pub checkpoint: CheckpointConfig,
    /// The local fingerprint store (a cache of the output topic).
    #[serde(default)]
    pub store: StoreConfig,
    /// The HTTP endpoint for metrics, health and store inspection.
    #[serde(default)]
    pub http: HttpConfig,
}

impl Config {
    /// Loads `path` (TOML), applies `KAFKA_DEDUP__*` overrides from the process environment,
    /// and validates. Errors name the key and the reason.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Self::load_with_env(path, None)
    }

    /// As [`Config::load`], with the environment given as a map (for tests); `None` reads the
    /// process environment.
    pub fn load_with_env(
        path: &Path,
        env: Option<std::collections::HashMap<String, String>>,
    ) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        Self::from_toml_str(&text, env)
    }

    /// Parses TOML text plus environment overrides, then validates. Errors: a syntax error names
    /// the key of its line with the line and column ([`ConfigError::Syntax`] when the line has
    /// none); the others name their key.
    pub fn from_toml_str(
        text: &str,
        env: Option<std::collections::HashMap<String, String>>,
    ) -> Result<Config, ConfigError> {
        // Syntax errors first, with where they are and the key of that line.
        let file = match text.parse::<toml::Table>() {
            Ok(file) => file,
            Err(e) => return Err(syntax_error(text, e.span().map_or(0, |s| s.start), e.message())),
        };
        // The keys the environment sets, dotted and in lower case (`KAFKA_DEDUP__CHECKPOINT__GENERATIONS`
        // is `checkpoint.generations`): their values are strings, converted; the file's are not.
        // As the config crate reads them: names in any case (it lowercases them), a name that is
        // not Unicode skipped (`std::env::vars` would panic on one, in a variable of anyone's).
        let prefix = format!("{}__", ENV_PREFIX.to_lowercase());
        let env_keys: std::collections::BTreeSet<String> = match &env {
            Some(env) => env.keys().cloned().collect::<Vec<_>>(),
            None => std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()).collect(),
        }
        .iter()
        .filter_map(|k| {
            k.to_lowercase()
                .strip_prefix(&prefix)
                .map(|rest| rest.replace("__", "."))
        })
        .collect();
        let mut environment = config::Environment::with_prefix(ENV_PREFIX)
            .prefix_separator("__")
            .separator("__");
        if let Some(env) = env {
            environment = environment.source(Some(env.into_iter().collect()));
        }
        let built = config::Config::builder()
            .add_source(config::File::from_str(text, config::FileFormat::Toml))
            .add_source(environment)
            .build()
            .map_err(|e| ConfigError::key("(environment)", e.to_string()))?;
        let mut cfg: Config = serde_path_to_error::deserialize(built).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner().to_string();
            let (key, reason) = split_serde_error(&path, &inner);
            let reason = explain(&key, reason);
            ConfigError::key(key, reason)
        })?;
        // Serializing the configuration back cannot fail (plain data); if it ever did, the file's
        // types would go unchecked, not be refused.
        if let Ok(effective) = toml::Table::try_from(&cfg) {
            kinds::check_kinds(&file, &effective, &|key| {
                env_keys.iter().any(|e| e == key || key.starts_with(&format!("{e}.")))
            })?;
        }
        cfg.kafka.resolve_files()?;
        cfg.fingerprint.schema_registry.resolve_files()?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The transactional id used in transactional mode (see [`OutputConfig::transactional_id`]).
    pub fn transactional_id(&self) -> String {
        if !self.output.transactional_id.is_empty() {
            self.output.transactional_id.clone()
        } else {
            format!("{}-{}", self.input.group_id, self.input.group_instance_id)
        }
    }

    /// The configuration of the filter stage (stage 2) of the global scope: today's filter
    /// reading `fingerprint.route_topic` (from its start, where nothing is committed) in the
    /// group `<input.group_id>-global`, with [`InputConfig::routed_from`] naming the configured
    /// input topic. `None` in the partition scope (the filter reads `input.topic` itself).
    pub fn filter_stage(&self) -> Option<Config> {
        if self.fingerprint.scope != Scope::Global {
            return None;
        }
        let mut c = self.clone();
        c.input.routed_from = Some(self.input.topic.clone());
        c.input.topic = self.fingerprint.route_topic.clone();
        c.input.group_id = format!("{}-global", self.input.group_id);
        c.input.start = Start::Earliest;
        Some(c)
    }

    /// The effective configuration as TOML, with secret property values replaced by `"<redacted>"`.
    pub fn to_redacted_toml(&self) -> String {
        let mut copy = self.clone();
        let flat = copy.kafka.flat_properties();
        copy.kafka.properties = flat
            .into_iter()
            .map(|(k, v)| {
                let v = if is_secret(&k) { "<redacted>".to_string() } else { v };
                (k, PropertyValue::String(v))
            })
            .collect();
        if !copy.http.store_token.is_empty() {
            copy.http.store_token = "<redacted>".to_string();
        }
        if !copy.fingerprint.schema_registry.password.is_empty() {
            copy.fingerprint.schema_registry.password = "<redacted>".to_string();
        }
        toml::to_string_pretty(&copy).unwrap_or_else(|e| format!("# cannot render configuration: {e}\n"))
    }
}

mod client;
mod kinds;
mod messages;
mod sections;
mod validate;

pub use client::*;
pub use sections::*;

use messages::{explain, split_serde_error, syntax_error};

#[cfg(test)]
mod tests;

#[cfg(test)]
mod security_tests;
