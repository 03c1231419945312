//! cargo-fuzz target `flow_parse`: see the body in tests/support/fuzz/flow.rs.

#![no_main]

#[path = "../../tests/support/fuzz/flow.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::run(data));
