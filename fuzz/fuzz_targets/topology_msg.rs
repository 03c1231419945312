//! cargo-fuzz target `topology_msg`: see the body in tests/support/fuzz/topo.rs.

#![no_main]

#[path = "../../tests/support/fuzz/topo.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::run(data));
