//! The records of a submissions partition taken **beyond** its committed offset, and how the
//! offset's metadata carries them (`docs/design/fairness.md`).
//!
//! Fairness takes submissions out of log order, so the offset an owner commits is the lowest
//! record it still holds, and records past it may have been taken (created, dead-lettered)
//! already. The transaction that commits their effects commits this set in the offset's
//! metadata; the next owner reads it back at its take-over and skips them, so none is taken
//! twice.
//!
//! Text form: `wf1;<gap>+<len>,…`, ranges in order: the first starts `gap` records after the
//! committed offset, each next one `gap` records after the end of the one before; `len` ≥ 1.
//! Empty text: nothing taken beyond the offset.
//!
//! Invariants: ranges are disjoint, not adjacent (merged), and at or past the committed
//! offset once [`Taken::forget_below`] has run; [`Taken::parse`] of [`Taken::render`] gives
//! the same set; at most [`MAX_TAKEN_RANGES`] ranges are kept by the caller
//! ([`super::Held::pop`]), so the text stays within the broker's `offset.metadata.max.bytes`
//! (4096 by default; the table test builds the longest text).

use rangemap::RangeSet;

/// The most ranges the metadata lists; [`super::Held`] takes the lowest held record instead of
/// one that would open another.
pub const MAX_TAKEN_RANGES: usize = 64;

/// The prefix of the text form (its version).
const PREFIX: &str = "wf1;";

/// Metadata that is not this form (written by something else, or damaged).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "offset metadata `{text}` at committed offset {offset} is not a list of taken records: {reason}"
)]
pub struct TakenError {
    pub offset: i64,
    pub text: String,
    pub reason: String,
}

/// Offsets of one partition taken beyond its committed offset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Taken {
    ranges: RangeSet<i64>,
}

impl Taken {
    /// The set `text` lists, relative to the committed `offset`.
    pub fn parse(offset: i64, text: &str) -> Result<Taken, TakenError> {
        let mut taken = Taken::default();
        if text.is_empty() {
            return Ok(taken);
        }
        let refuse = |reason: String| TakenError {
            offset,
            text: text.to_owned(),
            reason,
        };
        let body = text
            .strip_prefix(PREFIX)
            .ok_or_else(|| refuse(format!("it does not start with `{PREFIX}`")))?;
        let mut at = offset;
        for part in body.split(',') {
            let (gap, len) = part
                .split_once('+')
                .ok_or_else(|| refuse(format!("`{part}` is not <gap>+<len>")))?;
            let number = |n: &str| {
                n.parse::<i64>()
                    .ok()
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| refuse(format!("`{n}` is not a count")))
            };
            let (gap, len) = (number(gap)?, number(len)?);
            if len == 0 {
                return Err(refuse(format!("`{part}` is an empty range")));
            }
            let start = at
                .checked_add(gap)
                .ok_or_else(|| refuse("offsets overflow".to_owned()))?;
            let end = start
                .checked_add(len)
                .ok_or_else(|| refuse("offsets overflow".to_owned()))?;
            taken.ranges.insert(start..end);
            at = end;
        }
        Ok(taken)
    }

    /// The text form relative to the committed `offset` (every range at or past it).
    pub fn render(&self, offset: i64) -> String {
        if self.ranges.is_empty() {
            return String::new();
        }
        let mut at = offset;
        let parts: Vec<String> = self
            .ranges
            .iter()
            .map(|range| {
                let part = format!("{}+{}", range.start - at, range.end - range.start);
                at = range.end;
                part
            })
            .collect();
        format!("{PREFIX}{}", parts.join(","))
    }

    pub fn contains(&self, offset: i64) -> bool {
        self.ranges.contains(&offset)
    }

    pub fn insert(&mut self, offset: i64) {
        self.ranges.insert(offset..offset + 1);
    }

    /// Drops what lies before `offset` (the committed offset passed it).
    pub fn forget_below(&mut self, offset: i64) {
        if let Some(first) = self.ranges.iter().next().map(|r| r.start)
            && first < offset
        {
            self.ranges.remove(first..offset);
        }
    }

    /// How many ranges the text lists.
    pub fn ranges(&self) -> usize {
        self.ranges.len()
    }

    /// Whether taking `offset` would open a range of its own (touches none).
    pub fn would_open(&self, offset: i64) -> bool {
        !self.ranges.contains(&(offset - 1)) && !self.ranges.contains(&(offset + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(offsets: &[i64]) -> Taken {
        let mut taken = Taken::default();
        for &o in offsets {
            taken.insert(o);
        }
        taken
    }

    #[test]
    fn the_text_lists_ranges_relative_to_the_committed_offset_and_reads_back() {
        let taken = of(&[103, 104, 110]);
        assert_eq!(taken.render(100), "wf1;3+2,5+1");
        assert_eq!(Taken::parse(100, "wf1;3+2,5+1"), Ok(taken));
        assert_eq!(Taken::parse(100, ""), Ok(Taken::default()));
        assert_eq!(Taken::default().render(100), "");
    }

    #[test]
    fn text_that_is_not_ours_is_refused_with_why() {
        for text in [
            "wa1;n=10;o=0",
            "wf1;",
            "wf1;3",
            "wf1;3+0",
            "wf1;-1+2",
            "wf1;x+2",
            "wf1;9223372036854775807+1",
        ] {
            let error = Taken::parse(100, text).expect_err(text);
            assert_eq!(error.offset, 100);
            assert!(error.to_string().contains(text), "{error}");
        }
    }

    #[test]
    fn what_the_committed_offset_passed_is_forgotten() {
        let mut taken = of(&[3, 4, 5, 9]);
        taken.forget_below(5);
        assert_eq!(taken, of(&[5, 9]));
        taken.forget_below(100);
        assert_eq!(taken.ranges(), 0);
    }

    #[test]
    fn a_new_range_is_opened_only_by_an_offset_touching_none() {
        let taken = of(&[3, 4, 9]);
        assert!(!taken.would_open(5));
        assert!(!taken.would_open(2));
        assert!(!taken.would_open(8));
        assert!(taken.would_open(6));
    }

    #[test]
    fn the_longest_text_fits_the_brokers_metadata_limit() {
        // `MAX_TAKEN_RANGES` ranges as far apart and as long as offsets allow.
        let step = i64::MAX / (2 * MAX_TAKEN_RANGES as i64 + 2);
        let mut taken = Taken::default();
        for i in 0..MAX_TAKEN_RANGES as i64 {
            let start = (2 * i + 1) * step;
            taken.ranges.insert(start..start + step);
        }
        let text = taken.render(0);
        assert_eq!(taken.ranges(), MAX_TAKEN_RANGES);
        assert!(text.len() < 4096, "{} bytes", text.len());
        assert_eq!(Taken::parse(0, &text), Ok(taken));
    }
}
