//! The binary under the conditions of real use: stdout that goes away, termination signals, two
//! runs into one folder, input refused late, degenerate cases, and the first steps of a new user.
//! Each test names the fault it guards against.

mod common;
use common::{run_on_cpu, thelma};

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn thelma_cmd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_thelma"))
}

/// A quick fixed-length run into `dir` (arguments after `run`).
fn quick_run(dir: &Path) -> Vec<String> {
    [
        "run",
        "--size",
        "12",
        "--steps",
        "20",
        "--check-every",
        "10",
        "--backend",
        "cpu",
        "-o",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([dir.to_str().unwrap().to_string()])
    .collect()
}

/// A run that would take days, into `dir`, with its output captured.
fn long_run(dir: &Path) -> Child {
    thelma_cmd()
        .args([
            "run",
            "--size",
            "20",
            "--steps",
            "100000000",
            "--check-every",
            "20",
            "--backend",
            "cpu",
            "--no-vtk",
            "-o",
        ])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("thelma starts")
}

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(dir.join("summary.json")).expect("summary.json written"),
    )
    .unwrap()
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .expect("kill runs")
        .success();
    assert!(ok, "kill -{sig}");
}

/// Waits until the run has written its lock (it is then past its checks and stepping).
fn wait_until_running(dir: &Path) {
    for _ in 0..200 {
        if dir.join(".thelma.lock").exists() {
            std::thread::sleep(Duration::from_millis(500));
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the run into {} never started", dir.display());
}

#[test]
fn a_full_stdout_neither_kills_the_run_nor_its_outputs() {
    // Fault: `println!` panicked on /dev/full, exit 101 and no summary.
    let tmp = tempfile::tempdir().unwrap();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let out = thelma_cmd()
        .args(quick_run(tmp.path()))
        .stdout(full)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(summary(tmp.path())["steps"], 20);
    assert!(tmp.path().join("profiles.csv").exists());
}

#[test]
fn a_closed_pipe_on_stdout_neither_kills_the_run_nor_its_outputs() {
    // Fault: `thelma run | head -3` died with a broken pipe (exit 101) when head exited.
    let tmp = tempfile::tempdir().unwrap();
    let mut child = thelma_cmd()
        .args(quick_run(tmp.path()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(summary(tmp.path())["steps"], 20);

    // The same for the benchmarks, which print as they measure.
    let mut child = thelma_cmd()
        .args([
            "comm-bench",
            "--backend",
            "cpu",
            "--devices",
            "2",
            "--iterations",
            "5",
            "--warmup",
            "1",
            "--edge",
            "8",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
}

#[test]
fn sigterm_stops_a_run_as_ctrl_c_does_with_the_outputs_written() {
    // Fault: a scheduler's SIGTERM (or `timeout`) ended the run at once with nothing written.
    let tmp = tempfile::tempdir().unwrap();
    let child = long_run(tmp.path());
    wait_until_running(tmp.path());
    signal(&child, "TERM");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // The same status as Ctrl-C: stopped on request, outputs written.
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    let s = summary(tmp.path());
    assert_eq!(s["stop_reason"], "interrupted", "{s}");
    assert!(s["steps"].as_u64().unwrap() < 100_000_000);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("stopped: interrupted"), "{text}");
}

#[test]
fn a_second_signal_exits_130_and_removes_temporary_files() {
    // Standard signals sent too close together merge into one, and one sent too late finds the run
    // already ended: a few tries with a short gap between the two.
    for gap_ms in [3, 1, 10] {
        let tmp = tempfile::tempdir().unwrap();
        let child = long_run(tmp.path());
        wait_until_running(tmp.path());
        // What a write cut short by the exit would leave.
        let partial = tmp.path().join(".thelma-cut.tmp");
        std::fs::write(&partial, b"half").unwrap();
        let pid = child.id() as libc::pid_t;
        // SAFETY: `pid` is the child this test spawned and has not reaped yet.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        std::thread::sleep(Duration::from_millis(gap_ms));
        // SAFETY: as above; a child that has exited meanwhile is a zombie until waited for.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let out = child.wait_with_output().unwrap();
        if out.status.code() == Some(130) {
            assert!(!partial.exists(), "the temporary file is still there");
            return;
        }
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    panic!("no second signal arrived while the run was stopping");
}

#[test]
fn a_run_under_nohup_keeps_going_when_its_terminal_hangs_up() {
    // Taking SIGTERM must not take over a SIGHUP that `nohup` (here: the shell's trap) ignores.
    // At Re 100 the run holds (the default Re 1000 at 20³ diverges within a second).
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "trap '' HUP; exec {} run --size 20 --re 100 --steps 100000000 --check-every 20 --backend cpu --no-vtk -q -o {}",
            env!("CARGO_BIN_EXE_thelma"),
            tmp.path().display()
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_running(tmp.path());
    signal(&child, "HUP");
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run stopped on SIGHUP"
    );
    signal(&child, "TERM");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(summary(tmp.path())["stop_reason"], "interrupted");
}

#[test]
fn a_second_run_into_a_busy_folder_is_refused_naming_the_holder() {
    // Fault: two runs into one folder overwrote each other's files.
    let tmp = tempfile::tempdir().unwrap();
    let mut first = long_run(tmp.path());
    wait_until_running(tmp.path());
    let (code, _, err) = thelma(
        &quick_run(tmp.path())
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>(),
    );
    signal(&first, "INT");
    let _ = first.wait();
    assert_eq!(code, 2, "{err}");
    assert!(err.starts_with("error: --output:"), "{err}");
    assert!(
        err.contains(&format!("pid {}", first.id())),
        "the holder is not named: {err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // Once the first has ended, the folder is free again.
    let (code, _, err) = thelma(
        &quick_run(tmp.path())
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>(),
    );
    assert_eq!(code, 0, "{err}");
}

#[test]
fn temporary_files_of_interrupted_writes_are_cleaned_at_start() {
    // Fault: a run killed during an atomic write left `.thelma-*.tmp` files forever.
    let tmp = tempfile::tempdir().unwrap();
    let stale = tmp.path().join(".thelma-XYZ123.tmp");
    std::fs::write(&stale, vec![0u8; 1000]).unwrap();
    let keep = tmp.path().join("notes.txt");
    std::fs::write(&keep, "mine").unwrap();
    let (code, _, err) = thelma(
        &quick_run(tmp.path())
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>(),
    );
    assert_eq!(code, 0, "{err}");
    assert!(!stale.exists(), "the stale temporary file is still there");
    assert!(keep.exists(), "a file that is not thelma's was removed");
}

#[test]
fn degenerate_physical_units_are_refused_not_run_forever() {
    // Fault: dt underflowed to 0, the velocity unit was infinite, and the slice plot never ended.
    let tmp = tempfile::tempdir().unwrap();
    let o = tmp.path().join("out");
    let (code, _, err) = thelma(&[
        "run",
        "--size",
        "8",
        "--steps",
        "1",
        "--backend",
        "cpu",
        "--phys-length",
        "1e-300",
        "--phys-velocity",
        "1e300",
        "--phys-viscosity",
        "1",
        "-o",
        o.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.starts_with("error: --phys-velocity:"), "{err}");
    assert!(!o.exists());
    // The same in a case file names the key and its line.
    let case = tmp.path().join("units.toml");
    std::fs::write(
        &case,
        "[domain]\nsize = [8, 8, 8]\n\n[units]\nlength = 1e-300\nvelocity = 1e300\nviscosity = 1.0\n",
    )
    .unwrap();
    let (code, _, err) = thelma(&[
        "run",
        "--config",
        case.to_str().unwrap(),
        "--steps",
        "1",
        "--backend",
        "cpu",
        "-o",
        o.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("units.toml line 6: units.velocity:"), "{err}");
    assert!(!o.exists());
}

/// Every line of `err` is one error line naming `flag`, and nothing panicked.
fn refused(args: &[&str], flag: &str) {
    let (code, out, err) = thelma(args);
    assert_eq!(code, 2, "{args:?}: exit {code}\n{out}{err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(err.contains(flag), "{args:?} does not name {flag}: {err}");
}

#[test]
fn bench_arguments_are_checked_before_anything_is_allocated() {
    // Faults: panics in the copy loop and in hwloc's core shares, aborts on allocation, a thread per
    // requested thread; all now one line naming the option, exit 2.
    let cpu = ["bench", "--backend", "cpu", "--steps", "1", "--warmup", "0"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        cpu.iter().copied().chain(extra.iter().copied()).collect()
    };
    for (extra, flag) in [
        (&["--bandwidth-mib", "0"][..], "--bandwidth-mib"),
        (
            &["--bandwidth-mib", "17592186044416"][..],
            "--bandwidth-mib",
        ),
        (&["--devices", "5,"][..], "--devices"),
        (&["--devices", "0,5"][..], "--devices"),
        (
            &["--slabs-per-device", "100000000000"][..],
            "--slabs-per-device",
        ),
        (&["--slabs-per-device", "0"][..], "--slabs-per-device"),
        (&["--grid", "2,0,1"][..], "--grid"),
        (&["--grid", "64,64,64"][..], "--grid"),
        (&["--grid", "2,2"][..], "--grid"),
        (
            &["--grid", "2,1,1", "--streaming", "in-place"][..],
            "--grid",
        ),
        (&["--sizes", "2000"][..], "--sizes"),
        (&["--sizes", "100000000"][..], "--sizes"),
        (&["--sizes", "2"][..], "--sizes"),
        (&["--sizes", "-1"][..], "--sizes"),
        (&["--threads", "100000"][..], "--threads"),
        (&["--warmup", "-1"][..], "--warmup"),
        (&["--block", "-3"][..], "--block"),
    ] {
        refused(&with(extra), flag);
    }
}

#[test]
fn comm_bench_arguments_are_checked_before_threads_start() {
    // Faults: 100,000 devices panicked inside thread::scope and then hung; ℓ = 2^64 − 1 was taken;
    // a warm-up overflow was blamed on --iterations.
    let cpu = [
        "comm-bench",
        "--backend",
        "cpu",
        "--iterations",
        "5",
        "--edge",
        "8",
    ];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        cpu.iter().copied().chain(extra.iter().copied()).collect()
    };
    for (extra, flag) in [
        (&["--devices", "100000"][..], "--devices"),
        (
            &["--domain-edge", "18446744073709551615"][..],
            "--domain-edge",
        ),
        (&["--domain-edge", "0"][..], "--domain-edge"),
        (&["--warmup", "4294967295"][..], "--warmup"),
        (&["--warmup", "-1"][..], "--warmup"),
        (&["--arrays", "-2"][..], "--arrays"),
    ] {
        refused(&with(extra), flag);
    }
    // Asking for CUDA where there is none is bad input, as for `run` and `bench`.
    if thelma_compute::cuda::device_count().is_err() {
        refused(&["comm-bench", "--backend", "cuda"], "--backend");
        refused(&["bench", "--backend", "cuda"], "--backend");
    }
}

#[test]
fn refused_input_leaves_no_output_folder() {
    // Faults: a damaged checkpoint or a --steps before the checkpoint, refused after the folder was
    // made; a geometry error on the CPU module (then a palette overflow) exited 1 and left an empty
    // folder.
    let tmp = tempfile::tempdir().unwrap();
    let new = tmp.path().join("new");
    let n = new.to_str().unwrap();

    let damaged = tmp.path().join("damaged");
    std::fs::create_dir_all(&damaged).unwrap();
    std::fs::write(damaged.join("checkpoint.thelma"), b"THELMACP garbage").unwrap();
    refused(
        &["run", "--resume", damaged.to_str().unwrap(), "-o", n],
        "--resume",
    );
    assert!(!new.exists(), "a damaged checkpoint left {n}");

    let good = tmp.path().join("good");
    let (code, _, err) = thelma(&[
        "run",
        "--size",
        "8",
        "--steps",
        "10",
        "--checkpoint-every",
        "10",
        "--backend",
        "cpu",
        "--no-vtk",
        "--no-images",
        "-q",
        "-o",
        good.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    refused(
        &[
            "run",
            "--resume",
            good.to_str().unwrap(),
            "--steps",
            "5",
            "-o",
            n,
        ],
        "--steps",
    );
    assert!(!new.exists(), "--steps before the checkpoint left {n}");

    // A geometry the slabs' builder refuses (once a palette overflow, which two-byte indices made
    // unreachable for small domains): two pressure outlets of different density meeting at an edge.
    let case = tmp.path().join("outlets.toml");
    std::fs::write(
        &case,
        "[domain]\ncase = \"box\"\nsize = [12, 10, 8]\n[physics]\nviscosity = 0.05\n\
         [[boundary]]\nface = \"x+\"\nkind = \"pressure\"\ndensity = 1.0\n\
         [[boundary]]\nface = \"y+\"\nkind = \"pressure\"\ndensity = 1.01\n",
    )
    .unwrap();
    refused(
        &[
            "run",
            "--config",
            case.to_str().unwrap(),
            "--steps",
            "1",
            "--backend",
            "cpu",
            "-o",
            &format!("{n}/deeper"),
        ],
        "--config",
    );
    assert!(!new.exists(), "a refused geometry left {n}");
}

#[test]
fn a_case_without_fluid_or_with_degenerate_edges_is_refused() {
    // Faults: an obstacle covering everything ran and reported `drift NaN`; 2³ and 3³ cavities ran
    // and were compared with the 3D reference.
    let tmp = tempfile::tempdir().unwrap();
    let o = tmp.path().join("out");
    let case = tmp.path().join("solid.toml");
    std::fs::write(
        &case,
        "[domain]\nsize = [8, 8, 8]\nobstacles = [{ shape = \"box\", min = [0, 0, 0], max = [8, 8, 8] }]\n",
    )
    .unwrap();
    refused(
        &[
            "run",
            "--config",
            case.to_str().unwrap(),
            "--steps",
            "1",
            "--backend",
            "cpu",
            "-o",
            o.to_str().unwrap(),
        ],
        "no fluid",
    );
    for size in ["2", "3", "3,8,8"] {
        refused(
            &[
                "run",
                "--size",
                size,
                "--steps",
                "1",
                "--backend",
                "cpu",
                "-o",
                o.to_str().unwrap(),
            ],
            "--size",
        );
    }
    assert!(!o.exists());
}

#[test]
fn messages_name_what_the_user_wrote() {
    let tmp = tempfile::tempdir().unwrap();
    let o = tmp.path().join("out");
    let o = o.to_str().unwrap();
    // A lattice viscosity that overflows τ is the viscosity's fault, not the Reynolds number's.
    refused(&["run", "--viscosity", "1e308", "-o", o], "--viscosity");
    // Negative numbers reach the option's own parser.
    refused(&["run", "--threads", "-1", "-o", o], "--threads");
    refused(&["run", "--devices", "-1", "-o", o], "--devices");
    // A bad value in a case file is named by its key and line, not by a flag never typed.
    let case = tmp.path().join("case.toml");
    std::fs::write(
        &case,
        "# a comment\n[domain]\nsize = [8, 8, 8]\n\n[physics]\nlid_speed = 0.1\nreynolds = 0.0\n",
    )
    .unwrap();
    let (code, _, err) = thelma(&["run", "--config", case.to_str().unwrap(), "-o", o]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("case.toml line 7: physics.reynolds:") && !err.contains("--re"),
        "{err}"
    );
    // ... and a flag that overrides the file is named as the flag.
    let (_, _, err) = thelma(&[
        "run",
        "--config",
        case.to_str().unwrap(),
        "--re",
        "-4",
        "-o",
        o,
    ]);
    assert!(err.starts_with("error: --re:"), "{err}");
    // Rust's type names stay out of the messages.
    std::fs::write(&case, "[run]\nsteps = -3\n").unwrap();
    let (code, _, err) = thelma(&["run", "--config", case.to_str().unwrap(), "-o", o]);
    assert_eq!(code, 2, "{err}");
    assert!(
        !err.contains("u64") && !err.contains("usize") && err.contains("line 2"),
        "{err}"
    );
    // `--devices 0` says what a lone id looks like; `cuda:0` is GPU 0.
    let (_, _, err) = thelma(&["run", "--devices", "0", "-o", o]);
    assert!(err.contains("cuda:0") && err.contains("`0,`"), "{err}");
    assert!(!std::path::Path::new(o).exists());
}

#[test]
fn init_writes_a_starting_case_that_runs_and_never_overwrites() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("case.toml");
    let f = file.to_str().unwrap();
    let (code, out, err) = thelma(&["init", f]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("thelma run --config"), "{out}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("[physics]") && text.contains('#'));
    refused(&["init", f], "already exists");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    let o = tmp.path().join("out");
    let (code, _, err) = thelma(&[
        "run",
        "--config",
        f,
        "--size",
        "8",
        "--steps",
        "2",
        "--backend",
        "cpu",
        "-q",
        "-o",
        o.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn the_summary_says_why_the_run_stopped_and_marks_unconverged_validation() {
    let tmp = tempfile::tempdir().unwrap();
    let o = tmp.path().join("out");
    // 16³ at Re = 1000 is the reference case; 30 steps are far from its steady state.
    let (code, out, err) = thelma(&[
        "run",
        "--size",
        "16",
        "--steps",
        "30",
        "--backend",
        "cpu",
        "--no-vtk",
        "-o",
        o.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("stopped: reached its --steps"), "{out}");
    assert!(out.contains("NOT CONVERGED"), "{out}");
    assert_eq!(summary(&o)["stop_reason"], "steps");
    let (code, out, err) = thelma(&[
        "run",
        "--size",
        "8",
        "--max-steps",
        "200",
        "--check-every",
        "100",
        "--tolerance",
        "1e-12",
        "--backend",
        "cpu",
        "--no-vtk",
        "--no-images",
        "-o",
        o.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("stopped: hit --max-steps"), "{out}");
    assert_eq!(summary(&o)["stop_reason"], "max_steps");
}

/// With f16 storage a convergence run whose tolerance lies below the storage's rounding stops when
/// the change between two checks falls to that rounding, and says so; the same run in f32 goes on
/// to --max-steps.
#[test]
fn an_f16_run_stops_at_its_storages_resolution() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |precision: &str| {
        let o = tmp.path().join(precision);
        let (code, out, err) = thelma(&[
            "run",
            "--size",
            "24",
            "--re",
            "100",
            "--precision",
            precision,
            "--tolerance",
            "1e-9",
            "--max-steps",
            "9000",
            "--backend",
            "cpu",
            "--no-vtk",
            "--no-images",
            "-o",
            o.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
        (out, summary(&o))
    };
    let (out, s) = run("f16");
    assert!(
        out.contains("converged to the storage's resolution"),
        "{out}"
    );
    assert_eq!(s["stop_reason"], "resolution", "{s}");
    assert_eq!(s["converged"], true);
    let steps = s["steps"].as_u64().unwrap();
    assert!(steps > 1000 && steps < 9000, "{steps}");
    let (_, s) = run("f32");
    assert_eq!(s["stop_reason"], "max_steps", "{s}");
}

#[test]
fn a_diverged_run_writes_its_summary_too() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, _, err) = thelma(&[
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
    assert_eq!(code, 3, "{err}");
    let s = summary(tmp.path());
    assert_eq!(s["stop_reason"], "diverged", "{s}");
    assert!(s["steps"].as_u64().unwrap() > 0);
}

#[test]
fn devices_without_a_gpu_points_to_the_cpu_backend() {
    if thelma_compute::cuda::device_count().is_ok() {
        return;
    }
    let (code, out, _) = thelma(&["devices"]);
    assert_eq!(code, 0);
    assert!(out.contains("--backend cpu"), "{out}");
}

#[test]
fn forces_and_probes_run_from_a_case_file_and_bad_ones_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let o = tmp.path().join("out");
    let base = "[domain]\ncase = \"box\"\nsize = [16, 10, 10]\nperiodic = [true, false, false]\n\
                obstacles = [{ shape = \"cylinder\", centre = [6.0, 4.5, 0.0], axis = [0, 0, 1], radius = 2.0 }]\n\
                [physics]\nviscosity = 0.05\nforce = [1e-5, 0, 0]\n[run]\nsteps = 40\n";
    let good = tmp.path().join("good.toml");
    std::fs::write(
        &good,
        format!(
            "{base}[forces]\nevery = 10\narea = 10.0\nvelocity = 0.01\n\
             [[probe]]\nat = [12.0, 4.0, 5.0]\nname = \"wake\"\n[output]\nprobe_every = 20\n"
        ),
    )
    .unwrap();
    let (code, out, err) = run_on_cpu(&good, &o);
    assert_eq!(code, 0, "{out}{err}");
    let forces = std::fs::read_to_string(o.join("forces.csv")).unwrap();
    assert_eq!(forces.lines().count(), 1 + 5, "{forces}");
    assert!(forces.starts_with("step,time,body0_fx,body0_fy,body0_fz,body0_cd,body0_cl\n"));
    let probes = std::fs::read_to_string(o.join("probes.csv")).unwrap();
    assert_eq!(probes.lines().count(), 1 + 3, "{probes}");
    let summary = std::fs::read_to_string(o.join("summary.json")).unwrap();
    assert!(
        summary.contains("\"forces\"") && summary.contains("\"coefficients\""),
        "{summary}"
    );
    assert!(o.join("forces.png").exists());

    for (extra, says) in [
        ("[[probe]]\nat = [6.0, 4.0, 5.0]\n", "lies in an obstacle"),
        ("[[probe]]\nat = [3.0, 12.0, 5.0]\n", "outside the domain"),
        ("[forces]\nevery = 10\narea = 10.0\n", "forces.area"),
        (
            "[forces]\nevery = 10\narea = -1.0\nvelocity = 0.1\n",
            "forces.area",
        ),
    ] {
        let bad = tmp.path().join("bad.toml");
        let new = tmp.path().join("new");
        std::fs::write(&bad, format!("{base}{extra}")).unwrap();
        let args = [
            "run",
            "--config",
            bad.to_str().unwrap(),
            "--backend",
            "cpu",
            "-o",
            new.to_str().unwrap(),
        ];
        let (code, _, err) = thelma(&args);
        assert_eq!(code, 2, "{extra}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{extra}: {err}");
        assert!(err.contains(says), "{extra}: {err}");
        assert!(!new.exists(), "{extra} left an output folder");
    }
    let none = tmp.path().join("none.toml");
    std::fs::write(
        &none,
        "[domain]\ncase = \"box\"\nsize = [8, 8, 8]\n[physics]\nviscosity = 0.05\n[forces]\nevery = 5\n",
    )
    .unwrap();
    refused(&["run", "--config", none.to_str().unwrap()], "forces.every");
}

/// plotters' `bitmap_encoder` feature pulled the `image` crate (with a JPEG decoder) into every
/// build, though the plots are drawn into a buffer and written with `png`: the lock file is the
/// one place that lists what a build compiles, so the test reads it.
#[test]
fn the_lock_file_holds_no_image_crate() {
    let lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock");
    let text = std::fs::read_to_string(&lock).expect("the workspace's Cargo.lock is readable");
    assert!(
        text.contains("name = \"png\""),
        "not the lock file: {lock:?}"
    );
    for unused in ["image", "jpeg-decoder", "color_quant"] {
        assert!(
            !text.contains(&format!("name = \"{unused}\"\n")),
            "Cargo.lock holds `{unused}`: is plotters' `bitmap_encoder` feature back on?"
        );
    }
}

#[test]
fn boundaries_that_cannot_hold_are_refused_in_one_line_with_nothing_written() {
    // Each refusal names the key and the face; each comes before the output folder is made.
    let tmp = tempfile::tempdir().unwrap();
    let new = tmp.path().join("new");
    let box_y_periodic =
        "[domain]\ncase = \"box\"\nsize = [16, 8, 8]\nperiodic = [false, true, false]\n\
                          [physics]\nviscosity = 0.05\n";
    let inlet = "[[boundary]]\nface = \"x-\"\nkind = \"velocity\"\nvelocity = [0.05, 0, 0]\n";
    for (name, text, says) in [
        (
            "periodic",
            format!("{box_y_periodic}[[boundary]]\nface = \"y+\"\nkind = \"free-slip\"\n"),
            "boundary: face y+: the y axis is periodic",
        ),
        (
            "twice",
            format!("{box_y_periodic}{inlet}[[boundary]]\nface = \"x-\"\nkind = \"pressure\"\n"),
            "boundary: face x-: listed twice",
        ),
        (
            "lid",
            "[domain]\nsize = [8, 8, 8]\n[[boundary]]\nface = \"z+\"\nvelocity = [0.1, 0, 0]\n"
                .to_string(),
            "boundary: face z+: is the cavity's lid",
        ),
        (
            "fast",
            format!(
                "{box_y_periodic}[[boundary]]\nface = \"x-\"\nkind = \"velocity\"\nvelocity = [0.45, 0, 0]\n"
            ),
            "boundary: face x-: velocity",
        ),
        (
            "both",
            format!(
                "{box_y_periodic}[[boundary]]\nface = \"x+\"\nkind = \"pressure\"\ndensity = 1.0\npressure = 0.0\n"
            ),
            "boundary: face x+: give `density` or `pressure`, not both",
        ),
    ] {
        let case = tmp.path().join(format!("{name}.toml"));
        std::fs::write(&case, text).unwrap();
        refused(
            &[
                "run",
                "--config",
                case.to_str().unwrap(),
                "--steps",
                "1",
                "--backend",
                "cpu",
                "-o",
                new.to_str().unwrap(),
            ],
            says,
        );
        assert!(!new.exists(), "{name}: a refused boundary left {new:?}");
    }
    // The fast inlet's message says what the limit is.
    let (_, _, err) = thelma(&[
        "run",
        "--config",
        tmp.path().join("fast.toml").to_str().unwrap(),
        "-o",
        new.to_str().unwrap(),
    ]);
    assert!(err.contains("must stay below 0.4"), "{err}");
}

/// summary.json's mean force is forces.csv's columns averaged over the second half of the samples
/// (the last 4 of 7 here, steps 30 to 60, while the body force spins the flow up, so that every
/// row differs and a mean over other rows, or a sum, or a stale sample, misses it), to rounding;
/// the coefficients likewise.
#[test]
fn the_mean_force_in_the_summary_is_the_mean_of_the_second_half_of_forces_csv() {
    let tmp = tempfile::tempdir().unwrap();
    let o = tmp.path().join("out");
    let case = tmp.path().join("case.toml");
    std::fs::write(
        &case,
        "[domain]\ncase = \"box\"\nsize = [16, 10, 10]\nperiodic = [true, false, false]\n\
         obstacles = [{ shape = \"cylinder\", centre = [6.0, 4.5, 0.0], axis = [0, 0, 1], radius = 2.0 }]\n\
         [physics]\nviscosity = 0.05\nforce = [1e-5, 0, 0]\n[run]\nsteps = 60\n\
         [forces]\nevery = 10\narea = 10.0\nvelocity = 0.01\n",
    )
    .unwrap();
    let (code, out, err) = thelma(&[
        "run",
        "--config",
        case.to_str().unwrap(),
        "--backend",
        "cpu",
        "--no-vtk",
        "--no-images",
        "-o",
        o.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let csv = std::fs::read_to_string(o.join("forces.csv")).unwrap();
    let rows: Vec<Vec<f64>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(|v| v.parse().unwrap()).collect())
        .collect();
    let steps: Vec<f64> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(steps, [0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0], "{csv}");
    let half = &rows[rows.len() / 2..];
    let mean = |col: usize| half.iter().map(|r| r[col]).sum::<f64>() / half.len() as f64;
    let s = summary(&o);
    let m = &s["forces"][0];
    assert_eq!(m["body"], 0, "{m}");
    assert_eq!(m["samples"], 4, "{m}");
    assert_eq!(
        (m["from_step"].as_u64(), m["to_step"].as_u64()),
        (Some(30), Some(60))
    );
    // Columns: step, time, Fx, Fy, Fz, C_D, C_L.
    let got = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("{m}"));
    for (a, col) in [(0, 2), (1, 3), (2, 4)] {
        let (want, have) = (mean(col), got(&m["force"][a]));
        assert!(
            (have - want).abs() <= 1e-12 * want.abs().max(1e-30),
            "force[{a}]: summary {have:e}, forces.csv's mean {want:e}"
        );
    }
    for (k, col) in [(0, 5), (1, 6)] {
        let (want, have) = (mean(col), got(&m["coefficients"][k]));
        assert!(
            (have - want).abs() <= 1e-12 * want.abs().max(1e-30),
            "coefficient {k}: summary {have:e}, forces.csv's mean {want:e}"
        );
    }
    // The drag grows with the flow: the mean lies strictly between the first and last averaged.
    let (first, last, drag) = (half[0][2], half[half.len() - 1][2], mean(2));
    assert!(first < drag && drag < last, "{first} < {drag} < {last}");
}

/// Every line `thelma run`, `bench` and `devices` print fits a terminal of 100 columns (counted
/// in characters: `dx²` is one column, three bytes). The units, lattice and bandwidth lines once ran
/// to 115–200.
#[test]
fn printed_lines_fit_a_hundred_columns() {
    let tmp = tempfile::tempdir().unwrap();
    let o = tmp.path().join("out");
    let case = tmp
        .path()
        .join("a-channel-case-with-a-long-name-as-users-give-them.toml");
    std::fs::write(
        &case,
        "[domain]\ncase = \"box\"\nsize = [24, 12, 10]\n\
         [[boundary]]\nface = \"x-\"\nkind = \"velocity\"\nvelocity = [0.03, 0.0, 0.0]\n\
         [[boundary]]\nface = \"x+\"\nkind = \"pressure\"\ndensity = 1.0\n\
         [physics]\nviscosity = 0.05\n",
    )
    .unwrap();
    let o = o.to_str().unwrap();
    let bench = ["bench", "--backend", "cpu", "--steps", "2", "--warmup", "1"];
    let runs: [Vec<&str>; 4] = [
        // Physical units near τ = ½: the units lines and the warning are printed too.
        vec![
            "run",
            "--backend",
            "cpu",
            "--size",
            "16",
            "--steps",
            "20",
            "--check-every",
            "10",
            "--phys-length",
            "0.1",
            "--phys-velocity",
            "1",
            "--phys-viscosity",
            "1e-4",
            "-o",
            o,
        ],
        [&bench[..], &["--sizes", "12,16", "--devices", "2"]].concat(),
        // A probe this small spreads widely: its warning is part of what is checked.
        [
            &bench[..],
            &["--case", case.to_str().unwrap(), "--bandwidth-mib", "1"],
        ]
        .concat(),
        vec!["devices"],
    ];
    for args in runs {
        let (code, out, err) = thelma(&args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        assert!(out.lines().count() > 1, "{args:?}: {out}");
        for line in out.lines().chain(err.lines()) {
            assert!(
                line.chars().count() <= 100,
                "{args:?}: {} columns: {line}",
                line.chars().count()
            );
        }
        if args[0] == "run" {
            assert!(out.contains("units: dx = 6.25e-03 m"), "{out}");
            assert!(out.contains("relaxation: nu = 1.6e-03"), "{out}");
        }
    }
}

/// The shared libraries an ELF64 little-endian file names as `DT_NEEDED`: its section headers
/// lead to the dynamic section (type `SHT_DYNAMIC`), whose `DT_NEEDED` entries are offsets into
/// the string table its `sh_link` names. `None` for a file this parser does not understand.
fn needed_libraries(elf: &[u8]) -> Option<Vec<String>> {
    let u16_at = |o: usize| Some(u16::from_le_bytes(elf.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(elf.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(elf.get(o..o + 8)?.try_into().ok()?));
    // "\x7fELF", 64-bit, little-endian.
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let (shoff, shentsize, shnum) = (
        u64_at(0x28)? as usize,
        u16_at(0x3a)? as usize,
        u16_at(0x3c)? as usize,
    );
    let section = |i: usize| shoff + i * shentsize;
    let dynamic = (0..shnum).find(|&i| u32_at(section(i) + 4) == Some(6))?;
    let (off, size) = (
        u64_at(section(dynamic) + 0x18)? as usize,
        u64_at(section(dynamic) + 0x20)? as usize,
    );
    let strtab = u32_at(section(dynamic) + 0x28)? as usize;
    let strings = u64_at(section(strtab) + 0x18)? as usize;
    let mut needed = Vec::new();
    for entry in (off..off + size).step_by(16) {
        match u64_at(entry)? {
            0 => break,
            1 => {
                let name = &elf.get(strings + u64_at(entry + 8)? as usize..)?;
                let end = name.iter().position(|&b| b == 0)?;
                needed.push(String::from_utf8_lossy(&name[..end]).into_owned());
            }
            _ => {}
        }
    }
    Some(needed)
}

/// hwloc is linked statically and its udev calls are stubbed, so that the binary runs on a machine
/// without libhwloc or libudev: a copy of it used to stop at the loader there. The test reads the
/// binary's dynamic section (a small ELF parser, not a search of its bytes, so that a string in the
/// program cannot pass for a library or hide one).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn the_binary_needs_neither_libhwloc_nor_libudev() {
    // Where the shared hwloc is installed, the parser must find the libudev it needs: it then
    // reads what the test looks for.
    if let Ok(shared) = std::fs::read("/usr/lib/x86_64-linux-gnu/libhwloc.so.15") {
        let needed = needed_libraries(&shared).expect("libhwloc.so.15 parses");
        assert!(needed.iter().any(|l| l == "libudev.so.1"), "{needed:?}");
    }
    let elf = std::fs::read(env!("CARGO_BIN_EXE_thelma")).expect("the binary is readable");
    let needed =
        needed_libraries(&elf).expect("the binary is an ELF64 file with a dynamic section");
    assert!(
        needed.iter().any(|l| l.starts_with("libc.so")),
        "the parser read no libc among {needed:?}"
    );
    for lib in &needed {
        assert!(
            !lib.starts_with("libhwloc.so") && !lib.starts_with("libudev.so"),
            "the binary needs {lib} (all: {needed:?})"
        );
    }
}
