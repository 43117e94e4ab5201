//! The txtar format now lives in `lb_fixtures::txtar`, shared by both
//! golden runners (this real-agent one and `lb-agent`'s in-process one).

pub use lb_fixtures::txtar::*;
