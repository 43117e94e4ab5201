//! Everything a run collected, and the judgement: which answers came from
//! a backend that was not serving the Service then, and what fails the
//! soak. Times and convergence are reported, never asserted; flatness is
//! asserted in the long soak only, whose one agent lives through the run.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use super::{
    clients::Received,
    converge::Tracker,
    cx::{AgentLife, Counts, Life},
    flatness::{self, Flatness},
    observe::Sample,
    plan::{Mode, Plan},
    wire::{Key, Phase},
    world::service_of,
};
use crate::{
    maps::Entries,
    snmp::{Counters, Snapshot},
};

pub struct Results {
    pub seed: u64,
    pub plan: Plan,
    pub agent_bin: PathBuf,
    /// Setting up: namespaces, pods, the first agent and its first sync.
    pub setup: Duration,
    /// When the clients started, and when they stopped.
    pub traffic_ns: (u64, u64),
    /// When the clients started, by the wall clock (to line the report's
    /// times up with the agent's log).
    pub traffic_unix: std::time::SystemTime,
    pub received: Received,
    pub tracker: Tracker,
    pub samples: Vec<Sample>,
    pub read_errors: (u64, Vec<String>),
    /// Every read of the maps: of every frontend or not, and how long it
    /// took (µs).
    pub reads: Vec<(bool, u32)>,
    pub lives: BTreeMap<String, Life>,
    pub agents: Vec<AgentLife>,
    pub counts: Counts,
    pub events: Vec<(u64, String)>,
    /// After the last change: every map's entries, and what the live
    /// Services need (frontends, slots, backends).
    pub final_entries: Option<Entries>,
    pub final_needed: (usize, usize, usize),
    /// The datapath's counters at the end (`lb-agent dump --stats`).
    pub stats: crate::agent::Stats,
    /// LISTs of Services the stand-in apiserver served.
    pub lists: u64,
    /// The kernel's counters in the clients' and the pods' namespaces.
    pub kernel: Kernel,
}

/// The kernel's counters where the soak's datagrams are sent and
/// received: a request lost with no rise of these was not dropped by the
/// kernel's UDP or IP layer in those namespaces.
#[derive(Debug, Default)]
pub struct Kernel {
    /// What rose in each client's namespace while the clients ran.
    pub clients: Snapshot,
    /// Each pod's, from its start (a new namespace counts from 0) to its
    /// stop or the end of the run.
    pub pods: BTreeMap<String, Counters>,
}

/// Answers from one backend to one Service that it should not have given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wrong {
    pub key: Key,
    pub backend: String,
    /// Requests answered by it; at least one was wrong, all of them if
    /// the backend is not the Service's.
    pub n: u64,
    pub why: &'static str,
}

/// Every answer must come from a pod of the request's Service, between
/// its endpoint's first appearance and the moment the maps stopped
/// sending new requests to it.
pub fn wrong_answers(received: &Received, lives: &BTreeMap<String, Life>) -> Vec<Wrong> {
    let mut wrong = Vec::new();
    for ((key, backend), a) in &received.answers {
        let why = if service_of(backend) != Some(key.svc.as_str()) {
            Some("not a pod of this Service")
        } else {
            match lives.get(backend) {
                None => Some("a pod the soak never added"),
                Some(l) if a.min_end_ns < l.added_ns => {
                    Some("answered before its endpoint was added")
                }
                Some(l) if l.gone_ns.is_some_and(|g| a.max_start_ns > g) => {
                    Some("answered a request that started after the maps left it")
                }
                Some(_) => None,
            }
        };
        if let Some(why) = why {
            wrong.push(Wrong {
                key: key.clone(),
                backend: backend.clone(),
                n: a.n,
                why,
            });
        }
    }
    wrong
}

impl Results {
    /// Failed requests to Services that had a serving endpoint then.
    pub fn stable_failures(&self) -> u64 {
        self.received
            .failures
            .iter()
            .filter(|((k, _), _)| k.phase == Phase::Stable)
            .map(|(_, f)| f.n)
            .sum()
    }

    /// The long soak's judgement of its agent's growth (`None` in the
    /// chaos soak, whose agents live 20 to 40 s); `Err` if the run was too
    /// short to judge.
    pub fn flatness(&self) -> Option<Result<Flatness, String>> {
        (self.plan.mode == Mode::Long).then(|| flatness::judge(&self.samples, self.traffic_ns))
    }

    /// Why the soak fails; empty if it passes.
    pub fn verdict(&self) -> Vec<String> {
        let mut why = Vec::new();
        match self.flatness() {
            Some(Ok(flat)) => why.extend(flat.failures()),
            Some(Err(e)) => why.push(e),
            None => {}
        }
        if self.plan.mode == Mode::Long && self.agents.len() != 1 {
            why.push(format!(
                "the long soak's agent was replaced: {} agents ran",
                self.agents.len()
            ));
        }
        let failed = self.stable_failures();
        if failed > 0 {
            why.push(format!(
                "{failed} requests to Services with a serving endpoint failed"
            ));
        }
        let wrong = wrong_answers(&self.received, &self.lives);
        if !wrong.is_empty() {
            why.push(format!(
                "{} backends answered requests they should not have",
                wrong.len()
            ));
        }
        let answered: u64 = self.received.answers.values().map(|a| a.n).sum();
        if answered == 0 {
            why.push("no request was answered: no load".into());
        }
        if !self.tracker.drift.is_empty() {
            why.push(format!(
                "the maps differed from the Services with no change in flight, {} times",
                self.tracker.drift.len()
            ));
        }
        let never = self
            .tracker
            .records()
            .iter()
            .filter(|r| r.resolved_ns.is_none())
            .count();
        if never > 0 {
            why.push(format!("{never} changes were never programmed"));
        }
        match self.final_entries {
            None => why.push("the map entries could not be counted at the end".into()),
            Some(e) => {
                let (frontends, slots, backends) = self.final_needed;
                let want = (frontends, frontends, slots, 0, backends, 0);
                let have = (
                    e.frontends,
                    e.states,
                    e.slots,
                    e.members,
                    e.backends,
                    e.affinity,
                );
                if have != want {
                    why.push(format!(
                        "map entries at the end (frontends, states, slots, members, backends, \
                         affinity) {have:?}, the live Services need {want:?}"
                    ));
                }
            }
        }
        let inconsistent = self.stats.of("refused_inconsistent");
        if inconsistent > 0 {
            why.push(format!(
                "datapath counter refused_inconsistent = {inconsistent}"
            ));
        }
        why
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::wire::{Answers, Socket};

    fn answers(svc: &str, backend: &str, min_end: u64, max_start: u64) -> Received {
        let key = Key {
            svc: svc.into(),
            socket: Socket::Tcp,
            phase: Phase::Stable,
        };
        let mut r = Received::default();
        r.answers.insert(
            (key.clone(), backend.into()),
            Answers {
                key,
                backend: backend.into(),
                n: 3,
                min_end_ns: min_end,
                max_start_ns: max_start,
            },
        );
        r
    }

    #[test]
    fn an_answer_counts_only_from_a_pod_of_the_service_while_it_served() {
        let lives = BTreeMap::from([(
            "s001-p0".to_owned(),
            Life {
                added_ns: 100,
                gone_ns: Some(200),
            },
        )]);
        let why = |r: &Received| wrong_answers(r, &lives).first().map(|w| w.why);
        assert_eq!(why(&answers("s001", "s001-p0", 150, 190)), None);
        assert_eq!(
            why(&answers("s001", "s001-p0", 120, 200)),
            None,
            "at the edge"
        );
        assert_eq!(
            why(&answers("s002", "s001-p0", 150, 190)),
            Some("not a pod of this Service")
        );
        assert_eq!(
            why(&answers("s001", "s001-p7", 150, 190)),
            Some("a pod the soak never added")
        );
        assert_eq!(
            why(&answers("s001", "s001-p0", 90, 190)),
            Some("answered before its endpoint was added")
        );
        assert_eq!(
            why(&answers("s001", "s001-p0", 150, 201)),
            Some("answered a request that started after the maps left it")
        );
    }
}
