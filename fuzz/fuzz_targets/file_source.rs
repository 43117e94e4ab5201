//! `--from-file`: any text, as a manifest file (YAML or JSON, several
//! documents, `kind: List`). Never panics, and:
//! * the fast path (a block-style Service or slice straight to its type)
//!   reads exactly what the general path (through a YAML value) reads, when
//!   every document is YAML the value parser accepts (the typed parser is
//!   more lenient: it ignores a tag on a key, say);
//! * every skipped document is reported under its own number;
//! * whatever is read goes through the model without panicking.

#![no_main]

use lb_agent::{
    model::{Cache, ExcludedCidrs, NodeContext},
    source::file::{Objects, parse_into, parse_into_general, split_documents},
};
use libfuzzer_sys::fuzz_target;
use yaml_serde::Value;

const ORIGIN: &str = "f.yaml";

fuzz_target!(|data: &[u8]| {
    // The agent reads files with `read_to_string`: text that is not UTF-8
    // is an I/O error before any parsing.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut fast = Objects::default();
    parse_into(ORIGIN, text, &mut fast);

    // The documents, as the agent splits them.
    let docs = split_documents(text);
    let mut general = Objects::default();
    parse_into_general(ORIGIN, text, &mut general);
    let same = fast.services == general.services
        && fast.slices == general.slices
        && fast.nodes == general.nodes
        && fast.skipped == general.skipped;
    if !same
        && docs
            .iter()
            .all(|d| yaml_serde::from_str::<Value>(d).is_ok())
    {
        assert_eq!(fast.services, general.services, "fast path: Services");
        assert_eq!(fast.slices, general.slices, "fast path: EndpointSlices");
        assert_eq!(fast.nodes, general.nodes, "fast path: Nodes");
        assert_eq!(fast.skipped, general.skipped, "fast path: skipped");
    }

    let documents = docs.len();
    for s in &fast.skipped {
        let number = s
            .location
            .strip_prefix(ORIGIN)
            .and_then(|l| l.strip_prefix('#'))
            .map(|l| l.split(|c: char| !c.is_ascii_digit()).next().unwrap_or(""))
            .and_then(|n| n.parse::<usize>().ok());
        assert!(
            number.is_some_and(|n| n < documents),
            "skipped document not named by its number: {s:?}"
        );
        assert!(!s.reason.is_empty(), "no reason: {s:?}");
    }

    let excluded = ExcludedCidrs::parse(["10.244.0.0/16"]).expect("a valid CIDR");
    let mut cache = Cache::new(excluded, NodeContext::named("node-a"));
    for svc in &fast.services {
        cache.apply_service(svc);
    }
    for slice in &fast.slices {
        cache.apply_slice(slice);
    }
    cache.flush();
});
