//! End-to-end: `palm route` and `palm start` through real `palm` processes. Eight stored
//! flows, twenty tasks: the expected choice with reasons, refusals above the ceiling,
//! `--execute`, and `palm start`'s report, falling back to the built-in plan-and-verify
//! flow (driven by the scripted verifier of tests/fixtures/verify/) when nothing fits.

mod common;

use common::{data_dir, palm_env, repo};
use serde_json::Value;
use std::path::Path;

/// (name, authority, tags, description).
const FLOWS: [(&str, &str, &str, &str); 8] = [
    (
        "fix-bug",
        "edit",
        "[fix, bug, debug]",
        "An agent reproduces a bug, fixes it and proves the fix with the tests",
    ),
    (
        "review-change",
        "observe",
        "[review, pr, audit]",
        "A read-only review of a branch's change or a pull request",
    ),
    (
        "write-docs",
        "edit",
        "[docs, documentation, readme]",
        "Write or update documentation: the README, guides, doc comments",
    ),
    (
        "upgrade-deps",
        "execute",
        "[dependencies, upgrade, bump]",
        "Upgrade dependencies to their latest versions and run the tests",
    ),
    (
        "security-scan",
        "observe",
        "[security, secrets, vulnerability]",
        "Scan the code for vulnerabilities, leaked secrets and unsafe code",
    ),
    (
        "perf-investigate",
        "execute",
        "[performance, benchmark, profile]",
        "Profile and benchmark a slow path, then optimize it",
    ),
    (
        "add-tests",
        "edit",
        "[tests, coverage]",
        "Write missing unit tests to raise coverage",
    ),
    (
        "release",
        "execute",
        "[release, publish, changelog]",
        "Cut a release: changelog, version bump, tag and publish",
    ),
];

/// (task, ceiling, expected choice or None for a refusal, the refused flow).
const TASKS: [(&str, &str, Option<&str>, Option<&str>); 20] = [
    (
        "Fix the crash when parsing an empty config file",
        "edit",
        Some("fix-bug"),
        None,
    ),
    (
        "The login endpoint returns 500 errors, please repair it",
        "edit",
        Some("fix-bug"),
        None,
    ),
    (
        "Review the changes on this branch before merging",
        "observe",
        Some("review-change"),
        None,
    ),
    (
        "Audit the pull request for mistakes",
        "observe",
        Some("review-change"),
        None,
    ),
    (
        "Update the README with the new install steps",
        "edit",
        Some("write-docs"),
        None,
    ),
    (
        "Document the public API of the parser module",
        "edit",
        Some("write-docs"),
        None,
    ),
    (
        "Bump all dependencies to the latest versions",
        "execute",
        Some("upgrade-deps"),
        None,
    ),
    (
        "Upgrade tokio to 1.40",
        "execute",
        Some("upgrade-deps"),
        None,
    ),
    (
        "Check the code for leaked API keys and secrets",
        "observe",
        Some("security-scan"),
        None,
    ),
    (
        "Look for SQL injection vulnerabilities in the handlers",
        "observe",
        Some("security-scan"),
        None,
    ),
    (
        "The import job is slow; profile it and make it faster",
        "execute",
        Some("perf-investigate"),
        None,
    ),
    (
        "Benchmark the tunnel and optimize the hot path",
        "execute",
        Some("perf-investigate"),
        None,
    ),
    (
        "Add unit tests for the retry logic",
        "edit",
        Some("add-tests"),
        None,
    ),
    (
        "Improve test coverage of the store module",
        "edit",
        Some("add-tests"),
        None,
    ),
    (
        "Prepare the 2.0 release and publish it",
        "execute",
        Some("release"),
        None,
    ),
    (
        "Write the changelog and tag version 1.3",
        "execute",
        Some("release"),
        None,
    ),
    (
        "Investigate why the build fails on CI and fix it",
        "edit",
        Some("fix-bug"),
        None,
    ),
    (
        "Fix the flaky bug in the scheduler",
        "observe",
        None,
        Some("fix-bug"),
    ),
    ("Publish a new release", "edit", None, Some("release")),
    (
        "Review the diff of the last commit",
        "observe",
        Some("review-change"),
        None,
    ),
];

fn add_flows(data: &Path) {
    for (name, authority, tags, description) in FLOWS {
        let source = format!(
            "name: {name}\ndescription: \"{description}\"\ntags: {tags}\nauthority: {authority}\ninput:\n  task: string\n  repo: {{ type: string, default: \".\" }}\ntree:\n  set: {{ did: \"{name}: {{{{ input.task }}}}\" }}\n"
        );
        let file = data.join(format!("{name}.yaml"));
        std::fs::write(&file, source).expect("flow");
        let added = palm_env(data, &["flows", "add", &file.display().to_string()], &[]);
        assert_eq!(added.code, 0, "{}", added.stderr);
    }
}

fn route(data: &Path, task: &str, ceiling: &str) -> (i32, Value) {
    let ran = palm_env(
        data,
        &["route", task, "--authority", ceiling, "--json"],
        &[],
    );
    (ran.code, ran.json())
}

#[test]
fn twenty_tasks_over_eight_flows_route_as_expected_within_their_ceiling() {
    let data = data_dir();
    add_flows(data.path());
    let mut right = 0;
    let mut misses = Vec::new();
    for (task, ceiling, expected, refused) in TASKS {
        let (code, doc) = route(data.path(), task, ceiling);
        assert_eq!(code, 0, "{doc}");
        let chosen = doc["choice"]["flow"].as_str();
        if chosen == expected {
            right += 1;
        } else {
            misses.push(format!(
                "{task:?}: chose {chosen:?}, expected {expected:?}: {doc}"
            ));
        }
        if let Some(choice) = doc["choice"].as_object() {
            assert!(!choice["reasons"].as_array().expect("reasons").is_empty());
            assert!(choice["score"].as_f64().unwrap_or(0.0) > 0.0);
        }
        if let Some(refused) = refused {
            // Every task whose flow needs more than the ceiling is refused, with why.
            assert!(doc["choice"].is_null(), "{task}: {doc}");
            let entry = doc["refused"]
                .as_array()
                .and_then(|r| r.iter().find(|e| e["flow"] == refused))
                .unwrap_or_else(|| panic!("{task}: {refused} not refused: {doc}"));
            assert!(entry["needs"].as_str().is_some());
            assert!(entry["reason"].as_str().unwrap_or("").contains("ceiling"));
        }
        // Whatever it chose fits under the ceiling.
        if let Some(chosen) = chosen {
            let needs = FLOWS
                .iter()
                .find(|f| f.0 == chosen)
                .expect("a stored flow")
                .1;
            let rank = |m: &str| ["observe", "edit", "execute"].iter().position(|x| *x == m);
            assert!(
                rank(needs) <= rank(ceiling),
                "{task}: {chosen} needs {needs}"
            );
        }
    }
    assert!(right >= 18, "{right}/20 right:\n{}", misses.join("\n"));
    println!("route: {right}/20 as expected; misses: {misses:#?}");
}

#[test]
fn route_executes_its_choice_and_start_reports_or_falls_back() {
    let data = data_dir();
    add_flows(data.path());
    let checkout = tempfile::tempdir().expect("repo");
    let ran = palm_env(
        data.path(),
        &[
            "route",
            "Document the public API",
            "--execute",
            "--repo",
            &checkout.path().display().to_string(),
            "--json",
        ],
        &[],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let doc = ran.json();
    assert_eq!(doc["choice"]["flow"], "write-docs");
    assert_eq!(doc["job"]["status"], "succeeded");
    assert_eq!(
        doc["job"]["state"]["did"],
        "write-docs: Document the public API"
    );

    // A task nothing fits: the built-in plan-and-verify flow runs, with the scripted
    // verifier as its agent, and the report says what ran, the verdicts and patches.
    let state = tempfile::tempdir().expect("state");
    let verdict = data.path().join("verdict.json");
    std::fs::write(
        &verdict,
        r#"{"approved": true, "reason": "it does what was asked", "findings": []}"#,
    )
    .expect("verdict");
    std::fs::write(
        data.path().join("palm.yaml"),
        format!(
            "agents:\n  verifier:\n    command: [\"{}\"]\n    env: {{FIXER_STATE: \"{}\", VERDICT_FILE: \"{}\"}}\n",
            repo().join("node/tests/fixtures/verify/verifier").display(),
            state.path().display(),
            verdict.display()
        ),
    )
    .expect("palm.yaml");
    let ran = palm_env(
        data.path(),
        &[
            "start",
            "Teach the widget to juggle",
            "--repo",
            &checkout.path().display().to_string(),
            "--test",
            "true",
            "--provider",
            "verifier",
            "--json",
        ],
        &[],
    );
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    let report = ran.json();
    assert_eq!(report["flow"], "plan-and-verify");
    assert!(report["route"]["choice"].is_null());
    assert_eq!(report["status"], "succeeded");
    let kinds: Vec<&str> = report["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .filter_map(|v| v["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"gate") && kinds.contains(&"until_green"),
        "{report}"
    );
    assert!(report["patches"].is_array());

    // Over the ceiling: nothing starts, and it says why.
    let ran = palm_env(
        data.path(),
        &["start", "Publish a new release", "--json"],
        &[],
    );
    assert_eq!(ran.code, 2, "{}", ran.stdout);
    assert!(
        ran.stdout.contains(r#""kind": "refused""#),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout.contains("need more than the edit ceiling"),
        "{}",
        ran.stdout
    );
}

#[test]
fn routing_sees_through_subflows_and_the_fallback_keeps_the_ceiling() {
    let data = data_dir();
    // `deploy` declares nothing itself but inlines a flow whose agent executes.
    for (name, source) in [
        (
            "ship-it",
            "name: ship-it\ntree:\n  agent: { provider: claude, prompt: ship, mode: execute }\n",
        ),
        (
            "deploy",
            "name: deploy\ndescription: deploy the release\ntags: [deploy, release]\ntree:\n  subflow: ship-it\n",
        ),
    ] {
        let file = data.path().join(format!("{name}.yaml"));
        std::fs::write(&file, source).expect("flow");
        let added = palm_env(
            data.path(),
            &["flows", "add", &file.display().to_string()],
            &[],
        );
        assert_eq!(added.code, 0, "{}", added.stderr);
    }
    let (code, doc) = route(data.path(), "deploy the release", "observe");
    assert_eq!(code, 0);
    assert!(doc["choice"].is_null(), "{doc}");
    assert_eq!(doc["refused"][0]["flow"], "deploy");
    assert_eq!(doc["refused"][0]["needs"], "execute");
    // With nothing that fits, `palm start` under observe refuses its edit fallback.
    let ran = palm_env(
        data.path(),
        &[
            "start",
            "order a pizza",
            "--authority",
            "observe",
            "--test",
            "true",
            "--json",
        ],
        &[],
    );
    assert_eq!(ran.code, 2, "{}", ran.stdout);
    assert!(
        ran.stdout.contains(r#""kind": "refused""#),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout.contains("needs edit authority"),
        "{}",
        ran.stdout
    );
}
