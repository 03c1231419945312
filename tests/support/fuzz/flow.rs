//! Fuzz body: the flow parser. The first byte picks the dialect (even: YAML, odd: JSON);
//! the rest is the flow text. Any text gives a definition or diagnostics — never a panic,
//! and never an unbounded amount of memory (aliases and nesting are bounded).
//! Shared by `fuzz/fuzz_targets/flow_parse.rs` and the bounded property test in
//! `actors/tests/fuzz_props.rs`.

pub fn run(data: &[u8]) {
    let Some((&dialect, text)) = data.split_first() else {
        return;
    };
    let origin = if dialect % 2 == 0 {
        "fuzz.yaml"
    } else {
        "fuzz.json"
    };
    let text = String::from_utf8_lossy(text);
    match palm_actors::definition::parse(&text, origin) {
        Ok(definition) => {
            // A definition that parsed must also survive its own consumers' checks.
            let _ = format!("{definition:?}");
        }
        Err(diagnostics) => {
            assert!(!diagnostics.is_empty(), "a refusal says why");
            for diagnostic in diagnostics {
                let _ = diagnostic.to_string();
            }
        }
    }
}
