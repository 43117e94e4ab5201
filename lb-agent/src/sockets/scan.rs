//! One pass: every namespace, every connected UDP socket in it, and a
//! `SOCK_DESTROY` for each one the request makes stale.

use std::{
    collections::HashSet,
    path::Path,
    sync::atomic::{AtomicBool, Ordering},
    thread,
};

use super::{
    SocketsError, StaleUdp, UdpServing,
    diag::{Destroyed, Diag},
    iter::UdpIter,
    netns::{Netns, NetnsSources, NsId},
    revnat::{self, RevNat},
};

/// What a pass did. Every namespace found is counted once, as visited,
/// skipped or failed.
#[derive(Debug, Default)]
pub struct Report {
    /// Namespaces whose sockets were all examined.
    pub netns_visited: u64,
    /// Namespaces that went away before they could be entered, and files
    /// that were not namespaces.
    pub netns_skipped: u64,
    /// Namespaces that could not be entered or dumped, and namespace
    /// directories that could not be listed.
    pub netns_failed: u64,
    /// Connected UDP sockets looked up in their storage and the
    /// reverse-NAT maps.
    pub sockets_examined: u64,
    pub sockets_destroyed: u64,
    /// Stale sockets the kernel refused to destroy.
    pub destroy_failed: u64,
    /// The first namespace or destroy failure, for the log.
    pub first_failure: Option<SocketsError>,
}

impl Report {
    fn keep(&mut self, failure: SocketsError) {
        self.first_failure.get_or_insert(failure);
    }
}

/// Destroys every connected UDP socket, IPv4 or IPv6, in every namespace
/// of `netns`, that the load balancer sent through a frontend of `stale` to
/// a backend that frontend does not serve, as `serving` says when the pass
/// gets to the socket. Where it was sent comes from the socket's storage,
/// through `iter` (what `connect*` writes), else from `LB4_REVNAT` and
/// `LB6_REVNAT` pinned in `maps_dir` (what older programs wrote). The
/// owner's next receive fails with `ECONNABORTED`, and its sends with
/// `EDESTADDRREQ` until it reconnects.
///
/// Fails only if the map cannot be opened or the pass cannot start; what
/// fails in one namespace is counted in the report and the pass goes on.
/// Runs on a thread of its own: the caller's namespace never changes.
pub fn destroy_stale(
    maps_dir: &Path,
    iter: Option<&UdpIter>,
    stale: &StaleUdp,
    serving: &UdpServing,
    netns: &NetnsSources,
) -> Result<Report, SocketsError> {
    run(
        maps_dir,
        iter,
        stale,
        serving,
        netns,
        &AtomicBool::new(false),
    )
}

/// [`destroy_stale`], stopping between namespaces once `stop` is set.
pub(super) fn run(
    maps_dir: &Path,
    iter: Option<&UdpIter>,
    stale: &StaleUdp,
    serving: &UdpServing,
    netns: &NetnsSources,
    stop: &AtomicBool,
) -> Result<Report, SocketsError> {
    if stale.is_empty() {
        return Ok(Report::default());
    }
    let revnat = RevNat::open(maps_dir)?;
    // setns moves the calling thread only. This thread ends with the pass,
    // so it never has to move back and no other thread ever moves.
    thread::scope(|scope| {
        let pass = thread::Builder::new()
            .name("lb-sockets".into())
            .spawn_scoped(scope, move || {
                Pass::new(&revnat, iter, stale, serving).run(netns, stop)
            })
            .map_err(SocketsError::Thread)?;
        match pass.join() {
            Ok(report) => Ok(report),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

struct Pass<'a> {
    revnat: &'a RevNat,
    iter: Option<&'a UdpIter>,
    stale: &'a StaleUdp,
    serving: &'a UdpServing,
    seen: HashSet<NsId>,
    /// The namespace this thread is in, when known.
    here: Option<NsId>,
    report: Report,
}

impl<'a> Pass<'a> {
    fn new(
        revnat: &'a RevNat,
        iter: Option<&'a UdpIter>,
        stale: &'a StaleUdp,
        serving: &'a UdpServing,
    ) -> Self {
        Self {
            revnat,
            iter,
            stale,
            serving,
            seen: HashSet::new(),
            // Unknown: every namespace is entered, the first one too.
            here: NsId::current().ok(),
            report: Report::default(),
        }
    }

    fn run(mut self, sources: &NetnsSources, stop: &AtomicBool) -> Report {
        let (paths, failures) = sources.candidates();
        for failure in failures {
            self.fail(failure);
        }
        for path in paths {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if let Err(failure) = self.visit(&path) {
                self.fail(failure);
            }
        }
        self.report
    }

    fn fail(&mut self, failure: SocketsError) {
        self.report.netns_failed += 1;
        self.report.keep(failure);
    }

    fn visit(&mut self, path: &Path) -> Result<(), SocketsError> {
        let enter_err = |source| SocketsError::Enter {
            path: path.to_owned(),
            source,
        };
        // Most processes share a few namespaces: tell them apart unopened.
        match NsId::of_path(path).map_err(enter_err)? {
            Some(id) if self.seen.contains(&id) => return Ok(()),
            Some(_) => {}
            None => {
                self.report.netns_skipped += 1;
                return Ok(());
            }
        }
        let Some(ns) = Netns::open(path).map_err(enter_err)? else {
            self.report.netns_skipped += 1;
            return Ok(());
        };
        if !self.seen.insert(ns.id) {
            return Ok(());
        }
        if self.here != Some(ns.id) {
            if !ns.enter().map_err(enter_err)? {
                self.report.netns_skipped += 1;
                return Ok(());
            }
            self.here = Some(ns.id);
        }
        self.destroy_here(path)?;
        self.report.netns_visited += 1;
        Ok(())
    }

    /// Destroys the stale sockets of the namespace this thread is in.
    fn destroy_here(&mut self, path: &Path) -> Result<(), SocketsError> {
        let diag_err = |source| SocketsError::Diag {
            path: path.to_owned(),
            source,
        };
        // Read first: a socket connected after it was translated by the
        // new maps, and is not stale.
        let stored = match self.iter {
            Some(iter) => iter.read_here().map_err(|source| SocketsError::Iter {
                path: path.to_owned(),
                source,
            })?,
            None => Default::default(),
        };
        // Created here, the socket sees (and destroys in) this namespace.
        let mut diag = Diag::open().map_err(diag_err)?;
        for socket in diag.connected_udp().map_err(diag_err)? {
            self.report.sockets_examined += 1;
            let found = match stored
                .get(&socket.cookie)
                .and_then(|entry| revnat::stored_frontend(entry, socket.peer))
            {
                Some(found) => Some(found),
                None => self
                    .revnat
                    .frontend(socket.cookie, socket.peer)
                    .map_err(SocketsError::Lookup)?,
            };
            if !found.is_some_and(|(frontend, backend)| {
                self.stale.is_stale(self.serving, frontend, backend)
            }) {
                continue;
            }
            match diag.destroy(&socket) {
                Ok(Destroyed::Yes) => self.report.sockets_destroyed += 1,
                Ok(Destroyed::Gone) => {}
                Err(source) => {
                    self.report.destroy_failed += 1;
                    self.report.keep(SocketsError::Destroy {
                        path: path.to_owned(),
                        source,
                    });
                }
            }
        }
        Ok(())
    }
}
