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

/// The files of output folder `dir` whose names `keep` accepts, by name, with their bytes: what two
/// runs are compared by.
#[allow(dead_code)] // not every test file compares outputs
pub fn outputs(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), p))
        .filter(|(name, _)| keep(name))
        .map(|(name, p)| (name, std::fs::read(&p).unwrap()))
        .collect();
    files.sort();
    files
}
