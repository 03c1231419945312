//! cargo-fuzz target `control_request`: see the body in tests/support/fuzz/control.rs.

#![no_main]

#[path = "../../tests/support/fuzz/control.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::run(data));
