//! `palm top` (and `palm status` with no job): the node at a glance — seats, queues,
//! blocked work, jobs by status, the jobs waiting for input, places and links — redrawn
//! in place every `--every` on a terminal until Ctrl-C. With `--once`, `--json` or no
//! terminal it prints one snapshot.

use crate::ctx::Ctx;
use crate::exit::{CliError, CliResult, Code};
use crate::output::{self, Output};
use palm_api::protocol::Request;
use palm_api::verbs::duration_ms;
use palm_node::target::{Access, Target};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::time::Duration;

/// Waiting jobs shown (the count says how many there are in all).
const WAITING_SHOWN: usize = 10;

/// `palm top [--once] [--every D]`.
pub async fn run(ctx: &Ctx, once: bool, every: Option<&str>) -> CliResult {
    let every_ms = match every {
        Some(text) => duration_ms(text, "--every")?.max(200),
        None => 1000,
    };
    let live = !once && !ctx.out.json && std::io::stdout().is_terminal();
    if !live {
        let mut target = Target::for_access(&ctx.data, Access::Read).await?;
        let taken = snapshot(&mut target).await;
        target.finish().await;
        let taken = taken?;
        if ctx.out.json {
            ctx.out.json(&taken);
        } else {
            print!("{}", render(&ctx.out, &taken, now_ms()));
        }
        return Ok(Code::Ok);
    }
    let mut stdout = std::io::stdout();
    // The alternate screen, the cursor hidden: the terminal comes back as it was.
    let _ = write!(stdout, "\x1b[?1049h\x1b[?25l");
    let outcome = async {
        let mut target = Target::for_access(&ctx.data, Access::Read).await?;
        loop {
            let screen = match snapshot(&mut target).await {
                Ok(taken) => render(&ctx.out, &taken, now_ms()),
                Err(err) => {
                    // The node went away: read again from wherever the data is now.
                    target.finish().await;
                    target = Target::for_access(&ctx.data, Access::Read).await?;
                    format!("palm: {err}; trying again\n")
                }
            };
            let _ = write!(
                stdout,
                "\x1b[H\x1b[2J{screen}\n{}",
                ctx.out
                    .dim(&format!("every {} · Ctrl-C quits", human_ms(every_ms)))
            );
            let _ = stdout.flush();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break,
                () = tokio::time::sleep(Duration::from_millis(every_ms)) => {}
            }
        }
        target.finish().await;
        Ok::<(), CliError>(())
    }
    .await;
    let _ = write!(stdout, "\x1b[?25h\x1b[?1049l");
    let _ = stdout.flush();
    outcome.map(|()| Code::Ok)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn human_ms(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

/// `{vitality, waiting: {total, jobs: [{job, flow, keys, prompt, since}]}}`.
async fn snapshot(target: &mut Target) -> Result<Value, CliError> {
    let vitality = target.call(Request::Vitality).await?;
    let waits = target
        .call(Request::Waits {
            limit: Some(WAITING_SHOWN),
            offset: None,
        })
        .await?;
    let jobs: Vec<Value> = waits["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|view| {
            let first = &view["waiting_on"][0];
            json!({
                "job": view["job"],
                "flow": view["flow"],
                "keys": view["waiting_on"].as_array().map(|w| w.iter().map(|w| w["key"].clone()).collect::<Vec<_>>()),
                "prompt": first["prompt"],
                "since": first["since"],
                "wizard": first["schema"]["x-palm-wizard"].get("step").map(|_| json!({
                    "step": first["schema"]["x-palm-wizard"]["step"],
                    "n": first["schema"]["x-palm-wizard"]["n"],
                    "of": first["schema"]["x-palm-wizard"]["of"],
                })),
            })
        })
        .collect();
    Ok(json!({
        "vitality": vitality,
        "waiting": {"total": waits["total"], "jobs": jobs},
    }))
}

fn ago(now: u64, then: &Value) -> String {
    let Some(then) = then.as_u64() else {
        return String::new();
    };
    let s = now.saturating_sub(then) / 1000;
    match s {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min", s / 60),
        s if s < 86_400 => format!("{} h", s / 3600),
        s => format!("{} d", s / 86_400),
    }
}

/// The snapshot as the screen shows it.
fn render(out: &Output, taken: &Value, now: u64) -> String {
    let mut screen = output::vitality_text(out, &taken["vitality"]);
    let waiting = &taken["waiting"];
    let total = waiting["total"].as_u64().unwrap_or(0);
    let jobs = waiting["jobs"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(screen, "  waiting  {total} job(s) wait for input");
    for job in &jobs {
        let keys: Vec<&str> = job["keys"]
            .as_array()
            .map(|k| k.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let what = match job["wizard"].as_object() {
            Some(step) => format!(
                "wizard step {}/{} `{}`",
                step.get("n").cloned().unwrap_or_default(),
                step.get("of").cloned().unwrap_or_default(),
                step.get("step").and_then(Value::as_str).unwrap_or_default()
            ),
            None => format!("on {}", keys.join(", ")),
        };
        let _ = writeln!(
            screen,
            "    {}  {:<14} {}  {}{}",
            out.bold(job["job"].as_str().unwrap_or_default()),
            job["flow"].as_str().unwrap_or_default(),
            what,
            out.dim(&format!("{} ago", ago(now, &job["since"]))),
            job["prompt"]
                .as_str()
                .map(|p| format!("  {p}"))
                .unwrap_or_default()
        );
    }
    if (jobs.len() as u64) < total {
        let _ = writeln!(
            screen,
            "    {}",
            out.dim(&format!(
                "… and {} more (palm jobs --status waiting)",
                total - jobs.len() as u64
            ))
        );
    }
    screen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_screen_names_each_waiting_job_and_how_many_more() {
        let out = Output {
            json: false,
            color: false,
        };
        let taken = json!({
            "vitality": {"node": "box", "profile": "all-in-one", "running": true,
                         "seats": {"total": 2, "busy": 1, "idle": 1},
                         "queue": {"ready": 3, "leases": 1, "timers": 0, "blocked": []},
                         "jobs": {"active": 4, "by_status": {"waiting": 12}},
                         "places": [], "links": []},
            "waiting": {"total": 12, "jobs": [
                {"job": "j-1", "flow": "approval", "keys": ["approve"], "prompt": "Ship?",
                 "since": 1_000, "wizard": null},
                {"job": "j-2", "flow": "wizard", "keys": ["service"], "prompt": "Name",
                 "since": 61_000, "wizard": {"step": "name", "n": 1, "of": 6}}
            ]}
        });
        let screen = render(&out, &taken, 121_000);
        assert!(
            screen.contains("seats    2 total, 1 busy, 1 idle"),
            "{screen}"
        );
        assert!(
            screen.contains("waiting  12 job(s) wait for input"),
            "{screen}"
        );
        assert!(
            screen.contains("j-1  approval       on approve  2 min ago  Ship?"),
            "{screen}"
        );
        assert!(
            screen.contains("wizard step 1/6 `name`  1 min ago"),
            "{screen}"
        );
        assert!(screen.contains("… and 10 more"), "{screen}");
    }
}
