//! Fuzz body: every topology message, from a parent and from a child, into a live hop
//! core. The input is a sequence of `[peer, len, aux, postcard(TopoMsg)...]`
//! records; `peer` picks the parent, a child, or a stranger (and a few values link or
//! unlink a peer, or let time pass). Whatever arrives, the core refuses or handles it —
//! never a panic — and its outputs and tables stay bounded.
//! Shared by `fuzz/fuzz_targets/topology_msg.rs` and `topology/tests/fuzz_props.rs`.

use palm_topology::hop::{Direction, HopConfig, HopCore};
use palm_topology::{Role, TopoMsg};

const PEERS: [&str; 3] = ["root", "edge-1", "stranger"];

pub fn run(data: &[u8]) {
    let mut now = 1_700_000_000_000u64;
    let mut core = HopCore::new(
        HopConfig {
            name: "realm".into(),
            role: Role::Realm,
            tag: "r1".into(),
            parent: Some("root".into()),
            epoch: 1,
            seed: 7,
        },
        now,
    );
    core.handle_link(now, "root", Direction::Parent, true);
    core.handle_link(now, "edge-1", Direction::Child, true);
    let mut rest = data;
    while let [peer, len, aux, tail @ ..] = rest {
        let len = usize::from(*len).min(tail.len());
        let (body, next) = tail.split_at(len);
        rest = next;
        match peer % 8 {
            5 => core.handle_link(now, "edge-1", Direction::Child, peer & 0x80 == 0),
            6 => core.handle_link(now, "root", Direction::Parent, peer & 0x80 == 0),
            7 => {
                now += u64::from(*aux) * 1_000;
                core.handle_timeout(now);
            }
            pick => {
                if let Ok(msg) = postcard::from_bytes::<TopoMsg>(body) {
                    core.handle_frame(now, PEERS[usize::from(pick) % PEERS.len()], msg);
                }
            }
        }
        while core.poll_output().is_some() {}
        assert!(
            core.in_flight() <= 1 << 16,
            "requests in flight stay bounded"
        );
    }
    let _ = core.view(now);
}
