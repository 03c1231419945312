//! End-to-end: `palm wizard` on the example six-step wizard (a branch and a collection)
//! through real `palm` processes — in a real terminal (tmux: keys sent, the screen read
//! back) with Esc going back, Ctrl-C quitting with 130 and `resume` in a new terminal at
//! the same step; with flags only and no terminal; across a kill -9 of the node between
//! two steps; and a commit submitted twice running once.

mod common;

use common::{Up, data_dir, example, palm, palm_bin};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// A tmux server of the test's own (its own socket), one session per terminal.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// `None` where tmux is missing (a skip; under CI a failure).
    fn new(name: &str) -> Option<Tmux> {
        let found = Command::new("tmux").arg("-V").output().is_ok();
        if !found {
            assert!(
                std::env::var("CI").is_err(),
                "tmux is missing (.ci/run installs it)"
            );
            eprintln!("tmux is not installed here; CI runs this test");
            return None;
        }
        Some(Tmux {
            socket: format!("palm-test-{}-{name}", std::process::id()),
        })
    }

    fn tmux(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("tmux")
    }

    /// Opens a terminal running `palm --data DATA ARGS`, then prints `EXIT=<code>`.
    fn open(&self, session: &str, data: &Path, args: &str) {
        let command = format!(
            "PALM_LOG=warn {} --data {} {args}; echo EXIT=$?; sleep 600",
            palm_bin(),
            data.display()
        );
        let out = self.tmux(&[
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            "140",
            "-y",
            "40",
            &command,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Esc must reach the program at once, not wait to become a meta key.
        self.tmux(&["set-option", "-g", "escape-time", "0"]);
    }

    fn keys(&self, session: &str, keys: &[&str]) {
        for key in keys {
            let literal = !matches!(*key, "Enter" | "Escape" | "C-c" | "Down" | "Up" | "Space");
            let mut args = vec!["send-keys", "-t", session];
            if literal {
                args.push("-l");
            }
            args.push(key);
            self.tmux(&args);
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    fn screen(&self, session: &str) -> String {
        String::from_utf8_lossy(
            &self
                .tmux(&["capture-pane", "-p", "-J", "-t", session])
                .stdout,
        )
        .into_owned()
    }

    /// Waits until the screen shows `text`; panics with the screen otherwise.
    fn wait_for(&self, session: &str, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let screen = self.screen(session);
            if screen.contains(text) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "`{text}` never appeared; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}

fn status(data: &Path, job: &str) -> Value {
    palm(data, &["status", job, "--json"]).json()
}

fn only_job(data: &Path) -> String {
    let jobs = palm(data, &["jobs", "--json"]).json();
    jobs["jobs"][0]["job"].as_str().expect("a job").to_owned()
}

/// The step a job waits on (`x-palm-wizard` of its wait's schema).
fn current_step(view: &Value) -> Value {
    view["waiting_on"][0]["schema"]["x-palm-wizard"].clone()
}

/// How many times the commit (the wizard's only `run`) was asked for.
fn commits(data: &Path, job: &str) -> usize {
    let journal = palm(data, &["inspect", job, "--json"]).json();
    journal["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["kind"] == "effect_requested" && e["request"].get("run").is_some())
        .count()
}

#[test]
fn a_terminal_wizard_goes_back_quits_with_130_and_resumes_elsewhere_at_the_same_step() {
    let Some(tmux) = Tmux::new("terminal") else {
        return;
    };
    let data = data_dir();
    let flow = example("wizard");
    tmux.open("one", data.path(), &format!("wizard start {flow}"));
    tmux.wait_for("one", "[step 1/6] Service name");
    tmux.keys("one", &["ledger", "Enter"]);
    tmux.wait_for("one", "[step 2/6] Language of ledger");
    tmux.keys("one", &["Enter"]); // rust, the proposal
    tmux.wait_for("one", "[step 3/6] Rust edition");
    tmux.keys("one", &["Enter"]);
    tmux.wait_for("one", "[step 4/6] Features");
    // Esc: back to the edition, which proposes the answer given.
    tmux.keys("one", &["Escape"]);
    let screen = tmux.wait_for("one", "<canceled>");
    assert!(
        screen.matches("[step 3/6] Rust edition").count() >= 2,
        "{screen}"
    );
    tmux.keys("one", &["Up", "Enter"]); // 2021 this time
    tmux.wait_for("one", "[step 4/6] Features");
    tmux.keys("one", &["Enter"]);
    tmux.wait_for("one", "[step 5/6] Endpoints");
    tmux.keys("one", &["Enter"]); // Add an item
    tmux.wait_for("one", "Item");
    tmux.keys("one", &["/invoices", "Enter"]);
    tmux.wait_for("one", "Remove #1: /invoices");
    // Ctrl-C: quit, the draft kept.
    tmux.keys("one", &["C-c"]);
    let screen = tmux.wait_for("one", "EXIT=");
    assert!(screen.contains("EXIT=130"), "{screen}");
    assert!(
        screen.contains("the draft is kept: palm wizard resume"),
        "{screen}"
    );

    let job = only_job(data.path());
    let view = status(data.path(), &job);
    assert_eq!(view["status"], "waiting");
    assert_eq!(current_step(&view)["step"], "endpoints");
    assert_eq!(
        view["state"]["service"],
        json!({"name": "ledger", "language": "rust", "edition": "2021",
               "features": ["metrics"], "endpoints": ["/invoices"]})
    );
    assert_eq!(
        commits(data.path(), &job),
        0,
        "nothing runs before the commit"
    );

    // Another terminal: the same step, the item still there.
    tmux.open("two", data.path(), &format!("wizard resume {job}"));
    tmux.wait_for("two", "[step 5/6] Endpoints");
    tmux.wait_for("two", "Edit #1: /invoices");
    tmux.keys("two", &["Enter"]); // Done (1 items)
    let screen = tmux.wait_for("two", "Commit these answers?");
    assert!(
        screen.contains("the same without questions: palm wizard start"),
        "{screen}"
    );
    tmux.keys("two", &["y", "Enter"]);
    let screen = tmux.wait_for("two", "EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    let view = status(data.path(), &job);
    assert_eq!(view["status"], "succeeded");
    assert!(
        view["state"]["created"]["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("created ledger (rust) with 1 endpoints"),
        "{view}"
    );
    // Committed again: refused, and the commit ran once.
    let again = palm(
        data.path(),
        &[
            "continue",
            &job,
            "--key",
            "service",
            "--input",
            r#"{"commit": true}"#,
        ],
    );
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert_eq!(commits(data.path(), &job), 1);
}

#[test]
fn without_a_terminal_flags_answer_every_step_and_a_crash_between_steps_loses_nothing() {
    let data = data_dir();
    let flow = example("wizard");
    let up = Up::start(data.path(), &[]);
    // Nothing to answer with: exit 2, naming the flags still missing.
    let missing = palm(data.path(), &["wizard", "start", &flow]);
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    assert!(
        missing
            .stderr
            .contains("still missing: --set name=… --set language=…"),
        "{}",
        missing.stderr
    );
    // With --json, the error names the job to go on with, as the hint does.
    let missing = palm(data.path(), &["wizard", "start", &flow, "--json"]);
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    let error = missing.json()["error"].clone();
    assert_eq!(error["kind"], "missing_answer", "{error}");
    let job = error["job"].as_str().expect("error.job").to_owned();
    assert!(
        error["hint"].as_str().unwrap_or_default().contains(&job),
        "{error}"
    );
    assert_eq!(status(data.path(), &job)["status"], "waiting");
    // Two answers given, the third step missing: both are kept.
    let partial = palm(
        data.path(),
        &[
            "wizard",
            "start",
            &flow,
            "--set",
            "name=ledger",
            "--set",
            "language=go",
        ],
    );
    assert_eq!(partial.code, 2, "{}", partial.stderr);
    assert!(
        partial.stderr.contains("step 4/6 `features`"),
        "{}",
        partial.stderr
    );
    let jobs = palm(data.path(), &["jobs", "--json"]).json();
    let job = jobs["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| {
            status(data.path(), j["job"].as_str().unwrap_or(""))["state"]["service"]["name"]
                == "ledger"
        })
        .and_then(|j| j["job"].as_str())
        .expect("the partial wizard")
        .to_owned();
    // kill -9 between two steps, then a new node: no answer lost.
    up.kill9();
    let up = Up::start(data.path(), &[]);
    let view = status(data.path(), &job);
    assert_eq!(view["status"], "waiting");
    assert_eq!(current_step(&view)["step"], "features");
    assert_eq!(
        view["state"]["service"],
        json!({"name": "ledger", "language": "go"})
    );
    // A wrong answer is refused with the step named; nothing changes.
    let wrong = palm(
        data.path(),
        &["wizard", "resume", &job, "--set", "features=cobol", "--yes"],
    );
    assert_eq!(wrong.code, 2);
    assert!(wrong.stderr.contains("step `features`"), "{}", wrong.stderr);
    // The rest by flags and proposals.
    let done = palm(
        data.path(),
        &[
            "--json",
            "wizard",
            "resume",
            &job,
            "--set",
            "features=metrics,auth",
            "--set",
            "endpoints=/invoices",
            "--set",
            "endpoints=/credits",
            "--yes",
        ],
    );
    assert_eq!(done.code, 0, "{}", done.stderr);
    let out = done.json();
    assert_eq!(out["status"], "succeeded");
    assert_eq!(
        out["answers"],
        json!({"name": "ledger", "language": "go", "features": ["metrics", "auth"],
               "endpoints": ["/invoices", "/credits"]})
    );
    assert_eq!(commits(data.path(), &job), 1);
    drop(up);
}

/// Every question is a flag down to a field: an object answer by `--set STEP.FIELD=`, a
/// collection of objects item by item (a field given again starts the next item); a
/// step left unanswered names its fields.
#[test]
fn object_answers_and_collections_of_objects_are_flags_field_by_field() {
    let data = data_dir();
    let flow = data.path().join("service.yaml");
    std::fs::write(
        &flow,
        "name: service\ntree:\n  wizard:\n    key: s\n    steps:\n      - input:\n          id: owner\n          schema: {type: object, properties: {name: {type: string}, age: {type: integer}}, required: [name, age]}\n      - collection:\n          id: eps\n          item: {type: object, properties: {path: {type: string}, method: {type: string}}, required: [path, method]}\n          min: 1\n      - summary: { id: sum }\n    commit:\n      run: { cmd: \"true\" }\n",
    )
    .expect("flow");
    let flow = flow.display().to_string();
    let _up = Up::start(data.path(), &[]);
    let missing = palm(data.path(), &["wizard", "start", &flow]);
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    assert!(
        missing
            .stderr
            .contains("--set owner.age=… --set owner.name=…"),
        "{}",
        missing.stderr
    );
    let halfway = palm(
        data.path(),
        &[
            "wizard",
            "start",
            &flow,
            "--set",
            "owner.name=ann",
            "--set",
            "owner.age=3",
        ],
    );
    assert_eq!(halfway.code, 2, "{}", halfway.stderr);
    assert!(
        halfway
            .stderr
            .contains("--set eps.method=… --set eps.path=…"),
        "{}",
        halfway.stderr
    );
    let done = palm(
        data.path(),
        &[
            "wizard",
            "start",
            &flow,
            "--set",
            "owner.name=ann",
            "--set",
            "owner.age=3",
            "--set",
            "eps.path=/a",
            "--set",
            "eps.method=GET",
            "--set",
            "eps.path=/b",
            "--set",
            "eps.method=POST",
            "--yes",
            "--json",
        ],
    );
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_eq!(
        done.json()["answers"],
        json!({"owner": {"name": "ann", "age": 3},
               "eps": [{"path": "/a", "method": "GET"}, {"path": "/b", "method": "POST"}]})
    );
    // A flow that asks nothing is no wizard: refused before anything starts.
    let plain = data.path().join("plain.yaml");
    std::fs::write(&plain, "name: plain\ntree:\n  set: { a: 1 }\n").expect("flow");
    let jobs_before = palm(data.path(), &["jobs", "--json"]).json()["jobs"].clone();
    let refused = palm(
        data.path(),
        &["wizard", "start", &plain.display().to_string(), "--json"],
    );
    assert_eq!(refused.code, 2, "{}", refused.stdout);
    assert_eq!(refused.json()["error"]["kind"], "not_a_wizard");
    assert_eq!(
        palm(data.path(), &["jobs", "--json"]).json()["jobs"],
        jobs_before
    );
}

/// `palm top` in a terminal redraws the node in place (a job submitted meanwhile shows
/// up without a keypress) and quits on Ctrl-C with 0; `--once` prints one snapshot.
#[test]
fn palm_top_redraws_in_place_and_once_prints_a_snapshot() {
    let Some(tmux) = Tmux::new("top") else {
        return;
    };
    let data = data_dir();
    let _up = Up::start(data.path(), &[]);
    let first = palm(data.path(), &["wizard", "start", &example("wizard")]);
    assert_eq!(first.code, 2);
    tmux.open("top", data.path(), "top --every 300ms");
    let screen = tmux.wait_for("top", "1 job(s) wait for input");
    assert!(screen.contains("wizard step 1/6 `name`"), "{screen}");
    assert!(screen.contains("Ctrl-C quits"), "{screen}");
    let approval = palm(data.path(), &["submit", &example("approval")]);
    assert_eq!(approval.code, 0);
    let screen = tmux.wait_for("top", "2 job(s) wait for input");
    assert!(screen.contains("on approve"), "{screen}");
    tmux.keys("top", &["C-c"]);
    let screen = tmux.wait_for("top", "EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    // Without a terminal: one snapshot, and the same as JSON.
    let once = palm(data.path(), &["status"]);
    assert_eq!(once.code, 0);
    assert!(
        once.stdout.contains("2 job(s) wait for input"),
        "{}",
        once.stdout
    );
    let json = palm(data.path(), &["top", "--json"]).json();
    assert_eq!(json["waiting"]["total"], 2);
    assert_eq!(json["vitality"]["running"], true);
}
