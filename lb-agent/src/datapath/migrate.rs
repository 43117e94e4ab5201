//! Moving from one set of pinned maps to another without a failed
//! connection: the new maps are built in `maps-next/` beside the old ones
//! and filled; the programs switch to them (translating programs first, so
//! that no new reverse-NAT entry lands in the old map, then the entries are
//! carried over, then the reversing programs); only then are the old pins
//! removed and the new ones moved into `maps/`.
//!
//! Every step can be interrupted. The programs attached through our links
//! say which maps are in use, so [`recover`] can tell a `maps-next/` that
//! was never switched to (removed and rebuilt) from one that was (finished).

use std::{
    collections::{BTreeSet, HashSet},
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
    ALL_MAPS, MapSpec, OLD_REVNAT4_PINS, REVNAT4, REVNAT6, RevNat4Key, RevNat4Value, RevNat6Key,
    RevNat6Value,
};

use super::{
    batch,
    layout::{self, LayoutError},
    loader::{REVERSING, TRANSLATING},
    pins::Pins,
    tc,
};

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error("{what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("reading pinned map {path}")]
    Map {
        path: PathBuf,
        #[source]
        source: aya::maps::MapError,
    },
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> MigrateError {
    let path = path.to_owned();
    move |source| MigrateError::Io { what, path, source }
}

/// Ids of the maps the programs attached through our links (socket and
/// tc) use.
pub fn active_map_ids(pins: &Pins) -> BTreeSet<u32> {
    let tc_links = tc::linked(pins).unwrap_or_default();
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
fn map_id(path: &Path) -> Result<u32, MigrateError> {
    MapInfo::from_pin(path)
        .map(|info| info.id())
        .map_err(|source| MigrateError::Map {
            path: path.to_owned(),
            source,
        })
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
pub fn recover(pins: &Pins) -> Result<Leftover, MigrateError> {
    let next = pins.next_dir();
    let names = layout::pinned(&next)?;
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

/// Once the programs use this layout's maps: removes the old pins (other
/// layouts' maps, and maps `maps-next/` replaces) that no program uses, and
/// moves the pins of `maps-next/` into `maps/`. Idempotent; returns the
/// pins removed.
pub fn finish(pins: &Pins) -> Result<Vec<PathBuf>, MigrateError> {
    let maps = pins.maps_dir();
    let next = pins.next_dir();
    let active = active_map_ids(pins);
    // A pin of this layout is never removed merely because no program
    // happens to use it: only when `maps-next/` holds its replacement.
    let replaced = layout::pinned(&next)?;
    let old: Vec<PathBuf> = layout::pinned(&maps)?
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

/// Copies the entries of every older reverse-NAT map (older layouts', or
/// this layout's in `maps/` when `maps-next/` replaces it) into this layout's,
/// keeping entries it already has: they are newer. Call once no program
/// writes the older maps any more, before the reversing programs switch.
pub fn carry_revnat(pins: &Pins) -> Result<usize, MigrateError> {
    // No older layout had IPv6 maps.
    Ok(
        carry::<RevNat4Key, RevNat4Value>(pins, &REVNAT4, &OLD_REVNAT4_PINS)?
            + carry::<RevNat6Key, RevNat6Value>(pins, &REVNAT6, &[])?,
    )
}

/// [`carry_revnat`] for one family's map, `spec`, whose older layouts'
/// pins are `old`.
fn carry<K, V>(pins: &Pins, spec: &MapSpec, old: &[&str]) -> Result<usize, MigrateError>
where
    K: aya::Pod + Eq + Hash,
    V: aya::Pod,
{
    let maps = pins.maps_dir();
    let next = pins.next_dir();
    let (target, sources) = if next.join(spec.pin).exists() {
        (next.join(spec.pin), vec![maps.join(spec.pin)])
    } else {
        (maps.join(spec.pin), Vec::new())
    };
    let mut carried = 0;
    for source in sources
        .into_iter()
        .chain(old.iter().map(|pin| maps.join(pin)))
    {
        if source.exists() {
            carried += copy_revnat::<K, V>(&source, &target, spec)?;
        }
    }
    Ok(carried)
}

/// Copies the entries of the reverse-NAT map at `from` that the one at `to`
/// lacks. Both must have `spec`'s key and value sizes, as the older
/// layouts' have.
fn copy_revnat<K, V>(from: &Path, to: &Path, spec: &MapSpec) -> Result<usize, MigrateError>
where
    K: aya::Pod + Eq + Hash,
    V: aya::Pod,
{
    let open = |path: &Path| {
        let map_err = |source| MigrateError::Map {
            path: path.to_owned(),
            source,
        };
        let data = MapData::from_pin(path).map_err(map_err)?;
        let info = data.info().map_err(map_err)?;
        Ok::<_, MigrateError>((data, info))
    };
    let (src, info) = open(from)?;
    if (info.key_size(), info.value_size()) != (spec.key_size, spec.value_size) {
        return Ok(0);
    }
    let (dst, _) = open(to)?;
    let have: HashSet<K> = batch::lookup_all::<K, V>(dst.fd().as_fd())
        .map_err(io_err("reading", to))?
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let missing: Vec<(K, V)> = batch::lookup_all(src.fd().as_fd())
        .map_err(io_err("reading", from))?
        .into_iter()
        .filter(|(k, _)| !have.contains(k))
        .collect();
    // A program may store an entry for the same socket and backend between
    // the read above and this write, which would then overwrite it with the
    // older value: harmless unless that socket also sent to another
    // frontend with the same backend in those microseconds.
    let (keys, values): (Vec<_>, Vec<_>) = missing.iter().copied().unzip();
    batch::update(dst.fd().as_fd(), &keys, &values, 0)
        .map_err(|(_, e)| io_err("writing", to)(e))?;
    Ok(missing.len())
}

fn remove_if_present(path: &Path) -> Result<(), MigrateError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("removing", path)(e)),
        _ => Ok(()),
    }
}

fn remove_dir_if_present(path: &Path) -> Result<(), MigrateError> {
    match fs::remove_dir(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("removing", path)(e)),
        _ => Ok(()),
    }
}
