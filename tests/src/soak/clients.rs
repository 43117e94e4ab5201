//! The soak's client pods: one `lbt soak-client` process each, in its own
//! network namespace, told which Services to send to, and what their
//! requests got, merged.

use std::{
    collections::BTreeMap,
    io::{BufReader, Write as _},
    path::Path,
    process::{Child, ChildStdin, Stdio},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    thread::JoinHandle,
};

use anyhow::Context as _;

use super::{
    wire::{Answers, Command, Failures, Key, Phase, Report},
    world::Service,
};
use crate::probe::lbt;

/// Everything the clients reported, merged.
#[derive(Debug, Default)]
pub struct Received {
    /// Per key and backend identity.
    pub answers: BTreeMap<(Key, String), Answers>,
    /// Per key and cause.
    pub failures: BTreeMap<(Key, String), Failures>,
    /// Every failure tally as it came (one per key, cause and second), to
    /// put failures next to the disturbances around them.
    pub failure_log: Vec<Failures>,
    pub reconnects: BTreeMap<Key, u64>,
    pub late_replies: u64,
}

struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    reader: Option<JoinHandle<anyhow::Result<()>>>,
    acked: Arc<AtomicU64>,
}

pub(super) struct Clients {
    clients: Vec<Client>,
    received: Arc<Mutex<Received>>,
    seq: u64,
}

impl Clients {
    /// Starts one client in each namespace of `nss`, in `cgroup`.
    pub(super) fn start(nss: &[String], cgroup: &Path) -> anyhow::Result<Self> {
        let received = Arc::new(Mutex::new(Received::default()));
        let mut clients = Vec::new();
        for ns in nss {
            let mut child = lbt(ns, Some(cgroup))
                .arg("soak-client")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .context("starting lbt soak-client")?;
            let stdout = child.stdout.take().expect("piped");
            let acked = Arc::new(AtomicU64::new(0));
            let (into, ack) = (received.clone(), acked.clone());
            let reader = std::thread::spawn(move || read(BufReader::new(stdout), &into, &ack));
            clients.push(Client {
                stdin: child.stdin.take(),
                child,
                reader: Some(reader),
                acked,
            });
        }
        Ok(Self {
            clients,
            received,
            seq: 0,
        })
    }

    fn send(&mut self, command: &Command) -> anyhow::Result<()> {
        let line = serde_json::to_string(command)?;
        for c in &mut self.clients {
            let stdin = c.stdin.as_mut().context("clients already finished")?;
            writeln!(stdin, "{line}").context("a soak client stopped reading")?;
            stdin.flush()?;
        }
        Ok(())
    }

    /// Starts sending to every port of `svc`.
    pub(super) fn add(&mut self, svc: &Service, phase: Phase) -> anyhow::Result<()> {
        for (proto, to) in svc.targets() {
            self.send(&Command::Add {
                svc: svc.name.clone(),
                proto,
                to,
                phase,
            })?;
        }
        Ok(())
    }

    /// Moves `svc` to `phase`; returns the sequence number to wait for
    /// with [`Self::acked`].
    pub(super) fn phase(&mut self, svc: &str, phase: Phase) -> anyhow::Result<u64> {
        self.seq += 1;
        let seq = self.seq;
        self.send(&Command::Phase {
            svc: svc.to_owned(),
            phase,
            seq,
        })?;
        Ok(seq)
    }

    /// Stops sending to `svc`.
    pub(super) fn remove(&mut self, svc: &str) -> anyhow::Result<u64> {
        self.seq += 1;
        let seq = self.seq;
        self.send(&Command::Remove {
            svc: svc.to_owned(),
            seq,
        })?;
        Ok(seq)
    }

    /// Whether every client has acknowledged `seq`.
    pub(super) fn acked(&self, seq: u64) -> bool {
        self.clients
            .iter()
            .all(|c| c.acked.load(Ordering::SeqCst) >= seq)
    }

    /// Fails if a client has exited.
    pub(super) fn check(&mut self) -> anyhow::Result<()> {
        for c in &mut self.clients {
            if let Some(status) = c.child.try_wait()? {
                anyhow::bail!("a soak client exited early ({status})");
            }
        }
        Ok(())
    }

    /// Closes the clients' stdin, waits for their last tallies, and
    /// returns everything they reported.
    pub(super) fn finish(mut self) -> anyhow::Result<Received> {
        for c in &mut self.clients {
            drop(c.stdin.take());
        }
        for c in &mut self.clients {
            let status = c.child.wait()?;
            anyhow::ensure!(status.success(), "a soak client failed ({status})");
            if let Some(reader) = c.reader.take() {
                reader
                    .join()
                    .map_err(|_| anyhow::anyhow!("a client reader panicked"))??;
            }
        }
        let mut received = self.received.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(std::mem::take(&mut *received))
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        for c in &mut self.clients {
            drop(c.stdin.take());
            let _ = c.child.kill();
            let _ = c.child.wait();
        }
    }
}

/// Reads one client's reports until its `Done`.
fn read(
    out: impl std::io::BufRead,
    into: &Mutex<Received>,
    acked: &AtomicU64,
) -> anyhow::Result<()> {
    for line in out.lines() {
        let report: Report = serde_json::from_str(&line?).context("a soak client's report")?;
        match report {
            Report::Ack { seq } => {
                acked.fetch_max(seq, Ordering::SeqCst);
            }
            Report::Tally(t) => {
                let mut r = into.lock().unwrap_or_else(PoisonError::into_inner);
                for a in t.answers {
                    r.answers
                        .entry((a.key.clone(), a.backend.clone()))
                        .and_modify(|x| x.merge(&a))
                        .or_insert(a);
                }
                for f in t.failures {
                    r.failure_log.push(f.clone());
                    r.failures
                        .entry((f.key.clone(), f.cause.clone()))
                        .and_modify(|x| x.merge(&f))
                        .or_insert(f);
                }
                for (key, n) in t.reconnects {
                    *r.reconnects.entry(key).or_default() += n;
                }
                r.late_replies += t.late_replies;
            }
            Report::Done => return Ok(()),
        }
    }
    anyhow::bail!("a soak client ended without its last report")
}
