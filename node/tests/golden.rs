//! The wire format, pinned: one frame of every kind a tree link carries (the hello,
//! each `TreeMsg` and each topology message inside it), encoded as the transport sends
//! them, must equal `golden/frames-v<FRAME_VERSION>.txt` byte for byte, and each golden
//! frame must decode back to the same message.
//!
//! A change to the wire fails here. If it is deliberate, bump
//! `palm_transport::FRAME_VERSION` (peers of the old version are then refused with a
//! clear reason) and write the new version's file with `PALM_BLESS=1 cargo test -p palm
//! --test golden`; the old file stays as the record of what older nodes send. A new
//! message or variant that leaves every existing frame as it was is appended to the end
//! of the samples and of the current version's file (an older node cannot decode that
//! one frame, and closes the link that carries it, with the reason logged).

use palm_actors::bt::{EffectRequest, Outcome, RunResult};
use palm_actors::json::Json;
use palm_actors::path::ClaimedEffect;
use palm_node::wire::TreeMsg;
use palm_topology::{CompleteVerdict, ParentInfo, RenewVerdict, Reply, Summary, TopoMsg, Toward};
use palm_transport::codec::{self, Frame};
use palm_transport::{FRAME_VERSION, Hello, RelayMsg, RevocationList, Role};
use serde_json::json;
use std::fmt::Write as _;

#[path = "../../tests/support/hex.rs"]
mod hex;
use hex::{hex, unhex};
use std::path::PathBuf;

const FRAME_LEN_MAX: usize = 1 << 20;

fn golden_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/golden/frames-v{FRAME_VERSION}.txt"))
}

fn summary(name: &str, tag: &str, subtree: Vec<Summary>) -> Summary {
    Summary {
        name: name.into(),
        role: "realm".into(),
        tag: tag.into(),
        ready: vec!["cpu".into()],
        seats: 4,
        busy: 1,
        subtree,
        at_ms: 1_700_000_000_000,
    }
}

/// One of every message, with every field set to something recognisable.
fn samples() -> Vec<(&'static str, TreeMsg)> {
    let effect = ClaimedEffect {
        key: "abcd-1/0/1".into(),
        job: "abcd-1".into(),
        token: 7,
        lease_until: 1_700_000_030_000,
        request: EffectRequest::Run {
            cmd: "echo hi".into(),
            cwd: Some("/tmp".into()),
            env: vec![("K".into(), "V".into())],
            timeout_ms: Some(5_000),
            needs: vec!["gpu".into()],
            place: None,
        },
    };
    let outcome = Outcome::Run(RunResult {
        exit_code: Some(0),
        stdout: "hi\n".into(),
        stderr: String::new(),
        duration_ms: 3,
        timed_out: false,
        error: None,
    });
    let topo = |msg| TreeMsg::Topo(msg);
    vec![
        (
            "probe",
            TreeMsg::Probe {
                at_ms: 1_700_000_000_000,
            },
        ),
        (
            "summary",
            topo(TopoMsg::Summary(summary(
                "realm-1",
                "rrrr",
                vec![summary("edge-1", "eeee", vec![])],
            ))),
        ),
        (
            "parent",
            topo(TopoMsg::Parent(ParentInfo {
                name: "root".into(),
                role: "root".into(),
                tag: "oooo".into(),
                epoch: 42,
            })),
        ),
        (
            "forward",
            topo(TopoMsg::Forward {
                id: 1,
                toward: Toward::Job("abcd-1".into()),
                view_of: Some("abcd-1".into()),
                request: Json(json!({"op": "status", "job": "abcd-1"})),
                hops: 2,
                within_ms: 30_000,
            }),
        ),
        (
            "answer",
            topo(TopoMsg::Answer {
                id: 1,
                reply: Reply::Unreachable {
                    at: "realm-1".into(),
                    reason: "link down".into(),
                    since: Some(5),
                    view: Some(Json(json!({"ok": true}))),
                },
            }),
        ),
        (
            "answer-refused",
            topo(TopoMsg::Answer {
                id: 2,
                reply: Reply::Refused {
                    at: "root".into(),
                    reason: "`kv` is for the node's own control socket".into(),
                },
            }),
        ),
        (
            "place",
            topo(TopoMsg::Place {
                id: 3,
                effect,
                home: "root".into(),
            }),
        ),
        (
            "placed",
            topo(TopoMsg::Placed {
                id: 3,
                accepted: false,
                reason: Some("busy".into()),
            }),
        ),
        (
            "renew",
            topo(TopoMsg::Renew {
                id: 4,
                key: "abcd-1/0/1".into(),
                token: 7,
            }),
        ),
        (
            "renewed",
            topo(TopoMsg::Renewed {
                id: 4,
                verdict: RenewVerdict::Until(1_700_000_060_000),
            }),
        ),
        (
            "complete",
            topo(TopoMsg::Complete {
                id: 5,
                key: "abcd-1/0/1".into(),
                token: 7,
                outcome,
                node: "edge-1".into(),
            }),
        ),
        (
            "completed",
            topo(TopoMsg::Completed {
                id: 5,
                verdict: CompleteVerdict::Refused("stale token".into()),
            }),
        ),
        (
            "cancel",
            topo(TopoMsg::Cancel {
                key: "abcd-1/0/1".into(),
                token: 7,
            }),
        ),
        (
            "relay-revocations",
            TreeMsg::Relay(RelayMsg::Revocations(RevocationList {
                certificates: Vec::new(),
                names: vec!["edge-9".into()],
            })),
        ),
        // Appended since: a submit that names its home (`Toward::Node`). Frames only
        // ever join at the end of a version's file; an existing line never changes.
        (
            "forward-to-node",
            topo(TopoMsg::Forward {
                id: 2,
                toward: Toward::Node("realm-1".into()),
                view_of: None,
                request: Json(json!({"op": "submit", "flow": "x", "node": "realm-1"})),
                hops: 1,
                within_ms: 30_000,
            }),
        ),
    ]
}

/// `NAME HEX` lines: the hello frame, then each message as a `Frame::Message`.
fn encoded() -> String {
    let hello = Frame::<TreeMsg>::Hello(Hello {
        name: "edge-1".into(),
        role: Role::Edge,
        node_id: "n7d3kq".into(),
        software: "palm 0.0.0".into(),
    });
    let mut out = format!(
        "hello {}\n",
        hex(&codec::encode(&hello, FRAME_LEN_MAX).unwrap())
    );
    for (name, msg) in samples() {
        let bytes = codec::encode(&Frame::Message(msg), FRAME_LEN_MAX).expect("encode");
        let _ = writeln!(out, "{name} {}", hex(&bytes));
    }
    out
}

#[test]
fn the_wire_format_is_what_the_golden_file_says() {
    let now = encoded();
    let path = golden_path();
    let golden = match std::fs::read_to_string(&path) {
        Ok(golden) => golden,
        Err(_) if std::env::var_os("PALM_BLESS").is_some() => {
            std::fs::write(&path, &now).expect("write the golden file");
            now.clone()
        }
        Err(err) => panic!(
            "no golden file for frame version {FRAME_VERSION} at {} ({err}); PALM_BLESS=1 writes it",
            path.display()
        ),
    };
    for (now, golden) in now.lines().zip(golden.lines()) {
        assert_eq!(
            now, golden,
            "the wire format changed without a FRAME_VERSION bump (still {FRAME_VERSION})"
        );
    }
    assert_eq!(now.lines().count(), golden.lines().count());
}

#[test]
fn golden_frames_decode_to_the_same_messages() {
    let golden = std::fs::read_to_string(golden_path()).expect("golden file");
    let samples = samples();
    let mut decoded = 0;
    for line in golden.lines().skip(1) {
        let (name, bytes) = line.split_once(' ').expect("NAME HEX");
        let bytes = unhex(bytes);
        // A length prefix, then the body the transport decodes.
        let mut decoder = codec::FrameDecoder::new(FRAME_LEN_MAX);
        decoder.extend(&bytes);
        let frame = decoder
            .next_frame::<TreeMsg>()
            .expect("decodes")
            .expect("whole");
        let expected = &samples
            .iter()
            .find(|(n, _)| *n == name)
            .expect("a sample")
            .1;
        match frame {
            Frame::Message(msg) => assert_eq!(&msg, expected, "{name}"),
            _ => panic!("{name}: not a message frame"),
        }
        decoded += 1;
    }
    assert_eq!(decoded, samples.len());
}
