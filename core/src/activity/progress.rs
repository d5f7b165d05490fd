//! The progress of a route partition as the activity worker commits it: the **frontier** (the
//! committed offset: every record before it is finished) and, in the offset's **metadata**
//! (committed once the answers it finishes are acknowledged), what is
//! *not* finished between the frontier and the last record read — every other record there
//! is finished — with, per unfinished request, the attempt it is at and when that attempt may
//! run (a retry waiting for its backoff).
//!
//! Invariants:
//! - `frontier <= end`, and every key of `open` is in `[frontier, end)`; the frontier is the
//!   first unfinished offset ([`Progress::frontier`] of a partition is computed so).
//! - [`Progress::parse`] of [`Progress::metadata`] gives the same progress back; text that is
//!   not ours is refused with a [`MetadataError`] naming the topic, partition and offset.
//! - The text of a window of [`MAX_PARTITION_WINDOW`] requests fits the broker's
//!   `offset.metadata.max.bytes` (4096 by default).

use std::collections::BTreeMap;
use std::str::FromStr;

use chrono::{DateTime, Utc};

/// The largest [`super::ActivitySettings::partition_window`]: the offset metadata of a
/// partition lists its unfinished requests (some 25 bytes each) and must stay within the
/// broker's `offset.metadata.max.bytes` (4096 by default).
pub const MAX_PARTITION_WINDOW: usize = 100;

/// The most requests a partition keeps parked (`on_exhausted = "pause"`) besides its window:
/// a parked request does not count towards the window — the partition must go on reading to
/// reach the retry notices behind it — but its mark is in the metadata (`<delta>!`, a dozen
/// bytes), so their number is bounded too. One exhausted while this many are parked on its
/// partition is answered as without `on_exhausted = "pause"`.
pub const MAX_PARKED: usize = 16;

/// The offset metadata could not be read (written by something else, or damaged).
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("offset metadata `{text}` of {topic}/{partition} at {offset}: {reason}")]
pub struct MetadataError {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub text: String,
    pub reason: String,
}

/// Where a request that is not finished stands, as the offset metadata records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    /// The attempt to run next; `None`: the request's own `attempt`.
    pub attempt: Option<u32>,
    /// Not before this instant (a retry's backoff).
    pub not_before: Option<DateTime<Utc>>,
    /// Parked: its attempts are exhausted and its parent was asked to pause
    /// (`on_exhausted = "pause"`); no attempt starts until a retry notice comes.
    pub parked: bool,
}

/// The progress of a partition as committed: the frontier (the committed offset) and, in the
/// offset's metadata, `end` (the offset after the last record read) and the unfinished
/// requests in `[frontier, end)`; every other record of that range is finished.
///
/// Text form: `wa1;n=<end − frontier>;o=<entry>,…` with an entry `<offset − frontier>`,
/// optionally `:<attempt>`, optionally `@<not-before, epoch ms>`, optionally `!` (parked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    pub frontier: i64,
    pub end: i64,
    pub open: BTreeMap<i64, Mark>,
}

const METADATA_TAG: &str = "wa1";

impl Progress {
    /// The metadata text (the frontier is the committed offset itself).
    pub fn metadata(&self) -> String {
        let entries: Vec<String> = self
            .open
            .iter()
            .map(|(offset, mark)| {
                let mut entry = (offset - self.frontier).to_string();
                if let Some(attempt) = mark.attempt {
                    entry.push_str(&format!(":{attempt}"));
                }
                if let Some(at) = mark.not_before {
                    entry.push_str(&format!("@{}", at.timestamp_millis()));
                }
                if mark.parked {
                    entry.push('!');
                }
                entry
            })
            .collect();
        format!(
            "{METADATA_TAG};n={};o={}",
            self.end - self.frontier,
            entries.join(",")
        )
    }

    /// Reads the metadata committed with offset `frontier`; `Ok(None)` for none (nothing was
    /// committed with it, or an earlier version of the worker committed).
    pub fn parse(
        topic: &str,
        partition: i32,
        frontier: i64,
        text: &str,
    ) -> Result<Option<Progress>, MetadataError> {
        if text.is_empty() {
            return Ok(None);
        }
        let fail = |reason: &str| MetadataError {
            topic: topic.to_owned(),
            partition,
            offset: frontier,
            text: text.to_owned(),
            reason: reason.to_owned(),
        };
        let mut parts = text.split(';');
        if parts.next() != Some(METADATA_TAG) {
            return Err(fail("not written by this version of the activity worker"));
        }
        let span = parts
            .next()
            .and_then(|p| p.strip_prefix("n="))
            .and_then(|n| i64::from_str(n).ok())
            .filter(|n| *n >= 0)
            .ok_or_else(|| fail("no `n=<records read>`"))?;
        let entries = parts
            .next()
            .and_then(|p| p.strip_prefix("o="))
            .ok_or_else(|| fail("no `o=<unfinished>`"))?;
        if parts.next().is_some() {
            return Err(fail("trailing fields"));
        }
        let end = frontier
            .checked_add(span)
            .ok_or_else(|| fail("the end overflows"))?;
        let mut open = BTreeMap::new();
        for entry in entries.split(',').filter(|e| !e.is_empty()) {
            let (offset, mark) = parse_entry(entry, span).map_err(fail)?;
            open.insert(frontier + offset, mark);
        }
        Ok(Some(Progress {
            frontier,
            end,
            open,
        }))
    }
}

/// One entry `<delta>[:<attempt>][@<ms>][!]` of the metadata: its offset from the frontier (in
/// `[0, span)`) and its mark.
fn parse_entry(entry: &str, span: i64) -> Result<(i64, Mark), &'static str> {
    let (entry, parked) = match entry.strip_suffix('!') {
        Some(rest) => (rest, true),
        None => (entry, false),
    };
    let (rest, not_before) = match entry.split_once('@') {
        Some((rest, ms)) => {
            let at = i64::from_str(ms)
                .ok()
                .and_then(DateTime::from_timestamp_millis)
                .ok_or("a bad not-before instant")?;
            (rest, Some(at))
        }
        None => (entry, None),
    };
    let (delta, attempt) = match rest.split_once(':') {
        Some((delta, attempt)) => {
            let attempt = u32::from_str(attempt)
                .ok()
                .filter(|a| *a >= 1)
                .ok_or("a bad attempt")?;
            (delta, Some(attempt))
        }
        None => (rest, None),
    };
    let delta = i64::from_str(delta)
        .ok()
        .filter(|d| (0..span).contains(d))
        .ok_or("an offset outside the range read")?;
    Ok((
        delta,
        Mark {
            attempt,
            not_before,
            parked,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_767_225_600_000 + ms).expect("a time")
    }

    #[test]
    fn progress_round_trips_through_its_metadata() {
        let progress = Progress {
            frontier: 1000,
            end: 1042,
            open: BTreeMap::from([
                (
                    1000,
                    Mark {
                        attempt: Some(3),
                        not_before: Some(t(250)),
                        parked: false,
                    },
                ),
                (
                    1007,
                    Mark {
                        attempt: None,
                        not_before: None,
                        parked: false,
                    },
                ),
                (
                    1041,
                    Mark {
                        attempt: Some(2),
                        not_before: None,
                        parked: false,
                    },
                ),
                (
                    1030,
                    Mark {
                        attempt: Some(5),
                        not_before: None,
                        parked: true,
                    },
                ),
            ]),
        };
        let text = progress.metadata();
        assert_eq!(text, "wa1;n=42;o=0:3@1767225600250,7,30:5!,41:2");
        assert_eq!(Progress::parse("t", 0, 1000, &text), Ok(Some(progress)));
        let nothing_open = Progress {
            frontier: 5,
            end: 5,
            open: BTreeMap::new(),
        };
        assert_eq!(nothing_open.metadata(), "wa1;n=0;o=");
        assert_eq!(
            Progress::parse("t", 0, 5, &nothing_open.metadata()),
            Ok(Some(nothing_open))
        );
        assert_eq!(Progress::parse("t", 0, 5, ""), Ok(None));
    }

    #[test]
    fn bad_metadata_is_refused_with_its_position() {
        for text in [
            "something else",
            "wa1;n=-1;o=",
            "wa1;n=3;o=3",
            "wa1;n=3;o=0:0",
            "wa1;n=3;o=0@x",
            "wa1;n=3;o=0!!",
            "wa1;n=3;o=!",
            "wa1;n=3",
            "wa1;n=3;o=;extra",
        ] {
            let error = Progress::parse("weir.activity.x", 4, 17, text).expect_err(text);
            assert_eq!((error.partition, error.offset), (4, 17), "{text}");
            assert!(
                error.to_string().contains("weir.activity.x/4 at 17"),
                "{error}"
            );
        }
    }

    #[test]
    fn the_largest_window_fits_the_brokers_metadata_limit() {
        let window = (0..MAX_PARTITION_WINDOW as i64).map(|i| {
            (
                i * 10_000_000,
                Mark {
                    attempt: Some(u32::MAX),
                    not_before: Some(DateTime::<Utc>::MAX_UTC),
                    parked: false,
                },
            )
        });
        // The parked ones besides, each `<delta>!` (a parked mark keeps no attempt).
        let parked = (0..MAX_PARKED as i64).map(|i| {
            (
                i * 10_000_000 + 1,
                Mark {
                    attempt: None,
                    not_before: None,
                    parked: true,
                },
            )
        });
        let open = window.chain(parked).collect();
        let progress = Progress {
            frontier: 0,
            end: i64::MAX / 2,
            open,
        };
        assert!(
            progress.metadata().len() < 4096,
            "{}",
            progress.metadata().len()
        );
    }
}
