//! A bound on how deeply a document nests, checked before it is parsed.
//! The YAML deserializer's time grows with the square of the nesting depth
//! (40,000 nested brackets under `kind: Service` took 9 s), while no object
//! the agent reads nests beyond a few dozen levels.

/// Documents that may nest deeper than this are skipped unparsed.
pub(super) const MAX_DEPTH: usize = 256;

/// Whether `doc` may nest deeper than `max`. An upper bound, cheap and
/// linear: every `[` and `{` counts, even inside a quoted scalar or a
/// comment (telling those apart takes a parser), and so does the column
/// where each line's content starts, after its `- ` and `? ` indicators
/// (a block level needs at least one column more than its parent).
pub(super) fn deeper_than(doc: &str, max: usize) -> bool {
    let mut flow = 0usize;
    for line in doc.lines() {
        let bytes = line.as_bytes();
        let mut col = bytes.iter().take_while(|&&b| b == b' ').count();
        while let [b'-' | b'?', b' ' | b'\t', ..] = &bytes[col..] {
            col += 2;
            col += bytes[col..].iter().take_while(|&&b| b == b' ').count();
        }
        for &b in &bytes[col..] {
            match b {
                b'[' | b'{' => {
                    flow += 1;
                    if col + flow > max {
                        return true;
                    }
                }
                b']' | b'}' => flow = flow.saturating_sub(1),
                _ => {}
            }
        }
        if col + flow > max {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_nesting_counts_across_lines() {
        assert!(!deeper_than("a: [[1], {b: [2]}]", 3));
        assert!(deeper_than("a: [[{b: [2]}]]", 3));
        assert!(deeper_than("a: [\n [\n  [\n   [1]]]]", 3));
        // Closed collections give their depth back.
        let many = "x: [[1]]\n".repeat(1000);
        assert!(!deeper_than(&many, 3));
    }

    #[test]
    fn block_nesting_counts_columns_and_compact_sequences() {
        assert!(!deeper_than("a:\n  b:\n    c: 1", 4));
        assert!(deeper_than("a:\n  b:\n    c: 1", 3));
        // `- - - x` nests three sequences on one line.
        assert!(deeper_than(&format!("{}x", "- ".repeat(100)), 50));
        assert!(deeper_than(&format!("{}x", "? ".repeat(100)), 50));
        assert!(!deeper_than("- a\n- b\n- - c", 4));
    }

    #[test]
    fn a_real_object_is_far_below_the_bound() {
        let slice = "\
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc
  managedFields:
  - fieldsV1:
      f:endpoints: {}
      f:metadata:
        f:labels:
          .: {}
          f:kubernetes.io/service-name: {}
        f:ownerReferences:
          k:{\"uid\":\"8d9\"}: {}
  annotations:
    note: \"[unbalanced in a string\"
endpoints:
- addresses: [\"10.0.0.1\"]
  conditions: {ready: true}
";
        assert!(!deeper_than(slice, 24), "a few levels, with slack");
        assert!(!deeper_than(slice, MAX_DEPTH));
    }
}
