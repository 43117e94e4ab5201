//! A sorted map for the one or two entries the cache keeps per frontend and
//! per Service.
//!
//! A `BTreeMap` allocates a node of eleven entries for its first one: about
//! 1.1 KB per frontend for the usual single claim, a third of the agent's
//! heap at 10,000 Services. A vector sorted by key, grown one entry at a
//! time, holds exactly what is in it.

use std::borrow::Borrow;

/// Entries sorted by key; lookups are binary searches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Few<K, V>(Vec<(K, V)>);

impl<K, V> Default for Few<K, V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<K: Ord, V> Few<K, V> {
    /// Inserts or replaces `key`'s value.
    pub(super) fn insert(&mut self, key: K, value: V) {
        match self.find(&key) {
            Ok(i) => self.0[i].1 = value,
            Err(i) => {
                // Exact growth: a doubling vector starts at four entries.
                self.0.reserve_exact(1);
                self.0.insert(i, (key, value));
            }
        }
    }

    pub(super) fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        let i = self.find(key).ok()?;
        let (_, value) = self.0.remove(i);
        self.0.shrink_to_fit();
        Some(value)
    }

    /// The entry with the smallest key.
    pub(super) fn first(&self) -> Option<(&K, &V)> {
        self.0.first().map(|(k, v)| (k, v))
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &K> {
        self.0.iter().map(|(k, _)| k)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.0.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }
}

#[cfg(test)]
mod tests {
    use super::Few;

    #[test]
    fn keeps_keys_sorted_and_unique_and_allocates_what_it_holds() {
        let mut few = Few::default();
        few.insert(3, "c");
        assert_eq!(few.0.capacity(), 1);
        few.insert(1, "a");
        few.insert(2, "b");
        few.insert(1, "A");
        assert_eq!(few.keys().copied().collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(few.first(), Some((&1, &"A")));
        assert_eq!(few.0.capacity(), 3);
        assert_eq!(few.remove(&2), Some("b"));
        assert_eq!(few.remove(&2), None);
        assert_eq!(few.0.capacity(), 2);
        assert_eq!(few.remove(&1), Some("A"));
        assert_eq!(few.remove(&3), Some("c"));
        assert!(few.is_empty());
    }
}
