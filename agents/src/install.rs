//! `palm agents install`: the adoption block that tells an agent working in a repo how to
//! use Palm, written into AGENTS.md / CLAUDE.md between markers, so a second install
//! updates it in place and never touches the rest of the file.

use std::path::{Path, PathBuf};

/// The block's text (`palm agents guide` prints it).
pub const GUIDE: &str = include_str!("guide.md");

/// The line that opens the block.
pub const BEGIN: &str =
    "<!-- palm:begin (written by `palm agents install`; edits inside are replaced) -->";
/// The line that closes it.
pub const END: &str = "<!-- palm:end -->";

/// The files an install writes in `repo`: `names` when given, else those of AGENTS.md
/// and CLAUDE.md that exist, else AGENTS.md.
pub fn targets(repo: &Path, names: &[String]) -> Vec<PathBuf> {
    if !names.is_empty() {
        return names.iter().map(|n| repo.join(n)).collect();
    }
    let existing: Vec<PathBuf> = ["AGENTS.md", "CLAUDE.md"]
        .iter()
        .map(|n| repo.join(n))
        .filter(|p| p.exists())
        .collect();
    if existing.is_empty() {
        vec![repo.join("AGENTS.md")]
    } else {
        existing
    }
}

/// What an install did to one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// The file did not exist.
    Created,
    /// The block was added at the end.
    Appended,
    /// The block was replaced.
    Updated,
    /// The block was already current.
    Unchanged,
}

/// `text` with the block in it (replaced between the markers, or appended), and what
/// that is.
pub fn with_block(text: Option<&str>) -> (String, Action) {
    let block = format!("{BEGIN}\n{}{END}\n", GUIDE);
    let Some(text) = text else {
        return (block, Action::Created);
    };
    if let (Some(start), Some(end)) = (text.find(BEGIN), text.find(END))
        && start < end
    {
        let end = end + END.len();
        let end = if text[end..].starts_with('\n') {
            end + 1
        } else {
            end
        };
        let updated = format!("{}{block}{}", &text[..start], &text[end..]);
        let action = if updated == text {
            Action::Unchanged
        } else {
            Action::Updated
        };
        return (updated, action);
    }
    let separator = if text.is_empty() || text.ends_with("\n\n") {
        ""
    } else if text.ends_with('\n') {
        "\n"
    } else {
        "\n\n"
    };
    (format!("{text}{separator}{block}"), Action::Appended)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_is_added_once_and_replaced_in_place() {
        let (created, action) = with_block(None);
        assert_eq!(action, Action::Created);
        let mine = "# My project\n\nRules of mine.\n";
        let (appended, action) = with_block(Some(mine));
        assert_eq!(action, Action::Appended);
        assert!(appended.starts_with(mine) && appended.ends_with(&created));
        let (again, action) = with_block(Some(&appended));
        assert_eq!(
            (again.as_str(), action),
            (appended.as_str(), Action::Unchanged)
        );
        let stale = appended.replace("Verify before you claim done", "Old words");
        let tail = format!("{stale}\nMore of mine.\n");
        let (updated, action) = with_block(Some(&tail));
        assert_eq!(action, Action::Updated);
        assert!(
            updated.contains("Verify before you claim done")
                && updated.ends_with("\nMore of mine.\n")
        );
        assert_eq!(updated.matches(BEGIN).count(), 1);
    }
}
