//! The control socket server: `DIR/palm.sock`, newline-delimited JSON.
//!
//! Bounded on every axis a client could abuse: connections (a semaphore), line length
//! ([`REQUEST_BYTES_MAX`]), requests in flight per connection (one: answers come back
//! in order), and time: a connection that sends no whole request for
//! [`CONNECTION_IDLE_MS`] is closed, so idle or trickling clients cannot hold the
//! connection slots. A malformed line gets an error response, never a crash.

use super::dispatch;
use super::protocol::{ErrorBody, REQUEST_BYTES_MAX, Request, Response};
use crate::genome::Genome;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

/// Concurrent connections served.
pub const CONNECTIONS_MAX: usize = 256;

/// A connection that sends no whole request line for this long is closed (ms). The
/// clients (CLI, MCP) connect per call; a request being answered (a long `wait`) is not
/// idle.
pub const CONNECTION_IDLE_MS: u64 = 5 * 60 * 1000;

/// Unix socket paths are limited (108 bytes on Linux, including the terminator).
pub const SOCKET_PATH_MAX: usize = 107;

/// The socket path of a data directory.
pub fn socket_path(data: &std::path::Path) -> PathBuf {
    data.join("palm.sock")
}

/// The control server (behaviour).
pub struct ControlServer;

/// Its state: the accept loop.
pub struct ControlState {
    task: tokio::task::JoinHandle<()>,
    path: PathBuf,
}

impl Actor for ControlServer {
    type Msg = ();
    type State = ControlState;
    type Arguments = Arc<Genome>;

    async fn pre_start(
        &self,
        _myself: ActorRef<()>,
        genome: Arc<Genome>,
    ) -> Result<ControlState, ActorProcessingErr> {
        let path = socket_path(&genome.info.data);
        if path.as_os_str().len() > SOCKET_PATH_MAX {
            return Err(format!(
                "socket path {} is longer than {SOCKET_PATH_MAX} bytes; use a shorter --data directory",
                path.display()
            )
            .into());
        }
        // The node holds the data directory's lock, so a socket file left here belongs
        // to a node that died: it is safe to replace.
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)
            .map_err(|err| format!("cannot listen on {}: {err}", path.display()))?;
        // Whoever can connect can run commands as this node: owner only.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|err| format!("cannot restrict {}: {err}", path.display()))?;
        info!(socket = %path.display(), "control socket ready");
        let task = tokio::spawn(accept_loop(listener, genome));
        Ok(ControlState { task, path })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<()>,
        state: &mut ControlState,
    ) -> Result<(), ActorProcessingErr> {
        state.task.abort();
        let _ = std::fs::remove_file(&state.path);
        Ok(())
    }
}

async fn accept_loop(listener: UnixListener, genome: Arc<Genome>) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                warn!(%err, "control socket accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            // Over the bound: answer once and close, rather than queue without limit.
            tokio::spawn(refuse(stream));
            continue;
        };
        let genome = Arc::clone(&genome);
        tokio::spawn(async move {
            serve(stream, genome).await;
            drop(permit);
        });
    }
}

async fn refuse(mut stream: UnixStream) {
    let response = Response::err(ErrorBody::failure(
        "busy",
        "too many connections; try again",
    ));
    if let Ok(mut line) = serde_json::to_vec(&response) {
        line.push(b'\n');
        let _ = stream.write_all(&line).await;
    }
}

async fn serve(stream: UnixStream, genome: Arc<Genome>) {
    let (reader, mut writer) = stream.into_split();
    let mut reader = BufReader::new(reader);
    let mut line = Vec::new();
    loop {
        line.clear();
        let response = match read_request(&mut reader, &mut line).await {
            Ok(0) => return,
            Err(err) => {
                debug!(%err, "control connection closed");
                return;
            }
            Ok(_) if line.len() > REQUEST_BYTES_MAX => {
                let response = Response::err(ErrorBody::invalid(
                    "too_large",
                    format!("request larger than {REQUEST_BYTES_MAX} bytes"),
                ));
                let _ = write(&mut writer, &response).await;
                return;
            }
            Ok(_) => match serde_json::from_slice::<Request>(&line) {
                Ok(request) => dispatch(&genome, request).await,
                Err(err) => Response::err(ErrorBody::invalid(
                    "bad_request",
                    format!("cannot parse request: {err}"),
                )),
            },
        };
        if write(&mut writer, &response).await.is_err() {
            return;
        }
    }
}

/// Reads one request line (at most one byte past the bound, so an oversized line is
/// seen), giving up after [`CONNECTION_IDLE_MS`].
async fn read_request<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
) -> std::io::Result<usize> {
    let limit = REQUEST_BYTES_MAX as u64 + 1;
    let idle = std::time::Duration::from_millis(CONNECTION_IDLE_MS);
    match tokio::time::timeout(idle, reader.take(limit).read_until(b'\n', line)).await {
        Ok(read) => read,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no whole request within {CONNECTION_IDLE_MS} ms"),
        )),
    }
}

async fn write(
    writer: &mut tokio::net::unix::OwnedWriteHalf,
    response: &Response,
) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(response).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    writer.write_all(&bytes).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_idle_or_trickling_connection_is_closed() {
        let (client, server) = UnixStream::pair().expect("pair");
        let mut reader = BufReader::new(server);
        let mut line = Vec::new();
        // Half a request, then nothing: the read gives up when the idle bound passes.
        let (_read, mut write) = client.into_split();
        write.write_all(b"{\"op\": \"pi").await.expect("write");
        let started = tokio::time::Instant::now();
        let err = read_request(&mut reader, &mut line).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed().as_millis() as u64, CONNECTION_IDLE_MS);
    }

    #[tokio::test(start_paused = true)]
    async fn a_whole_request_is_read_before_the_bound() {
        let (client, server) = UnixStream::pair().expect("pair");
        let mut reader = BufReader::new(server);
        let mut line = Vec::new();
        let (_read, mut write) = client.into_split();
        write
            .write_all(b"{\"op\": \"ping\"}\n")
            .await
            .expect("write");
        let read = read_request(&mut reader, &mut line).await.expect("read");
        assert_eq!(read, line.len());
        assert_eq!(line, b"{\"op\": \"ping\"}\n");
    }
}
