//! The `thelma` binary end to end: help, bad input (one line, exit 2) and a small multi-device run.

use std::process::Command;

fn thelma(args: &[&str]) -> (i32, String, String) {
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

#[test]
fn run_help_documents_every_option() {
    let (code, out, _) = thelma(&["run", "--help"]);
    assert_eq!(code, 0);
    for opt in [
        "--config",
        "--size",
        "--re",
        "--viscosity",
        "--lid-speed",
        "--steps",
        "--tolerance",
        "--check-every",
        "--max-steps",
        "--collision",
        "--precision",
        "--backend",
        "--devices",
        "--threads",
        "--periodic",
        "--output",
        "--quiet",
    ] {
        assert!(out.contains(opt), "--help does not mention {opt}");
    }
}

#[test]
fn bad_values_give_one_line_naming_the_option_and_exit_2() {
    let tmp = std::env::temp_dir().join(format!("thelma-cli-bad-{}", std::process::id()));
    let o = tmp.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["run", "--size", "0", "-o", o], "--size"),
        (&["run", "--size", "1", "-o", o], "--size"),
        (&["run", "--size", "8,8", "-o", o], "--size"),
        (&["run", "--re", "0", "-o", o], "--re"),
        (&["run", "--re", "-5", "-o", o], "--re"),
        (&["run", "--viscosity", "-0.1", "-o", o], "--viscosity"),
        (&["run", "--viscosity", "0", "-o", o], "--viscosity"),
        (&["run", "--lid-speed", "0.4", "-o", o], "--lid-speed"),
        (&["run", "--lid-speed", "0.7", "-o", o], "--lid-speed"),
        (&["run", "--backend", "opencl", "-o", o], "--backend"),
        (&["run", "--collision", "trt", "-o", o], "--collision"),
        (&["run", "--precision", "f16", "-o", o], "--precision"),
        (&["run", "--devices", "1,1", "-o", o], "--devices"),
        (
            &[
                "run",
                "--size",
                "8",
                "--backend",
                "cpu",
                "--devices",
                "9",
                "-o",
                o,
            ],
            "--devices",
        ),
        (&["run", "--steps", "0", "-o", o], "--steps"),
    ];
    for (args, flag) in cases {
        let (code, out, err) = thelma(args);
        assert_eq!(code, 2, "{args:?}: exit {code}, stderr {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: not one line: {err}"
        );
        assert!(
            err.contains(flag),
            "{args:?}: message does not name {flag}: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(
            out.is_empty() || !out.contains("step"),
            "{args:?} started running"
        );
    }
    let _ = std::fs::remove_dir_all(tmp);
}

#[test]
fn a_three_device_cpu_run_prints_bindings_and_per_device_statistics() {
    let tmp = std::env::temp_dir().join(format!("thelma-cli-run-{}", std::process::id()));
    let (code, out, err) = thelma(&[
        "run",
        "--size",
        "16",
        "--steps",
        "60",
        "--check-every",
        "30",
        "--backend",
        "cpu",
        "--devices",
        "3",
        "-o",
        tmp.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    for d in 0..3 {
        assert!(
            out.contains(&format!("device  {d}: slab {d}")),
            "no binding line for device {d}:\n{out}"
        );
    }
    assert!(
        out.contains("MLUPS") && out.contains("parallel efficiency"),
        "{out}"
    );
    assert_eq!(
        out.lines()
            .filter(|l| l.trim_start().starts_with("device ") && l.contains("compute"))
            .count(),
        3,
        "{out}"
    );
    assert!(tmp.join("profiles.csv").exists() && tmp.join("summary.json").exists());
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["steps"], 60);
    assert_eq!(summary["devices"].as_array().unwrap().len(), 3);
    let _ = std::fs::remove_dir_all(tmp);
}

#[test]
fn ctrl_c_stops_after_the_current_step_and_still_writes_the_outputs() {
    let tmp = std::env::temp_dir().join(format!("thelma-cli-int-{}", std::process::id()));
    let child = Command::new(env!("CARGO_BIN_EXE_thelma"))
        .args([
            "run",
            "--size",
            "24",
            "--steps",
            "100000000",
            "--check-every",
            "50",
            "--backend",
            "cpu",
            "-o",
        ])
        .arg(&tmp)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("thelma starts");
    // Let it step for a while, then interrupt it as Ctrl-C would.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let out = child.wait_with_output().expect("thelma ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.join("summary.json")).expect("summary written"),
    )
    .unwrap();
    let steps = summary["steps"].as_u64().unwrap();
    assert!(steps > 0 && steps < 100_000_000, "steps {steps}");
    assert!(tmp.join("profiles.csv").exists());
    let _ = std::fs::remove_dir_all(tmp);
}
