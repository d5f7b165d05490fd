//! What a Weir producer writes and where it landed: plain records, shared by the encoder,
//! the DLQ, the transactional producer and its delivery thread (none of which the others
//! need to know of for these).

/// A record to produce inside a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingRecord {
    pub topic: String,
    /// The partition it goes to (`None`: its key's, by the producer's murmur2 partitioner);
    /// set for a record read with another key's ([`weir_core::wire::Key::Within`]).
    pub partition: Option<i32>,
    pub key: String,
    /// `None`: a tombstone (a compacted topic forgets the key).
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl OutgoingRecord {
    /// Its size as the producer's limit counts it: key, value and headers.
    pub fn size(&self) -> usize {
        self.key.len()
            + self.value.as_ref().map_or(0, Vec::len)
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
    }
}

/// Where a record of a committed batch landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Landed {
    pub partition: i32,
    pub offset: i64,
}
