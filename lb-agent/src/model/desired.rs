//! The whole desired state from a full set of objects, for the golden test
//! and for callers that have no incremental state: the incremental
//! [`Cache`] fed everything at once. The rules are in `claims.rs`.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};

use super::{
    Backend, ExcludedCidrs, Feature, Frontend, Invalid, NodeContext, ObjectRef, Target,
    cache::{Admission, Cache},
};

/// The desired frontend table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Desired {
    /// Frontend -> its backends (sorted; none means "refuse") and how it
    /// picks among them.
    pub frontends: BTreeMap<Frontend, Target>,
    /// Which Service owns each frontend, for logs.
    pub owners: BTreeMap<Frontend, ObjectRef>,
}

/// What the model noticed besides the desired table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelReport {
    /// Malformed objects that were skipped.
    pub invalid: Vec<Invalid>,
    /// Endpoints dropped because they sit in an excluded CIDR: (Service, endpoint).
    pub excluded: BTreeSet<(ObjectRef, Backend)>,
    /// Frontends left unprogrammed because every endpoint is excluded.
    pub passthrough: BTreeMap<Frontend, ObjectRef>,
    /// Objects deliberately not programmed (headless, ExternalName, FQDN, ...), and why.
    pub ignored: Vec<(ObjectRef, &'static str)>,
    /// Frontends claimed by more than one Service; the first by name wins.
    pub conflicts: Vec<(Frontend, ObjectRef)>,
    /// Features Services use that are not programmed yet.
    pub unsupported: BTreeSet<(ObjectRef, Feature)>,
}

/// Computes the desired frontends from a full set of objects: the
/// incremental [`Cache`] fed everything at once.
pub fn compute(
    services: &[Service],
    slices: &[EndpointSlice],
    excluded: &ExcludedCidrs,
    node: &NodeContext,
) -> (Desired, ModelReport) {
    let mut report = ModelReport::default();
    let mut cache = Cache::new(excluded.clone(), node.clone());
    let mut admissions = cache.replace_slices(slices);
    admissions.extend(cache.replace_services(services));
    for (object, admission) in admissions {
        match admission {
            Admission::Accepted => {}
            Admission::Ignored(why) => report.ignored.push((object, why)),
            Admission::Invalid(inv) => report.invalid.push(inv),
        }
    }
    let flush = cache.flush();
    for (svc, r) in flush.services {
        report
            .excluded
            .extend(r.excluded.into_iter().map(|be| (svc.clone(), be)));
        report
            .passthrough
            .extend(r.passthrough.into_iter().map(|fe| (fe, svc.clone())));
        report
            .unsupported
            .extend(r.unsupported.into_iter().map(|f| (svc.clone(), f)));
    }
    report.conflicts = cache.conflicts().map(|(fe, o)| (*fe, o.clone())).collect();

    let mut desired = Desired::default();
    for (fe, target, owner) in cache.programmed() {
        desired.frontends.insert(*fe, target.clone());
        desired.owners.insert(*fe, owner.clone());
    }
    (desired, report)
}
