//! A job's artifacts: files a step keeps beside the store rather than in it (a check's
//! log, written by the `verify` provider), under `DATA/artifacts/JOB/`. The REST API
//! serves them (`/v1/jobs/{id}/artifacts`); retention removes them once the job's
//! journal goes (the kernel after each of its walks, `palm jobs gc` after each step),
//! since nothing then names them any more.

use std::path::{Path, PathBuf};

/// Where `job`'s artifacts live under the data directory `data`.
pub fn dir(data: &Path, job: &str) -> PathBuf {
    data.join("artifacts").join(crate::git::safe(job))
}

/// What [`remove`] did.
#[derive(Debug, Default)]
pub struct Removed {
    /// Jobs whose artifact directory was removed.
    pub jobs: u64,
    /// Bytes those directories held.
    pub bytes: u64,
    /// Directories that could not be removed, with why.
    pub failed: Vec<(PathBuf, std::io::Error)>,
}

/// Removes the artifact directories of `jobs` (a job with none is skipped). Blocking:
/// call it off the runtime's workers.
pub fn remove(data: &Path, jobs: &[String]) -> Removed {
    let mut removed = Removed::default();
    for job in jobs {
        let path = dir(data, job);
        if !path.exists() {
            continue;
        }
        let bytes = crate::git::disk_use(&path);
        match std::fs::remove_dir_all(&path) {
            Ok(()) => {
                removed.jobs += 1;
                removed.bytes += bytes;
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => removed.failed.push((path, err)),
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_the_named_jobs_artifacts_and_only_those() {
        let data = tempfile::tempdir().expect("tempdir");
        for job in ["abc-1", "abc-2", "abc-3"] {
            let at = dir(data.path(), job);
            std::fs::create_dir_all(&at).expect("mkdir");
            std::fs::write(at.join("verify-x.log"), b"twelve bytes").expect("write");
        }
        let removed = remove(
            data.path(),
            &["abc-1".into(), "abc-3".into(), "abc-9".into()],
        );
        assert_eq!((removed.jobs, removed.bytes), (2, 24));
        assert!(removed.failed.is_empty(), "{:?}", removed.failed);
        assert!(!dir(data.path(), "abc-1").exists());
        assert!(dir(data.path(), "abc-2").join("verify-x.log").exists());
        assert!(!dir(data.path(), "abc-3").exists());
    }
}
