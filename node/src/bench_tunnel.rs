//! `palm bench tunnel`: one enrolled mTLS tunnel on loopback against a bare quinn framed
//! echo measured in the same run, interleaved in rounds (the measurement itself is
//! `palm_transport::bench`).

use crate::cli::BenchTunnelArgs;
use crate::ctx::Ctx;
use crate::exit::{CliError, CliResult, Code};
use palm_transport::bench::{BenchOptions, tunnel};

/// Runs the benchmark and prints it.
pub async fn run(ctx: &Ctx, args: BenchTunnelArgs) -> CliResult {
    let options = BenchOptions {
        seconds: args.seconds.clamp(0.1, 60.0),
        in_flight: args.in_flight.clamp(1, 4096),
        bulk_bytes: args.bulk_mib.clamp(1, 16 << 10) << 20,
        rounds: args.rounds.clamp(1, 100),
    };
    eprintln!(
        "palm bench tunnel: {} rounds of link then bare, {} s per rate, {} in flight, {} MiB bulk, {} build",
        options.rounds,
        options.seconds,
        options.in_flight,
        options.bulk_bytes >> 20,
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    let report = tunnel(&options)
        .await
        .map_err(|e| CliError::failure("bench", e))?;
    if ctx.out.json {
        let mut value = serde_json::to_value(&report).unwrap_or_default();
        value["machine"] = serde_json::json!({ "cpus": crate::sys::cpus() });
        value["build"] = serde_json::json!(if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        });
        ctx.out.json(&value);
        return Ok(Code::Ok);
    }
    for (i, round) in report.rounds.iter().enumerate() {
        println!(
            "round {}: link {:>7.0} / bare {:>7.0} req/s with {} in flight ({:.2}x); one at a time {:>6.0} / {:>6.0} ({:.2}x)",
            i + 1,
            round.link_pipelined_per_s,
            round.bare_pipelined_per_s,
            report.in_flight,
            round.link_pipelined_per_s / round.bare_pipelined_per_s.max(1e-9),
            round.link_one_in_flight_per_s,
            round.bare_one_in_flight_per_s,
            round.link_one_in_flight_per_s / round.bare_one_in_flight_per_s.max(1e-9),
        );
    }
    for (label, f) in [
        ("link (mTLS, framed)", &report.link),
        ("bare quinn echo    ", &report.bare),
    ] {
        println!(
            "{label}: {:>9.0} req/s with {} in flight, {:>7.0} req/s one at a time (RTT p50 {:.0} µs, p99 {:.0} µs), bulk {:.0} MiB/s",
            f.pipelined_per_s,
            report.in_flight,
            f.one_in_flight_per_s,
            f.rtt_p50_us,
            f.rtt_p99_us,
            f.bulk_mib_per_s
        );
    }
    println!(
        "bare quinn echo, one write per frame: {:>9.0} req/s with {} in flight",
        report.bare_per_frame_writes_per_s, report.in_flight
    );
    println!(
        "ratio link/bare (median of the rounds'): {:.2}x with {} in flight (bare coalescing writes), {:.2}x (bare writing per frame), {:.2}x one at a time",
        report.pipelined_ratio,
        report.in_flight,
        report.pipelined_ratio_per_frame,
        report.one_in_flight_ratio
    );
    Ok(Code::Ok)
}
