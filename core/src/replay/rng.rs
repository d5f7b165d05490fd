//! Fresh values for the first run of nondeterministic calls (random draws, scheduled ids).
//!
//! A fresh value is a function of the execution's seed and the history version being
//! recorded. Recorded values are replayed, so this is not what makes replay deterministic;
//! it makes the *first* run reproducible: a run resumed in memory and one rebuilt from history
//! draw the same values for the same new events, and a batch whose transaction aborted
//! re-creates the same scheduled ids when it is redone.

/// SplitMix64, positioned at one history version.
pub(crate) struct Draw(u64);

impl Draw {
    pub(crate) fn at(seed: u64, version: u64) -> Self {
        Draw(seed ^ version.wrapping_mul(0xD1B5_4A32_D192_ED03))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, bound)`, `bound > 0`, without modulo bias (rejects the low values that
    /// would make some remainders more likely).
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        debug_assert!(bound > 0);
        let threshold = bound.wrapping_neg() % bound;
        loop {
            let x = self.next_u64();
            if x >= threshold {
                return x % bound;
            }
        }
    }
}

/// The entropy stream a guest reads in one step (`guest.rs`).
pub(crate) struct StepEntropy {
    /// Responses consumed when the stream was positioned.
    pub(crate) step: u64,
    pub(crate) draw: Draw,
}

const ALPHANUMERIC: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// An alphanumeric string with a length in `[min_len, max_len_exclusive)`.
pub(crate) fn random_string(draw: &mut Draw, min_len: u64, max_len_exclusive: u64) -> String {
    let len = min_len + draw.below(max_len_exclusive - min_len);
    (0..len)
        .map(|_| char::from(ALPHANUMERIC[draw.below(ALPHANUMERIC.len() as u64) as usize]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_depend_on_seed_and_version_only() {
        assert_eq!(Draw::at(1, 2).next_u64(), Draw::at(1, 2).next_u64());
        assert_ne!(Draw::at(1, 2).next_u64(), Draw::at(1, 3).next_u64());
        assert_ne!(Draw::at(1, 2).next_u64(), Draw::at(2, 2).next_u64());
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut d = Draw::at(7, 0);
        let mut seen = [false; 5];
        for _ in 0..1000 {
            let v = d.below(5);
            assert!(v < 5);
            seen[v as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
        assert_eq!(d.below(1), 0);
        let _ = d.below(u64::MAX);
    }

    #[test]
    fn strings_have_length_in_range() {
        let mut d = Draw::at(3, 4);
        for _ in 0..200 {
            let s = random_string(&mut d, 2, 6);
            assert!((2..6).contains(&s.len()), "{s}");
            assert!(s.bytes().all(|b| b.is_ascii_alphanumeric()));
        }
    }
}
