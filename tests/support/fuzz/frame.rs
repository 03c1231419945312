//! Fuzz body: the frame codec carrying the tree's own messages. The first byte picks a
//! chunk size; the rest is fed to a `FrameDecoder` in chunks of that size. Every frame
//! that decodes must re-encode and decode to itself; every error is a `CodecError`, never
//! a panic; the decoder never holds more than a frame plus a chunk.
//! Shared by `fuzz/fuzz_targets/frame_codec.rs` and `topology/tests/fuzz_props.rs`.

use palm_topology::TopoMsg;
use palm_transport::Frame;
use palm_transport::codec::{FrameDecoder, decode_body, encode};

const FRAME_LEN_MAX: usize = 64 << 10;

pub fn run(data: &[u8]) {
    let Some((&chunk, bytes)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk).max(1);
    let mut decoder = FrameDecoder::new(FRAME_LEN_MAX);
    for piece in bytes.chunks(chunk) {
        decoder.extend(piece);
        assert!(decoder.buffered() <= FRAME_LEN_MAX + 4 + chunk);
        loop {
            match decoder.next_frame::<TopoMsg>() {
                Ok(Some(frame)) => round_trip(&frame),
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
}

fn round_trip(frame: &Frame<TopoMsg>) {
    let Ok(bytes) = encode(frame, FRAME_LEN_MAX) else {
        // A frame can decode yet not re-encode within the bound only if it grew, which
        // postcard never does; an encode error is still not a panic.
        return;
    };
    let again: Frame<TopoMsg> = decode_body(&bytes[4..]).expect("an encoded frame decodes");
    assert_eq!(&again, frame, "a frame round-trips");
}
