//! `palm bench index`: repo intelligence on a large real tree, against the tools people
//! would otherwise use, measured in the same run on the same files.
//!
//! The tree (default: the cargo registry sources, ~20k files, available offline) is
//! copied into a fresh git repository with one commit. Then:
//! 1. a full `palm index` (git half, tree-sitter content half, tantivy) against
//!    `ctags -R` (universal-ctags, JSON output) over the same tree — the ratio;
//! 2. an incremental reindex after changing one file (median of samples; the reported
//!    `parsed` counter must be 1);
//! 3. `palm search WORD` latency, p50/p99 over N words (symbol names from the index),
//!    as a whole process and in-process, against `rg -n -F -w WORD` over the same tree
//!    (`grep -rnFw` when ripgrep is not installed; the report says which).

use crate::ctx::Ctx;
use crate::exit::{CliError, CliResult, Code};
use clap::Args;
use palm_intel::{Intel, NoProgress};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `palm bench index`.
#[derive(Debug, Args)]
pub struct BenchIndexArgs {
    /// Source tree to copy into the benchmark repository [default: ~/.cargo/registry/src].
    #[arg(long, value_name = "DIR")]
    pub tree: Option<PathBuf>,
    /// Search queries (distinct words).
    #[arg(long, default_value_t = 100)]
    pub queries: usize,
    /// Incremental reindex samples.
    #[arg(long, default_value_t = 5)]
    pub reindex_samples: usize,
}

fn failure(message: impl Into<String>) -> CliError {
    CliError::failure("bench", message)
}

fn run_quiet(command: &mut Command, what: &str) -> Result<(), CliError> {
    let status = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| failure(format!("{what}: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(failure(format!("{what} failed ({status})")))
    }
}

fn percentile_ms(samples: &mut [Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index].as_secs_f64() * 1000.0
}

fn latency(samples: &mut [Duration]) -> Value {
    json!({ "p50_ms": percentile_ms(samples, 0.5), "p99_ms": percentile_ms(samples, 0.99), "n": samples.len() })
}

fn tool(name: &str, version_arg: &str) -> Option<String> {
    let output = Command::new(name).arg(version_arg).output().ok()?;
    output.status.success().then(|| {
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .to_owned()
    })
}

fn prepare(tree: &Path, repo: &Path) -> Result<(), CliError> {
    run_quiet(
        Command::new("cp").arg("-R").arg(tree).arg(repo),
        "copy the tree",
    )?;
    let git = |args: &[&str]| {
        let mut command = Command::new("git");
        command
            .current_dir(repo)
            .args([
                "-c",
                "user.name=bench",
                "-c",
                "user.email=bench@example.invalid",
            ])
            .args(args);
        command
    };
    run_quiet(&mut git(&["init", "-q"]), "git init")?;
    // Registry crates ship their own .gitignore files; index what was shipped.
    run_quiet(&mut git(&["add", "-A", "-f", "."]), "git add")?;
    run_quiet(
        &mut git(&["commit", "-q", "-m", "benchmark tree"]),
        "git commit",
    )
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

/// Runs the benchmark.
pub fn run(ctx: &Ctx, args: BenchIndexArgs) -> CliResult {
    let tree = match args.tree.clone() {
        Some(tree) => tree,
        None => PathBuf::from(std::env::var_os("HOME").ok_or_else(|| failure("no HOME"))?)
            .join(".cargo/registry/src"),
    };
    if !tree.is_dir() {
        return Err(CliError::usage(
            "bench",
            format!("{}: not a directory", tree.display()),
        ));
    }
    let ctags = tool("ctags", "--version").filter(|v| v.contains("Universal Ctags"));
    let ripgrep = tool("rg", "--version");
    let scratch = std::env::temp_dir().join(format!("palm-bench-index-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let repo = scratch.join("repo");
    eprintln!(
        "palm bench index: copying {} into a git repository ...",
        tree.display()
    );
    let setup = Instant::now();
    let result = (|| -> Result<Value, CliError> {
        prepare(&tree, &repo)?;
        let setup_s = setup.elapsed().as_secs_f64();
        eprintln!("palm bench index: full index ...");
        let intel = Intel::open(&repo).map_err(|e| failure(e.to_string()))?;
        let started = Instant::now();
        let full = intel
            .index(&mut NoProgress)
            .map_err(|e| failure(e.to_string()))?;
        let palm_s = started.elapsed().as_secs_f64();

        let ctags_result = match &ctags {
            Some(version) => {
                eprintln!("palm bench index: ctags -R ...");
                let out = scratch.join("tags.json");
                let started = Instant::now();
                run_quiet(
                    Command::new("ctags")
                        .current_dir(&repo)
                        .args([
                            "-R",
                            "--output-format=json",
                            "--fields=+nK",
                            "--exclude=.git",
                            "--exclude=.palm",
                            "-f",
                        ])
                        .arg(&out)
                        .arg("."),
                    "ctags",
                )?;
                let seconds = started.elapsed().as_secs_f64();
                let tags = std::fs::read_to_string(&out)
                    .map(|t| t.lines().count())
                    .unwrap_or(0);
                json!({ "tool": version, "seconds": seconds, "tags": tags, "ratio_palm_over_ctags": palm_s / seconds.max(1e-9) })
            }
            None => json!({ "tool": null, "skipped": "universal-ctags is not installed" }),
        };

        eprintln!("palm bench index: incremental reindex of one file ...");
        let mut warnings = Vec::new();
        let snapshot = intel
            .snapshot(&mut warnings)
            .map_err(|e| failure(e.to_string()))?;
        let target = snapshot
            .content
            .records
            .iter()
            .find(|r| r.path.ends_with(".rs") && r.facts.lines > 50)
            .map(|r| r.path.clone())
            .ok_or_else(|| failure("no Rust file to change"))?;
        let mut reindex = Vec::new();
        let mut parsed = Vec::new();
        let mut phases = Value::Null;
        for sample in 0..args.reindex_samples.max(1) {
            let path = repo.join(&target);
            let mut text = std::fs::read_to_string(&path)?;
            text.push_str(&format!("\npub fn palm_bench_probe_{sample}() {{}}\n"));
            std::fs::write(&path, text)?;
            let started = Instant::now();
            let report = intel
                .index(&mut NoProgress)
                .map_err(|e| failure(e.to_string()))?;
            reindex.push(started.elapsed());
            parsed.push(report.parsed);
            phases = serde_json::to_value(&report.phases).unwrap_or(Value::Null);
        }

        // Distinct symbol names, evenly spread over the sorted list (deterministic).
        let mut names: Vec<&str> = snapshot
            .content
            .records
            .iter()
            .flat_map(|r| r.facts.symbols.iter().map(|s| s.name.as_str()))
            .filter(|n| n.len() >= 6 && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            .collect();
        names.sort_unstable();
        names.dedup();
        let step = (names.len() / args.queries.max(1)).max(1);
        let words: Vec<&str> = names
            .iter()
            .step_by(step)
            .take(args.queries)
            .copied()
            .collect();
        eprintln!(
            "palm bench index: {} searches each (palm process, palm in-process, {}) ...",
            words.len(),
            if ripgrep.is_some() { "rg" } else { "grep -r" }
        );
        let exe = std::env::current_exe()?;
        let (mut process, mut in_process, mut baseline) = (Vec::new(), Vec::new(), Vec::new());
        for word in &words {
            let started = Instant::now();
            run_quiet(
                Command::new(&exe)
                    .args(["search", word, "--json", "--repo"])
                    .arg(&repo),
                "palm search",
            )?;
            process.push(started.elapsed());
            let started = Instant::now();
            let mut ignored = Vec::new();
            intel
                .search(word, 10, &mut ignored)
                .map_err(|e| failure(e.to_string()))?;
            in_process.push(started.elapsed());
            let started = Instant::now();
            let mut command = match &ripgrep {
                Some(_) => {
                    let mut c = Command::new("rg");
                    c.args(["-n", "-F", "-w", word]).arg(&repo);
                    c
                }
                None => {
                    let mut c = Command::new("grep");
                    c.args([
                        "-r",
                        "-n",
                        "-F",
                        "-w",
                        "--exclude-dir=.git",
                        "--exclude-dir=.palm",
                        word,
                    ])
                    .arg(&repo);
                    c
                }
            };
            // rg and grep exit 1 when nothing matches: only the time matters here.
            let _ = command.stdout(Stdio::null()).stderr(Stdio::null()).status();
            baseline.push(started.elapsed());
        }
        let mut reindex_sorted = reindex.clone();
        Ok(json!({
            "machine": { "cpus": crate::sys::cpus() },
            "tree": tree.display().to_string(),
            "setup_seconds": setup_s,
            "full_index": {
                "seconds": palm_s,
                "files": full.files,
                "parsed": full.parsed,
                "skipped": full.skipped,
                "symbols": full.symbols,
                "imports": full.imports,
                "imports_resolved": full.imports_resolved,
                "languages": full.languages,
                "phases_s": full.phases,
            },
            "ctags": ctags_result,
            "incremental": {
                "changed_file": target,
                "parsed": parsed,
                "phases_s": phases,
                "index_bytes": dir_bytes(&repo.join(".palm/index")),
                "median_ms": percentile_ms(&mut reindex_sorted, 0.5),
                "max_ms": reindex.iter().max().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
            },
            "search": {
                "queries": words.len(),
                "palm_process": latency(&mut process),
                "palm_in_process": latency(&mut in_process),
                "baseline_tool": if ripgrep.is_some() { ripgrep.clone().unwrap_or_default() } else { "grep -r (ripgrep not installed)".to_owned() },
                "baseline": latency(&mut baseline),
            },
        }))
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    let result = result?;
    if ctx.out.json {
        ctx.out.json(&result);
    } else {
        let f = &result["full_index"];
        println!(
            "full index: {:.2} s for {} files ({} symbols; {} skipped)",
            f["seconds"].as_f64().unwrap_or(0.0),
            f["files"],
            f["symbols"],
            f["skipped"]["total"]
        );
        let c = &result["ctags"];
        match c["seconds"].as_f64() {
            Some(seconds) => println!(
                "ctags -R:   {:.2} s ({} tags); palm / ctags = {:.2}x",
                seconds,
                c["tags"],
                c["ratio_palm_over_ctags"].as_f64().unwrap_or(0.0)
            ),
            None => println!("ctags -R:   skipped (universal-ctags is not installed)"),
        }
        let i = &result["incremental"];
        println!(
            "reindex after changing {}: median {:.1} ms, max {:.1} ms, parsed {}",
            i["changed_file"].as_str().unwrap_or(""),
            i["median_ms"].as_f64().unwrap_or(0.0),
            i["max_ms"].as_f64().unwrap_or(0.0),
            i["parsed"]
        );
        let s = &result["search"];
        for (label, key) in [
            ("palm search (process)", "palm_process"),
            ("palm search (in-process)", "palm_in_process"),
            ("baseline", "baseline"),
        ] {
            println!(
                "{label:<25} p50 {:>7.2} ms  p99 {:>7.2} ms",
                s[key]["p50_ms"].as_f64().unwrap_or(0.0),
                s[key]["p99_ms"].as_f64().unwrap_or(0.0)
            );
        }
        println!(
            "baseline tool: {}",
            s["baseline_tool"].as_str().unwrap_or("")
        );
    }
    Ok(Code::Ok)
}
