//! The stdio transport of `palm mcp`, with a bounded request line.
//!
//! rmcp's `AsyncRwTransport` bounds a line too, but drops an oversized one silently, so
//! the client waits for an answer that never comes. Here a small reader sits between
//! stdin and the transport: lines up to [`REQUEST_BYTES_MAX`] pass through unchanged;
//! a longer one is discarded as it streams (memory stays bounded: only the first
//! [`ID_PREFIX_BYTES`] are kept, to find its id) and replaced by a tiny request of the
//! method [`OVERSIZED_METHOD`] with the same id, which the handler refuses with a
//! JSON-RPC error. A line that is not JSON never reaches rmcp (which would drop it, or
//! end a session not yet initialised): it is answered with JSON-RPC's parse error
//! (-32700, `id: null`), written between rmcp's whole lines on stdout. The session goes
//! on.

use super::control_link::ControlLink;
use super::server::PalmMcp;
use crate::exit::CliError;
use palm_api::protocol::REQUEST_BYTES_MAX;
use rmcp::transport::async_rw::AsyncRwTransport;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

/// The method a refused oversized request is replaced by (answered with an error).
pub const OVERSIZED_METHOD: &str = "palm/oversized";

/// How much of an oversized line is kept to find its `id`.
pub const ID_PREFIX_BYTES: usize = 64 * 1024;

/// Buffer between the line filter and the transport (backpressure, not a queue).
const PIPE_BYTES: usize = 64 * 1024;

/// Serves MCP on stdin/stdout until the client closes stdin or a signal arrives.
pub async fn serve(link: Arc<ControlLink>) -> Result<(), CliError> {
    let (stdin, stdout) = rmcp::transport::stdio_pipes();
    let (filtered, transport_side) = tokio::io::duplex(PIPE_BYTES);
    let (answers_tx, answers_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let filter = tokio::spawn(async move {
        if let Err(err) = bound_lines(stdin, filtered, REQUEST_BYTES_MAX, Some(answers_tx)).await {
            tracing::debug!(target: "palm::mcp", %err, "stdin closed");
        }
    });
    // rmcp writes into a pipe; one task copies its lines and the filter's answers to
    // stdout, whole lines only.
    let (rmcp_out, rmcp_lines) = tokio::io::duplex(PIPE_BYTES);
    let merger = tokio::spawn(async move {
        if let Err(err) = merge_lines(rmcp_lines, answers_rx, stdout).await {
            tracing::debug!(target: "palm::mcp", %err, "stdout closed");
        }
    });
    // The filter already bounds lines; the transport's own bound only has to admit them.
    let transport = AsyncRwTransport::new_server(transport_side, rmcp_out)
        .with_max_line_length(REQUEST_BYTES_MAX + 2);
    let service = rmcp::serve_server(PalmMcp::new(link), transport)
        .await
        .map_err(|err| CliError::failure("mcp", format!("the MCP session did not start: {err}")))?;
    let cancel = service.cancellation_token();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    tokio::select! {
        quit = service.waiting() => {
            tracing::debug!(target: "palm::mcp", ?quit, "session ended");
        }
        _ = terminate.recv() => cancel.cancel(),
        _ = interrupt.recv() => cancel.cancel(),
    }
    filter.abort();
    // What rmcp wrote last reaches stdout before the process ends.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), merger).await;
    Ok(())
}

/// Copies `lines` (rmcp's output) to `out`, and each of `answers` (whole lines) between
/// two of its lines, never inside one.
async fn merge_lines<R, W>(
    lines: R,
    mut answers: tokio::sync::mpsc::Receiver<Vec<u8>>,
    mut out: W,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut lines = BufReader::with_capacity(PIPE_BYTES, lines);
    // Kept across turns: a line half read when an answer comes is finished next turn.
    let mut line = Vec::new();
    let mut answering = true;
    loop {
        tokio::select! {
            read = lines.read_until(b'\n', &mut line) => {
                if read? == 0 {
                    out.flush().await?;
                    return Ok(());
                }
                if line.ends_with(b"\n") {
                    out.write_all(&line).await?;
                    out.flush().await?;
                    line.clear();
                }
            }
            answer = answers.recv(), if answering && line.is_empty() => match answer {
                Some(answer) => {
                    out.write_all(&answer).await?;
                    out.flush().await?;
                }
                None => answering = false,
            },
        }
    }
}

/// JSON-RPC's answer to a line that is not JSON.
fn parse_error(line: &[u8]) -> Vec<u8> {
    let detail = match serde_json::from_slice::<serde::de::IgnoredAny>(line) {
        Err(err) => err.to_string(),
        Ok(_) => String::new(),
    };
    let mut answer = serde_json::to_vec(&json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32700, "message": format!("Parse error: {detail}")},
    }))
    .unwrap_or_default();
    answer.push(b'\n');
    answer
}

/// Copies newline-delimited messages from `reader` to `writer`, replacing any whose
/// content exceeds `bytes_max` by an [`OVERSIZED_METHOD`] request with its id (or
/// dropping it, when no id can be found in its first [`ID_PREFIX_BYTES`]). A line that is
/// not JSON is not passed on: its parse error goes to `unparsable` (blank lines are
/// skipped).
pub async fn bound_lines<R, W>(
    reader: R,
    mut writer: W,
    bytes_max: usize,
    unparsable: Option<tokio::sync::mpsc::Sender<Vec<u8>>>,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut reader = BufReader::with_capacity(PIPE_BYTES, reader);
    let mut line: Vec<u8> = Vec::new();
    // (bytes seen so far, the kept prefix) of a line already over the bound.
    let mut oversized: Option<(usize, Vec<u8>)> = None;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            // End of input: an unterminated last line is not a message.
            writer.shutdown().await?;
            return Ok(());
        }
        let newline = available.iter().position(|b| *b == b'\n');
        let take = newline.map_or(available.len(), |i| i + 1);
        let chunk = &available[..take];
        let content = take - usize::from(newline.is_some());
        match &mut oversized {
            Some((bytes, prefix)) => {
                *bytes += content;
                let room = ID_PREFIX_BYTES.saturating_sub(prefix.len());
                prefix.extend_from_slice(&chunk[..room.min(chunk.len())]);
            }
            None if line.len() + content > bytes_max => {
                let seen = line.len() + content;
                let mut prefix = std::mem::take(&mut line);
                prefix.truncate(ID_PREFIX_BYTES);
                let room = ID_PREFIX_BYTES.saturating_sub(prefix.len());
                prefix.extend_from_slice(&chunk[..room.min(chunk.len())]);
                oversized = Some((seen, prefix));
                // Give back the memory of the refused line.
                line.shrink_to(PIPE_BYTES);
            }
            None => line.extend_from_slice(chunk),
        }
        reader.consume(take);
        if newline.is_none() {
            continue;
        }
        match oversized.take() {
            Some((bytes, prefix)) => {
                tracing::warn!(target: "palm::mcp", bytes, bytes_max, "request line over the bound; refused");
                if let Some(id) = request_id(&prefix) {
                    let mut refusal = serde_json::to_vec(&json!({
                        "jsonrpc": "2.0",
                        "id": id,
                        "method": OVERSIZED_METHOD,
                        "params": {"bytes": bytes},
                    }))?;
                    refusal.push(b'\n');
                    writer.write_all(&refusal).await?;
                }
            }
            None if line.iter().all(u8::is_ascii_whitespace) => {}
            None if serde_json::from_slice::<serde::de::IgnoredAny>(&line).is_err() => {
                tracing::warn!(target: "palm::mcp", "a request line that is not JSON; answered with a parse error");
                if let Some(unparsable) = &unparsable {
                    let _ = unparsable.send(parse_error(&line)).await;
                }
            }
            None => writer.write_all(&line).await?,
        }
        writer.flush().await?;
        line.clear();
    }
}

/// The top-level `"id"` of a JSON-RPC message, read from a prefix of its text; `None`
/// when the prefix does not reach it (or it is not a string or a number).
pub fn request_id(prefix: &[u8]) -> Option<Value> {
    let mut scan = Scan {
        text: prefix,
        at: 0,
    };
    scan.space();
    scan.eat(b'{')?;
    loop {
        scan.space();
        let key_start = scan.at;
        scan.string()?;
        let key = &prefix[key_start..scan.at];
        scan.space();
        scan.eat(b':')?;
        scan.space();
        let value_start = scan.at;
        scan.value()?;
        if key == b"\"id\"" {
            let id: Value = serde_json::from_slice(&prefix[value_start..scan.at]).ok()?;
            return (id.is_string() || id.is_number()).then_some(id);
        }
        scan.space();
        match scan.next()? {
            b',' => continue,
            _ => return None,
        }
    }
}

/// A forward-only JSON skimmer over a possibly truncated text.
struct Scan<'a> {
    text: &'a [u8],
    at: usize,
}

impl Scan<'_> {
    fn next(&mut self) -> Option<u8> {
        let byte = *self.text.get(self.at)?;
        self.at += 1;
        Some(byte)
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn eat(&mut self, expected: u8) -> Option<()> {
        (self.next()? == expected).then_some(())
    }

    fn space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.at += 1;
        }
    }

    fn string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            match self.next()? {
                b'\\' => {
                    self.next()?;
                }
                b'"' => return Some(()),
                _ => {}
            }
        }
    }

    fn value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string(),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => self.string()?,
                        b'{' | b'[' => {
                            depth += 1;
                            self.at += 1;
                        }
                        b'}' | b']' => {
                            depth -= 1;
                            self.at += 1;
                            if depth == 0 {
                                return Some(());
                            }
                        }
                        _ => self.at += 1,
                    }
                }
            }
            _ => {
                // A number or a literal ends at a delimiter; running out of text first
                // means it may be cut short.
                loop {
                    match self.peek()? {
                        b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n' => return Some(()),
                        _ => self.at += 1,
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_found_wherever_they_are_at_the_top_level() {
        let cases: &[(&str, Option<Value>)] = &[
            (r#"{"jsonrpc":"2.0","id":7,"method":"x"}"#, Some(json!(7))),
            (
                r#"{"method":"x","params":{"id":1,"a":[1,{"id":2}]},"id":"r-9"}"#,
                Some(json!("r-9")),
            ),
            (r#" { "id" : 12 , "method": "x" } "#, Some(json!(12))),
            (r#"{"method":"notifications/x","params":{"id":3}}"#, None),
            (r#"{"params":{"pad":"xxxxxxxx"#, None),
            (r#"{"id":12"#, None),
            (r#"{"id":null,"method":"x"}"#, None),
            (r#"{"p":"a \"quoted\" id","id":5}"#, Some(json!(5))),
            ("not json", None),
        ];
        for (text, expected) in cases {
            assert_eq!(&request_id(text.as_bytes()), expected, "{text}");
        }
    }

    async fn filtered(input: Vec<u8>, bytes_max: usize) -> Vec<String> {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let (out_writer, mut out_reader) = tokio::io::duplex(1 << 16);
        let filter = tokio::spawn(bound_lines(server, out_writer, bytes_max, None));
        let feed = tokio::spawn(async move {
            client.write_all(&input).await.expect("write");
            client.shutdown().await.expect("shutdown");
        });
        let mut out = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut out_reader, &mut out)
            .await
            .expect("read");
        feed.await.expect("feed");
        filter.await.expect("join").expect("filter");
        String::from_utf8(out)
            .expect("utf8")
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[tokio::test]
    async fn small_lines_pass_and_large_ones_become_refusals() {
        let big = format!(
            r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"pad":"{}"}}}}"#,
            "x".repeat(5_000)
        );
        let anonymous = format!(
            r#"{{"jsonrpc":"2.0","method":"n","params":{{"pad":"{}"}}}}"#,
            "y".repeat(5_000)
        );
        let input = format!(
            "{}\n{big}\n{anonymous}\n{}\n{{\"unterminated\"",
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#
        );
        let lines = filtered(input.into_bytes(), 1_000).await;
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(lines[0], r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
        let refusal: Value = serde_json::from_str(&lines[1]).expect("json");
        assert_eq!(refusal["id"], 2);
        assert_eq!(refusal["method"], OVERSIZED_METHOD);
        assert!(
            refusal["params"]["bytes"]
                .as_u64()
                .is_some_and(|b| b > 1_000)
        );
        assert_eq!(lines[2], r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#);
    }

    #[tokio::test]
    async fn a_line_exactly_at_the_bound_passes() {
        let line = format!("\"{}\"", "z".repeat(98));
        let lines = filtered(format!("{line}\n{line}z\n").into_bytes(), 100).await;
        assert_eq!(lines, vec![line]);
    }

    #[tokio::test]
    async fn a_line_that_is_not_json_is_answered_with_a_parse_error_between_whole_lines() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let (to_rmcp, mut rmcp_in) = tokio::io::duplex(1 << 16);
        let (answers_tx, answers_rx) = tokio::sync::mpsc::channel(4);
        let filter = tokio::spawn(bound_lines(server, to_rmcp, 1_000, Some(answers_tx)));
        client
            .write_all(b"{not json\n\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
            .await
            .expect("write");
        client.shutdown().await.expect("shutdown");
        let mut passed = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut rmcp_in, &mut passed)
            .await
            .expect("read");
        filter.await.expect("join").expect("filter");
        assert_eq!(
            passed,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n"
        );

        // rmcp's output, cut in the middle of a line, with the parse error waiting.
        let (mut rmcp_side, lines) = tokio::io::duplex(1 << 16);
        let (out, mut stdout) = tokio::io::duplex(1 << 16);
        let merger = tokio::spawn(merge_lines(lines, answers_rx, out));
        rmcp_side
            .write_all(b"{\"jsonrpc\":\"2.0\",")
            .await
            .expect("half");
        tokio::task::yield_now().await;
        rmcp_side
            .write_all(b"\"id\":1,\"result\":{}}\n")
            .await
            .expect("rest");
        rmcp_side.shutdown().await.expect("shutdown");
        let mut written = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut stdout, &mut written)
            .await
            .expect("read");
        merger.await.expect("join").expect("merge");
        let lines: Vec<Value> = written
            .lines()
            .map(|l| serde_json::from_str(l).expect("every line whole JSON"))
            .collect();
        assert_eq!(lines.len(), 2, "{written}");
        let error = lines
            .iter()
            .find(|l| l["error"].is_object())
            .expect("parse error");
        assert_eq!(error["error"]["code"], -32700);
        assert_eq!(error["id"], Value::Null);
        assert!(
            lines
                .iter()
                .any(|l| l["id"] == 1 && l["result"].is_object())
        );
    }
}
