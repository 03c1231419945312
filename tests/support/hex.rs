//! Hex text for golden files (the store dump, the wire frames): bytes to lowercase hex
//! and back. Included by path from the crates' golden tests.

use std::fmt::Write as _;

/// `bytes` as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// The bytes of hex `text` (panics on anything else: golden files are ours).
pub fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}
