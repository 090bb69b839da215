//! `thelma comm-bench` end to end on the CPU backend: the table, the JSON report and the PNG plot,
//! the solver's figures read from a real `thelma bench --json` report, and one-line errors with exit
//! status 2 for bad options.

mod common;
use common::thelma;

use std::path::{Path, PathBuf};

/// A folder of this test alone, so that tests running in parallel (and other runs) share no files.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("thelma-comm-bench-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A real weak-scaling `thelma bench` report of 16³ per device on 1 and 2 CPU devices, written in
/// `dir` (a fraction of a second), with its JSON read back.
fn bench_report(dir: &Path) -> (PathBuf, serde_json::Value) {
    let path = dir.join("bench.json");
    let (code, out, err) = thelma(&[
        "bench",
        "--backend",
        "cpu",
        "--devices",
        "2",
        "--sizes",
        "16",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--bandwidth-mib",
        "16",
        "--json",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    (path, v)
}

/// The MLUPS of the report's row on `devices` devices.
fn bench_mlups(report: &serde_json::Value, devices: u64) -> f64 {
    let rows = report["rows"].as_array().unwrap();
    let row = rows.iter().find(|r| r["devices"] == devices).unwrap();
    assert_eq!(
        (&row["size"], &row["precision"]),
        (&16.into(), &"f32".into())
    );
    row["mlups"].as_f64().unwrap()
}

/// A 2-device comm-bench on 16-word arrays with `extra` options, its JSON report read back.
fn comm_bench_json(out: &Path, extra: &[&str]) -> (String, serde_json::Value) {
    let mut args = vec![
        "comm-bench",
        "--backend",
        "cpu",
        "--devices",
        "2",
        "--iterations",
        "50",
        "--warmup",
        "5",
        "--edge",
        "16",
        "--json",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (code, stdout, err) = thelma(&args);
    assert_eq!(code, 0, "{args:?}: {err}");
    let v = serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    (stdout, v)
}

#[test]
fn a_cpu_sweep_prints_the_tables_and_writes_json_and_png() {
    let dir = scratch("sweep");
    let (json, png) = (dir.join("comm.json"), dir.join("comm.png"));
    let (code, out, err) = thelma(&[
        "comm-bench",
        "--backend",
        "cpu",
        "--devices",
        "2,0,1",
        "--topology",
        "linear,circular",
        "--transport",
        "zero-copy,copy-engine",
        "--transpose",
        "--sweep",
        "--edge",
        "32",
        "--iterations",
        "30",
        "--warmup",
        "2",
        "--solver-mlups",
        "1000",
        "--json",
        json.to_str().unwrap(),
        "--plot",
        png.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("GB/s") && out.contains("comm-bound MLUPS"),
        "{out}"
    );
    // What each rate is, under the tables and in the help.
    assert!(
        out.contains("\nGB/s: ") && out.contains("\nlink GB/s: "),
        "{out}"
    );
    let (code, help, _) = thelma(&["comm-bench", "--help"]);
    assert_eq!(code, 0);
    assert!(
        help.contains("\nGB/s: ") && help.contains("\nlink GB/s: "),
        "{help}"
    );
    // Chains of 2 and 3, rings of 1, 2 and 3, for two transports, transposed only.
    let rows = out
        .lines()
        .filter(|l| l.starts_with("zero-copy") || l.starts_with("copy-engine"))
        .count();
    assert_eq!(rows, 2 * 2 * 5, "{out}");

    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 10);
    assert_eq!(v["backend"], "cpu");
    assert_eq!(v["bytes_per_node"], 20.0);
    for r in runs {
        assert_eq!(r["transpose"], true);
        let devices: Vec<u64> = r["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        // Prefixes of the list in its given order.
        assert_eq!(devices, [2, 0, 1][..devices.len()]);
        let links = r["links"].as_array().unwrap().len();
        let expect = if r["topology"] == "linear" {
            devices.len() - 1
        } else {
            devices.len()
        };
        assert_eq!(links, expect, "{r}");
        let gbs = r["aggregate_gbs"].as_f64().unwrap();
        assert!(gbs > 0.0);
        // The model row uses the run's own throughput and the given single-device performance.
        assert_eq!(r["model"]["measured_gbs"].as_f64().unwrap(), gbs);
        let ideal = r["model"]["ideal_mlups"].as_f64().unwrap();
        assert!(
            (ideal - 1000.0 * devices.len() as f64).abs() < 1e-6,
            "{ideal}"
        );
    }

    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert!(bytes.len() > 5_000, "a {}-byte plot is empty", bytes.len());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_bench_report_gives_the_single_device_figure_and_the_measured_mlups() {
    let dir = scratch("measured");
    let (bench, report) = bench_report(&dir);
    let (one, two) = (bench_mlups(&report, 1), bench_mlups(&report, 2));
    let (from_file, by_hand) = (dir.join("from-file.json"), dir.join("by-hand.json"));
    let (out, v) = comm_bench_json(&from_file, &["--bench-json", bench.to_str().unwrap()]);
    // `{}` writes the shortest text that parses back to the same f64, so both runs model alike.
    let (_, w) = comm_bench_json(&by_hand, &["--solver-mlups", &one.to_string()]);

    assert!(out.contains("measured MLUPS"), "{out}");
    assert_eq!(v["bench_json"]["single_device_mlups"].as_f64(), Some(one));
    assert_eq!(v["bench_json"]["collision"], "mrt");
    assert_eq!(v["single_device_step_us"], w["single_device_step_us"]);
    let (runs, hand) = (v["runs"].as_array().unwrap(), w["runs"].as_array().unwrap());
    assert_eq!((runs.len(), hand.len()), (1, 1));
    let (m, h) = (&runs[0]["model"], &hand[0]["model"]);
    // The figures that do not depend on this run's measured throughput are identical.
    for key in [
        "devices",
        "edge",
        "bytes_per_step",
        "required_gbs",
        "ideal_mlups",
    ] {
        assert!(!m[key].is_null(), "{key}: {m}");
        assert_eq!(m[key], h[key], "{key}");
    }
    // The estimate is still min(ideal, communication bound) at this run's throughput.
    let (ideal, bound) = (
        m["ideal_mlups"].as_f64().unwrap(),
        m["comm_bound_mlups"].as_f64().unwrap(),
    );
    assert_eq!(m["predicted_mlups"].as_f64(), Some(ideal.min(bound)));
    assert!((ideal - 2.0 * one).abs() <= 1e-9 * one, "{m}");
    assert_eq!(m["measured_mlups"].as_f64(), Some(two));
    // Without a report there is nothing measured to show.
    assert!(h["measured_mlups"].is_null(), "{h}");
    assert!(w["bench_json"].is_null());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bench_reports_that_do_not_fit_give_one_line_naming_bench_json_and_exit_2() {
    let dir = scratch("misfits");
    let (bench, report) = bench_report(&dir);
    let missing = dir.join("no-such-report.json");
    let garbage = dir.join("garbage.json");
    std::fs::write(&garbage, "MLUPS: lots").unwrap();
    let strong = dir.join("strong.json");
    let mut s = report.clone();
    s["scaling"] = "strong".into();
    std::fs::write(&strong, s.to_string()).unwrap();
    let bench = bench.to_str().unwrap();
    let cases: &[&[&str]] = &[
        &["--bench-json", missing.to_str().unwrap()],
        &["--bench-json", garbage.to_str().unwrap()],
        &["--bench-json", strong.to_str().unwrap()],
        // The report measured 16³ per device in f32 only.
        &["--bench-json", bench, "--edge", "32"],
        &["--bench-json", bench, "--edge", "16", "--domain-edge", "24"],
        &["--bench-json", bench, "--edge", "16", "--precision", "f64"],
        &["--bench-json", bench, "--solver-mlups", "100"],
        &["--bench-json", bench, "--kernel-time", "100"],
    ];
    for extra in cases {
        let mut args = vec![
            "comm-bench",
            "--backend",
            "cpu",
            "--devices",
            "2",
            "--iterations",
            "2",
        ];
        args.extend_from_slice(extra);
        let (code, _, err) = thelma(&args);
        assert_eq!(code, 2, "{args:?}: exit {code}, stderr {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("--bench-json"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_comm_bench_options_give_one_line_naming_the_option_and_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        (&["--devices", "1"], "--devices"),
        (&["--devices", "1", "--sweep"], "--devices"),
        (&["--devices", "0,0"], "--devices"),
        (&["--transport", "carrier-pigeon"], "--transport"),
        (&["--topology", "star"], "--topology"),
        (&["--iterations", "0"], "--iterations"),
        (&["--edge", "0"], "--edge"),
        (&["--arrays", "0"], "--arrays"),
        (&["--domain-edge", "0"], "--domain-edge"),
        (&["--solver-mlups", "-3"], "--solver-mlups"),
        (&["--kernel-time", "0"], "--kernel-time"),
        (
            &["--solver-mlups", "5", "--kernel-time", "9"],
            "--kernel-time",
        ),
        (&["--transport", "peer"], "--transport"),
        // One process is no MPI job: the line says how to start one.
        (&["--transport", "mpi"], "mpirun -np N"),
    ];
    for (extra, flag) in cases {
        let mut args = vec!["comm-bench", "--backend", "cpu", "--iterations", "2"];
        args.extend_from_slice(extra);
        let (code, _, err) = thelma(&args);
        assert_eq!(code, 2, "{args:?}: exit {code}, stderr {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
