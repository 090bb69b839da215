//! The `thelma` command line: parses arguments into a case, runs it, prints what happened.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use thelma_cli::app::{run_case_from, Diverged, Event, UsageError};
use thelma_cli::bench::{run_bench, BenchArgs};
use thelma_cli::cli::RunArgs;
use thelma_results::report::{clock as clock_text, Convergence, ProgressLine};

/// thelma: lattice Boltzmann (D3Q19) fluid simulation on one or many GPUs, or on the CPU.
#[derive(Parser)]
#[command(name = "thelma", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a case: by default the lid-driven cubic cavity at Re = 1000, 48³, to steady state.
    Run(Box<RunArgs>),
    /// Inter-GPU communication microbenchmark (TheLMA §6): exchange throughput and the solver model.
    CommBench(thelma_cli::comm_bench::CommBenchArgs),
    /// List the CUDA devices: name, memory, compute capability, PCI bus id, nearest cores, peer access.
    Devices,
    /// Measure memory bandwidth and LBM throughput (MLUPS) over sizes and 1..N devices.
    Bench(BenchArgs),
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let resume = args.resume.clone();
    let (case, quiet) = args.into_case()?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        // A second Ctrl-C while stopping falls through to the default handler's exit.
        let _ = ctrlc::set_handler(move || {
            if stop.swap(true, Ordering::SeqCst) {
                std::process::exit(130);
            }
            eprintln!("interrupted: stopping after the current step and writing the outputs (Ctrl-C again to abort)");
        });
    }
    // A bar on a terminal; plain lines when the output goes to a file or a pipe.
    let mut bar: Option<ProgressBar> = None;
    let mut clock = Instant::now();
    // The previous check's (step, change), for the ETA of a run to convergence.
    let mut previous: Option<(u64, f64)> = None;
    let total_nodes: usize = case.domain.size.iter().product();
    let outcome = run_case_from(&case, resume.as_deref(), stop, &mut |e| match e {
        Event::Started {
            lattice,
            note,
            devices,
            nodes,
        } => {
            // Where hwloc could not pin a worker the run goes on unpinned: say so once, on stderr,
            // so that it shows under --quiet and in a redirected run too.
            if let Some((d, e)) = devices
                .iter()
                .find_map(|d| d.binding.as_ref().err().map(|e| (d.device, e)))
            {
                let n = devices.iter().filter(|d| d.binding.is_err()).count();
                eprintln!(
                    "warning: {n} of {} worker thread(s) run unpinned (device {d}: {e}); performance may suffer",
                    devices.len()
                );
            }
            // Valid but fragile: BGK and, less so, MRT lose stability as τ nears ½ (under-resolved
            // flow). The watchdog stops a run that diverges; this says so before it starts.
            if lattice.tau < TAU_WARN {
                eprintln!(
                    "warning: tau = {:.4} is close to 1/2: the run may diverge (use a finer grid or a lower Re)",
                    lattice.tau
                );
            }
            if quiet {
                return;
            }
            let [nx, ny, nz] = case.domain.size;
            println!(
                "thelma: {nx}x{ny}x{nz} = {nodes} nodes, {} {}, {}",
                case.numerics.collision.name(),
                case.numerics.precision.name(),
                note
            );
            println!("lattice: {lattice}");
            if let Some(u) = case.unit_scales() {
                println!(
                    "units: dx = {:.4e} m, dt = {:.4e} s per step, velocity unit dx/dt = {:.4e} m/s, viscosity unit dx²/dt = {:.4e} m²/s",
                    u.dx, u.dt, u.velocity, u.viscosity
                );
            }
            for d in devices {
                let binding = match &d.binding {
                    Ok(b) => b.to_string(),
                    Err(e) => format!("unbound ({e})"),
                };
                println!(
                    "device {:>2}: slab {} z {}..{} ({} planes), {}, {}",
                    d.device,
                    d.slab.index,
                    d.slab.z.start,
                    d.slab.z.end,
                    d.slab.nz(),
                    d.describe,
                    binding
                );
            }
            clock = Instant::now();
            // The bar draws on stderr; plain lines go to stdout. A bar only where both are a
            // terminal, so that `thelma run > log` keeps its progress lines in the log.
            if std::io::stderr().is_terminal() && std::io::stdout().is_terminal() {
                // A run to convergence has no known end: a spinner with the step count instead.
                let (len, template) = match case.run.steps {
                    Some(n) => (
                        n,
                        "{bar:30.cyan/blue} {pos}/{len} steps [{elapsed_precise}, ETA {eta}] {msg}",
                    ),
                    None => (
                        case.run.max_steps,
                        "{spinner} step {pos} [{elapsed_precise}] {msg}",
                    ),
                };
                let style = ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| ProgressStyle::default_bar());
                let b = ProgressBar::new(len).with_style(style);
                if case.run.steps.is_none() {
                    b.enable_steady_tick(std::time::Duration::from_millis(250));
                }
                bar = Some(b);
            }
        }
        Event::Progress {
            step,
            target,
            mlups,
            change,
        } => {
            if quiet {
                return;
            }
            let line = ProgressLine {
                step,
                target: case.run.steps.map(|_| target),
                nodes: total_nodes,
                mlups,
                elapsed_s: clock.elapsed().as_secs_f64(),
                change,
                convergence: previous.zip(change).map(|((s, c), _)| Convergence {
                    tolerance: case.run.tolerance,
                    previous: c,
                    interval: step - s,
                }),
                dt: case.unit_scales().map(|u| u.dt),
            };
            if let Some(c) = change {
                previous = Some((step, c));
            }
            match &bar {
                Some(b) => {
                    b.set_position(step);
                    let eta = match (line.target, line.eta_s()) {
                        (None, Some(eta)) => format!(", ETA ~{}", clock_text(eta)),
                        _ => String::new(),
                    };
                    b.set_message(format!("{}{eta}", line.message()));
                }
                None => println!("{}", line.line()),
            }
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let outcome = outcome?;
    print!("{}", outcome.summary.text());
    println!(
        "outputs in {} ({} files{})",
        case.output.dir.display(),
        outcome.summary.outputs.len(),
        if case.output.vtk {
            "; open fields.pvd in ParaView"
        } else {
            ""
        }
    );
    Ok(())
}

/// Below this relaxation time a run is warned that it may diverge (τ − ½ = 3ν: at Re = 1000 and
/// U = 0.1 that is a grid under 30 nodes).
const TAU_WARN: f64 = 0.51;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind::*;
            if matches!(
                e.kind(),
                DisplayHelp | DisplayVersion | DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            // One line: clap's first line names the option and the value.
            let text = e.to_string();
            eprintln!("{}", text.lines().next().unwrap_or("error: bad arguments"));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Run(args) => run(*args),
        Command::CommBench(args) => thelma_cli::comm_bench::run(args),
        Command::Devices => {
            print!("{}", thelma_cli::devices::report());
            Ok(())
        }
        Command::Bench(args) => run_bench(&args, &mut |line| println!("{line}")).map(|_| ()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(u) = e.downcast_ref::<UsageError>() {
                eprintln!("error: {u}");
                ExitCode::from(2)
            } else if let Some(d) = e.downcast_ref::<Diverged>() {
                eprintln!("error: {d}");
                ExitCode::from(3)
            } else {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        }
    }
}
