//! The `thelma` binary end to end: help, bad input (one line, exit 2) and a small multi-device run.

use std::process::Command;

mod common;
use common::{outputs, thelma};

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
        "--trt-magic",
        "--smagorinsky",
        "--force",
        "--precision",
        "--streaming",
        "--backend",
        "--devices",
        "--threads",
        "--periodic",
        "--output",
        "--quiet",
        "--resume",
        "--watchdog-every",
        "--density-bounds",
        "--checkpoint-every",
    ] {
        assert!(out.contains(opt), "--help does not mention {opt}");
    }
}

#[test]
fn bad_values_give_one_line_naming_the_option_and_exit_2() {
    let tmp = std::env::temp_dir().join(format!("thelma-cli-bad-{}", std::process::id()));
    let o = tmp.to_str().unwrap();
    // A case with a temperature lattice, which f16c storage is refused with.
    let room = format!(
        "{}/../examples/ventilated-room.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let cylinder = format!(
        "{}/../examples/cylinder-3d.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let cases: &[(&[&str], &str)] = &[
        (&["run", "--size", "0", "-o", o], "--size"),
        // A missing required option is named on the one line.
        (&["layout"], "--size"),
        (&["run", "--size", "1", "-o", o], "--size"),
        (&["run", "--size", "8,8", "-o", o], "--size"),
        (&["run", "--re", "0", "-o", o], "--re"),
        (&["run", "--re", "-5", "-o", o], "--re"),
        (&["run", "--viscosity", "-0.1", "-o", o], "--viscosity"),
        (&["run", "--viscosity", "0", "-o", o], "--viscosity"),
        (&["run", "--lid-speed", "0.4", "-o", o], "--lid-speed"),
        (&["run", "--lid-speed", "0.7", "-o", o], "--lid-speed"),
        (&["run", "--backend", "opencl", "-o", o], "--backend"),
        (&["run", "--collision", "lbgk", "-o", o], "--collision"),
        (&["run", "--trt-magic", "-1", "-o", o], "--trt-magic"),
        (&["run", "--smagorinsky", "2", "-o", o], "--smagorinsky"),
        (&["run", "--force", "1,0", "-o", o], "--force"),
        (&["run", "--force", "0.5,0,0", "-o", o], "--force"),
        (&["run", "--precision", "f8", "-o", o], "--precision"),
        (
            &["run", "--config", &room, "--precision", "f16c", "-o", o],
            "numerics.precision",
        ),
        (&["run", "--streaming", "aa", "-o", o], "--streaming"),
        // In-place streaming has walls, obstacles and forces; not a temperature lattice nor open
        // faces.
        (
            &["run", "--config", &room, "--streaming", "in-place", "-o", o],
            "numerics.streaming",
        ),
        (
            &[
                "run",
                "--config",
                &cylinder,
                "--streaming",
                "in-place",
                "-o",
                o,
            ],
            "numerics.streaming",
        ),
        (&["run", "--devices", "1,1", "-o", o], "--devices"),
        (&["run", "--transport", "nvlink", "-o", o], "--transport"),
        (
            &[
                "run",
                "--size",
                "8",
                "--backend",
                "cpu",
                "--devices",
                "2",
                "--transport",
                "peer",
                "-o",
                o,
            ],
            "--transport",
        ),
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
        (
            &["run", "--watchdog-every", "0", "-o", o],
            "--watchdog-every",
        ),
        (
            &["run", "--density-bounds", "2,3", "-o", o],
            "--density-bounds",
        ),
        (
            &["run", "--density-bounds", "0.5", "-o", o],
            "--density-bounds",
        ),
        (
            &["run", "--checkpoint-every", "-3", "-o", o],
            "--checkpoint-every",
        ),
        // τ = 0.5 + 3e-9 rounds to ½ in f32.
        (&["run", "--viscosity", "1e-9", "-o", o], "--viscosity"),
        // 4000³ fits the node limit but no machine's memory.
        (
            &["run", "--size", "4000", "--backend", "cpu", "-o", o],
            "--size",
        ),
        (
            &["run", "--backend", "cpu", "--devices", "0,5", "-o", o],
            "--devices",
        ),
        (
            &["run", "--resume", "/nonexistent/run", "-o", o],
            "--resume",
        ),
        (&["run", "--resume", o, "--config", "case.toml"], "--config"),
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
        // Refused input creates nothing: the output folder is made only once the case is accepted.
        assert!(!tmp.exists(), "{args:?} left {} behind", tmp.display());
    }
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
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("device  {d}: slab {d}")))
            .unwrap_or_else(|| panic!("no line for device {d}:\n{out}"));
        // The thread binding: the cores and NUMA node it was pinned to, or why it is unbound.
        assert!(
            line.contains("cpus ") || line.contains("unbound ("),
            "no binding on {line:?}"
        );
    }
    assert!(
        out.contains("MLUPS") && out.contains("% of device time computing"),
        "{out}"
    );
    // Three slabs of the CPU module share host memory.
    assert!(out.lines().any(|l| l == "exchange: zero-copy"), "{out}");
    // Per device: its step time, and on the next line the bytes it exchanges (each slab has at
    // least one neighbour).
    let lines: Vec<&str> = out.lines().collect();
    for (k, l) in lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.trim_start().starts_with("device ") && l.contains("compute"))
    {
        assert!(l.contains("ms/step"), "{l}");
        let l = lines.get(k + 1).copied().unwrap_or_default();
        let bytes: u64 = l
            .split("exchange ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|b| b.parse().ok())
            .unwrap_or_else(|| panic!("no exchange figure in {l:?}"));
        assert!(bytes > 0, "{l}");
    }
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
    // Each slab reads its neighbours' populations from host memory (the CPU module's transport).
    let transports: Vec<serde_json::Value> = summary["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["transports"].clone())
        .collect();
    assert_eq!(
        transports,
        [
            serde_json::json!([null, "zero-copy"]),
            serde_json::json!(["zero-copy", "zero-copy"]),
            serde_json::json!(["zero-copy", null]),
        ]
    );
    let _ = std::fs::remove_dir_all(tmp);
}

#[test]
fn the_device_order_given_is_the_slab_order() {
    let tmp = std::env::temp_dir().join(format!("thelma-cli-order-{}", std::process::id()));
    let (code, out, err) = thelma(&[
        "run",
        "--size",
        "12",
        "--steps",
        "10",
        "--backend",
        "cpu",
        "--devices",
        "2,0,1",
        "--no-vtk",
        "--no-images",
        "-o",
        tmp.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    // 12 planes over 3 slabs: device 2 owns the bottom four, device 1 the top four.
    for (device, slab, z) in [(2, 0, "0..4"), (0, 1, "4..8"), (1, 2, "8..12")] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("device  {device}: slab {slab} z {z} "))),
            "device {device} is not slab {slab} (z {z}):\n{out}"
        );
    }
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.join("summary.json")).unwrap()).unwrap();
    let order: Vec<u64> = summary["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["device"].as_u64().unwrap())
        .collect();
    assert_eq!(order, [2, 0, 1]);
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

#[test]
fn unusable_outputs_and_case_files_are_named_with_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    // A folder cannot be made under a regular file, whoever runs the test.
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let under = file.join("out");
    let (code, _, err) = thelma(&[
        "run",
        "--size",
        "8",
        "--steps",
        "1",
        "-o",
        under.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("error: --output:") && err.trim_end().lines().count() == 1,
        "{err}"
    );

    let case = tmp.path().join("case.toml");
    std::fs::write(&case, "[physics]\nreynolds = 400\nlid_speed = fast\n").unwrap();
    let (code, _, err) = thelma(&["run", "--config", case.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--config") && err.contains("line 3, column 13"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn a_diverging_run_exits_3_naming_the_step_and_node() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, out, err) = thelma(&[
        "run",
        "--size",
        "12",
        "--collision",
        "bgk",
        "--viscosity",
        "1e-5",
        "--lid-speed",
        "0.35",
        "--steps",
        "2000",
        "--watchdog-every",
        "10",
        "--backend",
        "cpu",
        "-q",
        "-o",
        tmp.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 3, "{out}{err}");
    // ν = 1e-5 gives τ = 0.50003: the run is warned before it starts, then stopped in one line.
    let (warnings, errors): (Vec<&str>, Vec<&str>) = err
        .trim_end()
        .lines()
        .partition(|l| l.starts_with("warning: "));
    assert!(warnings.iter().any(|w| w.contains("tau = 0.5000")), "{err}");
    assert_eq!(errors.len(), 1, "{err}");
    assert!(
        errors[0].contains("diverged by step") && errors[0].contains("at node ("),
        "{err}"
    );
    assert!(tmp.path().join("profiles.csv").exists());
}

#[test]
fn a_checkpointed_run_resumes_to_its_new_target() {
    let tmp = tempfile::tempdir().unwrap();
    let o = tmp.path().to_str().unwrap();
    let (code, _, err) = thelma(&[
        "run",
        "--size",
        "10",
        "--steps",
        "30",
        "--checkpoint-every",
        "20",
        "--backend",
        "cpu",
        "-q",
        "-o",
        o,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(tmp.path().join("checkpoint.thelma").exists());
    let (code, _, err) = thelma(&[
        "run",
        "--resume",
        o,
        "--steps",
        "50",
        "--devices",
        "2",
        "-q",
    ]);
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["steps"], 50);
    assert_eq!(summary["case"]["run"]["checkpoint_every"], 20);
}

#[test]
fn a_relaxation_time_close_to_one_half_is_warned_about() {
    let tmp = std::env::temp_dir().join(format!("thelma-cli-tau-{}", std::process::id()));
    let o = tmp.to_str().unwrap();
    // Re = 1000 at 8³: τ = 0.5024. At 48³: τ = 0.5144, no warning.
    for (size, warned) in [("8", true), ("48", false)] {
        let (code, _, err) = thelma(&[
            "run",
            "--size",
            size,
            "--steps",
            "1",
            "--backend",
            "cpu",
            "--no-vtk",
            "--no-images",
            "-q",
            "-o",
            o,
        ]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(err.contains("warning: tau = 0.50"), warned, "{size}: {err}");
    }
    let _ = std::fs::remove_dir_all(tmp);
}

#[test]
fn in_place_streaming_writes_what_two_lattices_write() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |extra: &[&str], out: &str| {
        let o = tmp.path().join(out);
        let mut args = vec![
            "run",
            "--backend",
            "cpu",
            "--size",
            "12,10,14",
            "--re",
            "200",
            "--steps",
            "31",
            "--quiet",
            "-o",
        ];
        args.push(o.to_str().unwrap());
        args.extend_from_slice(extra);
        let (code, _, err) = thelma(&args);
        assert_eq!(code, 0, "{extra:?}: {err}");
        let files = outputs(&o, |n| n.ends_with(".vti") || n.ends_with(".csv"));
        assert!(files.iter().any(|(n, _)| n.ends_with(".vti")), "{files:?}");
        files
    };
    let two = run(&["--devices", "1"], "two");
    for devices in ["1", "3"] {
        let one = run(
            &["--streaming", "in-place", "--devices", devices],
            &format!("one{devices}"),
        );
        assert!(
            one == two,
            "{devices} devices in place differ from two lattices"
        );
    }
}

#[test]
fn a_written_layout_runs_in_one_process_as_an_even_split_does() {
    let tmp = tempfile::tempdir().unwrap();
    let layout = tmp.path().join("layout.toml");
    let l = layout.to_str().unwrap();
    let (code, out, err) = thelma(&[
        "layout", "--size", "12,10,20", "--ranks", "1", "--gpus", "3", l,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("wrote") && out.contains("--layout"), "{out}");
    let text = std::fs::read_to_string(&layout).unwrap();
    assert_eq!(text.matches("[[subdomain]]").count(), 3, "{text}");
    // Never overwritten; no ranks, no file.
    let (code, _, err) = thelma(&["layout", "--size", "12", l]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("File exists"), "{err}");
    let (code, _, err) = thelma(&["layout", "--size", "12", "--ranks", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("error: --ranks: must be at least 1"),
        "{err}"
    );

    let run = |extra: &[&str], out: &str| {
        let o = tmp.path().join(out);
        let mut args = vec![
            "run",
            "--backend",
            "cpu",
            "--size",
            "12,10,20",
            "--steps",
            "30",
            "--quiet",
            "-o",
        ];
        args.push(o.to_str().unwrap());
        args.extend_from_slice(extra);
        let (code, _, err) = thelma(&args);
        assert_eq!(code, 0, "{extra:?}: {err}");
        let files = outputs(&o, |n| n.ends_with(".vti"));
        assert!(!files.is_empty());
        files
    };
    assert!(run(&["--layout", l], "laid") == run(&["--devices", "1"], "one"));

    // A layout for two processes, run as one.
    std::fs::write(
        &layout,
        "[[subdomain]]\norigin = [0, 0, 0]\nsize = [12, 10, 8]\nrank = 0\ndevice = 0\n\
         [[subdomain]]\norigin = [0, 0, 8]\nsize = [12, 10, 12]\nrank = 1\ndevice = 0\n",
    )
    .unwrap();
    let o = tmp.path().join("refused");
    let (code, _, err) = thelma(&[
        "run",
        "--backend",
        "cpu",
        "--size",
        "12,10,20",
        "--layout",
        l,
        "-o",
        o.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--layout: the layout names 2 rank(s), and 1 process(es) run"),
        "{err}"
    );
    assert!(!o.exists());
}

#[test]
fn a_grid_layout_runs_as_one_slab_does_and_refuses_what_it_cannot_run_yet() {
    let tmp = tempfile::tempdir().unwrap();
    let layout = tmp.path().join("grid.toml");
    let l = layout.to_str().unwrap();
    let (code, out, err) = thelma(&[
        "layout", "--size", "12,10,20", "--grid", "2,2,1", "--gpus", "4", l,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("wrote"), "{out}");
    let text = std::fs::read_to_string(&layout).unwrap();
    assert_eq!(text.matches("[[subdomain]]").count(), 4, "{text}");
    let (code, _, err) = thelma(&["layout", "--size", "12", "--grid", "2,2,2", "--gpus", "4"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("error: --grid: 2x2x2 = 8 subdomains for 1 rank(s) of 4 device(s)"),
        "{err}"
    );

    let run = |extra: &[&str], out: &str| {
        let o = tmp.path().join(out);
        let mut args = vec![
            "run",
            "--backend",
            "cpu",
            "--size",
            "12,10,20",
            "--steps",
            "30",
            "--quiet",
            "--checkpoint-every",
            "30",
            "-o",
        ];
        args.push(o.to_str().unwrap());
        args.extend_from_slice(extra);
        let (code, stdout, err) = thelma(&args);
        (code, stdout, err, o)
    };
    let (code, _, err, one) = run(&["--devices", "1"], "one");
    assert_eq!(code, 0, "{err}");
    let (code, _, err, grid) = run(&["--layout", l], "grid");
    assert_eq!(code, 0, "{err}");
    let vti = |o: &std::path::Path| outputs(o, |n| n.ends_with(".vti"));
    assert!(!vti(&one).is_empty());
    assert!(
        vti(&grid) == vti(&one),
        "the grid's fields differ from one slab's"
    );
    // The checkpoint holds the whole domain whatever the partition (one block per subdomain,
    // which it names): its populations, loaded, are one slab's.
    let populations = |o: &std::path::Path| {
        let ck = thelma_cli::checkpoint::load(o).unwrap();
        assert_eq!(ck.header.blocks.len(), if o == one { 1 } else { 4 });
        ck.populations
    };
    assert_eq!(populations(&one).len(), 19 * 12 * 10 * 20 * 4);
    assert!(
        populations(&grid) == populations(&one),
        "the grid's checkpoint differs from one slab's"
    );

    // Forces on a body and probes, sampled from the subdomains that hold their nodes.
    let case = tmp.path().join("body.toml");
    std::fs::write(
        &case,
        "[domain]\ncase = \"box\"\nsize = [16, 10, 10]\nperiodic = [true, false, false]\n\
         obstacles = [{ shape = \"cylinder\", centre = [6.0, 4.5, 0.0], axis = [0, 0, 1], radius = 2.0 }]\n\
         [physics]\nviscosity = 0.05\nforce = [1e-5, 0, 0]\n[run]\nsteps = 40\n\
         [forces]\nevery = 10\narea = 10.0\nvelocity = 0.01\n\
         [[probe]]\nat = [12.0, 4.0, 5.0]\n[[probe]]\nat = [2.0, 8.0, 1.0]\n[output]\nprobe_every = 20\n",
    )
    .unwrap();
    let body_grid = tmp.path().join("body-grid.toml");
    let (code, _, err) = thelma(&[
        "layout",
        "--size",
        "16,10,10",
        "--grid",
        "3,2,2",
        "--gpus",
        "12",
        body_grid.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let sampled = |extra: &[&str], out: &str| {
        let o = tmp.path().join(out);
        let mut args = vec!["run", "--backend", "cpu", "--quiet", "--config"];
        args.push(case.to_str().unwrap());
        args.extend_from_slice(&["-o", o.to_str().unwrap()]);
        args.extend_from_slice(extra);
        let (code, _, err) = thelma(&args);
        assert_eq!(code, 0, "{extra:?}: {err}");
        ["forces.csv", "probes.csv"].map(|f| std::fs::read_to_string(o.join(f)).unwrap())
    };
    let slab = sampled(&["--devices", "1"], "body-one");
    assert_eq!(slab[0].lines().count(), 1 + 5, "{}", slab[0]);
    assert!(
        sampled(&["--layout", body_grid.to_str().unwrap()], "body-grid") == slab,
        "a grid's forces or probes differ from one slab's"
    );

    let (code, _, err, o) = run(&["--layout", l, "--streaming", "in-place"], "refused");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--layout: the layout cuts x or y, and in-place streaming cannot run"),
        "{err}"
    );
    assert!(!o.exists());
}

#[test]
fn layout_model_prints_the_best_cut_of_each_kind_and_names_a_missing_figure() {
    let figures = [
        "--gpu-mlups",
        "20000",
        "--link-gbs",
        "100",
        "--host-gbs",
        "25",
        "--nic-gbs",
        "50",
        "--latency-us",
        "10",
    ];
    let mut args = vec![
        "layout", "--size", "1024", "--ranks", "8", "--gpus", "8", "--model",
    ];
    args.extend_from_slice(&figures);
    let (code, out, err) = thelma(&args);
    assert_eq!(code, 0, "{err}");
    let row = |kind: &str| {
        out.lines()
            .find(|l| l.starts_with(kind))
            .unwrap_or_else(|| panic!("no {kind} row: {out}"))
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    // Slabs: 64 along z (8 hosts, 8 GPUs each); 3D: a cube of hosts, fewer bytes on the network.
    let slabs = row("1D");
    assert_eq!(&slabs[3..6], ["1x1x8", "1x1x8", "1024x1024x16"], "{out}");
    let boxes = row("3D");
    assert_eq!(boxes[1], "2x2x2", "{out}");
    let mb = |r: &[String], col: usize| r[col].parse::<f64>().unwrap();
    // Net MB: 2 faces of 1024² nodes × 20 B = 41.9 MB; 3 faces of 512² × 20 B = 15.7 MB.
    assert_eq!((mb(&slabs, 6), mb(&boxes, 4)), (41.9, 15.7), "{out}");

    // Every figure is asked for, by name; none is taken without --model.
    for missing in ["--gpu-mlups", "--nic-gbs", "--latency-us"] {
        let k = figures.iter().position(|f| *f == missing).unwrap();
        let mut args = vec!["layout", "--size", "64", "--model"];
        args.extend(
            figures
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != k && *i != k + 1)
                .map(|(_, f)| *f),
        );
        let (code, _, err) = thelma(&args);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.starts_with(&format!("error: {missing}: --model needs")),
            "{err}"
        );
    }
    let (code, _, err) = thelma(&["layout", "--size", "64", "--nic-gbs", "50"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--model"), "{err}");
    // More GPUs than nodes, or a cut that leaves no GPU a whole node: the count is named.
    for (size, ranks) in [("4", "100"), ("4,4,4", "7")] {
        let mut args = vec!["layout", "--size", size, "--ranks", ranks, "--model"];
        args.extend_from_slice(&figures);
        let (code, _, err) = thelma(&args);
        assert_eq!(code, 2, "{err}");
        assert!(err.starts_with("error: --ranks:"), "{err}");
    }
}
