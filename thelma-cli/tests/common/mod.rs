//! Running the `thelma` binary from the end-to-end tests.

use std::process::Command;

/// Runs `thelma` with `args`: (exit code, stdout, stderr).
pub fn thelma(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_thelma"))
        .args(args)
        .output()
        .expect("thelma runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}
