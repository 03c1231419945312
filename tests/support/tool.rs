//! A test that needs an outside tool (py_trees, the MCP Python SDK, universal-ctags)
//! says so when it is missing: on a developer's machine it is skipped with a message;
//! under CI (`CI` set to anything but empty, `0` or `false`) it fails, so a CI run
//! can never pass by checking less than it claims. Included by path from each crate's
//! tests (`#[path = "../../tests/support/tool.rs"] mod tool;`).

/// Whether this run is CI's.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

/// `what` is missing (`how` says how to get it): panics under CI, else prints that the
/// test is skipped. The caller returns after it.
pub fn missing(what: &str, how: &str) {
    if under_ci() {
        panic!("{what} is missing, and CI must not skip this test ({how})");
    }
    eprintln!("SKIPPED: {what} is missing ({how})");
}
