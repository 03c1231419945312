//! `palm bench explorer`: the Explorer's inbox with many waiting jobs, on an in-process
//! node. The baseline is the `waits` control request for the page's jobs alone (the
//! data the page needs); the measured work is the whole first page — `GET /inbox`
//! through the same router `palm up --http` serves (the count of every waiting job, the
//! page's jobs, a form per wait built from its schema, the template, the bytes).
//! Reported: p50/p99 of each over `--samples` rounds, and the ratio.

use crate::ctx::Ctx;
use crate::exit::{CliError, CliResult, Code};
use crate::node::{BootOptions, Node};
use clap::Args;
use palm_api::protocol::{FlowArg, Request};
use palm_node::genome::NodeSettings;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower_service::Service;

/// `palm bench explorer`.
#[derive(Debug, Args)]
pub struct BenchExplorerArgs {
    /// Waiting jobs in the inbox.
    #[arg(long, default_value_t = 10_000)]
    pub jobs: usize,
    /// Rounds measured (each: one baseline request, one page).
    #[arg(long, default_value_t = 20)]
    pub samples: usize,
}

const FLOW: &str = "name: inbox-bench\ntree:\n  wait:\n    key: approve\n    prompt: Ship it?\n    schema: {type: object, required: [ok, note], properties: {ok: {type: boolean}, note: {type: string}, env: {enum: [prod, staging]}}}\n";
/// Submissions in flight while filling the inbox.
const FILL_IN_FLIGHT: usize = 64;

fn failure(message: impl Into<String>) -> CliError {
    CliError::failure("bench", message)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let at = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[at].as_secs_f64() * 1000.0
}

struct Backend {
    genome: Arc<palm_node::genome::Genome>,
}

impl palm_web::Backend for Backend {
    fn call(&self, request: Request) -> palm_web::Answer<'_> {
        Box::pin(palm_node::control::dispatch(&self.genome, request))
    }
    fn token_ok(&self, _: &str) -> bool {
        false
    }

    fn data_dir(&self) -> &std::path::Path {
        &self.genome.info.data
    }
}

/// Runs the benchmark.
pub async fn run(ctx: &Ctx, args: BenchExplorerArgs) -> CliResult {
    let scratch = std::env::temp_dir().join(format!("palm-bench-explorer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let node = Node::boot(BootOptions {
        data: scratch.join("node"),
        name: "bench".into(),
        profile: "all-in-one".into(),
        settings: NodeSettings::default(),
        embedded: true,
        store: None,
    })
    .await?;
    let result = measure(&node, &args).await;
    node.shutdown(Duration::ZERO).await;
    let _ = std::fs::remove_dir_all(&scratch);
    let report = result?;
    crate::ctx::print(ctx, &report, |_, r| {
        println!(
            "inbox of {} waiting jobs ({} bytes of HTML): page p50 {:.1} ms, p99 {:.1} ms · the waits request alone p50 {:.1} ms · page/data {:.2}×",
            r["jobs"],
            r["page_bytes"],
            r["page"]["p50_ms"].as_f64().unwrap_or(0.0),
            r["page"]["p99_ms"].as_f64().unwrap_or(0.0),
            r["baseline"]["p50_ms"].as_f64().unwrap_or(0.0),
            r["ratio"]["page_over_data_p50"].as_f64().unwrap_or(0.0)
        );
        println!("  filled in {:.1} s", r["fill_s"].as_f64().unwrap_or(0.0));
    });
    Ok(Code::Ok)
}

async fn measure(node: &Node, args: &BenchExplorerArgs) -> Result<serde_json::Value, CliError> {
    let genome = Arc::clone(node.genome());
    let started = Instant::now();
    let mut next = 0usize;
    let mut tasks = tokio::task::JoinSet::new();
    while next < args.jobs || !tasks.is_empty() {
        while next < args.jobs && tasks.len() < FILL_IN_FLIGHT {
            let genome = Arc::clone(&genome);
            tasks.spawn(async move {
                palm_node::control::dispatch(
                    &genome,
                    Request::Submit {
                        flow: FlowArg::Source {
                            source: FLOW.into(),
                            origin: "<bench>".into(),
                        },
                        input: Default::default(),
                        args: Vec::new(),
                        started_by: None,
                        node: None,
                    },
                )
                .await
            });
            next += 1;
        }
        if let Some(done) = tasks.join_next().await {
            let response = done.map_err(|e| failure(e.to_string()))?;
            if !response.ok {
                return Err(failure(format!(
                    "a submission failed: {:?}",
                    response.error
                )));
            }
        }
    }
    let fill_s = started.elapsed().as_secs_f64();
    // Every job parked before measuring.
    for _ in 0..600 {
        let waiting = palm_node::control::dispatch(
            &genome,
            Request::Waits {
                limit: None,
                offset: None,
            },
        )
        .await;
        let count = waiting
            .result
            .as_ref()
            .and_then(|r| r["total"].as_u64())
            .unwrap_or(0) as usize;
        if count >= args.jobs {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let backend: Arc<dyn palm_web::Backend> = Arc::new(Backend {
        genome: Arc::clone(&genome),
    });
    let mut router = palm_web::explorer_router(backend);
    let mut baseline = Vec::with_capacity(args.samples);
    let mut page = Vec::with_capacity(args.samples);
    let mut page_bytes = 0usize;
    for _ in 0..args.samples.max(1) {
        let t = Instant::now();
        let data = palm_node::control::dispatch(
            &genome,
            Request::Waits {
                limit: Some(palm_web::explorer::INBOX_PAGE),
                offset: Some(0),
            },
        )
        .await;
        baseline.push(t.elapsed());
        if !data.ok {
            return Err(failure("the waits request failed"));
        }
        let request = axum::http::Request::builder()
            .uri("/inbox")
            .body(axum::body::Body::empty())
            .map_err(|e| failure(e.to_string()))?;
        let t = Instant::now();
        let response = router
            .call(request)
            .await
            .map_err(|e| failure(e.to_string()))?;
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .map_err(|e| failure(e.to_string()))?;
        page.push(t.elapsed());
        page_bytes = body.len();
        let text = String::from_utf8_lossy(&body);
        if !text.contains(&format!("{} waiting", args.jobs)) {
            return Err(failure("the inbox does not count every waiting job"));
        }
    }
    baseline.sort();
    page.sort();
    let (b50, b99, p50, p99) = (
        percentile(&baseline, 0.5),
        percentile(&baseline, 0.99),
        percentile(&page, 0.5),
        percentile(&page, 0.99),
    );
    Ok(json!({
        "jobs": args.jobs,
        "samples": args.samples,
        "fill_s": fill_s,
        "page_bytes": page_bytes,
        "baseline": {"what": "the waits control request alone", "p50_ms": b50, "p99_ms": b99},
        "page": {"what": "GET /inbox through the Explorer's router", "p50_ms": p50, "p99_ms": p99},
        "ratio": {"page_over_data_p50": if b50 > 0.0 { p50 / b50 } else { 0.0 }},
        "goal": {"page_p50_ms_max": 100.0, "met": p50 <= 100.0},
    }))
}
