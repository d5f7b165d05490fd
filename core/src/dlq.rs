//! What a dead letter's copy keeps of its original: the one rule by which every DLQ copy is
//! made, in the Kafka workers (`weir::kafka::dlq`, which adds the value's encoding and the
//! headers) and in the simulation's Kafka model alike.
//!
//! An input record that cannot be processed is copied to `weir.dlq` inside the transaction
//! that commits its offset, so that a poison record never blocks its partition and nothing is
//! lost. The copy must fit the producer's limit ([`MAX_PRODUCED_RECORD_BYTES`]), or its batch
//! fails for ever:
//! - an original value too large for it (an oversize record is the usual reason it is
//!   dead-lettered) is cut to [`MAX_DLQ_VALUE_BYTES`], and the copy says so, in its error text
//!   and in [`Copy::value_cut`] (the headers `weir.dlq.original-size` and
//!   `weir.dlq.original-sha256`; issue 11 item 7);
//! - the rest is bounded so that the value's reserve always holds it (issue 33 F4: a ~350 kB
//!   key, copied into the envelope, as the copy's own key and into the error text of a
//!   misrouted record, made a copy no producer could send): the key is cut to
//!   [`MAX_DLQ_KEY_BYTES`] (its size and SHA-256 in the error text), the original headers to
//!   [`MAX_DLQ_HEADER_BYTES`] (whole headers, in order; the error text says how many were left
//!   out), the error text to [`MAX_DLQ_ERROR_BYTES`].

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use crate::records::{DlqEnvelope, DlqHeader, DlqReason};
use crate::wire::MAX_PRODUCED_RECORD_BYTES;

/// The most of an original value a DLQ copy carries: what is left of the producer's limit
/// once the key, the original headers, the error and the envelope's own fields have room.
pub const MAX_DLQ_VALUE_BYTES: usize = MAX_PRODUCED_RECORD_BYTES - 64 * 1024;

/// The most of an original key a DLQ copy carries (in its envelope, and as its own key).
pub const MAX_DLQ_KEY_BYTES: usize = 8 * 1024;
/// The most bytes (names and values) of original headers a DLQ copy carries.
pub const MAX_DLQ_HEADER_BYTES: usize = 16 * 1024;
/// The most of the error text a DLQ envelope carries (before the notes on what was cut).
pub const MAX_DLQ_ERROR_BYTES: usize = 8 * 1024;

// Twice the key, the headers, the error and its notes stay well within the value's reserve.
const _: () = assert!(
    2 * MAX_DLQ_KEY_BYTES + MAX_DLQ_HEADER_BYTES + MAX_DLQ_ERROR_BYTES + 4 * 1024
        <= MAX_PRODUCED_RECORD_BYTES - MAX_DLQ_VALUE_BYTES - 16 * 1024
);

/// The record a dead letter copies, as it was read.
#[derive(Debug, Clone, Copy)]
pub struct Original<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub timestamp_millis: Option<i64>,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
}

/// The size and SHA-256 (hex) of an original that the copy keeps only a prefix of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    pub size: usize,
    pub sha256: String,
}

/// A DLQ copy: its envelope (the record's value, before encoding), and how its original value
/// was cut, if it was.
#[derive(Debug, Clone, PartialEq)]
pub struct Copy {
    pub envelope: DlqEnvelope,
    pub value_cut: Option<Cut>,
}

/// The copy of `original` (with its headers, names and values, in order) dead-lettered for
/// `reason` with `error`, at `failed_at`, within the bounds above.
pub fn copy<'a>(
    original: Original<'_>,
    headers: impl IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
    reason: DlqReason,
    mut error: String,
    failed_at: DateTime<Utc>,
) -> Copy {
    truncate_text(&mut error, MAX_DLQ_ERROR_BYTES);
    let mut key = original.key.map(<[u8]>::to_vec);
    if let Some(key) = key.as_mut()
        && let Some(cut) = cut_of(key, MAX_DLQ_KEY_BYTES)
    {
        key.truncate(MAX_DLQ_KEY_BYTES);
        error.push_str(&format!(
            " (this copy keeps the first {MAX_DLQ_KEY_BYTES} of the key's {} bytes; \
             SHA-256 of the whole key: {})",
            cut.size, cut.sha256
        ));
    }
    let mut original_headers = Vec::new();
    let (mut header_bytes, mut left_out) = (0, 0);
    for (name, value) in headers {
        let size = name.len() + value.map_or(0, <[u8]>::len);
        if left_out > 0 || header_bytes + size > MAX_DLQ_HEADER_BYTES {
            left_out += 1;
            continue;
        }
        header_bytes += size;
        original_headers.push(DlqHeader {
            key: name.to_owned(),
            value: value.map(<[u8]>::to_vec),
        });
    }
    if left_out > 0 {
        error.push_str(&format!(
            " (this copy leaves out the last {left_out} original headers: they exceed \
             {MAX_DLQ_HEADER_BYTES} bytes)"
        ));
    }
    let value_cut = original
        .value
        .and_then(|value| cut_of(value, MAX_DLQ_VALUE_BYTES));
    let mut value = original.value.map(<[u8]>::to_vec);
    if let (Some(cut), Some(value)) = (&value_cut, value.as_mut()) {
        value.truncate(MAX_DLQ_VALUE_BYTES);
        error.push_str(&format!(
            " (this copy keeps the first {MAX_DLQ_VALUE_BYTES} of the value's {} bytes; \
             SHA-256 of the whole value: {})",
            cut.size, cut.sha256
        ));
    }
    Copy {
        envelope: DlqEnvelope {
            original_topic: original.topic.to_owned(),
            original_partition: original.partition,
            original_offset: original.offset,
            original_timestamp_millis: original.timestamp_millis,
            key,
            value,
            original_headers,
            reason,
            error,
            failed_at,
        },
        value_cut,
    }
}

/// `bytes`' size and digest when they are longer than `max`.
fn cut_of(bytes: &[u8], max: usize) -> Option<Cut> {
    (bytes.len() > max).then(|| Cut {
        size: bytes.len(),
        sha256: Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    })
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn truncate_text(text: &mut String, max: usize) {
    if text.len() > max {
        let mut at = max;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
        text.push('…');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn original<'a>(key: &'a [u8], value: &'a [u8]) -> Original<'a> {
        Original {
            topic: "weir.responses",
            partition: 3,
            offset: 42,
            timestamp_millis: Some(1),
            key: Some(key),
            value: Some(value),
        }
    }

    /// A copy of a record that fits is the record, whole: nothing cut, nothing noted.
    #[test]
    fn a_record_that_fits_is_copied_whole() {
        let copy = copy(
            original(b"E_key", b"not avro"),
            [("x-trace", Some(&b"t"[..]))],
            DlqReason::Undecodable,
            "bad framing".into(),
            DateTime::UNIX_EPOCH,
        );
        assert_eq!(copy.value_cut, None);
        assert_eq!(copy.envelope.key.as_deref(), Some(&b"E_key"[..]));
        assert_eq!(copy.envelope.value.as_deref(), Some(&b"not avro"[..]));
        assert_eq!(copy.envelope.original_headers.len(), 1);
        assert_eq!(copy.envelope.error, "bad framing");
    }

    /// Issue 33 F4: every part of a copy is bounded, and what was cut is said (sizes and
    /// digests), so that the copy of any record fits the producer's limit.
    #[test]
    fn a_huge_key_headers_value_and_error_are_cut_and_said() {
        let key = vec![b'k'; 350_000];
        let value = vec![7u8; 1_200_000];
        let header = vec![b'h'; 1024];
        let headers: Vec<(&str, Option<&[u8]>)> = (0..100)
            .map(|_| ("x-original", Some(header.as_slice())))
            .collect();
        let error = format!("keyed by `{}`", String::from_utf8_lossy(&key));
        let copy = copy(
            original(&key, &value),
            headers,
            DlqReason::Misrouted,
            error,
            DateTime::UNIX_EPOCH,
        );
        let envelope = &copy.envelope;
        assert_eq!(envelope.key.as_deref(), Some(&key[..MAX_DLQ_KEY_BYTES]));
        assert_eq!(
            envelope.value.as_deref(),
            Some(&value[..MAX_DLQ_VALUE_BYTES])
        );
        let cut = copy.value_cut.as_ref().expect("the value is cut");
        assert_eq!(cut.size, 1_200_000);
        assert!(envelope.error.contains(&cut.sha256), "{}", envelope.error);
        let kept = envelope.original_headers.len();
        assert!(kept > 0 && kept < 100, "{kept} headers kept");
        assert!(
            envelope.error.contains(&format!(
                "leaves out the last {} original headers",
                100 - kept
            )),
            "{}",
            envelope.error
        );
        assert!(
            envelope.error.contains("350000 bytes"),
            "{}",
            envelope.error
        );
        let bounded = MAX_DLQ_ERROR_BYTES + 1024;
        assert!(
            envelope.error.len() < bounded,
            "{} bytes",
            envelope.error.len()
        );
        let carried = 2 * MAX_DLQ_KEY_BYTES
            + envelope.error.len()
            + envelope
                .original_headers
                .iter()
                .map(|h| h.key.len() + h.value.as_ref().map_or(0, Vec::len))
                .sum::<usize>()
            + MAX_DLQ_VALUE_BYTES;
        assert!(carried < MAX_PRODUCED_RECORD_BYTES, "{carried} bytes");
    }
}
