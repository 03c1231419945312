//! Helpers for end-to-end tests: run the real `palm` binary, start and kill nodes, talk
//! to a node's control socket.

#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn palm_bin() -> &'static str {
    env!("CARGO_BIN_EXE_palm")
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn example(name: &str) -> String {
    repo()
        .join("examples")
        .join(format!("{name}.yaml"))
        .display()
        .to_string()
}

/// A free UDP port on 127.0.0.1, for a node's `--listen` (QUIC runs over UDP).
pub fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .expect("udp")
        .local_addr()
        .expect("addr")
        .port()
}

/// A one-time join token from the root at `root` for a child `name` in `role`.
pub fn join_token(root: &Path, name: &str, role: &str) -> String {
    let ran = palm(
        root,
        &["token", "create", "--name", name, "--role", role, "--json"],
    );
    assert_eq!(ran.code, 0, "token create: {}", ran.stderr);
    ran.json()["token"].as_str().expect("token").to_owned()
}

/// A fresh data directory, short enough for a Unix socket path.
pub fn data_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("palm-e2e-")
        .tempdir_in("/tmp")
        .expect("tempdir")
}

pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

fn ran(output: Output) -> Ran {
    Ran {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs `palm --data DATA ARGS...` to completion.
pub fn palm(data: &Path, args: &[&str]) -> Ran {
    palm_env(data, args, &[])
}

/// Runs `palm --data DATA ARGS...` to completion with extra environment.
pub fn palm_env(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Ran {
    let output = Command::new(palm_bin())
        .arg("--data")
        .arg(data)
        .args(args)
        .env_remove("PALM_HOME")
        .env("PALM_LOG", "warn")
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .output()
        .expect("run palm");
    ran(output)
}

/// A `palm up` process.
pub struct Up {
    pub child: Child,
    pub data: PathBuf,
}

impl Up {
    pub fn start(data: &Path, extra: &[&str]) -> Up {
        Up::start_env(data, extra, &[])
    }

    /// `palm up` with extra environment.
    pub fn start_env(data: &Path, extra: &[&str], env: &[(&str, &str)]) -> Up {
        let up = Up::spawn_env(data, extra, env);
        up.wait_ready();
        up
    }

    /// `palm up`, not waiting for it to answer (a standby replica does not, yet).
    pub fn spawn_env(data: &Path, extra: &[&str], env: &[(&str, &str)]) -> Up {
        let child = Command::new(palm_bin())
            .arg("--data")
            .arg(data)
            .arg("up")
            .args(extra)
            .envs(env.iter().copied())
            .env_remove("PALM_HOME")
            .env("PALM_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn palm up");
        Up {
            child,
            data: data.to_owned(),
        }
    }

    /// Waits up to 20 s for the node to answer on its socket.
    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(mut client) = Client::connect(&self.data)
                && client.call(&serde_json::json!({"op": "ping"})).is_some()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("palm up did not become ready on {}", self.data.display());
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// kill -9.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM; returns the exit code and stderr.
    pub fn terminate(mut self) -> (i32, String) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let status = self.child.wait().expect("wait");
        let mut stderr = String::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
        }
        (status.code().unwrap_or(-1), stderr)
    }
}

impl Drop for Up {
    /// A test that ends (or panics) with a node still up stops it gracefully, so the
    /// processes of its places do not outlive the test; SIGKILL if it does not stop.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(self.child.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw control-socket client.
pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Client {
    pub fn connect(data: &Path) -> Option<Client> {
        let stream = UnixStream::connect(data.join("palm.sock")).ok()?;
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .ok()?;
        let writer = stream.try_clone().ok()?;
        Some(Client {
            reader: BufReader::new(stream),
            writer,
        })
    }

    pub fn call(&mut self, request: &Value) -> Option<Value> {
        let mut line = serde_json::to_vec(request).ok()?;
        line.push(b'\n');
        self.writer.write_all(&line).ok()?;
        let mut answer = String::new();
        self.reader.read_line(&mut answer).ok()?;
        serde_json::from_str(&answer).ok()
    }

    /// Calls and returns `result`, panicking on an error response.
    pub fn ok(&mut self, request: &Value) -> Value {
        let response = self.call(request).expect("node answers");
        assert_eq!(response["ok"], true, "request {request} failed: {response}");
        response["result"].clone()
    }
}

/// Polls until `check` holds or the timeout passes.
pub fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    check()
}

/// Processes whose argument vector is exactly `argv` (a `sleep 30` and not a
/// `sleep 300` someone else runs on the machine).
pub fn processes_running(argv: &[&str]) -> Vec<u32> {
    processes_where(|cmdline| {
        let args: Vec<&[u8]> = cmdline
            .strip_suffix(b"\0")
            .unwrap_or(cmdline)
            .split(|b| *b == 0)
            .collect();
        args.len() == argv.len() && args.iter().zip(argv).all(|(a, b)| *a == b.as_bytes())
    })
}

/// Processes whose command line contains `needle`.
pub fn processes_matching(needle: &str) -> Vec<u32> {
    processes_where(|cmdline| {
        String::from_utf8_lossy(cmdline)
            .replace('\0', " ")
            .contains(needle)
    })
}

/// Processes whose raw `/proc/PID/cmdline` (arguments each ended by a NUL) satisfies
/// `matches`.
fn processes_where(matches: impl Fn(&[u8]) -> bool) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline"))
            && matches(&cmdline)
        {
            found.push(pid);
        }
    }
    found
}

/// A git checkout holding `files` (path, content) in one commit on `main`.
pub fn git_repo(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    for (path, content) in files {
        let path = dir.path().join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("dirs");
        }
        std::fs::write(path, content).expect("write");
    }
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["config", "user.email", "t@t"],
        &["config", "user.name", "t"],
        &["add", "."],
        &["commit", "-q", "-m", "first"],
    ] {
        git(dir.path(), args);
    }
    dir
}

/// Runs git in `dir`; a failure fails the test.
pub fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// One HTTP/1.1 request on a fresh connection: (status, the whole answer read so far,
/// head and body). The body of
/// an SSE answer is read until `until` appears (the stream may stay open).
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
    until: &str,
) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => received.extend_from_slice(&buffer[..n]),
        }
        if String::from_utf8_lossy(&received).contains(until) {
            break;
        }
    }
    let text = String::from_utf8_lossy(&received).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}
