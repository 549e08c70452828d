//! The route stage's start-time checks: the input and route topics exist
//! ([`wait_for_topics`]), the route topic's limits and retention ([`route_topic_limits`],
//! [`route_retention_risk`]), and where partitions without a committed offset start with
//! `input.start = "latest"` ([`start_at_the_end`]).

use super::*;

/// `input.start = "latest"`, before the assignment `tpl` takes effect: commits the end of each of
/// its partitions that has no committed offset, so that they start there (and a restart before
/// the first periodic commit resumes there), while `auto.offset.reset` stays `earliest`: a
/// committed offset that retention deleted resumes at the oldest record left, never at the end
/// (as the filter does, `recovery`). A failure is logged: of the fetch, and nothing is committed;
/// of one partition (a partition-level error in the answer, [`kafka::answered`], or its end not
/// read), and that partition is left out, the others' ends committed. A partition left out
/// starts at its committed offset, or the log start when none (it copies more, loses nothing).
pub(super) fn start_at_the_end(consumer: &RouteConsumer, topic: &str, tpl: &TopicPartitionList) {
    let parts: Vec<i32> = tpl.elements_for_topic(topic).iter().map(|e| e.partition()).collect();
    if parts.is_empty() {
        return;
    }
    let result = consumer.committed_offsets(tpl.clone(), KAFKA_TIMEOUT).and_then(|committed| {
        let mut ends = TopicPartitionList::new();
        for p in &parts {
            // A partition the answer holds an error for is not "uncommitted": it is left out
            // rather than commit the end over a commit that could not be read.
            let end = kafka::answered(&committed, topic, *p).and_then(|e| match e.offset() {
                Offset::Offset(_) => Ok(None),
                _ => consumer.fetch_watermarks(topic, *p, KAFKA_TIMEOUT).map(|(_, high)| Some(high)),
            });
            match end {
                Ok(Some(high)) => ends.add_partition_offset(topic, *p, Offset::Offset(high))?,
                Ok(None) => {}
                Err(e) => warn!(partition = p, error = %e, "route stage: reading this partition's committed offset or end failed; it starts at its committed offset, or the log start when none (input.start = latest)"),
            }
        }
        if ends.count() > 0 {
            kafka::commit_within(consumer, &ends, KAFKA_TIMEOUT)?;
            info!(positions = ?ends.to_topic_map(), "route stage: nothing committed for these partitions; starting at the input's end (input.start = latest)");
        }
        Ok(())
    });
    if let Err(e) = result {
        warn!(partitions = ?parts, error = %e, "route stage: committing the input's end (input.start = latest) failed; partitions without a commit start at the log start");
    }
}

/// Why the route topic's retention may delete copies the filter stage has not read, from the
/// input's and the route topic's configurations (name → value, [`kafka::topic_configs`]), or
/// `None`. Kafka deletes a topic's records by their timestamps (`retention.ms`, the newest
/// timestamp of a segment), and the copies keep the input records' own: a route topic keeping
/// records for less time than the input (`-1`: forever) deletes a copy of an old input record
/// (a backlog on a first start) within minutes of its copy, read or not.
pub fn route_retention_risk(input: &BTreeMap<String, String>, route: &BTreeMap<String, String>) -> Option<String> {
    let retention = |c: &BTreeMap<String, String>| -> Option<i64> {
        let ms: i64 = c.get("retention.ms")?.trim().parse().ok()?;
        Some(if ms < 0 { i64::MAX } else { ms })
    };
    let (i, r) = (retention(input)?, retention(route)?);
    let show = |ms: i64| {
        if ms == i64::MAX {
            "-1 (forever)".to_string()
        } else {
            ms.to_string()
        }
    };
    (r < i).then(|| {
        format!(
            "retention.ms of the route topic is {}, shorter than the input's {}",
            show(r),
            show(i)
        )
    })
}

/// The route topic's configuration, read at start (DescribeConfigs, as the filter reads its
/// output's): the record timestamps it takes, its `max.message.bytes` (`None` when not reported)
/// and whether the broker recompresses copies (the route producer is fitted to both,
/// [`kafka::fit_to_topic`]), and a warning when its retention
/// may delete copies before the filter stage reads them ([`route_retention_risk`]). A
/// configuration that cannot be read (no `DESCRIBE_CONFIGS` permission) is said once and no limit
/// is assumed: a copy the topic then refuses stops the process, as before.
pub(super) fn route_topic_limits(cfg: &Config) -> (TimestampLimits, Option<usize>, bool) {
    // As the filter asks for its output's (a broker that does not implement DescribeConfigs,
    // librdkafka's mock cluster, never answers: the start must not wait long for it).
    let read = |topic: &str| kafka::topic_configs(cfg, topic, crate::pipeline::DESCRIBE_CONFIGS_TIMEOUT);
    let route = match read(&cfg.fingerprint.route_topic) {
        Ok(route) => route,
        Err(e) => {
            warn!(
                route = %cfg.fingerprint.route_topic, error = %e,
                "route stage: the route topic's configuration could not be read (DescribeConfigs): its timestamp \
                 limits, size limit and retention are not checked"
            );
            return (TimestampLimits::default(), None, false);
        }
    };
    match read(&cfg.input.topic) {
        Ok(input) => {
            if let Some(why) = route_retention_risk(&input, &route) {
                warn!(
                    route = %cfg.fingerprint.route_topic, input = %cfg.input.topic,
                    "fingerprint.route_topic: {why}: the copies keep the input records' timestamps, by which Kafka \
                     deletes records, so a copy of an input record older than the route topic's retention is deleted \
                     within minutes, read or not (lost); set the route topic's retention.ms to at least the input's \
                     plus the longest the filter stage may lag"
                );
            }
        }
        Err(e) => debug!(error = %e, "route stage: the input topic's retention could not be read"),
    }
    let limit = route.get("max.message.bytes").and_then(|v| v.trim().parse().ok());
    (
        TimestampLimits::of_configs(&route),
        limit,
        kafka::recompresses(&route, cfg),
    )
}

/// Checks that the input and route topics exist, retrying while the brokers cannot be reached.
/// Returns the route topic's partition count; `None` when a stop was requested meanwhile.
pub(super) fn wait_for_topics(cfg: &Config, shutdown: &Shutdown) -> Result<Option<usize>, RunError> {
    let metadata: kafka::Reader = kafka::reader_config(cfg).create_with_context(kafka::ReaderContext::default())?;
    loop {
        match kafka::check_route_topic(
            metadata.client(),
            &cfg.input.topic,
            &cfg.fingerprint.route_topic,
            KAFKA_TIMEOUT,
        ) {
            Ok((inputs, routes)) => {
                if routes < inputs {
                    warn!(
                        input_partitions = inputs,
                        route_partitions = routes,
                        "the route topic has fewer partitions than the input: the filter stage spreads over fewer \
                         instances than the input could"
                    );
                }
                return Ok(Some(routes));
            }
            Err(TopicError::Kafka(e)) => {
                warn!(error = %e, "route stage: cannot reach the brokers; retrying");
                if shutdown.is_triggered() {
                    return Ok(None);
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            Err(e) => return Err(e.into()),
        }
    }
}
