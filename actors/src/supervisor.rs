//! The supervisor's decisions, as in Erlang/OTP, without the actors.
//!
//! [`SupervisorCore`] knows the children (in start order), the strategy and the restart
//! intensity. When a child exits, [`SupervisorCore::handle_exit`] says what to do: nothing,
//! restart some children (stopping the others it names first, in reverse start order), or
//! give up and escalate because restarts came faster than `restarts_max` per `period_ms`.
//! `node/` hosts this core in a ractor actor; the simulator can host it directly.

use std::collections::VecDeque;

/// Which children restart when one fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Only the failed child.
    OneForOne,
    /// Every child: the others are stopped (reverse order) and all start again in order.
    OneForAll,
    /// The failed child and every child started after it.
    RestForOne,
}

/// When a child is restarted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restart {
    /// Always.
    Permanent,
    /// Only after an abnormal exit.
    Transient,
    /// Never.
    Temporary,
}

/// Restart intensity: more than `restarts_max` restarts within `period_ms` escalates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Intensity {
    /// Restarts tolerated per period.
    pub restarts_max: u32,
    /// The sliding window.
    pub period_ms: u64,
}

impl Default for Intensity {
    /// OTP's default is 1 restart per 5 s; organs that restart by re-reading the store
    /// can afford a little more.
    fn default() -> Self {
        Intensity {
            restarts_max: 3,
            period_ms: 5_000,
        }
    }
}

/// A child as the supervisor sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildSpec {
    /// Name, for logs.
    pub name: String,
    /// Restart policy.
    pub restart: Restart,
}

/// How a child ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exit {
    /// It stopped by itself, cleanly.
    Normal,
    /// It failed.
    Abnormal(String),
}

/// What the supervisor must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing: the child stays stopped.
    Ignore,
    /// Stop `stop` (in this order, already reverse start order), then start `start` (in
    /// this order, start order).
    Restart {
        /// Children to stop first.
        stop: Vec<usize>,
        /// Children to start.
        start: Vec<usize>,
    },
    /// Too many restarts: stop every child in reverse order and fail upward.
    Escalate {
        /// Why.
        reason: String,
    },
}

/// See the module docs.
#[derive(Clone, Debug)]
pub struct SupervisorCore {
    strategy: Strategy,
    intensity: Intensity,
    children: Vec<ChildSpec>,
    restarts: VecDeque<u64>,
}

impl SupervisorCore {
    /// A supervisor over `children`, given in start order.
    pub fn new(strategy: Strategy, intensity: Intensity, children: Vec<ChildSpec>) -> Self {
        SupervisorCore {
            strategy,
            intensity,
            children,
            restarts: VecDeque::new(),
        }
    }

    /// Children, in start order.
    pub fn children(&self) -> &[ChildSpec] {
        &self.children
    }

    /// Start order.
    pub fn start_order(&self) -> Vec<usize> {
        (0..self.children.len()).collect()
    }

    /// Stop order: the reverse of start order.
    pub fn stop_order(&self) -> Vec<usize> {
        (0..self.children.len()).rev().collect()
    }

    /// Decides what to do after child `index` exited at `now`.
    pub fn handle_exit(&mut self, now: u64, index: usize, exit: &Exit) -> Decision {
        let Some(child) = self.children.get(index) else {
            return Decision::Ignore;
        };
        let restart = match (child.restart, exit) {
            (Restart::Permanent, _) => true,
            (Restart::Transient, Exit::Abnormal(_)) => true,
            (Restart::Transient, Exit::Normal) | (Restart::Temporary, _) => false,
        };
        if !restart {
            return Decision::Ignore;
        }
        while let Some(oldest) = self.restarts.front() {
            if now.saturating_sub(*oldest) >= self.intensity.period_ms {
                self.restarts.pop_front();
            } else {
                break;
            }
        }
        self.restarts.push_back(now);
        if self.restarts.len() as u32 > self.intensity.restarts_max {
            let why = match exit {
                Exit::Normal => "exited".to_owned(),
                Exit::Abnormal(reason) => reason.clone(),
            };
            return Decision::Escalate {
                reason: format!(
                    "{} restarts within {} ms (last: {} {why})",
                    self.restarts.len(),
                    self.intensity.period_ms,
                    child.name
                ),
            };
        }
        let count = self.children.len();
        match self.strategy {
            Strategy::OneForOne => Decision::Restart {
                stop: Vec::new(),
                start: vec![index],
            },
            Strategy::OneForAll => Decision::Restart {
                stop: (0..count).rev().filter(|i| *i != index).collect(),
                start: (0..count).collect(),
            },
            Strategy::RestForOne => Decision::Restart {
                stop: (index + 1..count).rev().collect(),
                start: (index..count).collect(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core(strategy: Strategy) -> SupervisorCore {
        let children = ["a", "b", "c", "d"]
            .iter()
            .map(|n| ChildSpec {
                name: (*n).to_owned(),
                restart: Restart::Permanent,
            })
            .collect();
        SupervisorCore::new(strategy, Intensity::default(), children)
    }

    fn failed() -> Exit {
        Exit::Abnormal("boom".into())
    }

    #[test]
    fn strategies_pick_the_right_children() {
        assert_eq!(
            core(Strategy::OneForOne).handle_exit(0, 1, &failed()),
            Decision::Restart {
                stop: vec![],
                start: vec![1]
            }
        );
        assert_eq!(
            core(Strategy::OneForAll).handle_exit(0, 1, &failed()),
            Decision::Restart {
                stop: vec![3, 2, 0],
                start: vec![0, 1, 2, 3]
            }
        );
        assert_eq!(
            core(Strategy::RestForOne).handle_exit(0, 1, &failed()),
            Decision::Restart {
                stop: vec![3, 2],
                start: vec![1, 2, 3]
            }
        );
        assert_eq!(core(Strategy::OneForOne).stop_order(), vec![3, 2, 1, 0]);
    }

    #[test]
    fn intensity_escalates_and_the_window_slides() {
        let mut sup = core(Strategy::OneForOne);
        for t in [0, 1000, 2000] {
            assert!(matches!(
                sup.handle_exit(t, 0, &failed()),
                Decision::Restart { .. }
            ));
        }
        assert!(matches!(
            sup.handle_exit(3000, 0, &failed()),
            Decision::Escalate { .. }
        ));
        let mut sup = core(Strategy::OneForOne);
        for t in [0, 2000, 4000, 6000, 8000, 10_000] {
            assert!(
                matches!(sup.handle_exit(t, 2, &failed()), Decision::Restart { .. }),
                "restarts 2 s apart never exceed 3 per 5 s (t = {t})"
            );
        }
    }

    #[test]
    fn restart_policies() {
        let children = vec![
            ChildSpec {
                name: "t".into(),
                restart: Restart::Transient,
            },
            ChildSpec {
                name: "x".into(),
                restart: Restart::Temporary,
            },
        ];
        let mut sup = SupervisorCore::new(Strategy::OneForOne, Intensity::default(), children);
        assert_eq!(sup.handle_exit(0, 0, &Exit::Normal), Decision::Ignore);
        assert!(matches!(
            sup.handle_exit(0, 0, &failed()),
            Decision::Restart { .. }
        ));
        assert_eq!(sup.handle_exit(0, 1, &failed()), Decision::Ignore);
        assert_eq!(sup.handle_exit(0, 9, &failed()), Decision::Ignore);
    }
}
