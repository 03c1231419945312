//! Rendering for people (the default) and for agents (`--json`: one document on stdout).
//! Colour only when stdout is a terminal and `NO_COLOR` is unset.

use serde_json::Value;
use std::io::IsTerminal;

/// How to print.
#[derive(Clone, Copy, Debug)]
pub struct Output {
    /// One JSON document on stdout.
    pub json: bool,
    /// ANSI colour on stdout.
    pub color: bool,
}

impl Output {
    /// From the `--json` flag and the terminal.
    pub fn new(json: bool) -> Output {
        Output {
            json,
            color: !json
                && std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    /// Prints a JSON document (pretty) on stdout.
    pub fn json(&self, value: &Value) {
        println!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
        );
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// A status word, coloured by meaning.
    pub fn status(&self, status: &str) -> String {
        let code = match status {
            "succeeded" | "success" => "32",
            "failed" | "failure" => "31",
            "waiting" | "running" | "pending" | "down" => "33",
            "up" => "32",
            "cancelled" | "idle" => "2",
            _ => "0",
        };
        self.paint(code, status)
    }

    /// Dim text.
    pub fn dim(&self, text: &str) -> String {
        self.paint("2", text)
    }

    /// Bold text.
    pub fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }

    /// Green text: it went well.
    pub fn green(&self, text: &str) -> String {
        self.paint("32", text)
    }

    /// Red text: it did not.
    pub fn red(&self, text: &str) -> String {
        self.paint("31", text)
    }
}

fn text(value: &Value, key: &str) -> String {
    match value.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn compact(value: &Value, max: usize) -> String {
    let text = match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    };
    if text.chars().count() > max {
        let cut: String = text.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        text
    }
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// A job's status view (`palm status`, `palm run`, `palm continue`).
/// A `best_of`'s choice, wherever the flow saved it: its reasons, one per attempt.
fn print_choices(out: &Output, view: &Value) {
    let Some(state) = view.get("state").and_then(Value::as_object) else {
        return;
    };
    for (key, saved) in state {
        let (Some(reasons), true) = (
            saved.get("reasons").and_then(Value::as_array),
            saved.get("ranking").is_some(),
        ) else {
            continue;
        };
        println!("  {}", out.bold(&format!("best_of ({key})")));
        for reason in reasons.iter().filter_map(Value::as_str) {
            println!("    {reason}");
        }
    }
}

pub fn print_status(out: &Output, view: &Value) {
    let job = text(view, "job");
    let status = text(view, "status");
    println!(
        "job {}  {} rev {}  {}",
        out.bold(&job),
        text(view, "flow"),
        text(view, "revision"),
        out.status(&status)
    );
    if view["projection"] == "invalid" {
        // Served from this node's memory while the job's home is cut off: say so first.
        let since = view["home_unreachable_since"]
            .as_u64()
            .map(|ms| format!(" since {}", age(ms)))
            .unwrap_or_default();
        println!(
            "  {}",
            out.bold(&format!(
                "projection invalid: the home is unreachable{since}; this is its last known state"
            ))
        );
        if let Some(why) = view.get("unreachable").and_then(Value::as_str) {
            println!("    {}", out.dim(why));
        }
    }
    if view["compacted"] == true {
        println!(
            "  {}",
            out.dim("compacted: ended long enough ago that only its summary is kept (retention)")
        );
    }
    if let Some(error) = view.get("error").and_then(Value::as_str) {
        println!("  error  {error}");
    }
    if let Some(outcome) = view.get("outcome").and_then(Value::as_str) {
        println!("  outcome  {outcome}");
    }
    print_choices(out, view);
    if let Some(waits) = view.get("waiting_on").and_then(Value::as_array) {
        for wait in waits {
            let key = text(wait, "key");
            match wait.get("prompt").and_then(Value::as_str) {
                Some(prompt) => println!("  waiting on `{key}`: {prompt}"),
                None => println!("  waiting on `{key}`"),
            }
            if let Some(choices) = wait
                .get("choices")
                .and_then(Value::as_array)
                .filter(|c| !c.is_empty())
            {
                let listed: Vec<String> = choices.iter().map(Value::to_string).collect();
                println!("    choices: {}", listed.join(", "));
            }
            let example = match wait
                .get("choices")
                .and_then(Value::as_array)
                .and_then(|c| c.first())
            {
                Some(choice) => choice.to_string(),
                None => "<json>".to_owned(),
            };
            println!(
                "    {}",
                out.dim(&format!(
                    "palm continue {job} --key {key} --input {}",
                    shell_quote(&example)
                ))
            );
        }
    }
    if let Some(blocked) = view.get("blocked_on").and_then(Value::as_array) {
        for need in blocked {
            println!(
                "  blocked on `{}`: {}",
                text(need, "place"),
                text(need, "reason")
            );
        }
    }
    if let Some(state) = view
        .get("state")
        .and_then(Value::as_object)
        .filter(|s| !s.is_empty())
    {
        println!("  state");
        for (key, value) in state {
            println!("    {key}: {}", compact(value, 100));
        }
    }
}

/// `palm jobs`.
pub fn print_jobs(out: &Output, jobs: &Value) {
    let list = jobs
        .get("jobs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if list.is_empty() {
        println!("{}", out.dim("no jobs"));
        return;
    }
    let width = list
        .iter()
        .map(|j| text(j, "job").len())
        .max()
        .unwrap_or(3)
        .max(3);
    let flow_width = list
        .iter()
        .map(|j| text(j, "flow").len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!("{:width$}  {:flow_width$}  STATUS", "JOB", "FLOW");
    for job in &list {
        let status = text(job, "status");
        let waiting = job
            .get("waiting")
            .and_then(Value::as_array)
            .filter(|w| !w.is_empty())
            .map(|w| {
                let keys: Vec<String> = w
                    .iter()
                    .filter_map(|k| k.as_str().map(str::to_owned))
                    .collect();
                format!(" on {}", keys.join(", "))
            })
            .unwrap_or_default();
        println!(
            "{:width$}  {:flow_width$}  {}{waiting}",
            text(job, "job"),
            text(job, "flow"),
            out.status(&status)
        );
    }
}

fn event_summary(event: &Value) -> String {
    let kind = text(event, "kind");
    match kind.as_str() {
        "submitted" => format!(
            "flow {} rev {}",
            text(event, "flow"),
            text(event, "revision")
        ),
        "effect_requested" => {
            let request = event.get("request").cloned().unwrap_or(Value::Null);
            let (what, body) = request
                .as_object()
                .and_then(|o| o.iter().next().map(|(k, v)| (k.clone(), v.clone())))
                .unwrap_or_default();
            let detail = match what.as_str() {
                "run" => text(&body, "cmd"),
                "timer" => format!("at {}", text(&body, "deadline")),
                "spawn" => text(&body, "flow"),
                "call" => text(&body, "provider"),
                _ => String::new(),
            };
            format!(
                "{what} {}  {}",
                text(event, "key"),
                compact(&Value::String(detail), 60)
            )
        }
        "effect_completed" => {
            let outcome = event.get("outcome").cloned().unwrap_or(Value::Null);
            let detail = match outcome.get("run") {
                Some(run) => format!(
                    "exit {}",
                    run.get("exit_code").map_or("?".into(), Value::to_string)
                ),
                None => compact(&outcome, 60),
            };
            let node = event
                .get("node")
                .and_then(Value::as_str)
                .map(|n| format!(" on {n}"))
                .unwrap_or_default();
            format!("{}  {detail}{node}", text(event, "key"))
        }
        "continued" => format!(
            "{} = {}",
            text(event, "key"),
            compact(event.get("input").unwrap_or(&Value::Null), 60)
        ),
        "parked" => format!("{}  {}", text(event, "key"), text(event, "prompt")),
        "failed" => text(event, "error"),
        "cancel_requested" => text(event, "reason"),
        "timer_fired" | "effect_cancelled" | "unparked" => text(event, "key"),
        _ => String::new(),
    }
}

fn print_tree(out: &Output, node: &Value, prefix: &str, last: bool, root: bool) {
    let name = text(node, "name");
    let kind = text(node, "type");
    let status = text(node, "status");
    let label = if name == kind {
        kind.clone()
    } else {
        format!("{kind} {name}")
    };
    let detail = node
        .get("detail")
        .and_then(Value::as_str)
        .map(|d| format!(" {}", out.dim(&compact(&Value::String(d.to_owned()), 50))))
        .unwrap_or_default();
    let branch = if root {
        ""
    } else if last {
        "└─ "
    } else {
        "├─ "
    };
    // The path names the node for `palm retry JOB --from PATH`.
    println!(
        "  {prefix}{branch}{label}{detail}  {}  {}",
        out.status(&status),
        out.dim(&text(node, "path"))
    );
    let children = node
        .get("children")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let next_prefix = if root {
        String::new()
    } else if last {
        format!("{prefix}   ")
    } else {
        format!("{prefix}│  ")
    };
    for (i, child) in children.iter().enumerate() {
        print_tree(out, child, &next_prefix, i + 1 == children.len(), false);
    }
}

/// `palm inspect`.
pub fn print_inspect(out: &Output, inspect: &Value) {
    println!(
        "job {}  {} rev {}  {}",
        out.bold(&text(inspect, "job")),
        text(inspect, "flow"),
        text(inspect, "revision"),
        out.status(&text(inspect, "status"))
    );
    println!("journal");
    for event in inspect
        .get("events")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
    {
        println!(
            "  {:>4}  {:<17} {}",
            text(&event, "seq"),
            text(&event, "kind"),
            event_summary(&event)
        );
    }
    if let Some(tree) = inspect.get("tree").filter(|t| !t.is_null()) {
        println!("tree");
        print_tree(out, tree, "", true, true);
    }
    print_agent_runs(out, inspect);
}

/// Lines of each agent run's transcript shown by `palm inspect`.
const TRANSCRIPT_TAIL_LINES: usize = 5;

/// A job's agent runs (`agent_runs`: each ended or interrupted run): how each ended, its
/// session, its transcript (where it is kept, and its last lines).
fn print_agent_runs(out: &Output, inspect: &Value) {
    let runs: Vec<(String, Value)> = inspect["agent_runs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|run| (text(run, "key"), run.clone()))
        .collect();
    if runs.is_empty() {
        return;
    }
    println!("agent runs");
    for (key, run) in runs {
        let end = text(&run, "end");
        let end = if end == "success" {
            out.green(&end)
        } else {
            out.red(&end)
        };
        println!(
            "  {}  {} {}  session {}",
            key,
            text(&run, "provider"),
            end,
            text(&run, "session_id")
        );
        let transcript = &run["transcript"];
        let path = text(transcript, "path");
        let mut size = Vec::new();
        if let Some(lines) = transcript["lines"].as_u64() {
            size.push(format!("{lines} lines"));
        }
        size.push(format!(
            "{} bytes",
            transcript["bytes"].as_u64().unwrap_or(0)
        ));
        if transcript["truncated"] == true {
            size.push("truncated".to_owned());
        }
        println!(
            "    {}",
            out.dim(&format!("transcript {path} ({})", size.join(", ")))
        );
        if let Some(error) = run["error"].as_str() {
            println!("    {}", out.dim(error));
        }
        if let Ok(kept) = std::fs::read_to_string(&path) {
            let lines: Vec<&str> = kept.lines().collect();
            for line in &lines[lines.len().saturating_sub(TRANSCRIPT_TAIL_LINES)..] {
                let shown: String = line.chars().take(160).collect();
                println!("    {}", out.dim(&shown));
            }
        }
    }
}

/// `palm vitality`.
pub fn print_vitality(out: &Output, v: &Value) {
    print!("{}", vitality_text(out, v));
}

/// What `palm vitality` shows, as text (also the top of `palm top`).
pub fn vitality_text(out: &Output, v: &Value) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let running = v.get("running").and_then(Value::as_bool).unwrap_or(false);
    let _ = writeln!(
        s,
        "node {}  {}  {}",
        out.bold(&text(v, "node")),
        text(v, "profile"),
        if running {
            out.status("running")
        } else {
            out.dim("not running (read from the store)")
        }
    );
    let _ = writeln!(s, "  data     {}", text(v, "data"));
    let _ = writeln!(s, "  store    {}", text(v, "store"));
    if let Some(seats) = v.get("seats") {
        let _ = writeln!(
            s,
            "  seats    {} total, {} busy, {} idle",
            text(seats, "total"),
            text(seats, "busy"),
            text(seats, "idle")
        );
    }
    if let Some(queue) = v.get("queue") {
        let _ = writeln!(
            s,
            "  queue    {} ready, {} leases, {} timers",
            text(queue, "ready"),
            text(queue, "leases"),
            text(queue, "timers")
        );
        // Work no seat can take, in plain words: what it needs and why that is not here.
        for blocked in queue["blocked"].as_array().into_iter().flatten() {
            let _ = writeln!(
                s,
                "  {}  {} effect(s) need `{}`: {}",
                out.red("blocked"),
                text(blocked, "effects"),
                text(blocked, "need"),
                text(blocked, "reason")
            );
        }
    }
    if let Some(jobs) = v.get("jobs") {
        let by: Vec<String> = jobs
            .get("by_status")
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, n)| format!("{n} {k}")).collect())
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "  jobs     {} active; {}",
            text(jobs, "active"),
            if by.is_empty() {
                "none stored".into()
            } else {
                by.join(", ")
            }
        );
    }
    if let Some(process) = v.get("process") {
        let rss = process
            .get("rss_bytes")
            .and_then(Value::as_u64)
            .map(|b| format!("{:.1} MiB", b as f64 / 1048576.0));
        let cpu = process
            .get("cpu_ms")
            .and_then(Value::as_u64)
            .map(|ms| format!("{:.2} s cpu", ms as f64 / 1000.0));
        let _ = writeln!(
            s,
            "  process  {}",
            [rss, cpu]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(places) = v.get("places").and_then(Value::as_array) {
        if places.is_empty() {
            let _ = writeln!(s, "  places   none");
        } else {
            let _ = writeln!(s, "  places");
            for place in places {
                let _ = writeln!(s, "    {}", place_line(out, place));
            }
        }
    }
    let links = v
        .get("links")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if links.is_empty() {
        let _ = writeln!(s, "  links    none");
    }
    for (i, link) in links.iter().enumerate() {
        let state = text(link, "state");
        let reason = link
            .get("reason")
            .and_then(Value::as_str)
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "  {}    {} {} {}{}",
            if i == 0 { "links" } else { "     " },
            text(link, "direction"),
            out.bold(&text(link, "peer")),
            out.status(&state),
            reason
        );
    }
    let refused = v["refused"]["count"].as_u64().unwrap_or(0);
    if refused > 0 {
        let _ = writeln!(s, "  refused  {refused} frame(s) from peers; latest:");
        let latest = v["refused"]["latest"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for refusal in latest.iter().rev().take(5) {
            let _ = writeln!(
                s,
                "    {} from {}: {}",
                text(refusal, "kind"),
                out.bold(&text(refusal, "peer")),
                text(refusal, "reason")
            );
        }
    }
    s
}

fn place_line(out: &Output, place: &Value) -> String {
    let state = text(place, "state");
    let painted = match state.as_str() {
        "ready" => out.status("succeeded").replace("succeeded", "ready"),
        "failed" => out.status("failed"),
        "stopped" => out.dim("stopped"),
        other => out.status("running").replace("running", other),
    };
    let mut line = format!(
        "{:<20} {:<9} {:<6} {}",
        out.bold(&text(place, "name")),
        painted,
        text(place, "kind"),
        text(place, "target")
    );
    if let Some(pid) = place.get("pid").and_then(Value::as_u64) {
        line.push_str(&format!("  pid {pid}"));
    }
    if let Some(rss) = place.get("rss_bytes").and_then(Value::as_u64) {
        line.push_str(&format!("  {:.1} MiB", rss as f64 / 1048576.0));
    }
    let reason = text(place, "reason");
    if !reason.is_empty() {
        line.push_str(&format!("\n{:<22}{}", "", out.dim(&reason)));
    }
    line
}

/// `palm places`.
pub fn print_places(out: &Output, v: &Value) {
    match v.get("places").and_then(Value::as_array) {
        Some(places) if !places.is_empty() => {
            for place in places {
                println!("{}", place_line(out, place));
            }
        }
        _ => println!("no places"),
    }
    if v.get("running") == Some(&Value::Bool(false)) {
        println!(
            "{}",
            out.dim("(no node is running: places start with `palm up`)")
        );
    }
}

/// `palm places events`.
pub fn print_place_events(out: &Output, v: &Value) {
    let Some(events) = v.get("events").and_then(Value::as_array) else {
        return;
    };
    if events.is_empty() {
        println!("no events");
    }
    for event in events {
        let detail = match event.get("kind").and_then(Value::as_str) {
            Some("place_changed") => format!(
                "{} {} → {}  {}",
                out.bold(&text(event, "place")),
                text(event, "from"),
                text(event, "to"),
                out.dim(&text(event, "reason"))
            ),
            Some("place_removed") => format!("{} removed", out.bold(&text(event, "place"))),
            Some("link") => format!(
                "link {} {} {}",
                text(event, "direction"),
                text(event, "peer"),
                text(event, "state")
            ),
            _ => event.to_string(),
        };
        println!("{:>6}  {}", text(event, "seq"), detail);
    }
}

/// `palm tree`: the tree of nodes.
pub fn print_node_tree(out: &Output, v: &Value) {
    fn node(out: &Output, n: &Value, depth: usize) {
        let link = n.get("link");
        let state = link.map(|l| text(l, "state")).unwrap_or_default();
        let mut line = format!(
            "{}{} {}",
            "  ".repeat(depth),
            out.bold(&text(n, "name")),
            text(n, "role")
        );
        if !state.is_empty() {
            line.push_str(&format!(
                " [{}]",
                out.status(if state == "up" { "succeeded" } else { "failed" })
                    .replace("succeeded", "up")
                    .replace("failed", "down")
            ));
        }
        if n.get("self") == Some(&Value::Bool(true)) {
            line.push_str(" (this node)");
        }
        if let Some(seats) = n.get("seats").and_then(Value::as_u64) {
            line.push_str(&format!(
                "  seats {}/{}",
                n.get("busy").and_then(Value::as_u64).unwrap_or(0),
                seats
            ));
        }
        if let Some(caps) = n
            .get("capabilities")
            .and_then(Value::as_array)
            .filter(|c| !c.is_empty())
        {
            let caps: Vec<&str> = caps.iter().filter_map(Value::as_str).collect();
            line.push_str(&format!("  offers {}", caps.join(", ")));
        }
        if let Some(heard) = link
            .and_then(|l| l["last_heard"].as_u64())
            .filter(|t| *t > 0)
        {
            line.push_str(&out.dim(&format!("  heard {}", age(heard))));
        }
        println!("{line}");
        for child in n
            .get("children")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            node(out, child, depth + 1);
        }
    }
    if let Some(parent) = v.get("parent").filter(|p| !p.is_null()) {
        let state = parent["link"]["state"].as_str().unwrap_or("down");
        println!("parent {} [{state}]", out.bold(&text(parent, "name")));
    }
    if v["projection"]["valid"] == Value::Bool(false) {
        println!(
            "  {}",
            out.dim(&format!(
                "projection of {} invalid since {}",
                text(&v["projection"], "of"),
                text(&v["projection"], "home_unreachable_since")
            ))
        );
    }
    node(out, &v["tree"], 0);
}

/// How long ago `at_ms` (ms since the epoch) was, in words: `12 s ago`, `3 min ago`.
fn age(at_ms: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let secs = now.saturating_sub(at_ms) / 1000;
    match secs {
        0..=119 => format!("{secs} s ago"),
        120..=7199 => format!("{} min ago", secs / 60),
        _ => format!("{} h ago", secs / 3600),
    }
}

/// `bytes` for a person: `12 B`, `3.4 KiB`, `1.2 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}
