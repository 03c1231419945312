//! End-to-end tests of `palm mcp`: raw JSON-RPC over stdio (bad input, the size bound,
//! cancellation, protocol versions), the official MCP Python SDK driving the approval
//! example (when `.ci/run` installed it), streamable HTTP behind its token, and
//! `palm mcp install`.

mod common;
#[path = "../../tests/support/tool.rs"]
mod tool;

use common::{data_dir, example, palm, palm_bin, repo};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// A `palm mcp` process spoken to line by line.
struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Messages read while waiting for another id.
    seen: Vec<Value>,
}

impl Session {
    fn start(data: &Path) -> Session {
        Session::start_env(data, &[])
    }

    fn start_env(data: &Path, env: &[(&str, &str)]) -> Session {
        let mut child = Command::new(palm_bin())
            .arg("--data")
            .arg(data)
            .args(["mcp", "--seats", "2"])
            .envs(env.iter().copied())
            .env_remove("PALM_HOME")
            .env("PALM_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn palm mcp");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take();
        let (sender, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Session {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write");
        stdin.write_all(b"\n").expect("write");
        stdin.flush().expect("flush");
    }

    fn send(&mut self, message: Value) {
        self.send_raw(message.to_string().as_bytes());
    }

    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.answer(id, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("no answer to {method} (id {id}); seen {:?}", self.seen))
    }

    fn call(&mut self, id: u64, tool: &str, arguments: Value) -> Value {
        self.request(
            id,
            "tools/call",
            json!({"name": tool, "arguments": arguments}),
        )
    }

    /// The response with this id, if it comes within `timeout`. Every line on stdout
    /// must be JSON-RPC.
    fn answer(&mut self, id: u64, timeout: Duration) -> Option<Value> {
        if let Some(at) = self.seen.iter().position(|m| m["id"] == id) {
            return Some(self.seen.remove(at));
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let message: Value = serde_json::from_str(&line)
                        .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:?}"));
                    assert_eq!(message["jsonrpc"], "2.0", "{message}");
                    if message["id"] == id && message.get("method").is_none() {
                        return Some(message);
                    }
                    self.seen.push(message);
                }
                Err(RecvTimeoutError::Timeout) => return None,
                Err(RecvTimeoutError::Disconnected) => panic!("palm mcp closed stdout"),
            }
        }
    }

    fn initialize(&mut self, version: &str) -> Value {
        let answer = self.request(
            1,
            "initialize",
            json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}),
        );
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        answer
    }

    /// Closes stdin and waits for the process to exit.
    fn close(mut self) -> i32 {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code().unwrap_or(-1);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        panic!("palm mcp did not exit after stdin closed");
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn text(result: &Value) -> String {
    result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn stdio_sessions_survive_bad_input_oversized_requests_and_cancellation() {
    let data = data_dir();
    let mut session = Session::start(data.path());
    // Text that is not JSON, even before `initialize`, is a parse error; the session
    // goes on.
    session.send_raw(b"{not json before initialize");
    // The version the client asks for, when rmcp knows it.
    let init = session.initialize("2024-11-05");
    assert_eq!(init["result"]["protocolVersion"], "2024-11-05", "{init}");
    assert_eq!(init["result"]["serverInfo"]["name"], "palm");

    // Text that is not JSON is answered with JSON-RPC's parse error (id null); JSON that
    // is not a message is an error.
    session.send_raw(b"this is not json");
    session.send_raw(br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":"nope"}"#);
    let shapeless = session.answer(2, Duration::from_secs(10));
    let ping = session.request(3, "ping", json!({}));
    assert_eq!(ping["result"], json!({}), "{ping}");
    if let Some(shapeless) = shapeless {
        assert!(shapeless.get("error").is_some(), "{shapeless}");
    }
    let parse_errors = session
        .seen
        .iter()
        .filter(|m| m["id"].is_null() && m["error"]["code"] == -32700)
        .count();
    assert_eq!(parse_errors, 2, "{:?}", session.seen);

    // A bad argument is a tool error naming the field.
    let bad = session.call(4, "palm_jobs", json!({"limit": "ten"}));
    assert_eq!(bad["result"]["isError"], true, "{bad}");
    assert!(text(&bad).contains("argument `limit`"), "{bad}");
    assert!(text(&bad).contains("palm_jobs takes {"), "{bad}");
    let unknown = session.call(5, "palm_explode", json!({}));
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let missing = session.request(6, "resources/read", json!({"uri": "palm://jobs/nope-1"}));
    assert!(missing.get("error").is_some(), "{missing}");

    // A request over the bound is refused with its id; the session goes on.
    let pad = "x".repeat(4 << 20);
    let huge = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "palm_flows", "arguments": {"action": "validate", "source": pad}}});
    session.send(huge);
    let refused = session
        .answer(7, Duration::from_secs(30))
        .expect("the oversized request is answered");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("REQUEST_BYTES_MAX")),
        "{refused}"
    );
    let ping = session.request(8, "ping", json!({}));
    assert_eq!(ping["result"], json!({}));

    // Cancelling an in-flight call: no answer comes for it, the session goes on, and
    // the job it started keeps running.
    session.send(
        json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "palm_submit",
        "arguments": {"source": "name: long\ntree:\n  sleep: 60s\n", "wait": true}}}),
    );
    let mut started = false;
    for round in 0..200 {
        let jobs = session.call(100 + round, "palm_jobs", json!({"status": "running"}));
        if jobs["result"]["structuredContent"]["jobs"]
            .as_array()
            .is_some_and(|j| j.iter().any(|j| j["flow"] == "long"))
        {
            started = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(started, "the long job never started");
    session.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 9, "reason": "test"}}),
    );
    let ping = session.request(10, "ping", json!({}));
    assert_eq!(ping["result"], json!({}));
    assert!(
        session.answer(9, Duration::from_millis(1_500)).is_none(),
        "a cancelled request was answered"
    );
    let running = session.call(11, "palm_jobs", json!({"status": "running"}));
    let long = running["result"]["structuredContent"]["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|j| j["flow"] == "long").cloned())
        .expect("the job of the cancelled call goes on");
    let cancelled = session.call(12, "palm_cancel", json!({"job": long["job"]}));
    assert_eq!(
        cancelled["result"]["structuredContent"]["status"], "cancelled",
        "{cancelled}"
    );
    // An ended job is retried from a node, as a new job; asking again answers the same.
    let retried = session.call(20, "palm_retry", json!({"job": long["job"], "from": "0"}));
    let retry = &retried["result"]["structuredContent"];
    assert_eq!(retry["retry_of"], long["job"], "{retried}");
    assert_eq!(retry["existing"], false, "{retried}");
    let again = session.call(21, "palm_retry", json!({"job": long["job"], "from": "0"}));
    assert_eq!(again["result"]["structuredContent"]["job"], retry["job"]);
    assert_eq!(again["result"]["structuredContent"]["existing"], true);

    // The prompt and its argument check.
    let prompts = session.request(13, "prompts/list", json!({}));
    assert_eq!(prompts["result"]["prompts"][0]["name"], "palm_goal");
    let no_goal = session.request(14, "prompts/get", json!({"name": "palm_goal"}));
    assert!(no_goal.get("error").is_some(), "{no_goal}");

    // Closing stdin ends the session and stops the embedded node (its lock is free).
    assert_eq!(session.close(), 0);
    let after = palm(data.path(), &["jobs", "--json"]);
    assert_eq!(after.code, 0, "{}", after.stderr);
}

#[test]
fn tools_answer_structured_content_and_text() {
    let data = data_dir();
    let mut session = Session::start(data.path());
    session.initialize("2025-06-18");
    let listed = session.request(2, "tools/list", json!({}));
    let tools = listed["result"]["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(tools.len(), 19, "{listed}");
    for tool in &tools {
        assert!(tool["outputSchema"].is_object(), "{tool}");
        assert_eq!(tool["inputSchema"]["additionalProperties"], false, "{tool}");
    }
    let submitted = session.call(
        3,
        "palm_submit",
        json!({"flow": example("hello"), "wait": true, "timeout": "60s"}),
    );
    let value = &submitted["result"]["structuredContent"];
    assert_eq!(value["status"], "succeeded", "{submitted}");
    assert_eq!(value["settled"], true);
    assert!(text(&submitted).starts_with("job "), "{submitted}");
    let flows = session.call(
        4,
        "palm_flows",
        json!({"action": "validate", "source": "name: x\ntree:\n  sequnce: []\n"}),
    );
    assert_eq!(
        flows["result"]["structuredContent"]["valid"], false,
        "{flows}"
    );
    assert!(
        flows["result"]["structuredContent"]["errors"][0]["line"].is_number(),
        "{flows}"
    );
    let tree = session.call(5, "palm_tree", json!({}));
    assert_eq!(
        tree["result"]["structuredContent"]["nodes"][0]["self"], true,
        "{tree}"
    );
    let vitality = session.call(6, "palm_vitality", json!({}));
    assert!(
        vitality["result"]["structuredContent"]["seats"].is_object(),
        "{vitality}"
    );
    let places = session.call(7, "palm_places", json!({}));
    assert_eq!(places["result"]["isError"], false, "{places}");
    // The session memory: an empty archive answers no hits; an unknown session is a
    // tool error that names it.
    let recall = session.call(9, "palm_recall", json!({"query": "lease renewal"}));
    assert_eq!(recall["result"]["isError"], false, "{recall}");
    assert_eq!(
        recall["result"]["structuredContent"]["hits"],
        json!([]),
        "{recall}"
    );
    let missing = session.call(10, "palm_session", json!({"id": "nope"}));
    assert_eq!(missing["result"]["isError"], true, "{missing}");
    assert!(
        missing.to_string().contains("no session `nope`"),
        "{missing}"
    );
    // The knowledge map of a repository: a brief within its budget, a search, and a
    // clear error when asked for neither.
    let checkout = common::git_repo(&[
        (
            "Cargo.toml",
            "[package]\nname = \"jobs\"\nversion = \"0.1.0\"\n",
        ),
        (
            "src/lib.rs",
            "//! Durable storage of jobs.\n\npub fn open_store() {}\n",
        ),
    ]);
    let repo_text = checkout.path().display().to_string();
    let brief = session.call(
        11,
        "palm_knowledge",
        json!({"repo": repo_text, "module": "jobs", "max_bytes": 600}),
    );
    assert_eq!(brief["result"]["isError"], false, "{brief}");
    let content = &brief["result"]["structuredContent"];
    assert!(
        content["bytes"].as_u64().is_some_and(|b| b <= 600),
        "{brief}"
    );
    assert!(
        content["text"]
            .as_str()
            .is_some_and(|t| t.contains("src/lib.rs:3")),
        "{brief}"
    );
    let found = session.call(
        12,
        "palm_knowledge",
        json!({"repo": repo_text, "query": "open store"}),
    );
    assert_eq!(
        found["result"]["structuredContent"]["hits"][0]["id"], "jobs",
        "{found}"
    );
    let neither = session.call(13, "palm_knowledge", json!({"repo": repo_text}));
    assert_eq!(neither["result"]["isError"], true, "{neither}");
    let card = session.request(8, "resources/read", json!({"uri": "palm://agent/card"}));
    assert!(
        card["result"]["contents"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("palm_assist")),
        "{card}"
    );
    assert_eq!(session.close(), 0);
}

fn python() -> Option<PathBuf> {
    let python = std::env::var_os("PALM_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/py-venv/bin/python"));
    if !python.exists() {
        tool::missing(
            &format!("the MCP Python SDK's Python ({})", python.display()),
            "run .ci/run, or set PALM_MCP_PYTHON",
        );
        return None;
    }
    let probe = Command::new(&python)
        .args(["-c", "import mcp.client.stdio"])
        .output();
    if !probe.is_ok_and(|probe| probe.status.success()) {
        tool::missing(
            &format!("the MCP Python SDK (in {})", python.display()),
            "pip install mcp==2.3.0; .ci/run does it",
        );
        return None;
    }
    Some(python)
}

/// Runs `tests/mcp/SCRIPT` (an MCP Python SDK client) against `palm mcp` on `data` with
/// an example flow; answers the JSON report it prints.
fn python_client(python: &Path, script: &str, data: &Path, flow: &str) -> Value {
    let output = Command::new(python)
        .arg(repo().join("tests/mcp").join(script))
        .arg(palm_bin())
        .arg(data)
        .arg(example(flow))
        .env_remove("PALM_HOME")
        .output()
        .expect("run the python client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{script} failed:\n{stdout}\n{stderr}"
    );
    serde_json::from_str(stdout.trim()).expect("report")
}

#[test]
fn the_python_sdk_drives_the_approval_example() {
    let Some(python) = python() else { return };
    let data = data_dir();
    let report = python_client(&python, "client.py", data.path(), "approval");
    assert_eq!(report["final_status"], "succeeded", "{report}");
    assert_eq!(report["cli_status"], "waiting", "{report}");
    assert_eq!(report["unknown_tool_code"], -32602, "{report}");
    assert!(
        report["progress_notifications"].as_u64() >= Some(2),
        "{report}"
    );
    // The job is in the store the CLI reads, after the session ended too.
    let job = report["job"].as_str().expect("job id");
    let status = palm(data.path(), &["status", job, "--json"]);
    assert_eq!(status.json()["status"], "succeeded");
}

#[test]
fn the_python_sdk_completes_the_example_wizard() {
    let Some(python) = python() else { return };
    let data = data_dir();
    let report = python_client(&python, "wizard.py", data.path(), "wizard");
    assert_eq!(
        report["answers"],
        json!({"name": "ledger", "language": "go", "features": ["tracing"],
               "endpoints": ["/invoices", "/credits"]}),
        "{report}"
    );
    assert_eq!(
        report["created"], "created ledger (go) with 2 endpoints\n",
        "{report}"
    );
    // The CLI sees the ended wizard after the session.
    let job = report["job"].as_str().expect("job id");
    let status = palm(data.path(), &["status", job, "--json"]);
    assert_eq!(status.json()["status"], "succeeded");
}

/// A POST to the MCP endpoint (see `common::http`).
fn http(port: u16, path: &str, token: Option<&str>, body: &str, until: &str) -> (u16, String) {
    common::http(port, "POST", path, token, body, until)
}

#[test]
fn streamable_http_needs_the_bearer_token() {
    let data = data_dir();
    let refused = palm(data.path(), &["mcp", "--http", "0.0.0.0:0"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("not a loopback address"),
        "{}",
        refused.stderr
    );

    let mut child = Command::new(palm_bin())
        .arg("--data")
        .arg(data.path())
        .args(["mcp", "--http", "127.0.0.1:0", "--seats", "1"])
        .env_remove("PALM_HOME")
        .env_remove("PALM_MCP_TOKEN")
        .env("PALM_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut port = None;
    let mut line = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while port.is_none() && Instant::now() < deadline {
        line.clear();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if let Some(rest) = line.split("http://127.0.0.1:").nth(1) {
            port = rest.split('/').next().and_then(|p| p.parse::<u16>().ok());
        }
    }
    let port = port.unwrap_or_else(|| panic!("no listening line on stderr: {line}"));
    assert!(
        line.contains("mcp-token"),
        "the token's place is printed: {line}"
    );
    let token = std::fs::read_to_string(data.path().join("mcp-token")).expect("token file");
    let token = token.trim();

    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}})
    .to_string();
    let (status, _) = http(port, "/mcp", None, &initialize, "\r\n\r\n");
    assert_eq!(status, 401);
    let (status, _) = http(port, "/mcp", Some("wrong"), &initialize, "\r\n\r\n");
    assert_eq!(status, 401);
    let (status, _) = http(port, "/elsewhere", Some(token), &initialize, "\r\n\r\n");
    assert_eq!(status, 404);
    let (status, body) = http(port, "/mcp", Some(token), &initialize, "protocolVersion");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("\"protocolVersion\":\"2025-03-26\""),
        "{body}"
    );
    assert!(body.contains("\"name\":\"palm\""), "{body}");

    // A connection that never finishes its request head is closed, not held.
    let mut silent = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    silent
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127")
        .expect("write");
    silent
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    let started = Instant::now();
    let mut rest = Vec::new();
    let closed = silent.read_to_end(&mut rest);
    assert!(
        closed.is_ok(),
        "closed by the server, not by our timeout: {closed:?}"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(palm_mcp::http::HEADER_READ_MS - 1_000)
            && waited < Duration::from_secs(25),
        "closed after {waited:?}"
    );

    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("palm mcp --http did not stop on SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(code, Some(0));
}

#[test]
fn install_prints_and_merges_without_touching_other_entries() {
    let data = data_dir();
    let printed = palm(data.path(), &["mcp", "install", "--client", "claude"]);
    assert_eq!(printed.code, 0, "{}", printed.stderr);
    assert!(
        printed.stdout.contains("\"mcpServers\""),
        "{}",
        printed.stdout
    );
    assert!(
        printed
            .stdout
            .contains("claude mcp add --scope project palm -- "),
        "{}",
        printed.stdout
    );

    let config = data.path().join("codex.toml");
    let mine = "# mine\nmodel = \"o3\"\n\n[mcp_servers.other]\ncommand = \"x\"\n";
    std::fs::write(&config, mine).expect("write");
    let config_arg = config.display().to_string();
    let args = [
        "mcp",
        "install",
        "--client",
        "codex",
        "--write",
        "--config",
        &config_arg,
    ];
    let wrote = palm(data.path(), &args);
    assert_eq!(wrote.code, 0, "{}", wrote.stderr);
    let merged = std::fs::read_to_string(&config).expect("read");
    assert!(merged.starts_with(mine), "{merged}");
    assert!(merged.contains("[mcp_servers.palm]"), "{merged}");
    assert!(merged.contains("args = [\"mcp\", \"--data\""), "{merged}");
    let again = palm(data.path(), &args);
    assert!(
        again.stdout.contains("already registered"),
        "{}",
        again.stdout
    );

    // Another data directory differs from the entry there: refused without --force.
    let other = data_dir();
    let clash = palm(other.path(), &args);
    assert_eq!(clash.code, 2, "{}", clash.stdout);
    assert!(clash.stderr.contains("--force"), "{}", clash.stderr);
    assert_eq!(std::fs::read_to_string(&config).expect("read"), merged);

    let claude = data.path().join("mcp.json");
    std::fs::write(&claude, r#"{"mcpServers": {"other": {"command": "x"}}}"#).expect("write");
    let claude_arg = claude.display().to_string();
    let wrote = palm(
        data.path(),
        &[
            "mcp",
            "install",
            "--client",
            "claude",
            "--write",
            "--config",
            &claude_arg,
        ],
    );
    assert_eq!(wrote.code, 0, "{}", wrote.stderr);
    let value: Value =
        serde_json::from_str(&std::fs::read_to_string(&claude).expect("read")).expect("json");
    assert_eq!(value["mcpServers"]["other"]["command"], "x");
    assert_eq!(value["mcpServers"]["palm"]["args"][0], "mcp");
}

#[test]
fn a_session_attaches_to_a_running_node_and_takes_over_when_it_stops() {
    let data = data_dir();
    let up = common::Up::start(data.path(), &["--seats", "1"]);
    let mut session = Session::start(data.path());
    session.initialize("2025-11-25");
    let vitality = session.call(2, "palm_vitality", json!({}));
    let value = &vitality["result"]["structuredContent"];
    assert_eq!(
        value["embedded"], false,
        "attached to `palm up`: {vitality}"
    );
    assert_eq!(value["pid"], up.pid(), "{vitality}");
    let submitted = session.call(3, "palm_submit", json!({"flow": example("approval")}));
    let job = submitted["result"]["structuredContent"]["job"]
        .as_str()
        .expect("job")
        .to_owned();
    // The node the session was attached to stops; the next call boots an embedded one
    // on the same data, and the parked job is still there to continue.
    let (code, _) = up.terminate();
    assert_eq!(code, 0);
    let mut continued = Value::Null;
    for round in 0..100 {
        continued = session.call(
            10 + round,
            "palm_continue",
            json!({"job": job, "key": "approve", "input": {"ok": true}, "wait": true, "timeout": "60s"}),
        );
        // The job may not have parked yet when the node stopped; it parks on the next.
        if continued["result"]["isError"] != true {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        continued["result"]["structuredContent"]["status"], "succeeded",
        "{continued}"
    );
    let vitality = session.call(200, "palm_vitality", json!({}));
    assert_eq!(
        vitality["result"]["structuredContent"]["embedded"], true,
        "{vitality}"
    );
    assert_eq!(session.close(), 0);
}

#[test]
fn palm_tree_shows_the_node_and_the_children_it_links_to() {
    let root_dir = data_dir();
    let child_dir = data_dir();
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("port")
        .port();
    let listen = format!("127.0.0.1:{port}");
    let _root = common::Up::start(
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
    let token = palm(
        root_dir.path(),
        &[
            "token", "create", "--name", "edge-1", "--role", "edge", "--json",
        ],
    );
    assert_eq!(token.code, 0, "{}", token.stderr);
    let token = token.json()["token"].as_str().expect("token").to_owned();
    let _child = common::Up::start(
        child_dir.path(),
        &[
            "--profile",
            "edge",
            "--parent",
            &listen,
            "--token",
            &token,
            "--name",
            "edge-1",
            "--seats",
            "1",
        ],
    );
    let mut session = Session::start(root_dir.path());
    session.initialize("2025-11-25");
    let mut tree = Value::Null;
    for round in 0..200 {
        tree = session.call(2 + round, "palm_tree", json!({}));
        let nodes = &tree["result"]["structuredContent"]["nodes"];
        if nodes[1]["state"] == "up" {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let nodes = &tree["result"]["structuredContent"]["nodes"];
    assert_eq!(nodes[0]["self"], true, "{tree}");
    assert_eq!(nodes[0]["role"], "root", "{tree}");
    assert_eq!(nodes[1]["node"], "edge-1", "{tree}");
    assert_eq!(nodes[1]["relation"], "child", "{tree}");
    assert_eq!(nodes[1]["state"], "up", "{tree}");
    assert!(text(&tree).contains("child edge-1 up"), "{tree}");
    assert_eq!(session.close(), 0);
}

/// An agent run and its patch over MCP: palm_agent_run waits for the end state,
/// palm_patches lists, shows and applies what it left.
#[test]
fn an_agent_runs_and_its_patch_lands_over_mcp() {
    let data = data_dir();
    let repo = tempfile::tempdir().expect("repo");
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .arg("-C")
            .arg(repo.path())
            .args(args)
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["config", "user.email", "t@t"]);
    git(&["config", "user.name", "t"]);
    std::fs::write(repo.path().join("a.txt"), "one\n").expect("write");
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "first"]);
    let path = format!(
        "{}:{}",
        common::repo().join("node/tests/fixtures/agents").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut session = Session::start_env(data.path(), &[("PATH", path.as_str())]);
    session.initialize("2025-06-18");
    let ran = session.call(
        2,
        "palm_agent_run",
        json!({"provider": "claude", "prompt": "EDIT a.txt from-mcp", "repo": repo.path().display().to_string(), "timeout": "1m"}),
    );
    let value = &ran["result"]["structuredContent"];
    assert_eq!(value["result"]["end"], "success", "{ran}");
    let id = value["result"]["patch"]["id"]
        .as_str()
        .expect("patch")
        .to_owned();
    let relative = session.call(
        3,
        "palm_agent_run",
        json!({"provider": "claude", "prompt": "x", "repo": "relative/dir"}),
    );
    assert_eq!(relative["result"]["isError"], true, "{relative}");
    let listed = session.call(4, "palm_patches", json!({"action": "list"}));
    assert_eq!(
        listed["result"]["structuredContent"]["patches"][0]["id"],
        id.as_str(),
        "{listed}"
    );
    let shown = session.call(5, "palm_patches", json!({"action": "show", "id": id}));
    assert!(
        shown["result"]["structuredContent"]["diff"]
            .as_str()
            .unwrap_or_default()
            .contains("+from-mcp")
    );
    let applied = session.call(6, "palm_patches", json!({"action": "apply", "id": id}));
    assert_eq!(
        applied["result"]["structuredContent"]["status"], "applied",
        "{applied}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.path().join("a.txt")).expect("read"),
        "one\nfrom-mcp\n"
    );
    let missing = session.call(7, "palm_patches", json!({"action": "show"}));
    assert_eq!(missing["result"]["isError"], true);
}
