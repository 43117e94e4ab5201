//! The programs the agent attaches: this build's, verified by the kernel
//! at start and pinned under `programs/<build>/`, or, when an agent of the
//! same build starts again on the same maps (a restart), the ones an
//! earlier agent pinned there, adopted without verifying them again.
//!
//! An adopted program is only as good as the maps it was loaded against:
//! each one's maps must be the maps pinned under `maps/` now, or maps of
//! its own object (XDP's flow cache and its generation, the programs'
//! `.bss`), which then stand in for the new object's copies. Anything else
//! (a program pin left from before a migration, a missing pin) loads the
//! whole set again.

use std::{
    collections::{HashMap, HashSet, hash_map::Entry},
    fs,
    hash::{DefaultHasher, Hash as _, Hasher as _},
    path::{Path, PathBuf},
};

use aya::{
    Ebpf,
    maps::{Map, MapData, MapInfo},
    programs::{CgroupSockAddr, Program as AyaProgram, ProgramError, SchedClassifier, Xdp},
};
use aya_obj::programs::XdpAttachType;
use lb_common::ALL_MAPS;

use super::{
    error::{Error, io_err, map_err},
    loader::{self, OBJECT, remove_pinned, sock_attach_type},
    pins::Pins,
};

/// The object's programs, loaded or adopted, and its maps.
pub struct Programs {
    ebpf: Ebpf,
    /// Programs an earlier agent of this build pinned, by function.
    adopted: HashMap<&'static str, AyaProgram>,
    /// The adopted programs' maps that are their object's own (not pinned
    /// under `maps/`), by their name as the kernel keeps it.
    own_maps: HashMap<String, Map>,
    /// Where this build's programs are pinned.
    dir: PathBuf,
}

/// The identity of this build's programs: a hash of the object, which
/// alone decides what they are (the agent sets no globals at load, and the
/// pinned maps' sizes are checked when the maps are adopted).
fn build_id() -> String {
    let mut hasher = DefaultHasher::new();
    OBJECT.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// A map's name as the kernel keeps it (`BPF_OBJ_NAME_LEN` - 1 bytes).
fn kernel_name(name: &str) -> &str {
    &name[..name.len().min(15)]
}

impl Programs {
    /// The programs `names`, plus `lazy` (loaded later, when wanted, if
    /// not adopted): adopted from the pins of an earlier agent of this
    /// build when `adopt` (the maps were adopted as they were) and every
    /// one of `names` and `lazy` is pinned and bound to the maps pinned in
    /// `maps_dir`, else `names` loaded (see [`loader::load_programs`]) and
    /// pinned. Returns whether they were adopted.
    pub fn start(
        ebpf: Ebpf,
        pins: &Pins,
        maps_dir: &Path,
        names: &[&'static str],
        lazy: &[&'static str],
        adopt: bool,
    ) -> Result<(Self, bool), Error> {
        let mut programs = Self {
            ebpf,
            adopted: HashMap::new(),
            own_maps: HashMap::new(),
            dir: pins.build_dir(&build_id()),
        };
        if adopt {
            match programs.adopt(maps_dir, names.iter().chain(lazy)) {
                Ok(true) => return Ok((programs, true)),
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "the pinned programs of this build cannot be adopted; loading them"
                ),
            }
            programs.adopted.clear();
            programs.own_maps.clear();
        }
        loader::load_programs(&mut programs.ebpf, names)?;
        if let Err(e) = programs.pin_loaded(pins, names) {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                "pinning the programs failed: a restart will load them again"
            );
        }
        Ok((programs, false))
    }

    /// Pins `names`, loaded, in place of whatever programs were pinned, of
    /// any build.
    fn pin_loaded(&mut self, pins: &Pins, names: &[&'static str]) -> Result<(), Error> {
        remove_pinned(pins)?;
        fs::create_dir_all(&self.dir).map_err(io_err("creating", &self.dir))?;
        names.iter().try_for_each(|name| self.pin(name))
    }

    /// Adopts `names` from the pins, if all of them are there and bound
    /// to the maps this agent opened.
    fn adopt<'a>(
        &mut self,
        maps_dir: &Path,
        names: impl Iterator<Item = &'a &'static str>,
    ) -> Result<bool, Error> {
        let pinned = ALL_MAPS
            .iter()
            .map(|spec| {
                let path = maps_dir.join(spec.pin);
                MapInfo::from_pin(&path)
                    .map(|info| info.id())
                    .map_err(map_err(&path))
            })
            .collect::<Result<HashSet<u32>, Error>>()?;
        let layout: HashSet<&str> = ALL_MAPS.iter().map(|s| kernel_name(s.name)).collect();
        for &name in names {
            let path = self.dir.join(name);
            if !path.exists() {
                tracing::info!(
                    program = name,
                    "not pinned by an earlier agent of this build; loading the programs"
                );
                return Ok(false);
            }
            let prog_err = |source| Error::Program { name, source };
            let program = match self.ebpf.program(name) {
                Some(AyaProgram::CgroupSockAddr(_)) => {
                    let attach = sock_attach_type(name).ok_or(Error::MissingProgram(name))?;
                    AyaProgram::CgroupSockAddr(
                        CgroupSockAddr::from_pin(&path, attach).map_err(prog_err)?,
                    )
                }
                Some(AyaProgram::SchedClassifier(_)) => {
                    AyaProgram::SchedClassifier(SchedClassifier::from_pin(&path).map_err(prog_err)?)
                }
                Some(AyaProgram::Xdp(_)) => AyaProgram::Xdp(
                    Xdp::from_pin(&path, XdpAttachType::Interface).map_err(prog_err)?,
                ),
                _ => return Err(Error::MissingProgram(name)),
            };
            let ids = program
                .info()
                .and_then(|info| info.map_ids())
                .map_err(prog_err)?
                .unwrap_or_default();
            for id in ids.into_iter().filter(|id| !pinned.contains(id)) {
                let map_err = |source| Error::ProgramMap { id, source };
                let map = MapData::from_id(id).map_err(map_err)?;
                let own = map
                    .info()
                    .ok()
                    .and_then(|info| info.name_as_str().map(str::to_owned))
                    .unwrap_or_default();
                // A map of the layout that is not the one pinned now: the
                // program was loaded against maps replaced since.
                if layout.contains(own.as_str()) {
                    tracing::info!(
                        program = name,
                        map = own,
                        "the pinned program uses a map replaced since; loading the programs"
                    );
                    return Ok(false);
                }
                if let Entry::Vacant(slot) = self.own_maps.entry(own) {
                    slot.insert(Map::from_map_data(map).map_err(map_err)?);
                }
            }
            self.adopted.insert(name, program);
        }
        Ok(true)
    }

    /// The program `name`: adopted, else the object's (loaded or not).
    pub fn program_mut(&mut self, name: &str) -> Option<&mut AyaProgram> {
        match self.adopted.get_mut(name) {
            Some(p) => Some(p),
            None => self.ebpf.program_mut(name),
        }
    }

    /// The program `name` as a `T` (see [`Self::program_mut`]).
    pub fn get<'a, T>(&'a mut self, name: &'static str) -> Result<&'a mut T, Error>
    where
        &'a mut T: TryFrom<&'a mut AyaProgram, Error = ProgramError>,
    {
        self.program_mut(name)
            .ok_or(Error::MissingProgram(name))?
            .try_into()
            .map_err(|source| Error::Program { name, source })
    }

    /// Pins the loaded program `name` with this build's, for the next
    /// agent of this build to adopt. A pin there already is left.
    pub fn pin(&mut self, name: &'static str) -> Result<(), Error> {
        let path = self.dir.join(name);
        if path.exists() {
            return Ok(());
        }
        let program = self.program_mut(name).ok_or(Error::MissingProgram(name))?;
        program
            .pin(&path)
            .map_err(|source| Error::Pin { path, source })
    }

    /// The map `name` the programs use: the adopted programs' own, else
    /// the object's.
    pub fn map_mut(&mut self, name: &str) -> Option<&mut Map> {
        match self.own_maps.get_mut(kernel_name(name)) {
            Some(map) => Some(map),
            None => self.ebpf.map_mut(name),
        }
    }

    /// Takes the map `name` the programs use (see [`Self::map_mut`]).
    pub fn take_map(&mut self, name: &str) -> Option<Map> {
        self.own_maps
            .remove(kernel_name(name))
            .or_else(|| self.ebpf.take_map(name))
    }

    /// The loaded object, for programs loaded from it alone (the UDP
    /// socket iterator: its maps are all pinned).
    pub fn object_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }
}

#[cfg(test)]
mod tests {
    use lb_common::XDP_DEVICES_SECTION;
    use lb_test_netns::require_root;

    use super::*;
    use crate::datapath::{layout::Capacities, xdp, xdp_generation};

    /// A pin directory of the test's own, with everything under it removed
    /// on drop.
    struct TestPins(Pins);

    impl Drop for TestPins {
        fn drop(&mut self) {
            let _ = loader::uninstall(&self.0);
        }
    }

    /// The kernel's id of the array `map`.
    fn array_id(map: &Map) -> u32 {
        let Map::Array(data) = map else {
            panic!("not an array: {map:?}");
        };
        data.info().expect("the map's info").id()
    }

    #[test]
    fn an_adopted_program_brings_its_own_maps_and_stale_ones_are_loaded_again() {
        require_root();
        let dir = format!("/sys/fs/bpf/lbunit-programs-{}", std::process::id());
        let pins = TestPins(Pins::new(dir));
        let (pins, maps) = (&pins.0, pins.0.maps_dir());
        let caps = Capacities::default();
        let open = || loader::load(&maps, &caps).expect("loading the object (needs root)");
        // XDP's program, loaded and pinned as `xdp::attach` does.
        let (mut first, _) =
            Programs::start(open(), pins, &maps, &[], &[], false).expect("no programs to load");
        let program: &mut Xdp = first.get(xdp::FUNCTION).expect("lb_xdp");
        program.load().expect("verifying lb_xdp");
        let loaded = program.info().expect("its info").id();
        first.pin(xdp::FUNCTION).expect("pinning lb_xdp");

        let (mut second, adopted) =
            Programs::start(open(), pins, &maps, &[], &[xdp::FUNCTION], true)
                .expect("adopting lb_xdp");
        assert!(adopted, "the same build on the same maps");
        let program: &mut Xdp = second.get(xdp::FUNCTION).expect("lb_xdp");
        let info = program.info().expect("its info");
        assert_eq!(info.id(), loaded, "the pinned program, not a new one");
        let uses = info.map_ids().expect("its maps").expect("map ids");
        // What the agent writes for it must reach the maps it reads, not
        // the new object's copies.
        for name in [XDP_DEVICES_SECTION, xdp_generation::MAP] {
            let mine = array_id(second.map_mut(name).expect(name));
            assert!(
                uses.contains(&mine),
                "{name}: map {mine} is not one of {uses:?}"
            );
        }

        // Another capacity: maps pinned anew, which it was not loaded against.
        drop((first, second));
        loader::uninstall(pins).expect("removing the maps");
        let mut third = Programs::start(open(), pins, &maps, &[], &[], false)
            .expect("loading")
            .0;
        let program: &mut Xdp = third.get(xdp::FUNCTION).expect("lb_xdp");
        program.load().expect("verifying lb_xdp");
        third.pin(xdp::FUNCTION).expect("pinning lb_xdp");
        drop(third);
        for spec in ALL_MAPS {
            fs::remove_file(maps.join(spec.pin)).expect("unpinning a map");
        }
        let (_, adopted) = Programs::start(open(), pins, &maps, &[], &[xdp::FUNCTION], true)
            .expect("loading again");
        assert!(!adopted, "bound to maps that are not the pinned ones");
    }
}
