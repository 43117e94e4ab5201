//! Tables in memory with the BPF maps' rules (capacity, insert-only or
//! locked writes), recording every write and grace period in a shared
//! [`Journal`] so that tests can replay the exact order the datapath saw.

use std::{
    any::Any,
    cell::{Cell, RefCell},
    collections::BTreeMap,
    fmt::Debug,
    rc::Rc,
};

use super::{
    grace::GracePeriods,
    table::{BatchError, StoreError, Table, WriteMode},
};

/// One recorded step.
#[derive(Debug)]
pub enum Step {
    /// `table` now holds `(key, value)`: a `(K, V)` tuple.
    Put(&'static str, Box<dyn Any>),
    /// `table` no longer holds `key`: a `K`.
    Delete(&'static str, Box<dyn Any>),
    /// [`GracePeriods::mark`] returned this token.
    Mark(u64),
    /// A grace period ran: every token up to this one has passed.
    Elapsed(u64),
}

/// The steps of every table sharing it, in order.
#[derive(Clone, Debug, Default)]
pub struct Journal(Rc<RefCell<Vec<Step>>>);

impl Journal {
    fn push(&self, step: Step) {
        self.0.borrow_mut().push(step);
    }

    /// Steps recorded so far.
    pub fn len(&self) -> usize {
        self.0.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.borrow().is_empty()
    }

    /// Runs `f` over the steps from `from` on.
    pub fn with_steps<R>(&self, from: usize, f: impl FnOnce(&[Step]) -> R) -> R {
        f(&self.0.borrow()[from..])
    }
}

/// A map in memory.
pub struct MemTable<K, V> {
    name: &'static str,
    mode: WriteMode,
    capacity: u32,
    /// Whether `key` can be written, given the content and capacity.
    fits: fn(&BTreeMap<K, V>, &K, u32) -> bool,
    pub content: BTreeMap<K, V>,
    journal: Journal,
}

impl<K: Ord, V> MemTable<K, V> {
    /// A hash map of `capacity` entries, insert-only.
    pub fn hash(name: &'static str, capacity: u32, journal: &Journal) -> Self {
        Self {
            name,
            mode: WriteMode::Insert,
            capacity,
            fits: |content, key, cap| content.contains_key(key) || content.len() < cap as usize,
            content: BTreeMap::new(),
            journal: journal.clone(),
        }
    }
}

impl<V> MemTable<u32, V> {
    /// An array of `capacity` entries, written in place under its lock.
    pub fn array(name: &'static str, capacity: u32, journal: &Journal) -> Self {
        Self {
            name,
            mode: WriteMode::Locked,
            capacity,
            fits: |_, index, cap| *index < cap,
            content: BTreeMap::new(),
            journal: journal.clone(),
        }
    }
}

impl<K, V> Table for MemTable<K, V>
where
    K: Copy + Ord + Debug + 'static,
    V: Copy + PartialEq + Default + Debug + 'static,
{
    type Key = K;
    type Value = V;

    fn name(&self) -> &'static str {
        self.name
    }

    fn mode(&self) -> WriteMode {
        self.mode
    }

    fn capacity(&self) -> u32 {
        self.capacity
    }

    fn read(&self) -> Result<Vec<(K, V)>, StoreError> {
        let free = V::default();
        Ok(self
            .content
            .iter()
            .filter(|(_, v)| self.mode == WriteMode::Insert || **v != free)
            .map(|(k, v)| (*k, *v))
            .collect())
    }

    fn put(&mut self, entries: &[(K, V)]) -> Result<(), BatchError> {
        for (written, &(k, v)) in entries.iter().enumerate() {
            let error = if self.mode == WriteMode::Insert && self.content.contains_key(&k) {
                Some(StoreError::Exists { map: self.name })
            } else if !(self.fits)(&self.content, &k, self.capacity) {
                Some(StoreError::Full { map: self.name })
            } else {
                None
            };
            if let Some(error) = error {
                return Err(BatchError { written, error });
            }
            self.content.insert(k, v);
            self.journal.push(Step::Put(self.name, Box::new((k, v))));
        }
        Ok(())
    }

    fn delete(&mut self, keys: &[K]) -> Result<(), BatchError> {
        for k in keys {
            if self.content.remove(k).is_some() {
                self.journal.push(Step::Delete(self.name, Box::new(*k)));
            }
        }
        Ok(())
    }
}

/// Grace periods that pass only when a test says so. Clones share the
/// clock, so a test keeps one while the reconciler owns another.
#[derive(Clone, Debug)]
pub struct ManualGrace {
    next: Rc<Cell<u64>>,
    passed: Rc<Cell<u64>>,
    journal: Journal,
}

impl ManualGrace {
    pub fn new(journal: &Journal) -> Self {
        Self {
            next: Rc::new(Cell::new(1)),
            passed: Rc::new(Cell::new(0)),
            journal: journal.clone(),
        }
    }

    /// A grace period starts and ends now: every mark so far has passed.
    pub fn elapse(&self) {
        self.passed.set(self.next.get() - 1);
        self.journal.push(Step::Elapsed(self.passed.get()));
    }
}

impl GracePeriods for ManualGrace {
    fn mark(&mut self) -> u64 {
        let token = self.next.get();
        self.next.set(token + 1);
        self.journal.push(Step::Mark(token));
        token
    }

    fn passed(&self, token: u64) -> bool {
        token <= self.passed.get()
    }
}

/// Tables in memory, as [`super::Tables`].
#[derive(Debug)]
pub enum Mem {}

impl super::Tables for Mem {
    type Table<K: super::MapKey, V: super::MapValue> = MemTable<K, V>;
}

/// One family's tables in memory, sharing `journal`: frontend entries,
/// state ids and slots (and members) and backends up to the given
/// capacities, Maglev chunks without a bound that matters.
pub fn lb_tables<F: super::Family>(
    frontends: u32,
    slots: u32,
    backends: u32,
    journal: &Journal,
) -> super::LbTables<F, Mem> {
    super::LbTables {
        frontends: MemTable::hash(lb_common::FRONTENDS4.name, frontends, journal),
        states: MemTable::array(lb_common::FE_STATE4.name, frontends + 1, journal),
        slots: MemTable::hash(lb_common::SLOTS4.name, slots, journal),
        members: MemTable::hash(lb_common::MEMBERS4.name, slots, journal),
        backends: MemTable::hash(lb_common::BACKENDS4.name, backends, journal),
        maglev: MemTable::hash(
            lb_common::MAGLEV4.name,
            lb_common::DEFAULT_MAGLEV_MAX,
            journal,
        ),
    }
}

/// The tc programs' settings in memory.
#[derive(Debug, Default)]
pub struct MemSettings {
    /// `LB4_SRC_RANGES`' keys.
    pub ranges: std::collections::BTreeSet<super::SourceRangeKey>,
    /// How many writes each kind took: insert, remove.
    pub writes: [usize; 2],
    /// `LB_ADDRS`' words written, by index.
    pub address_words: BTreeMap<u32, u64>,
    /// `LB4_DSR_EPS`' and `LB6_DSR_EPS`' keys.
    pub dsr_endpoints: std::collections::BTreeSet<super::DsrEndpointKey>,
    /// `LB4_NODE_NETS`' and `LB6_NODE_NETS`' entries.
    pub node_nets: BTreeMap<ipnet::IpNet, u32>,
    /// Every write of those, in order: inserted (or replaced), or removed.
    pub node_net_ops: Vec<(bool, ipnet::IpNet)>,
}

impl super::SettingsStore for MemSettings {
    fn source_ranges(
        &self,
    ) -> Result<std::collections::BTreeSet<super::SourceRangeKey>, StoreError> {
        Ok(self.ranges.clone())
    }

    fn insert_source_range(&mut self, key: &super::SourceRangeKey) -> Result<(), StoreError> {
        self.ranges.insert(*key);
        self.writes[0] += 1;
        Ok(())
    }

    fn remove_source_range(&mut self, key: &super::SourceRangeKey) -> Result<(), StoreError> {
        self.ranges.remove(key);
        self.writes[1] += 1;
        Ok(())
    }

    fn write_address_words(&mut self, writes: &[(u32, u64)]) -> Result<(), StoreError> {
        self.address_words.extend(writes.iter().copied());
        Ok(())
    }

    fn dsr_endpoints(
        &self,
    ) -> Result<std::collections::BTreeSet<super::DsrEndpointKey>, StoreError> {
        Ok(self.dsr_endpoints.clone())
    }

    fn insert_dsr_endpoint(&mut self, key: &super::DsrEndpointKey) -> Result<(), StoreError> {
        self.dsr_endpoints.insert(*key);
        Ok(())
    }

    fn remove_dsr_endpoint(&mut self, key: &super::DsrEndpointKey) -> Result<(), StoreError> {
        self.dsr_endpoints.remove(key);
        Ok(())
    }

    fn node_nets(&self) -> Result<BTreeMap<ipnet::IpNet, u32>, StoreError> {
        Ok(self.node_nets.clone())
    }

    fn insert_node_net(&mut self, net: &ipnet::IpNet, node: u32) -> Result<(), StoreError> {
        self.node_nets.insert(*net, node);
        self.node_net_ops.push((true, *net));
        Ok(())
    }

    fn remove_node_net(&mut self, net: &ipnet::IpNet) -> Result<(), StoreError> {
        self.node_nets.remove(net);
        self.node_net_ops.push((false, *net));
        Ok(())
    }
}
