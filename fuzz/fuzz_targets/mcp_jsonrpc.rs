//! cargo-fuzz target `mcp_jsonrpc`: see the body in tests/support/fuzz/mcp.rs.

#![no_main]

#[path = "../../tests/support/fuzz/mcp.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::run(data));
