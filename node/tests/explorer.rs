//! The Explorer in a real browser: headless Chromium (Debian's `chromium`) driven through
//! `chromedriver` with fantoccini, against real `palm up --http` processes on loopback.
//! Answering a waiting job from the inbox; filtering the job list and reloading with the
//! filter kept; a running job turning succeeded without a reload (SSE); cancelling with a
//! confirmation; the tree page of a root with two children. Screenshots of the inbox, a
//! job page and the tree page land in `target/explorer-screenshots/`.
//!
//! Without chromium and chromedriver the tests say so and pass; under `CI=true` they fail
//! (.ci/run installs both).

mod common;

use common::{Up, data_dir, eventually, free_port, join_token, palm};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// chromedriver on a loopback port, stopped with the test.
struct Driver {
    child: Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The browser, or `None` (and a note) when this machine has none outside CI.
fn driver() -> Option<Driver> {
    let present = Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists();
    if !present {
        assert!(
            std::env::var("CI").is_err(),
            "{CHROMIUM} and {CHROMEDRIVER} are needed under CI (.ci/run installs chromium and chromium-driver)"
        );
        eprintln!("explorer browser test skipped: no {CHROMIUM} / {CHROMEDRIVER} here");
        return None;
    }
    let port = free_port();
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    // Accepting TCP is not being ready: chromedriver can drop a session request that
    // arrives before it answers `/status` with `"ready": true`.
    let ready = eventually(Duration::from_secs(10), || driver_ready(port));
    assert!(ready, "chromedriver on {port} answers /status ready");
    Some(Driver { child, port })
}

/// Whether chromedriver's `GET /status` says it can create a session.
fn driver_ready(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request =
        format!("GET /status HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200") && answer.replace(' ', "").contains("\"ready\":true")
}

async fn browser(driver: &Driver) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1200,1000", "--disable-extensions"]
        }),
    );
    // Starting Chromium is the one step outside Palm that fails now and then on a busy
    // machine (chromedriver closes the connection mid-request): try it three times.
    let mut failures = Vec::new();
    for _ in 0..3 {
        match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps.clone())
            .connect(&format!("http://127.0.0.1:{}", driver.port))
            .await
        {
            Ok(client) => return client,
            Err(error) => failures.push(format!("{error:?}")),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("a browser session, three tries: {failures:#?}");
}

/// A node with the REST API and the Explorer on a loopback port.
fn node(data: &Path, extra: &[&str]) -> (Up, String) {
    let port = free_port();
    let http = format!("127.0.0.1:{port}");
    let mut args = vec!["--http", http.as_str()];
    args.extend_from_slice(extra);
    let up = Up::start(data, &args);
    let base = format!("http://{http}");
    let reachable = eventually(Duration::from_secs(10), || {
        std::net::TcpStream::connect(&http).is_ok()
    });
    assert!(reachable, "the HTTP server listens on {http}");
    (up, base)
}

fn submit(data: &Path, flow: &str) -> String {
    let file = data.join(format!("flow-{}.yaml", free_port()));
    std::fs::write(&file, flow).expect("flow");
    let ran = palm(data, &["submit", &file.display().to_string(), "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    ran.json()["job"].as_str().expect("job").to_owned()
}

fn status(data: &Path, job: &str) -> Value {
    palm(data, &["status", job, "--json"]).json()
}

async fn wait_for(client: &Client, what: &str, check: impl AsyncFn(&Client) -> bool) {
    for _ in 0..200 {
        if check(client).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let source = client.source().await.unwrap_or_default();
    panic!("{what} never happened; the page:\n{source}");
}

fn screenshots() -> PathBuf {
    let dir = common::repo().join("target/explorer-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshots dir");
    dir
}

async fn text_of(client: &Client, css: &str) -> String {
    match client.find(Locator::Css(css)).await {
        Ok(element) => element.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

const APPROVAL: &str = "name: approval\ntree:\n  sequence:\n    - wait:\n        key: approve\n        prompt: Ship the build?\n        schema: {type: object, required: [ok], properties: {ok: {type: boolean}}}\n    - check: \"state.approve.ok\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answering_a_waiting_job_from_the_inbox() {
    let Some(driver) = driver() else { return };
    let data = data_dir();
    let (_up, base) = node(data.path(), &[]);
    let job = submit(data.path(), APPROVAL);
    let other = submit(data.path(), APPROVAL);
    let client = browser(&driver).await;
    client.goto(&format!("{base}/inbox")).await.expect("inbox");
    wait_for(&client, "both jobs listed", async |c| {
        c.source().await.unwrap_or_default().contains(&other)
    })
    .await;
    client
        .screenshot()
        .await
        .map(|png| std::fs::write(screenshots().join("inbox.png"), png))
        .expect("screenshot")
        .expect("saved");
    let yes = format!("#job-{job} button[name=ok][value=true]");
    client
        .find(Locator::Css(&yes))
        .await
        .expect("Yes")
        .click()
        .await
        .expect("click");
    // Answered in place: the card says so, the page did not reload, the other waits on.
    wait_for(&client, "the card to say it was answered", async |c| {
        c.source()
            .await
            .unwrap_or_default()
            .contains("Answered <strong>approve</strong>")
    })
    .await;
    assert!(
        client
            .find(Locator::Css(&format!("#job-{other} form")))
            .await
            .is_ok()
    );
    assert!(eventually(Duration::from_secs(10), || status(
        data.path(),
        &job
    )["status"]
        == "succeeded"));
    assert_eq!(status(data.path(), &other)["status"], "waiting");
    client.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filtering_the_job_list_survives_a_reload() {
    let Some(driver) = driver() else { return };
    let data = data_dir();
    let (_up, base) = node(data.path(), &[]);
    let waiting = submit(data.path(), APPROVAL);
    let done = submit(data.path(), "name: quick\ntree:\n  set: {a: 1}\n");
    assert!(eventually(Duration::from_secs(10), || status(
        data.path(),
        &done
    )["status"]
        == "succeeded"));
    let client = browser(&driver).await;
    client.goto(&format!("{base}/jobs")).await.expect("jobs");
    let rows = async |c: &Client| {
        c.find_all(Locator::Css("tr[data-job]"))
            .await
            .map(|r| r.len())
            .unwrap_or(0)
    };
    assert_eq!(rows(&client).await, 2);
    client
        .find(Locator::Css("select#status"))
        .await
        .expect("status filter")
        .select_by_value("waiting")
        .await
        .expect("select");
    client
        .find(Locator::Css("#flow"))
        .await
        .expect("flow")
        .send_keys("approval")
        .await
        .expect("type");
    client
        .find(Locator::XPath("//button[text()='Filter']"))
        .await
        .expect("Filter")
        .click()
        .await
        .expect("click");
    wait_for(&client, "the URL to carry the filter", async |c| {
        c.current_url()
            .await
            .map(|u| u.as_str().contains("status=waiting") && u.as_str().contains("flow=approval"))
            .unwrap_or(false)
    })
    .await;
    assert_eq!(rows(&client).await, 1);
    client.refresh().await.expect("reload");
    assert_eq!(rows(&client).await, 1, "the filter holds after a reload");
    let kept = client
        .find(Locator::Css("#flow"))
        .await
        .expect("flow")
        .prop("value")
        .await
        .expect("value");
    assert_eq!(kept.as_deref(), Some("approval"));
    let selected = client
        .find(Locator::Css("select#status"))
        .await
        .expect("select")
        .prop("value")
        .await
        .expect("value");
    assert_eq!(selected.as_deref(), Some("waiting"));
    assert!(
        client
            .source()
            .await
            .expect("source")
            .contains(&format!("data-job=\"{waiting}\""))
    );
    client.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_turns_succeeded_without_a_reload() {
    let Some(driver) = driver() else { return };
    let data = data_dir();
    let (_up, base) = node(data.path(), &[]);
    // The job runs until the test lets it finish: however slow the browser is to start,
    // the page opens on a running job.
    let go = data.path().join("go");
    let job = submit(
        data.path(),
        &format!(
            "name: slow\ntree:\n  sequence:\n    - run: {{cmd: \"while [ ! -f {} ]; do sleep 0.05; done\"}}\n    - set: {{done: true}}\n",
            go.display()
        ),
    );
    let client = browser(&driver).await;
    client
        .goto(&format!("{base}/jobs/{job}"))
        .await
        .expect("job page");
    let first = text_of(&client, "#status").await;
    assert!(
        first == "running" || first == "pending",
        "it starts running: {first}"
    );
    assert_eq!(
        client
            .find(Locator::Css("#live"))
            .await
            .expect("live")
            .attr("data-on")
            .await
            .expect("attr")
            .as_deref(),
        Some("true")
    );
    client
        .screenshot()
        .await
        .map(|png| std::fs::write(screenshots().join("job.png"), png))
        .expect("screenshot")
        .expect("saved");
    // Mark the document: a reload would lose the mark. Then let the job finish.
    client
        .execute("window.palmMark = 42; return null;", vec![])
        .await
        .expect("mark");
    std::fs::write(&go, "").expect("go");
    wait_for(&client, "the status to turn succeeded", async |c| {
        text_of(c, "#status").await == "succeeded"
    })
    .await;
    let mark = client
        .execute("return window.palmMark || null;", vec![])
        .await
        .expect("mark");
    assert_eq!(mark, json!(42), "no reload happened");
    wait_for(&client, "the live indicator to turn off", async |c| {
        c.find(Locator::Css("#live")).await.ok().is_some()
            && text_of(c, "#live").await == "not live"
    })
    .await;
    client.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_asks_for_a_confirmation_first() {
    let Some(driver) = driver() else { return };
    let data = data_dir();
    let (_up, base) = node(data.path(), &[]);
    let job = submit(data.path(), APPROVAL);
    let client = browser(&driver).await;
    client
        .goto(&format!("{base}/jobs/{job}"))
        .await
        .expect("job page");
    let cancel = Locator::XPath("//button[starts-with(text(), 'Cancel')]");
    // Dismissed: nothing happens.
    client
        .find(cancel)
        .await
        .expect("cancel")
        .click()
        .await
        .expect("click");
    wait_for(&client, "a confirmation", async |c| {
        c.get_alert_text().await.is_ok()
    })
    .await;
    let question = client.get_alert_text().await.expect("alert");
    assert!(
        question.contains(&format!("Cancel job {job}?")),
        "{question}"
    );
    client.dismiss_alert().await.expect("dismiss");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(status(data.path(), &job)["status"], "waiting");
    // Accepted: cancelled, and the page shows it.
    client
        .find(cancel)
        .await
        .expect("cancel")
        .click()
        .await
        .expect("click");
    wait_for(&client, "a confirmation", async |c| {
        c.get_alert_text().await.is_ok()
    })
    .await;
    client.accept_alert().await.expect("accept");
    wait_for(&client, "the page to show cancelled", async |c| {
        text_of(c, "#status").await == "cancelled"
    })
    .await;
    assert_eq!(status(data.path(), &job)["status"], "cancelled");
    client.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tree_page_of_a_root_with_two_children() {
    let Some(driver) = driver() else { return };
    let root_dir = data_dir();
    let listen = format!("127.0.0.1:{}", free_port());
    let (_root, base) = node(
        root_dir.path(),
        &[
            "--profile",
            "root",
            "--listen",
            &listen,
            "--name",
            "root",
            "--seats",
            "1",
        ],
    );
    assert!(eventually(Duration::from_secs(10), || root_dir
        .path()
        .join("tree/ca.cert.der")
        .is_file()));
    let mut children = Vec::new();
    let mut dirs = Vec::new();
    for name in ["edge-a", "edge-b"] {
        let dir = data_dir();
        let token = join_token(root_dir.path(), name, "edge");
        children.push(Up::start(
            dir.path(),
            &[
                "--profile",
                "edge",
                "--parent",
                &listen,
                "--token",
                &token,
                "--name",
                name,
                "--seats",
                "1",
            ],
        ));
        dirs.push(dir);
    }
    let client = browser(&driver).await;
    wait_for(&client, "both children up on the tree page", async |c| {
        if c.goto(&format!("{base}/tree")).await.is_err() {
            return false;
        }
        let source = c.source().await.unwrap_or_default();
        source.contains("edge-a")
            && source.contains("edge-b")
            && source.matches("s-up").count() >= 2
    })
    .await;
    let page = client.source().await.expect("source");
    assert!(page.contains("this node"), "the root marks itself");
    client
        .screenshot()
        .await
        .map(|png| std::fs::write(screenshots().join("tree.png"), png))
        .expect("screenshot")
        .expect("saved");
    client.close().await.expect("close");
    drop(children);
}

/// What the keyboard sees: the first Tab lands on the skip link, Enter on it moves on to
/// the content, Tab then reaches the inbox's answer buttons (each focus visibly
/// outlined), and Enter on "Yes" answers the wait, with no pointer at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_is_answered_with_the_keyboard_alone() {
    use fantoccini::actions::{InputSource, KeyAction, KeyActions};
    use fantoccini::key::Key;
    async fn press(client: &Client, key: Key) {
        let actions = KeyActions::new("keyboard".into())
            .then(KeyAction::Down { value: key.into() })
            .then(KeyAction::Up { value: key.into() });
        client.perform_actions(actions).await.expect("key press");
    }
    async fn focused(client: &Client) -> Value {
        client
            .execute(
                "const e = document.activeElement; return {tag: e.tagName, text: (e.innerText || '').trim(), \
                 name: e.getAttribute('name'), value: e.getAttribute('value'), \
                 in_main: e.closest('main') !== null, outline: getComputedStyle(e).outlineStyle};",
                vec![],
            )
            .await
            .expect("active element")
    }
    let Some(driver) = driver() else { return };
    let data = data_dir();
    let (_up, base) = node(data.path(), &[]);
    let job = submit(data.path(), APPROVAL);
    let client = browser(&driver).await;
    client.goto(&format!("{base}/inbox")).await.expect("inbox");
    wait_for(&client, "the job listed", async |c| {
        c.source().await.unwrap_or_default().contains(&job)
    })
    .await;

    press(&client, Key::Tab).await;
    let first = focused(&client).await;
    assert_eq!(first["text"], "Skip to content", "{first}");
    assert_eq!(first["outline"], "solid", "focus is visible: {first}");
    press(&client, Key::Enter).await;
    let mut path = Vec::new();
    let mut reached = None;
    for _ in 0..30 {
        press(&client, Key::Tab).await;
        let now = focused(&client).await;
        path.push(now.clone());
        if now["tag"] == "BUTTON" && now["name"] == "ok" && now["value"] == "true" {
            reached = Some(now);
            break;
        }
    }
    let yes = reached.unwrap_or_else(|| panic!("Tab never reached the Yes button: {path:?}"));
    assert_eq!(yes["outline"], "solid", "{yes}");
    assert!(
        path.iter().all(|f| f["in_main"] == true),
        "after the skip link, focus stays in the content: {path:?}"
    );
    press(&client, Key::Enter).await;
    wait_for(&client, "the card to say it was answered", async |c| {
        c.source()
            .await
            .unwrap_or_default()
            .contains("Answered <strong>approve</strong>")
    })
    .await;
    assert!(eventually(Duration::from_secs(10), || status(
        data.path(),
        &job
    )["status"]
        == "succeeded"));
    client.close().await.expect("close");
}

/// A wizard started in the CLI (two answers given, then no terminal to ask the third)
/// is finished in the browser: from the inbox's link, a page per step, the summary, the
/// commit; the job page then shows it succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wizard_started_in_the_cli_is_finished_on_the_web() {
    let Some(driver) = driver() else { return };
    let data = data_dir();
    let (_up, base) = node(data.path(), &[]);
    let started = palm(
        data.path(),
        &[
            "wizard",
            "start",
            &common::example("wizard"),
            "--set",
            "name=ledger",
            "--set",
            "language=go",
        ],
    );
    assert_eq!(
        started.code, 2,
        "no terminal for step 4: {}",
        started.stderr
    );
    let job = palm(data.path(), &["jobs", "--json"]).json()["jobs"][0]["job"]
        .as_str()
        .expect("the wizard's job")
        .to_owned();
    let client = browser(&driver).await;
    client.goto(&format!("{base}/inbox")).await.expect("inbox");
    let link = format!("a[href='/jobs/{job}/wizard']");
    wait_for(&client, "the inbox links the wizard", async |c| {
        c.find(Locator::Css(&link)).await.is_ok()
    })
    .await;
    client
        .find(Locator::Css(&link))
        .await
        .expect("link")
        .click()
        .await
        .expect("click");
    wait_for(&client, "the features step", async |c| {
        c.source().await.unwrap_or_default().contains("Step 4 of 6")
    })
    .await;
    // metrics is proposed (checked); add auth too.
    client
        .find(Locator::Css("input[type=checkbox][value='2']"))
        .await
        .expect("auth")
        .click()
        .await
        .expect("check auth");
    client
        .find(Locator::Css("button[value=answer]"))
        .await
        .expect("Next")
        .click()
        .await
        .expect("next");
    wait_for(&client, "the endpoints step", async |c| {
        c.source().await.unwrap_or_default().contains("Step 5 of 6")
    })
    .await;
    for endpoint in ["/invoices", "/credits"] {
        client
            .find(Locator::Css("#value"))
            .await
            .expect("item field")
            .send_keys(&format!("{endpoint}\n"))
            .await
            .expect("type and Enter: Add");
        let shown = format!(">{}<", endpoint.replace('/', "&#x2f;"));
        wait_for(&client, "the item listed", async |c| {
            let source = c.source().await.unwrap_or_default();
            source.contains(&shown) || source.contains(&format!(">{endpoint}<"))
        })
        .await;
    }
    client
        .find(Locator::Css("button[value=done]"))
        .await
        .expect("Done")
        .click()
        .await
        .expect("done");
    wait_for(&client, "the summary", async |c| {
        c.source()
            .await
            .unwrap_or_default()
            .contains("Your answers")
    })
    .await;
    client
        .find(Locator::Css("button[value=commit]"))
        .await
        .expect("Commit")
        .click()
        .await
        .expect("commit");
    // The job page follows the commit to its end.
    wait_for(&client, "the job page says succeeded", async |c| {
        text_of(c, "h1").await.contains("succeeded")
    })
    .await;
    let view = status(data.path(), &job);
    assert_eq!(view["status"], "succeeded");
    assert_eq!(
        view["state"]["service"],
        json!({"name": "ledger", "language": "go", "features": ["metrics", "auth"],
               "endpoints": ["/invoices", "/credits"]})
    );
    client.close().await.expect("close");
}
