//! Every section's targets of one run of the main bench, gathered: the
//! one module here that knows the sections; each of them knows only its
//! own results.

use super::{
    super::{plan::Plan, results::Results},
    Target, connect, control, datapath, nodeport, pps,
};

/// Every target of a run of the main bench, in report order.
pub(in super::super) fn of(plan: &Plan, results: &Results) -> Vec<Target> {
    let mut t = datapath::targets(plan, &results.datapath);
    t.extend(connect::targets(&results.connect));
    t.extend(control::targets(&results.control));
    if let Some(np) = &results.nodeport {
        t.extend(nodeport::targets(plan, np));
        t.extend(pps::targets(plan, &np.pps));
    }
    t
}
