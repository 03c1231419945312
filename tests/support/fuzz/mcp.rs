//! Fuzz body: MCP JSON-RPC as `palm mcp` meets it. The bytes go to the id scanner that
//! answers oversized lines, then to the SDK's message parser; a `tools/call` that parses
//! has its arguments checked against the tool's JSON Schema, as the server does before
//! anything reaches the node. Never a panic.
//! Shared by `fuzz/fuzz_targets/mcp_jsonrpc.rs` and `mcp/tests/fuzz_props.rs`.

use serde_json::Value;

pub fn run(data: &[u8]) {
    let _ = palm_mcp::stdio::request_id(data);
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let _ = serde_json::from_value::<rmcp::model::ClientJsonRpcMessage>(value.clone());
    if value["method"] == "tools/call" {
        let name = value["params"]["name"].as_str().unwrap_or_default();
        if let Some(spec) = palm_mcp::tools::spec(name) {
            let arguments = value["params"]["arguments"].as_object();
            if let Err(err) = spec.check(arguments) {
                assert!(!err.text().is_empty(), "a refusal says why");
            }
        }
    }
    let _ = palm_mcp::tools::status_line(&value);
}
