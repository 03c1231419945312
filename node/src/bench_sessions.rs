//! `palm bench sessions`: the session memory on a generated corpus of transcripts in
//! both vendors' formats, against the floor of the same work measured in the same run.
//!
//! 1. A corpus of `--bytes` of Claude and Codex transcripts (prompts, answers split over
//!    lines sharing a message id, tool calls and results; words drawn from a seeded
//!    vocabulary with a Zipf-like skew) is written to a scratch directory.
//! 2. The floor: reading every file, hashing its bytes (SHA-256, as the archive does)
//!    and parsing every line as JSON — the work no ingest can skip.
//! 3. A full `palm sessions ingest` into a fresh data directory: time, archive and index
//!    sizes, entries; the ratio against the floor.
//! 4. A second ingest with nothing new (the target is under 1 s).
//! 5. Recall latency in-process, p50/p99 over `--queries` one- and two-word queries.

use crate::ctx::Ctx;
use crate::exit::{CliError, CliResult, Code};
use clap::Args;
use palm_sessions::{Memory, Recall, Sources};
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// `palm bench sessions`.
#[derive(Debug, Args)]
pub struct BenchSessionsArgs {
    /// Corpus size, e.g. 100M or 1G.
    #[arg(long, default_value = "100M")]
    pub bytes: String,
    /// Recall queries.
    #[arg(long, default_value_t = 200)]
    pub queries: usize,
    /// The seed of the corpus.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
}

/// The scratch directory, removed when the benchmark ends (or fails).
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn failure(message: impl Into<String>) -> CliError {
    CliError::failure("bench", message)
}

fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, ""), |i| text.split_at(i));
    let n: u64 = digits.parse().ok()?;
    let scale = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// xorshift64*: a seeded generator (no dependency for a benchmark's corpus).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// A word index skewed toward the front (a rough Zipf).
    fn skewed(&mut self, n: usize) -> usize {
        let a = self.below(n);
        let b = self.below(n);
        a.min(b).min(self.below(n))
    }
}

const SYLLABLES: [&str; 24] = [
    "ka", "lo", "mi", "ren", "tor", "vex", "sa", "qui", "del", "nor", "pha", "zu", "lin", "gra",
    "te", "fo", "bri", "sk", "ul", "ma", "cor", "ep", "yst", "an",
];

fn vocabulary(rng: &mut Rng, size: usize) -> Vec<String> {
    (0..size)
        .map(|i| {
            let parts = 2 + rng.below(3);
            let mut word: String = (0..parts)
                .map(|_| SYLLABLES[rng.below(SYLLABLES.len())])
                .collect();
            word.push_str(&format!("{}", i % 10));
            word
        })
        .collect()
}

fn words(rng: &mut Rng, vocab: &[String], n: usize) -> String {
    (0..n)
        .map(|_| vocab[rng.skewed(vocab.len())].as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A transcript being written: its lines and bytes so far.
struct Lines {
    out: std::io::BufWriter<std::fs::File>,
    size: u64,
    lines: u64,
}

impl Lines {
    fn push(&mut self, value: Value) -> Result<(), CliError> {
        let text = format!("{value}\n");
        self.size += text.len() as u64;
        self.lines += 1;
        self.out
            .write_all(text.as_bytes())
            .map_err(|e| failure(e.to_string()))
    }
}

/// Writes the corpus; answers (files, lines, bytes).
fn corpus(dir: &Path, total: u64, seed: u64) -> Result<(u64, u64, u64), CliError> {
    let mut rng = Rng(seed.max(1));
    let vocab = vocabulary(&mut rng, 20_000);
    let file_bytes: u64 = 2 << 20;
    let (mut files, mut lines, mut written) = (0u64, 0u64, 0u64);
    let claude = dir.join("claude");
    let codex = dir.join("codex").join("sessions/2026/11/20");
    for d in [&claude, &codex] {
        std::fs::create_dir_all(d).map_err(|e| failure(format!("{}: {e}", d.display())))?;
    }
    let mut ts: i64 = 1_790_000_000_000;
    while written < total {
        let codex_file = files % 2 == 1;
        let id = format!(
            "{:08x}-0000-4000-8000-{:012x}",
            files,
            rng.next() & 0xffff_ffff_ffff
        );
        let path = if codex_file {
            codex.join(format!("rollout-2026-11-20T10-00-00-{id}.jsonl"))
        } else {
            let project = claude.join(format!("-work-project{}", files % 7));
            std::fs::create_dir_all(&project).map_err(|e| failure(e.to_string()))?;
            project.join(format!("{id}.jsonl"))
        };
        let file = std::fs::File::create(&path)
            .map_err(|e| failure(format!("{}: {e}", path.display())))?;
        let mut out = Lines {
            out: std::io::BufWriter::new(file),
            size: 0,
            lines: 0,
        };
        let cwd = format!("/work/project{}", files % 7);
        let stamp = |ts: i64| palm_sessions::transcript::rfc3339(ts).unwrap_or_default();
        if codex_file {
            out.push(json!({"timestamp": stamp(ts), "type": "session_meta", "payload": {"id": id, "cwd": cwd, "cli_version": "0.46.0", "source": "cli"}}))?;
        }
        let mut turn = 0u64;
        while out.size < file_bytes && written + out.size < total {
            turn += 1;
            ts += 1000 + rng.below(60_000) as i64;
            let (n_prompt, n_answer, n_result) =
                (10 + rng.below(30), 20 + rng.below(180), 50 + rng.below(450));
            let prompt = words(&mut rng, &vocab, n_prompt);
            let answer = words(&mut rng, &vocab, n_answer);
            let result = words(&mut rng, &vocab, n_result);
            if codex_file {
                out.push(json!({"timestamp": stamp(ts), "type": "event_msg", "payload": {"type": "user_message", "message": prompt}}))?;
                out.push(json!({"timestamp": stamp(ts + 1), "type": "response_item", "payload": {"type": "function_call", "name": "exec_command", "arguments": json!({"cmd": "cargo test"}).to_string(), "call_id": format!("call_{turn}")}}))?;
                out.push(json!({"timestamp": stamp(ts + 2), "type": "response_item", "payload": {"type": "function_call_output", "call_id": format!("call_{turn}"), "output": result}}))?;
                out.push(json!({"timestamp": stamp(ts + 3), "type": "response_item", "payload": {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]}}))?;
            } else {
                let envelope = |kind: &str, n: u64, message: Value| {
                    json!({"parentUuid": null, "isSidechain": false, "userType": "external", "cwd": cwd,
                           "sessionId": id, "version": "2.0.14", "gitBranch": "main", "type": kind,
                           "message": message, "uuid": format!("{id}-{turn}-{n}"), "timestamp": stamp(ts + n as i64)})
                };
                let msg = format!("msg_{turn:08}");
                out.push(envelope(
                    "user",
                    0,
                    json!({"role": "user", "content": prompt}),
                ))?;
                out.push(envelope("assistant", 1, json!({"id": msg, "role": "assistant", "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": answer}], "usage": {"input_tokens": 900, "output_tokens": 120}})))?;
                out.push(envelope("assistant", 2, json!({"id": msg, "role": "assistant", "model": "claude-sonnet-4-5", "content": [{"type": "tool_use", "id": format!("toolu_{turn}"), "name": "Bash", "input": {"command": "cargo test"}}], "usage": {"input_tokens": 900, "output_tokens": 120}})))?;
                out.push(envelope("user", 3, json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("toolu_{turn}"), "content": result}]})))?;
            }
        }
        lines += out.lines;
        let size = out.size;
        let mut out = out.out;
        out.flush().map_err(|e| failure(e.to_string()))?;
        written += size;
        files += 1;
    }
    Ok((files, lines, written))
}

/// The floor: read, hash and parse every line of every file.
fn floor(dir: &Path) -> Result<Duration, CliError> {
    let started = Instant::now();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)
            .map_err(|e| failure(e.to_string()))?
            .flatten()
        {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let bytes = std::fs::read(&path).map_err(|e| failure(e.to_string()))?;
            let _ = palm_sessions::archive::sha256_hex(&bytes);
            for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                let _: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
            }
        }
    }
    Ok(started.elapsed())
}

fn percentile_ms(samples: &mut [Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    (samples[index].as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0
}

/// `palm bench sessions`.
pub fn run(ctx: &Ctx, args: BenchSessionsArgs) -> CliResult {
    let total = parse_bytes(&args.bytes).ok_or_else(|| {
        CliError::usage(
            "invalid_input",
            format!("--bytes `{}`: like 100M or 1G", args.bytes),
        )
    })?;
    let scratch =
        Scratch(std::env::temp_dir().join(format!("palm-bench-sessions-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&scratch.0);
    let vendors = scratch.0.join("vendors");
    eprintln!("palm bench sessions: writing {} of transcripts", args.bytes);
    let (files, lines, bytes) = corpus(&vendors, total, args.seed)?;
    let sources = Sources {
        claude: Some(vendors.join("claude")),
        codex: Some(vendors.join("codex")),
    };
    eprintln!("palm bench sessions: the floor (read, hash, parse)");
    let floor = floor(&vendors)?;
    let data = scratch.0.join("data");
    std::fs::create_dir_all(&data).map_err(|e| failure(e.to_string()))?;
    let memory = Memory::open(&data).map_err(|e| failure(e.to_string()))?;
    eprintln!("palm bench sessions: ingesting");
    let started = Instant::now();
    let first = memory
        .ingest(&sources)
        .map_err(|e| failure(e.to_string()))?;
    let ingest = started.elapsed();
    let started = Instant::now();
    let second = memory
        .ingest(&sources)
        .map_err(|e| failure(e.to_string()))?;
    let again = started.elapsed();
    let (entries, archive_bytes, index_bytes) = memory.sizes();
    // Queries: one and two words of the same vocabulary (the corpus's seed).
    let mut rng = Rng(args.seed.max(1));
    let vocab = vocabulary(&mut rng, 20_000);
    let mut samples = Vec::with_capacity(args.queries);
    let mut hits = 0usize;
    for i in 0..args.queries {
        let mut q = vocab[rng.below(2_000)].clone();
        if i % 2 == 1 {
            q.push(' ');
            q.push_str(&vocab[rng.below(2_000)]);
        }
        let started = Instant::now();
        let found = memory
            .recall(&Recall {
                query: q,
                limit: 20,
                ..Recall::default()
            })
            .map_err(|e| failure(e.to_string()))?;
        samples.push(started.elapsed());
        hits += found.len();
    }
    let report = json!({
        "corpus": {"files": files, "lines": lines, "bytes": bytes},
        "floor_ms": floor.as_millis() as u64,
        "ingest": {
            "ms": ingest.as_millis() as u64,
            "mb_per_s": ((bytes as f64 / (1 << 20) as f64) / ingest.as_secs_f64() * 10.0).round() / 10.0,
            "vs_floor": ((floor.as_secs_f64() / ingest.as_secs_f64()) * 1000.0).round() / 1000.0,
            "messages": first.messages,
            "sessions": first.sessions,
            "archive_bytes": archive_bytes,
            "index_bytes": index_bytes,
            "index_entries": entries,
        },
        "second_ingest": {"ms": again.as_millis() as u64, "files_changed": second.files_changed, "messages": second.messages},
        "recall": {
            "p50_ms": percentile_ms(&mut samples, 0.5),
            "p99_ms": percentile_ms(&mut samples, 0.99),
            "queries": args.queries,
            "hits": hits,
        },
    });
    crate::ctx::print(ctx, &report, |_, v| {
        println!(
            "corpus: {} files, {} lines, {} MiB",
            v["corpus"]["files"],
            v["corpus"]["lines"],
            v["corpus"]["bytes"].as_u64().unwrap_or(0) >> 20
        );
        println!(
            "ingest: {} ms ({} MiB/s), {}× the floor of read+hash+parse ({} ms); {} entries; archive {} MiB, index {} MiB",
            v["ingest"]["ms"],
            v["ingest"]["mb_per_s"],
            v["ingest"]["vs_floor"],
            v["floor_ms"],
            v["ingest"]["index_entries"],
            v["ingest"]["archive_bytes"].as_u64().unwrap_or(0) >> 20,
            v["ingest"]["index_bytes"].as_u64().unwrap_or(0) >> 20
        );
        println!(
            "second ingest, nothing new: {} ms",
            v["second_ingest"]["ms"]
        );
        println!(
            "recall: p50 {} ms, p99 {} ms over {} queries",
            v["recall"]["p50_ms"], v["recall"]["p99_ms"], v["recall"]["queries"]
        );
    });
    Ok(Code::Ok)
}
