//! Fitting a producer to a topic's `max.message.bytes` ([`fit_to_topic`]): librdkafka then
//! refuses a record the topic could not take when it is produced (which halts its partition)
//! instead of building a batch the broker refuses (fatal under the gapless guarantee).

use super::*;

/// The `message.max.bytes` a producer is fitted to for a topic taking batches of at most `limit`
/// bytes (its `max.message.bytes`): `limit` less [`BATCH_FRAMING`], and, when the broker
/// recompresses the batches (`recompressed`, [`recompresses`]), less the codec's worst-case
/// growth on incompressible data, `limit / 128 + 1024` (lz4's and zstd's bounds are about
/// n/255 + 16 and n/128; gzip's 5 bytes a 16 KB block; Kafka checks the recompressed batch
/// against `max.message.bytes` again, `UnifiedLog.append`). At least 1000, librdkafka's minimum.
pub fn size_fit(limit: usize, recompressed: bool) -> usize {
    let growth = if recompressed { limit / 128 + 1024 } else { 0 };
    limit.saturating_sub(BATCH_FRAMING + growth).max(1000)
}

/// True when a broker with the topic configuration `configs` recompresses what a producer of
/// `cfg` writes: its `compression.type` is a codec (not `producer` or `uncompressed`) other than
/// the producer's `compression.codec` / `compression.type` (librdkafka's default `none`).
pub fn recompresses(configs: &std::collections::BTreeMap<String, String>, cfg: &Config) -> bool {
    let props = cfg.kafka.flat_properties();
    let codec = props
        .get("compression.type")
        .or_else(|| props.get("compression.codec"))
        .map_or("none", |v| v.trim());
    match configs.get("compression.type").map(|v| v.trim()) {
        None | Some("producer" | "uncompressed" | "none") => false,
        Some(topic) => !topic.eq_ignore_ascii_case(codec),
    }
}

/// Fits a producer's `c` to a topic's `max.message.bytes` (`limit`, when it is known:
/// [`topic_configs`]; [`size_fit`]): `message.max.bytes` and `batch.size` (librdkafka:
/// 1,000,000) become the fit. Under `[kafka.properties]` a `message.max.bytes` or `batch.size`
/// is kept as written for the output's producer (`Kept::AsWritten`), and lowered to the fit when
/// above it for the route producer (`Kept::BelowFit`: the setting is meant for the output, the
/// route topic's limit still bounds its copies). librdkafka then refuses a record the topic could
/// not take when it is produced, which halts its partition (`pipeline::halt`, the route stage's
/// `Router::halt`), instead of building a batch the broker refuses (`MessageSizeTooLarge`), which
/// under the gapless guarantee is a fatal error of the producer: every partition stopped.
///
/// A topic `max.message.bytes` below librdkafka's smallest `message.max.bytes` (1000) plus the
/// margin is said at start (a warning naming `topic`): a record near 1000 bytes then passes the
/// producer and the broker refuses its batch, which stops the process.
pub fn fit_to_topic(
    c: &mut ClientConfig,
    cfg: &Config,
    topic: &str,
    limit: Option<usize>,
    recompressed: bool,
    kept: Kept,
) {
    let Some(limit) = limit else { return };
    let fit = size_fit(limit, recompressed);
    if fit > limit.saturating_sub(BATCH_FRAMING) {
        tracing::warn!(
            topic,
            max_message_bytes = limit,
            "the topic's max.message.bytes is below what a producer can be fitted to (librdkafka's message.max.bytes \
             is at least 1000, plus {BATCH_FRAMING} bytes of batch framing): a record near 1000 bytes would be refused \
             in its batch, which stops the process; raise the topic's max.message.bytes"
        );
    }
    let set = cfg.kafka.flat_properties();
    for (name, fitted) in [("message.max.bytes", fit), ("batch.size", fit.min(1_000_000))] {
        let written = set.get(name).and_then(|v| v.trim().parse::<usize>().ok());
        match (written, kept) {
            (Some(_), Kept::AsWritten) => {}
            (Some(w), Kept::BelowFit) if w <= fitted => {}
            _ => {
                c.set(name, fitted.to_string());
            }
        }
    }
}

/// What [`fit_to_topic`] does with a size limit set under `[kafka.properties]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Kept as written (the output's producer).
    AsWritten,
    /// Kept when at most the fit, else lowered to it (the route producer).
    BelowFit,
}
