//! Health probes of places: process alive, TCP connect, HTTP GET answering 2xx, a
//! command exiting 0. Each runs under its own timeout and answers `(ok, detail)`; the
//! place book decides what a run of answers means.

use palm_actors::place::{Check, parse_http_url, parse_tcp_addr};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bound on the part of an HTTP answer a probe reads (the status line is all it needs).
const HTTP_HEAD_BYTES_MAX: usize = 4 * 1024;

/// Runs one check. `pid` is the process for `process` checks; `alive` says whether a
/// spawned child is still running (its wait task knows better than `kill(pid, 0)`).
pub async fn run(check: &Check, pid: Option<u32>, timeout_ms: u64) -> (bool, String) {
    let timeout = Duration::from_millis(timeout_ms.max(1));
    match tokio::time::timeout(timeout, probe(check, pid)).await {
        Ok(answer) => answer,
        Err(_) => (
            false,
            format!("{} timed out after {timeout_ms}ms", check.describe()),
        ),
    }
}

async fn probe(check: &Check, pid: Option<u32>) -> (bool, String) {
    match check {
        Check::Process => match pid {
            Some(pid) if crate::sys::process_alive(pid) => (true, format!("process {pid} alive")),
            Some(pid) => (false, format!("process {pid} is gone")),
            None => (false, "no process".to_owned()),
        },
        Check::Tcp(addr) => tcp(addr).await,
        Check::Http(url) => http(url).await,
        Check::Command(cmd) => command(cmd).await,
    }
}

fn connect_error(err: &std::io::Error) -> String {
    match err.kind() {
        std::io::ErrorKind::ConnectionRefused => "connect refused".to_owned(),
        _ => err.to_string(),
    }
}

async fn tcp(addr: &str) -> (bool, String) {
    let (host, port) = match parse_tcp_addr(addr) {
        Ok(parts) => parts,
        Err(err) => return (false, err),
    };
    match TcpStream::connect((host.as_str(), port)).await {
        Ok(_) => (true, "tcp connect ok".to_owned()),
        Err(err) => (false, format!("tcp {}", connect_error(&err))),
    }
}

async fn http(url: &str) -> (bool, String) {
    let (host, port, path) = match parse_http_url(url) {
        Ok(parts) => parts,
        Err(err) => return (false, err),
    };
    let mut stream = match TcpStream::connect((host.as_str(), port)).await {
        Ok(stream) => stream,
        Err(err) => return (false, format!("http: tcp {}", connect_error(&err))),
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: palm-probe\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    if let Err(err) = stream.write_all(request.as_bytes()).await {
        return (false, format!("http: cannot send the request: {err}"));
    }
    let mut head = Vec::with_capacity(256);
    let mut chunk = [0u8; 512];
    while !head.windows(2).any(|w| w == b"\r\n") && head.len() < HTTP_HEAD_BYTES_MAX {
        match stream.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
            Err(err) => return (false, format!("http: cannot read the answer: {err}")),
        }
    }
    let line = String::from_utf8_lossy(&head);
    let line = line.lines().next().unwrap_or_default();
    let mut parts = line.split_whitespace();
    match (
        parts.next(),
        parts.next().and_then(|c| c.parse::<u16>().ok()),
    ) {
        (Some(version), Some(code)) if version.starts_with("HTTP/") => {
            ((200..300).contains(&code), format!("http {code}"))
        }
        _ => (false, "http: not an HTTP answer".to_owned()),
    }
}

async fn command(cmd: &str) -> (bool, String) {
    let mut process = tokio::process::Command::new("sh");
    process
        .arg("-c")
        .arg(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    match process.output().await {
        Ok(output) if output.status.success() => (true, "command exited 0".to_owned()),
        Ok(output) => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            let code = output
                .status
                .code()
                .map_or("was killed".to_owned(), |c| format!("exited {c}"));
            match last {
                Some(line) => (false, format!("command {code}: {}", line.trim())),
                None => (false, format!("command {code}")),
            }
        }
        Err(err) => (false, format!("cannot run the probe command: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tcp_and_http_probes_say_what_they_saw() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            for answer in [
                "HTTP/1.1 200 OK\r\n\r\n",
                "HTTP/1.0 503 Busy\r\n\r\n",
                "garbage\r\n",
            ] {
                let (mut socket, _) = listener.accept().await.expect("accept");
                let mut buf = [0u8; 1024];
                let _ = socket.read(&mut buf).await;
                let _ = socket.write_all(answer.as_bytes()).await;
            }
        });
        let url = format!("http://{addr}/health");
        assert_eq!(
            run(&Check::Http(url.clone()), None, 2_000).await,
            (true, "http 200".into())
        );
        assert_eq!(
            run(&Check::Http(url.clone()), None, 2_000).await,
            (false, "http 503".into())
        );
        assert_eq!(
            run(&Check::Http(url), None, 2_000).await,
            (false, "http: not an HTTP answer".into())
        );
        server.await.expect("server");
        // Port 1 on loopback: nothing listens there (a freed ephemeral port could be
        // taken by a test running in parallel).
        let (ok, detail) = run(&Check::Tcp("127.0.0.1:1".into()), None, 2_000).await;
        assert!(!ok);
        assert_eq!(detail, "tcp connect refused");
    }

    #[tokio::test]
    async fn command_and_process_probes() {
        assert!(run(&Check::Command("true".into()), None, 2_000).await.0);
        let (ok, detail) = run(
            &Check::Command("echo broken >&2; exit 3".into()),
            None,
            2_000,
        )
        .await;
        assert!(!ok);
        assert_eq!(detail, "command exited 3: broken");
        let (ok, detail) = run(&Check::Command("sleep 5".into()), None, 100).await;
        assert!(!ok);
        assert!(detail.contains("timed out after 100ms"), "{detail}");
        assert!(
            run(&Check::Process, Some(std::process::id()), 1_000)
                .await
                .0
        );
        assert!(!run(&Check::Process, Some(u32::MAX / 2), 1_000).await.0);
    }
}
