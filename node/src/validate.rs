//! `palm flows validate FILE...`: every problem of every file, as `FILE:LINE:COL`.
//!
//! Subflows are resolved from files beside the one validated (`NAME.yaml`, `NAME.yml`,
//! `NAME.json`), so a directory of flows validates on its own, without a store.

use crate::ctx::Ctx;
use crate::exit::{CliError, CliResult, Code};
use palm_actors::definition::{self, Definition, Diagnostic};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn sibling(dir: &Path, name: &str) -> Option<Arc<Definition>> {
    for ext in ["yaml", "yml", "json"] {
        let path = dir.join(format!("{name}.{ext}"));
        if let Ok(text) = std::fs::read_to_string(&path)
            && let Ok(found) = definition::parse(&text, &path.display().to_string())
            && found.name == name
        {
            return Some(Arc::new(found));
        }
    }
    None
}

fn check_file(path: &PathBuf) -> Result<Result<Definition, Vec<Diagnostic>>, CliError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::usage("invalid_flow", format!("cannot read {origin}: {e}")))?;
    let parsed = match definition::parse(&text, &origin) {
        Ok(parsed) => Arc::new(parsed),
        Err(diagnostics) => return Ok(Err(diagnostics)),
    };
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let this = Arc::clone(&parsed);
    let problems = definition::check_subflows(&parsed, &|name: &str| {
        if name == this.name {
            Some(Arc::clone(&this))
        } else {
            sibling(&dir, name)
        }
    });
    if problems.is_empty() {
        Ok(Ok(Arc::unwrap_or_clone(parsed)))
    } else {
        Ok(Err(problems))
    }
}

/// Runs the command.
pub fn validate(ctx: &Ctx, files: &[PathBuf]) -> CliResult {
    let mut reports = Vec::new();
    let mut all_valid = true;
    for path in files {
        let origin = path.display().to_string();
        match check_file(path) {
            Err(unreadable) => {
                all_valid = false;
                if !ctx.out.json {
                    println!("{origin}: error: {}", unreadable.message);
                }
                reports.push(json!({"file": origin, "valid": false, "errors": [{"message": unreadable.message}]}));
            }
            Ok(Ok(parsed)) => {
                if !ctx.out.json {
                    println!("{origin}: ok (flow {})", parsed.name);
                }
                reports.push(
                    json!({"file": origin, "valid": true, "flow": parsed.name, "errors": []}),
                );
            }
            Ok(Err(diagnostics)) => {
                all_valid = false;
                if !ctx.out.json {
                    for diagnostic in &diagnostics {
                        println!("{diagnostic}");
                    }
                }
                let errors: Vec<Value> = diagnostics
                    .iter()
                    .map(|d| {
                        json!({
                            "file": d.origin, "line": d.span.line, "col": d.span.col,
                            "message": d.message, "hint": d.hint,
                        })
                    })
                    .collect();
                reports.push(json!({"file": origin, "valid": false, "errors": errors}));
            }
        }
    }
    if ctx.out.json {
        ctx.out.json(&json!({"valid": all_valid, "files": reports}));
    }
    Ok(if all_valid { Code::Ok } else { Code::Usage })
}
