//! The frame codec: `[len: u32 BE][version: u8][postcard(Frame<T>)]`.
//!
//! `len` counts the version byte and the body. It is checked against `frame_len_max` as
//! soon as its four bytes arrive, before anything is allocated for the body: the decoder
//! never reserves memory on a peer's say-so, it only holds bytes that really arrived (at
//! most one partial frame plus one read chunk). An unknown version, a malformed body or an
//! oversized length is a [`CodecError`]; the link closes on it with the error as reason.
//!
//! The codec knows the envelope ([`Frame`]), not the business: `T` is any serde type.

use crate::pki::Role;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The envelope version this build speaks. A frame with another version closes the link.
pub const FRAME_VERSION: u8 = 1;

/// Bytes of the length prefix.
pub const HEADER_LEN: usize = 4;

/// Consumed bytes kept at the front of the decoder's buffer before it compacts.
const COMPACT_BYTES_MIN: usize = 64 << 10;

/// Who a peer says it is, exchanged first on every link (its certificate says it too; the
/// receiver checks that both agree).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Node name.
    pub name: String,
    /// Node role.
    pub role: Role,
    /// Node id (short base32 of the certificate's public key hash).
    pub node_id: String,
    /// The sender's software version, for logs.
    pub software: String,
}

/// One frame on a link. `T` is the business message type (the topology protocol).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Frame<T> {
    /// The first frame each side sends.
    Hello(Hello),
    /// A request; answered by a `Response` or `Failed` with the same id.
    Request {
        /// Chosen by the requester, unique among its requests in flight.
        id: u64,
        /// The request.
        body: T,
    },
    /// The answer to request `id`.
    Response {
        /// The request's id.
        id: u64,
        /// The answer.
        body: T,
    },
    /// Request `id` will not be answered (the handler dropped it).
    Failed {
        /// The request's id.
        id: u64,
        /// Why.
        reason: String,
    },
    /// A one-way message.
    Message(T),
    /// Liveness probe; answered by `Pong` with the same nonce.
    Ping(u64),
    /// Answer to `Ping`.
    Pong(u64),
    /// The sender closes the link, and says why.
    Goodbye(String),
}

/// Why bytes are not a frame. Each closes the link that sent them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The length prefix exceeds `frame_len_max`.
    #[error("frame of {len} bytes exceeds frame_len_max {max}")]
    Oversized {
        /// Declared length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// A zero-length frame (no version byte).
    #[error("empty frame")]
    Empty,
    /// The envelope version is not one this build speaks.
    #[error("unknown frame version {0} (this build speaks {FRAME_VERSION})")]
    UnknownVersion(u8),
    /// The body does not decode as a frame.
    #[error("malformed frame: {0}")]
    Malformed(String),
    /// A frame to send does not encode (or is larger than `frame_len_max`).
    #[error("cannot encode frame: {0}")]
    Encode(String),
}

/// Appends one encoded frame to `out`. On error `out` is left as it was.
pub fn encode_into<T: Serialize>(
    out: &mut Vec<u8>,
    frame: &Frame<T>,
    frame_len_max: usize,
) -> Result<(), CodecError> {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_LEN]);
    out.push(FRAME_VERSION);
    if let Err(err) = postcard::to_io(frame, &mut *out) {
        out.truncate(start);
        return Err(CodecError::Encode(err.to_string()));
    }
    let len = out.len() - start - HEADER_LEN;
    if len > frame_len_max {
        out.truncate(start);
        return Err(CodecError::Encode(format!(
            "frame of {len} bytes exceeds frame_len_max {frame_len_max}"
        )));
    }
    let prefix = u32::try_from(len)
        .map_err(|_| CodecError::Encode(format!("frame of {len} bytes does not fit u32")))?;
    out[start..start + HEADER_LEN].copy_from_slice(&prefix.to_be_bytes());
    Ok(())
}

/// Encodes one frame into a fresh buffer.
pub fn encode<T: Serialize>(frame: &Frame<T>, frame_len_max: usize) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    encode_into(&mut out, frame, frame_len_max)?;
    Ok(out)
}

/// Decodes one frame body (version byte and postcard), as carried after a length prefix.
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<Frame<T>, CodecError> {
    let (&version, rest) = body.split_first().ok_or(CodecError::Empty)?;
    if version != FRAME_VERSION {
        return Err(CodecError::UnknownVersion(version));
    }
    match postcard::take_from_bytes::<Frame<T>>(rest) {
        Ok((frame, [])) => Ok(frame),
        Ok((_, trailing)) => Err(CodecError::Malformed(format!(
            "{} trailing bytes after the frame",
            trailing.len()
        ))),
        Err(err) => Err(CodecError::Malformed(err.to_string())),
    }
}

/// Incremental decoder: feed it the bytes that arrive, take the frames out.
///
/// Feed with [`FrameDecoder::extend`] only after [`FrameDecoder::next_frame`] returned
/// `Ok(None)`, so the buffer holds at most one partial frame plus one chunk.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    start: usize,
    frame_len_max: usize,
}

impl FrameDecoder {
    /// A decoder refusing frames longer than `frame_len_max`.
    pub fn new(frame_len_max: usize) -> FrameDecoder {
        FrameDecoder {
            buf: Vec::new(),
            start: 0,
            frame_len_max,
        }
    }

    /// Adds received bytes.
    pub fn extend(&mut self, bytes: &[u8]) {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start >= COMPACT_BYTES_MIN {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held (received, not yet returned as frames).
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Capacity of the internal buffer (for tests of the allocation bound).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// The next complete frame, `Ok(None)` if more bytes are needed, or why the stream is
    /// not a frame stream. After an error the decoder is useless: close the link.
    pub fn next_frame<T: DeserializeOwned>(&mut self) -> Result<Option<Frame<T>>, CodecError> {
        let available = &self.buf[self.start..];
        let Some(header) = available.get(..HEADER_LEN) else {
            return Ok(None);
        };
        let mut prefix = [0u8; HEADER_LEN];
        prefix.copy_from_slice(header);
        let len = u32::from_be_bytes(prefix) as usize;
        if len > self.frame_len_max {
            return Err(CodecError::Oversized {
                len,
                max: self.frame_len_max,
            });
        }
        if len == 0 {
            return Err(CodecError::Empty);
        }
        let Some(body) = available.get(HEADER_LEN..HEADER_LEN + len) else {
            return Ok(None);
        };
        let frame = decode_body(body)?;
        self.start += HEADER_LEN + len;
        Ok(Some(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> Hello {
        Hello {
            name: "edge-1".into(),
            role: Role::Edge,
            node_id: "abc".into(),
            software: "0.1.0".into(),
        }
    }

    #[test]
    fn frames_round_trip_split_anywhere() {
        let frames: Vec<Frame<String>> = vec![
            Frame::Hello(hello()),
            Frame::Request {
                id: 7,
                body: "x".repeat(300),
            },
            Frame::Response {
                id: 7,
                body: String::new(),
            },
            Frame::Failed {
                id: u64::MAX,
                reason: "gone".into(),
            },
            Frame::Message("m".into()),
            Frame::Ping(1),
            Frame::Pong(1),
            Frame::Goodbye("bye".into()),
        ];
        let mut bytes = Vec::new();
        for frame in &frames {
            encode_into(&mut bytes, frame, 1 << 20).expect("encode");
        }
        for split in [1, 3, 5, 17, bytes.len()] {
            let mut decoder = FrameDecoder::new(1 << 20);
            let mut out = Vec::new();
            for chunk in bytes.chunks(split) {
                decoder.extend(chunk);
                while let Some(frame) = decoder.next_frame::<String>().expect("decode") {
                    out.push(frame);
                }
            }
            assert_eq!(out, frames, "split {split}");
            assert_eq!(decoder.buffered(), 0);
        }
    }

    #[test]
    fn oversized_is_refused_from_the_header_alone() {
        let mut decoder = FrameDecoder::new(1024);
        decoder.extend(&u32::MAX.to_be_bytes());
        assert_eq!(
            decoder.next_frame::<String>(),
            Err(CodecError::Oversized {
                len: u32::MAX as usize,
                max: 1024
            })
        );
        assert!(decoder.capacity() < 1024, "nothing reserved for the body");
    }

    #[test]
    fn unknown_version_empty_and_garbage_are_errors() {
        let mut decoder = FrameDecoder::new(1024);
        decoder.extend(&[0, 0, 0, 2, 9, 0]);
        assert_eq!(
            decoder.next_frame::<String>(),
            Err(CodecError::UnknownVersion(9))
        );
        let mut decoder = FrameDecoder::new(1024);
        decoder.extend(&[0, 0, 0, 0]);
        assert_eq!(decoder.next_frame::<String>(), Err(CodecError::Empty));
        let mut decoder = FrameDecoder::new(1024);
        decoder.extend(&[0, 0, 0, 3, FRAME_VERSION, 200, 200]);
        assert!(matches!(
            decoder.next_frame::<String>(),
            Err(CodecError::Malformed(_))
        ));
        let mut with_trailing = encode(&Frame::<String>::Ping(3), 1024).expect("encode");
        with_trailing.push(0);
        let len = (with_trailing.len() - HEADER_LEN) as u32;
        with_trailing[..HEADER_LEN].copy_from_slice(&len.to_be_bytes());
        let mut decoder = FrameDecoder::new(1024);
        decoder.extend(&with_trailing);
        assert!(matches!(
            decoder.next_frame::<String>(),
            Err(CodecError::Malformed(m)) if m.contains("trailing")
        ));
    }

    #[test]
    fn encoding_refuses_frames_over_the_bound() {
        let mut out = vec![1, 2, 3];
        let big = Frame::Message("y".repeat(2000));
        assert!(matches!(
            encode_into(&mut out, &big, 1000),
            Err(CodecError::Encode(_))
        ));
        assert_eq!(out, vec![1, 2, 3], "left as it was");
    }
}
