//! `thelma comm-bench` end to end on the CPU backend: the table, the JSON report and the PNG plot,
//! and one-line errors with exit status 2 for bad options.

mod common;
use common::thelma;

#[test]
fn a_cpu_sweep_prints_the_tables_and_writes_json_and_png() {
    let dir = std::env::temp_dir().join(format!("thelma-comm-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
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
