//! The metric names a PromQL expression selects, for checking a dashboard's
//! and a rule file's expressions against what the agent exports. Not a
//! parser: it drops what cannot be a metric name (strings, label
//! matchers, grouping label lists, range and offset durations, Grafana
//! variables, numbers) and keeps the identifiers left that are neither
//! called (functions, aggregations) nor keywords.

use std::collections::BTreeSet;

/// PromQL's keywords and binary-operator words besides [`LABEL_LISTS`]
/// (keywords too): never metric names.
const KEYWORDS: [&str; 8] = [
    "and", "or", "unless", "bool", "offset", "atan2", "inf", "nan",
];

/// Words followed by a parenthesised list of label names, not of
/// expressions.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

fn is_keyword(word: &str) -> bool {
    KEYWORDS.contains(&word) || LABEL_LISTS.contains(&word)
}

/// The metric names `expr` selects.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let text = without_label_lists(&strip(expr));
    let mut out = BTreeSet::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let called = chars[i..]
                .iter()
                .find(|c| !c.is_whitespace())
                .is_some_and(|&c| c == '(');
            if !called && !is_keyword(&word.to_lowercase()) {
                out.insert(word);
            }
        } else if c.is_ascii_digit() || c == '.' {
            // A number, exponent and all (1e3), never a name.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

/// `expr` without strings, `{...}` matchers, `[...]` ranges and Grafana's
/// `$variables`, each replaced by a space.
fn strip(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut chars = expr.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' | '`' => {
                let mut escaped = false;
                for d in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if d == '\\' && c != '`' {
                        escaped = true;
                    } else if d == c {
                        break;
                    }
                }
                out.push(' ');
            }
            '{' | '[' => {
                let close = if c == '{' { '}' } else { ']' };
                // Matchers hold strings, which may hold the closing bracket.
                let mut quote = None;
                let mut escaped = false;
                for d in chars.by_ref() {
                    match quote {
                        Some(q) => {
                            if escaped {
                                escaped = false;
                            } else if d == '\\' {
                                escaped = true;
                            } else if d == q {
                                quote = None;
                            }
                        }
                        None if d == '"' || d == '\'' => quote = Some(d),
                        None if d == close => break,
                        None => {}
                    }
                }
                out.push(' ');
            }
            '$' => {
                while chars
                    .peek()
                    .is_some_and(|d| d.is_ascii_alphanumeric() || "_{}".contains(*d))
                {
                    chars.next();
                }
                out.push(' ');
            }
            _ => out.push(c),
        }
    }
    out
}

/// `text` without the parenthesised label lists of `by`, `without`, `on`,
/// `ignoring`, `group_left` and `group_right`.
fn without_label_lists(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    'outer: while !rest.is_empty() {
        for word in LABEL_LISTS {
            let Some(after) = strip_word(rest, word) else {
                continue;
            };
            let trimmed = after.trim_start();
            if let Some(list) = trimmed.strip_prefix('(') {
                let end = list.find(')').map_or(list.len(), |e| e + 1);
                out.push(' ');
                rest = &list[end..];
                continue 'outer;
            }
        }
        let c = rest.chars().next().expect("not empty");
        // Skip whole words so that `xby` is not read as `by`.
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            let end = rest
                .find(|d: char| !(d.is_ascii_alphanumeric() || d == '_' || d == ':'))
                .unwrap_or(rest.len());
            out.push_str(&rest[..end]);
            rest = &rest[end..];
        } else {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// `text` after `word` if it starts with that whole word.
fn strip_word<'a>(text: &'a str, word: &str) -> Option<&'a str> {
    let after = text.strip_prefix(word)?;
    let next = after.chars().next();
    next.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .then_some(after)
}

#[cfg(test)]
mod tests {
    use super::metric_names;

    fn names(expr: &str) -> Vec<String> {
        metric_names(expr).into_iter().collect()
    }

    #[test]
    fn functions_labels_strings_ranges_and_variables_are_no_names() {
        assert_eq!(
            names(
                r#"histogram_quantile(0.99, sum by (instance, le) (rate(sync_seconds_bucket{job="lb-agent", instance=~"$instance", code=~"<error>|5.."}[$__rate_interval]))) > 1e3"#
            ),
            ["sync_seconds_bucket"]
        );
        assert_eq!(
            names(
                "a_entries / (a_max > 0) and on (instance) b unless ignoring(x) group_left(y) c offset 5m"
            ),
            ["a_entries", "a_max", "b", "c"]
        );
        assert_eq!(
            names(r#"count(up{job="x", l="}"} == 0) or vector(0)"#),
            ["up"]
        );
        assert_eq!(
            names("sum without (le) (rate(x_total[5m])) / bool by_total"),
            ["by_total", "x_total"]
        );
        assert!(names("vector(1) + 2.5").is_empty());
    }
}
