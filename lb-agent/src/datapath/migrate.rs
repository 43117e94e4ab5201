//! Moving from one set of pinned maps to another without a failed
//! connection: the new maps are built in `maps-next/` beside the old ones
//! and filled; the entries of the stateful maps (socket reverse NAT,
//! affinity, conntrack, SNAT, fragments) are carried over, and the old
//! reverse-NAT, conntrack and SNAT maps are put in the new maps'
//! previous-map slots, where the new programs look for what their maps
//! lack; the programs switch; a grace period later, when no old program
//! runs any more, what the old programs wrote meanwhile is carried over
//! too and the slots are emptied; only then are the old pins removed and
//! the new ones moved into `maps/`.
//!
//! Every step can be interrupted. The programs attached through our links
//! say which maps are in use, so [`recover`] can tell a `maps-next/` that
//! was never switched to (removed and rebuilt) from one that was (finished).

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    fs,
    hash::Hash,
    io,
    os::fd::AsFd as _,
    path::{Path, PathBuf},
};

use aya::{
    maps::{MapData, MapInfo},
    programs::{
        ProgramInfo,
        links::{FdLink, PinnedLink},
        loaded_programs,
    },
};
use lb_common::{
    AFFINITY4, AFFINITY6, ALL_MAPS, AffinityKey, AffinityValue, CONFIG, CT_F_KERNEL, CT4, CT6,
    Ct4Key, Ct4Value, Ct6Key, Ct6Value, FRAG4, FRAG6, Frag4Key, Frag4Value, Frag6Key, KEPT, NAT4,
    NAT6, Nat4Key, Nat4Value, Nat6Key, Nat6Value, NatKey, NatValue, OLD_CONFIG_PINS, REVNAT4,
    REVNAT6, RevNat4Key, RevNat4Value, RevNat6Key, RevNat6Value, STATEFUL, Stateful,
};

use super::{
    batch::Typed,
    elem,
    error::{Error, io_err, map_err},
    layout,
    loader::{REVERSING, TRANSLATING, remove_if_present},
    pins::{self, Pins},
    tc, xdp,
};

/// Ids of the maps the programs attached through our links (socket, tc
/// and XDP) use.
pub fn active_map_ids(pins: &Pins) -> BTreeSet<u32> {
    let mut tc_links = tc::linked(pins).unwrap_or_default();
    tc_links.extend(xdp::linked(pins).unwrap_or_default());
    let programs: BTreeSet<u32> = TRANSLATING
        .iter()
        .chain(&REVERSING)
        .map(|p| p.link)
        .chain(tc_links.iter().map(String::as_str))
        .filter_map(|name| {
            let link = FdLink::from(PinnedLink::from_pin(pins.link(name)).ok()?);
            Some(link.info().ok()?.program_id())
        })
        .collect();
    if programs.is_empty() {
        return BTreeSet::new();
    }
    loaded_programs()
        .filter_map(Result::ok)
        .filter(|info: &ProgramInfo| programs.contains(&info.id()))
        .filter_map(|info| info.map_ids().ok().flatten())
        .flatten()
        .collect()
}

/// The id of the map pinned at `path`.
fn map_id(path: &Path) -> Result<u32, Error> {
    MapInfo::from_pin(path)
        .map(|info| info.id())
        .map_err(map_err(path))
}

/// What an earlier, interrupted migration left in `maps-next/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leftover {
    /// Nothing.
    None,
    /// New maps the programs already use: the migration must be finished.
    Switched,
}

/// Deals with a `maps-next/` left by an interrupted migration: if the
/// programs never switched to its maps, removes it (a new migration
/// rebuilds it); if they did, says so, and the caller finishes it.
pub fn recover(pins: &Pins) -> Result<Leftover, Error> {
    let next = pins.next_dir();
    let names = pins::pinned(&next)?;
    let active = active_map_ids(pins);
    let mut switched = false;
    for name in &names {
        switched |= active.contains(&map_id(&next.join(name))?);
    }
    if switched {
        return Ok(Leftover::Switched);
    }
    for name in &names {
        remove_if_present(&next.join(name))?;
    }
    remove_dir_if_present(&next)?;
    Ok(Leftover::None)
}

/// Pins the maps a migration keeps ([`KEPT`]) into `maps-next/` too, where
/// they match this build's: the new programs then use the very maps the
/// old ones fill. [`finish`] moves the shared pin back over the old one.
pub fn share_kept(pins: &Pins, found: &layout::Inspection) -> Result<(), Error> {
    let next = pins.next_dir();
    for (spec, _) in found
        .maps
        .iter()
        .filter(|(spec, f)| KEPT.contains(spec) && *f == layout::Found::Matches)
    {
        fs::create_dir_all(&next).map_err(io_err("creating", &next))?;
        let (from, to) = (pins.map(spec), next.join(spec.pin));
        remove_if_present(&to)?;
        let map = MapData::from_pin(&from).map_err(map_err(&from))?;
        map.pin(&to).map_err(|source| Error::Pin {
            path: to.clone(),
            source,
        })?;
    }
    Ok(())
}

/// Once the programs use this layout's maps: removes the old pins (other
/// layouts' maps, and maps `maps-next/` replaces) that no program uses, and
/// moves the pins of `maps-next/` into `maps/`. Idempotent; returns the
/// pins removed.
pub fn finish(pins: &Pins) -> Result<Vec<PathBuf>, Error> {
    let maps = pins.maps_dir();
    let next = pins.next_dir();
    let active = active_map_ids(pins);
    // A pin of this layout is never removed merely because no program
    // happens to use it: only when `maps-next/` holds its replacement.
    let replaced = pins::pinned(&next)?;
    let old: Vec<PathBuf> = pins::pinned(&maps)?
        .into_iter()
        .filter(|name| replaced.contains(name) || !ALL_MAPS.iter().any(|s| s.pin == name))
        .map(|name| maps.join(name))
        .filter(|p| !map_id(p).is_ok_and(|id| active.contains(&id)))
        .collect();
    for path in &old {
        remove_if_present(path)?;
    }
    fs::create_dir_all(&maps).map_err(io_err("creating", &maps))?;
    for name in replaced {
        let to = maps.join(&name);
        fs::rename(next.join(&name), &to).map_err(io_err("moving pin to", &to))?;
    }
    remove_dir_if_present(&next)?;
    Ok(old)
}

/// Where a stateful map's entries come from: the map `maps-next/` holds
/// (or, with no migration, `maps/`), and the maps it replaces, newest
/// first: the same map in `maps/` when `maps-next/` replaces it, then
/// older layouts' pins still in `maps/`.
fn predecessors(pins: &Pins, s: &Stateful) -> (PathBuf, Vec<PathBuf>) {
    let maps = pins.maps_dir();
    let next = pins.next_dir().join(s.spec.pin);
    let (target, mut sources) = if next.exists() {
        (next, vec![maps.join(s.spec.pin)])
    } else {
        (maps.join(s.spec.pin), Vec::new())
    };
    sources.extend(s.older.iter().rev().map(|pin| maps.join(pin)));
    sources.retain(|p| p.exists());
    (target, sources)
}

/// Copies the entries of the maps every stateful map replaces (an older
/// layout's, or this layout's in `maps/` when `maps-next/` replaces it)
/// into it, keeping the entries it already has: they are newer. Called
/// before the programs switch, and again once no old program runs (a grace
/// period after), for what they wrote meanwhile. Returns how many entries
/// were carried.
pub fn carry_stateful(pins: &Pins) -> Result<usize, Error> {
    let mut carried = 0;
    for s in &STATEFUL {
        let (target, sources) = predecessors(pins, s);
        for source in sources {
            carried += match s.spec.name {
                n if n == REVNAT4.name => {
                    copy::<RevNat4Key, RevNat4Value>(&source, &target, s, |_| {})?
                }
                n if n == REVNAT6.name => {
                    copy::<RevNat6Key, RevNat6Value>(&source, &target, s, |_| {})?
                }
                n if n == AFFINITY4.name || n == AFFINITY6.name => {
                    copy::<AffinityKey, AffinityValue>(&source, &target, s, |_| {})?
                }
                n if n == CT4.name => copy::<Ct4Key, Ct4Value>(&source, &target, s, upgrade_ct)?,
                // No older layout had IPv6 flows: this layout's, as they are.
                n if n == CT6.name => copy::<Ct6Key, Ct6Value>(&source, &target, s, |_| {})?,
                n if n == NAT6.name => copy::<Nat6Key, Nat6Value>(&source, &target, s, |_| {})?,
                n if n == FRAG6.name => copy::<Frag6Key, Frag4Value>(&source, &target, s, |_| {})?,
                n if n == NAT4.name => {
                    copy::<Nat4Key, Nat4Value>(&source, &target, s, |entries| {
                        // An older layout's TCP state bits: the expiry says all.
                        for (_, v) in entries {
                            v.flags &= CT_F_KERNEL;
                        }
                    })?
                }
                n if n == FRAG4.name => copy::<Frag4Key, Frag4Value>(&source, &target, s, |_| {})?,
                other => unreachable!("stateful map {other} has no entry types"),
            };
        }
    }
    Ok(carried)
}

/// Layout 4's conntrack entries as this layout keeps them: each flow's two
/// entries each knew one side's TCP state; both get both sides'.
fn upgrade_ct(entries: &mut [(Ct4Key, Ct4Value)]) {
    for (k, v) in entries.iter_mut() {
        *v = v.upgraded(k.dir);
    }
    let sides: HashMap<Ct4Key, (u8, u8)> = entries
        .iter()
        .map(|(k, v)| (*k, (v.seen_client, v.seen_backend)))
        .collect();
    for (k, v) in entries.iter_mut() {
        if let Some((c, b)) = sides.get(&k.partner(v)) {
            v.seen_client |= c;
            v.seen_backend |= b;
        }
    }
}

/// Copies the entries of the map at `from` that the one at `to` lacks,
/// after `convert`, each written only if still absent (a program may have
/// written a newer one meanwhile). A map of other key or value sizes is
/// not `s`'s predecessor: nothing is copied.
fn copy<K, V>(
    from: &Path,
    to: &Path,
    s: &Stateful,
    convert: impl FnOnce(&mut [(K, V)]),
) -> Result<usize, Error>
where
    K: aya::Pod + Eq + Hash,
    V: aya::Pod,
{
    let src = MapData::from_pin(from).map_err(map_err(from))?;
    let info = src.info().map_err(map_err(from))?;
    if (info.key_size(), info.value_size()) != (s.spec.key_size, s.spec.value_size) {
        return Ok(0);
    }
    let src = Typed::<K, V>::new(src).map_err(map_err(from))?;
    let dst = MapData::from_pin(to).map_err(map_err(to))?;
    let dst = Typed::<K, V>::new(dst).map_err(map_err(to))?;
    let have: HashSet<K> = dst
        .lookup_all()
        .map_err(io_err("reading", to))?
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let mut entries = src.lookup_all().map_err(io_err("reading", from))?;
    convert(&mut entries);
    let mut copied = 0;
    for (k, v) in entries.iter().filter(|(k, _)| !have.contains(k)) {
        match elem::insert_absent(&dst, k, v) {
            Ok(true) => copied += 1,
            Ok(false) => {}
            Err(e) => return Err(io_err("writing", to)(e)),
        }
    }
    Ok(copied)
}

/// The SNAT ports the mappings of the SNAT map at `path` hold (host
/// order); none if it cannot be read.
fn snat_ports<A>(path: &Path) -> Vec<u16>
where
    NatKey<A>: aya::Pod,
    NatValue<A>: aya::Pod,
{
    let Ok(entries) = MapData::from_pin(path)
        .and_then(Typed::<NatKey<A>, NatValue<A>>::new)
        .map_err(drop)
        .and_then(|nat| nat.lookup_all().map_err(drop))
    else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|(_, v)| v.flags & CT_F_KERNEL == 0)
        .map(|(k, _)| u16::from_be(k.dport_be))
        .collect()
}

/// The ports replies to the SNAT address may come back on: the hull of
/// `range` (the SNAT range), of the ports the live mappings in `maps_dir`
/// hold, and of the ranges of the configurations `maps_dir`'s replaces
/// (an older layout's, or this one's in `maps/` during a migration), whose
/// programs may still be giving out ports. A change of range, or an
/// upgrade, thus keeps every flow's replies found; anything unreadable
/// counts for nothing.
pub fn reply_ports(pins: &Pins, maps_dir: &Path, range: (u16, u16)) -> (u16, u16) {
    let (mut min, mut max) = range;
    let mut widen = |lo: u16, hi: u16| {
        if lo <= hi && hi != 0 {
            min = min.min(lo);
            max = max.max(hi);
        }
    };
    // Both families' flows take their ports from the one range.
    let held = snat_ports::<[u8; 4]>(&maps_dir.join(NAT4.pin))
        .into_iter()
        .chain(snat_ports::<[u8; 16]>(&maps_dir.join(NAT6.pin)));
    for port in held {
        widen(port, port);
    }
    let maps = pins.maps_dir();
    let mut older: Vec<PathBuf> = OLD_CONFIG_PINS.iter().map(|pin| maps.join(pin)).collect();
    if maps_dir != maps {
        older.push(maps.join(CONFIG.pin));
    }
    for path in &older {
        let Ok(data) = MapData::from_pin(path) else {
            continue;
        };
        // Every layout's configuration starts with the SNAT address and
        // the range, as two ports in host order.
        if let Ok(Some(v)) = elem::lookup_raw(&data, &0u32)
            && v.len() >= 8
        {
            widen(
                u16::from_ne_bytes([v[4], v[5]]),
                u16::from_ne_bytes([v[6], v[7]]),
            );
        }
    }
    (min, max)
}

/// Points every stateful map's previous-map slot (in the directory of the
/// map that replaces it) at the map it replaces, so that the programs find
/// there what the new map lacks until the second carry. Returns how many
/// slots were set; a predecessor the kernel refuses as an inner map (other
/// sizes or flags) leaves its slot empty.
pub fn set_prev(pins: &Pins) -> Result<usize, Error> {
    let mut set = 0;
    for s in &STATEFUL {
        let Some(prev) = s.prev else { continue };
        let (target, sources) = predecessors(pins, s);
        let (Some(source), Some(dir)) = (sources.first(), target.parent()) else {
            continue;
        };
        let slot = dir.join(prev.pin);
        let inner = MapData::from_pin(source).map_err(map_err(source))?;
        let outer = slots(&slot)?;
        match outer.set_inner(inner.fd().as_fd()) {
            Ok(()) => set += 1,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(io_err("setting", &slot)(e)),
        }
    }
    Ok(set)
}

/// Empties every previous-map slot pinned in `dir`: once the carry after
/// the switch is done, the programs need no older map, and the old maps
/// are freed when their pins go.
pub fn clear_prev(dir: &Path) -> Result<(), Error> {
    for s in &STATEFUL {
        let Some(prev) = s.prev else { continue };
        let slot = dir.join(prev.pin);
        if !slot.exists() {
            continue;
        }
        slots(&slot)?
            .clear_inner()
            .map_err(io_err("clearing", &slot))?;
    }
    Ok(())
}

/// The previous-map slot pinned at `path`.
fn slots(path: &Path) -> Result<elem::Slots, Error> {
    MapData::from_pin(path)
        .and_then(elem::Slots::new)
        .map_err(map_err(path))
}

fn remove_dir_if_present(path: &Path) -> Result<(), Error> {
    match fs::remove_dir(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("removing", path)(e)),
        _ => Ok(()),
    }
}
