//! Three fuzz targets, bounded, in the normal suite (bodies shared with `fuzz/`): the
//! frame codec carrying topology messages, every topology message into a hop core from
//! either side, and the control protocol answered by an offline desk.

#[path = "../../tests/support/fuzz/control.rs"]
mod control;
#[path = "../../tests/support/fuzz/frame.rs"]
mod frame;
#[path = "../../tests/support/fuzz/topo.rs"]
mod topo;

use proptest::prelude::*;
use serde_json::{Value, json};

const OPS: [&str; 25] = [
    "ping",
    "submit",
    "continue",
    "cancel",
    "retry",
    "status",
    "jobs",
    "inspect",
    "wait",
    "flows_add",
    "flows_list",
    "flows_show",
    "vitality",
    "places",
    "places_add",
    "places_remove",
    "places_restart",
    "places_events",
    "emit",
    "interests",
    "tree",
    "kv",
    "token_create",
    "token_revoke",
    "explode",
];

const FIELDS: [&str; 14] = [
    "job", "key", "input", "flow", "source", "origin", "name", "revision", "status", "limit",
    "action", "value", "event", "data",
];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-z0-9 _{}:\\-]{0,24}".prop_map(Value::from),
        Just(Value::from(include_str!("../../examples/approval.yaml"))),
        Just(Value::from("name: f\ntree:\n  run: \"true\"\n")),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map(
                proptest::sample::select(FIELDS.to_vec()).prop_map(str::to_owned),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A control line: an op and a few of the protocol's field names with random values
/// (so many lines parse and reach the desk), or raw bytes.
fn line() -> impl Strategy<Value = Vec<u8>> {
    let request = (
        proptest::sample::select(OPS.to_vec()),
        proptest::collection::btree_map(proptest::sample::select(FIELDS.to_vec()), value(), 0..5),
    )
        .prop_map(|(op, fields)| {
            let mut object = json!({"op": op});
            for (name, value) in fields {
                object[name] = value;
            }
            serde_json::to_vec(&object).expect("json")
        });
    prop_oneof![
        4 => request,
        1 => proptest::collection::vec(any::<u8>(), 0..80),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn any_bytes_through_the_frame_codec(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        frame::run(&data);
    }

    #[test]
    fn any_messages_into_a_hop_core(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        topo::run(&data);
    }

    #[test]
    fn any_control_lines_into_a_desk(lines in proptest::collection::vec(line(), 1..12)) {
        control::run(&lines.join(&b'\n'));
    }
}
