//! The Test Anything Protocol, versions 13 and 14: `not ok N - name` test points, their
//! YAML diagnostic blocks (`---` ... `...`: `message`/`error`, `at:`, `location:`,
//! `file:`/`line:`, `stack:`), subtests by indentation (TAP 14 and node's test runner: the
//! subtests' points come indented before their parent's), `# TODO` and `# SKIP`
//! directives (never failures), and `Bail out!`.
//!
//! A failing subtest stands for its failing parents; names are the parents' and the
//! test's descriptions joined with ` > `. The counts are of the leaf test points: passed
//! ones, and failed ones without a directive.

use super::{Failure, Found, dedent, failure, frame_location, parse_location, same_file};

/// How many parents a name takes at most.
const NAME_DEPTH_MAX: usize = 64;

/// Whether the text looks like TAP.
pub(super) fn sniff(text: &str) -> bool {
    let mut plan = false;
    let mut point = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("TAP version ") {
            return true;
        }
        plan |= is_plan(t);
        point |= test_point(t).is_some_and(|p| p.number.is_some());
        if plan && point {
            return true;
        }
    }
    false
}

fn is_plan(t: &str) -> bool {
    t.strip_prefix("1..").is_some_and(|n| {
        n.split_whitespace()
            .next()
            .is_some_and(|n| n.parse::<u64>().is_ok())
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Directive {
    None,
    Skip,
    Todo,
}

#[derive(Debug)]
struct Point {
    indent: usize,
    ok: bool,
    number: Option<u64>,
    description: String,
    directive: Directive,
    /// The YAML block's lines.
    diagnostics: Vec<String>,
    parent: Option<usize>,
    has_child: bool,
    has_failing_child: bool,
}

impl Point {
    fn fails(&self) -> bool {
        !self.ok && self.directive == Directive::None
    }
}

/// `not ok 2 - wrong sum # TODO later` → its parts (diagnostics and links left empty).
fn test_point(t: &str) -> Option<Point> {
    let (ok, rest) = match t.strip_prefix("not ok") {
        Some(rest) => (false, rest),
        None => (true, t.strip_prefix("ok")?),
    };
    if !(rest.is_empty() || rest.starts_with(' ') || rest.starts_with('#')) {
        return None;
    }
    let rest = rest.trim_start();
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let number = rest[..digits].parse().ok();
    let rest = rest[digits..].trim_start();
    let rest = rest.strip_prefix('-').map_or(rest, str::trim_start);
    // The description ends at the first unescaped `#`.
    let mut description = String::new();
    let mut directive = "";
    let mut escaped = false;
    for (at, c) in rest.char_indices() {
        if escaped {
            description.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == '#' {
            directive = &rest[at + 1..];
            break;
        } else {
            description.push(c);
        }
    }
    let word = directive.trim_start().to_ascii_uppercase();
    let directive = if word.starts_with("SKIP") {
        Directive::Skip
    } else if word.starts_with("TODO") {
        Directive::Todo
    } else {
        Directive::None
    };
    Some(Point {
        indent: 0,
        ok,
        number,
        description: description.trim().to_string(),
        directive,
        diagnostics: Vec::new(),
        parent: None,
        has_child: false,
        has_failing_child: false,
    })
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

pub(super) fn parse(text: &str) -> Found {
    let lines: Vec<&str> = text.lines().collect();
    let mut points: Vec<Point> = Vec::new();
    let mut bail: Option<String> = None;
    // Points waiting for their parent: (indent, index).
    let mut stack: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let t = line.trim();
        i += 1;
        if let Some(reason) = t.strip_prefix("Bail out!") {
            bail.get_or_insert_with(|| reason.trim().to_string());
            continue;
        }
        let Some(mut point) = test_point(t) else {
            continue;
        };
        point.indent = indent_of(line);
        // Its YAML block, when one follows.
        if let Some(next) = lines.get(i)
            && next.trim() == "---"
            && indent_of(next) >= point.indent
        {
            let base = indent_of(next);
            let start = i + 1;
            let mut end = start;
            while end < lines.len() {
                let l = lines[end];
                if l.trim() == "..." || (!l.trim().is_empty() && indent_of(l) < base) {
                    break;
                }
                end += 1;
            }
            point.diagnostics = lines[start..end].iter().map(|l| l.to_string()).collect();
            i = if lines.get(end).is_some_and(|l| l.trim() == "...") {
                end + 1
            } else {
                end
            };
        }
        let at = points.len();
        let mut has_child = false;
        let mut has_failing_child = false;
        while let Some(&(indent, child)) = stack.last() {
            if indent <= point.indent {
                break;
            }
            stack.pop();
            if let Some(c) = points.get_mut(child)
                && c.parent.is_none()
            {
                c.parent = Some(at);
                has_child = true;
                has_failing_child |= c.fails() || c.has_failing_child;
            }
        }
        point.has_child = has_child;
        point.has_failing_child = has_failing_child;
        stack.push((point.indent, at));
        points.push(point);
    }

    let mut found = Found::default();
    let (mut passed, mut failed) = (0u64, 0u64);
    for (at, point) in points.iter().enumerate() {
        if !point.has_child {
            if point.ok && point.directive == Directive::None {
                passed += 1;
            } else if point.fails() {
                failed += 1;
            }
        }
        if point.fails() && !point.has_failing_child {
            found.failures.push(point_failure(&points, at));
        }
    }
    if !points.is_empty() {
        found.passed = Some(passed);
        found.failed = Some(failed);
    }
    if let Some(reason) = bail {
        found
            .failures
            .push(failure("Bail out!", None, None, &reason));
    }
    found
}

/// A value in a diagnostic block: a scalar, or a mapping of scalars (`at:` in node-tap).
#[derive(Debug, PartialEq)]
enum Yaml {
    Scalar(String),
    Map(Vec<(String, String)>),
}

/// The top-level keys of a YAML block, read loosely: quoted, plain and block scalars,
/// and one level of nested mapping.
fn yaml(lines: &[&str]) -> Vec<(String, Yaml)> {
    yaml_at(lines, 0)
}

/// [`yaml`] at a nesting depth: below the first level, mappings are read as text (no
/// recursion to speak of, however deep the input nests).
fn yaml_at(lines: &[&str], depth: usize) -> Vec<(String, Yaml)> {
    let base = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| indent_of(l))
        .min()
        .unwrap_or(0);
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        if line.trim().is_empty() || indent_of(line) != base {
            continue;
        }
        let Some((key, value)) = line.trim().split_once(':') else {
            continue;
        };
        let key = unquote(key.trim());
        let value = value.trim();
        let child_start = i;
        while i < lines.len() && (lines[i].trim().is_empty() || indent_of(lines[i]) > base) {
            i += 1;
        }
        let child = &lines[child_start..i];
        let parsed = if value.starts_with('|') || value.starts_with('>') {
            Yaml::Scalar(dedent(child))
        } else if value.is_empty() && depth == 0 {
            let map: Vec<(String, String)> = yaml_at(child, depth + 1)
                .into_iter()
                .filter_map(|(k, v)| match v {
                    Yaml::Scalar(s) => Some((k, s)),
                    Yaml::Map(_) => None,
                })
                .collect();
            if map.is_empty() {
                Yaml::Scalar(dedent(child))
            } else {
                Yaml::Map(map)
            }
        } else {
            let mut whole = value.to_string();
            for l in child {
                whole.push(' ');
                whole.push_str(l.trim());
            }
            Yaml::Scalar(unquote(whole.trim()))
        };
        out.push((key, parsed));
    }
    out
}

/// A YAML scalar without its quotes.
fn unquote(s: &str) -> String {
    if s.len() >= 2 && s.starts_with('\'') && s.ends_with('\'') {
        return s[1..s.len() - 1].replace("''", "'");
    }
    if s.len() >= 2 && s.starts_with('"') && s.ends_with('"') {
        return serde_json::from_str::<String>(s).unwrap_or_else(|_| s[1..s.len() - 1].to_string());
    }
    s.to_string()
}

fn point_failure(points: &[Point], at: usize) -> Failure {
    let point = &points[at];
    let mut names = vec![point.description.as_str()];
    let mut parent = point.parent;
    while let Some(p) = parent.and_then(|p| points.get(p)) {
        if names.len() >= NAME_DEPTH_MAX {
            break;
        }
        names.push(p.description.as_str());
        parent = p.parent;
    }
    names.reverse();
    let name = names.join(" > ");
    let name = if name.trim().is_empty() {
        format!(
            "test {}",
            point
                .number
                .map_or_else(|| "?".to_string(), |n| n.to_string())
        )
    } else {
        name
    };

    let lines: Vec<&str> = point.diagnostics.iter().map(String::as_str).collect();
    let diag = yaml(&lines);
    let scalar = |key: &str| {
        diag.iter().find_map(|(k, v)| match v {
            Yaml::Scalar(s) if k == key && !s.trim().is_empty() => Some(s.as_str()),
            _ => None,
        })
    };

    // Where: `at:` (the assertion), else the stack's frame in `location:`'s file, else
    // `location:`, else `file:`/`line:`, else the stack's first frame.
    let at_key = diag.iter().find_map(|(k, v)| (k == "at").then_some(v));
    let from_at = match at_key {
        Some(Yaml::Scalar(s)) => frame_location(s)
            .or_else(|| parse_location(s))
            .map(|(f, l)| (f.to_string(), l)),
        Some(Yaml::Map(m)) => {
            let get = |k: &str| m.iter().find(|(mk, _)| mk == k).map(|(_, v)| v.as_str());
            match (get("file"), get("line").and_then(|l| l.parse().ok())) {
                (Some(f), Some(l)) => Some((f.to_string(), l)),
                _ => None,
            }
        }
        None => None,
    };
    let stack: Vec<(&str, u32)> = scalar("stack")
        .map(|s| s.lines().filter_map(frame_location).collect())
        .unwrap_or_default();
    let location = scalar("location").and_then(parse_location);
    let in_location_file = location.and_then(|(file, _)| {
        stack
            .iter()
            .find(|(f, _)| same_file(f, file))
            .map(|&(f, l)| (f.to_string(), l))
    });
    let file_line = match (scalar("file"), scalar("line").and_then(|l| l.parse().ok())) {
        (Some(f), Some(l)) => Some((f.to_string(), l)),
        _ => None,
    };
    let place = from_at
        .or(in_location_file)
        .or_else(|| location.map(|(f, l)| (f.to_string(), l)))
        .or(file_line)
        .or_else(|| stack.first().map(|&(f, l)| (f.to_string(), l)));

    // Why: `message`/`error` (with the error's class), else expected/actual, else the
    // description.
    let message = match scalar("message").or_else(|| scalar("error")) {
        Some(text) => match scalar("name") {
            Some(class) if class.ends_with("Error") && !text.contains(class) => {
                format!("{class}: {text}")
            }
            _ => text.to_string(),
        },
        None => match (
            scalar("expected").or_else(|| scalar("wanted")),
            scalar("actual").or_else(|| scalar("found")),
        ) {
            (Some(e), Some(a)) => format!("expected: {e}\nactual: {a}"),
            _ => point.description.clone(),
        },
    };
    let (file, line) = place.map_or((None, None), |(f, l)| (Some(f), Some(l)));
    failure(&name, file.as_deref(), line, &message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_points() {
        let p = test_point("not ok 12 - a \\# b # TODO later").expect("a point");
        assert!(!p.ok);
        assert_eq!(p.number, Some(12));
        assert_eq!(p.description, "a # b");
        assert_eq!(p.directive, Directive::Todo);
        let p = test_point("ok 3 # skip no db").expect("a point");
        assert_eq!(
            (p.ok, p.description.as_str(), p.directive),
            (true, "", Directive::Skip)
        );
        assert!(test_point("okay 1").is_none());
        assert!(test_point("not ok").is_some_and(|p| p.number.is_none()));
        assert!(test_point("nothing").is_none());
    }

    #[test]
    fn yaml_blocks() {
        let block = [
            "  message: 'it''s wrong'",
            "  at:",
            "    line: 5",
            "    file: test/a.js",
            "  stack: |-",
            "    one",
            "    two",
            "  found: \"x\\ny\"",
        ];
        let y = yaml(&block);
        assert_eq!(y[0], ("message".into(), Yaml::Scalar("it's wrong".into())));
        assert_eq!(
            y[1],
            (
                "at".into(),
                Yaml::Map(vec![
                    ("line".into(), "5".into()),
                    ("file".into(), "test/a.js".into())
                ])
            )
        );
        assert_eq!(y[2], ("stack".into(), Yaml::Scalar("one\ntwo".into())));
        assert_eq!(y[3], ("found".into(), Yaml::Scalar("x\ny".into())));
        assert!(yaml(&[]).is_empty());
    }

    #[test]
    fn node_tap_and_tape_styles() {
        let log = "TAP version 13\n# Subtest: t/a.js\n    not ok 1 - should be equal\n      ---\n\
                   \x20     found: 1\n      wanted: 2\n      at:\n        line: 7\n        column: 3\n\
                   \x20       file: t/a.js\n      ...\n    1..1\nnot ok 1 - t/a.js\n\
                   not ok 2 should be strictly equal\n  ---\n  operator: equal\n  expected: 2\n\
                   \x20 actual:   1\n  at: Test.<anonymous> (/r/t/b.js:4:5)\n  ...\n\
                   ok 3 - fine\n1..3\n";
        let found = parse(log);
        let got: Vec<(&str, Option<&str>, Option<u32>, &str)> = found
            .failures
            .iter()
            .map(|f| {
                (
                    f.name.as_str(),
                    f.file.as_deref(),
                    f.line,
                    f.message.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "t/a.js > should be equal",
                    Some("t/a.js"),
                    Some(7),
                    "expected: 2\nactual: 1"
                ),
                (
                    "should be strictly equal",
                    Some("/r/t/b.js"),
                    Some(4),
                    "expected: 2\nactual: 1"
                ),
            ]
        );
        assert_eq!((found.passed, found.failed), (Some(1), Some(2)));
    }

    #[test]
    fn bail_out_and_unterminated_blocks() {
        let log = "1..2\nnot ok 1 - first\n  ---\n  message: cut short\nBail out! database down\n";
        let found = parse(log);
        assert_eq!(found.failures.len(), 2);
        assert_eq!(found.failures[0].message, "cut short");
        assert_eq!(found.failures[1].name, "Bail out!");
        assert_eq!(found.failures[1].message, "database down");
    }

    #[test]
    fn sniffing() {
        assert!(sniff("TAP version 14\n"));
        assert!(sniff("1..1\nok 1 - x\n"));
        assert!(!sniff("ok then\nnot ok\n"));
        assert!(!sniff("1..x\nok 1\n"));
    }
}
