//! Running the `thelma` binary from the end-to-end tests.

use std::path::Path;
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

/// Runs `thelma run --config case --backend cpu -o out`: (exit code, stdout, stderr).
#[allow(dead_code)] // not every test file runs a case
pub fn run_on_cpu(case: &Path, out: &Path) -> (i32, String, String) {
    thelma(&[
        "run",
        "--config",
        case.to_str().unwrap(),
        "--backend",
        "cpu",
        "-o",
        out.to_str().unwrap(),
    ])
}
