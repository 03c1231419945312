//! Unit tests of routing, placement, projections and the protocol's encoding.

use super::*;
use crate::hop::Refusal;

fn summary(
    name: &str,
    tag: &str,
    ready: &[&str],
    seats: u32,
    busy: u32,
    subtree: Vec<Summary>,
) -> Summary {
    Summary {
        name: name.into(),
        role: if subtree.is_empty() { "edge" } else { "realm" }.into(),
        tag: tag.into(),
        ready: ready.iter().map(|s| (*s).to_owned()).collect(),
        seats,
        busy,
        subtree,
        at_ms: 0,
    }
}

/// root ← realm ← (edge1, edge2 offers `blue`), seen from the realm and from the root.
/// edge2 counts 3 of its 2 seats busy: one place is left in its queue
/// ([`PLACED_QUEUE_PER_SEAT`]).
fn realm() -> Topology {
    let mut realm = Topology::new("realm", Role::Realm, "rrrr", Some("root"));
    realm.parent_link(10, "root", true);
    realm.child_link(10, "edge1", true);
    realm.child_link(10, "edge2", true);
    realm.child_summary(20, summary("edge1", "e111", &["cpu"], 2, 0, vec![]));
    realm.child_summary(20, summary("edge2", "e222", &["blue"], 2, 3, vec![]));
    realm
}

#[test]
fn jobs_route_to_their_home() {
    let realm = realm();
    assert_eq!(realm.route_job("rrrr-4"), Route::Local);
    assert_eq!(realm.route_job("e222-1"), Route::Child("edge2".into()));
    assert_eq!(
        realm.route_job("zzzz-9"),
        Route::Parent,
        "unknown tags go up"
    );
    let mut root = Topology::new("root", Role::Root, "oooo", None);
    root.child_link(10, "realm", true);
    let me = realm.summary(30, vec![], 2, 0);
    root.child_summary(30, me);
    assert_eq!(root.route_job("rrrr-4"), Route::Child("realm".into()));
    assert_eq!(
        root.route_job("e111-2"),
        Route::Child("realm".into()),
        "a tag deep in the subtree"
    );
    assert_eq!(root.route_job("oooo-1"), Route::Local);
    assert_eq!(
        root.route_job("zzzz-9"),
        Route::Local,
        "the root has nowhere above"
    );
}

#[test]
fn a_submit_naming_its_home_goes_to_that_node_and_never_to_an_edge() {
    let realm = realm();
    assert_eq!(realm.route_node("realm"), Route::Local);
    assert_eq!(realm.route_node("root"), Route::Parent, "not below: up");
    assert_eq!(realm.route_node("realm2"), Route::Parent);
    assert!(
        matches!(realm.route_node("edge2"), Route::Unreachable(r) if r.contains("is an edge")),
        "an edge homes no jobs"
    );
    let mut root = Topology::new("root", Role::Root, "oooo", None);
    root.child_link(10, "realm", true);
    root.child_link(10, "realm2", true);
    root.child_summary(30, realm.summary(30, vec![], 2, 0));
    root.child_summary(
        30,
        summary(
            "realm2",
            "r222",
            &[],
            2,
            0,
            vec![summary("edge3", "e333", &[], 1, 0, vec![])],
        ),
    );
    assert_eq!(root.route_node("root"), Route::Local);
    assert_eq!(root.route_node("realm2"), Route::Child("realm2".into()));
    assert!(matches!(root.route_node("edge3"), Route::Unreachable(r) if r.contains("is an edge")));
    assert!(
        matches!(root.route_node("nowhere"), Route::Unreachable(r) if r.contains("no node called `nowhere`")),
        "the top of the tree knows every node"
    );
    root.child_link(40, "realm2", false);
    assert!(
        matches!(root.route_node("realm2"), Route::Unreachable(r) if r.contains("link is down"))
    );
    let mut edge = Topology::new("edge1", Role::Edge, "e111", Some("realm"));
    edge.parent_link(5, "realm", true);
    assert!(matches!(edge.route_node("edge1"), Route::Unreachable(r) if r.contains("is an edge")));
    assert_eq!(edge.route_node("realm2"), Route::Parent);
}

#[test]
fn edges_home_nothing_and_need_their_parent() {
    let mut edge = Topology::new("edge1", Role::Edge, "e111", Some("realm"));
    assert!(
        matches!(edge.route_submit(), Route::Unreachable(reason) if reason.contains("`realm`"))
    );
    edge.parent_link(5, "realm", true);
    assert_eq!(edge.route_submit(), Route::Parent);
    assert_eq!(realm().route_submit(), Route::Local);
    edge.parent_link(50, "realm", false);
    let projection = edge.projection();
    assert!(!projection.valid);
    assert_eq!(projection.home_unreachable_since, Some(50));
    assert!(matches!(edge.route_job("rrrr-1"), Route::Unreachable(_)));
}

#[test]
fn placement_prefers_local_then_the_freest_able_child() {
    let mut realm = realm();
    assert_eq!(realm.place(30, &["blue".into()], true), Placement::Local);
    assert_eq!(
        realm.place(30, &["blue".into()], false),
        Placement::Child("edge2".into())
    );
    assert_eq!(realm.place(30, &["gpu".into()], false), Placement::Nowhere);
    assert_eq!(
        realm.place(30, &[], false),
        Placement::Child("edge1".into()),
        "most free seats"
    );
    realm.placed_on("edge2");
    assert_eq!(
        realm.place(30, &["blue".into()], false),
        Placement::Nowhere,
        "edge2 is full"
    );
    realm.child_summary(40, summary("edge2", "e222", &["blue"], 2, 0, vec![]));
    realm.child_link(41, "edge2", false);
    assert_eq!(
        realm.place(42, &["blue".into()], false),
        Placement::Nowhere,
        "edge2 is down"
    );
    realm.child_link(43, "edge2", true);
    assert_eq!(
        realm.place(44, &["blue".into()], false),
        Placement::Child("edge2".into())
    );
    assert_eq!(
        realm.place(44 + SUMMARY_STALE_MS + 1, &["blue".into()], false),
        Placement::Nowhere,
        "a stale summary is not trusted"
    );
}

#[test]
fn a_relay_places_through_the_child_whose_subtree_offers_the_needs() {
    // realm ← edge2 ← edge3: only edge3, two hops down, offers `gpu`.
    let mut realm = realm();
    let deep = summary("edge3", "e333", &["gpu"], 1, 1, vec![]);
    realm.child_summary(40, summary("edge2", "e222", &[], 1, 1, vec![deep]));
    assert_eq!(
        realm.place(41, &["gpu".into()], false),
        Placement::Child("edge2".into()),
        "edge2 is full and lacks gpu, but edge3 below it can run it"
    );
    realm.placed_on_target("edge2", "edge3");
    assert_eq!(
        realm.place(41, &["gpu".into()], false),
        Placement::Nowhere,
        "edge3's one seat and its one queue place are taken"
    );
}

#[test]
fn a_child_down_makes_its_jobs_unreachable_not_misrouted() {
    let mut realm = realm();
    realm.child_link(60, "edge2", false);
    match realm.route_job("e222-1") {
        Route::Unreachable(reason) => assert!(reason.contains("edge2"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn messages_survive_postcard() {
    let messages = vec![
        TopoMsg::Summary(summary(
            "e",
            "t",
            &["x"],
            1,
            0,
            vec![summary("f", "u", &[], 1, 0, vec![])],
        )),
        TopoMsg::Forward {
            id: 3,
            toward: Toward::Job("t-1".into()),
            view_of: Some("t-1".into()),
            request: palm_actors::json::Json(serde_json::json!({"op": "status", "job": "t-1"})),
            hops: 2,
            within_ms: 1_000,
        },
        TopoMsg::Answer {
            id: 3,
            reply: Reply::Unreachable {
                at: "realm".into(),
                reason: "down".into(),
                since: Some(4),
                view: Some(palm_actors::json::Json(serde_json::json!({"ok": true}))),
            },
        },
        TopoMsg::Renewed {
            id: 9,
            verdict: RenewVerdict::Until(9),
        },
        TopoMsg::Completed {
            id: 10,
            verdict: CompleteVerdict::Unreachable("cut".into()),
        },
        TopoMsg::Cancel {
            key: "k".into(),
            token: 4,
        },
    ];
    for message in messages {
        let bytes = postcard::to_allocvec(&message).expect("encode");
        let back: TopoMsg = postcard::from_bytes(&bytes).expect("decode");
        assert_eq!(back, message);
    }
}

#[test]
fn the_view_names_every_node_and_the_projection() {
    let realm = realm();
    let me = realm.summary(30, vec!["cpu".into()], 2, 0);
    let view = realm.view(30, &me);
    assert_eq!(view["role"], "realm");
    assert_eq!(view["projection"]["valid"], true);
    let names: Vec<&str> = view["tree"]["children"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["edge1", "edge2"]);
    assert_eq!(view["tree"]["children"][1]["capabilities"][0], "blue");
    assert_eq!(view["parent"]["link"]["state"], "up");

    // Seen from the root, the edges are a level further down: each still shows its link
    // (up, since its realm reports it) and when it was last heard of.
    let mut root = Topology::new("root", Role::Root, "oooo", None);
    root.child_link(10, "realm", true);
    let mut edge = summary("edge2", "e222", &["blue"], 2, 0, vec![]);
    edge.at_ms = 25;
    root.child_summary(30, summary("realm", "rrrr", &[], 2, 0, vec![edge]));
    let me = root.summary(40, vec![], 2, 0);
    let view = root.view(40, &me);
    let realm = &view["tree"]["children"][0];
    assert_eq!(realm["link"]["state"], "up");
    let edge = &realm["children"][0];
    assert_eq!(edge["name"], "edge2");
    assert_eq!(
        edge["link"],
        serde_json::json!({"direction": "child", "state": "up", "last_heard": 25, "reported_by": "realm"})
    );
}

#[test]
fn a_tag_claimed_twice_is_never_guessed() {
    let mut realm = realm();
    realm.child_summary(30, summary("edge1", "rrrr", &[], 1, 0, vec![]));
    assert!(
        matches!(realm.route_job("rrrr-1"), Route::Unreachable(r) if r.contains("more than one node"))
    );
    realm.child_summary(31, summary("edge1", "e222", &[], 1, 0, vec![]));
    assert!(matches!(realm.route_job("e222-1"), Route::Unreachable(_)));
}

#[test]
fn projections_keep_the_latest_answer_and_forget_the_oldest() {
    let mut projections = Projections::default();
    let answer = |n: u64| palm_actors::json::Json(serde_json::json!({"n": n}));
    projections.remember("rrrr-1", &answer(1));
    projections.remember("rrrr-1", &answer(2));
    assert_eq!(projections.view("rrrr-1"), Some(&answer(2)));
    for i in 0..PROJECTIONS_MAX as u64 {
        projections.remember(&format!("ssss-{i}"), &answer(i));
    }
    assert!(
        projections.view("rrrr-1").is_none(),
        "the oldest is forgotten"
    );
    assert!(projections.view("ssss-5").is_some());
}

#[test]
fn placement_reaches_grandchildren_through_their_parent() {
    // root ← realm ← (edge1 cpu, edge2 blue busy 1 of 2).
    let mut root = Topology::new("root", Role::Root, "oooo", None);
    root.child_link(10, "realm", true);
    root.child_summary(20, realm().summary(20, vec![], 1, 2));
    let targets = root.placement_targets(25);
    let names: Vec<(&str, &str, u32, u32)> = targets
        .iter()
        .map(|t| (t.via.as_str(), t.node.as_str(), t.hops, t.free))
        .collect();
    assert_eq!(
        names,
        [("realm", "edge1", 2, 4), ("realm", "edge2", 2, 1)],
        "the full realm is no target; the freest edge comes first"
    );
    assert_eq!(targets[1].ready, ["blue"]);
    root.placed_on_target("realm", "edge2");
    assert!(
        root.placement_targets(25).iter().all(|t| t.node != "edge2"),
        "edge2's last queue place is taken"
    );
    root.completed_on("edge2");
    assert_eq!(
        root.placement_targets(25)
            .iter()
            .find(|t| t.node == "edge2")
            .map(|t| t.free),
        Some(1),
        "a completion frees a place before the next summary"
    );
    root.child_link(30, "realm", false);
    assert!(
        root.placement_targets(31).is_empty(),
        "a down link hides its subtree"
    );
    root.child_link(32, "realm", true);
    assert!(
        root.placement_targets(32 + SUMMARY_STALE_MS + 1).is_empty(),
        "a stale summary hides its subtree"
    );
}

/// A root with one linked child, `edge1`, and its outputs drained.
fn root_with_a_child() -> HopCore {
    let mut root = HopCore::new(
        HopConfig {
            name: "root".into(),
            role: Role::Root,
            tag: "oooo".into(),
            parent: None,
            epoch: 1,
            seed: 7,
        },
        0,
    );
    root.handle_link(1, "edge1", Direction::Child, true);
    while root.poll_output().is_some() {}
    root
}

fn drain(core: &mut HopCore) -> Vec<HopOutput> {
    std::iter::from_fn(|| core.poll_output()).collect()
}

fn forward_of(request: serde_json::Value, toward: Toward) -> TopoMsg {
    TopoMsg::Forward {
        id: 5,
        toward,
        view_of: None,
        request: Json(request),
        hops: 0,
        within_ms: 1_000,
    }
}

#[test]
fn a_child_is_refused_what_only_the_node_itself_may_ask() {
    let mut root = root_with_a_child();
    for op in [
        "token_create",
        "token_revoke",
        "places_add",
        "flows_add",
        "kv",
    ] {
        root.handle_frame(2, "edge1", forward_of(json!({"op": op}), Toward::NewHome));
        let outputs = drain(&mut root);
        assert!(
            !outputs.iter().any(|o| matches!(o, HopOutput::Apply { .. })),
            "{op} was applied"
        );
        let answered = outputs.iter().any(|o| {
            matches!(o, HopOutput::Send { to, msg: TopoMsg::Answer { id: 5, reply: Reply::Refused { at, reason } } }
                if to == "edge1" && at == "root" && reason.contains(op))
        });
        assert!(answered, "{op}: {outputs:?}");
    }
    // A summary under a sibling's name, a cancel sent up: dropped, counted.
    root.handle_frame(
        3,
        "edge1",
        TopoMsg::Summary(summary("edge2", "e222", &[], 1, 0, vec![])),
    );
    root.handle_frame(
        4,
        "edge1",
        TopoMsg::Cancel {
            key: "oooo-1/0/1".into(),
            token: 1,
        },
    );
    let (count, latest) = root.refusals();
    let latest: Vec<&Refusal> = latest.collect();
    assert_eq!(count, 7);
    assert!(latest.iter().all(|r| r.peer == "edge1"));
    assert_eq!(latest[5].kind, "summary");
    assert_eq!(latest[6].kind, "cancel");
    assert!(!root.topology().has_child("edge2"), "no pose as a sibling");
    assert_eq!(root.topology().route_job("e222-1"), Route::Local);
    // A submit toward a node must name that node itself, and only a submit goes so.
    for (request, toward) in [
        (
            json!({"op": "submit", "flow": "x"}),
            Toward::Node("root".into()),
        ),
        (
            json!({"op": "submit", "flow": "x", "node": "other"}),
            Toward::Node("root".into()),
        ),
        (
            json!({"op": "cancel", "job": "oooo-1", "node": "root"}),
            Toward::Node("root".into()),
        ),
    ] {
        root.handle_frame(6, "edge1", forward_of(request.clone(), toward));
        let outputs = drain(&mut root);
        assert!(
            !outputs.iter().any(|o| matches!(o, HopOutput::Apply { .. })),
            "{request} was applied"
        );
    }
    root.handle_frame(
        6,
        "edge1",
        forward_of(
            json!({"op": "submit", "flow": "x", "node": "root"}),
            Toward::Node("root".into()),
        ),
    );
    assert!(
        drain(&mut root)
            .iter()
            .any(|o| matches!(o, HopOutput::Apply { .. })),
        "a submit naming this node is applied here"
    );
    let (count, _) = root.refusals();
    assert_eq!(count, 10);
    // The link is still up: an allowed request still goes through.
    root.handle_frame(
        5,
        "edge1",
        forward_of(json!({"op": "submit", "flow": "x"}), Toward::NewHome),
    );
    assert!(
        drain(&mut root)
            .iter()
            .any(|o| matches!(o, HopOutput::Apply { .. })),
        "a submit from the child is applied at its home"
    );
}

#[test]
fn a_report_at_home_names_the_child_it_came_from_as_the_holder() {
    let mut root = root_with_a_child();
    root.handle_frame(
        2,
        "edge1",
        TopoMsg::Complete {
            id: 9,
            key: "oooo-1/0/1".into(),
            token: 3,
            outcome: palm_actors::bt::Outcome::Call {
                ok: true,
                value: Json(json!(null)),
                error: None,
            },
            node: "edge2".into(),
        },
    );
    let holder = drain(&mut root).into_iter().find_map(|o| match o {
        HopOutput::Complete { holder, .. } => Some(holder),
        _ => None,
    });
    // Whatever node the report claims ran it, the home checks the claim against the
    // link it came over.
    assert_eq!(holder.as_deref(), Some("child:edge1"));
}

#[test]
fn a_summary_travels_flat_and_comes_back_the_same_tree() {
    let deep = summary(
        "realm",
        "rrrr",
        &["cpu"],
        4,
        1,
        vec![
            summary("edge1", "e111", &["cpu"], 2, 0, vec![]),
            summary(
                "realm2",
                "r222",
                &[],
                1,
                0,
                vec![summary("edge3", "e333", &["blue"], 1, 1, vec![])],
            ),
        ],
    );
    let flat = FlatSummary::from(deep.clone());
    let parents: Vec<Option<u32>> = flat.nodes.iter().map(|n| n.parent).collect();
    assert_eq!(parents, vec![None, Some(0), Some(0), Some(2)], "preorder");
    let bytes = postcard::to_allocvec(&TopoMsg::Summary(deep.clone())).expect("encode");
    let back: TopoMsg = postcard::from_bytes(&bytes).expect("decode");
    assert_eq!(back, TopoMsg::Summary(deep));
}

#[test]
fn a_crafted_summary_fails_to_decode_instead_of_recursing() {
    let node = |parent: Option<u32>| SummaryNode {
        parent,
        name: "n".into(),
        role: "edge".into(),
        tag: "t".into(),
        ready: vec![],
        seats: 1,
        busy: 0,
        at_ms: 0,
    };
    let decode = |nodes: Vec<SummaryNode>| {
        let bytes = postcard::to_allocvec(&FlatSummary { nodes }).expect("encode");
        postcard::from_bytes::<Summary>(&bytes)
    };
    // A chain a hundred thousand deep: refused at the depth bound, no stack used.
    let chain: Vec<SummaryNode> = (0..100_000u32).map(|i| node(i.checked_sub(1))).collect();
    assert!(decode(chain).is_err());
    // Too many nodes, a parent that is not an earlier node, a second root, nothing.
    let wide: Vec<SummaryNode> = (0..=SUMMARY_NODES_MAX as u32)
        .map(|i| node((i > 0).then_some(0)))
        .collect();
    assert!(decode(wide).is_err());
    assert!(decode(vec![node(None), node(Some(1))]).is_err());
    assert!(decode(vec![node(None), node(None)]).is_err());
    assert!(decode(vec![]).is_err());
    // Within the bounds it decodes.
    let ok: Vec<SummaryNode> = (0..=HOPS_MAX).map(|i| node(i.checked_sub(1))).collect();
    assert_eq!(decode(ok).expect("decodes").size(), HOPS_MAX as usize + 1);
}
