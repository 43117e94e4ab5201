//! The README and docs/ tell operators only what is true: every `lb-agent`
//! subcommand and flag, `cargo xtask` command, metric, pin, link and
//! repository path they name exists, every Markdown link and anchor
//! resolves, and the first screen's requirements match
//! `manifests/daemonset.yaml`. The last test starts a real agent against
//! the stand-in apiserver (privileged; fails loudly without root).

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use lb_common::maps::{ALL_MAPS, FRONTENDS4};
use lb_tests::{
    agent::{Agent, PATIENCE, agent_bin},
    apiserver::ApiServer,
    netns::{Namespaces, veth},
    rig::Rig,
    unique,
};

/// The agent's default `--bpffs-dir`, as the README writes pin paths.
const PINS: &str = "/sys/fs/bpf/lb-agent";

/// Flags the documents name as other programs' (Cilium's, kube-proxy's,
/// kubeadm's), never as the agent's.
const FOREIGN_FLAGS: [&str; 4] = [
    "--bpf-ct-global-tcp-max",
    "--enable-service-topology",
    "--exclude-cluster-cidr=10.244.0.0/16,",
    "--control-plane-endpoint",
];
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("repository root")
}

fn read(rel: &str) -> String {
    fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// README.md and every Markdown file under docs/, by path from the root.
fn documents() -> Vec<(String, String)> {
    let mut names: Vec<String> = fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| {
            e.expect("docs/ entry")
                .file_name()
                .into_string()
                .expect("utf-8")
        })
        .filter(|n| n.ends_with(".md"))
        .collect();
    names.sort();
    let mut docs = vec![("README.md".to_owned(), read("README.md"))];
    docs.extend(names.into_iter().map(|n| {
        let rel = format!("docs/{n}");
        let text = read(&rel);
        (rel, text)
    }));
    docs
}

/// Every line of a fenced block, and every inline code span outside them
/// (a paragraph's lines joined, so that a span may wrap).
fn code(text: &str) -> Vec<String> {
    fn spans(para: &mut String, out: &mut Vec<String>) {
        out.extend(para.split('`').skip(1).step_by(2).map(str::to_owned));
        para.clear();
    }
    let (mut out, mut para, mut fenced) = (Vec::new(), String::new(), false);
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            spans(&mut para, &mut out);
        } else if fenced {
            out.push(line.to_owned());
        } else if line.trim().is_empty() {
            spans(&mut para, &mut out);
        } else {
            para.push_str(line);
            para.push(' ');
        }
    }
    spans(&mut para, &mut out);
    out
}

/// All documents' code.
fn all_code() -> Vec<String> {
    documents().iter().flat_map(|(_, t)| code(t)).collect()
}

/// Where `word` starts in `s` as a word of its own: after the start, a
/// space or a bracket, and before the end or a space.
fn word_starts(s: &str, word: &str) -> Vec<usize> {
    s.match_indices(word)
        .map(|(i, _)| i)
        .filter(|&i| {
            let before = s[..i].chars().next_back();
            let after = s[i + word.len()..].chars().next();
            before.is_none_or(|c| c.is_whitespace() || "([".contains(c))
                && after.is_none_or(char::is_whitespace)
        })
        .collect()
}

/// The arguments of every command `program` in the code, up to a comment,
/// a pipe or the next command.
fn commands(code: &[String], program: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for line in code {
        for at in word_starts(line, program) {
            // `cargo bench -p lb-agent`: a package, not the program.
            let before = line[..at].split_whitespace().next_back();
            if before.is_some_and(|t| ["-p", "--package", "--bin"].contains(&t)) {
                continue;
            }
            let args: Vec<String> = line[at + program.len()..]
                .split_whitespace()
                .take_while(|t| !t.starts_with('#') && !["|", "&&", ";", "\\|"].contains(t))
                .map(str::to_owned)
                .collect();
            if !args.is_empty() {
                out.push(args);
            }
        }
    }
    out
}

/// The flag an argument names (`--flag`, `--flag=value`, `[--flag`), if any.
fn flag(arg: &str) -> Option<String> {
    let arg = arg.split(|c: char| c.is_whitespace() || c == '`').next()?;
    let name = arg
        .trim_matches(|c| "[](),".contains(c))
        .split('=')
        .next()?;
    (name.starts_with("--") && name.len() > 2).then(|| name.to_owned())
}

/// `lb-agent <sub> --help` (or `lb-agent --help`).
fn agent_help(sub: &str) -> String {
    let mut cmd = Command::new(agent_bin());
    if !sub.is_empty() {
        cmd.arg(sub);
    }
    let out = cmd.arg("--help").output().expect("running lb-agent --help");
    assert!(out.status.success(), "lb-agent {sub} --help: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8 help")
}

/// Whether `help` lists `flag` (not merely a longer flag it begins).
fn lists(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(i, _)| {
        let after = help[i + flag.len()..].chars().next();
        after.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-'))
    })
}

#[test]
fn first_screen_is_what_an_operator_needs_and_matches_the_daemonset() {
    let readme = read("README.md");
    let lines: Vec<&str> = readme.lines().collect();
    let contents = lines.iter().position(|l| *l == "## Contents");
    assert!(
        contents.is_some_and(|n| n <= 45),
        "the table of contents must follow a first screen of at most 45 lines: {contents:?}"
    );
    let first = lines[..contents.expect("checked")].join("\n");
    for what in [
        "Requirements",
        "kind",
        "Check",
        "Upgrade",
        "Remove",
        "docs/operating.md",
    ] {
        assert!(first.contains(what), "the first screen lacks {what:?}");
    }
    assert!(
        readme.contains("cargo xtask test"),
        "CI runs the README's test command"
    );

    let ds: serde_json::Value =
        yaml_serde::from_str(&read("manifests/daemonset.yaml")).expect("daemonset.yaml");
    let pod = &ds["spec"]["template"]["spec"];
    let agent = &pod["containers"][0];
    let caps: BTreeSet<String> = agent["securityContext"]["capabilities"]["add"]
        .as_array()
        .expect("capabilities.add")
        .iter()
        .map(|c| c.as_str().expect("a capability").to_owned())
        .collect();
    assert!(
        caps.contains("BPF") && caps.contains("NET_ADMIN"),
        "{caps:?}"
    );
    // The "What the DaemonSet needs" table: one row per capability and
    // host namespace, no more.
    let table: BTreeSet<String> = readme
        .lines()
        .skip_while(|l| *l != "### What the DaemonSet needs")
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('`').nth(1))
        .filter(|c| c.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        table, caps,
        "the capability rows of \"What the DaemonSet needs\""
    );
    for cap in &caps {
        assert!(
            first.contains(&format!("`{cap}`")),
            "first screen lacks {cap}"
        );
    }
    for host in ["hostNetwork", "hostPID"] {
        assert_eq!(pod[host], true, "daemonset.yaml sets {host}");
        assert!(
            first.contains(&format!("`{host}`")),
            "first screen lacks {host}"
        );
        assert!(
            readme.contains(&format!("| `{host}` |")),
            "no row for {host}"
        );
    }
    assert_eq!(
        agent["securityContext"]["appArmorProfile"]["type"], "Unconfined",
        "the README explains appArmorProfile: Unconfined and its 1.21-1.29 annotation"
    );
    let args = agent["args"].as_array().expect("args");
    assert!(
        args.iter()
            .any(|a| a.as_str() == Some(&*format!("--bpffs-dir={PINS}"))),
        "the DaemonSet pins where the README's paths say: {args:?}"
    );
}

#[test]
fn every_cargo_xtask_command_exists() {
    let main = read("xtask/src/main.rs");
    let body = main
        .split_once("enum Cmd {")
        .and_then(|(_, rest)| rest.split_once("\n}"))
        .expect("enum Cmd in xtask/src/main.rs")
        .0;
    let known: BTreeSet<String> = body
        .lines()
        .filter(|l| {
            l.starts_with("    ") && l.chars().nth(4).is_some_and(|c| c.is_ascii_uppercase())
        })
        .map(|l| {
            let ident: String = l
                .trim()
                .chars()
                .take_while(char::is_ascii_alphanumeric)
                .collect();
            kebab(&ident)
        })
        .collect();
    assert!(known.contains("test") && known.contains("run"), "{known:?}");
    let sources = rust_sources(&root().join("xtask/src"));
    let (mut named, mut flags) = (BTreeSet::new(), BTreeSet::new());
    for args in commands(&all_code(), "cargo xtask") {
        let cmd = args[0].clone();
        assert!(
            known.contains(&cmd),
            "`cargo xtask {cmd}` is no subcommand of {known:?}"
        );
        for f in args[1..].iter().filter_map(|a| flag(a)) {
            let field = f[2..].replace('-', "_");
            assert!(
                sources.contains(&format!("{field}:"))
                    || sources.contains(&format!("\"{}\"", &f[2..])),
                "`cargo xtask {cmd} {f}`: no such argument in xtask/src"
            );
            flags.insert(f);
        }
        named.insert(cmd);
    }
    for must in ["test", "run", "image", "release", "fuzz", "bench", "soak"] {
        assert!(
            named.contains(must),
            "the documents never name `cargo xtask {must}`"
        );
    }
    assert!(
        flags.contains("--remove-kube-proxy") && flags.contains("--long"),
        "{flags:?}"
    );
}

fn kebab(ident: &str) -> String {
    let mut out = String::new();
    for (i, c) in ident.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// Every `.rs` file under `dir`, concatenated.
fn rust_sources(dir: &Path) -> String {
    let mut out = String::new();
    for entry in fs::read_dir(dir).expect("source dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            out.push_str(&rust_sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push_str(&fs::read_to_string(&path).expect("source"));
        }
    }
    out
}

#[test]
fn every_lb_agent_subcommand_and_flag_exists() {
    let code = all_code();
    let mut checked = BTreeSet::new();
    for args in commands(&code, "lb-agent") {
        let sub = match args[0].starts_with("--") {
            true => "",
            false if args[0].chars().all(|c| c.is_ascii_lowercase() || c == '-') => &args[0],
            false => panic!("`lb-agent {}`: no subcommand", args.join(" ")),
        };
        let help = agent_help(sub);
        for f in args.iter().filter_map(|a| flag(a)) {
            assert!(
                lists(&help, &f),
                "`lb-agent {sub} {f}`: not in its --help:\n{help}"
            );
            checked.insert(format!("{sub} {f}"));
        }
        checked.insert(sub.to_owned());
    }
    for must in [
        "run",
        "dump",
        "cleanup",
        "dump --stats",
        "run --from-file",
        "mount-bpffs",
        " --version",
    ] {
        assert!(
            checked.contains(must),
            "never checked {must:?}: {checked:?}"
        );
    }

    // The flag table of `run`, and flags named on their own in the text.
    let run = agent_help("run");
    assert!(
        run.contains(PINS),
        "`--bpffs-dir` defaults to {PINS}:\n{run}"
    );
    let readme = read("README.md");
    let table: Vec<String> = readme
        .lines()
        .skip_while(|l| !l.starts_with("| flag (`run`)"))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(flag)
        .collect();
    assert!(
        table.len() > 30 && table.contains(&"--devices".to_owned()),
        "{table:?}"
    );
    for f in &table {
        assert!(
            lists(&run, f),
            "the `run` flag table's {f} is no flag of `lb-agent run`"
        );
    }
    let documented: BTreeSet<&String> = table.iter().collect();
    for f in help_flags(&run) {
        assert!(
            f == "--help" || documented.contains(&f),
            "`lb-agent run {f}` is missing from the README's flag table"
        );
    }

    // A flag named on its own is the agent's (any subcommand's), `cargo
    // xtask`'s or `lbt`'s, or another program's in FOREIGN_FLAGS.
    let subcommands: Vec<String> = agent_help("")
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect();
    assert!(subcommands.len() >= 3, "{subcommands:?}");
    let agent: BTreeSet<String> = subcommands
        .iter()
        .flat_map(|c| help_flags(&agent_help(c)))
        .collect();
    let tools =
        rust_sources(&root().join("xtask/src")) + &rust_sources(&root().join("tests/src/bin"));
    let alone: BTreeSet<String> = code
        .iter()
        .filter(|s| s.starts_with("--"))
        .filter_map(|s| s.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    assert!(
        alone.contains("--bpf-lb-mode=dsr") && alone.contains("--long"),
        "{alone:?}"
    );
    for span in alone
        .iter()
        .filter(|s| !FOREIGN_FLAGS.contains(&s.as_str()))
    {
        let f = flag(span).expect("a flag");
        let known = match f.split_once('*') {
            // `--bpf-lb-*-map-max`: a pattern some flag of the agent's matches.
            Some((head, tail)) => agent
                .iter()
                .any(|a| a.starts_with(head) && a.ends_with(tail)),
            None => agent.contains(&f) || tools.contains(&format!("{}:", f[2..].replace('-', "_"))),
        };
        assert!(
            known,
            "`{span}` is no flag of lb-agent, cargo xtask or lbt (nor in FOREIGN_FLAGS)"
        );
    }
}

/// The flags a `--help` text lists.
fn help_flags(help: &str) -> BTreeSet<String> {
    help.split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '[' || c == ']')
        .map(|t| t.trim_end_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '-')))
        .filter(|t| t.starts_with("--") && t.len() > 2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_repository_path_and_link_exists() {
    let (mut seen, mut wrong) = (BTreeSet::new(), Vec::new());
    for (rel, text) in &documents() {
        for path in repo_paths(text) {
            if !root().join(&path).exists() {
                wrong.push(format!("{rel} names {path}, which does not exist"));
            }
            seen.insert(path);
        }
        for (target, anchor) in links(text) {
            let file = match target.is_empty() {
                true => PathBuf::from(rel),
                false => Path::new(rel).parent().expect("dir").join(&target),
            };
            let path = root().join(&file);
            if !path.exists() {
                wrong.push(format!("{rel} links {target}, which does not exist"));
                continue;
            }
            let Some(anchor) = anchor.filter(|_| file.extension().is_some_and(|e| e == "md"))
            else {
                continue;
            };
            if !headings(&fs::read_to_string(&path).expect("linked file")).contains(&anchor) {
                wrong.push(format!("{rel} links {target}#{anchor}: no such heading"));
            }
        }
        for args in commands(&code(text), "kubectl") {
            let Some(dir) = args
                .iter()
                .position(|t| t == "-k")
                .and_then(|i| args.get(i + 1))
            else {
                continue;
            };
            let dir = dir.trim_end_matches([',', '.', ';']);
            if !root().join(dir).join("kustomization.yaml").exists() {
                wrong.push(format!(
                    "{rel}: `kubectl … -k {dir}` has no kustomization.yaml"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    for must in [
        "manifests/daemonset.yaml",
        "manifests/apiserver.yaml",
        "manifests/image/kustomization.yaml",
        "monitoring/alerts.yaml",
        "docs/operating.md",
    ] {
        assert!(
            seen.contains(must),
            "the documents never name {must}: {seen:?}"
        );
    }
}

/// Paths from the repository's root that `text` names.
fn repo_paths(text: &str) -> BTreeSet<String> {
    const ROOTS: [&str; 10] = [
        "manifests/",
        "monitoring/",
        "docs/",
        "tests/",
        "lb-agent/",
        "lb-common/",
        "lb-ebpf/",
        "lb-fixtures/",
        "xtask/",
        "fuzz/",
    ];
    const FILES: [&str; 5] = [
        "ARCHITECTURE.md",
        "CHANGELOG.md",
        "LICENSE",
        "Dockerfile",
        "Cargo.toml",
    ];
    let part = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
    let mut out = BTreeSet::new();
    for start in ROOTS.iter().chain(&FILES) {
        for (i, _) in text.match_indices(start) {
            if text[..i].chars().next_back().is_some_and(part) {
                continue;
            }
            let path: String = text[i..].chars().take_while(|&c| part(c)).collect();
            let path = path.trim_end_matches(['.', ',']);
            if FILES.contains(start) && path != *start {
                continue;
            }
            out.insert(path.to_owned());
        }
    }
    out
}

/// Every relative Markdown link: (target path, anchor).
fn links(text: &str) -> Vec<(String, Option<String>)> {
    text.match_indices("](")
        .filter_map(|(i, _)| text[i + 2..].split_once(')').map(|(t, _)| t))
        .filter(|t| !t.contains("://") && !t.starts_with("mailto:"))
        .map(|t| match t.split_once('#') {
            Some((path, anchor)) => (path.to_owned(), Some(anchor.to_owned())),
            None => (t.to_owned(), None),
        })
        .collect()
}

/// The anchors GitHub gives a Markdown file's headings (fenced code excluded).
fn headings(text: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            let title = line.trim_start_matches('#').trim().to_lowercase();
            let slug: String = title
                .chars()
                .filter(|c| c.is_alphanumeric() || " -_".contains(*c))
                .map(|c| if c == ' ' { '-' } else { c })
                .collect();
            out.insert(slug);
        }
    }
    out
}

/// The metric families (`# TYPE name`, a counter's without `_total`) and
/// sample names an agent exports.
fn metrics(agent: &mut Agent) -> anyhow::Result<BTreeSet<String>> {
    let (status, body) = agent.http_get("metrics", "/metrics")?;
    anyhow::ensure!(status == 200, "/metrics: {status}");
    Ok(body
        .lines()
        .filter_map(|l| match l.strip_prefix("# TYPE ") {
            Some(family) => family.split_whitespace().next(),
            None if l.starts_with('#') => None,
            None => l.split(['{', ' ']).next(),
        })
        .map(str::to_owned)
        .collect())
}

/// Metric names in the documents: `lbagent_…`, `kubeproxy_…`, `rest_client_…`.
fn metric_names() -> BTreeSet<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = BTreeSet::new();
    for (_, text) in documents() {
        for prefix in ["lbagent_", "kubeproxy_", "rest_client_"] {
            for (i, _) in text.match_indices(prefix) {
                if text[..i].chars().next_back().is_some_and(ident) {
                    continue;
                }
                let name: String = text[i..].chars().take_while(|&c| ident(c)).collect();
                if !name.ends_with('_') {
                    out.insert(name);
                }
            }
        }
    }
    out
}

#[test]
fn metrics_pins_and_links_named_are_a_real_agents() -> anyhow::Result<()> {
    let api = ApiServer::start()?;
    let mut rig = Rig::new(&unique("readme"))?;
    rig.start_agent_kube(&api, &[])?;
    let mut exported = metrics(rig.agent())?;
    // A second agent, on a node namespace whose veth gets the XDP fast
    // path, for the series only XDP makes. It sends nothing.
    let mut netns = Namespaces::new(&unique("readme"));
    let (node, peer) = (netns.add("node")?, netns.add("peer")?);
    veth((&node, "eth0", None), (&peer, "eth0", None))?;
    let mut xdp = Rig::in_netns(&unique("readme-xdp"), &node)?;
    xdp.write_manifest("---\n")?;
    xdp.start_agent(&["--devices=eth0", "--bpf-lb-acceleration=best-effort"])?;
    // The devices are attached after the first sync.
    let deadline = Instant::now() + PATIENCE;
    let mut seen = metrics(xdp.agent())?;
    while !seen.contains("lbagent_xdp_attached") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        seen = metrics(xdp.agent())?;
    }
    exported.extend(seen);
    drop(xdp);
    let named = metric_names();
    for must in [
        "lbagent_datapath_events_total",
        "kubeproxy_sync_proxy_rules_duration_seconds",
        "lbagent_node_missing",
    ] {
        assert!(named.contains(must), "the documents never name {must}");
    }
    let missing: Vec<&String> = named.difference(&exported).collect();
    assert!(missing.is_empty(), "named but not on /metrics: {missing:?}");

    // Pins: every path under the default pin directory is one this agent made.
    let pins = rig.pins_path().to_owned();
    let code = all_code();
    let mut paths = BTreeSet::new();
    for line in &code {
        for (i, _) in line.match_indices(PINS) {
            let rest: String = line[i + PINS.len()..]
                .chars()
                .take_while(|c| !c.is_whitespace() && !"`'\",)".contains(*c))
                .collect();
            if !rest.contains('<') {
                let rel = rest.trim_start_matches('/').to_owned();
                assert!(
                    pins.join(&rel).exists(),
                    "{PINS}/{rel}: no such pin of a real agent"
                );
                paths.insert(rel);
            }
        }
    }
    let dumped: BTreeSet<String> = commands(&code, "bpftool")
        .iter()
        .filter(|a| a.get(2).is_some_and(|t| t == "pinned"))
        .filter_map(|a| {
            a.get(3)?
                .strip_prefix(&format!("{PINS}/"))
                .map(str::to_owned)
        })
        .collect();
    assert!(
        dumped.contains(&format!("maps/{}", FRONTENDS4.pin)),
        "{dumped:?}"
    );
    assert!(
        paths.contains("links") && paths.contains("maps"),
        "{paths:?}"
    );
    for spec in ALL_MAPS {
        assert!(
            pins.join("maps").join(spec.pin).exists(),
            "{} not pinned",
            spec.pin
        );
    }

    // The links the README lists by name are the cgroup links made.
    let readme = read("README.md");
    let cgroup_links: Vec<String> = fs::read_dir(pins.join("links"))?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    assert_eq!(cgroup_links.len(), 8, "{cgroup_links:?}");
    assert!(readme.contains("the eight cgroup links"));
    for link in &cgroup_links {
        assert!(
            readme.contains(&format!("`{link}`")),
            "the README never names link {link}"
        );
    }
    Ok(())
}
