//! Three levels with real processes: root ← realm ← edge-1, edge-2. The edges enroll at
//! the realm (relayed to the root) and every link shows up in vitality on both ends;
//! `palm token revoke edge-2` at the root makes the realm drop and then refuse edge-2;
//! the realm killed with -9 and restarted without a token — with its root down too —
//! takes edge-1 back from its child book, still refuses edge-2, and relinks to the root
//! when the root returns.

mod common;

use common::{Client, Up, data_dir, eventually, free_port, palm};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

fn vitality(data: &Path) -> Value {
    let mut client = Client::connect(data).expect("connect");
    client.ok(&json!({"op": "vitality"}))
}

fn link(data: &Path, direction: &str, peer: &str) -> Option<Value> {
    let v = vitality(data);
    v["links"]
        .as_array()?
        .iter()
        .find(|l| l["direction"] == direction && l["peer"] == peer)
        .cloned()
}

fn link_up(data: &Path, direction: &str, peer: &str) -> Option<Value> {
    link(data, direction, peer).filter(|l| l["state"] == "up")
}

fn token(root: &Path, name: &str, role: &str) -> String {
    let ran = palm(
        root,
        &["token", "create", "--name", name, "--role", role, "--json"],
    );
    assert_eq!(ran.code, 0, "token create: {}", ran.stderr);
    ran.json()["token"].as_str().expect("token").to_owned()
}

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

fn start_edge(data: &Path, realm: &str, token: &str) -> Up {
    Up::start(
        data,
        &[
            "--profile",
            "edge",
            "--parent",
            realm,
            "--token",
            token,
            "--seats",
            "1",
        ],
    )
}

#[test]
fn a_realm_enrolls_edges_through_the_root_cuts_a_revoked_one_and_survives_kill_9() {
    let (root_dir, realm_dir, edge1_dir, edge2_dir) =
        (data_dir(), data_dir(), data_dir(), data_dir());
    let (root_addr, realm_addr) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let root = start_root(root_dir.path(), &root_addr);
    let realm_token = token(root_dir.path(), "realm-1", "realm");
    let realm = Up::start(
        realm_dir.path(),
        &[
            "--profile",
            "realm",
            "--parent",
            &root_addr,
            "--token",
            &realm_token,
            "--listen",
            &realm_addr,
            "--name",
            "realm-1",
            "--seats",
            "1",
        ],
    );
    // The control socket answers before the tree organ has enrolled and bound: wait for
    // the realm's listener and its parent link.
    assert!(
        eventually(Duration::from_secs(10), || {
            vitality(realm_dir.path())["tree"]["listen"] == realm_addr.as_str()
                && link_up(realm_dir.path(), "parent", "root").is_some()
        }),
        "realm up: {}",
        vitality(realm_dir.path())
    );
    // Tokens come from the root; the edges join at the realm.
    let edge1 = start_edge(
        edge1_dir.path(),
        &realm_addr,
        &token(root_dir.path(), "edge-1", "edge"),
    );
    let edge2 = start_edge(
        edge2_dir.path(),
        &realm_addr,
        &token(root_dir.path(), "edge-2", "edge"),
    );
    assert!(
        eventually(Duration::from_secs(15), || {
            link_up(realm_dir.path(), "child", "edge-1").is_some()
                && link_up(realm_dir.path(), "child", "edge-2").is_some()
                && link_up(edge1_dir.path(), "parent", "realm-1").is_some()
                && link_up(edge2_dir.path(), "parent", "realm-1").is_some()
        }),
        "realm links: {}",
        vitality(realm_dir.path())["links"]
    );
    // All links up, on both ends: the realm shows its parent and both children.
    let links = vitality(realm_dir.path())["links"].clone();
    let mut seen: Vec<(String, String, String)> = links
        .as_array()
        .expect("links")
        .iter()
        .map(|l| {
            (
                l["peer"].as_str().unwrap_or_default().to_owned(),
                l["direction"].as_str().unwrap_or_default().to_owned(),
                l["state"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    seen.sort();
    let expected: Vec<(String, String, String)> =
        [("edge-1", "child"), ("edge-2", "child"), ("root", "parent")]
            .iter()
            .map(|(p, d)| ((*p).to_owned(), (*d).to_owned(), "up".to_owned()))
            .collect();
    assert_eq!(seen, expected, "{links}");
    assert!(
        links
            .as_array()
            .expect("links")
            .iter()
            .all(|l| l["since"].is_u64())
    );
    assert!(link_up(root_dir.path(), "child", "realm-1").is_some());
    // The root recorded whom it enrolled under the realm.
    let events = vitality(root_dir.path())["link_events"].clone();
    assert!(
        events
            .as_array()
            .expect("events")
            .iter()
            .any(|e| e["event"] == "enrolled" && e["peer"] == "edge-2" && e["under"] == "realm-1"),
        "{events}"
    );

    // Revoked at the root: the realm drops edge-2 and refuses it afterwards.
    let ran = palm(root_dir.path(), &["token", "revoke", "edge-2", "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(ran.json()["certificates"], 1);
    assert_eq!(ran.json()["realms_notified"], 1);
    assert!(
        eventually(Duration::from_secs(5), || {
            link(realm_dir.path(), "child", "edge-2")
                .is_some_and(|l| l["state"] == "down" && l["reason"] == "revoked")
                && link(edge2_dir.path(), "parent", "realm-1").is_some_and(|l| {
                    l["state"] == "down"
                        && l["reason"].as_str().is_some_and(|r| r.contains("revoked"))
                })
        }),
        "{} / {}",
        vitality(realm_dir.path())["links"],
        vitality(edge2_dir.path())["links"]
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(link_up(edge2_dir.path(), "parent", "realm-1").is_none());
    assert!(link_up(realm_dir.path(), "child", "edge-1").is_some());
    let book: Value = serde_json::from_slice(
        &std::fs::read(realm_dir.path().join("tree/children.json")).expect("child book"),
    )
    .expect("json");
    assert_eq!(book["revoked_names"], json!(["edge-2"]), "{book}");

    // kill -9 of the realm, with the root gone too; restarted without a token, the realm
    // admits edge-1 from its child book and still refuses edge-2.
    let before = link_up(edge1_dir.path(), "parent", "realm-1").expect("up")["since"]
        .as_u64()
        .expect("since");
    root.kill9();
    realm.kill9();
    let _realm = Up::start(
        realm_dir.path(),
        &[
            "--profile",
            "realm",
            "--listen",
            &realm_addr,
            "--seats",
            "1",
        ],
    );
    assert!(
        eventually(Duration::from_secs(15), || {
            link_up(edge1_dir.path(), "parent", "realm-1")
                .is_some_and(|l| l["since"].as_u64() > Some(before))
                && link_up(realm_dir.path(), "child", "edge-1").is_some()
        }),
        "edge-1 back: {} / {}",
        vitality(edge1_dir.path())["links"],
        vitality(realm_dir.path())["links"]
    );
    assert!(link_up(realm_dir.path(), "parent", "root").is_none());
    assert!(link_up(realm_dir.path(), "child", "edge-2").is_none());
    assert!(link_up(edge2_dir.path(), "parent", "realm-1").is_none());
    // The root returns: the realm relinks on its own.
    let _root = start_root(root_dir.path(), &root_addr);
    assert!(
        eventually(Duration::from_secs(15), || link_up(
            realm_dir.path(),
            "parent",
            "root"
        )
        .is_some()),
        "{}",
        vitality(realm_dir.path())["links"]
    );
    assert_eq!(vitality(realm_dir.path())["profile"], "realm");
    drop((edge1, edge2));
}
