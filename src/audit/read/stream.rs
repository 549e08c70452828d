//! The two streams a partition's walk reads ([`Stream`]: one partition of the input or the
//! output topic, from a start offset to an end, as `AuditRecord`s) and the progress line
//! ([`Progress`]).

use super::*;

/// Which topic a stream reads.
#[derive(Clone, Copy)]
pub(super) enum Side<'a> {
    /// The input topic; in the global scope's filter stage (the route topic) the records'
    /// provenance names `routed_from`, the configured input topic.
    Input {
        /// Global scope: the input topic the route stage copied from.
        routed_from: Option<&'a str>,
    },
    /// The output topic; provenance headers name `input_topic`.
    Output {
        /// The input topic.
        input_topic: &'a str,
    },
}

/// One partition of a topic, read from a start offset to an end, as [`AuditRecord`]s.
pub(super) struct Stream<'a> {
    consumer: &'a Reader,
    topic: &'a str,
    partition: i32,
    /// Records at or past this offset are not read.
    end: i64,
    side: Side<'a>,
    fingerprinter: &'a Fingerprinter,
    progress: &'a Progress,
    /// Set when an output record carries a log-append time.
    log_append_time: &'a Cell<bool>,
    done: bool,
    errors: u32,
    last_record: Instant,
    /// Global scope, the route topic: the highest input offset seen per input partition, to know
    /// the route stage's re-copies.
    high_water: crate::global::HighWater,
    /// The offset of the next record expected, for errors.
    next: i64,
}

impl<'a> Stream<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn open(
        consumer: &'a Reader,
        topic: &'a str,
        partition: i32,
        from: i64,
        end: i64,
        side: Side<'a>,
        fingerprinter: &'a Fingerprinter,
        progress: &'a Progress,
        log_append_time: &'a Cell<bool>,
    ) -> Result<Self, AuditError> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Offset(from))?;
        consumer.assign(&tpl)?;
        Ok(Stream {
            consumer,
            topic,
            partition,
            end,
            side,
            fingerprinter,
            progress,
            log_append_time,
            done: from >= end,
            errors: 0,
            last_record: Instant::now(),
            high_water: crate::global::HighWater::new(),
            next: from,
        })
    }

    pub(super) fn record(&self, m: &BorrowedMessage<'_>) -> AuditRecord {
        let ts = m.timestamp();
        let millis = ts.to_millis();
        match self.side {
            Side::Input { .. } => AuditRecord::input(m, m.offset(), millis, self.fingerprinter),
            Side::Output { input_topic } => {
                if matches!(ts, Timestamp::LogAppendTime(_)) {
                    self.log_append_time.set(true);
                }
                AuditRecord::output(m, m.offset(), millis, self.fingerprinter, input_topic)
            }
        }
    }
}

impl Iterator for Stream<'_> {
    type Item = Result<AuditRecord, AuditError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            self.progress.tick();
            match self.consumer.poll(Duration::from_millis(200)) {
                Some(Ok(m)) if m.topic() == self.topic && m.partition() == self.partition => {
                    self.last_record = Instant::now();
                    if m.offset() >= self.end {
                        self.done = true;
                        return None;
                    }
                    self.next = m.offset() + 1;
                    if let Side::Input {
                        routed_from: Some(from),
                    } = self.side
                    {
                        // A second copy the route stage made of an input record (after a crash
                        // of the route stage) is not another event: the filter stage drops it
                        // whatever its delay, and so does the audit.
                        let source = crate::provenance::Provenance::of(&m, from).map(|s| (s.partition, s.offset));
                        if crate::global::copy_fate(&self.high_water, source) == crate::global::CopyFate::Recopy {
                            self.progress.input(m.offset());
                            continue;
                        }
                        crate::global::note_taken(&mut self.high_water, source);
                    }
                    let r = self.record(&m);
                    match self.side {
                        Side::Input { .. } => self.progress.input(r.offset),
                        Side::Output { .. } => self.progress.output(r.offset),
                    }
                    return Some(Ok(r));
                }
                Some(Ok(_)) => {}
                Some(Err(KafkaError::PartitionEOF(q))) if q == self.partition => self.done = true,
                Some(Err(KafkaError::PartitionEOF(_))) => {}
                Some(Err(e)) => {
                    self.errors += 1;
                    tracing::warn!(topic = self.topic, partition = self.partition, error = %e, "error while reading");
                    if self.errors > MAX_ERRORS {
                        self.done = true;
                        return Some(Err(e.into()));
                    }
                }
                None => {
                    if self.last_record.elapsed() > STALL_TIMEOUT {
                        self.done = true;
                        return Some(Err(AuditError::Stalled {
                            topic: self.topic.to_string(),
                            partition: self.partition,
                            offset: self.next,
                            seconds: STALL_TIMEOUT.as_secs(),
                        }));
                    }
                }
            }
        }
        None
    }
}

/// The progress line on stderr, every [`PROGRESS_EVERY`] while a scan lasts.
pub(super) struct Progress {
    /// Partitions to audit.
    partitions: usize,
    started: Instant,
    last: Cell<Instant>,
    partition: Cell<i32>,
    index: Cell<usize>,
    input_records: Cell<u64>,
    output_records: Cell<u64>,
    input_offset: Cell<i64>,
    output_offset: Cell<i64>,
    input_end: Cell<i64>,
    output_end: Cell<i64>,
}

impl Progress {
    pub(super) fn new(partitions: usize) -> Self {
        Progress {
            partitions,
            started: Instant::now(),
            last: Cell::new(Instant::now()),
            partition: Cell::new(0),
            index: Cell::new(0),
            input_records: Cell::new(0),
            output_records: Cell::new(0),
            input_offset: Cell::new(0),
            output_offset: Cell::new(0),
            input_end: Cell::new(0),
            output_end: Cell::new(0),
        }
    }

    pub(super) fn start(&self, partition: i32, index: usize, input: (i64, i64), output: (i64, i64)) {
        self.partition.set(partition);
        self.input_offset.set(input.0);
        self.output_offset.set(output.0);
        let (input_end, output_end) = (input.1, output.1);
        self.index.set(index);
        self.input_end.set(input_end);
        self.output_end.set(output_end);
    }

    pub(super) fn input(&self, offset: i64) {
        self.input_records.set(self.input_records.get() + 1);
        self.input_offset.set(offset);
    }

    pub(super) fn output(&self, offset: i64) {
        self.output_records.set(self.output_records.get() + 1);
        self.output_offset.set(offset);
    }

    pub(super) fn tick(&self) {
        if self.last.get().elapsed() < PROGRESS_EVERY {
            return;
        }
        self.last.set(Instant::now());
        eprintln!(
            "kafka-dedup audit: partition {} ({} of {}): input offset {} of {}, output offset {} of {}; \
             {} input and {} output records read in {} s",
            self.partition.get(),
            self.index.get() + 1,
            self.partitions,
            self.input_offset.get(),
            self.input_end.get(),
            self.output_offset.get(),
            self.output_end.get(),
            self.input_records.get(),
            self.output_records.get(),
            self.started.elapsed().as_secs()
        );
    }
}
