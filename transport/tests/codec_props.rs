//! Property tests of the frame codec: any bytes in give frames or an error, never a
//! panic and never more memory than the bytes that arrived; every frame round-trips,
//! however the stream is split.

use palm_transport::codec::{FrameDecoder, HEADER_LEN, encode_into};
use palm_transport::{Frame, Hello, Role};
use proptest::prelude::*;

const FRAME_LEN_MAX: usize = 4096;

fn role() -> impl Strategy<Value = Role> {
    prop_oneof![Just(Role::Root), Just(Role::Realm), Just(Role::Edge)]
}

fn frame() -> impl Strategy<Value = Frame<Vec<u8>>> {
    let body = proptest::collection::vec(any::<u8>(), 0..300);
    prop_oneof![
        ("[a-z0-9-]{0,20}", role(), "[a-z2-7]{0,16}").prop_map(|(name, role, node_id)| {
            Frame::Hello(Hello {
                name,
                role,
                node_id,
                software: "0.1.0".into(),
            })
        }),
        (any::<u64>(), body.clone()).prop_map(|(id, body)| Frame::Request { id, body }),
        (any::<u64>(), body.clone()).prop_map(|(id, body)| Frame::Response { id, body }),
        (any::<u64>(), ".{0,40}").prop_map(|(id, reason)| Frame::Failed { id, reason }),
        body.prop_map(Frame::Message),
        any::<u64>().prop_map(Frame::Ping),
        any::<u64>().prop_map(Frame::Pong),
        ".{0,40}".prop_map(Frame::Goodbye),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_bytes_give_frames_or_an_error(
        bytes in proptest::collection::vec(any::<u8>(), 0..2048),
        chunk in 1usize..64,
    ) {
        let mut decoder = FrameDecoder::new(FRAME_LEN_MAX);
        'feed: for piece in bytes.chunks(chunk) {
            decoder.extend(piece);
            loop {
                match decoder.next_frame::<Vec<u8>>() {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => break 'feed,
                }
            }
            // At most one partial frame plus one chunk is ever held.
            prop_assert!(decoder.buffered() <= FRAME_LEN_MAX + HEADER_LEN + chunk);
        }
    }

    #[test]
    fn frames_round_trip(frames in proptest::collection::vec(frame(), 0..20), chunk in 1usize..200) {
        let mut bytes = Vec::new();
        for frame in &frames {
            encode_into(&mut bytes, frame, FRAME_LEN_MAX).expect("small frames encode");
        }
        let mut decoder = FrameDecoder::new(FRAME_LEN_MAX);
        let mut out = Vec::new();
        for piece in bytes.chunks(chunk) {
            decoder.extend(piece);
            while let Some(frame) = decoder.next_frame::<Vec<u8>>().expect("valid stream") {
                out.push(frame);
            }
        }
        prop_assert_eq!(out, frames);
        prop_assert_eq!(decoder.buffered(), 0);
    }

    #[test]
    fn a_corrupted_stream_never_panics(
        frames in proptest::collection::vec(frame(), 1..8),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
    ) {
        let mut bytes = Vec::new();
        for frame in &frames {
            encode_into(&mut bytes, frame, FRAME_LEN_MAX).expect("encode");
        }
        for (at, value) in flips {
            let index = at % bytes.len();
            bytes[index] ^= value;
        }
        let mut decoder = FrameDecoder::new(FRAME_LEN_MAX);
        decoder.extend(&bytes);
        while let Ok(Some(_)) = decoder.next_frame::<Vec<u8>>() {}
    }
}
