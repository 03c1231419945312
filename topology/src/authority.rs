//! Who may ask what over a link: the tree's one authorisation table.
//!
//! A link is authenticated (mTLS: the peer is a node of this tree, by name); this module
//! says what that peer may ask, by where it stands — parent or child. [`crate::HopCore`]
//! checks every frame against it before acting; a refused frame is dropped, answered
//! with a refusal when it expected an answer, recorded with the peer's name, and the
//! link stays up.
//!
//! Two tables:
//! - [`MESSAGES`]: which side of a link may send each topology message.
//! - [`FORWARDABLE`]: which control operations a `Forward` may carry toward a home.
//!   Everything else — tokens, places, flows, kv, emits, node settings — is for the
//!   node's own control socket only, and never crosses a link.

use crate::msg::{TopoMsg, Toward};
use palm_actors::bt::EffectRequest;
use serde_json::Value;

/// Which end of a link a peer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The peer is this node's parent.
    Parent,
    /// The peer is a child of this node.
    Child,
}

/// Who may send a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sender {
    /// Only a parent, to its child.
    Parent,
    /// Only a child, to its parent.
    Child,
    /// Either end.
    Either,
}

impl Sender {
    fn admits(self, from: Direction) -> bool {
        matches!(
            (self, from),
            (Sender::Either, _)
                | (Sender::Parent, Direction::Parent)
                | (Sender::Child, Direction::Child)
        )
    }
}

/// Every topology message kind ([`TopoMsg::kind`]) and who may send it.
pub const MESSAGES: &[(&str, Sender)] = &[
    // A child describes itself and its subtree (under its own name only).
    ("summary", Sender::Child),
    // A parent says who it is.
    ("parent", Sender::Parent),
    // Requests travel toward a job's home either way; answers come back the same way.
    ("forward", Sender::Either),
    ("answer", Sender::Either),
    // Work is placed down only, and answered up.
    ("place", Sender::Parent),
    ("placed", Sender::Child),
    // Reports of placed work go up only, and are answered down.
    ("renew", Sender::Child),
    ("renewed", Sender::Parent),
    ("complete", Sender::Child),
    ("completed", Sender::Parent),
    // Only the side that placed work may stop it.
    ("cancel", Sender::Parent),
];

/// Where a forwarded operation is going: to the home of the job it names, or to the
/// nearest node that homes new jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Goes {
    /// Toward the home of the request's `job`.
    ToItsJob,
    /// Toward the nearest home of new jobs.
    ToANewHome,
}

/// The control operations (`op` of the request) a `Forward` may carry, and where each
/// goes. Either end of a link may forward them; nothing else is ever applied from a
/// link.
pub const FORWARDABLE: &[(&str, Goes)] = &[
    ("submit", Goes::ToANewHome),
    ("jobs", Goes::ToANewHome),
    ("status", Goes::ToItsJob),
    ("wait", Goes::ToItsJob),
    ("continue", Goes::ToItsJob),
    ("cancel", Goes::ToItsJob),
    ("retry", Goes::ToItsJob),
    ("inspect", Goes::ToItsJob),
];

/// Whether a peer at `from` may send `msg`; the reason when not.
pub fn check_message(msg: &TopoMsg, from: Direction) -> Result<(), String> {
    let kind = msg.kind();
    match MESSAGES.iter().find(|(k, _)| *k == kind) {
        Some((_, sender)) if sender.admits(from) => Ok(()),
        Some((_, sender)) => Err(format!(
            "`{kind}` may come only from a {}, not from a {}",
            match sender {
                Sender::Parent => "parent",
                _ => "child",
            },
            from_name(from)
        )),
        None => Err(format!("`{kind}` is not a message of the tree protocol")),
    }
}

/// Whether a forwarded `request` (a control request as JSON) may be applied at a home
/// for a peer, going `toward`; the reason when not. The operation must be one of
/// [`FORWARDABLE`], and it must go where it says: a job's request toward that job's
/// home, a new job toward a new home.
pub fn check_forward(request: &Value, toward: &Toward) -> Result<(), String> {
    let Some(op) = request.get("op").and_then(Value::as_str) else {
        return Err("a forwarded request without an `op`".to_owned());
    };
    let Some((_, goes)) = FORWARDABLE.iter().find(|(o, _)| *o == op) else {
        return Err(format!(
            "`{op}` is for the node's own control socket; it never crosses a link"
        ));
    };
    match (goes, toward) {
        (Goes::ToANewHome, Toward::NewHome) => Ok(()),
        // A submit that names its home goes there, and says so itself.
        (Goes::ToANewHome, Toward::Node(node)) => {
            match request.get("node").and_then(Value::as_str) {
                Some(named) if named == node => Ok(()),
                named => Err(format!(
                    "`{op}` routed toward node {node} names node {}",
                    named.unwrap_or("(none)")
                )),
            }
        }
        (Goes::ToItsJob, Toward::Node(_)) => Err(format!("`{op}` must go toward its job's home")),
        (Goes::ToItsJob, Toward::Job(job)) => match request.get("job").and_then(Value::as_str) {
            Some(named) if named == job => Ok(()),
            named => Err(format!(
                "`{op}` routed toward job {job} names job {}",
                named.unwrap_or("(none)")
            )),
        },
        (Goes::ToANewHome, Toward::Job(_)) => {
            Err(format!("`{op}` must go toward a new home, not a job's"))
        }
        (Goes::ToItsJob, Toward::NewHome) => Err(format!("`{op}` must go toward its job's home")),
    }
}

/// What a `Place` from a parent may ask this node to run: a `run` command or a provider
/// `call` that names at least one need (a capability or place), which must then be ready
/// here or offered by a child (checked by the hop core). A placement with no need is
/// refused: a parent places only what it cannot run itself, so such a message can only
/// be an attempt to make this node run arbitrary text.
pub fn check_place(request: &EffectRequest) -> Result<(), String> {
    match request {
        EffectRequest::Run { .. } | EffectRequest::Call { .. } => {}
        other => {
            return Err(format!(
                "a `{}` effect is never placed on another node",
                other.kind_name()
            ));
        }
    }
    if request.requirements().is_empty() {
        return Err(
            "the effect names no capability or place: a parent places only work that \
             needs what this node offers"
                .to_owned(),
        );
    }
    Ok(())
}

fn from_name(from: Direction) -> &'static str {
    match from {
        Direction::Parent => "parent",
        Direction::Child => "child",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use palm_actors::json::Json;
    use serde_json::json;

    fn forward(request: Value, toward: Toward) -> Result<(), String> {
        check_forward(&request, &toward)
    }

    #[test]
    fn every_message_kind_is_in_the_table_once() {
        let kinds = [
            TopoMsg::Summary(Default::default()),
            TopoMsg::Parent(Default::default()),
            TopoMsg::Forward {
                id: 1,
                toward: Toward::NewHome,
                view_of: None,
                request: Json(Value::Null),
                hops: 0,
                within_ms: 1,
            },
            TopoMsg::Cancel {
                key: "k".into(),
                token: 1,
            },
        ];
        for msg in &kinds {
            let found = MESSAGES.iter().filter(|(k, _)| *k == msg.kind()).count();
            assert_eq!(found, 1, "{}", msg.kind());
        }
        assert_eq!(MESSAGES.len(), 11, "one row per TopoMsg variant");
    }

    #[test]
    fn each_message_comes_only_from_its_side() {
        let place_like = TopoMsg::Cancel {
            key: "k".into(),
            token: 1,
        };
        let err = check_message(&place_like, Direction::Child).unwrap_err();
        assert!(err.contains("only from a parent"), "{err}");
        assert!(check_message(&place_like, Direction::Parent).is_ok());
        let summary = TopoMsg::Summary(Default::default());
        assert!(check_message(&summary, Direction::Parent).is_err());
        assert!(check_message(&summary, Direction::Child).is_ok());
    }

    #[test]
    fn only_job_operations_cross_a_link() {
        for op in [
            "token_create",
            "token_revoke",
            "places_add",
            "places_remove",
            "places_restart",
            "flows_add",
            "kv",
            "emit",
            "vitality",
            "tree",
        ] {
            let err = forward(json!({"op": op}), Toward::NewHome).unwrap_err();
            assert!(err.contains("never crosses a link"), "{op}: {err}");
        }
        assert!(forward(json!({"op": "submit", "flow": "x"}), Toward::NewHome).is_ok());
        assert!(forward(json!({"op": "jobs"}), Toward::NewHome).is_ok());
        assert!(
            forward(
                json!({"op": "status", "job": "a-1"}),
                Toward::Job("a-1".into())
            )
            .is_ok()
        );
        assert!(forward(json!({"no": "op"}), Toward::NewHome).is_err());
    }

    #[test]
    fn a_request_goes_where_it_says() {
        let err = forward(
            json!({"op": "cancel", "job": "b-2"}),
            Toward::Job("a-1".into()),
        )
        .unwrap_err();
        assert!(err.contains("names job b-2"), "{err}");
        assert!(forward(json!({"op": "cancel", "job": "a-1"}), Toward::NewHome).is_err());
        assert!(forward(json!({"op": "submit"}), Toward::Job("a-1".into())).is_err());
    }

    #[test]
    fn a_placement_must_name_what_the_child_offers() {
        let run = |needs: &[&str], place: Option<&str>| EffectRequest::Run {
            cmd: "make".into(),
            cwd: None,
            env: Vec::new(),
            timeout_ms: None,
            needs: needs.iter().map(|n| (*n).to_owned()).collect(),
            place: place.map(str::to_owned),
        };
        assert!(check_place(&run(&["gpu"], None)).is_ok());
        assert!(check_place(&run(&[], Some("db"))).is_ok());
        let bare = check_place(&run(&[], None)).expect_err("free text with no need");
        assert!(bare.contains("names no capability"), "{bare}");
        let call = EffectRequest::Call {
            provider: "kv".into(),
            args: Json::NULL,
            needs: vec!["gpu".into()],
            timeout_ms: None,
        };
        assert!(check_place(&call).is_ok());
        let timer = check_place(&EffectRequest::Timer { deadline: 1 }).expect_err("a timer");
        assert!(timer.contains("`timer`"), "{timer}");
    }
}
