//! The simulated network between nodes: latency, loss, duplication, reordering (random
//! latency), partitions and clogging, all decided by the world's seeded RNG.
//!
//! The network never delivers by itself: `send` answers when (and how often) a message
//! arrives, and the world schedules the deliveries on its virtual clock. The topology
//! issue reuses it for real link protocols; today it carries the remote-seat protocol.

use palm_actors::random::Rng;
use std::collections::BTreeMap;

/// How lossy the network is.
#[derive(Clone, Debug, PartialEq)]
pub struct NetProfile {
    /// Smallest one-way latency.
    pub latency_ms_min: u64,
    /// Largest one-way latency (different latencies reorder messages).
    pub latency_ms_max: u64,
    /// Messages lost, in percent.
    pub loss_percent: u64,
    /// Messages delivered twice, in percent.
    pub duplicate_percent: u64,
}

/// What happened to one sent message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Delivered at these times (one, or two when duplicated).
    Delivered(Vec<u64>),
    /// Lost (at random, or the link is partitioned).
    Lost {
        /// True when a partition took it.
        partitioned: bool,
    },
}

/// See the module docs.
#[derive(Debug)]
pub struct Net {
    profile: NetProfile,
    /// Cut links (unordered node pairs) and when they heal.
    partitions: BTreeMap<(usize, usize), u64>,
    /// Clogged links: every message waits until this time.
    clogs: BTreeMap<(usize, usize), u64>,
}

fn link(a: usize, b: usize) -> (usize, usize) {
    (a.min(b), a.max(b))
}

impl Net {
    /// A network with `profile`, all links up.
    pub fn new(profile: NetProfile) -> Net {
        Net {
            profile,
            partitions: BTreeMap::new(),
            clogs: BTreeMap::new(),
        }
    }

    /// Decides the fate of a message sent from `from` to `to` at `now`.
    pub fn send(&mut self, rng: &mut Rng, now: u64, from: usize, to: usize) -> Fate {
        let key = link(from, to);
        if self.partitions.get(&key).is_some_and(|until| *until > now) {
            return Fate::Lost { partitioned: true };
        }
        if rng.chance(self.profile.loss_percent) {
            return Fate::Lost { partitioned: false };
        }
        let start = self.clogs.get(&key).copied().unwrap_or(now).max(now);
        let mut at =
            vec![start + rng.between(self.profile.latency_ms_min, self.profile.latency_ms_max)];
        if rng.chance(self.profile.duplicate_percent) {
            at.push(
                start + rng.between(self.profile.latency_ms_min, self.profile.latency_ms_max * 3),
            );
        }
        Fate::Delivered(at)
    }

    /// Cuts the link between `a` and `b` until `until`.
    pub fn partition(&mut self, a: usize, b: usize, until: u64) {
        self.partitions.insert(link(a, b), until);
    }

    /// Holds every message on the link between `a` and `b` until `until`.
    pub fn clog(&mut self, a: usize, b: usize, until: u64) {
        self.clogs.insert(link(a, b), until);
    }

    /// Heals every partition and clog.
    pub fn heal_all(&mut self) {
        self.partitions.clear();
        self.clogs.clear();
    }

    /// Makes the network reliable (no loss, no duplication) from now on.
    pub fn calm(&mut self) {
        self.profile.loss_percent = 0;
        self.profile.duplicate_percent = 0;
    }

    /// True while the link between `a` and `b` is cut.
    pub fn is_partitioned(&self, a: usize, b: usize, now: u64) -> bool {
        self.partitions
            .get(&link(a, b))
            .is_some_and(|until| *until > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lossy() -> NetProfile {
        NetProfile {
            latency_ms_min: 1,
            latency_ms_max: 10,
            loss_percent: 20,
            duplicate_percent: 20,
        }
    }

    #[test]
    fn the_same_seed_decides_the_same_fates() {
        let fates = |seed| {
            let mut rng = Rng::new(seed);
            let mut net = Net::new(lossy());
            (0..100)
                .map(|i| net.send(&mut rng, i, 0, 1))
                .collect::<Vec<_>>()
        };
        assert_eq!(fates(7), fates(7));
        assert_ne!(fates(7), fates(8));
        let all = fates(7);
        assert!(all.iter().any(|f| matches!(f, Fate::Lost { .. })));
        assert!(
            all.iter()
                .any(|f| matches!(f, Fate::Delivered(at) if at.len() == 2))
        );
    }

    #[test]
    fn partitions_cut_both_directions_until_healed_and_clogs_delay() {
        let mut rng = Rng::new(1);
        let mut net = Net::new(NetProfile {
            loss_percent: 0,
            duplicate_percent: 0,
            ..lossy()
        });
        net.partition(0, 2, 100);
        assert_eq!(
            net.send(&mut rng, 50, 2, 0),
            Fate::Lost { partitioned: true }
        );
        assert_eq!(
            net.send(&mut rng, 50, 0, 2),
            Fate::Lost { partitioned: true }
        );
        assert!(matches!(net.send(&mut rng, 50, 0, 1), Fate::Delivered(_)));
        assert!(matches!(net.send(&mut rng, 100, 0, 2), Fate::Delivered(_)));
        net.clog(0, 1, 500);
        match net.send(&mut rng, 10, 1, 0) {
            Fate::Delivered(at) => assert!(at[0] >= 500),
            other => panic!("{other:?}"),
        }
    }
}
