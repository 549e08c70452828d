//! The audit's rules, as a pure function over two in-memory record streams: one input partition
//! and the output partition it is forwarded to ([`audit_partition`]). No Kafka, no clock reads:
//! the wall clock the timestamps are capped at comes in [`Rules::now_ms`].
//!
//! # The walk
//!
//! The output is read in offset order. Before an output record is judged, the input is read ahead
//! far enough to hold its source: with provenance, up to the input offset it names; without, until
//! an unmatched input record with its identity lies at or after the *cursor* (the source of the
//! newest in-order output record), or the input clock is [`Horizon::max_ms`] past both the
//! cursor's clock and the output record's own clock. The input records read and not yet settled
//! form the *window*; an output record is matched to one of them:
//!
//! - with provenance ([`Origin`]): the input record at the offset it names;
//! - without: an unmatched input record with the same [`Identity`], the first at or after the
//!   cursor, else the first before it (which is then out of order).
//!
//! An input record is *settled* once the cursor's input clock is [`Horizon::max_ms`] past its own
//! (nothing in order can still match it or excuse it), or when the output has ended; while the
//! input is read ahead, also once the input read (to a named offset) or the output clock (to a
//! fingerprint) is H_max past it, which is where the cursor is going. A record never matched is
//! then a replay or lost (rules below). The window is therefore the input from H_max before the
//! cursor to H_max past the newest output timestamp: memory is bounded by what the input holds
//! in about two horizons, as the filter's own generations are. (This assumes the output keeps
//! the input's timestamps, as kafka-dedup does: an output topic with `LogAppendTime` stamps its
//! records later, and the window grows by that lag.)
//!
//! # The rules
//!
//! Clocks: each stream has a *partition clock*, the newest record timestamp read so far in that
//! stream (a timestamp that is missing or negative does not move it, one later than
//! [`Rules::now_ms`] counts as `now_ms`). Distances are measured on it, as the filter measures its
//! horizon: H_min = (generations - 1) x interval, H_max = generations x interval ([`Horizon`]).
//!
//! - **Duplicate**: an output record that (a) carries provenance naming an input record an
//!   earlier output record was already matched to (the same input record forwarded twice), or
//!   (b) whose fingerprint an earlier output record has, less than H_min before it on the output
//!   clock (a replay the filter must have dropped). A repeat H_min or more apart is not a
//!   duplicate by (b): between H_min and H_max the filter may forward it, from H_max on it must.
//!   Rule (a) holds while the input record is in the window; one named again after it settled
//!   (H_max behind the cursor) is reported out of order, its earlier fate no longer known.
//! - **Lost**: an input record in the range that no output record is matched to, unless it is a
//!   replay: another copy of its fingerprint that was forwarded (matched), or already counted as
//!   lost, or precedes the range (its fate is outside the audit; presumed forwarded) lies less than
//!   H_max before it, or a forwarded copy lies less than H_min after it (the same event, forwarded
//!   from its replay), on the input clock. So an event is counted lost once, however many
//!   replays it has. Records without fingerprint follow `on_missing`: `forward` ones are matched
//!   by their bytes (an xxh3-128 of key and value, [`content_hash`]) and are lost when not in the
//!   output (they are never replays); `drop`, `dead_letter` and `fail` ones are not expected in
//!   the output and never lost (counted as `not_forwardable`, or dead-lettered, below).
//! - **Let past on purpose** (not a failure): an input record of the range no output record is
//!   matched to, that the filter put aside by its configuration ([`Rules::diverted`]): found in
//!   the dead-letter topic, it is **dead-lettered** (with the copy's reason); named in
//!   `input.skip`, **skipped**. This comes before the replay rule (the filter puts a record aside
//!   before it looks it up), and such a record is no copy of its event for the rules above: the
//!   filter learns no fingerprint of it, so a replay of it not in the output is lost.
//! - **Out of order**: an output record whose source has a lower input offset than the source of
//!   an earlier output record (the cursor). Each such record counts once; the cursor stays.
//! - **Repeat outside the horizon** (not a failure): an output record matched to an input
//!   record of the range whose fingerprint an earlier output record has, H_max or more before it
//!   on the output clock (and less than [`REPEATS_WITHIN`] x H_max: the memory bound). The
//!   filter forwards such a repeat by its rule; a replay that arrives this late is one the
//!   horizon is too short for.
//! - **Unexpected**: an output record that is no copy of an input record of the range: with
//!   provenance, it names another input partition, an offset holding no record the filter
//!   forwards, or a record with another fingerprint; without, no input record nearby has its
//!   identity.
//!
//! Which records are judged: input records in [`Bounds`] (offset and input clock); the records
//! read before them (the *lead-in*, H_max of input clock) only inform. An output record is judged
//! when its source is in the range (provenance, or a match); without provenance, a duplicate or
//! unexpected record is judged when it comes after the first output record matched to the range
//! (and, unexpected ones, before the last when the input goes on past the range: records after
//! it may copy that input, and are counted as not judged; when the range reaches the input's end,
//! [`Rules::input_end`], they are judged).

mod findings;
mod record;
mod rules;
mod walk;

pub use findings::*;
pub use record::*;
pub use rules::*;
pub use walk::{audit_partition, REPEATS_WITHIN};

#[cfg(test)]
mod tests;
