//! Declarative setup of a job's worktree, per repo in palm.yaml:
//!
//! ```yaml
//! repos:
//!   /home/me/src/app:
//!     worktree:
//!       copy: [.env]                  # files the checkout has and git does not
//!       link: [node_modules, target]  # shared with the checkout (symlinks)
//!       env: {PORT: auto, APP_ENV: test}
//!       setup: npm ci                 # once, when the worktree is made
//!       smoke: npm test -- --smoke    # then; failing ends the run as `error`
//! ```
//!
//! `PORT: auto` (any variable whose value is `auto`) is a TCP port unique among the live
//! worktrees under the same root, and free on 127.0.0.1 when it is chosen. The chosen
//! environment is kept beside the worktree (`<worktree>.env.json`) so every run in it
//! sees the same values, and a worktree is provisioned once (`<worktree>.provisioned`).
//! Copied and linked paths are left out of the worktree's snapshots and patches
//! (`<worktree>.exclude`): they are the checkout's, not the run's. What `setup` writes
//! is not known in advance: it belongs in `.gitignore`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The first port `auto` tries.
pub const PORT_FIRST: u16 = 20_000;
/// How many ports `auto` tries.
pub const PORT_RANGE: u16 = 10_000;

/// One repo's worktree setup.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provision {
    /// Paths (relative to the checkout) copied into each worktree.
    pub copy: Vec<String>,
    /// Paths linked from each worktree to the checkout's.
    pub link: Vec<String>,
    /// Environment of every run in the worktree (`auto`: a unique free port).
    pub env: BTreeMap<String, String>,
    /// A shell command run once in a new worktree.
    pub setup: Option<String>,
    /// A shell command run after `setup`; its failure stops the run.
    pub smoke: Option<String>,
}

impl Provision {
    /// Checks paths: relative, inside the checkout.
    pub fn check(&self) -> Result<(), String> {
        for path in self.copy.iter().chain(&self.link) {
            let p = Path::new(path);
            if path.is_empty()
                || p.is_absolute()
                || p.components()
                    .any(|c| matches!(c, std::path::Component::ParentDir))
            {
                return Err(format!(
                    "`{path}` must be a path inside the checkout (relative, without `..`)"
                ));
            }
        }
        Ok(())
    }
}

fn env_file(worktree: &Path) -> PathBuf {
    worktree.with_extension("env.json")
}

/// The provisioned marker of a worktree.
pub fn marker(worktree: &Path) -> PathBuf {
    worktree.with_extension("provisioned")
}

/// The environment a worktree's runs get (empty before it is provisioned).
pub fn env_of(worktree: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(env_file(worktree))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// Ports held by the other worktrees under `root` (`root/<job>/<name>`).
fn ports_in_use(root: &Path, except: &Path) -> Vec<u16> {
    let mut ports = Vec::new();
    for found in crate::git::list_worktrees(root) {
        if found.path == except {
            continue;
        }
        for value in env_of(&found.path).values() {
            if let Ok(port) = value.parse::<u16>() {
                ports.push(port);
            }
        }
    }
    ports
}

/// Copies and links what the setup asks for, and chooses the environment; answers the
/// environment. `setup` and `smoke` are the caller's to run (as effects' processes).
pub fn prepare(
    provision: &Provision,
    checkout: &Path,
    worktree: &Path,
    root: &Path,
) -> Result<BTreeMap<String, String>, String> {
    provision.check()?;
    for path in &provision.copy {
        let from = checkout.join(path);
        let to = worktree.join(path);
        if !from.exists() {
            return Err(format!(
                "worktree setup: `copy: {path}`: {} does not exist",
                from.display()
            ));
        }
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("worktree setup: {e}"))?;
        }
        copy_tree(&from, &to).map_err(|e| format!("worktree setup: cannot copy {path}: {e}"))?;
    }
    for path in &provision.link {
        let from = checkout.join(path);
        let to = worktree.join(path);
        if to.symlink_metadata().is_ok() {
            // Tracked content of that name is the worktree's own: never replaced.
            continue;
        }
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("worktree setup: {e}"))?;
        }
        std::os::unix::fs::symlink(&from, &to)
            .map_err(|e| format!("worktree setup: cannot link {path}: {e}"))?;
    }
    let excluded: Vec<&str> = provision
        .copy
        .iter()
        .chain(&provision.link)
        .map(String::as_str)
        .collect();
    std::fs::write(worktree.with_extension("exclude"), excluded.join("\n"))
        .map_err(|e| format!("worktree setup: {e}"))?;
    let mut env = BTreeMap::new();
    let mut taken = ports_in_use(root, worktree);
    for (name, value) in &provision.env {
        if value == "auto" {
            let port = (0..PORT_RANGE)
                .map(|i| PORT_FIRST + i)
                .find(|p| {
                    !taken.contains(p) && std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok()
                })
                .ok_or("worktree setup: no free port for `auto`")?;
            taken.push(port);
            env.insert(name.clone(), port.to_string());
        } else {
            env.insert(name.clone(), value.clone());
        }
    }
    std::fs::write(
        env_file(worktree),
        serde_json::to_string(&env).unwrap_or_default(),
    )
    .map_err(|e| format!("worktree setup: {e}"))?;
    Ok(env)
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    if from.is_dir() {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        std::fs::copy(from, to).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_and_auto_ports_are_unique() {
        let bad = Provision {
            copy: vec!["../secrets".into()],
            ..Provision::default()
        };
        assert!(bad.check().unwrap_err().contains("inside the checkout"));
        let root = tempfile::tempdir().expect("root");
        let checkout = tempfile::tempdir().expect("checkout");
        std::fs::write(checkout.path().join(".env"), "KEY=1\n").expect("env");
        std::fs::create_dir(checkout.path().join("node_modules")).expect("dir");
        let provision = Provision {
            copy: vec![".env".into()],
            link: vec!["node_modules".into()],
            env: [
                ("PORT".to_owned(), "auto".to_owned()),
                ("MODE".to_owned(), "test".to_owned()),
            ]
            .into_iter()
            .collect(),
            ..Provision::default()
        };
        let mut ports = Vec::new();
        for job in ["j-1", "j-2"] {
            let tree = root.path().join(job).join("app-1");
            std::fs::create_dir_all(tree.join(".git")).expect("tree");
            let env = prepare(&provision, checkout.path(), &tree, root.path()).expect("prepared");
            assert_eq!(env["MODE"], "test");
            assert_eq!(
                std::fs::read_to_string(tree.join(".env")).expect("copied"),
                "KEY=1\n"
            );
            assert!(
                tree.join("node_modules")
                    .symlink_metadata()
                    .expect("link")
                    .file_type()
                    .is_symlink()
            );
            assert_eq!(env_of(&tree), env);
            ports.push(env["PORT"].clone());
        }
        assert_ne!(ports[0], ports[1], "{ports:?}");
    }
}
