//! `thelma devices` and `thelma bench` end to end: both work without a GPU (the CPU figures come from
//! the same command), write their JSON, and reject bad input with one line and exit code 2.

mod common;
use common::thelma;

fn has_gpu() -> bool {
    thelma_compute::cuda::device_count().is_ok()
}

/// Runs `thelma bench ARGS --json FILE` (FILE named after `test`), which must succeed: its
/// standard output and the report it wrote.
fn bench_json(test: &str, args: &[&str]) -> (String, serde_json::Value) {
    let json =
        std::env::temp_dir().join(format!("thelma-bench-{test}-{}.json", std::process::id()));
    let mut all = vec!["bench"];
    all.extend_from_slice(args);
    all.extend(["--json", json.to_str().unwrap()]);
    let (code, out, err) = thelma(&all);
    assert_eq!(code, 0, "{err}");
    let report =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).unwrap();
    let _ = std::fs::remove_file(&json);
    (out, report)
}

#[test]
fn devices_lists_gpus_or_says_there_are_none_and_exits_0() {
    let (code, out, _) = thelma(&["devices"]);
    assert_eq!(code, 0);
    if has_gpu() {
        assert!(out.contains("cuda:0"), "{out}");
        assert!(out.contains("largest cube per GPU"), "{out}");
    } else {
        assert!(out.starts_with("no CUDA devices:"), "{out}");
    }
}

#[test]
fn bench_on_the_cpu_measures_bandwidth_and_scaling_and_writes_json() {
    let (out, report) = bench_json(
        "cpu",
        &[
            "--backend",
            "cpu",
            "--sizes",
            "12,16",
            "--devices",
            "2",
            "--collision",
            "mrt,bgk",
            "--steps",
            "3",
            "--warmup",
            "1",
            "--bandwidth-mib",
            "16",
        ],
    );
    assert!(out.contains("bandwidth (copy, read + write)"), "{out}");
    // The device line comes before the table, whose header the rows follow directly.
    let lines: Vec<&str> = out.lines().collect();
    let head = lines
        .iter()
        .position(|l| l.starts_with("coll"))
        .expect("a header");
    assert!(
        lines[..head].iter().any(|l| l.starts_with("device 0:")),
        "{out}"
    );
    assert!(lines[head + 1].starts_with("mrt"), "{out}");
    let rows = report["rows"].as_array().unwrap();
    // 2 collisions × 2 sizes × 1..2 devices.
    assert_eq!(rows.len(), 8, "{report}");
    // The bandwidth is timed in repetitions, like the LBM, and the roofline takes the best.
    let bw = report["bandwidth_bytes_per_s"].as_f64().unwrap();
    let samples: Vec<f64> = report["bandwidth"]["samples"]
        .as_array()
        .expect("the probe's repetitions")
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert!(samples.len() >= 5, "{report}");
    assert_eq!(bw, samples.iter().copied().fold(0.0, f64::max));
    assert!(bw > 0.0);
    for r in rows {
        let (d, m) = (r["devices"].as_f64().unwrap(), r["mlups"].as_f64().unwrap());
        let roofline = d * bw / (2.0 * 19.0 * 4.0 + 1.0) / 1e6;
        assert!((r["roofline_mlups"].as_f64().unwrap() / roofline - 1.0).abs() < 1e-12);
        assert!((r["roofline_fraction"].as_f64().unwrap() - m / roofline).abs() < 1e-12);
        assert_eq!(r["slabs"], r["devices"], "{r}");
        let want = if r["slabs"] == 1 { "-" } else { "zero-copy" };
        assert_eq!(r["transport"], want, "{r}");
    }
    for r in rows {
        assert!(r["mlups"].as_f64().unwrap() > 0.0);
        let [nx, ny, nz] = [0, 1, 2].map(|k| r["lattice"][k].as_u64().unwrap());
        let (s, d) = (r["size"].as_u64().unwrap(), r["devices"].as_u64().unwrap());
        assert_eq!(
            [nx, ny, nz],
            [s, s, s * d],
            "weak scaling grows the lattice along z"
        );
        assert!(r["roofline_fraction"].as_f64().unwrap() > 0.0);
        // Efficiency against one device of the same collision and size: k devices' MLUPS over k
        // times the one-device MLUPS (exactly 1 for the one-device row).
        let one = rows
            .iter()
            .find(|o| {
                o["devices"] == 1 && o["size"] == r["size"] && o["collision"] == r["collision"]
            })
            .expect("a one-device row for every configuration");
        let want = r["mlups"].as_f64().unwrap() / (d as f64 * one["mlups"].as_f64().unwrap());
        let got = r["parallel_efficiency"].as_f64().unwrap();
        assert!((got - want).abs() < 1e-12, "{got} vs {want}: {r}");
    }
}

/// `--slabs-per-device 2` puts two slabs on each device: the figures per device and the efficiency
/// are per device (against one slab on one device), not per slab.
#[test]
fn bench_with_two_slabs_per_device_reports_per_device() {
    let (out, report) = bench_json(
        "slabs",
        &[
            "--backend",
            "cpu",
            "--sizes",
            "12",
            "--devices",
            "2",
            "--slabs-per-device",
            "2",
            "--steps",
            "3",
            "--warmup",
            "1",
            "--bandwidth-mib",
            "8",
        ],
    );
    assert_eq!(report["devices"], serde_json::json!(["cpu:0", "cpu:1"]));
    let rows = report["rows"].as_array().unwrap();
    let shape: Vec<(u64, u64)> = rows
        .iter()
        .map(|r| (r["devices"].as_u64().unwrap(), r["slabs"].as_u64().unwrap()))
        .collect();
    // The one-slab baseline, then 1 and 2 devices with two slabs each.
    assert_eq!(shape, [(1, 1), (1, 2), (2, 4)], "{out}");
    let bw = report["bandwidth_bytes_per_s"].as_f64().unwrap();
    let one = rows[0]["mlups"].as_f64().unwrap();
    for r in rows {
        let (d, slabs) = (r["devices"].as_f64().unwrap(), r["slabs"].as_u64().unwrap());
        let m = r["mlups"].as_f64().unwrap();
        assert_eq!(r["lattice"], serde_json::json!([12, 12, 12 * slabs]), "{r}");
        assert!(
            (r["mlups_per_device"].as_f64().unwrap() - m / d).abs() < 1e-9,
            "{r}"
        );
        let roofline = d * bw / 153.0 / 1e6;
        assert!((r["roofline_mlups"].as_f64().unwrap() / roofline - 1.0).abs() < 1e-12);
        let eff = r["parallel_efficiency"].as_f64().unwrap();
        assert!((eff - m / (d * one)).abs() < 1e-12, "{r}");
    }
    assert_eq!(rows[0]["parallel_efficiency"], 1.0);
}

/// `--grid 2,2,1` cuts each lattice into four subdomains spread over the devices in turn: the
/// one-slab baseline, then the grid on one and on two devices (a cube per device along z), each
/// row naming its grid, its efficiency against the baseline.
#[test]
fn bench_on_a_grid_cuts_each_lattice_into_its_subdomains() {
    use serde_json::json;
    let (out, report) = bench_json(
        "grid",
        &[
            "--backend",
            "cpu",
            "--sizes",
            "12",
            "--devices",
            "2",
            "--grid",
            "2,2,1",
            "--steps",
            "3",
            "--warmup",
            "1",
            "--bandwidth-mib",
            "8",
        ],
    );
    let rows = report["rows"].as_array().unwrap();
    let shape: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r["devices"].clone(),
                r["slabs"].clone(),
                r["grid"].clone(),
                r["lattice"].clone(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            (
                json!(1),
                json!(1),
                serde_json::Value::Null,
                json!([12, 12, 12])
            ),
            (json!(1), json!(4), json!([2, 2, 1]), json!([12, 12, 12])),
            (json!(2), json!(4), json!([2, 2, 1]), json!([12, 12, 24])),
        ],
        "{out}"
    );
    assert!(out.contains("2x2x1"), "{out}");
    let one = rows[0]["mlups"].as_f64().unwrap();
    for r in rows {
        let (d, m) = (r["devices"].as_f64().unwrap(), r["mlups"].as_f64().unwrap());
        let eff = r["parallel_efficiency"].as_f64().unwrap();
        assert!((eff - m / (d * one)).abs() < 1e-12, "{r}");
    }
}

#[test]
fn bench_rejects_bad_input_with_one_line_naming_the_option() {
    let (code, _, err) = thelma(&["bench", "--backend", "cpu", "--sizes", "2"]);
    assert_eq!(code, 2);
    assert!(err.starts_with("error: --sizes:"), "{err}");
    assert_eq!(err.trim().lines().count(), 1);
    if !has_gpu() {
        for cmd in [
            vec!["bench", "--backend", "cuda"],
            vec!["run", "--backend", "cuda", "--steps", "1"],
        ] {
            let (code, _, err) = thelma(&cmd);
            assert_eq!(code, 2, "{cmd:?}");
            assert!(err.starts_with("error: --backend: cuda:"), "{err}");
            assert_eq!(err.trim().lines().count(), 1);
        }
    }
}

/// `--case` measures a case's lattice twice, the closed box and then the case with its open faces
/// and obstacle, and gives the case's share of the box's MLUPS in the table and the JSON.
#[test]
fn bench_of_a_case_measures_it_beside_the_closed_box_of_its_lattice() {
    let dir = std::env::temp_dir().join(format!("thelma-bench-case-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let case = dir.join("channel.toml");
    std::fs::write(
        &case,
        "[domain]\ncase = \"box\"\nsize = [24, 12, 10]\n\
         obstacles = [{ shape = \"sphere\", centre = [8.0, 6.0, 5.0], radius = 2.0 }]\n\
         [[boundary]]\nface = \"x-\"\nkind = \"velocity\"\nvelocity = [0.03, 0.0, 0.0]\n\
         [[boundary]]\nface = \"x+\"\nkind = \"pressure\"\ndensity = 1.0\n\
         [physics]\nviscosity = 0.05\n",
    )
    .unwrap();
    let (out, report) = bench_json(
        "case",
        &[
            "--backend",
            "cpu",
            "--case",
            case.to_str().unwrap(),
            "--devices",
            "2",
            "--collision",
            "trt",
            "--steps",
            "3",
            "--warmup",
            "1",
            "--bandwidth-mib",
            "16",
        ],
    );
    assert!(out.contains("of the closed box"), "{out}");
    let rows = report["rows"].as_array().unwrap();
    // One and two devices, each the box and then the case, all of the case's lattice.
    assert_eq!(rows.len(), 4, "{rows:?}");
    for (k, r) in rows.iter().enumerate() {
        assert_eq!(r["lattice"], serde_json::json!([24, 12, 10]));
        assert_eq!(r["collision"], "trt");
        let is_case = k % 2 == 1;
        assert_eq!(r.get("case").is_some(), is_case, "{r}");
        if is_case {
            let box_mlups = rows[k - 1]["mlups"].as_f64().unwrap();
            let share = r["of_box"].as_f64().unwrap();
            assert!(
                (share - r["mlups"].as_f64().unwrap() / box_mlups).abs() < 1e-9,
                "{r}"
            );
        }
    }
    // A case sets its own lattice, and a case that does not load is refused naming the option.
    let (code, _, err) = thelma(&[
        "bench",
        "--backend",
        "cpu",
        "--case",
        case.to_str().unwrap(),
        "--sizes",
        "16",
    ]);
    assert_eq!(code, 2);
    assert!(err.starts_with("error: --sizes:"), "{err}");
    let (code, _, err) = thelma(&["bench", "--backend", "cpu", "--case", "no-such-case.toml"]);
    assert_eq!(code, 2);
    assert!(err.starts_with("error: --case:"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--live` alternates plain runs and runs served live to a viewer `--live-rounds` times: every
/// round is in the JSON, and the share reported is the median of the rounds' shares.
#[test]
fn bench_live_alternates_plain_and_served_runs_and_reports_the_median_share() {
    let (out, report) = bench_json(
        "live",
        &[
            "--backend",
            "cpu",
            "--sizes",
            "16",
            "--no-sweep",
            "--steps",
            "40",
            "--warmup",
            "1",
            "--bandwidth-mib",
            "8",
            "--live",
            "--live-rounds",
            "3",
        ],
    );
    let live = &report["rows"][0]["live"];
    let rounds: Vec<[f64; 2]> = serde_json::from_value(live["rounds"].clone()).unwrap();
    assert_eq!(rounds.len(), 3, "{live}");
    assert!(
        rounds.iter().flatten().all(|m| m.is_finite() && *m > 0.0),
        "{live}"
    );
    let mut shares: Vec<f64> = rounds.iter().map(|[p, s]| s / p).collect();
    shares.sort_by(f64::total_cmp);
    assert_eq!(live["share"].as_f64().unwrap(), shares[1], "{live}");
    let mut served: Vec<f64> = rounds.iter().map(|r| r[1]).collect();
    served.sort_by(f64::total_cmp);
    assert_eq!(live["mlups"].as_f64().unwrap(), served[1], "{live}");
    assert!(out.contains("median of 3 rounds"), "{out}");
    // Rounds without --live are refused, naming the option, before anything runs.
    let (code, _, err) = thelma(&["bench", "--backend", "cpu", "--live-rounds", "2"]);
    assert_eq!(code, 2);
    assert!(err.contains("--live-rounds"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
