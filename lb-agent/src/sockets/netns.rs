//! The network namespaces of the node: where to find them, how to tell
//! them apart, and entering one on the calling thread.

use std::{
    fs::{self, File},
    io,
    os::{fd::AsFd as _, unix::fs::MetadataExt as _},
    path::{Path, PathBuf},
};

use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};

use super::SocketsError;

/// Where CNI plugins and `ip netns` bind-mount pod namespaces.
pub const DEFAULT_NETNS_DIR: &str = "/var/run/netns";

/// The agent's own namespace.
const OWN: &str = "/proc/self/ns/net";

/// The namespace the calling thread is in (after a `setns`, not the
/// process's).
const THREAD_OWN: &str = "/proc/thread-self/ns/net";

/// The namespaces a pass visits; one reached several ways is visited once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetnsSources {
    /// The agent's own namespace (the host's, with host networking).
    pub own: bool,
    /// Directories whose every file is a namespace bind mount.
    pub dirs: Vec<PathBuf>,
    /// A procfs whose `<pid>/ns/net` are visited: the host's processes
    /// with `hostPID`. `None` skips it.
    pub proc: Option<PathBuf>,
}

impl Default for NetnsSources {
    fn default() -> Self {
        Self {
            own: true,
            dirs: vec![PathBuf::from(DEFAULT_NETNS_DIR)],
            proc: Some(PathBuf::from("/proc")),
        }
    }
}

impl NetnsSources {
    /// The namespace files to try, in order; with the directories that
    /// could not be listed. A directory that does not exist has none.
    pub(super) fn candidates(&self) -> (Vec<PathBuf>, Vec<SocketsError>) {
        let mut paths = Vec::new();
        let mut failures = Vec::new();
        if self.own {
            paths.push(PathBuf::from(OWN));
        }
        for dir in &self.dirs {
            match list(dir) {
                Ok(files) => paths.extend(files),
                Err(source) => failures.push(SocketsError::List {
                    path: dir.clone(),
                    source,
                }),
            }
        }
        if let Some(proc) = &self.proc {
            match list(proc) {
                Ok(entries) => paths.extend(
                    entries
                        .into_iter()
                        .filter(|p| is_pid(p))
                        .map(|p| p.join("ns/net")),
                ),
                Err(source) => failures.push(SocketsError::List {
                    path: proc.clone(),
                    source,
                }),
            }
        }
        (paths, failures)
    }
}

/// The entries of `dir`, sorted; none if it does not exist.
fn list(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut paths = entries
        .map(|e| e.map(|e| e.path()))
        .collect::<io::Result<Vec<_>>>()?;
    paths.sort();
    Ok(paths)
}

fn is_pid(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A namespace's identity: its nsfs inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct NsId {
    dev: u64,
    ino: u64,
}

impl NsId {
    fn of(meta: &fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }

    /// The identity of the namespace file at `path`; `None` if it is gone.
    pub(super) fn of_path(path: &Path) -> io::Result<Option<Self>> {
        fs::metadata(path)
            .map(|m| Some(Self::of(&m)))
            .or_else(vanished)
    }

    /// The namespace the calling thread is in.
    pub(super) fn current() -> io::Result<Self> {
        fs::metadata(THREAD_OWN).map(|m| Self::of(&m))
    }
}

/// An open namespace file: holding it keeps the namespace alive.
pub(super) struct Netns {
    file: File,
    pub id: NsId,
}

impl std::os::fd::AsRawFd for Netns {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }
}

impl Netns {
    /// Opens the namespace file at `path`; `None` if it is gone (the
    /// process exited, the bind mount was removed).
    pub(super) fn open(path: &Path) -> io::Result<Option<Self>> {
        let file = match File::open(path).map(Some).or_else(vanished)? {
            Some(file) => file,
            None => return Ok(None),
        };
        // The open file, not the path: a pid may have been reused since.
        let id = NsId::of(&file.metadata()?);
        Ok(Some(Self { file, id }))
    }

    /// Moves the calling thread into the namespace; `false` if the file is
    /// not a network namespace (any more: an unmounted bind mount leaves an
    /// empty file behind). Only for a thread that no one else relies on.
    pub(super) fn enter(&self) -> io::Result<bool> {
        match move_into_link_name_space(self.file.as_fd(), Some(LinkNameSpaceType::Network)) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::INVAL) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

/// Maps what a namespace going away looks like to `None`.
fn vanished<T>(e: io::Error) -> io::Result<Option<T>> {
    match e.raw_os_error() {
        // The file or the process is gone; a zombie has no namespaces.
        Some(libc::ENOENT | libc::ESRCH) => Ok(None),
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lbt{}{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn candidates_are_own_then_every_file_of_each_dir_then_each_process() {
        let dir = temp_dir("netnsdir");
        let proc = temp_dir("netnsproc");
        fs::write(dir.join("pod-b"), "").unwrap();
        fs::write(dir.join("pod-a"), "").unwrap();
        fs::create_dir(proc.join("42")).unwrap();
        fs::create_dir(proc.join("self")).unwrap();
        fs::write(proc.join("uptime"), "").unwrap();
        let sources = NetnsSources {
            own: true,
            dirs: vec![dir.clone(), dir.join("missing")],
            proc: Some(proc.clone()),
        };
        let (paths, failures) = sources.candidates();
        assert!(
            failures.is_empty(),
            "a missing directory is empty: {failures:?}"
        );
        assert_eq!(
            paths,
            [
                PathBuf::from(OWN),
                dir.join("pod-a"),
                dir.join("pod-b"),
                proc.join("42/ns/net"),
            ]
        );
        fs::remove_dir_all(dir).unwrap();
        fs::remove_dir_all(proc).unwrap();
    }

    #[test]
    fn a_directory_that_cannot_be_listed_is_reported() {
        let dir = temp_dir("netnsfile");
        let file = dir.join("not-a-dir");
        fs::write(&file, "").unwrap();
        let sources = NetnsSources {
            own: false,
            dirs: vec![file.clone()],
            proc: None,
        };
        let (paths, failures) = sources.candidates();
        assert!(paths.is_empty());
        assert!(
            matches!(&failures[..], [SocketsError::List { path, .. }] if *path == file),
            "{failures:?}"
        );
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_namespace_file_that_is_gone_is_none_not_an_error() {
        let path = Path::new("/proc/self/ns/no-such-namespace");
        assert!(NsId::of_path(path).unwrap().is_none());
        assert!(Netns::open(path).unwrap().is_none());
    }

    #[test]
    fn the_same_namespace_reached_two_ways_has_one_identity() {
        let own = NsId::of_path(Path::new(OWN)).unwrap().unwrap();
        let by_pid = format!("/proc/{}/ns/net", std::process::id());
        assert_eq!(NsId::of_path(Path::new(&by_pid)).unwrap(), Some(own));
        assert_eq!(Netns::open(Path::new(OWN)).unwrap().unwrap().id, own);
        assert_eq!(NsId::current().unwrap(), own, "this thread has not moved");
    }

    #[test]
    fn a_file_that_is_not_a_namespace_is_not_entered() {
        let dir = temp_dir("netnsplain");
        let plain = dir.join("unmounted");
        fs::write(&plain, "").unwrap();
        let ns = Netns::open(&plain).unwrap().unwrap();
        // setns refuses a non-namespace file before any other check.
        assert!(!ns.enter().unwrap());
        fs::remove_dir_all(dir).unwrap();
    }
}
