//! The `thelma` command line: parses arguments into a case, runs it, prints what happened.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::{Parser, Subcommand};
use thelma_cli::app::{run_case, Diverged, Event, UsageError};
use thelma_cli::bench::{run_bench, BenchArgs};
use thelma_cli::cli::RunArgs;

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
    Run(RunArgs),
    /// List the CUDA devices: name, memory, compute capability, PCI bus id, nearest cores, peer access.
    Devices,
    /// Measure memory bandwidth and LBM throughput (MLUPS) over sizes and 1..N devices.
    Bench(BenchArgs),
}

fn run(args: RunArgs) -> anyhow::Result<()> {
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
    let outcome = run_case(&case, stop, &mut |e| match e {
        Event::Started {
            lattice,
            note,
            devices,
            nodes,
        } => {
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
            let change = change
                .map(|c| format!(", change/1000 steps {c:.3e}"))
                .unwrap_or_default();
            let of = if case.run.steps.is_some() {
                format!("/{target}")
            } else {
                String::new()
            };
            println!("step {step}{of}: {mlups:.1} MLUPS{change}");
        }
    })?;
    print!("{}", outcome.summary.text());
    println!("outputs in {}", case.output.dir.display());
    Ok(())
}

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
        Command::Run(args) => run(args),
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
