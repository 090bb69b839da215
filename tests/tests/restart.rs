//! Checkpoint and restart: a run of 2N steps equals a run of N steps, a resume from its checkpoint,
//! and N more, bit for bit, on the same or a different device count. One test body serves every
//! backend; the CUDA cases run on a GPU host (`--ignored`). Beside them, on the same heated case,
//! a probe's temperature.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::Parser;
use thelma_cli::app::{run_case_from, Outcome};
use thelma_cli::checkpoint;
use thelma_cli::cli::RunArgs;
use thelma_tests::{per_module, Module};

/// `thelma run` arguments, parsed exactly as the binary parses them.
#[derive(Parser)]
struct Run {
    #[command(flatten)]
    args: RunArgs,
}

/// Runs `thelma run ARGS` in-process (without printing).
fn run(args: &[&str]) -> anyhow::Result<Outcome> {
    let parsed = Run::try_parse_from(std::iter::once("thelma").chain(args.iter().copied()))?;
    let resume = parsed.args.resume.clone();
    let (case, _) = parsed.args.into_case()?;
    run_case_from(
        &case,
        resume.as_deref(),
        Arc::new(AtomicBool::new(false)),
        &mut |_| {},
    )
}

/// Resumes the run checkpointed in `dir` up to step `steps` on `devices` devices of `backend`.
fn resume(dir: &Path, steps: u64, devices: usize, backend: &str) -> Outcome {
    let (steps, devices) = (steps.to_string(), devices.to_string());
    run(&[
        "--resume",
        s(dir),
        "--steps",
        &steps,
        "--devices",
        &devices,
        "--backend",
        backend,
    ])
    .unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temporary path")
}

/// Straight 2N steps against N steps, resume, N more: the final checkpoints (all populations) and
/// the final fields must be identical.
fn restart_is_bit_exact(backend: &str, first: usize, resumed: usize, numerics: &[&str]) {
    const N: u64 = 40;
    let tmp = tempfile::tempdir().unwrap();
    let (straight, split) = (tmp.path().join("straight"), tmp.path().join("split"));
    let common = |out: &Path, steps: u64, devices: usize| -> Vec<String> {
        let mut a: Vec<String> = [
            "--size",
            "12,10,14",
            "--re",
            "100",
            "--backend",
            backend,
            "--checkpoint-every",
            &N.to_string(),
            "--watchdog-every",
            "7",
            "--check-every",
            "15",
            "--steps",
            &steps.to_string(),
            "--devices",
            &devices.to_string(),
            "-o",
            s(out),
        ]
        .iter()
        .map(|x| x.to_string())
        .collect();
        a.extend(numerics.iter().map(|x| x.to_string()));
        a
    };
    let args = common(&straight, 2 * N, first);
    let a = run(&args.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();

    let args = common(&split, N, first);
    run(&args.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
    assert_eq!(checkpoint::read_header(&split).unwrap().step, N);
    let b = resume(&split, 2 * N, resumed, backend);

    assert_eq!(a.summary.steps, 2 * N);
    assert_eq!(b.summary.steps, 2 * N);
    let (ca, cb) = (
        checkpoint::load(&straight).unwrap(),
        checkpoint::load(&split).unwrap(),
    );
    assert_eq!(ca.header.step, 2 * N);
    assert_eq!(cb.header.step, 2 * N);
    assert!(
        ca.populations == cb.populations,
        "populations differ after a restart ({first} → {resumed} devices)"
    );
    assert_eq!(a.fields, b.fields);
    // The flow moved: a restart of a fluid at rest would prove nothing.
    assert!(a.fields.ux.iter().any(|u| u.abs() > 1e-3));
}

/// Every restart case on module `m`: the same device count; onto more devices; onto fewer in f64;
/// onto more in f16 storage, onto fewer in f16c; in place, in f32 and f16;
/// with TRT, an eddy viscosity and a force. GPUs are physical, so a host with one GPU resumes onto
/// the same count (several slabs on one GPU are `partition.rs`'s).
fn restart_cases(m: Module) {
    let d = |k| m.devices_up_to(k);
    restart_is_bit_exact(m.name(), d(1), d(1), &[]);
    restart_is_bit_exact(m.name(), d(2), d(3), &["--collision", "bgk"]);
    restart_is_bit_exact(m.name(), d(3), d(1), &["--precision", "f64"]);
    restart_is_bit_exact(m.name(), d(2), d(3), &["--precision", "f16"]);
    restart_is_bit_exact(m.name(), d(3), d(2), &["--precision", "f16c"]);
    // One lattice in place: checkpoints and watchdog checks at odd steps read it swapped back.
    restart_is_bit_exact(m.name(), d(2), d(3), &["--streaming", "in-place"]);
    restart_is_bit_exact(
        m.name(),
        d(1),
        d(2),
        &["--streaming", "in-place", "--precision", "f16"],
    );
    restart_is_bit_exact(
        m.name(),
        d(2),
        d(1),
        &[
            "--collision",
            "trt",
            "--smagorinsky",
            "0.1",
            "--force",
            "1e-6,0,0",
        ],
    );
}

per_module!(restart_cases => restart_is_bit_exact_on_the_cpu_module,
    restart_is_bit_exact_on_the_cuda_module);

#[test]
fn a_resume_refuses_changes_to_the_simulation_and_damaged_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    run(&[
        "--size",
        "8",
        "--steps",
        "10",
        "--checkpoint-every",
        "10",
        "--backend",
        "cpu",
        "-o",
        s(&out),
    ])
    .unwrap();
    let usage = |args: &[&str]| -> String {
        let e = run(args).err().expect("refused");
        let u = e
            .downcast_ref::<thelma_cli::app::UsageError>()
            .unwrap_or_else(|| panic!("not a usage error: {e:#}"));
        let m = u.to_string();
        assert_eq!(m.lines().count(), 1, "{m}");
        m
    };
    for (flag, value) in [
        ("--size", "9"),
        ("--re", "400"),
        ("--lid-speed", "0.05"),
        ("--collision", "bgk"),
        ("--precision", "f64"),
    ] {
        let m = usage(&["--resume", s(&out), flag, value, "--steps", "20"]);
        assert!(m.starts_with(flag), "{m}");
    }
    let m = usage(&["--resume", s(&out), "--steps", "5"]);
    assert!(m.starts_with("--steps") && m.contains("step 10"), "{m}");
    let m = usage(&["--resume", s(&tmp.path().join("nowhere"))]);
    assert!(m.starts_with("--resume") && m.contains("nowhere"), "{m}");
    // A damaged file is refused when loaded, before the run starts: a bit of the populations
    // (the blocks begin after 20 bytes).
    let file = out.join(checkpoint::FILE_NAME);
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[60] ^= 1;
    std::fs::write(&file, bytes).unwrap();
    let m = usage(&["--resume", s(&out), "--steps", "20"]);
    assert!(m.starts_with("--resume") && m.contains("checksum"), "{m}");
}

#[test]
fn a_stopped_run_checkpoints_where_it_stopped_and_resumes_bit_exact() {
    use std::sync::atomic::Ordering;
    let tmp = tempfile::tempdir().unwrap();
    let (straight, stopped) = (tmp.path().join("straight"), tmp.path().join("stopped"));
    let case = |out: &Path| -> Vec<String> {
        [
            "--size",
            "10,12,9",
            "--re",
            "50",
            "--backend",
            "cpu",
            "--devices",
            "2",
            "--steps",
            "90",
            "--check-every",
            "20",
            "--checkpoint-every",
            "1000",
            "-o",
            s(out),
        ]
        .iter()
        .map(|x| x.to_string())
        .collect()
    };
    let args = case(&straight);
    let a = run(&args.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();

    // Ctrl-C at the first progress line: the run ends after the current step, with a checkpoint.
    let args = case(&stopped);
    let parsed =
        Run::try_parse_from(std::iter::once("thelma").chain(args.iter().map(String::as_str)))
            .unwrap();
    let (c, _) = parsed.args.into_case().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let first = run_case_from(&c, None, stop, &mut |e| {
        if matches!(e, thelma_cli::app::Event::Progress { .. }) {
            flag.store(true, Ordering::SeqCst);
        }
    })
    .unwrap();
    let at = checkpoint::read_header(&stopped).unwrap().step;
    assert_eq!(at, first.summary.steps);
    assert!(at > 20 && at < 90, "stopped at {at}");

    // Started from elsewhere, the resumed run still writes beside its checkpoint.
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    // Every other test here uses absolute paths, so changing the folder for a moment is harmless.
    let before = std::env::current_dir().unwrap();
    std::env::set_current_dir(&elsewhere).unwrap();
    let b = run(&["--resume", s(&stopped)]);
    std::env::set_current_dir(before).unwrap();
    let b = b.unwrap();
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    assert_eq!(b.summary.steps, 90);
    assert_eq!(a.fields, b.fields);
    assert!(
        checkpoint::load(&straight).unwrap().populations
            == checkpoint::load(&stopped).unwrap().populations
    );
}

/// A heated cavity: the lid drives the flow, a warm wall (x−) and a cool one (x+) with buoyancy
/// along z, so both lattices move and push on each other.
const HEATED: &str = "[domain]\nsize = [10, 8, 12]\n[physics]\nreynolds = 100.0\n\
    [thermal]\nprandtl = 0.71\nbeta = 0.5\ngravity = [0.0, 0.0, -1e-3]\nt0 = 20.0\n\
    [[boundary]]\nface = \"x-\"\ntemperature = 21.0\n\
    [[boundary]]\nface = \"x+\"\ntemperature = 19.5\n\
    [output]\naverage_from = 10\naverage_every = 3\n";

/// The twin of [`restart_is_bit_exact`] with the temperature lattice: its populations are in the
/// checkpoint with the flow's, so 2N steps equal N, a resume onto `resumed` slabs and N more, bit
/// for bit, on `backend` in storage `precision` (16 bits: the populations under the case's store
/// scale); so do the time averages it samples across the checkpoint.
fn thermal_restart_is_bit_exact(backend: &str, first: usize, resumed: usize, precision: &str) {
    const N: u64 = 30;
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("heated.toml");
    std::fs::write(&config, HEATED).unwrap();
    let (straight, split) = (tmp.path().join("straight"), tmp.path().join("split"));
    let go = |out: &Path, steps: u64| {
        let (steps, devices) = (steps.to_string(), first.to_string());
        run(&[
            "--config",
            s(&config),
            "--backend",
            backend,
            "--checkpoint-every",
            "30",
            "--steps",
            &steps,
            "--devices",
            &devices,
            "--precision",
            precision,
            "-o",
            s(out),
        ])
        .unwrap()
    };
    let a = go(&straight, 2 * N);
    go(&split, N);
    let header = checkpoint::read_header(&split).unwrap();
    assert_eq!((header.step, header.stencil.as_str()), (N, "D3Q19+D3Q7"));
    assert_eq!(header.precision.name(), precision);
    // Steps 10, 13, …, 28 sampled before it.
    assert_eq!(header.means, Some(7));
    let b = resume(&split, 2 * N, resumed, backend);
    let (ca, cb) = (
        checkpoint::load(&straight).unwrap(),
        checkpoint::load(&split).unwrap(),
    );
    assert_eq!((ca.header.step, cb.header.step), (2 * N, 2 * N));
    assert!(
        ca.populations == cb.populations,
        "populations differ after a thermal restart ({first} → {resumed} slabs)"
    );
    // Steps 10, 13, …, 58: the averages' sums (ρ, u, θ) continue across the resume bit for bit.
    assert_eq!((ca.header.means, cb.header.means), (Some(17), Some(17)));
    assert_eq!(ca.means.len(), 5 * 10 * 8 * 12);
    assert!(
        ca.means == cb.means,
        "time averages differ after a thermal restart ({first} → {resumed} slabs)"
    );
    assert!(ca.means.iter().any(|v| *v != 0.0));
    assert_eq!(a.fields, b.fields);
    // Heat entered from both walls (the fields hold θ = T − t0) and the fluid moved: a restart of a
    // still, uniform state would prove nothing.
    let t = &a.fields.temperature;
    assert!(t.iter().any(|v| *v > 0.1) && t.iter().any(|v| *v < -0.1));
    assert!(a.fields.ux.iter().any(|u| u.abs() > 1e-3));

    // The flow alone cannot resume from it: its checkpoint holds the other lattices.
    let flow = Run::try_parse_from(["thelma", "--size", "10,8,12", "--backend", "cpu"]).unwrap();
    let (flow, _) = flow.args.into_case().unwrap();
    let e = run_case_from(
        &flow,
        Some(&split),
        Arc::new(AtomicBool::new(false)),
        &mut |_| {},
    )
    .err()
    .expect("refused");
    let m = e
        .downcast_ref::<thelma_cli::app::UsageError>()
        .unwrap_or_else(|| panic!("not a usage error: {e:#}"))
        .to_string();
    assert!(m.starts_with("--resume") && m.contains("D3Q19+D3Q7"), "{m}");
    assert_eq!(m.lines().count(), 1, "{m}");
}

/// Onto more and fewer devices (GPUs are physical: a host with one resumes onto the same count).
fn thermal_restarts(m: Module) {
    let d = |k| m.devices_up_to(k);
    thermal_restart_is_bit_exact(m.name(), d(1), d(3), "f32");
    thermal_restart_is_bit_exact(m.name(), d(3), d(2), "f32");
    thermal_restart_is_bit_exact(m.name(), d(3), d(2), "f16");
}

per_module!(thermal_restarts => a_thermal_restart_is_bit_exact_on_the_cpu_module,
    a_thermal_restart_is_bit_exact_on_the_cuda_module);

/// A probe of a case with a temperature lattice reads its temperature, `T = t0 + θ` in the case's
/// unit: the column `<name>_T` holds, at the last sample, the θ the run's fields report at the
/// probe's node (beside the hot wall, warmed above t0 by then).
fn a_probe_reads_the_temperature(m: Module) {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("probed.toml");
    std::fs::write(
        &config,
        format!(
            "{}probe_every = 10\n[[probe]]\nat = [0.0, 4.0, 6.0]\nname = \"hot\"\n",
            HEATED
        ),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let o = run(&[
        "--config",
        s(&config),
        "--backend",
        m.name(),
        "--steps",
        "30",
        "-o",
        s(&out),
    ])
    .unwrap();
    let text = std::fs::read_to_string(out.join("probes.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("step,time,hot_p,hot_ux,hot_uy,hot_uz,hot_T"),
        "{text}"
    );
    let last: Vec<f64> = lines
        .last()
        .unwrap()
        .split(',')
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(last[0], 30.0, "{text}");
    let want = 20.0 + o.fields.temperature[o.fields.idx(0, 4, 6)];
    assert!((last[6] - want).abs() < 1e-5, "T {} vs {want}", last[6]);
    assert!(last[6] > 20.01 && last[6] < 21.0, "{text}");
}

per_module!(a_probe_reads_the_temperature => a_probe_reads_the_temperature_on_the_cpu_module,
    a_probe_reads_the_temperature_on_the_cuda_module);

/// The VTK files of a run with time averages (the heated case samples from step 10 on) hold the
/// mean arrays from the first sample on, and leave them out before it; the summary holds the
/// Nusselt numbers `[thermal] nusselt` asks for (heat enters at the warm wall, leaves at the cool).
#[test]
fn the_vtk_files_hold_the_averages_once_sampled() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("heated.toml");
    let case = HEATED.replace("[thermal]\n", "[thermal]\nnusselt = [\"x-\", \"x+\"]\n");
    std::fs::write(&config, case).unwrap();
    let out = tmp.path().join("out");
    let o = run(&[
        "--config",
        s(&config),
        "--backend",
        "cpu",
        "--steps",
        "15",
        "--output-every",
        "5",
        "-o",
        s(&out),
    ])
    .unwrap();
    let nu: Vec<(&str, f64)> = o
        .summary
        .nusselt
        .iter()
        .map(|n| (n.face.name(), n.nusselt))
        .collect();
    assert!(
        matches!(nu.as_slice(), [("x-", a), ("x+", b)] if *a > 0.0 && *b < 0.0),
        "{nu:?}"
    );
    let names = |step: u64| {
        let bytes = std::fs::read(out.join(format!("fields_{step:08}.vti"))).unwrap();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        [
            "mean_velocity",
            "mean_pressure",
            "mean_temperature",
            "temperature",
        ]
        .map(|n| text.contains(&format!("Name=\"{n}\"")))
    };
    assert_eq!(names(5), [false, false, false, true]);
    assert_eq!(names(10), [true, true, true, true]);
    assert_eq!(names(15), [true, true, true, true]);
}

/// Sums go into a checkpoint only once a state may have been sampled: before the average's first
/// sample the file holds the populations alone, after it every slab's block holds its sums too.
#[test]
fn a_checkpoint_holds_the_sums_once_the_average_has_begun() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = thelma_core::CaseConfig::default();
    c.domain.size = [8, 6, 10];
    c.output.average_from = Some(30.0);
    let mut rt = thelma_tests::cpu_runtime(&c, 2);
    rt.set_averaging(Some(thelma_core::Averaging {
        from: 30,
        every: 10,
    }));
    let save = |rt: &mut thelma_core::Runtime| {
        let steered = checkpoint::Steered::default();
        checkpoint::save(tmp.path(), &c, rt, &steered, None).unwrap();
        checkpoint::load(tmp.path()).unwrap()
    };
    rt.run(20).unwrap();
    let early = save(&mut rt);
    assert_eq!(early.header.step, 20);
    assert_eq!(early.header.means, None);
    assert!(early.means.is_empty());
    assert_eq!(early.header.blocks.len(), 2);
    rt.run(20).unwrap();
    let late = save(&mut rt);
    rt.shutdown();
    assert_eq!(late.header.step, 40);
    assert_eq!(late.header.means, Some(2));
    assert_eq!(late.means.len(), 4 * 8 * 6 * 10);
    assert!(late.means.iter().any(|v| *v != 0.0));
    // From step 0, the first sample is the state of step `every`.
    let mut rt = thelma_tests::cpu_runtime(&c, 2);
    rt.set_averaging(Some(thelma_core::Averaging { from: 0, every: 10 }));
    rt.run(5).unwrap();
    assert_eq!(save(&mut rt).header.means, None);
    rt.run(5).unwrap();
    assert_eq!(save(&mut rt).header.means, Some(1));
    rt.shutdown();
}
