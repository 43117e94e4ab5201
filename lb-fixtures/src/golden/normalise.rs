//! What of a dump a scenario compares.

use std::{collections::HashMap, fmt::Write as _};

/// Makes a dump independent of timing: the ids the agent picks and the
/// revision numbers (a file re-read can be one sync or two, so a frontend's
/// revision count depends on scheduling) are not what a scenario is about.
/// Frontend `(id N, rev M)` goes (what follows it, the frontend's kind and
/// flags, stays); backend ids become `b1`, `b2`, ... in order of
/// appearance, which keeps visible which slots share a backend.
pub fn normalise(dump: &str) -> String {
    let mut backends: HashMap<String, usize> = HashMap::new();
    let mut out = String::new();
    for line in dump.lines() {
        if let Some(slot) = line.strip_prefix("  -> ") {
            match slot.rsplit_once(' ') {
                Some((addr, id)) if id.parse::<u32>().is_ok() => {
                    let n = backends.len() + 1;
                    let n = *backends.entry(id.to_owned()).or_insert(n);
                    let _ = writeln!(out, "  -> {addr} b{n}");
                }
                // The header line, or a missing slot or backend: as printed.
                _ => {
                    let _ = writeln!(out, "{line}");
                }
            }
        } else if let Some(i) = line.find(" (id ") {
            let rest = line[i..].find(')').map_or("", |j| &line[i + j + 1..]);
            let _ = writeln!(out, "{}{rest}", &line[..i]);
        } else {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalising_drops_ids_and_revisions_and_keeps_shared_backends() {
        let dump = "\
Prot LocalAddress:Port        Scheduler  Backends
  -> RemoteAddress:Port       BackendId
TCP  10.96.0.10:53            random     2 (id 7, rev 3)
  -> 10.1.2.2:53              12
  -> 10.1.2.3:53              4
TCP  10.96.0.11:53            random     1 (id 2, rev 1)
  -> 10.1.2.3:53              4
TCP  10.96.0.12:80            reject     0 (id 9, rev 2)
TCP  10.96.0.13:80            random     1 (id 3, rev 1)
  -> <slot 0 missing>
TCP  192.0.2.7:80             maglev     1 (id 4, rev 2) LoadBalancer table 251 from-outside
  -> 10.1.2.3:53              4
# entries: 4 frontends, 4 states, 4 slots, 2 backends; 0 revisions retired
";
        assert_eq!(
            normalise(dump),
            "\
Prot LocalAddress:Port        Scheduler  Backends
  -> RemoteAddress:Port       BackendId
TCP  10.96.0.10:53            random     2
  -> 10.1.2.2:53              b1
  -> 10.1.2.3:53              b2
TCP  10.96.0.11:53            random     1
  -> 10.1.2.3:53              b2
TCP  10.96.0.12:80            reject     0
TCP  10.96.0.13:80            random     1
  -> <slot 0 missing>
TCP  192.0.2.7:80             maglev     1 LoadBalancer table 251 from-outside
  -> 10.1.2.3:53              b2
# entries: 4 frontends, 4 states, 4 slots, 2 backends; 0 revisions retired
"
        );
    }
}
