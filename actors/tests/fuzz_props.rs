//! The flow-parser fuzz target (`fuzz/fuzz_targets/flow_parse.rs`), bounded, in the
//! normal suite: random bytes, and the examples with random edits (a byte replaced,
//! inserted or removed), in both dialects. The body is shared with the fuzz target.

#[path = "../../tests/support/fuzz/flow.rs"]
mod flow;

use proptest::prelude::*;

const SEEDS: [&str; 6] = [
    include_str!("../../examples/hello.yaml"),
    include_str!("../../examples/approval.yaml"),
    include_str!("../../examples/fanout.yaml"),
    include_str!("../../examples/flaky.yaml"),
    include_str!("../../examples/race.yaml"),
    r#"{"name": "j", "tree": {"sequence": [{"run": "echo a"}, {"set": {"x": "{{ input.y }}"}}]}}"#,
];

/// One edit: (position, byte, kind: 0 replace, 1 insert, 2 remove).
fn edit(text: &mut Vec<u8>, (at, byte, kind): (u16, u8, u8)) {
    if text.is_empty() {
        text.push(byte);
        return;
    }
    let at = usize::from(at) % text.len();
    match kind {
        0 => text[at] = byte,
        1 => text.insert(at, byte),
        _ => {
            text.remove(at);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_bytes_parse_or_are_refused(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        flow::run(&data);
    }

    #[test]
    fn edited_examples_parse_or_are_refused(
        seed in 0..SEEDS.len(),
        json in any::<bool>(),
        edits in proptest::collection::vec((any::<u16>(), any::<u8>(), 0u8..3), 0..12),
    ) {
        let mut data = vec![u8::from(json || seed == SEEDS.len() - 1)];
        let mut text = SEEDS[seed].as_bytes().to_vec();
        for one in edits {
            edit(&mut text, one);
        }
        data.extend(text);
        flow::run(&data);
    }
}
