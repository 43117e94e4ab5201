//! Convergence: each change the soak makes is an expectation about the
//! maps (a cluster IP's frontends and their backends, or its absence),
//! resolved when a read of the maps shows it, or shows a later change of
//! the same cluster IP. Its clock runs from the change, or, if the change
//! was made while the agent could not see it (agent down, apiserver out,
//! watches held back), from the moment it could. Between changes, the maps
//! must equal what every Service asks for: a difference then is drift. No
//! I/O: the observer feeds it reads of the maps.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{Ipv4Addr, SocketAddrV4},
};

use crate::maps::{Frontend, FrontendKey, View};

use super::world::Frontends;

/// What a cluster IP must look like in the maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Want {
    /// These frontends, each serving exactly these backends, and the
    /// address's wildcard frontend refusing every other port; nothing else.
    Serving(Frontends),
    /// No frontend at all on the address.
    Absent,
}

/// Whether `view` shows `want` for `vip`.
pub fn holds(view: &View, vip: Ipv4Addr, want: &Want) -> bool {
    let mut on_vip = view.range((vip, 0, 0)..=(vip, u16::MAX, u8::MAX));
    match want {
        Want::Absent => on_vip.next().is_none(),
        Want::Serving(ports) => {
            let mut seen = 0;
            for ((_, port, proto), fe) in on_vip {
                seen += 1;
                let ok = match (fe, ports.get(&(*port, *proto))) {
                    // The wildcard: every other port is refused.
                    (Frontend::Serving(list), None) => (*port, *proto) == (0, 0) && list.is_empty(),
                    (Frontend::Serving(list), Some(want)) => {
                        list.len() == want.len()
                            && list.iter().collect::<BTreeSet<_>>() == want.iter().collect()
                    }
                    _ => false,
                };
                if !ok {
                    return false;
                }
            }
            seen == ports.len() + 1
        }
    }
}

/// The changes and disturbances whose convergence is timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// The first agent's start: until every Service is programmed.
    Start,
    /// A new pod's endpoint added, ready (a rolling update's first step).
    EndpointReady,
    /// An old pod's endpoint became terminating: new connections leave it.
    EndpointTerminating,
    /// A Service and its slice created.
    ServiceCreated,
    /// A Service and its slice deleted.
    ServiceDeleted,
    /// The agent restarted after a SIGKILL: until every Service is as asked.
    AgentRestart,
    /// The apiserver came back from an outage: until every Service is as
    /// asked, i.e. the changes made during the outage are programmed.
    OutageEnd,
    /// A forced relist (410 Gone): until the changes the held-back watches
    /// hid are programmed.
    Relist,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::Start,
        Kind::EndpointReady,
        Kind::EndpointTerminating,
        Kind::ServiceCreated,
        Kind::ServiceDeleted,
        Kind::AgentRestart,
        Kind::OutageEnd,
        Kind::Relist,
    ];

    /// A change of one Service (not a disturbance that concerns all).
    pub fn is_change(self) -> bool {
        matches!(
            self,
            Kind::EndpointReady
                | Kind::EndpointTerminating
                | Kind::ServiceCreated
                | Kind::ServiceDeleted
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Start => "first start: every Service programmed",
            Kind::EndpointReady => "endpoint added, ready",
            Kind::EndpointTerminating => "endpoint terminating",
            Kind::ServiceCreated => "Service created",
            Kind::ServiceDeleted => "Service deleted",
            Kind::AgentRestart => "agent restart: every Service as asked",
            Kind::OutageEnd => "apiserver back: every Service as asked",
            Kind::Relist => "forced relist: every Service as asked",
        }
    }
}

/// Why the agent cannot see changes now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Block {
    AgentDown,
    ApiserverDown,
    WatchesHeld,
}

/// One expectation, and when it was met.
#[derive(Clone, Debug)]
pub struct Record {
    pub id: u64,
    pub kind: Kind,
    /// The Service, or none for a disturbance that concerns all of them.
    pub svc: Option<String>,
    /// What the wait is about: every cluster IP, or one.
    scope: Scope,
    pub made_ns: u64,
    /// When its clock started: `None` while the agent cannot see it.
    pub clock_ns: Option<u64>,
    /// A disturbance stopped its clock while it was in flight.
    pub interrupted: bool,
    /// Made while the agent was still catching up after a disturbance
    /// (one that waits for every Service was pending).
    pub catching_up: bool,
    pub resolved_ns: Option<u64>,
}

impl Record {
    /// The time to converge.
    pub fn took_ns(&self) -> Option<u64> {
        Some(self.resolved_ns?.saturating_sub(self.clock_ns?))
    }
}

#[derive(Clone, Debug)]
enum Scope {
    One(Ipv4Addr),
    All,
}

/// Every expectation of a run, and what every cluster IP must look like.
#[derive(Debug, Default)]
pub struct Tracker {
    wants: BTreeMap<Ipv4Addr, Want>,
    /// The frontends each cluster IP has had (ports and wildcard), so that
    /// a read for a pending change can look just them up.
    keys: BTreeMap<Ipv4Addr, BTreeSet<(u16, u8)>>,
    records: Vec<Record>,
    /// Indexes of unresolved records.
    pending: Vec<usize>,
    blocks: BTreeSet<Block>,
    /// Disturbances the agent is still catching up after (reconnecting,
    /// relisting, starting).
    catching_up: u32,
    /// Reads of the maps that differed from the wants with nothing
    /// pending, with the cluster IPs that differed (the first ones).
    pub drift: Vec<(u64, Vec<Ipv4Addr>)>,
}

impl Tracker {
    /// Records a change of `vip` to `want`, made now: call it before the
    /// apiserver changes, so that no read can see the change unexpected.
    pub fn expect(&mut self, kind: Kind, svc: &str, vip: Ipv4Addr, want: Want, now: u64) -> u64 {
        self.assume(vip, want);
        self.push(kind, Some(svc.to_owned()), Scope::One(vip), now)
    }

    /// Sets what `vip` must look like, timing nothing (the state the run
    /// starts from).
    pub fn assume(&mut self, vip: Ipv4Addr, want: Want) {
        if let Want::Serving(ports) = &want {
            let keys = self.keys.entry(vip).or_default();
            keys.insert((0, 0));
            keys.extend(ports.keys());
        }
        self.wants.insert(vip, want);
    }

    /// Waits for every cluster IP to be as asked, from now.
    pub fn expect_all(&mut self, kind: Kind, now: u64) -> u64 {
        self.push(kind, None, Scope::All, now)
    }

    fn push(&mut self, kind: Kind, svc: Option<String>, scope: Scope, now: u64) -> u64 {
        let id = self.records.len() as u64;
        let catching_up = self.catching_up > 0
            || self
                .pending
                .iter()
                .any(|&i| matches!(self.records[i].scope, Scope::All));
        self.records.push(Record {
            id,
            kind,
            svc,
            scope,
            made_ns: now,
            clock_ns: self.blocks.is_empty().then_some(now),
            interrupted: false,
            catching_up,
            resolved_ns: None,
        });
        self.pending.push(id as usize);
        id
    }

    /// The agent stops (`on`) or starts again being able to see changes.
    /// Stopping halts the clock of every pending change; starting again
    /// starts it for every change made or halted meanwhile.
    pub fn block(&mut self, why: Block, on: bool, now: u64) {
        if on {
            self.blocks.insert(why);
            for &i in &self.pending {
                let r = &mut self.records[i];
                if r.clock_ns.take().is_some() {
                    r.interrupted = true;
                }
            }
        } else {
            self.blocks.remove(&why);
            if self.blocks.is_empty() {
                for &i in &self.pending {
                    self.records[i].clock_ns.get_or_insert(now);
                }
            }
        }
    }

    /// The agent starts (`on`) or ends catching up after a disturbance:
    /// changes made meanwhile are told apart in the report.
    pub fn catch_up(&mut self, on: bool) {
        if on {
            self.catching_up += 1;
        } else {
            self.catching_up = self.catching_up.saturating_sub(1);
        }
    }

    pub fn blocked(&self) -> bool {
        !self.blocks.is_empty()
    }

    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The frontends a read must cover to settle every pending change, or
    /// `None` if one waits for every cluster IP (then a read covers all).
    pub fn pending_keys(&self) -> Option<Vec<FrontendKey>> {
        let mut vips = BTreeSet::new();
        for &i in &self.pending {
            match self.records[i].scope {
                Scope::All => return None,
                Scope::One(vip) => vips.insert(vip),
            };
        }
        let keys = vips.into_iter().flat_map(|vip| {
            let ports = self.keys.get(&vip).into_iter().flatten();
            ports.map(move |(port, proto)| (vip, *port, *proto))
        });
        Some(keys.collect())
    }

    /// Resolves what a read of the maps shows: a read that started at
    /// `started`, ended at `now`, and covered the frontends of the cluster
    /// IPs `covered` (`None`: every frontend). Only a change whose clock
    /// ran before the read started can be settled by it (an older read
    /// proves nothing about it). A read of every frontend with nothing
    /// pending notes drift.
    pub fn observe(
        &mut self,
        view: &View,
        covered: Option<&BTreeSet<Ipv4Addr>>,
        started: u64,
        now: u64,
    ) {
        let covers = |vip: &Ipv4Addr| covered.is_none_or(|c| c.contains(vip));
        let differs: BTreeSet<Ipv4Addr> = self
            .wants
            .iter()
            .filter(|(vip, want)| covers(vip) && !holds(view, **vip, want))
            .map(|(vip, _)| *vip)
            .collect();
        if self.pending.is_empty() {
            if covered.is_none() && !differs.is_empty() {
                self.drift
                    .push((now, differs.into_iter().take(5).collect()));
            }
            return;
        }
        let records = &mut self.records;
        self.pending.retain(|&i| {
            let r = &mut records[i];
            let met = match r.scope {
                Scope::One(vip) => covers(&vip) && !differs.contains(&vip),
                Scope::All => covered.is_none() && differs.is_empty(),
            };
            // A change the agent cannot see yet is not met by a read that
            // happens to show it (a later change undone, say).
            if met && r.clock_ns.is_some_and(|c| c <= started) {
                r.resolved_ns = Some(now);
            }
            r.resolved_ns.is_none()
        });
    }

    pub fn resolved(&self, id: u64) -> Option<u64> {
        self.records[id as usize].resolved_ns
    }

    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// What every cluster IP must look like now.
    pub fn wants(&self) -> &BTreeMap<Ipv4Addr, Want> {
        &self.wants
    }

    /// Entries the live Services need: frontends (with each cluster IP's
    /// wildcard), slots, and distinct backends (address, port, protocol).
    pub fn needed(&self) -> (usize, usize, usize) {
        let (mut frontends, mut slots) = (0, 0);
        let mut backends: BTreeSet<(SocketAddrV4, u8)> = BTreeSet::new();
        for want in self.wants.values() {
            if let Want::Serving(ports) = want {
                frontends += ports.len() + 1;
                for ((_, proto), set) in ports {
                    slots += set.len();
                    backends.extend(set.iter().map(|b| (*b, *proto)));
                }
            }
        }
        (frontends, slots, backends.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VIP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 1);

    fn b(last: u8) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::new(10, 42, 0, last), 8080)
    }

    fn want(backends: &[u8]) -> Want {
        Want::Serving(Frontends::from([(
            (80, 6),
            backends.iter().map(|l| b(*l)).collect(),
        )]))
    }

    fn view(backends: &[u8]) -> View {
        View::from([
            ((VIP, 0, 0), Frontend::Serving(vec![])),
            (
                (VIP, 80, 6),
                Frontend::Serving(backends.iter().map(|l| b(*l)).collect()),
            ),
        ])
    }

    #[test]
    fn a_want_holds_only_for_exactly_its_frontends() {
        assert!(holds(&view(&[1, 2]), VIP, &want(&[2, 1])));
        assert!(!holds(&view(&[1]), VIP, &want(&[1, 2])));
        assert!(!holds(&view(&[1, 1]), VIP, &want(&[1])), "a duplicate slot");
        let mut extra = view(&[1]);
        extra.insert((VIP, 81, 6), Frontend::Serving(vec![b(1)]));
        assert!(!holds(&extra, VIP, &want(&[1])));
        let mut no_wildcard = view(&[1]);
        no_wildcard.remove(&(VIP, 0, 0));
        assert!(!holds(&no_wildcard, VIP, &want(&[1])));
        let mut broken = view(&[1]);
        broken.insert((VIP, 80, 6), Frontend::Broken);
        assert!(!holds(&broken, VIP, &want(&[1])));
        assert!(holds(&View::new(), VIP, &Want::Absent));
        let removing = View::from([((VIP, 80, 6), Frontend::Removing)]);
        assert!(!holds(&removing, VIP, &Want::Absent));
    }

    #[test]
    fn a_change_resolves_when_the_maps_show_it_or_a_later_one() {
        let mut t = Tracker::default();
        let first = t.expect(Kind::EndpointReady, "s", VIP, want(&[1, 2]), 100);
        t.observe(&view(&[1]), None, 150, 150);
        assert_eq!(t.resolved(first), None);
        let second = t.expect(Kind::EndpointTerminating, "s", VIP, want(&[2]), 200);
        // The maps skipped the first state: both are met by the second.
        t.observe(&view(&[2]), None, 260, 260);
        assert_eq!(t.resolved(first), Some(260));
        assert_eq!(t.records()[second as usize].took_ns(), Some(60));
        assert_eq!(t.pending(), 0);
        assert!(t.drift.is_empty());
    }

    #[test]
    fn a_blocked_change_is_timed_from_when_the_agent_can_see_it() {
        let mut t = Tracker::default();
        let before = t.expect(Kind::EndpointReady, "s", VIP, want(&[1, 2]), 100);
        t.block(Block::ApiserverDown, true, 110);
        let during = t.expect(Kind::EndpointTerminating, "s", VIP, want(&[2]), 120);
        t.block(Block::AgentDown, true, 130);
        t.observe(&view(&[2]), None, 140, 140);
        assert_eq!(t.resolved(during), None, "cannot have been programmed");
        t.block(Block::ApiserverDown, false, 500);
        assert_eq!(t.records()[during as usize].clock_ns, None, "agent down");
        t.block(Block::AgentDown, false, 600);
        let back = t.expect_all(Kind::OutageEnd, 600);
        t.observe(&view(&[2]), None, 700, 700);
        for id in [before, during, back] {
            assert_eq!(t.records()[id as usize].took_ns(), Some(100));
        }
        assert!(t.records()[before as usize].interrupted);
        assert!(!t.records()[during as usize].interrupted);
    }

    #[test]
    fn a_read_of_the_pending_frontends_settles_one_service_not_all() {
        let mut t = Tracker::default();
        let other = Ipv4Addr::new(10, 96, 0, 2);
        t.assume(other, want(&[9]));
        let one = t.expect(Kind::EndpointReady, "s", VIP, want(&[1]), 0);
        assert_eq!(
            t.pending_keys(),
            Some(vec![(VIP, 0, 0), (VIP, 80, 6)]),
            "the Service's frontends, wildcard included"
        );
        // A read of just those frontends: `other` is not in it.
        let just = BTreeSet::from([VIP]);
        t.observe(&view(&[1]), Some(&just), 10, 10);
        assert_eq!(t.resolved(one), Some(10));
        let all = t.expect_all(Kind::Relist, 20);
        assert_eq!(t.pending_keys(), None, "a full read is needed");
        t.observe(&view(&[1]), Some(&just), 30, 30);
        assert_eq!(t.resolved(all), None);
        let gone = t.expect(Kind::ServiceDeleted, "s", VIP, Want::Absent, 40);
        // A read of other frontends shows nothing on VIP: that settles
        // nothing about it.
        t.observe(&View::new(), Some(&BTreeSet::from([other])), 50, 50);
        assert_eq!(t.resolved(gone), None);
        t.observe(&View::new(), None, 60, 60);
        assert_eq!(t.resolved(gone), Some(60));
        assert_eq!(t.resolved(all), None, "other is not programmed");
        assert!(t.drift.is_empty(), "a change is pending");
    }

    #[test]
    fn a_read_that_started_before_a_change_settles_nothing_about_it() {
        let mut t = Tracker::default();
        t.assume(VIP, want(&[1]));
        // The read started at 10; the Service was deleted at 20; the read,
        // which ended at 30, happens to see no frontend (it covered others).
        let gone = t.expect(Kind::ServiceDeleted, "s", VIP, Want::Absent, 20);
        t.observe(&View::new(), None, 10, 30);
        assert_eq!(t.resolved(gone), None);
        t.observe(&View::new(), None, 40, 50);
        assert_eq!(t.resolved(gone), Some(50));
    }

    #[test]
    fn maps_that_differ_with_nothing_pending_are_drift() {
        let mut t = Tracker::default();
        t.expect(Kind::ServiceCreated, "s", VIP, want(&[1]), 0);
        t.observe(&view(&[1]), None, 10, 10);
        t.observe(&view(&[1]), None, 20, 20);
        assert!(t.drift.is_empty());
        t.observe(&view(&[3]), None, 30, 30);
        assert_eq!(t.drift, vec![(30, vec![VIP])]);
        assert_eq!(t.needed(), (2, 1, 1));
        t.expect(Kind::ServiceDeleted, "s", VIP, Want::Absent, 40);
        assert_eq!(t.needed(), (0, 0, 0));
    }
}
