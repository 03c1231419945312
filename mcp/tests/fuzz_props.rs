//! The MCP JSON-RPC fuzz target, bounded, in the normal suite (body shared with
//! `fuzz/`): raw bytes, and `tools/call` messages naming real tools with random
//! arguments, which reach the tools' JSON Schema checks.

#[path = "../../tests/support/fuzz/mcp.rs"]
mod mcp;

use proptest::prelude::*;
use serde_json::{Value, json};

fn argument() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "[a-z0-9_\\-]{0,16}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn tool_call() -> impl Strategy<Value = Vec<u8>> {
    let names: Vec<&'static str> = palm_mcp::tools::specs().iter().map(|s| s.name).collect();
    let fields = [
        "job", "key", "input", "flow", "status", "limit", "reason", "wait", "goal",
    ];
    (
        proptest::sample::select(names),
        proptest::collection::btree_map(
            proptest::sample::select(fields.to_vec()),
            argument(),
            0..5,
        ),
        any::<u32>(),
    )
        .prop_map(|(name, arguments, id)| {
            serde_json::to_vec(&json!({
                "jsonrpc": "2.0",
                "id": id,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            }))
            .expect("json")
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_bytes_are_read_or_refused(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        mcp::run(&data);
    }

    #[test]
    fn tool_calls_with_any_arguments_are_checked(data in tool_call()) {
        mcp::run(&data);
    }
}
