//! HopCore at its API boundary: several cores wired by a hand-stepped network (no
//! sockets, no clock), each with a tiny fake host standing in for the kernel. Every test
//! states a rule of the tree protocol and drives the exact messages that exercise it.

use palm_actors::bt::{EffectRequest, Outcome, RunResult};
use palm_actors::json::Json;
use palm_actors::path::ClaimedEffect;
use palm_topology::{
    CompleteVerdict, Direction, HopConfig, HopCore, HopOutput, LocalFacts, Reply, Role,
    RouteRequest, Routed, TopoMsg, Toward,
};
use serde_json::json;
use std::collections::{BTreeMap, VecDeque};

const LEASE_MS: u64 = 3_000;

/// What a node's fake host saw, in order.
#[derive(Default)]
struct Host {
    replies: Vec<(u64, Reply)>,
    started: Vec<(String, u64)>,
    stopped: Vec<(String, u64)>,
    released: Vec<(String, u64)>,
    completed: Vec<(String, u64, String)>,
    renewed: Vec<(String, u64)>,
    events: Vec<String>,
    /// Effects this home can hand out when asked to claim for a child.
    claimable: VecDeque<ClaimedEffect>,
    /// When set, claims are answered only when the test says so.
    hold_claims: bool,
    held: Vec<(u64, Vec<ClaimedEffect>)>,
    /// Answers to `Apply`: the job's status.
    status: String,
}

struct Net {
    now: u64,
    nodes: BTreeMap<String, (HopCore, Host)>,
    /// Messages on the wire: (from, to, msg).
    wire: VecDeque<(String, String, TopoMsg)>,
    /// Links that are cut: messages over them are dropped.
    cut: Vec<(String, String)>,
    /// Drop the next message of this kind.
    drop_next: Option<&'static str>,
}

fn node(name: &str, role: Role, tag: &str, parent: Option<&str>, ready: &[&str]) -> HopCore {
    let mut core = HopCore::new(
        HopConfig {
            name: name.into(),
            role,
            tag: tag.into(),
            parent: parent.map(str::to_owned),
            epoch: 1,
            seed: name.len() as u64 * 1_000_003,
        },
        0,
    );
    core.set_local(LocalFacts {
        ready: ready.iter().map(|s| (*s).to_owned()).collect(),
        seats: 1,
        busy: 0,
    });
    core
}

fn effect(key: &str, token: u64, needs: &[&str], lease_until: u64) -> ClaimedEffect {
    ClaimedEffect {
        key: key.into(),
        job: key.split('/').next().unwrap_or(key).into(),
        token,
        lease_until,
        request: EffectRequest::Run {
            cmd: "true".into(),
            cwd: None,
            env: vec![],
            timeout_ms: None,
            needs: needs.iter().map(|s| (*s).to_owned()).collect(),
            place: None,
        },
    }
}

fn ok_outcome() -> Outcome {
    Outcome::Run(RunResult {
        exit_code: Some(0),
        ..RunResult::default()
    })
}

impl Net {
    /// root(tag `root`) ← realm(tag `rlm`) ← edge offering `gpu`, all linked.
    fn three() -> Net {
        let mut net = Net {
            now: 1_000,
            nodes: BTreeMap::new(),
            wire: VecDeque::new(),
            cut: Vec::new(),
            drop_next: None,
        };
        net.add(node("root", Role::Root, "root", None, &[]));
        net.add(node("realm", Role::Realm, "rlm", Some("root"), &[]));
        net.add(node("edge", Role::Edge, "edg", Some("realm"), &["gpu"]));
        net.link("root", "realm");
        net.link("realm", "edge");
        net.settle();
        // Summaries climb: the edge's, then the realm's with the edge inside.
        net.advance(1_100);
        net.advance(1_100);
        net
    }

    fn add(&mut self, core: HopCore) {
        let name = core.topology().name().to_owned();
        self.nodes.insert(
            name,
            (
                core,
                Host {
                    status: "running".into(),
                    ..Host::default()
                },
            ),
        );
    }

    fn core(&mut self, name: &str) -> &mut HopCore {
        &mut self.nodes.get_mut(name).expect("a node").0
    }

    fn host(&mut self, name: &str) -> &mut Host {
        &mut self.nodes.get_mut(name).expect("a node").1
    }

    fn link(&mut self, parent: &str, child: &str) {
        let now = self.now;
        self.core(parent)
            .handle_link(now, child, Direction::Child, true);
        self.core(child)
            .handle_link(now, parent, Direction::Parent, true);
        self.cut.retain(|(a, b)| !(a == parent && b == child));
    }

    fn unlink(&mut self, parent: &str, child: &str) {
        let now = self.now;
        self.core(parent)
            .handle_link(now, child, Direction::Child, false);
        self.core(child)
            .handle_link(now, parent, Direction::Parent, false);
        self.cut.push((parent.to_owned(), child.to_owned()));
    }

    fn is_cut(&self, a: &str, b: &str) -> bool {
        self.cut
            .iter()
            .any(|(p, c)| (p == a && c == b) || (p == b && c == a))
    }

    /// Drains every node's outputs, acting as each host would, until the wire is empty.
    fn settle(&mut self) {
        for _ in 0..1_000 {
            let names: Vec<String> = self.nodes.keys().cloned().collect();
            for name in &names {
                self.drain(name);
            }
            let Some((from, to, msg)) = self.wire.pop_front() else {
                return;
            };
            if self.is_cut(&from, &to) {
                continue;
            }
            if self.drop_next == Some(msg.kind()) {
                self.drop_next = None;
                continue;
            }
            let now = self.now;
            self.core(&to).handle_frame(now, &from, msg);
        }
        panic!("the network did not settle");
    }

    fn drain(&mut self, name: &str) {
        let now = self.now;
        let (core, host) = self.nodes.get_mut(name).expect("a node");
        while let Some(output) = core.poll_output() {
            match output {
                HopOutput::Send { to, msg } => self.wire.push_back((name.to_owned(), to, msg)),
                HopOutput::Reply { id, reply } => host.replies.push((id, reply)),
                HopOutput::Apply { serve, .. } => {
                    let response =
                        json!({"ok": true, "result": {"status": host.status, "from": name}});
                    core.handle_applied(now, serve, Json(response));
                }
                HopOutput::Claim {
                    round, ready, max, ..
                } => {
                    let mut claimed = Vec::new();
                    while claimed.len() < max as usize {
                        let Some(position) = host.claimable.iter().position(|e| {
                            e.request.requirements().iter().all(|n| ready.contains(n))
                        }) else {
                            break;
                        };
                        claimed.push(host.claimable.remove(position).expect("present"));
                    }
                    if host.hold_claims {
                        host.held.push((round, claimed));
                    } else {
                        core.handle_claimed(now, round, claimed);
                    }
                }
                HopOutput::Release { key, token } => host.released.push((key, token)),
                HopOutput::Renew {
                    serve, key, token, ..
                } => {
                    host.renewed.push((key, token));
                    core.handle_renewed(now, serve, Ok(now + LEASE_MS));
                }
                HopOutput::Complete {
                    serve,
                    key,
                    token,
                    node,
                    ..
                } => {
                    host.completed.push((key, token, node));
                    core.handle_completed(now, serve, Ok(()));
                }
                HopOutput::Start { effect, .. } => host.started.push((effect.key, effect.token)),
                HopOutput::Stop { key, token, .. } => host.stopped.push((key, token)),
                HopOutput::Event(event) => {
                    host.events.push(format!("{}: {}", event.kind, event.text))
                }
            }
        }
    }

    /// Makes an effect needing `gpu` claimable at `home` and runs `home`'s placer now,
    /// acting on what it asks (without moving time or delivering frames).
    fn offer_and_place(&mut self, home: &str, key: &str, token: u64) {
        let now = self.now;
        self.host(home)
            .claimable
            .push_back(effect(key, token, &["gpu"], now + 60_000));
        self.core(home).wake_placer(now);
        self.core(home).handle_timeout(now);
        self.drain(home);
    }

    /// Moves time forward by `ms` in steps of at most 100 ms, firing timers.
    fn advance(&mut self, ms: u64) {
        let end = self.now + ms;
        while self.now < end {
            self.now = (self.now + 100).min(end);
            let now = self.now;
            let names: Vec<String> = self.nodes.keys().cloned().collect();
            for name in &names {
                self.core(name).handle_timeout(now);
            }
            self.settle();
        }
    }

    fn status(&mut self, at: &str, id: u64, job: &str) -> Routed {
        let now = self.now;
        let routed = self.core(at).handle_request(
            now,
            id,
            RouteRequest {
                toward: Toward::Job(job.into()),
                view_of: Some(job.into()),
                request: Json(json!({"op": "status", "job": job})),
                within_ms: 30_000,
            },
        );
        self.settle();
        routed
    }

    fn reply(&mut self, at: &str, id: u64) -> Reply {
        self.host(at)
            .replies
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("no reply {id} at {at}"))
    }

    fn events(&mut self, at: &str, kind: &str) -> usize {
        self.host(at)
            .events
            .iter()
            .filter(|e| e.starts_with(&format!("{kind}:")))
            .count()
    }
}

#[test]
fn a_request_hops_home_and_its_answer_comes_back() {
    let mut net = Net::three();
    assert_eq!(net.status("edge", 7, "root-1"), Routed::Away);
    match net.reply("edge", 7) {
        Reply::Home(Json(value)) => assert_eq!(value["result"]["from"], "root"),
        other => panic!("expected the root's answer, got {other:?}"),
    }
    assert_eq!(net.status("root", 8, "root-1"), Routed::Here);
    assert_eq!(net.status("edge", 9, "rlm-3"), Routed::Away);
    match net.reply("edge", 9) {
        Reply::Home(Json(value)) => assert_eq!(value["result"]["from"], "realm"),
        other => panic!("expected the realm's answer, got {other:?}"),
    }
    // Down the tree: the root routes the edge's tag through the realm.
    assert_eq!(net.status("root", 10, "edg-2"), Routed::Away);
    assert!(matches!(net.reply("root", 10), Reply::Home(_)));
}

#[test]
fn a_dead_home_two_hops_up_is_reported_as_a_projection_not_as_the_home() {
    let mut net = Net::three();
    net.status("edge", 1, "root-1");
    // The root dies: the realm notices, the edge's own link is fine.
    net.unlink("root", "realm");
    net.host("root").status = "succeeded".into();
    assert_eq!(net.status("edge", 2, "root-1"), Routed::Away);
    match net.reply("edge", 2) {
        Reply::Unreachable {
            at, view, since, ..
        } => {
            assert_eq!(at, "realm", "the realm is where the way is cut");
            assert!(since.is_some());
            let view = view.expect("the realm relayed an answer before: it keeps it");
            assert_eq!(
                view.0["result"]["status"], "running",
                "the old view, not fresh"
            );
        }
        other => panic!("a projection must not pass for the home's word: {other:?}"),
    }
}

#[test]
fn a_forward_lost_with_its_link_is_answered_at_once() {
    let mut net = Net::three();
    // The request leaves the edge but the realm never sees it.
    net.cut.push(("realm".into(), "edge".into()));
    let now = net.now;
    net.core("edge").handle_request(
        now,
        5,
        RouteRequest {
            toward: Toward::NewHome,
            view_of: None,
            request: Json(json!({"op": "submit"})),
            within_ms: 30_000,
        },
    );
    net.settle();
    assert!(net.host("edge").replies.is_empty());
    // The link is replaced by a new connection: what was in flight is gone.
    let now = net.now;
    net.core("edge")
        .handle_link(now, "realm", Direction::Parent, true);
    net.settle();
    assert!(matches!(net.reply("edge", 5), Reply::Unreachable { .. }));
}

#[test]
fn a_forward_with_no_answer_times_out() {
    let mut net = Net::three();
    net.drop_next = Some("forward");
    let now = net.now;
    let routed = net.core("edge").handle_request(
        now,
        3,
        RouteRequest {
            toward: Toward::Job("root-1".into()),
            view_of: None,
            request: Json(json!({"op": "status", "job": "root-1"})),
            within_ms: 2_000,
        },
    );
    assert_eq!(routed, Routed::Away);
    net.settle();
    net.advance(1_900);
    assert!(net.host("edge").replies.is_empty());
    net.advance(200);
    assert!(matches!(net.reply("edge", 3), Reply::Unreachable { .. }));
}

#[test]
fn placement_runs_two_hops_down_and_its_outcome_climbs_home() {
    let mut net = Net::three();
    let now = net.now;
    net.host("root")
        .claimable
        .push_back(effect("root-1/0/1", 11, &["gpu"], now + LEASE_MS));
    net.core("root").wake_placer(now);
    net.advance(100);
    assert_eq!(net.host("edge").started, vec![("root-1/0/1".into(), 11)]);
    assert_eq!(net.events("realm", "placement_relayed"), 1);
    assert!(net.host("root").released.is_empty());
    // Renewals climb through the realm while it runs.
    net.advance(2_000);
    assert!(!net.host("root").renewed.is_empty());
    assert!(net.events("realm", "report_relayed") >= 1);
    let now = net.now;
    net.core("edge")
        .handle_finished(now, "root-1/0/1", 11, Some(ok_outcome()));
    net.settle();
    assert_eq!(
        net.host("root").completed,
        vec![("root-1/0/1".into(), 11, "edge".into())]
    );
    assert_eq!(net.core("edge").placed_running(), 0);
    assert_eq!(net.core("root").placed_out(), 0);
    // Reported once: no retries after the home recorded it.
    net.advance(5_000);
    assert_eq!(net.host("root").completed.len(), 1);
}

#[test]
fn a_refusal_releases_the_claim_and_silence_does_not() {
    let mut net = Net::three();
    // The edge's `gpu` goes away after the root and realm last heard of it: the root
    // places, the realm relays, the edge refuses, and the refusal climbs to the root.
    net.core("edge").set_local(LocalFacts {
        ready: vec![],
        seats: 1,
        busy: 0,
    });
    let now = net.now;
    net.host("root")
        .claimable
        .push_back(effect("root-1/0/1", 1, &["gpu"], now + 60_000));
    net.core("root").wake_placer(now);
    net.advance(100);
    assert_eq!(net.events("edge", "placement_refused"), 1);
    assert_eq!(net.host("root").released, vec![("root-1/0/1".into(), 1)]);
    assert!(net.host("edge").started.is_empty());

    // Silence: a placement whose answer is lost is not released.
    let mut net = Net::three();
    let now = net.now;
    net.host("root")
        .claimable
        .push_back(effect("root-9/0/1", 9, &["gpu"], now + 60_000));
    net.drop_next = Some("placed");
    net.core("root").wake_placer(now);
    net.advance(100);
    assert_eq!(net.host("edge").started.len(), 1);
    net.advance(palm_topology::hop::PLACE_ANSWER_MS + 1_000);
    assert!(
        net.host("root").released.is_empty(),
        "no answer is not a refusal"
    );
    assert!(
        net.events("root", "placement_unanswered") + net.events("realm", "relay_unanswered") >= 1
    );
}

#[test]
fn a_copy_of_a_placement_never_starts_a_second_run() {
    let mut net = Net::three();
    let now = net.now;
    let placed = effect("root-1/0/1", 4, &["gpu"], now + LEASE_MS);
    for id in [1, 1, 2] {
        net.core("edge").handle_frame(
            now,
            "realm",
            TopoMsg::Place {
                id,
                effect: placed.clone(),
                home: "root".into(),
            },
        );
    }
    net.settle();
    assert_eq!(net.host("edge").started, vec![("root-1/0/1".into(), 4)]);
    // Through the relay, a copy while it is being passed down is not passed again.
    let copy = effect("root-2/0/1", 5, &["gpu"], now + LEASE_MS);
    for _ in 0..2 {
        net.core("realm").handle_frame(
            now,
            "root",
            TopoMsg::Place {
                id: 50,
                effect: copy.clone(),
                home: "root".into(),
            },
        );
    }
    net.settle();
    assert_eq!(net.events("realm", "placement_relayed"), 1);
}

#[test]
fn a_newer_claim_of_the_same_key_replaces_the_older_run_and_an_old_cancel_spares_it() {
    let mut net = Net::three();
    let now = net.now;
    let first = effect("root-1/0/1", 4, &["gpu"], now + LEASE_MS);
    let second = effect("root-1/0/1", 7, &["gpu"], now + LEASE_MS);
    for (id, effect) in [(1, first), (2, second)] {
        net.core("edge").handle_frame(
            now,
            "realm",
            TopoMsg::Place {
                id,
                effect,
                home: "root".into(),
            },
        );
    }
    net.settle();
    assert_eq!(
        net.host("edge").started,
        vec![("root-1/0/1".into(), 4), ("root-1/0/1".into(), 7)]
    );
    assert_eq!(net.host("edge").stopped, vec![("root-1/0/1".into(), 4)]);
    // A late cancel of token 4 leaves token 7 running.
    net.core("edge").handle_frame(
        now,
        "realm",
        TopoMsg::Cancel {
            key: "root-1/0/1".into(),
            token: 4,
        },
    );
    net.settle();
    assert_eq!(net.core("edge").placed_running(), 1);
    net.core("edge").handle_frame(
        now,
        "realm",
        TopoMsg::Cancel {
            key: "root-1/0/1".into(),
            token: 7,
        },
    );
    net.settle();
    assert_eq!(net.core("edge").placed_running(), 0);
}

#[test]
fn a_cancel_reaches_a_relayed_placement_and_a_late_copy_is_refused() {
    let mut net = Net::three();
    let now = net.now;
    let placed = effect("root-1/0/1", 4, &["gpu"], now + LEASE_MS);
    net.core("realm").handle_frame(
        now,
        "root",
        TopoMsg::Place {
            id: 1,
            effect: placed.clone(),
            home: "root".into(),
        },
    );
    net.settle();
    assert_eq!(net.host("edge").started.len(), 1);
    net.core("realm").handle_frame(
        now,
        "root",
        TopoMsg::Cancel {
            key: "root-1/0/1".into(),
            token: 4,
        },
    );
    net.settle();
    assert_eq!(net.host("edge").stopped, vec![("root-1/0/1".into(), 4)]);
    net.core("realm").handle_frame(
        now,
        "root",
        TopoMsg::Place {
            id: 2,
            effect: placed,
            home: "root".into(),
        },
    );
    net.settle();
    assert_eq!(net.host("edge").started.len(), 1, "never started again");
}

#[test]
fn an_outcome_is_reported_until_the_home_answers_then_given_up_after_the_lease() {
    let mut net = Net::three();
    let now = net.now;
    net.host("root")
        .claimable
        .push_back(effect("root-1/0/1", 4, &["gpu"], now + LEASE_MS));
    net.core("root").wake_placer(now);
    net.advance(100);
    net.unlink("realm", "edge");
    let now = net.now;
    net.core("edge")
        .handle_finished(now, "root-1/0/1", 4, Some(ok_outcome()));
    net.advance(3_000);
    assert!(net.host("root").completed.is_empty());
    // Back within the give-up window: the outcome gets home once.
    net.link("realm", "edge");
    net.advance(3_000);
    assert_eq!(net.host("root").completed.len(), 1);

    // Cut for longer than lease + give-up: the edge stops trying.
    let mut net = Net::three();
    let now = net.now;
    net.host("root")
        .claimable
        .push_back(effect("root-1/0/1", 4, &["gpu"], now + LEASE_MS));
    net.core("root").wake_placer(now);
    net.advance(100);
    net.unlink("root", "realm");
    let now = net.now;
    net.core("edge")
        .handle_finished(now, "root-1/0/1", 4, Some(ok_outcome()));
    net.advance(LEASE_MS + palm_topology::hop::REPORT_AFTER_LEASE_MS + 2_000);
    assert_eq!(net.events("edge", "report_given_up"), 1);
    assert!(
        net.events("edge", "report_sent") > 10,
        "it kept trying first"
    );
}

#[test]
fn a_refused_renewal_stops_the_placed_effect() {
    let mut net = Net::three();
    let now = net.now;
    net.core("edge").handle_frame(
        now,
        "realm",
        TopoMsg::Place {
            id: 1,
            effect: effect("rlm-1/0/1", 4, &["gpu"], now + LEASE_MS),
            home: "realm".into(),
        },
    );
    net.settle();
    // The realm's fake host renews everything; make the realm's core see a refusal.
    let now = net.now;
    net.core("edge").handle_frame(
        now,
        "realm",
        TopoMsg::Renewed {
            id: 12345,
            verdict: palm_topology::RenewVerdict::Refused("stale".into()),
        },
    );
    net.settle();
    assert!(
        net.host("edge").stopped.is_empty(),
        "an answer to nothing is ignored"
    );
    // A lease that cannot be renewed for a whole lease past its end is lost.
    net.unlink("realm", "edge");
    net.advance(2 * LEASE_MS + 500);
    assert_eq!(net.host("edge").stopped, vec![("rlm-1/0/1".into(), 4)]);
}

#[test]
fn a_peer_may_only_say_what_its_side_of_the_link_may_say() {
    let mut net = Net::three();
    let now = net.now;
    // A child placing work on its parent, and a parent reporting an outcome to its child.
    net.core("realm").handle_frame(
        now,
        "edge",
        TopoMsg::Place {
            id: 1,
            effect: effect("rlm-1/0/1", 1, &[], now + LEASE_MS),
            home: "edge".into(),
        },
    );
    net.core("realm").handle_frame(
        now,
        "root",
        TopoMsg::Complete {
            id: 2,
            key: "rlm-1/0/1".into(),
            token: 1,
            outcome: ok_outcome(),
            node: "root".into(),
        },
    );
    net.core("realm").handle_frame(
        now,
        "stranger",
        TopoMsg::Cancel {
            key: "k".into(),
            token: 1,
        },
    );
    net.settle();
    assert_eq!(net.events("realm", "refused_message"), 2);
    assert_eq!(net.events("realm", "unknown_peer"), 1);
    assert!(net.host("realm").started.is_empty());
    assert!(net.host("realm").completed.is_empty());
}

#[test]
fn a_summary_under_another_name_is_refused() {
    let mut net = Net::three();
    let now = net.now;
    let mut forged = net.core("edge").summary(now);
    forged.name = "sibling".into();
    forged.tag = "sibl".into();
    net.core("realm")
        .handle_frame(now, "edge", TopoMsg::Summary(forged));
    net.settle();
    assert_eq!(net.events("realm", "refused_message"), 1);
    assert_eq!(
        net.core("realm").topology().route_job("sibl-1"),
        palm_topology::Route::Parent
    );
}

#[test]
fn a_request_that_travelled_too_far_is_refused() {
    let mut net = Net::three();
    let now = net.now;
    net.core("realm").handle_frame(
        now,
        "edge",
        TopoMsg::Forward {
            id: 77,
            toward: Toward::Job("root-1".into()),
            view_of: None,
            request: Json(json!({"op": "status", "job": "root-1"})),
            hops: palm_topology::HOPS_MAX + 1,
            within_ms: 1_000,
        },
    );
    let mut answered = None;
    while let Some(output) = net.core("realm").poll_output() {
        if let HopOutput::Send {
            to,
            msg: TopoMsg::Answer { id, reply },
        } = output
        {
            answered = Some((to, id, reply));
        }
    }
    assert_eq!(
        answered,
        Some((
            "edge".into(),
            77,
            Reply::TooFar {
                hops: palm_topology::HOPS_MAX + 1
            }
        ))
    );
}

#[test]
fn a_completion_for_a_job_homed_below_is_refused() {
    let mut net = Net::three();
    let now = net.now;
    net.core("realm").handle_frame(
        now,
        "edge",
        TopoMsg::Complete {
            id: 3,
            key: "edg-1/0/1".into(),
            token: 1,
            outcome: ok_outcome(),
            node: "edge".into(),
        },
    );
    let mut verdict = None;
    while let Some(output) = net.core("realm").poll_output() {
        if let HopOutput::Send {
            msg: TopoMsg::Completed { verdict: v, .. },
            ..
        } = output
        {
            verdict = Some(v);
        }
    }
    assert!(
        matches!(verdict, Some(CompleteVerdict::Refused(_))),
        "{verdict:?}"
    );
}

#[test]
fn a_wake_during_a_placement_round_runs_the_next_round_when_it_ends() {
    let mut net = Net::three();
    let now = net.now;
    net.host("root").hold_claims = true;
    net.offer_and_place("root", "root-1/0/1", 1);
    // One claim per target (the realm, the edge below it), held by the host.
    let rounds = std::mem::take(&mut net.host("root").held);
    assert!(!rounds.is_empty(), "a round asked to claim");
    // More work while the round's claims are being made durable: the wake is kept.
    net.offer_and_place("root", "root-2/0/1", 2);
    assert!(
        net.host("root").held.is_empty(),
        "the round in flight holds every free seat"
    );
    // The round ends, and the next one asks at once (not at the next timer round).
    for (round, claimed) in rounds {
        net.core("root").handle_claimed(now, round, claimed);
    }
    net.drain("root");
    let next: Vec<String> = std::mem::take(&mut net.host("root").held)
        .into_iter()
        .flat_map(|(_, claimed)| claimed.into_iter().map(|e| e.key))
        .collect();
    assert_eq!(
        next,
        ["root-2/0/1"],
        "the kept wake ran a round as soon as the last one ended"
    );
}

#[test]
fn a_completion_and_the_claim_refilling_its_seat_are_asked_in_one_turn() {
    let mut net = Net::three();
    let now = net.now;
    // The edge takes two (one seat, one queued): fill both, keep a third waiting.
    for (key, token) in [("root-1/0/1", 1), ("root-2/0/1", 2), ("root-3/0/1", 3)] {
        net.host("root")
            .claimable
            .push_back(effect(key, token, &["gpu"], now + 60_000));
    }
    net.core("root").wake_placer(now);
    net.advance(100);
    assert_eq!(net.host("edge").started.len(), 2, "the edge took two");
    assert!(
        net.host("root").released.is_empty(),
        "the queued one was not refused"
    );
    assert_eq!(net.host("root").claimable.len(), 1);
    // The first ends; its report climbs to the realm and up, one hop at a time.
    let now = net.now;
    net.core("edge")
        .handle_finished(now, "root-1/0/1", 1, Some(ok_outcome()));
    net.drain("edge");
    let (from, to, msg) = net.wire.pop_front().expect("the report");
    net.core(&to).handle_frame(now, &from, msg);
    net.drain("realm");
    let (from, to, msg) = net.wire.pop_front().expect("the report, relayed");
    assert_eq!(to, "root");
    // The home's turn: the frame, then what it made due — as the node's hop task does.
    let root = net.core("root");
    root.handle_frame(now, &from, msg);
    if root.next_timeout().is_some_and(|at| at <= now) {
        root.handle_timeout(now);
    }
    let mut asked = Vec::new();
    while let Some(output) = root.poll_output() {
        match output {
            HopOutput::Complete { key, .. } => asked.push(format!("complete {key}")),
            HopOutput::Claim { node, max, .. } if node == "edge" => {
                asked.push(format!("claim {max} for {node}"))
            }
            _ => {}
        }
    }
    asked.sort();
    assert_eq!(asked, ["claim 1 for edge", "complete root-1/0/1"]);
}

#[test]
fn seats_a_round_holds_are_not_reported_up_as_busy() {
    let mut net = Net::three();
    let now = net.now;
    // The realm homes jobs too: its round holds the edge's seats while its claim is
    // being made durable.
    net.host("realm").hold_claims = true;
    net.offer_and_place("realm", "rlm-1/0/1", 1);
    assert!(!net.host("realm").held.is_empty(), "a round is in flight");
    // What the root hears of the edge: nothing runs there, so nothing is busy (a held
    // seat reported up would starve the root's own placements on that edge).
    let summary = net.core("realm").summary(now);
    let edge = summary
        .subtree
        .iter()
        .find(|s| s.name == "edge")
        .expect("the edge in the realm's summary");
    assert_eq!(edge.busy, 0);
    // And once the claim comes back, the one effect placed is counted.
    for (round, claimed) in std::mem::take(&mut net.host("realm").held) {
        net.core("realm").handle_claimed(now, round, claimed);
    }
    let summary = net.core("realm").summary(now);
    let edge = summary
        .subtree
        .iter()
        .find(|s| s.name == "edge")
        .expect("edge");
    assert_eq!(edge.busy, 1);
}
