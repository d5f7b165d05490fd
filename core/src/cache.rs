//! The eviction policy of the processor's execution cache: which cached execution to drop
//! when what the cache holds outweighs its byte budget. It owns only keys, weights and
//! access marks; the processor owns the executions themselves and decides which of them are
//! pinned (see [`crate::processor::Processor::evict`]).
//!
//! The policy is S3-FIFO (Yang et al., SOSP 2023) with weights, arranged as `quick_cache`'s
//! (a CLOCK-Pro-like hot and cold ring): while the cache fills up, a new key enters the main
//! FIFO (97 % of the budget); once it is full, a new key enters a small FIFO and is the first
//! to go; a key evicted from it unused goes to a ghost list (keys only); a key used again while
//! in the small FIFO, or coming back while in the ghost list, enters the main FIFO, which gives
//! a used key another round (CLOCK) instead of dropping it. Under
//! cyclic access of N keys with room for C < N, LRU (what the processor had) drops every key
//! just before its next use and hits never; here the main FIFO keeps a stable set and about
//! C/N of the accesses hit (`tests::cyclic_access_hits_about_capacity_over_n`).
//!
//! Hand-written rather than taken from a crate: `quick_cache`'s unsync cache has the same kind
//! of policy (measured: 0.248 hits at C/N = 0.256) but owns its values and evicts inside
//! `insert`, whereas the processor's executions must stay in the processor (a parked run is
//! awaited across a batch, and an eviction drops a run, not necessarily its view), an
//! execution may be evicted only between batches, its pin depends on the materialiser's
//! progress (state outside the entry), and its weight changes each time it runs.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// Where a resident key is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Queue {
    Small,
    Main,
}

#[derive(Debug)]
struct Entry {
    weight: u64,
    /// Uses since it entered its queue (or since the main FIFO's last pass), at most 3.
    freq: u8,
    queue: Queue,
    /// Which item of its queue is the live one (removed keys leave stale items behind).
    stamp: u64,
}

/// The policy over the keys of a cache with a byte budget; see the module docs.
#[derive(Debug)]
pub struct Policy<K> {
    capacity: u64,
    entries: HashMap<K, Entry>,
    small: VecDeque<(K, u64)>,
    main: VecDeque<(K, u64)>,
    small_weight: u64,
    main_weight: u64,
    ghost: VecDeque<(K, u64)>,
    ghost_keys: HashMap<K, u64>,
    stamp: u64,
}

impl<K: Clone + Eq + Hash> Policy<K> {
    /// A policy for a cache of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Policy {
            capacity,
            entries: HashMap::new(),
            small: VecDeque::new(),
            main: VecDeque::new(),
            small_weight: 0,
            main_weight: 0,
            ghost: VecDeque::new(),
            ghost_keys: HashMap::new(),
            stamp: 0,
        }
    }

    /// The sum of the weights of the resident keys.
    pub fn weight(&self) -> u64 {
        self.small_weight + self.main_weight
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn contains(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    /// `key` was used and now weighs `weight`: a resident key is marked used, a new one is
    /// admitted (to the main FIFO if the ghost list remembers it, else to the small one).
    pub fn touch(&mut self, key: &K, weight: u64) {
        if let Some(entry) = self.entries.get_mut(key) {
            entry.freq = (entry.freq + 1).min(3);
            let total = match entry.queue {
                Queue::Small => &mut self.small_weight,
                Queue::Main => &mut self.main_weight,
            };
            *total = *total - entry.weight + weight;
            entry.weight = weight;
            return;
        }
        self.stamp += 1;
        let stamp = self.stamp;
        // While the main FIFO has room (the cache is filling up), a new key enters it at once.
        let remembered = self.ghost_keys.remove(key).is_some();
        let queue = if remembered || self.main_weight + weight <= self.main_target() {
            self.main.push_back((key.clone(), stamp));
            self.main_weight += weight;
            Queue::Main
        } else {
            self.small.push_back((key.clone(), stamp));
            self.small_weight += weight;
            Queue::Small
        };
        let entry = Entry {
            weight,
            freq: 0,
            queue,
            stamp,
        };
        self.entries.insert(key.clone(), entry);
        self.compact();
    }

    /// Forgets `key` (the cache dropped it for a reason of its own); its weight is released.
    pub fn remove(&mut self, key: &K) {
        if let Some(entry) = self.entries.remove(key) {
            match entry.queue {
                Queue::Small => self.small_weight -= entry.weight,
                Queue::Main => self.main_weight -= entry.weight,
            }
        }
    }

    /// Forgets everything but the budget.
    pub fn clear(&mut self) {
        *self = Policy::new(self.capacity);
    }

    /// The next key to evict, removed from the policy with its weight; `None` if every
    /// resident key is `pinned`. Pinned keys keep their place (they are passed over).
    ///
    /// The small FIFO gives its oldest key: unused, it is evicted (and remembered by the
    /// ghost list); used, it is promoted to the main FIFO, which evicts only beyond its share
    /// of the budget (97 %, as `quick_cache`'s hot ring) or when the small FIFO has nothing to
    /// give. That the newest keys go first when nothing is reused is what keeps a stable set
    /// under cyclic access.
    pub fn evict_one(&mut self, pinned: impl Fn(&K) -> bool) -> Option<(K, u64)> {
        let main_target = self.main_target();
        let mut tries = 2 * self.small.len() + 2;
        while tries > 0 {
            tries -= 1;
            let Some((key, stamp)) = self.small.pop_front() else {
                break;
            };
            let Some(entry) = self.entries.get_mut(&key) else {
                continue; // stale: removed
            };
            if entry.stamp != stamp || entry.queue != Queue::Small {
                continue; // stale: re-admitted or moved since
            }
            if pinned(&key) {
                self.small.push_back((key, stamp));
                continue;
            }
            if entry.freq > 0 {
                // Used while new: promoted; the main FIFO makes room if it is over its share.
                entry.freq -= 1;
                entry.queue = Queue::Main;
                self.small_weight -= entry.weight;
                self.main_weight += entry.weight;
                self.main.push_back((key, stamp));
                if self.main_weight > main_target
                    && let Some(victim) = self.evict_main(&pinned)
                {
                    return Some(victim);
                }
                continue;
            }
            let weight = entry.weight;
            self.entries.remove(&key);
            self.small_weight -= weight;
            self.remember(key.clone());
            return Some((key, weight));
        }
        self.evict_main(&pinned)
    }

    /// The main FIFO's next victim: its oldest unpinned key without a use mark (a used one
    /// loses a mark and goes round again: CLOCK).
    fn evict_main(&mut self, pinned: &impl Fn(&K) -> bool) -> Option<(K, u64)> {
        // A key goes round at most 4 times (3 marks): bounded even when every key is pinned.
        let mut tries = 5 * self.main.len() + 1;
        while tries > 0 {
            tries -= 1;
            let (key, stamp) = self.main.pop_front()?;
            let Some(entry) = self.entries.get_mut(&key) else {
                continue;
            };
            if entry.stamp != stamp || entry.queue != Queue::Main {
                continue;
            }
            if pinned(&key) {
                self.main.push_back((key, stamp));
                continue;
            }
            if entry.freq > 0 {
                entry.freq -= 1;
                self.main.push_back((key, stamp));
                continue;
            }
            let weight = entry.weight;
            self.entries.remove(&key);
            self.main_weight -= weight;
            return Some((key, weight));
        }
        None
    }

    /// The main FIFO's share of the budget.
    fn main_target(&self) -> u64 {
        self.capacity - self.capacity / 32
    }

    /// Puts `key` in the ghost list, which remembers about half as many keys as are resident.
    fn remember(&mut self, key: K) {
        self.stamp += 1;
        self.ghost_keys.insert(key.clone(), self.stamp);
        self.ghost.push_back((key, self.stamp));
        let limit = (self.entries.len() / 2).max(16);
        while self.ghost_keys.len() > limit {
            let Some((old, stamp)) = self.ghost.pop_front() else {
                break;
            };
            if self.ghost_keys.get(&old) == Some(&stamp) {
                self.ghost_keys.remove(&old);
            }
        }
    }

    /// Drops the stale items of the queues once they are most of them.
    fn compact(&mut self) {
        let live = self.entries.len() + self.ghost_keys.len();
        if self.small.len() + self.main.len() + self.ghost.len() <= 2 * live + 64 {
            return;
        }
        let entries = &self.entries;
        let is_live = |queue: Queue| {
            move |(key, stamp): &(K, u64)| {
                entries
                    .get(key)
                    .is_some_and(|e| e.stamp == *stamp && e.queue == queue)
            }
        };
        self.small.retain(is_live(Queue::Small));
        self.main.retain(is_live(Queue::Main));
        let ghost_keys = &self.ghost_keys;
        self.ghost
            .retain(|(key, stamp)| ghost_keys.get(key) == Some(stamp));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Touches `n` keys round-robin for `rounds` rounds in a cache of room for `capacity`
    /// keys of weight 1 (evicting after each touch, as the processor does after each batch);
    /// the hit ratio of the last half of the rounds.
    fn cyclic_hit_ratio(capacity: u64, n: u64, rounds: u64) -> f64 {
        let mut policy = Policy::new(capacity);
        let (mut hits, mut total) = (0u64, 0u64);
        for round in 0..rounds {
            for key in 0..n {
                let hit = policy.contains(&key);
                policy.touch(&key, 1);
                while policy.weight() > capacity {
                    policy.evict_one(|_| false).expect("nothing is pinned");
                }
                if round >= rounds / 2 {
                    total += 1;
                    hits += u64::from(hit);
                }
            }
        }
        hits as f64 / total as f64
    }

    #[test]
    fn cyclic_access_hits_about_capacity_over_n() {
        for (capacity, n) in [(512, 2000), (100, 200), (900, 1000), (100, 1000), (10, 11)] {
            let ratio = cyclic_hit_ratio(capacity, n, 40);
            let ideal = capacity as f64 / n as f64;
            println!(
                "capacity {capacity}, {n} keys round-robin: hit ratio {ratio:.3} (C/N {ideal:.3})"
            );
            assert!(
                ratio > 0.7 * ideal && ratio <= ideal + 1e-9,
                "capacity {capacity}, {n} keys: hit ratio {ratio:.3}, C/N {ideal:.3}"
            );
        }
    }

    #[test]
    fn everything_hits_when_it_fits() {
        assert_eq!(cyclic_hit_ratio(100, 100, 10), 1.0);
    }

    #[test]
    fn the_budget_bounds_the_weight_held() {
        let capacity = 10_000;
        let mut policy = Policy::new(capacity);
        // Weights of 1 to 997 bytes, keys in a skewed order (some hot, most cold).
        for i in 0u64..20_000 {
            let key = if i % 3 == 0 { i % 17 } else { i };
            policy.touch(&key, 1 + (i * 7919) % 997);
            while policy.weight() > capacity {
                policy.evict_one(|_| false).expect("nothing is pinned");
            }
            assert!(policy.weight() <= capacity);
        }
        let held: u64 = policy.entries.values().map(|e| e.weight).sum();
        assert_eq!(held, policy.weight());
    }

    #[test]
    fn pinned_keys_are_never_evicted() {
        let mut policy = Policy::new(10);
        for key in 0..20u32 {
            policy.touch(&key, 1);
        }
        let mut evicted = Vec::new();
        while policy.weight() > 10 {
            match policy.evict_one(|k| k % 2 == 0) {
                Some((key, _)) => evicted.push(key),
                None => break,
            }
        }
        assert!(evicted.iter().all(|k| k % 2 == 1), "{evicted:?}");
        assert_eq!(policy.weight(), 10);
        // All pinned: nothing to evict, the weight stays over the budget.
        assert_eq!(policy.evict_one(|_| true), None);
        for key in (0..20).step_by(2) {
            assert!(policy.contains(&key));
        }
    }

    #[test]
    fn weights_follow_touches_and_removals() {
        let mut policy = Policy::new(100);
        policy.touch(&"a", 10);
        policy.touch(&"b", 20);
        policy.touch(&"a", 15);
        assert_eq!(policy.weight(), 35);
        policy.remove(&"b");
        assert_eq!(policy.weight(), 15);
        policy.remove(&"b");
        assert_eq!(policy.weight(), 15);
        assert_eq!(policy.evict_one(|_| false), Some(("a", 15)));
        assert!(policy.is_empty());
        assert_eq!(policy.weight(), 0);
    }
}
