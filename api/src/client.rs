//! A client of a node's control socket.

use crate::protocol::{Request, Response};
use std::path::Path;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// How long a client waits for room in a busy node's accept queue.
const CONNECT_BUSY_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// A connection to a node.
pub struct Client {
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: tokio::net::unix::OwnedWriteHalf,
}

impl Client {
    /// Connects to the node serving `socket`, or `None` if none answers there.
    pub async fn connect(socket: &Path) -> Option<Client> {
        let busy_until = std::time::Instant::now() + CONNECT_BUSY_MAX;
        let stream = loop {
            match UnixStream::connect(socket).await {
                Ok(stream) => break stream,
                // A full accept queue: a node is there, busy with a burst of clients.
                // Not "no node": that would send the caller to start one of its own.
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        && std::time::Instant::now() < busy_until =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
                Err(_) => return None,
            }
        };
        let (reader, writer) = stream.into_split();
        Some(Client {
            reader: BufReader::new(reader),
            writer,
        })
    }

    /// Sends one request and reads its response.
    pub async fn call(&mut self, request: &Request) -> std::io::Result<Response> {
        let mut line = serde_json::to_vec(request).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.writer.write_all(&line).await?;
        let mut answer = String::new();
        let read = self.reader.read_line(&mut answer).await?;
        if read == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the node closed the connection",
            ));
        }
        serde_json::from_str(&answer).map_err(std::io::Error::other)
    }
}
