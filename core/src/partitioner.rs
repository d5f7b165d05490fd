//! The murmur2 partitioner of the Java Kafka client (`Utils.murmur2`, `toPositive(h) % n`).
//!
//! Weir keys every record by execution id and co-partitions submissions, responses and history,
//! so every client that writes to those topics — Java, librdkafka, ours — must agree on the
//! partition of a key. librdkafka's default (`consistent_random`, CRC32) does not; Weir's
//! producers set `partitioner=murmur2_random` (see [`super::config`]) and Weir computes the same
//! function here when it needs a partition without producing (catch-up, routing, tests).

/// The 32-bit murmur2 hash exactly as the Java client computes it (seed `0x9747b28c`).
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    // Java uses int arithmetic; the length fits the seed mix as a 32-bit value.
    let mut h: u32 = SEED ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition the Java client (and librdkafka's `murmur2_random`) picks for a non-empty key.
///
/// # Panics
/// If `partitions` is not positive: a topic always has at least one partition.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    assert!(partitions > 0, "a topic has at least one partition");
    (murmur2(key) & 0x7fff_ffff) % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (key, Utils.murmur2(key), partition of 6, partition of 32), printed by the Java client
    /// 4.4.0: `Utils.murmur2(key.getBytes(UTF_8))` and `Utils.toPositive(h) % n`.
    const JAVA_VECTORS: &[(&str, i32, i32, i32)] = &[
        ("", 275_646_681, 3, 25),
        ("21", -973_932_308, 0, 12),
        ("foobar", -790_332_482, 0, 30),
        ("a-little-bit-long-string", -985_981_536, 2, 0),
        ("a-little-bit-longer-string", -1_486_304_829, 5, 3),
        (
            "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58_897_971,
            5,
            13,
        ),
        ("abc", 479_470_107, 3, 27),
        ("E_01JDZQ3V8T4K2M9X7B5N6P1R0S", -597_351_983, 3, 17),
        (
            "E_01JDZQ3V8T4K2M9X7B5N6P1R0S.o:2-charge_1",
            1_612_945_564,
            4,
            28,
        ),
        ("ÄÖü€", -1_487_515_047, 5, 25),
    ];

    #[test]
    fn matches_the_java_client() {
        for &(key, hash, p6, p32) in JAVA_VECTORS {
            assert_eq!(murmur2(key.as_bytes()), hash, "hash of {key:?}");
            assert_eq!(
                partition_for_key(key.as_bytes(), 6),
                p6,
                "6 partitions, {key:?}"
            );
            assert_eq!(
                partition_for_key(key.as_bytes(), 32),
                p32,
                "32 partitions, {key:?}"
            );
        }
    }
}
