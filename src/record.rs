//! What a fingerprint, a provenance header or an audit reads of a record: its key, value and
//! headers, for a consumed record ([`BorrowedMessage`]) and for one held in memory
//! ([`OwnedRecord`]). A leaf module: `fingerprint` and `provenance` both build on it.

use rdkafka::message::BorrowedMessage;

/// The parts of a record a fingerprint may read. Implemented for consumed records
/// ([`BorrowedMessage`]) and for [`OwnedRecord`] (tests, `inspect lookup`).
pub trait RecordFields {
    /// The key; `None` for a null key.
    fn key(&self) -> Option<&[u8]>;
    /// The value; `None` for a tombstone.
    fn value(&self) -> Option<&[u8]>;
    /// Calls `f` with the value of each header whose name is exactly the bytes `name`, in record
    /// order. Names are compared as bytes, never decoded: a name that is not UTF-8 is simply
    /// another name.
    fn for_each_header(&self, name: &[u8], f: &mut dyn FnMut(Option<&[u8]>));
}

impl RecordFields for BorrowedMessage<'_> {
    fn key(&self) -> Option<&[u8]> {
        rdkafka::Message::key(self)
    }
    fn value(&self) -> Option<&[u8]> {
        rdkafka::Message::payload(self)
    }
    fn for_each_header(&self, name: &[u8], f: &mut dyn FnMut(Option<&[u8]>)) {
        for_each_raw_header(self, &mut |n, v| {
            if n == name {
                f(v)
            }
        });
    }
}

/// Calls `f` with the name and the value (`None`: a header without value) of each header of
/// `msg`, in record order, names as bytes.
///
/// Read through librdkafka's C API (`rd_kafka_message_headers`, `rd_kafka_header_get_all`)
/// because rdkafka 0.39's `Headers::iter` decodes every name as UTF-8 and panics on any other
/// (`BorrowedHeaders::try_get`), and Kafka header names are bytes that any librdkafka-based
/// producer may fill as it likes. librdkafka hands names out as C strings, so a name is read up to
/// its first NUL byte (a name with an embedded NUL compares equal to its prefix: librdkafka's
/// own `rd_kafka_header_get` matches names the same way). Headers that librdkafka cannot parse
/// read as none.
pub fn for_each_raw_header<'m>(msg: &'m BorrowedMessage<'_>, f: &mut dyn FnMut(&'m [u8], Option<&'m [u8]>)) {
    use rdkafka::bindings as rd;
    const OK: rd::rd_kafka_resp_err_t = rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR;
    let mut hdrs: *mut rd::rd_kafka_headers_t = std::ptr::null_mut();
    // SAFETY: `msg.ptr()` is the live message `msg` wraps. librdkafka parses its headers into a
    // headers object owned by the message (freed with it), so `hdrs` stays valid for as long as
    // `msg` is borrowed: `'m`. Nothing can change the headers meanwhile (that takes `&mut`).
    if unsafe { rd::rd_kafka_message_headers(msg.ptr(), &mut hdrs) } != OK || hdrs.is_null() {
        return;
    }
    for idx in 0.. {
        let mut name: *const std::ffi::c_char = std::ptr::null();
        let mut value: *const std::ffi::c_void = std::ptr::null();
        let mut size: usize = 0;
        // SAFETY: `hdrs` is valid (above); librdkafka checks `idx` and fills the three
        // out-pointers only on success.
        if unsafe { rd::rd_kafka_header_get_all(hdrs, idx, &mut name, &mut value, &mut size) } != OK {
            return;
        }
        if name.is_null() {
            continue;
        }
        // SAFETY: on success `name` is the header's NUL-terminated name and `value` either null
        // (no value) or `size` bytes, both stored in the headers object, valid for `'m` (above).
        let (name, value) = unsafe {
            (
                std::ffi::CStr::from_ptr(name).to_bytes(),
                (!value.is_null()).then(|| std::slice::from_raw_parts(value.cast::<u8>(), size)),
            )
        };
        f(name, value);
    }
}

/// A record held in memory: key, value and headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnedRecord {
    /// `None` for a null key.
    pub key: Option<Vec<u8>>,
    /// `None` for a tombstone.
    pub value: Option<Vec<u8>>,
    /// Headers in order: the name's bytes (not necessarily UTF-8), and the value (`None`: a
    /// header without value).
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl RecordFields for OwnedRecord {
    fn key(&self) -> Option<&[u8]> {
        self.key.as_deref()
    }
    fn value(&self) -> Option<&[u8]> {
        self.value.as_deref()
    }
    fn for_each_header(&self, name: &[u8], f: &mut dyn FnMut(Option<&[u8]>)) {
        for (k, v) in &self.headers {
            if k.as_slice() == name {
                f(v.as_deref());
            }
        }
    }
}
