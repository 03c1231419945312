//! Choosing the winner of a `best_of`: attempts ranked by gates approved, then checks
//! green, then a smaller diff, then a lower risk of the files touched, each key in the
//! order the flow gives. Pure: the node gathers the facts (patches, verdicts, the repo
//! index's risk) and this decides, with a reason for every place in the ranking.

use serde::Serialize;
use std::cmp::Ordering;

/// A ranking key (the flow's `rank:` list).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// More gates approved.
    Gates,
    /// Checks green (green, then not checked, then red).
    Verify,
    /// Fewer lines changed.
    DiffSize,
    /// A lower risk score of the files touched.
    Risk,
}

impl Key {
    /// Parses `gates`, `verify`, `diff_size` or `risk`.
    pub fn parse(name: &str) -> Option<Key> {
        match name {
            "gates" => Some(Key::Gates),
            "verify" => Some(Key::Verify),
            "diff_size" => Some(Key::DiffSize),
            "risk" => Some(Key::Risk),
            _ => None,
        }
    }

    /// The name as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Key::Gates => "gates",
            Key::Verify => "verify",
            Key::DiffSize => "diff_size",
            Key::Risk => "risk",
        }
    }
}

/// One attempt, as the ranking sees it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Candidate {
    /// Its index in the `best_of`.
    pub index: u32,
    /// Its agent provider.
    pub provider: Option<String>,
    /// `succeeded` or `failed` (the attempt's subtree).
    pub status: String,
    /// The patch it left (id), if any.
    pub patch: Option<String>,
    /// The patch's status (`pending`, `blocked`, `violation`...).
    pub patch_status: Option<String>,
    /// Gates that approved.
    pub gates_passed: u32,
    /// Gates asked.
    pub gates_total: u32,
    /// The last check's verdict (`None`: no check ran).
    pub tests_green: Option<bool>,
    /// Lines added plus removed.
    pub diff_lines: u64,
    /// Files changed.
    pub files: Vec<String>,
    /// The highest risk score (0..=100) of the files changed, when known.
    pub risk: Option<u32>,
}

impl Candidate {
    /// Can win: the attempt succeeded (every gate and check it must pass, passed) and
    /// left a patch that may land (not blocked by the secret scan, not from a run that
    /// broke its authority).
    pub fn eligible(&self) -> bool {
        self.status == "succeeded"
            && self.patch.is_some()
            && self.patch_status.as_deref() == Some("pending")
    }

    fn label(&self) -> String {
        match &self.provider {
            Some(provider) => format!("attempt {} ({provider})", self.index),
            None => format!("attempt {}", self.index),
        }
    }

    fn describe(&self, key: Key) -> String {
        match key {
            Key::Gates => format!("{}/{} gates approved", self.gates_passed, self.gates_total),
            Key::Verify => match self.tests_green {
                Some(true) => "checks green".to_owned(),
                Some(false) => "checks red".to_owned(),
                None => "no check ran".to_owned(),
            },
            Key::DiffSize => format!(
                "{} changed line{}",
                self.diff_lines,
                if self.diff_lines == 1 { "" } else { "s" }
            ),
            Key::Risk => match self.risk {
                Some(score) => format!("risk {score}"),
                None => "risk unknown".to_owned(),
            },
        }
    }
}

/// Better first. `None` when the key cannot tell them apart.
fn compare(a: &Candidate, b: &Candidate, key: Key) -> Ordering {
    match key {
        Key::Gates => b.gates_passed.cmp(&a.gates_passed),
        Key::Verify => {
            let score = |c: &Candidate| match c.tests_green {
                Some(true) => 0,
                None => 1,
                Some(false) => 2,
            };
            score(a).cmp(&score(b))
        }
        Key::DiffSize => a.diff_lines.cmp(&b.diff_lines),
        // A known risk goes before an unknown one, so the order stays transitive.
        Key::Risk => match (a.risk, b.risk) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        },
    }
}

/// The ranking: candidates best first, and why each stands where it does.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ranking {
    /// The winner's index, if any attempt is eligible.
    pub winner: Option<u32>,
    /// Indexes, best first.
    pub order: Vec<u32>,
    /// One line per attempt, best first.
    pub reasons: Vec<String>,
}

/// Ranks `candidates` by `keys` (eligible ones first; ties go to the lower index).
pub fn rank(candidates: &[Candidate], keys: &[Key]) -> Ranking {
    let mut sorted: Vec<&Candidate> = candidates.iter().collect();
    sorted.sort_by(|a, b| {
        b.eligible()
            .cmp(&a.eligible())
            .then_with(|| {
                keys.iter()
                    .map(|key| compare(a, b, *key))
                    .find(|o| o.is_ne())
                    .unwrap_or(Ordering::Equal)
            })
            .then_with(|| a.index.cmp(&b.index))
    });
    let winner = sorted.first().filter(|c| c.eligible()).map(|c| c.index);
    let mut reasons = Vec::new();
    for (place, candidate) in sorted.iter().enumerate() {
        let facts: Vec<String> = keys.iter().map(|k| candidate.describe(*k)).collect();
        let reason = if !candidate.eligible() {
            let why = match (&candidate.patch, candidate.patch_status.as_deref()) {
                _ if candidate.status != "succeeded" => {
                    format!(
                        "the attempt {} (a step it must pass did not)",
                        candidate.status
                    )
                }
                (None, _) => "it left no patch".to_owned(),
                (Some(_), Some(status)) => format!("its patch is {status}"),
                (Some(_), None) => "its patch has no status".to_owned(),
            };
            format!("{} cannot win: {why}", candidate.label())
        } else if place == 0 {
            format!("{} wins: {}", candidate.label(), facts.join(", "))
        } else {
            // Against the one just above it: the first key that told them apart.
            let above = sorted[place - 1];
            let decided = keys
                .iter()
                .find(|key| compare(above, candidate, **key).is_ne());
            match decided {
                Some(key) => format!(
                    "{} ranks {}: {} against {}'s {} ({})",
                    candidate.label(),
                    place + 1,
                    candidate.describe(*key),
                    above.label(),
                    above.describe(*key),
                    key.as_str()
                ),
                None => format!(
                    "{} ranks {}: tied with {} on {}; the earlier attempt goes first",
                    candidate.label(),
                    place + 1,
                    above.label(),
                    facts.join(", ")
                ),
            }
        };
        reasons.push(reason);
    }
    Ranking {
        winner,
        order: sorted.iter().map(|c| c.index).collect(),
        reasons,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(index: u32, green: Option<bool>, lines: u64) -> Candidate {
        Candidate {
            index,
            provider: Some(format!("p{index}")),
            status: "succeeded".into(),
            patch: Some(format!("id{index}")),
            patch_status: Some("pending".into()),
            gates_passed: 0,
            gates_total: 0,
            tests_green: green,
            diff_lines: lines,
            files: vec!["src/lib.rs".into()],
            risk: None,
        }
    }

    const ALL: [Key; 4] = [Key::Gates, Key::Verify, Key::DiffSize, Key::Risk];

    #[test]
    fn green_beats_red_then_the_smaller_diff_wins() {
        let candidates = [
            candidate(0, Some(false), 1),
            candidate(1, Some(true), 40),
            candidate(2, Some(true), 3),
        ];
        let ranking = rank(&candidates, &ALL);
        assert_eq!(ranking.winner, Some(2));
        assert_eq!(ranking.order, vec![2, 1, 0]);
        assert!(
            ranking.reasons[0].starts_with("attempt 2 (p2) wins"),
            "{ranking:?}"
        );
        assert!(
            ranking.reasons[1].contains("40 changed lines against"),
            "{ranking:?}"
        );
        assert!(ranking.reasons[2].contains("checks red"), "{ranking:?}");
    }

    #[test]
    fn gates_come_before_tests_and_no_patch_never_wins() {
        let mut gated = candidate(0, Some(false), 10);
        gated.gates_passed = 1;
        gated.gates_total = 1;
        let mut empty = candidate(1, Some(true), 0);
        empty.patch = None;
        let green = candidate(2, Some(true), 5);
        let ranking = rank(&[gated, empty, green], &ALL);
        assert_eq!(ranking.winner, Some(0));
        assert_eq!(ranking.order.last(), Some(&1));
        assert!(ranking.reasons[2].contains("left no patch"), "{ranking:?}");
    }

    #[test]
    fn nothing_eligible_means_no_winner_and_the_order_follows_the_keys() {
        let mut blocked = candidate(0, Some(true), 2);
        blocked.patch_status = Some("blocked".into());
        let ranking = rank(&[blocked], &ALL);
        assert_eq!(ranking.winner, None);
        assert!(ranking.reasons[0].contains("its patch is blocked"));
        let ranking = rank(
            &[candidate(0, Some(true), 9), candidate(1, Some(true), 2)],
            &[Key::Gates],
        );
        assert_eq!(ranking.winner, Some(0), "a tie goes to the earlier attempt");
        let mut risky = candidate(0, Some(true), 2);
        risky.risk = Some(80);
        let mut calm = candidate(1, Some(true), 2);
        calm.risk = Some(10);
        assert_eq!(rank(&[risky.clone(), calm.clone()], &ALL).winner, Some(1));
        // An unknown risk goes last, whatever the order the attempts come in.
        let mut unknown = candidate(2, Some(true), 2);
        unknown.risk = None;
        for order in [
            [risky.clone(), unknown.clone(), calm.clone()],
            [unknown.clone(), calm.clone(), risky.clone()],
            [calm.clone(), risky.clone(), unknown.clone()],
        ] {
            assert_eq!(rank(&order, &ALL).order, vec![1, 0, 2]);
        }
        // A failed attempt never wins, even with the smallest diff.
        let mut failed = candidate(0, Some(true), 1);
        failed.status = "failed".into();
        let ranking = rank(&[failed, candidate(1, Some(true), 9)], &ALL);
        assert_eq!(ranking.winner, Some(1));
        assert!(
            ranking.reasons[1].contains("the attempt failed"),
            "{ranking:?}"
        );
    }
}
