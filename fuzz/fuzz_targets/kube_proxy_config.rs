//! `--config`: any text as a KubeProxyConfiguration file (YAML or JSON),
//! then merged with empty flags as `run` does. Never panics, and:
//! * a parsed file names every ignored field as `path=value`;
//! * what the file sets and the agent uses, it keeps: the merged node name
//!   is the file's `hostnameOverride` (trimmed, lower case) when it has one.

#![no_main]

use std::path::Path;

use lb_agent::{
    cli::RunArgs,
    config::{FileConfig, RunConfig},
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // `FileConfig::read` reads the file with `read_to_string`.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(file) = FileConfig::parse(text, Path::new("config.conf")) else {
        return;
    };
    for field in &file.ignored {
        assert!(field.contains('='), "not path=value: {field:?}");
    }
    let from_file = file
        .hostname_override
        .as_deref()
        .map(|n| n.trim().to_lowercase())
        .filter(|n| !n.is_empty());
    let merged = RunConfig::merge(RunArgs::default(), file, None, Some("host".to_owned()));
    if let (Ok(config), Some(name)) = (merged, from_file) {
        assert_eq!(config.node_name, name);
    }
});
