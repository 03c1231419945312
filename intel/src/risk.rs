//! The risk of changing a file: a score from 0 to 100, a level, and the reasons.
//!
//! Seven factors, each scaled to [0, 1] and weighted (weights sum to 100):
//!
//! | factor | weight | scaled value |
//! |---|---|---|
//! | churn | 20 | ln(1 + commits) / ln(1 + 50), capped at 1 |
//! | recent | 20 | changes in the last 30 days / 10, capped at 1 |
//! | fan_in | 20 | files that import it or use its symbols / 20, capped at 1 |
//! | authors | 10 | (distinct authors − 1) / 4, capped at 1 |
//! | coupling | 10 | files sharing ≥ 2 commits with it / 10, capped at 1 |
//! | size | 10 | lines / 1000, capped at 1 |
//! | untested | 10 | 1 when no test of it was found (code files only), else 0 |
//!
//! score = round(Σ weight × value); level: `low` below 30, `medium` below 60, else `high`.
//! Every factor that adds points is a reason, strongest first. The same table is in
//! docs/intel.md.

use serde::Serialize;

/// Commits at which churn saturates.
pub const CHURN_SATURATION_COMMITS: f64 = 50.0;
/// Changes in 30 days at which "recent" saturates.
pub const RECENT_SATURATION_CHANGES: f64 = 10.0;
/// Dependent files at which fan-in saturates.
pub const FAN_IN_SATURATION_FILES: f64 = 20.0;
/// Extra authors at which "authors" saturates.
pub const AUTHORS_SATURATION_EXTRA: f64 = 4.0;
/// Coupled files at which coupling saturates.
pub const COUPLING_SATURATION_FILES: f64 = 10.0;
/// Shared commits that make a co-change a coupling.
pub const COUPLING_COMMITS_MIN: u32 = 2;
/// Lines at which size saturates.
pub const SIZE_SATURATION_LINES: f64 = 1000.0;
/// Scores from here are `medium`.
pub const MEDIUM_SCORE_MIN: u32 = 30;
/// Scores from here are `high`.
pub const HIGH_SCORE_MIN: u32 = 60;

/// What the score is computed from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RiskInputs {
    /// Commits that changed the file.
    pub churn: u32,
    /// Of those, in the last 30 days.
    pub touches_30d: u32,
    /// Distinct authors.
    pub authors: u32,
    /// Newest change (seconds since the Unix epoch).
    pub last_touched: Option<i64>,
    /// Files that import it or use its symbols.
    pub fan_in: u32,
    /// Files sharing at least `COUPLING_COMMITS_MIN` commits with it.
    pub coupled_files: u32,
    /// Lines.
    pub lines: u32,
    /// Tests found for it (files, or the file itself for inline tests).
    pub tests: u32,
    /// False for files where "untested" means nothing (tests, docs, config).
    pub testable: bool,
}

/// One reason behind a score.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RiskReason {
    /// The factor (`churn`, `recent`, `fan_in`, `authors`, `coupling`, `size`, `untested`).
    pub factor: &'static str,
    /// Points it adds (one decimal).
    pub points: f64,
    /// In words.
    pub detail: String,
}

/// A score with its reasons.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RiskAssessment {
    /// 0..=100.
    pub score: u32,
    /// `low`, `medium` or `high`.
    pub level: &'static str,
    /// Reasons, strongest first.
    pub reasons: Vec<RiskReason>,
}

/// The level of a score.
pub fn level(score: u32) -> &'static str {
    if score >= HIGH_SCORE_MIN {
        "high"
    } else if score >= MEDIUM_SCORE_MIN {
        "medium"
    } else {
        "low"
    }
}

fn plural(n: u32, one: &str, many: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

/// Scores a file.
pub fn assess(inputs: &RiskInputs) -> RiskAssessment {
    let churn = (f64::from(inputs.churn).ln_1p() / CHURN_SATURATION_COMMITS.ln_1p()).min(1.0);
    let recent = (f64::from(inputs.touches_30d) / RECENT_SATURATION_CHANGES).min(1.0);
    let fan_in = (f64::from(inputs.fan_in) / FAN_IN_SATURATION_FILES).min(1.0);
    let authors = (f64::from(inputs.authors.saturating_sub(1)) / AUTHORS_SATURATION_EXTRA).min(1.0);
    let coupling = (f64::from(inputs.coupled_files) / COUPLING_SATURATION_FILES).min(1.0);
    let size = (f64::from(inputs.lines) / SIZE_SATURATION_LINES).min(1.0);
    let untested = if inputs.testable && inputs.tests == 0 {
        1.0
    } else {
        0.0
    };
    let factors = [
        (
            "churn",
            20.0 * churn,
            format!("changed in {}", plural(inputs.churn, "commit", "commits")),
        ),
        (
            "recent",
            20.0 * recent,
            format!(
                "{} in the last 30 days",
                plural(inputs.touches_30d, "change", "changes")
            ),
        ),
        (
            "fan_in",
            20.0 * fan_in,
            format!("used by {}", plural(inputs.fan_in, "file", "files")),
        ),
        (
            "authors",
            10.0 * authors,
            format!("{} distinct authors", inputs.authors),
        ),
        (
            "coupling",
            10.0 * coupling,
            format!(
                "changes together with {} (≥ {COUPLING_COMMITS_MIN} shared commits)",
                plural(inputs.coupled_files, "file", "files")
            ),
        ),
        ("size", 10.0 * size, plural(inputs.lines, "line", "lines")),
        ("untested", 10.0 * untested, "no tests found".to_owned()),
    ];
    let total: f64 = factors.iter().map(|(_, p, _)| p).sum();
    let score = (total.round() as u32).min(100);
    let mut reasons: Vec<RiskReason> = factors
        .into_iter()
        .filter(|(_, points, _)| *points > 0.0)
        .map(|(factor, points, detail)| RiskReason {
            factor,
            points: (points * 10.0).round() / 10.0,
            detail,
        })
        .collect();
    reasons.sort_by(|a, b| b.points.total_cmp(&a.points).then(a.factor.cmp(b.factor)));
    RiskAssessment {
        score,
        level: level(score),
        reasons,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formula() {
        let quiet = assess(&RiskInputs {
            churn: 1,
            authors: 1,
            lines: 100,
            tests: 1,
            testable: true,
            ..RiskInputs::default()
        });
        // 20 × ln 2 / ln 51 = 3.53; size 10 × 0.1 = 1 → 4.5 → 5 (rounded half away).
        assert_eq!(quiet.score, 5);
        assert_eq!(quiet.level, "low");
        let hot = assess(&RiskInputs {
            churn: 50,
            touches_30d: 10,
            authors: 5,
            fan_in: 20,
            coupled_files: 10,
            lines: 1000,
            tests: 0,
            testable: true,
            last_touched: None,
        });
        assert_eq!(hot.score, 100);
        assert_eq!(hot.level, "high");
        assert_eq!(hot.reasons.len(), 7);
    }
}
