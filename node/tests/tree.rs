//! The tree end to end: real `palm up` processes on loopback. A root and a child that
//! joins with a token; `kill -9` of the root and its restart, after which the child
//! reconnects on its own; later boots without the token; every enrollment refusal with
//! its reason; revocation of a running child; usage errors.

mod common;

use common::{Client, Up, data_dir, eventually, free_port, palm, palm_bin};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn start_root(data: &Path, listen: &str) -> Up {
    Up::start(
        data,
        &[
            "--profile",
            "root",
            "--listen",
            listen,
            "--name",
            "root",
            "--seats",
            "1",
        ],
    )
}

fn token(root: &Path, name: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "token", "create", "--name", name, "--role", "edge", "--json",
    ];
    args.extend_from_slice(extra);
    let ran = palm(root, &args);
    assert_eq!(ran.code, 0, "token create: {}", ran.stderr);
    ran.json()["token"].as_str().expect("token").to_owned()
}

fn vitality(data: &Path) -> Value {
    let mut client = Client::connect(data).expect("connect");
    client.ok(&json!({"op": "vitality"}))
}

/// The link to/from `peer` in `direction`, if it is up.
fn link_up(data: &Path, direction: &str, peer: &str) -> Option<Value> {
    let v = vitality(data);
    v["links"].as_array()?.iter().find_map(|l| {
        (l["direction"] == direction && l["peer"] == peer && l["state"] == "up").then(|| l.clone())
    })
}

/// Runs `palm up` expecting it to exit by itself (a refused enrollment, a usage error).
fn up_exits(data: &Path, args: &[&str]) -> (i32, String) {
    let mut child = Command::new(palm_bin())
        .arg("--data")
        .arg(data)
        .arg("up")
        .args(args)
        .env_remove("PALM_HOME")
        .env("PALM_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
            }
            return (status.code().unwrap_or(-1), stderr);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("palm up {args:?} did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_child_reconnects_by_itself_after_kill_9_of_the_root() {
    let root_dir = data_dir();
    let child_dir = data_dir();
    let listen = format!("127.0.0.1:{}", free_port());
    let root = start_root(root_dir.path(), &listen);
    // The control socket answers before the tree organ has finished its first boot.
    assert!(
        eventually(Duration::from_secs(10), || root_dir
            .path()
            .join("tree/ca.cert.der")
            .is_file()),
        "CA created on first boot"
    );
    let token = token(root_dir.path(), "edge-1", &["--ttl", "10m"]);
    // No --profile: the token says the child is an edge.
    let child = Up::start(
        child_dir.path(),
        &[
            "--parent", &listen, "--token", &token, "--name", "edge-1", "--seats", "1",
        ],
    );
    assert!(
        eventually(Duration::from_secs(10), || link_up(
            child_dir.path(),
            "parent",
            "root"
        )
        .is_some()
            && link_up(root_dir.path(), "child", "edge-1").is_some()),
        "link up: {} / {}",
        vitality(child_dir.path())["links"],
        vitality(root_dir.path())["links"]
    );
    let before = link_up(child_dir.path(), "parent", "root").expect("up");
    assert!(before["since"].as_u64().is_some());

    root.kill9();
    let _root = start_root(root_dir.path(), &listen);
    assert!(
        eventually(Duration::from_secs(20), || {
            link_up(child_dir.path(), "parent", "root")
                .is_some_and(|l| l["since"].as_u64() > before["since"].as_u64())
                && link_up(root_dir.path(), "child", "edge-1").is_some()
        }),
        "link up again: {} / {}",
        vitality(child_dir.path())["links"],
        vitality(root_dir.path())["links"]
    );
    // The journal holds the history: the child saw its parent go down and come back.
    let events = vitality(child_dir.path())["link_events"].clone();
    let kinds: Vec<&str> = events
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["event"].as_str())
        .collect();
    assert!(kinds.starts_with(&["enrolled", "link_up"]), "{kinds:?}");
    assert!(kinds.contains(&"link_down"), "{kinds:?}");

    // A later boot of the child needs no token (and no --parent: it is remembered).
    let (code, stderr) = child.terminate();
    assert_eq!(code, 0, "{stderr}");
    let _child = Up::start(child_dir.path(), &["--profile", "edge", "--seats", "1"]);
    assert!(
        eventually(Duration::from_secs(10), || link_up(
            child_dir.path(),
            "parent",
            "root"
        )
        .is_some()),
        "{}",
        vitality(child_dir.path())["links"]
    );
    assert_eq!(vitality(child_dir.path())["profile"], "edge");
}

#[test]
fn refused_enrollments_say_why_and_revocation_cuts_a_running_child() {
    let root_dir = data_dir();
    let listen = format!("127.0.0.1:{}", free_port());
    let _root = start_root(root_dir.path(), &listen);
    let token = token(root_dir.path(), "edge-1", &[]);
    let first = data_dir();
    let child = Up::start(
        first.path(),
        &[
            "--profile",
            "edge",
            "--parent",
            &listen,
            "--token",
            &token,
            "--seats",
            "1",
        ],
    );
    // Reused.
    let second = data_dir();
    let (code, stderr) = up_exits(
        second.path(),
        &["--profile", "edge", "--parent", &listen, "--token", &token],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("reused token"), "{stderr}");
    assert!(!second.path().join("tree/node.cert.der").exists());
    // Expired.
    let short = self::token(root_dir.path(), "edge-2", &["--ttl", "1ms"]);
    std::thread::sleep(Duration::from_millis(5));
    let (code, stderr) = up_exits(
        data_dir().path(),
        &["--profile", "edge", "--parent", &listen, "--token", &short],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("expired token"), "{stderr}");
    // Forged: another root's token, and garbage.
    let other_root = data_dir();
    let other_listen = format!("127.0.0.1:{}", free_port());
    let other = start_root(other_root.path(), &other_listen);
    let foreign = self::token(other_root.path(), "edge-3", &[]);
    drop(other);
    let (code, stderr) = up_exits(
        data_dir().path(),
        &[
            "--profile",
            "edge",
            "--parent",
            &listen,
            "--token",
            &foreign,
        ],
    );
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("fingerprint mismatch"), "{stderr}");
    let (code, stderr) = up_exits(
        data_dir().path(),
        &[
            "--profile",
            "edge",
            "--parent",
            &listen,
            "--token",
            "palm1.AAAA",
        ],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not a palm join token"), "{stderr}");

    // Revocation of the running child.
    assert!(eventually(Duration::from_secs(10), || link_up(
        first.path(),
        "parent",
        "root"
    )
    .is_some()));
    let ran = palm(root_dir.path(), &["token", "revoke", "edge-1", "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(ran.json()["links_closed"], 1);
    assert!(
        eventually(Duration::from_secs(5), || {
            let v = vitality(first.path());
            let parent = &v["links"][0];
            parent["state"] == "down"
                && parent["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("revoked"))
        }),
        "{}",
        vitality(first.path())["links"]
    );
    // It stays refused: the child keeps dialing and is turned away by the TLS verifier.
    std::thread::sleep(Duration::from_millis(500));
    assert!(link_up(first.path(), "parent", "root").is_none());
    assert!(link_up(root_dir.path(), "child", "edge-1").is_none());
    let events = vitality(root_dir.path())["link_events"].clone();
    assert!(
        events
            .as_array()
            .expect("events")
            .iter()
            .any(|e| e["event"] == "revoked"),
        "{events}"
    );
    drop(child);
    // The name stays revoked.
    let ran = palm(root_dir.path(), &["token", "create", "--name", "edge-1"]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("revoked"), "{}", ran.stderr);
}

#[test]
fn tokens_offline_and_usage_errors() {
    let root_dir = data_dir();
    let listen = format!("127.0.0.1:{}", free_port());
    // A root's first boot creates the CA; stopped, it still issues tokens offline.
    let (code, stderr) = start_root(root_dir.path(), &listen).terminate();
    assert_eq!(code, 0, "{stderr}");
    let offline = token(root_dir.path(), "edge-9", &[]);
    let _root = start_root(root_dir.path(), &listen);
    let child_dir = data_dir();
    let _child = Up::start(
        child_dir.path(),
        &[
            "--profile",
            "edge",
            "--parent",
            &listen,
            "--token",
            &offline,
            "--seats",
            "1",
        ],
    );
    // Both ends' views: each side records the link before it shows it.
    assert!(eventually(Duration::from_secs(10), || {
        link_up(child_dir.path(), "parent", "root").is_some()
            && link_up(root_dir.path(), "child", "edge-9").is_some()
    }));
    assert_eq!(vitality(child_dir.path())["node"], "edge-9");
    // A child issues no tokens, and says what it is and where its tree goes up.
    let ran = palm(
        child_dir.path(),
        &["token", "create", "--name", "x", "--json"],
    );
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    let refused = ran.json();
    assert_eq!(refused["error"]["kind"], "not_root");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("edge `edge-9`") && message.contains(&listen),
        "{message}"
    );
    // Garbage at the root's port leaves it healthy and the link up.
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for i in 0..300usize {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let len = [1, 40, 1200, 1350][i % 4];
        let mut datagram: Vec<u8> = (0..len).map(|j| (seed >> (j % 57)) as u8).collect();
        if i % 2 == 0 {
            datagram[0] |= 0xc0; // a QUIC long header
        }
        let _ = socket.send_to(&datagram, &listen);
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(link_up(root_dir.path(), "child", "edge-9").is_some());
    assert!(!token(root_dir.path(), "edge-10", &[]).is_empty());

    // Without --name the root picks one, and the token carries it.
    let ran = palm(
        root_dir.path(),
        &["token", "create", "--role", "realm", "--json"],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(
        ran.json()["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("realm-"))
    );

    // A data directory without a tree CA issues no tokens.
    let plain = data_dir();
    let ran = palm(plain.path(), &["token", "create", "--name", "x", "--json"]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert_eq!(ran.json()["error"]["kind"], "not_root");
    // Usage errors, before anything boots.
    for (args, expected) in [
        (vec!["--profile", "root"], "needs --listen"),
        (
            vec!["--profile", "edge", "--parent", "127.0.0.1:1"],
            "needs --token",
        ),
        (
            vec!["--listen", "127.0.0.1:1"],
            "--listen needs --profile root",
        ),
        // Without --profile the token names the role: one that is no token says so.
        (vec!["--token", "nonsense"], "not a palm join token"),
        (vec!["--profile", "moon"], "unknown profile"),
        (
            vec!["--profile", "edge", "--listen", "127.0.0.1:1"],
            "an edge is a leaf",
        ),
    ] {
        let (code, stderr) = up_exits(data_dir().path(), &args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    // An enrolled child's data directory cannot boot as something else.
    let (code, stderr) = up_exits(
        child_dir.path(),
        &["--profile", "root", "--listen", "127.0.0.1:1"],
    );
    assert_eq!(code, 2, "{stderr}");
}
