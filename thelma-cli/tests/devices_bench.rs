//! `thelma devices` and `thelma bench` end to end: both work without a GPU (the CPU figures come from
//! the same command), write their JSON, and reject bad input with one line and exit code 2.

mod common;
use common::thelma;

fn has_gpu() -> bool {
    thelma_compute::cuda::device_count().is_ok()
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
    let json = std::env::temp_dir().join(format!("thelma-bench-{}.json", std::process::id()));
    let (code, out, err) = thelma(&[
        "bench",
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
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("bandwidth (copy, read + write)"), "{out}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).unwrap();
    let _ = std::fs::remove_file(&json);
    let rows = report["rows"].as_array().unwrap();
    // 2 collisions × 2 sizes × 1..2 devices.
    assert_eq!(rows.len(), 8, "{report}");
    assert!(report["bandwidth_bytes_per_s"].as_f64().unwrap() > 0.0);
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
