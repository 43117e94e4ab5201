//! A table and the reconciler's copy of what it holds, kept equal by
//! routing every write through [`Mirror`]: only what the map accepted is
//! recorded, so after a failed batch the copy still matches the map.

use std::collections::BTreeMap;

use super::table::{BatchError, Found, StoreError, Table};

pub(super) struct Mirror<T: Table> {
    table: T,
    content: BTreeMap<T::Key, T::Value>,
}

impl<T: Table> Mirror<T> {
    /// Reads the whole table, unless it was just created (so is empty:
    /// reading a large array whole is a good part of a cold start).
    pub(super) fn adopt(table: T, found: Found) -> Result<Self, StoreError> {
        let content = match found {
            Found::Created => BTreeMap::new(),
            Found::Pinned => table.read()?.into_iter().collect(),
        };
        Ok(Self { table, content })
    }

    /// Reads the table again, as it is now. On error the copy is unchanged.
    pub(super) fn reread(&self) -> Result<BTreeMap<T::Key, T::Value>, StoreError> {
        Ok(self.table.read()?.into_iter().collect())
    }

    /// Replaces the copy with what [`Self::reread`] returned.
    pub(super) fn set_content(&mut self, content: BTreeMap<T::Key, T::Value>) {
        self.content = content;
    }

    /// The table itself, bypassing the copy: lets tests change the map
    /// behind the reconciler's back, as `bpftool` could.
    #[cfg(test)]
    pub(super) fn table_mut(&mut self) -> &mut T {
        &mut self.table
    }

    pub(super) fn table(&self) -> &T {
        &self.table
    }

    pub(super) fn content(&self) -> &BTreeMap<T::Key, T::Value> {
        &self.content
    }

    pub(super) fn get(&self, key: &T::Key) -> Option<&T::Value> {
        self.content.get(key)
    }

    /// Writes `entries` in order and records those the map took; on
    /// failure, `written` says how many that was.
    pub(super) fn put(&mut self, entries: &[(T::Key, T::Value)]) -> Result<(), BatchError> {
        let result = self.table.put(entries);
        let done = result
            .as_ref()
            .map_or_else(|e| e.written, |()| entries.len());
        self.content.extend(entries[..done].iter().copied());
        result
    }

    /// Deletes `keys` in order and records those the map dropped.
    pub(super) fn delete(&mut self, keys: &[T::Key]) -> Result<(), BatchError> {
        let result = self.table.delete(keys);
        let done = result.as_ref().map_or_else(|e| e.written, |()| keys.len());
        for k in &keys[..done] {
            self.content.remove(k);
        }
        result
    }
}
