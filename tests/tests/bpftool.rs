//! `bpftool` reads the agent's pinned maps by field name, as the design
//! promises: every map a real agent pins carries BTF key and value types
//! (read with `BPF_OBJ_GET_INFO_BY_FD` and named from `bpftool btf dump`),
//! and `bpftool -j map dump pinned` formats every entry of a map that has
//! entries, structs as objects of named fields. The one exception, named
//! and checked: the six maps of maps (`*_PREV`), for which the kernel
//! refuses BTF. `--nocapture` prints every map's types and entries. Needs
//! root and bpftool (`cargo xtask setup`); fails loudly without them.

use std::{ffi::CString, fs, os::fd::FromRawFd as _, path::Path, process::Command};

use anyhow::{Context as _, bail, ensure};
use lb_common::maps::{
    ALL_MAPS, BACKENDS4, CONFIG, FE_STATE6, FRONTENDS4, FRONTENDS6, MAGLEV4, STATEFUL,
};
use lb_fixtures::{Object, Slice, Svc, yaml};
use lb_tests::{rig::Rig, unique};
use serde_json::Value;

/// A dual-stack Service with external IPs and Maglev, so that frontends,
/// states, slots, backends and Maglev tables of both families have entries.
fn services() -> String {
    yaml([
        Object::from(
            Svc::new("default", "web")
                .cluster_ips(&["10.96.100.1", "fd00::a"])
                .ip_families(&["IPv4", "IPv6"])
                .ip_family_policy("RequireDualStack")
                .external_ips(&["192.0.2.10", "2001:db8::10"])
                .annotation("lb-agent.io/lb-algorithm", "maglev")
                .port("http", 80, "TCP"),
        ),
        Slice::new("default", "web-4")
            .service("web")
            .port("http", 8080, "TCP")
            .ready(&["10.42.0.1", "10.42.0.2"])
            .into(),
        Slice::new("default", "web-6")
            .service("web")
            .address_type("IPv6")
            .port("http", 8080, "TCP")
            .ready(&["fd00:42::1", "fd00:42::2"])
            .into(),
    ])
}

fn bpftool(args: &[&str]) -> anyhow::Result<Value> {
    let out = Command::new("bpftool")
        .arg("-j")
        .args(args)
        .output()
        .context("running bpftool (installed by `cargo xtask setup`)")?;
    ensure!(
        out.status.success(),
        "bpftool -j {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// The leading fields of the kernel's `struct bpf_map_info`.
#[repr(C)]
#[derive(Default)]
struct MapInfo {
    map_type: u32,
    id: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    name: [u8; 16],
    ifindex: u32,
    btf_vmlinux_value_type_id: u32,
    netns_dev: u64,
    netns_ino: u64,
    btf_id: u32,
    btf_key_type_id: u32,
    btf_value_type_id: u32,
    _pad: u32,
}

/// The kernel's view of a pinned map: `BPF_OBJ_GET`, `BPF_OBJ_GET_INFO_BY_FD`.
fn map_info(pin: &Path) -> anyhow::Result<MapInfo> {
    const BPF_OBJ_GET: libc::c_long = 7;
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    let path = CString::new(pin.as_os_str().as_encoded_bytes())?;
    let mut attr = [0u64; 4];
    attr[0] = path.as_ptr() as u64;
    // SAFETY: BPF_OBJ_GET reads a pathname pointer (alive for the call) and
    // zeroed flags from attr, and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_OBJ_GET, attr.as_ptr(), 32) };
    ensure!(
        fd >= 0,
        "BPF_OBJ_GET {}: {}",
        pin.display(),
        std::io::Error::last_os_error()
    );
    let fd = i32::try_from(fd)?;
    // SAFETY: fd is a new descriptor that nothing else owns.
    let _owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    let mut info = MapInfo::default();
    let mut attr = [0u64; 4];
    attr[0] = u64::from(fd as u32) | (u64::from(size_of::<MapInfo>() as u32) << 32);
    attr[1] = &raw mut info as u64;
    // SAFETY: BPF_OBJ_GET_INFO_BY_FD writes at most info_len bytes into
    // info, which lives for the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, BPF_OBJ_GET_INFO_BY_FD, attr.as_ptr(), 32) };
    ensure!(
        r == 0,
        "BPF_OBJ_GET_INFO_BY_FD {}: {}",
        pin.display(),
        std::io::Error::last_os_error()
    );
    Ok(info)
}

/// `KIND name` of BTF type `id` in object `btf_id` (`bpftool btf dump`).
fn type_name(btf: &Value, id: u32) -> String {
    let ty = btf["types"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["id"] == id))
        .cloned()
        .unwrap_or_default();
    format!(
        "{} {}",
        ty["kind"].as_str().unwrap_or("?"),
        ty["name"].as_str().unwrap_or("")
    )
}

/// Whether `formatted` shows a BTF type as bpftool does: a number, an
/// array, or an object whose fields are named; never raw bytes alone.
fn is_formatted(formatted: &Value) -> bool {
    match formatted {
        Value::Object(fields) => !fields.is_empty() && fields.keys().all(|k| !k.is_empty()),
        Value::Number(_) | Value::Array(_) => true,
        _ => false,
    }
}

/// What one map's check found, for the summary.
struct Seen {
    pin: String,
    types: String,
    entries: Option<usize>,
}

fn check_map(dir: &Path, pin: &str) -> anyhow::Result<Seen> {
    let path = dir.join(pin);
    let info = map_info(&path)?;
    let show = bpftool(&["map", "show", "pinned", path.to_str().context("utf-8")?])?;
    if show["type"] == "array_of_maps" {
        return map_in_map(pin, &path, &info);
    }
    ensure!(
        show["btf_id"] == info.btf_id && info.btf_id != 0,
        "{pin}: no BTF (bpftool map show: {show})"
    );
    let btf = bpftool(&["btf", "dump", "id", &info.btf_id.to_string()])?;
    let types = format!(
        "key {}, value {}",
        type_name(&btf, info.btf_key_type_id),
        type_name(&btf, info.btf_value_type_id)
    );
    ensure!(
        info.btf_key_type_id != 0 && info.btf_value_type_id != 0,
        "{pin} (type {}): key or value without a BTF type: {types}",
        info.map_type
    );
    // Socket storage has no next key to iterate with (the README says it
    // cannot be listed): types only.
    if show["type"] == "sk_storage" {
        let dump = bpftool(&["map", "dump", "pinned", path.to_str().context("utf-8")?]);
        ensure!(dump.is_err(), "{pin}: socket storage listed: {dump:?}");
        return Ok(Seen {
            pin: pin.to_owned(),
            types,
            entries: None,
        });
    }
    let dump = bpftool(&["map", "dump", "pinned", path.to_str().context("utf-8")?])?;
    let entries = dump
        .as_array()
        .with_context(|| format!("{pin}: dump {dump}"))?;
    for entry in entries {
        let formatted = &entry["formatted"];
        let value = match &formatted["values"] {
            // Per-CPU maps: one value per CPU.
            Value::Array(per_cpu) => per_cpu.first().map(|v| &v["value"]).unwrap_or(&Value::Null),
            _ => &formatted["value"],
        };
        if !(is_formatted(&formatted["key"]) && is_formatted(value)) {
            bail!("{pin}: an entry without BTF formatting: {entry}");
        }
    }
    Ok(Seen {
        pin: pin.to_owned(),
        types,
        entries: Some(entries.len()),
    })
}

/// The kernel refuses BTF for a map of maps (`map_check_no_btf`): its
/// values are inner maps, which bpftool names by id (`inner_map_id`).
fn map_in_map(pin: &str, path: &Path, info: &MapInfo) -> anyhow::Result<Seen> {
    ensure!(
        info.btf_id == 0,
        "{pin}: a map of maps with BTF: tell the README"
    );
    let dump = bpftool(&["map", "dump", "pinned", path.to_str().context("utf-8")?])?;
    let entries = dump
        .as_array()
        .with_context(|| format!("{pin}: dump {dump}"))?;
    for entry in entries {
        ensure!(entry["inner_map_id"].is_u64(), "{pin}: {entry}");
    }
    Ok(Seen {
        pin: pin.to_owned(),
        types: "no BTF: a map of maps (values: inner maps' ids)".into(),
        entries: Some(entries.len()),
    })
}

#[test]
fn every_pinned_map_is_btf_typed_and_dumped_by_field_name() -> anyhow::Result<()> {
    let mut rig = Rig::new(&unique("bpftool"))?;
    rig.write_manifest(&services())?;
    rig.start_agent(&[])?;
    let dir = rig.pins_path().join("maps");
    let mut pins: Vec<String> = fs::read_dir(&dir)?
        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
        .collect::<anyhow::Result<_>>()?;
    pins.sort();
    let layout: Vec<&str> = ALL_MAPS.iter().map(|m| m.pin).collect();
    for pin in &layout {
        ensure!(
            pins.iter().any(|p| p == pin),
            "{pin} is not pinned: {pins:?}"
        );
    }

    let (mut seen, mut failed) = (Vec::new(), Vec::new());
    for pin in &pins {
        match check_map(&dir, pin) {
            Ok(s) => seen.push(s),
            Err(e) => failed.push(format!("{e:#}")),
        }
    }
    for s in &seen {
        let entries = s
            .entries
            .map_or("not iterable".into(), |n| format!("{n} entries"));
        eprintln!("{:<24} {entries:>14}  {}", s.pin, s.types);
    }
    ensure!(
        failed.is_empty(),
        "maps bpftool cannot read by field name:\n{}",
        failed.join("\n")
    );
    // Only the maps of maps, where the programs find a migration's previous
    // maps, go without BTF.
    let untyped: Vec<&str> = seen
        .iter()
        .filter(|s| s.types.starts_with("no BTF"))
        .map(|s| s.pin.as_str())
        .collect();
    let prev: Vec<&str> = STATEFUL
        .iter()
        .filter_map(|s| s.prev)
        .map(|m| m.pin)
        .collect();
    ensure!(
        untyped.len() == prev.len() && untyped.iter().all(|p| prev.contains(p)),
        "maps without BTF: {untyped:?}; maps of maps: {prev:?}"
    );

    // The Service filled these; a struct shows its fields by name.
    for spec in [
        FRONTENDS4, FRONTENDS6, BACKENDS4, FE_STATE6, MAGLEV4, CONFIG,
    ] {
        let s = seen
            .iter()
            .find(|s| s.pin == spec.pin)
            .expect("checked above");
        ensure!(
            s.entries.is_some_and(|n| n > 0),
            "{} has no entries",
            spec.pin
        );
    }
    let dump = bpftool(&[
        "map",
        "dump",
        "pinned",
        dir.join(FRONTENDS4.pin).to_str().context("utf-8")?,
    ])?;
    let key = &dump[0]["formatted"]["key"];
    ensure!(
        key.as_object().is_some_and(|k| k.len() > 1),
        "a frontend's key by field: {key}"
    );
    Ok(())
}
