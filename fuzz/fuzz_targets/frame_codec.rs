//! cargo-fuzz target `frame_codec`: see the body in tests/support/fuzz/frame.rs.

#![no_main]

#[path = "../../tests/support/fuzz/frame.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::run(data));
