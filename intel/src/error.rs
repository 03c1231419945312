//! Errors of repo intelligence. Every variant says which path or revision it is about;
//! `IntelError::is_usage` tells the CLI which ones are the caller's input (exit 2).

use std::path::PathBuf;

/// What can go wrong opening, indexing or querying a repository.
#[derive(Debug, thiserror::Error)]
pub enum IntelError {
    /// The path is not inside a git repository.
    #[error("{path}: not a git repository (or any parent up to /)")]
    NotARepository {
        /// The path that was given.
        path: PathBuf,
    },
    /// A bare repository has no working tree to index.
    #[error("{path}: a bare repository has no working tree to index")]
    BareRepository {
        /// The repository.
        path: PathBuf,
    },
    /// A path argument lies outside the repository's working tree.
    #[error("{path}: outside the repository at {root}")]
    OutsideRepository {
        /// The path that was given.
        path: PathBuf,
        /// The repository's working tree.
        root: PathBuf,
    },
    /// A file that is neither in the index, nor in the history, nor on disk.
    #[error("{path}: no such file in the repository")]
    UnknownFile {
        /// Repository-relative path.
        path: String,
    },
    /// A file the index skips (binary, oversized, ...).
    #[error("{path}: not indexed ({reason})")]
    NotIndexed {
        /// Repository-relative path.
        path: String,
        /// Why it was skipped.
        reason: String,
    },
    /// The repository has no commit yet, and the query needs one.
    #[error("the repository at {root} has no commits yet")]
    NoCommits {
        /// The repository's working tree.
        root: PathBuf,
    },
    /// A revision that does not resolve to a commit.
    #[error("{revision}: not a commit in this repository")]
    BadRevision {
        /// The revision as given.
        revision: String,
    },
    /// An empty search query.
    #[error("the search query is empty")]
    EmptyQuery,
    /// Another `palm index` holds the index.
    #[error("the index at {path} is being written by another palm index")]
    Busy {
        /// The index directory.
        path: PathBuf,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// libgit2 failed.
    #[error("git: {0}")]
    Git(#[from] git2::Error),
    /// tantivy failed.
    #[error("search index: {0}")]
    Search(String),
    /// A knowledge-map request that cannot be met (an unknown module or decision, a
    /// citation that does not resolve); the message says which and why.
    #[error("{0}")]
    Knowledge(String),
    /// An index file that cannot be read back (the caller rebuilds).
    #[error("index file {path} is unreadable: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
}

impl IntelError {
    /// True when the error is about the caller's input (a usage error, exit 2).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            IntelError::NotARepository { .. }
                | IntelError::BareRepository { .. }
                | IntelError::OutsideRepository { .. }
                | IntelError::UnknownFile { .. }
                | IntelError::NotIndexed { .. }
                | IntelError::NoCommits { .. }
                | IntelError::BadRevision { .. }
                | IntelError::EmptyQuery
                | IntelError::Knowledge(_)
        )
    }

    /// A short machine-readable kind.
    pub fn kind(&self) -> &'static str {
        match self {
            IntelError::NotARepository { .. } => "not_a_repository",
            IntelError::BareRepository { .. } => "bare_repository",
            IntelError::OutsideRepository { .. } => "outside_repository",
            IntelError::UnknownFile { .. } => "unknown_file",
            IntelError::NotIndexed { .. } => "not_indexed",
            IntelError::NoCommits { .. } => "no_commits",
            IntelError::BadRevision { .. } => "bad_revision",
            IntelError::EmptyQuery => "empty_query",
            IntelError::Busy { .. } => "index_busy",
            IntelError::Io { .. } => "io",
            IntelError::Git(_) => "git",
            IntelError::Search(_) => "search",
            IntelError::Corrupt { .. } => "corrupt_index",
            IntelError::Knowledge(_) => "invalid_input",
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> IntelError {
        IntelError::Io {
            path: path.into(),
            source,
        }
    }
}

impl From<tantivy::TantivyError> for IntelError {
    fn from(err: tantivy::TantivyError) -> Self {
        IntelError::Search(err.to_string())
    }
}
