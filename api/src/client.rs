//! A client of a node's control socket.

use crate::protocol::{Request, Response};
use std::path::Path;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// A connection to a node.
pub struct Client {
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: tokio::net::unix::OwnedWriteHalf,
}

impl Client {
    /// Connects to the node serving `socket`, or `None` if none answers there.
    pub async fn connect(socket: &Path) -> Option<Client> {
        let stream = UnixStream::connect(socket).await.ok()?;
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
