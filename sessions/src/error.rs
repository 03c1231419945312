//! What can go wrong with the session memory, each error naming where.

use std::path::Path;

/// A failed session-memory operation.
#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Stored state that does not read back (a damaged chunk, a catalog that is not ours).
    #[error("{0}")]
    Corrupt(String),
    /// The search index refused.
    #[error("the session index: {0}")]
    Index(String),
    /// Another ingest holds the index.
    #[error("another `palm sessions ingest` is running on {0}")]
    Busy(String),
    /// No such session.
    #[error("no session `{0}` in the archive (palm sessions list shows them)")]
    NotFound(String),
    /// A request that cannot be answered as asked.
    #[error("{0}")]
    Usage(String),
}

impl SessionsError {
    /// An I/O error on `path`.
    pub fn io(path: &Path, source: std::io::Error) -> SessionsError {
        SessionsError::Io {
            path: path.display().to_string(),
            source,
        }
    }

    /// A short machine-readable kind.
    pub fn kind(&self) -> &'static str {
        match self {
            SessionsError::Io { .. } => "io",
            SessionsError::Corrupt(_) => "corrupt",
            SessionsError::Index(_) => "index",
            SessionsError::Busy(_) => "busy",
            SessionsError::NotFound(_) => "not_found",
            SessionsError::Usage(_) => "invalid_input",
        }
    }

    /// Whether the caller asked for something impossible (exit 2) rather than the
    /// operation failing (exit 1).
    pub fn is_usage(&self) -> bool {
        matches!(self, SessionsError::NotFound(_) | SessionsError::Usage(_))
    }
}

impl From<tantivy::TantivyError> for SessionsError {
    fn from(err: tantivy::TantivyError) -> SessionsError {
        match err {
            tantivy::TantivyError::LockFailure(..) => SessionsError::Busy("the index".into()),
            other => SessionsError::Index(other.to_string()),
        }
    }
}
