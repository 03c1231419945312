//! The `file` provider: read, write, append or list files under one root directory
//! (`providers: {file: {root: DIR}}` in `palm.yaml`, default `DATA/files`). A path that
//! leaves the root — `..`, an absolute path elsewhere, a symlink pointing out — is refused.

use super::{CallContext, CallFuture, Failure, Provider};
use serde_json::{Value, json};
use std::path::{Component, Path, PathBuf};

/// Bound on a file read through the provider.
pub const READ_BYTES_MAX: u64 = 8 << 20;

/// See the module docs.
pub struct Files {
    root: PathBuf,
}

impl Files {
    /// A provider confined to `root` (created on first use).
    pub fn new(root: PathBuf) -> Files {
        Files { root }
    }

    /// Resolves `path` inside the root, or says why not.
    pub fn confine(&self, path: &str) -> Result<PathBuf, String> {
        std::fs::create_dir_all(&self.root)
            .map_err(|e| format!("cannot create the root {}: {e}", self.root.display()))?;
        let root = self
            .root
            .canonicalize()
            .map_err(|e| format!("the root {} is unusable: {e}", self.root.display()))?;
        let given = Path::new(path);
        let relative = if given.is_absolute() {
            given
                .strip_prefix(&root)
                .or_else(|_| given.strip_prefix(&self.root))
                .map_err(|_| format!("`{path}` is outside the file root {}", root.display()))?
                .to_path_buf()
        } else {
            given.to_path_buf()
        };
        let mut inside = PathBuf::new();
        for component in relative.components() {
            match component {
                Component::Normal(part) => inside.push(part),
                Component::CurDir => {}
                Component::ParentDir => {
                    if !inside.pop() {
                        return Err(format!(
                            "`{path}` is outside the file root {}",
                            root.display()
                        ));
                    }
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(format!("`{path}` is not a path under the file root"));
                }
            }
        }
        if inside.as_os_str().is_empty() {
            return Err(format!("`{path}` names the root itself, not a file"));
        }
        let full = root.join(&inside);
        // Symlinks: what exists of the path must still resolve inside the root.
        let mut existing = full.clone();
        while !existing.exists() {
            if !existing.pop() {
                break;
            }
        }
        let resolved = existing
            .canonicalize()
            .map_err(|e| format!("cannot resolve `{path}`: {e}"))?;
        if !resolved.starts_with(&root) {
            return Err(format!(
                "`{path}` leads outside the file root {} (through a link)",
                root.display()
            ));
        }
        Ok(full)
    }
}

impl Provider for Files {
    fn name(&self) -> &str {
        "file"
    }

    fn describe(&self) -> Value {
        json!({
            "name": "file",
            "description": "read, write, append or list files under one root",
            "root": self.root.display().to_string(),
            "args": {
                "op": "read, write, append or list",
                "path": "a path under the root",
                "content": "for write/append: a string (JSON is written as its text)",
            },
        })
    }

    fn call<'a>(&'a self, _ctx: CallContext<'a>, args: Value) -> CallFuture<'a> {
        Box::pin(async move {
            let op = super::string_arg(&args, "op", "file")?.to_owned();
            let path = super::string_arg(&args, "path", "file")?.to_owned();
            let full = self
                .confine(&path)
                .map_err(|e| Failure::new(format!("file: {e}")))?;
            let content = || match args.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            let fail = |what: &str, e: std::io::Error| {
                Failure::new(format!("file: cannot {what} `{path}`: {e}"))
            };
            match op.as_str() {
                "read" => {
                    let len = tokio::fs::metadata(&full)
                        .await
                        .map_err(|e| fail("read", e))?
                        .len();
                    if len > READ_BYTES_MAX {
                        return Err(Failure::new(format!(
                            "file: `{path}` is {len} bytes, more than {READ_BYTES_MAX}"
                        )));
                    }
                    let bytes = tokio::fs::read(&full).await.map_err(|e| fail("read", e))?;
                    let text = String::from_utf8_lossy(&bytes).into_owned();
                    Ok(json!({"path": path, "bytes": bytes.len(), "content": text}))
                }
                "write" | "append" => {
                    if let Some(parent) = full.parent() {
                        tokio::fs::create_dir_all(parent)
                            .await
                            .map_err(|e| fail("create the folder of", e))?;
                    }
                    let text = content();
                    if op == "write" {
                        tokio::fs::write(&full, text.as_bytes())
                            .await
                            .map_err(|e| fail("write", e))?;
                    } else {
                        use tokio::io::AsyncWriteExt;
                        let mut file = tokio::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(&full)
                            .await
                            .map_err(|e| fail("open", e))?;
                        file.write_all(text.as_bytes())
                            .await
                            .map_err(|e| fail("append to", e))?;
                        file.flush().await.map_err(|e| fail("append to", e))?;
                    }
                    Ok(json!({"path": path, "bytes": text.len(), "op": op}))
                }
                "list" => {
                    let mut entries = tokio::fs::read_dir(&full)
                        .await
                        .map_err(|e| fail("list", e))?;
                    let mut names = Vec::new();
                    while let Some(entry) =
                        entries.next_entry().await.map_err(|e| fail("list", e))?
                    {
                        names.push(entry.file_name().to_string_lossy().into_owned());
                    }
                    names.sort();
                    Ok(json!({"path": path, "entries": names}))
                }
                other => Err(Failure::new(format!(
                    "file: unknown op `{other}`; use read, write, append or list"
                ))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_under_the_root() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = Files::new(dir.path().join("root"));
        assert!(files.confine("notes/a.txt").is_ok());
        assert!(files.confine("./a/../b.txt").is_ok());
        for bad in ["../escape.txt", "a/../../escape", "/etc/passwd", "."] {
            assert!(files.confine(bad).is_err(), "{bad} should be refused");
        }
        let root = dir.path().join("root").canonicalize().expect("root");
        assert!(
            files
                .confine(&root.join("x.txt").display().to_string())
                .is_ok()
        );
        std::os::unix::fs::symlink("/etc", root.join("etc")).expect("symlink");
        let err = files.confine("etc/passwd").unwrap_err();
        assert!(err.contains("through a link"), "{err}");
    }
}
