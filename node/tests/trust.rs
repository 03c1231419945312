//! Trust end to end: a real root (`palm up --profile root`) and a rogue child that holds
//! a valid certificate (it enrolled with a real token) but sends, over its link, what a
//! child may not ask. Every such frame is refused and counted, the root's state does not
//! change, and the link stays up. From the CLI, an edge's data directory cannot mint
//! tokens.

mod common;

use common::{Client, Up, data_dir, eventually, free_port, join_token, palm};
use palm_actors::bt::{EffectRequest, Outcome};
use palm_actors::json::Json;
use palm_actors::path::ClaimedEffect;
use palm_node::wire::TreeMsg;
use palm_topology::{Reply, Summary, TopoMsg, Toward};
use palm_transport::{Hello, Inbound, Link, LinkConfig, Role, endpoint, enroll, tls};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use tokio::sync::mpsc;

/// A root listening on a free port, once its tree CA exists: its directory, the node,
/// its address.
fn root() -> (tempfile::TempDir, Up, String) {
    let dir = data_dir();
    let listen = format!("127.0.0.1:{}", free_port());
    let up = Up::start(
        dir.path(),
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
    assert!(eventually(Duration::from_secs(10), || dir
        .path()
        .join("tree/ca.cert.der")
        .is_file()));
    (dir, up, listen)
}

/// A child `name` that enrolls with `token` and links to the root at `listen`, speaking
/// `T`: the real `TreeMsg`, or frames crafted to look like it. The first part of the
/// answer keeps the connection's endpoint alive.
async fn link_as<T>(
    listen: &str,
    token: &str,
    name: &str,
    config: &LinkConfig,
) -> (impl Sized + use<T>, Link<T>, mpsc::Receiver<Inbound<T>>)
where
    T: Serialize + DeserializeOwned + Send + 'static,
{
    let (identity, _) = enroll(listen, token, config).await.expect("enroll");
    let client = tls::client_config(&identity, config).expect("client config");
    let hello = Hello {
        name: name.into(),
        role: Role::Edge,
        node_id: identity.node_id(),
        software: "test".into(),
    };
    endpoint::dial::<T>(listen, client, &hello, config)
        .await
        .expect("link to the root")
}

fn vitality(data: &Path) -> Value {
    Client::connect(data)
        .expect("connect")
        .ok(&json!({"op": "vitality"}))
}

fn child_link_up(root: &Path, peer: &str) -> bool {
    vitality(root)["links"].as_array().is_some_and(|links| {
        links
            .iter()
            .any(|l| l["direction"] == "child" && l["peer"] == peer && l["state"] == "up")
    })
}

fn forward(id: u64, request: Value) -> TreeMsg {
    TreeMsg::Topo(TopoMsg::Forward {
        id,
        toward: Toward::NewHome,
        view_of: None,
        request: Json(request),
        hops: 0,
        within_ms: 5_000,
    })
}

/// The next topology message from the root that `pick` wants, within 10 s.
async fn next<T>(
    inbound: &mut mpsc::Receiver<Inbound<TreeMsg>>,
    mut pick: impl FnMut(TopoMsg) -> Option<T>,
) -> Option<T> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let item = tokio::time::timeout_at(deadline, inbound.recv())
            .await
            .ok()??;
        if let Inbound::Message(TreeMsg::Topo(msg)) = item
            && let Some(found) = pick(msg)
        {
            return Some(found);
        }
    }
}

#[test]
fn a_child_is_refused_everything_a_child_may_not_ask() {
    let (root_dir, _root, listen) = root();
    let token = join_token(root_dir.path(), "rogue", "edge");
    let book = root_dir.path().join("tree/trust.json");
    let witness = root_dir.path().join("placed-up-ran");

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (answers, completed_verdict, book_before) = runtime.block_on(async {
        let (_endpoint, link, mut inbound) =
            link_as::<TreeMsg>(&listen, &token, "rogue", &LinkConfig::default()).await;
        let tag = next(&mut inbound, |msg| match msg {
            TopoMsg::Parent(info) => Some(info.tag),
            _ => None,
        })
        .await
        .expect("the root says who it is");
        // The book as the enrollment left it (the token used, the child recorded).
        let book_before = std::fs::read_to_string(&book).expect("trust book");
        // Control requests only the root's own socket may issue.
        let forbidden = [
            json!({"op": "token_create", "name": "x", "role": "edge", "ttl_ms": 600_000}),
            json!({"op": "token_revoke", "name": "rogue"}),
            json!({"op": "places_add", "spec": {"name": "evil", "spawn": format!("touch {}", witness.display())}}),
            json!({"op": "flows_add", "source": "name: evil\ntree: {succeed: {}}\n", "origin": "rogue"}),
            json!({"op": "kv", "action": "put", "key": "evil", "value": 1}),
        ];
        for (i, request) in forbidden.iter().enumerate() {
            link.send(forward(100 + i as u64, request.clone()))
                .await
                .expect("send");
        }
        let mut answers = Vec::new();
        for _ in 0..forbidden.len() {
            let answer = next(&mut inbound, |msg| match msg {
                TopoMsg::Answer { id, reply } => Some((id, reply)),
                _ => None,
            })
            .await
            .expect("an answer to each forbidden request");
            answers.push(answer);
        }
        // Work sent up (with shell text), a summary posing as a sibling, a completion
        // with a made-up token: dropped or refused.
        let effect = ClaimedEffect {
            key: format!("{tag}-1/0/1"),
            job: format!("{tag}-1"),
            token: 1,
            lease_until: u64::MAX,
            request: EffectRequest::Run {
                cmd: format!("touch {}", witness.display()),
                cwd: None,
                env: Vec::new(),
                timeout_ms: None,
                needs: Vec::new(),
                place: None,
            },
        };
        link.send(TreeMsg::Topo(TopoMsg::Place {
            id: 200,
            effect,
            home: "rogue".into(),
        }))
        .await
        .expect("send");
        link.send(TreeMsg::Topo(TopoMsg::Summary(Summary {
            name: "edge-2".into(),
            role: "edge".into(),
            tag: "e222".into(),
            ..Summary::default()
        })))
        .await
        .expect("send");
        link.send(TreeMsg::Topo(TopoMsg::Complete {
            id: 300,
            key: format!("{tag}-1/0/1"),
            token: 7,
            outcome: Outcome::Call {
                ok: true,
                value: Json(Value::Null),
                error: None,
            },
            node: "rogue".into(),
        }))
        .await
        .expect("send");
        let completed = next(&mut inbound, |msg| match msg {
            TopoMsg::Completed { id: 300, verdict } => Some(verdict),
            _ => None,
        })
        .await
        .expect("the completion is answered");
        // The link is still up: a job request still gets its home's answer.
        link.send(forward(400, json!({"op": "jobs"}))).await.expect("send");
        let jobs = next(&mut inbound, |msg| match msg {
            TopoMsg::Answer { id: 400, reply } => Some(reply),
            _ => None,
        })
        .await
        .expect("jobs answered");
        assert!(matches!(&jobs, Reply::Home(Json(r)) if r["ok"] == true), "{jobs:?}");
        (answers, completed, book_before)
    });

    for (id, reply) in &answers {
        match reply {
            Reply::Refused { at, reason } => {
                assert_eq!(at, "root");
                assert!(reason.contains("never crosses a link"), "#{id}: {reason}");
            }
            other => panic!("#{id} was not refused: {other:?}"),
        }
    }
    assert!(
        matches!(
            &completed_verdict,
            palm_topology::CompleteVerdict::Refused(_)
        ),
        "{completed_verdict:?}"
    );
    // Nothing changed at the root.
    assert_eq!(
        std::fs::read_to_string(&book).expect("trust book"),
        book_before,
        "tokens unchanged"
    );
    let mut client = Client::connect(root_dir.path()).expect("connect");
    let flows = client.ok(&json!({"op": "flows_list"}));
    assert!(!flows.to_string().contains("evil"), "{flows}");
    let places = client.ok(&json!({"op": "places"}));
    assert!(!places.to_string().contains("evil"), "{places}");
    let kv = client
        .call(&json!({"op": "kv", "action": "get", "key": "evil"}))
        .expect("kv");
    assert!(kv["result"]["value"].is_null(), "{kv}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !witness.exists(),
        "no shell text from a child ran on the root"
    );
    assert!(
        !vitality(root_dir.path())["tree"]
            .to_string()
            .contains("e222")
    );
    // Every refusal is counted with the peer's name, and the link stayed up.
    let refused = vitality(root_dir.path())["refused"].clone();
    assert!(refused["count"].as_u64() >= Some(7), "{refused}");
    let kinds: Vec<&str> = refused["latest"]
        .as_array()
        .expect("latest")
        .iter()
        .filter(|r| r["peer"] == "rogue")
        .filter_map(|r| r["kind"].as_str())
        .collect();
    for kind in ["forward", "place", "summary"] {
        assert!(kinds.contains(&kind), "{kind} refused: {refused}");
    }
    assert!(child_link_up(root_dir.path(), "rogue"), "the link stays up");
    let human = palm(root_dir.path(), &["vitality"]);
    assert!(human.stdout.contains("refused"), "{}", human.stdout);
}

#[test]
fn an_edge_cannot_mint_tokens_from_the_cli() {
    let edge_dir = data_dir();
    let (root_dir, _root, listen) = root();
    let token = join_token(root_dir.path(), "edge-1", "edge");
    let _edge = Up::start(
        edge_dir.path(),
        &[
            "--profile",
            "edge",
            "--parent",
            &listen,
            "--token",
            &token,
            "--name",
            "edge-1",
        ],
    );
    assert!(eventually(Duration::from_secs(10), || child_link_up(
        root_dir.path(),
        "edge-1"
    )));
    let book = root_dir.path().join("tree/trust.json");
    let before = std::fs::read(&book).expect("trust book");
    let ran = palm(
        edge_dir.path(),
        &["token", "create", "--name", "x", "--role", "edge"],
    );
    assert_ne!(ran.code, 0, "{}", ran.stdout);
    assert!(
        ran.stderr.contains("root"),
        "a clear message: {}",
        ran.stderr
    );
    assert_eq!(std::fs::read(&book).expect("trust book"), before);

    // The root lists its tokens and children, never a secret; an edge has none to list.
    palm(
        root_dir.path(),
        &["token", "create", "--name", "edge-2", "--role", "edge"],
    );
    let listed = palm(root_dir.path(), &["token", "list", "--json"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let listing = listed.json();
    let state_of = |name: &str| {
        listing["tokens"]
            .as_array()
            .expect("tokens")
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["state"].clone())
    };
    assert_eq!(state_of("edge-1"), Some(json!("used")), "{listing}");
    assert_eq!(state_of("edge-2"), Some(json!("live")), "{listing}");
    assert_eq!(listing["children"][0]["name"], "edge-1", "{listing}");
    assert!(!listed.stdout.contains("secret"), "{}", listed.stdout);
    assert!(!listed.stdout.contains(&token[6..20]), "no token text");
    let human = palm(root_dir.path(), &["token", "list"]);
    assert!(
        human.stdout.contains("edge-2") && human.stdout.contains("live"),
        "{}",
        human.stdout
    );
    let from_edge = palm(edge_dir.path(), &["token", "list"]);
    assert_eq!(from_edge.code, 2, "{}", from_edge.stderr);
    // API tokens (any node's own) are listed too, beside a root's join tokens.
    for dir in [root_dir.path(), edge_dir.path()] {
        let made = palm(dir, &["token", "create", "--role", "api", "--name", "ci"]);
        assert_eq!(made.code, 0, "{}", made.stderr);
        let listed = palm(dir, &["token", "list", "--json"]);
        assert_eq!(listed.code, 0, "{}", listed.stderr);
        let listing = listed.json();
        let api: Vec<&Value> = listing["tokens"]
            .as_array()
            .expect("tokens")
            .iter()
            .filter(|t| t["role"] == "api")
            .collect();
        assert_eq!(api.len(), 1, "{listing}");
        assert_eq!(
            (api[0]["name"].as_str(), api[0]["state"].as_str()),
            (Some("ci"), Some("live"))
        );
        assert!(
            !listed.stdout.contains("palm_api_"),
            "no secret: {}",
            listed.stdout
        );
    }
}

/// Frames shaped like `TreeMsg` by a hostile child: a summary laid out as a chain far
/// deeper than any tree, and a frame ten times the root's frame bound.
/// (Laid out like `TreeMsg` and `TopoMsg` up to the variants used, so the root reads
/// them as its own and the root's first frame, `Parent`, reads back here.)
mod crafted {
    use palm_topology::{FlatSummary, ParentInfo};
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize)]
    pub enum Tree {
        Probe { at_ms: u64 },
        Topo(Topo),
    }

    #[derive(Serialize, Deserialize)]
    pub enum Topo {
        Summary(FlatSummary),
        Parent(ParentInfo),
    }
}

#[test]
fn a_crafted_frame_closes_only_its_own_link() {
    let (root_dir, _root, listen) = root();
    let token = |name: &str| join_token(root_dir.path(), name, "edge");
    let (deep, huge, good) = (token("deep"), token("huge"), token("good"));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        // The sender's own bound is raised so the oversized frame leaves it.
        let config = LinkConfig {
            frame_len_max: 32 << 20,
            ..LinkConfig::default()
        };
        let (_e1, good_link, _good_in) =
            link_as::<crafted::Tree>(&listen, &good, "good", &config).await;
        let (_e2, deep_link, mut deep_in) =
            link_as::<crafted::Tree>(&listen, &deep, "deep", &config).await;
        let (_e3, huge_link, mut huge_in) =
            link_as::<crafted::Tree>(&listen, &huge, "huge", &config).await;
        let node = |parent: Option<u32>, name: String| palm_topology::SummaryNode {
            parent,
            name,
            role: "edge".into(),
            tag: "dddd".into(),
            ready: vec![],
            seats: 1,
            busy: 0,
            at_ms: 0,
        };
        let chain = (0..50_000u32)
            .map(|i| {
                node(
                    i.checked_sub(1),
                    if i == 0 {
                        "deep".into()
                    } else {
                        format!("n{i}")
                    },
                )
            })
            .collect();
        deep_link
            .send(crafted::Tree::Topo(crafted::Topo::Summary(
                palm_topology::FlatSummary { nodes: chain },
            )))
            .await
            .expect("sent");
        let padding = vec![node(None, "x".repeat(10 << 20))];
        huge_link
            .send(crafted::Tree::Topo(crafted::Topo::Summary(
                palm_topology::FlatSummary { nodes: padding },
            )))
            .await
            .expect("sent");
        // Both links are closed by the root: their inbound queues end.
        for inbound in [&mut deep_in, &mut huge_in] {
            let ended = tokio::time::timeout(Duration::from_secs(10), async {
                while inbound.recv().await.is_some() {}
            })
            .await;
            assert!(ended.is_ok(), "the root closed the link");
        }
        // The other child's link never noticed.
        assert!(
            child_link_up(root_dir.path(), "good"),
            "{}",
            vitality(root_dir.path())["links"]
        );
        // (The root's board follows its link events a moment after the close.)
        assert!(eventually(Duration::from_secs(5), || {
            !child_link_up(root_dir.path(), "deep") && !child_link_up(root_dir.path(), "huge")
        }));
        drop(good_link);
    });
    // The root records why, and still serves its socket and its other child.
    let recorded = |v: &Value| {
        let events = v["link_events"].to_string();
        events.contains("protocol violation from deep") && events.contains("huge")
    };
    assert!(
        eventually(Duration::from_secs(5), || recorded(&vitality(
            root_dir.path()
        ))),
        "{}",
        vitality(root_dir.path())["link_events"]
    );
    let v = vitality(root_dir.path());
    assert!(v["node"] == "root", "{v}");
}
