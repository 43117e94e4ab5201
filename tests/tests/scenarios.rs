//! Golden step-by-step scenarios (`tests/scenarios/*.txtar`) through the
//! real agent: each step changes objects, and the agent's `lb-agent dump`
//! must then equal the expected text. The format and the script are in
//! `lb_fixtures::golden`, this runner in `lb_tests::golden`; `lb-agent`'s
//! `scenarios` test runs the same files in-process, as any user.
//! `UPDATE_GOLDEN=1` rewrites the expected dumps. Needs root (BPF,
//! cgroups); fails loudly without it.

lb_fixtures::golden_scenarios!(lb_tests::golden::run);
