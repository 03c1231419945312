//! JUnit XML reports: `<testsuites>`/`<testsuite>` holding `<testcase name classname
//! file line>` elements, failed when they hold a `<failure message=...>` or `<error>`.
//! When the test case has no `file`/`line`, they come from a `file:line` in the failure's
//! text (the one in the test class's file when there is one: pytest writes
//! `tests/test_calc.py:13: AssertionError`, Java `at com.x.CalcTest.add(CalcTest.java:13)`).
//!
//! Read with quick-xml's pull reader: one pass, a bounded nesting depth, failure texts
//! kept up to [`TEXT_BYTES_MAX`]. XML that does not parse (or stops before its root
//! closes) yields nothing at all: no failures, no counts.

use super::{Failure, Found, failure, locations_in, same_file};
use quick_xml::Reader;
use quick_xml::XmlVersion;
use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::{BytesStart, Event};

/// Elements nested deeper than this make the report bad XML.
const DEPTH_MAX: usize = 256;
/// Bytes of a failure's text kept (for its message and its location).
const TEXT_BYTES_MAX: usize = 64 * 1024;

/// Whether the text holds a JUnit report.
pub(super) fn sniff(text: &str) -> bool {
    text.contains("<testsuite")
}

pub(super) fn parse(text: &str) -> Found {
    read(text).unwrap_or_default()
}

/// A test case being read.
#[derive(Default)]
struct Case {
    name: String,
    classname: String,
    file: Option<String>,
    line: Option<u32>,
    failed: bool,
    skipped: bool,
    message: String,
    text: String,
    in_failure: bool,
}

impl Case {
    fn push_text(&mut self, s: &str) {
        if self.in_failure && self.text.len() < TEXT_BYTES_MAX {
            self.text.push_str(s);
        }
    }
}

/// The attributes of an element, unescaped (an unknown entity is kept as written).
fn attributes(e: &BytesStart) -> Result<Vec<(String, String)>, ()> {
    let mut out = Vec::new();
    for attr in e.attributes() {
        let attr = attr.map_err(|_| ())?;
        let key = attr.key.local_name().as_ref().to_string();
        let value = attr
            .normalized_value(XmlVersion::Implicit1_0)
            .map_or_else(|_| attr.value.to_string(), |v| v.into_owned());
        out.push((key, value));
    }
    Ok(out)
}

fn get<'a>(attrs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    attrs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

fn read(text: &str) -> Result<Found, ()> {
    let start = match (text.find("<?xml"), text.find("<testsuite")) {
        (Some(decl), Some(root)) if decl < root => decl,
        (_, Some(root)) => root,
        _ => return Err(()),
    };
    let mut reader = Reader::from_str(&text[start..]);
    let mut found = Found::default();
    let (mut passed, mut failed, mut cases) = (0u64, 0u64, 0u64);
    let mut depth = 0usize;
    let mut suite_files: Vec<Option<String>> = Vec::new();
    let mut case: Option<Case> = None;
    loop {
        let event = reader.read_event().map_err(|_| ())?;
        let (element, opens) = match &event {
            Event::Start(e) => (Some(e), true),
            Event::Empty(e) => (Some(e), false),
            _ => (None, false),
        };
        if let Some(e) = element {
            if opens {
                depth += 1;
                if depth > DEPTH_MAX {
                    return Err(());
                }
            }
            let local = e.local_name();
            match local.as_ref() {
                "testsuite" => {
                    let attrs = attributes(e)?;
                    if opens {
                        suite_files.push(get(&attrs, "file").map(str::to_string));
                    }
                }
                "testcase" => {
                    let attrs = attributes(e)?;
                    let suite_file = suite_files.iter().rev().flatten().next().cloned();
                    let new = Case {
                        name: get(&attrs, "name").unwrap_or("").to_string(),
                        classname: get(&attrs, "classname").unwrap_or("").to_string(),
                        file: get(&attrs, "file").map(str::to_string).or(suite_file),
                        line: get(&attrs, "line").and_then(|l| l.trim().parse().ok()),
                        ..Case::default()
                    };
                    if opens {
                        case = Some(new);
                    } else {
                        cases += 1;
                        passed += 1;
                    }
                }
                "failure" | "error" => {
                    let attrs = attributes(e)?;
                    if let Some(c) = case.as_mut() {
                        c.failed = true;
                        if c.message.trim().is_empty() {
                            c.message = get(&attrs, "message").unwrap_or("").to_string();
                        }
                        if c.file.is_none() {
                            c.file = get(&attrs, "file").map(str::to_string);
                        }
                        if c.line.is_none() {
                            c.line = get(&attrs, "line").and_then(|l| l.trim().parse().ok());
                        }
                        if opens {
                            if !c.text.is_empty() {
                                c.push_text("\n");
                            }
                            c.in_failure = true;
                        }
                    }
                }
                "skipped" => {
                    if let Some(c) = case.as_mut() {
                        c.skipped = true;
                    }
                }
                _ => {}
            }
            continue;
        }
        match event {
            Event::End(e) => {
                depth = depth.saturating_sub(1);
                match e.local_name().as_ref() {
                    "testsuite" => {
                        suite_files.pop();
                    }
                    "testcase" => {
                        if let Some(c) = case.take() {
                            cases += 1;
                            if c.failed {
                                failed += 1;
                                found.failures.push(case_failure(c));
                            } else if !c.skipped {
                                passed += 1;
                            }
                        }
                    }
                    "failure" | "error" => {
                        if let Some(c) = case.as_mut() {
                            c.in_failure = false;
                        }
                    }
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
            }
            Event::Text(t) => {
                if let Some(c) = case.as_mut() {
                    c.push_text(&t.xml10_content());
                }
            }
            Event::CData(t) => {
                if let Some(c) = case.as_mut() {
                    c.push_text(&t.xml10_content());
                }
            }
            Event::GeneralRef(r) => {
                if let Some(c) = case.as_mut() {
                    match r.resolve_char_ref() {
                        Ok(Some(ch)) => c.push_text(ch.encode_utf8(&mut [0; 4])),
                        Ok(None) => match resolve_predefined_entity(&r) {
                            Some(s) => c.push_text(s),
                            None => c.push_text(&format!("&{};", &*r)),
                        },
                        Err(_) => return Err(()),
                    }
                }
            }
            // The report stopped before its root closed.
            Event::Eof => return Err(()),
            _ => {}
        }
    }
    if cases > 0 {
        found.passed = Some(passed);
        found.failed = Some(failed);
    }
    Ok(found)
}

/// `classname.name`, unless the name already says the class.
fn case_name(name: &str, classname: &str) -> String {
    match (name.trim(), classname.trim()) {
        (name, "") => name.to_string(),
        ("", class) => class.to_string(),
        (name, class) if name.starts_with(class) => name.to_string(),
        (name, class) => format!("{class}.{name}"),
    }
}

/// Whether `path` is the file of the test class `classname` (`tests.test_calc` →
/// `tests/test_calc.py`, `com.x.CalcTest$Inner` → `CalcTest.java`).
fn class_file(path: &str, classname: &str) -> bool {
    let class = classname.split('$').next().unwrap_or(classname);
    let Some(last) = class.rsplit('.').next().filter(|l| !l.is_empty()) else {
        return false;
    };
    let base = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let stem = base.rsplit_once('.').map_or(base, |(stem, _)| stem);
    stem == last
}

fn case_failure(c: Case) -> Failure {
    let name = case_name(&c.name, &c.classname);
    let text = c.text.trim();
    let message = if c.message.trim().is_empty() {
        text
    } else {
        c.message.trim()
    };
    if let (Some(file), Some(line)) = (&c.file, c.line) {
        return failure(&name, Some(file), Some(line), message);
    }
    let mut places = locations_in(text);
    places.extend(locations_in(&c.message));
    let chosen = match &c.file {
        Some(file) => places.iter().find(|(p, _)| same_file(p, file)),
        None => places
            .iter()
            .find(|(p, _)| class_file(p, &c.classname))
            .or_else(|| places.first()),
    };
    match chosen {
        Some((path, line)) => {
            let file = c.file.as_deref().unwrap_or(path);
            failure(&name, Some(file), Some(*line), message)
        }
        None => failure(&name, c.file.as_deref(), c.line, message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_win_and_java_stacks_are_read() {
        let xml = r#"<?xml version="1.0"?>
<testsuites><testsuite name="s">
  <testcase name="adds" classname="com.x.CalcTest" file="src/test/CalcTest.java" line="12">
    <failure message="expected 5">boom</failure></testcase>
  <testcase name="subs" classname="com.x.CalcTest">
    <error type="NPE">java.lang.NullPointerException
	at org.junit.Assert.fail(Assert.java:89)
	at com.x.CalcTest.subs(CalcTest.java:20)</error></testcase>
  <testcase name="later"><skipped/></testcase>
  <testcase name="ok" classname="com.x.CalcTest"/>
</testsuite></testsuites>"#;
        let found = parse(xml);
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
                    "com.x.CalcTest.adds",
                    Some("src/test/CalcTest.java"),
                    Some(12),
                    "expected 5"
                ),
                (
                    "com.x.CalcTest.subs",
                    Some("CalcTest.java"),
                    Some(20),
                    "java.lang.NullPointerException\n\tat org.junit.Assert.fail(Assert.java:89)\n\tat com.x.CalcTest.subs(CalcTest.java:20)"
                ),
            ]
        );
        assert_eq!((found.passed, found.failed), (Some(1), Some(2)));
    }

    #[test]
    fn bad_xml_yields_nothing() {
        let cases = [
            "<testsuite><testcase name=\"a\"><failure message=\"x\"></testcase></testsuite>",
            "<testsuite><testcase name=\"a\"><failure message=\"x\">",
            "<testsuite><testcase name=\"a\" name=\"b\"><failure/></testcase></testsuite>",
            "<testsuite><testcase name=\"a><failure/></testcase></testsuite>",
            "<testsuite>&#0;</testsuite>",
            "no xml at all",
        ];
        for xml in cases {
            let found = parse(xml);
            assert!(found.failures.is_empty(), "{xml}: {:?}", found.failures);
            assert_eq!((found.passed, found.failed), (None, None), "{xml}");
        }
    }

    #[test]
    fn deep_nesting_is_refused() {
        let xml = format!(
            "<testsuites>{}<testcase name=\"a\"><failure/></testcase>{}</testsuites>",
            "<testsuite>".repeat(DEPTH_MAX + 5),
            "</testsuite>".repeat(DEPTH_MAX + 5)
        );
        assert!(parse(&xml).failures.is_empty());
        let shallow = format!(
            "<testsuites>{}<testcase name=\"a\"><failure message=\"m\"/></testcase>{}</testsuites>",
            "<testsuite>".repeat(10),
            "</testsuite>".repeat(10)
        );
        assert_eq!(parse(&shallow).failures.len(), 1);
    }

    #[test]
    fn text_around_the_report_is_ignored() {
        let log = "collected 1 item\n<testsuite><testcase name=\"t\"><failure>x.py:3: boom &amp; &#65;</failure>\
                   </testcase></testsuite>\ntrailing <junk";
        let found = parse(log);
        assert_eq!(found.failures.len(), 1);
        assert_eq!(found.failures[0].message, "x.py:3: boom & A");
        assert_eq!(found.failures[0].line, Some(3));
    }

    #[test]
    fn names_and_class_files() {
        assert_eq!(case_name("t", ""), "t");
        assert_eq!(case_name("", "C"), "C");
        assert_eq!(case_name("C t", "C"), "C t");
        assert_eq!(case_name("t", "a.C"), "a.C.t");
        assert!(class_file("tests/test_calc.py", "tests.test_calc"));
        assert!(class_file("CalcTest.java", "com.x.CalcTest$Inner"));
        assert!(!class_file("Assert.java", "com.x.CalcTest"));
        assert!(!class_file("x.py", ""));
    }
}
