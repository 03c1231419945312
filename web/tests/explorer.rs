//! The Explorer's pages over a real in-process node, with no browser (`oneshot`): the
//! inbox builds a form per wait from its schema and answers in place (htmx) or by a
//! plain post; the job list keeps its filters in the URL and folds children under
//! their parent; a job page offers what its state allows; cancel asks first; a running
//! job's page streams its status (SSE); errors are pages that say what is wrong.

mod common;

use axum::http::StatusCode;
use common::{raw, submit, world};

const APPROVAL: &str = "name: approval\ntree:\n  sequence:\n    - wait:\n        key: approve\n        prompt: Ship the build?\n        schema: {type: object, required: [ok], properties: {ok: {type: boolean}}}\n    - check: \"state.approve.ok\"\n";
const FORM: &str = "name: form\ntree:\n  wait:\n    key: details\n    schema: {type: object, required: [name, count], properties: {name: {type: string, title: Name}, count: {type: integer}, env: {enum: [prod, staging]}, urgent: {type: boolean}}}\n";
const CHILD: &str = "name: child\ntree:\n  wait: {key: go}\n";
const PARENT: &str =
    "name: parent\ntree:\n  sequence:\n    - spawn: {flow: child}\n    - wait: {key: hold}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_answers_a_wait_in_place_or_by_a_plain_post() {
    let w = world().await;
    let first = submit(&w.app, APPROVAL).await;
    let second = submit(&w.app, APPROVAL).await;
    let form = submit(&w.app, FORM).await;
    let (status, _, page) = raw(&w.app, "GET", "/inbox", &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("3 waiting"), "{page}");
    assert!(page.contains("Ship the build?"));
    // A lone boolean is two buttons; an object with several fields is labelled inputs.
    assert!(page.contains(&format!("action=\"/jobs/{first}/answer\"")));
    assert!(
        page.contains("name=\"ok\" value=\"true\">Yes</button>"),
        "{page}"
    );
    assert!(
        page.contains("<label for=\"f-") && page.contains("Name (required)"),
        "{page}"
    );
    assert!(page.contains("<option value=\"staging\">"));

    // In place (htmx): the card becomes what happened.
    let (status, _, fragment) = raw(
        &w.app,
        "POST",
        &format!("/jobs/{first}/answer"),
        &[
            ("hx-request", "true"),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        "_key=approve&ok=true",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{fragment}");
    assert!(
        fragment.contains("Answered <strong>approve</strong>"),
        "{fragment}"
    );
    assert!(!fragment.contains("<html"), "a fragment, not a page");
    // A plain post: redirected to the job.
    let (status, headers, _) = raw(
        &w.app,
        "POST",
        &format!("/jobs/{second}/answer"),
        &[],
        "_key=approve&ok=false",
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], format!("/jobs/{second}").as_str());
    // A wrong value: the form again, with what is wrong, and the job still waits.
    let (status, _, again) = raw(
        &w.app,
        "POST",
        &format!("/jobs/{form}/answer"),
        &[("hx-request", "true")],
        "_key=details&name=Ada&count=three",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        again.contains("role=\"alert\"") && again.contains("count: `three` is not a whole number"),
        "{again}"
    );
    let (status, _, _) = raw(
        &w.app,
        "POST",
        &format!("/jobs/{form}/answer"),
        &[("hx-request", "true")],
        "_key=details&name=Ada+L&count=3&env=staging&urgent=false&urgent=true",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (_, _, view) = raw(&w.app, "GET", &format!("/v1/jobs/{form}"), &[], "").await;
    let view: serde_json::Value = serde_json::from_str(&view).expect("json");
    assert_eq!(
        view["state"]["details"],
        serde_json::json!({"name": "Ada L", "count": 3, "env": "staging", "urgent": true})
    );
    // Answering what no longer waits says so.
    let (status, _, page) = raw(
        &w.app,
        "POST",
        &format!("/jobs/{first}/answer"),
        &[],
        "_key=approve&ok=true",
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(page.contains("no longer waits"), "{page}");
    let (_, _, page) = raw(&w.app, "GET", "/inbox", &[], "").await;
    assert!(page.contains("0 waiting"), "{page}");
    w.node.shutdown(std::time::Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_list_keeps_filters_in_the_url_and_folds_children() {
    let w = world().await;
    let (status, _, _) = raw(
        &w.app,
        "POST",
        "/v1/flows",
        &[],
        &serde_json::json!({"source": CHILD}).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let parent = submit(&w.app, PARENT).await;
    let lone = submit(&w.app, APPROVAL).await;
    // The child starts from the parent's step; wait until it is listed.
    let mut child = String::new();
    for _ in 0..100 {
        let (_, _, list) = raw(&w.app, "GET", "/v1/jobs?flow=child", &[], "").await;
        let list: serde_json::Value = serde_json::from_str(&list).expect("json");
        if let Some(id) = list["jobs"][0]["job"].as_str() {
            child = id.to_owned();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(!child.is_empty(), "the child job started");
    let (_, _, page) = raw(&w.app, "GET", "/jobs", &[], "").await;
    let row = |id: &str| {
        page.find(&format!("data-job=\"{id}\""))
            .unwrap_or_else(|| panic!("{id} listed: {page}"))
    };
    assert!(
        row(&parent) < row(&child),
        "the child sits under its parent"
    );
    assert!(page.contains("(1 child)"), "{page}");
    let (_, _, page) = raw(&w.app, "GET", "/jobs?status=waiting&flow=approval", &[], "").await;
    assert!(page.contains(&format!("data-job=\"{lone}\"")));
    assert!(!page.contains(&format!("data-job=\"{parent}\"")));
    assert!(
        page.contains("<option value=\"waiting\" selected>"),
        "the filter is kept: {page}"
    );
    assert!(
        page.contains("id=\"flow\" name=\"flow\" value=\"approval\""),
        "{page}"
    );
    let (_, _, page) = raw(
        &w.app,
        "GET",
        "/jobs?not_status=waiting&not_status=running",
        &[],
        "",
    )
    .await;
    assert!(!page.contains("data-job="), "everything excluded: {page}");
    assert!(page.contains("value=\"waiting\" checked"));
    let (_, _, page) = raw(&w.app, "GET", "/jobs?waiting_on=go", &[], "").await;
    assert!(
        page.contains(&format!("data-job=\"{child}\""))
            && !page.contains(&format!("data-job=\"{lone}\"")),
        "{page}"
    );
    let (status, headers, _) = raw(&w.app, "GET", &format!("/jobs?id={lone}"), &[], "").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], format!("/jobs/{lone}").as_str());
    w.node.shutdown(std::time::Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_page_offers_what_its_state_allows_and_streams_while_it_runs() {
    let w = world().await;
    let waiting = submit(&w.app, APPROVAL).await;
    let (status, _, page) = raw(&w.app, "GET", &format!("/jobs/{waiting}"), &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("Cancel…") && page.contains("hx-confirm="),
        "{page}"
    );
    assert!(
        page.contains("Ship the build?"),
        "the wait's form is on the page"
    );
    assert!(page.contains("<strong>wait</strong>"), "the tree is drawn");
    assert!(
        page.contains(&format!("/v1/jobs/{waiting}/journal")),
        "JSON download"
    );
    assert!(
        page.contains("data-on=\"false\""),
        "a waiting job is not live"
    );
    let (_, _, full) = raw(
        &w.app,
        "GET",
        &format!("/jobs/{waiting}?view=full"),
        &[],
        "",
    )
    .await;
    assert!(
        full.contains("&quot;kind&quot;: &quot;parked&quot;"),
        "{full}"
    );
    let (_, _, failed) = raw(&w.app, "GET", &format!("/jobs/{waiting}?failed=1"), &[], "").await;
    assert!(failed.contains("No event failed"), "{failed}");
    // Cancel asks first (without JavaScript: a page), then cancels.
    let (_, _, confirm) = raw(&w.app, "GET", &format!("/jobs/{waiting}/cancel"), &[], "").await;
    assert!(confirm.contains("Yes, cancel it"), "{confirm}");
    let (status, _, _) = raw(
        &w.app,
        "POST",
        &format!("/jobs/{waiting}/cancel"),
        &[],
        "reason=no",
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (_, _, page) = raw(&w.app, "GET", &format!("/jobs/{waiting}"), &[], "").await;
    assert!(
        page.contains("s-cancelled") && !page.contains("Cancel…"),
        "{page}"
    );

    let running = submit(&w.app, "name: slow\ntree:\n  run: {cmd: \"sleep 1\"}\n").await;
    let (_, _, page) = raw(&w.app, "GET", &format!("/jobs/{running}"), &[], "").await;
    assert!(
        page.contains(&format!("sse-connect=\"/jobs/{running}/live\"")),
        "{page}"
    );
    let (status, headers, stream) =
        raw(&w.app, "GET", &format!("/jobs/{running}/live"), &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "text/event-stream");
    assert!(
        stream.contains("event: status\ndata: <span class=\"badge s-running\">running</span>"),
        "{stream}"
    );
    assert!(stream.contains("s-succeeded"), "{stream}");
    assert!(
        stream.trim_end().ends_with("event: done\ndata: done"),
        "{stream}"
    );

    let (status, _, page) = raw(&w.app, "GET", "/jobs/nope", &[], "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(page.contains("unknown job `nope`"), "{page}");
    for path in ["/places", "/tree", "/assets/htmx.min.js", "/assets/sse.js"] {
        let (status, _, _) = raw(&w.app, "GET", path, &[], "").await;
        assert_eq!(status, StatusCode::OK, "{path}");
    }
    let (_, _, tree) = raw(&w.app, "GET", "/tree", &[], "").await;
    assert!(tree.contains("this node"), "{tree}");
    w.node.shutdown(std::time::Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_pages_through_many_waiting_jobs() {
    let w = world().await;
    let mut jobs = Vec::new();
    for _ in 0..55 {
        jobs.push(submit(&w.app, APPROVAL).await);
    }
    let (_, _, first) = raw(&w.app, "GET", "/inbox", &[], "").await;
    assert!(first.contains("55 waiting"), "the count is of every job");
    assert_eq!(first.matches("class=\"card\"").count(), 50);
    assert!(first.contains("jobs 1–50 of 55 (page 1 of 2)"), "{first}");
    assert!(first.contains("href=\"/inbox?page=2\" rel=\"next\""));
    assert!(
        first.contains(&format!("id=\"job-{}\"", jobs[0])),
        "oldest first"
    );
    let (_, _, second) = raw(&w.app, "GET", "/inbox?page=2", &[], "").await;
    assert_eq!(second.matches("class=\"card\"").count(), 5);
    assert!(second.contains(&format!("id=\"job-{}\"", jobs[54])));
    assert!(second.contains("rel=\"prev\""));
    w.node.shutdown(std::time::Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_like_this_and_compare_two_runs() {
    let w = world().await;
    let flow =
        "name: greet\ninput:\n  who: string\ntree:\n  set: {greeting: \"hello {{ input.who }}\"}\n";
    let (status, _, _) = raw(
        &w.app,
        "POST",
        "/v1/flows",
        &[],
        &serde_json::json!({"source": flow}).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, _, made) = raw(
        &w.app,
        "POST",
        "/v1/jobs",
        &[],
        r#"{"flow": "greet", "input": {"who": "Ada"}}"#,
    )
    .await;
    let first: serde_json::Value = serde_json::from_str(&made).expect("json");
    let first = first["job"].as_str().expect("job").to_owned();
    // The form is prefilled from the run: its flow, its revision, its input.
    let (status, _, form) = raw(&w.app, "GET", &format!("/start?from={first}"), &[], "").await;
    assert_eq!(status, StatusCode::OK, "{form}");
    assert!(form.contains("name=\"flow\" value=\"greet\""), "{form}");
    assert!(form.contains("&quot;who&quot;: &quot;Ada&quot;"), "{form}");
    assert!(form.contains("<option value=\"1\" selected>"), "{form}");
    // Not JSON: refused, the form kept.
    let (status, _, again) = raw(
        &w.app,
        "POST",
        "/start",
        &[],
        &format!("from={first}&flow=greet&revision=1&input=%7Bnope"),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(again.contains("the input is not JSON"), "{again}");
    // Changed and started: a new job with that input.
    let input = "%7B%22who%22%3A+%22Bo%22%7D";
    let (status, headers, _) = raw(
        &w.app,
        "POST",
        "/start",
        &[],
        &format!("from={first}&flow=greet&revision=1&input={input}"),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let second = headers["location"]
        .to_str()
        .expect("location")
        .trim_start_matches("/jobs/")
        .to_owned();
    assert_ne!(second, first);
    let (_, _, view) = raw(
        &w.app,
        "GET",
        &format!("/v1/jobs/{second}/wait?timeout_ms=10000"),
        &[],
        "",
    )
    .await;
    let view: serde_json::Value = serde_json::from_str(&view).expect("json");
    assert_eq!(view["input"]["who"], "Bo");
    assert_eq!(view["state"]["greeting"], "hello Bo");

    let (status, _, page) = raw(
        &w.app,
        "GET",
        &format!("/compare?a={first}&b={second}"),
        &[],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let row = |field: &str| {
        let at = page
            .find(&format!("<th scope=\"row\">{field}</th>"))
            .unwrap_or_else(|| panic!("{field}: {page}"));
        let end = page[at..].find("</tr>").expect("row end") + at;
        page[at..end].to_owned()
    };
    assert!(row("flow").contains("<td>same</td>"));
    assert!(
        row("input").contains("<td>differs</td>"),
        "{}",
        row("input")
    );
    assert!(
        row("state.greeting").contains("hello Ada") && row("state.greeting").contains("hello Bo")
    );
    assert!(row("state.greeting").contains("differs"));
    let (status, _, missing) = raw(
        &w.app,
        "GET",
        &format!("/compare?a={first}&b=nope"),
        &[],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(missing.contains("unknown job `nope`"), "{missing}");
    w.node.shutdown(std::time::Duration::ZERO).await;
}

/// Retry from a node, over REST and from the job page: the new job keeps what the
/// failed one did before the node (the build's output, not run again) and runs the
/// node again; the page of an ended job offers "Retry from here" on every node that
/// ran, and a retry's page says what it retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_is_retried_from_a_node_over_rest_and_from_its_page() {
    use common::{LOOPBACK, send};
    use serde_json::json;
    let w = world().await;
    let marker = w.data.path().join("ready");
    let flow = format!(
        "name: ship\ntree:\n  sequence:\n    - run: {{cmd: \"date +%s%N\", save: build}}\n    - run: {{cmd: \"test -f {}\"}}\n",
        marker.display()
    );
    let failed = submit(&w.app, &flow).await;
    let (_, _, done) = send(
        &w.app,
        LOOPBACK,
        "GET",
        &format!("/v1/jobs/{failed}/wait?timeout_ms=20000"),
        None,
        None,
    )
    .await;
    assert_eq!(done["status"], "failed", "{done}");

    // Refusals say what is wrong.
    let (status, _, problem) = send(
        &w.app,
        LOOPBACK,
        "POST",
        &format!("/v1/jobs/{failed}/retry"),
        Some(json!({})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    let (status, _, problem) = send(
        &w.app,
        LOOPBACK,
        "POST",
        &format!("/v1/jobs/{failed}/retry"),
        Some(json!({"from": "0.5"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("never ran"),
        "{problem}"
    );

    std::fs::write(&marker, "").expect("marker");
    let (status, _, retried) = send(
        &w.app,
        LOOPBACK,
        "POST",
        &format!("/v1/jobs/{failed}/retry"),
        Some(json!({"from": "0.1"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{retried}");
    assert_eq!(retried["retry_of"], failed.as_str());
    assert_eq!(retried["kept_inputs"], 2, "{retried}");
    let job = retried["job"].as_str().expect("job").to_owned();
    let (_, _, view) = send(
        &w.app,
        LOOPBACK,
        "GET",
        &format!("/v1/jobs/{job}/wait?timeout_ms=20000"),
        None,
        None,
    )
    .await;
    assert_eq!(view["status"], "succeeded", "{view}");
    assert_eq!(
        view["state"]["build"], done["state"]["build"],
        "the build was not run again"
    );
    // From the page: the ended job offers a retry on every node that ran.
    let (_, _, page) = raw(&w.app, "GET", &format!("/jobs/{failed}"), &[], "").await;
    assert!(
        page.contains(&format!("action=\"/jobs/{failed}/retry\""))
            && page.contains("name=\"from\" value=\"0.0\"")
            && page.contains("Retry from here"),
        "{page}"
    );
    let (status, headers, _) = raw(
        &w.app,
        "POST",
        &format!("/jobs/{failed}/retry"),
        &[("content-type", "application/x-www-form-urlencoded")],
        "from=0.0",
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let location = headers["location"].to_str().expect("location").to_owned();
    assert_ne!(
        location,
        format!("/jobs/{job}"),
        "another node, another retry"
    );
    let (_, _, page) = raw(&w.app, "GET", &location, &[], "").await;
    assert!(
        page.contains(&format!(
            "Retry of <a href=\"/jobs/{failed}\">{failed}</a> from node 0.0"
        )),
        "{page}"
    );
    // A retry node waiting out its backoff says when its next attempt starts.
    let backing_off = submit(
        &w.app,
        "name: backoff\ntree:\n  retry:\n    attempts: 3\n    backoff_ms: 600000\n    do:\n      run: {cmd: \"false\"}\n",
    )
    .await;
    let mut page = String::new();
    for _ in 0..200 {
        page = raw(&w.app, "GET", &format!("/jobs/{backing_off}"), &[], "")
            .await
            .2;
        if page.contains("Retry node 0: 1 attempt failed; attempt 2 starts in 10 min") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        page.contains("Retry node 0: 1 attempt failed; attempt 2 starts in 10 min"),
        "{page}"
    );
    assert!(
        page.contains("<td>in 10 min</td>"),
        "the timer's due time: {page}"
    );
    // A job still running offers no retry, and the API refuses one.
    let running = submit(&w.app, "name: slow\ntree:\n  run: {cmd: \"sleep 5\"}\n").await;
    let (_, _, page) = raw(&w.app, "GET", &format!("/jobs/{running}"), &[], "").await;
    assert!(!page.contains("Retry from here"), "{page}");
    let (status, _, problem) = send(
        &w.app,
        LOOPBACK,
        "POST",
        &format!("/v1/jobs/{running}/retry"),
        Some(json!({"from": "0"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert_eq!(problem["kind"], "not_ended");
    w.node.shutdown(std::time::Duration::ZERO).await;
}

/// Flows: the list, a flow's revisions with the jobs pinned to each (counted by status),
/// a diff between two revisions, the jobs pinned to the one shown, and a fresh start
/// form for a revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_page_shows_revisions_their_pinned_jobs_and_a_diff() {
    use common::{LOOPBACK, send};
    use serde_json::json;
    let w = world().await;
    let v2 = APPROVAL.replace("Ship the build?", "Ship it now?");
    let mut jobs = Vec::new();
    for source in [APPROVAL, v2.as_str()] {
        let (status, _, added) = send(
            &w.app,
            LOOPBACK,
            "POST",
            "/v1/flows",
            Some(json!({"source": source, "origin": "test.yaml"})),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{added}");
        let (status, _, view) = send(
            &w.app,
            LOOPBACK,
            "POST",
            "/v1/jobs",
            Some(json!({"flow": "approval"})),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{view}");
        jobs.push(view["job"].as_str().expect("job").to_owned());
    }
    let (_, _, list) = raw(&w.app, "GET", "/flows", &[], "").await;
    assert!(list.contains("href=\"/flows/approval\""), "{list}");

    let (status, _, page) = raw(&w.app, "GET", "/flows/approval", &[], "").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("revision 2"), "the latest is shown: {page}");
    assert!(
        page.contains(&format!("href=\"/jobs/{}\"", jobs[1]))
            && !page.contains(&format!("href=\"/jobs/{}\"", jobs[0])),
        "only the jobs pinned to revision 2: {page}"
    );
    assert!(page.contains("?rev=2&amp;diff=1"), "a diff link: {page}");

    let (_, _, diff) = raw(&w.app, "GET", "/flows/approval?rev=2&diff=1", &[], "").await;
    assert!(diff.contains("Diff: revision 1 → 2"), "{diff}");
    assert!(
        diff.contains(
            "aria-label=\"removed\">-</td><td><code>        prompt: Ship the build?</code>"
        ) && diff
            .contains("aria-label=\"added\">+</td><td><code>        prompt: Ship it now?</code>"),
        "{diff}"
    );
    let (_, _, first) = raw(&w.app, "GET", "/flows/approval?rev=1", &[], "").await;
    assert!(
        first.contains(&format!("href=\"/jobs/{}\"", jobs[0])) && first.contains("Ship the build?"),
        "{first}"
    );
    let (status, _, start) = raw(&w.app, "GET", "/start?flow=approval&revision=1", &[], "").await;
    assert_eq!(status, StatusCode::OK, "{start}");
    assert!(
        start.contains("Start a job of") && start.contains("value=\"1\" selected"),
        "{start}"
    );
    let (status, _, missing) = raw(&w.app, "GET", "/flows/nope", &[], "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
    w.node.shutdown(std::time::Duration::ZERO).await;
}

/// The places page says, per need, what no seat can take: how many effects wait, why,
/// and which jobs; vitality's `queue.blocked` carries the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_places_page_says_which_work_no_seat_can_take() {
    use common::{LOOPBACK, send};
    let w = world().await;
    let (_, _, page) = raw(&w.app, "GET", "/places", &[], "").await;
    assert!(page.contains("Every ready effect has a seat"), "{page}");
    let mut jobs = Vec::new();
    for _ in 0..2 {
        jobs.push(
            submit(
                &w.app,
                "name: gpu\ntree:\n  run: {cmd: \"true\", needs: [gpu]}\n",
            )
            .await,
        );
    }
    let (_, _, vitality) = send(&w.app, LOOPBACK, "GET", "/v1/vitality", None, None).await;
    let blocked = &vitality["queue"]["blocked"][0];
    assert_eq!(blocked["need"], "gpu", "{vitality}");
    assert_eq!(blocked["effects"], 2, "{vitality}");
    assert_eq!(blocked["jobs"].as_array().map(Vec::len), Some(2));
    let (_, _, page) = raw(&w.app, "GET", "/places", &[], "").await;
    assert!(
        page.contains("No seat can take work that needs `gpu`: 2 effects wait — no place or capability `gpu` on this node"),
        "{page}"
    );
    assert!(
        page.contains(&format!("href=\"/jobs/{}\"", jobs[0])),
        "{page}"
    );
    w.node.shutdown(std::time::Duration::ZERO).await;
}

/// A wizard on the web: one page per step, a form for each kind, back, a stale form
/// refused, a collection built item by item, the summary, then the commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wizard_is_answered_page_by_page() {
    let w = world().await;
    let job = submit(&w.app, include_str!("../../examples/wizard.yaml")).await;
    let url = format!("/jobs/{job}/wizard");
    let form = "application/x-www-form-urlencoded";
    let page = |status: StatusCode, text: &str| {
        assert!(status.is_success(), "{status}: {text}");
    };
    let post = |body: String| {
        let app = w.app.clone();
        let url = url.clone();
        async move { raw(&app, "POST", &url, &[("content-type", form)], &body).await }
    };
    // The inbox links the wizard instead of a form of its own.
    let (status, _, inbox) = raw(&w.app, "GET", "/inbox", &[], "").await;
    page(status, &inbox);
    assert!(
        inbox.contains(&format!("href=\"/jobs/{job}/wizard\"")),
        "{inbox}"
    );
    assert!(inbox.contains("wizard step 1 of 6"), "{inbox}");

    let (status, _, first) = raw(&w.app, "GET", &url, &[], "").await;
    page(status, &first);
    assert!(first.contains("Step 1 of 6"), "{first}");
    assert!(first.contains("value=\"billing\""), "the proposal: {first}");
    // An empty name is refused, with the reason on the page.
    let (status, _, refused) = post("_step=name&_move=answer&value=".into()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(refused.contains("role=\"alert\""), "{refused}");
    let (status, headers, _) = post("_step=name&_move=answer&value=ledger".into()).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], url.as_str());
    // The language: radio buttons, the proposal checked; go (index 1).
    let (_, _, language) = raw(&w.app, "GET", &url, &[], "").await;
    assert!(language.contains("Language of ledger"), "{language}");
    assert!(
        language.contains("type=\"radio\" name=\"value\" value=\"0\" checked"),
        "{language}"
    );
    post("_step=language&_move=answer&value=1".into()).await;
    // A form left open on the language step is refused once the wizard moved on.
    let (status, _, stale) = post("_step=language&_move=answer&value=0".into()).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(stale.contains("moved on"), "{stale}");
    // Features: checkboxes (the branch skipped the edition: step 4).
    let (_, _, features) = raw(&w.app, "GET", &url, &[], "").await;
    assert!(features.contains("Step 4 of 6"), "{features}");
    assert!(features.contains("type=\"checkbox\""), "{features}");
    // Back, and forward again.
    let (status, _, _) = post("_step=features&_move=back".into()).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (_, _, again) = raw(&w.app, "GET", &url, &[], "").await;
    assert!(again.contains("Step 2 of 6"), "{again}");
    post("_step=language&_move=answer&value=1".into()).await;
    post("_step=features&_move=answer&values=0&values=2".into()).await;
    // The collection: add two, remove the first, done.
    let (_, _, empty) = raw(&w.app, "GET", &url, &[], "").await;
    assert!(empty.contains("No item yet"), "{empty}");
    assert!(
        !empty.contains("value=\"done\""),
        "done needs one item: {empty}"
    );
    post("_step=endpoints&_move=add&value=/invoices".into()).await;
    post("_step=endpoints&_move=add&value=/credits".into()).await;
    post("_step=endpoints&_move=remove%3A0".into()).await;
    let (_, _, listed) = raw(&w.app, "GET", &url, &[], "").await;
    // (HTML escapes `/` as `&#x2f;`.)
    assert!(
        listed.contains(">&#x2f;credits<") && !listed.contains(">&#x2f;invoices<"),
        "{listed}"
    );
    post("_step=endpoints&_move=done".into()).await;
    // The summary, then the commit: to the job's page.
    let (_, _, summary) = raw(&w.app, "GET", &url, &[], "").await;
    assert!(summary.contains("Your answers"), "{summary}");
    assert!(
        summary.contains(
            "<th scope=\"row\">features</th><td>[&quot;metrics&quot;,&quot;auth&quot;]</td>"
        ),
        "{summary}"
    );
    let (status, headers, _) = post("_step=review&_move=commit".into()).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], format!("/jobs/{job}").as_str());
    let (status, _, done) = common::send(
        &w.app,
        common::LOOPBACK,
        "GET",
        &format!("/v1/jobs/{job}/wait?timeout_ms=30000"),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(
        done["state"]["service"],
        serde_json::json!({"name": "ledger", "language": "go",
                           "features": ["metrics", "auth"], "endpoints": ["/credits"]})
    );
    // Afterwards the page says where it ended.
    let (_, _, ended) = raw(&w.app, "GET", &url, &[], "").await;
    assert!(ended.contains("waits on no step"), "{ended}");
    w.node.shutdown(std::time::Duration::ZERO).await;
}
