//! The `thelma` command line: parses arguments into a case, runs it, prints what happened.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use thelma_cli::app::{run_case_live, serve_rank, Diverged, Event, UsageError};
use thelma_cli::bench::{run_bench, BenchArgs};
use thelma_cli::cli::RunArgs;
use thelma_cli::live::LiveServer;
use thelma_cli::{say, say_raw, warn_line};
use thelma_core::{num, num_sig};
use thelma_results::{clock as clock_text, wrap, Convergence, ProgressLine};

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
    /// Write a layout file for a cluster job: ranks x devices, the domain split evenly along z.
    Layout(thelma_cli::layout::LayoutArgs),
    /// Write a commented starting case (every key, the default values) to FILE; never overwrites.
    Init {
        /// Where to write it.
        #[arg(default_value = "case.toml")]
        file: std::path::PathBuf,
    },
}

/// `thelma run`, alone or as one rank of a cluster job (`mpirun -np N thelma run ...`): rank 0 runs
/// the case and prints, the other ranks serve their slabs.
fn run(args: RunArgs) -> anyhow::Result<()> {
    in_job(|job| run_in(args, job))
}

/// Runs `work` alone, or as one rank of a cluster job when a launcher started several: a rank
/// that fails ends every rank with its message and status, so that no rank waits forever.
fn in_job(
    work: impl FnOnce(Option<&thelma_cli::cluster::Job>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let job = thelma_cli::cluster::join()?;
    let result = work(job.as_ref());
    if let (Err(e), Some(job)) = (&result, &job) {
        let (code, line) = failure(e);
        let line = match job.rank() {
            0 => line,
            r => {
                // Bad input is refused alike by every rank: rank 0's line ends the job, and this
                // rank speaks only if rank 0 has not ended it by then (input only it refuses).
                if code == 2 {
                    std::thread::sleep(std::time::Duration::from_secs(10));
                }
                format!("rank {r}: {line}")
            }
        };
        job.abort(&line, i32::from(code));
    }
    result
}

fn run_in(args: RunArgs, job: Option<&thelma_cli::cluster::Job>) -> anyhow::Result<()> {
    let resume = args.resume.clone();
    let live = args.live.options()?;
    // The live view's title: the case file's name, or the built-in case's kind.
    let name = args
        .config
        .as_ref()
        .or(args.resume.as_ref())
        .and_then(|p| p.file_stem())
        .map(|n| n.to_string_lossy().into_owned());
    let (case, quiet) = args.into_case()?;
    let name = name.unwrap_or_else(|| format!("{:?}", case.domain.case).to_lowercase());
    let stop = Arc::new(AtomicBool::new(false));
    stop_on_signals(
        stop.clone(),
        case.output.dir.clone(),
        job.map(|j| j.cluster()),
    );
    if let Some(job) = job.filter(|j| j.rank() > 0) {
        return serve_rank(&case, job, stop, live.is_some(), resume.as_deref());
    }
    // Bound before anything is written: a port in use is bad input. The address is printed even
    // under --quiet (with its token, the only way in from elsewhere).
    let mut live = live
        .map(|o| LiveServer::start(&o, &case, &name))
        .transpose()?;
    if let Some(l) = &live {
        say!("live view: {}", l.url());
    }
    // A bar on a terminal; plain lines when the output goes to a file or a pipe.
    let mut bar: Option<ProgressBar> = None;
    let mut clock = Instant::now();
    // The previous check's (step, change), for the ETA of a run to convergence.
    let mut previous: Option<(u64, f64)> = None;
    let total_nodes: usize = case.domain.size.iter().product();
    let outcome = run_case_live(
        &case,
        resume.as_deref(),
        stop,
        &mut |e| match e {
            Event::Started {
                lattice,
                note,
                devices,
                nodes,
                overlapped,
            } => {
                // Where hwloc could not pin a worker the run goes on unpinned: say so once, on stderr,
                // so that it shows under --quiet and in a redirected run too.
                if let Some((d, e)) = devices
                    .iter()
                    .find_map(|d| d.binding.as_ref().err().map(|e| (d.device, e)))
                {
                    let n = devices.iter().filter(|d| d.binding.is_err()).count();
                    warn_line!(
                    "{}",
                    wrap(&format!(
                        "warning: {n} of {} worker thread(s) run unpinned; performance may suffer\n  \
                         device {d}: {e}",
                        devices.len()
                    ))
                );
                }
                // Valid but fragile: BGK and, less so, MRT lose stability as τ nears ½ (under-resolved
                // flow). The watchdog stops a run that diverges; this says so before it starts.
                if lattice.tau < TAU_WARN {
                    warn_line!(
                    "{}",
                    wrap(&format!(
                        "warning: tau = {} is close to 1/2: the run may diverge (use a finer grid or a lower Re)",
                        num(lattice.tau)
                    ))
                );
                }
                if quiet {
                    return;
                }
                let [nx, ny, nz] = case.domain.size;
                say!(
                    "thelma: {nx}x{ny}x{nz} = {nodes} nodes, {} {}, {}",
                    case.numerics.collision.name(),
                    case.numerics.precision.name(),
                    note
                );
                // One line per group of quantities, each within the width a terminal shows whole.
                // A box has no lid, so no Reynolds number of its own (its flows' are in their notes).
                let re = if lattice.reynolds > 0.0 {
                    format!(", Re = {}", num(lattice.reynolds))
                } else {
                    String::new()
                };
                say!(
                    "lattice: L = {} nodes, U = {}{re}, Mach = {}",
                    num(lattice.length),
                    num(lattice.lid_speed),
                    num_sig(lattice.mach, 4)
                );
                say!(
                    "relaxation: nu = {}, tau = {}, omega = {}",
                    num(lattice.viscosity),
                    num(lattice.tau),
                    num(lattice.omega)
                );
                if let Some(u) = case.unit_scales() {
                    say!("units: dx = {} m, dt = {} s per step", num(u.dx), num(u.dt));
                    say!(
                        "  velocity unit dx/dt = {} m/s, viscosity unit dx²/dt = {} m²/s",
                        num(u.velocity),
                        num(u.viscosity)
                    );
                }
                for d in devices {
                    let binding = match &d.binding {
                        Ok(b) => b.to_string(),
                        Err(e) => format!("unbound ({e})"),
                    };
                    let place = if d.slab.cuts_x_or_y() {
                        format!(
                            "subdomain {} x {}..{} y {}..{} z {}..{}",
                            d.slab.index,
                            d.slab.x.start,
                            d.slab.x.end,
                            d.slab.y.start,
                            d.slab.y.end,
                            d.slab.z.start,
                            d.slab.z.end
                        )
                    } else {
                        format!(
                            "slab {} z {}..{} ({} planes)",
                            d.slab.index,
                            d.slab.z.start,
                            d.slab.z.end,
                            d.slab.nz()
                        )
                    };
                    say!(
                        "{}",
                        wrap(&format!(
                            "device {:>2}: {place}, {}, {}",
                            d.device, d.describe, binding
                        ))
                    );
                }
                if let Some(line) = exchange(devices, overlapped) {
                    say!("{}", wrap(&line));
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
                    None => say!("{}", wrap(&line.line())),
                }
            }
        },
        job,
        live.as_mut(),
    );
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    // A run that failed (or diverged) ends its viewers' pages too.
    if let (Err(e), Some(l)) = (&outcome, live.as_mut()) {
        l.end_failed(&format!("{e:#}"));
    }
    let outcome = outcome?;
    say_raw!("{}", outcome.summary.text());
    say!(
        "{}",
        wrap(&format!(
            "outputs in {} ({} files{})",
            case.output.dir.display(),
            outcome.summary.outputs.len(),
            if case.output.vtk {
                "; open fields.pvd in ParaView"
            } else {
                ""
            }
        ))
    );
    Ok(())
}

/// Ctrl-C, SIGTERM (a scheduler's or `timeout`'s) and SIGHUP all stop a run after the current step,
/// with the outputs written; a second one while stopping exits at once with status 130, removing the
/// temporary files of writes it cuts short. In a cluster job the first stops every rank after the
/// same step, and the second ends every rank (a rank that just exited would leave the others
/// waiting for it); only rank 0 speaks.
fn stop_on_signals(
    stop: Arc<AtomicBool>,
    dir: std::path::PathBuf,
    job: Option<Arc<dyn thelma_core::Cluster>>,
) {
    // `nohup` leaves SIGHUP ignored: a run started so must not stop when its terminal closes.
    let ignored = signals::ignored();
    let speaks = job.as_ref().is_none_or(|j| j.rank() == 0);
    let _ = ctrlc::set_handler(move || {
        if stop.swap(true, Ordering::SeqCst) {
            if speaks {
                thelma_cli::app::remove_temporaries(&dir);
            }
            if let Some(j) = &job {
                j.abort("interrupted twice", 130);
            }
            std::process::exit(130);
        }
        if speaks {
            warn_line!(
                "interrupted: stopping after the current step and writing the outputs\n  \
                 (Ctrl-C again to abort)"
            );
        }
    });
    signals::ignore_again(&ignored);
}

/// Which termination signals were ignored before the handler took them over.
#[cfg(unix)]
mod signals {
    const SIGNALS: [libc::c_int; 2] = [libc::SIGHUP, libc::SIGTERM];

    pub fn ignored() -> Vec<libc::c_int> {
        SIGNALS
            .into_iter()
            .filter(|&s| {
                // SAFETY: with a null new action `sigaction` only writes the current disposition into
                // `old`, a valid, writable, zero-initialised (all-integer, so valid) `sigaction`.
                unsafe {
                    let mut old: libc::sigaction = std::mem::zeroed();
                    libc::sigaction(s, std::ptr::null(), &mut old) == 0
                        && old.sa_sigaction == libc::SIG_IGN
                }
            })
            .collect()
    }

    pub fn ignore_again(signals: &[libc::c_int]) {
        for &s in signals {
            // SAFETY: SIG_IGN is a valid disposition for SIGHUP and SIGTERM; no handler runs.
            unsafe {
                libc::signal(s, libc::SIG_IGN);
            }
        }
    }
}

#[cfg(not(unix))]
mod signals {
    pub fn ignored() -> Vec<i32> {
        Vec::new()
    }
    pub fn ignore_again(_: &[i32]) {}
}

/// Below this relaxation time a run is warned that it may diverge (τ − ½ = 3ν: at Re = 1000 and
/// U = 0.1 that is a grid under 30 nodes).
const TAU_WARN: f64 = 0.51;

/// `exchange: peer` where every channel takes one transport, otherwise each channel by its reader
/// and writer (`exchange: slab 1 from slab 0 over peer, …`), and whether the messages between
/// ranks are `overlapped` with the interiors; `None` without channels.
fn exchange(devices: &[thelma_core::DeviceInfo], overlapped: bool) -> Option<String> {
    let channels: Vec<(usize, usize, String)> = devices
        .iter()
        .enumerate()
        .flat_map(|(s, d)| {
            // Channels written by another rank arrive as its messages.
            let over = |t: thelma_core::Transport, side: usize| {
                if d.across[side] {
                    "mpi".to_string()
                } else {
                    t.to_string()
                }
            };
            (0..thelma_core::SIDE_COUNT).filter_map(move |side| {
                let w = d.slab.neighbour(side)?;
                d.transports[side].map(|t| (s, w, over(t, side)))
            })
        })
        .collect();
    let (_, _, first) = channels.first()?;
    let overlap = if overlapped {
        " (messages overlapped with the interiors)"
    } else {
        ""
    };
    if channels.iter().all(|(_, _, t)| t == first) {
        return Some(format!("exchange: {first}{overlap}"));
    }
    if devices.iter().any(|d| d.slab.cuts_x_or_y()) {
        // A grid's subdomains have up to 18 channels each: counted by transport.
        let mut kinds: Vec<(&str, usize)> = Vec::new();
        for (_, _, t) in &channels {
            match kinds.iter_mut().find(|(k, _)| k == t) {
                Some((_, n)) => *n += 1,
                None => kinds.push((t, 1)),
            }
        }
        let each: Vec<String> = kinds
            .iter()
            .map(|(t, n)| format!("{n} channel{} over {t}", if *n == 1 { "" } else { "s" }))
            .collect();
        return Some(format!("exchange: {}{overlap}", each.join(", ")));
    }
    let each: Vec<String> = channels
        .iter()
        .map(|(r, w, t)| format!("slab {r} from slab {w} over {t}"))
        .collect();
    Some(format!("exchange: {}{overlap}", each.join(", ")))
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
            // One line: clap's first line names the option and the value, except for missing
            // options, which it lists on the indented lines below it.
            let text = e.to_string();
            let mut lines = text.lines();
            let first = lines.next().unwrap_or("error: bad arguments");
            if e.kind() == MissingRequiredArgument {
                let missing: Vec<&str> = lines
                    .take_while(|l| l.starts_with("  "))
                    .map(str::trim)
                    .collect();
                warn_line!("{first} {}", missing.join(", "));
            } else {
                warn_line!("{first}");
            }
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Run(args) => run(*args),
        Command::CommBench(args) => in_job(|job| thelma_cli::comm_bench::run(args, job)),
        Command::Devices => {
            say_raw!("{}", wrap(&thelma_cli::devices::report()));
            Ok(())
        }
        // Warnings go to stderr, as a run's do; the table to stdout.
        Command::Bench(args) => run_bench(&args, &mut |line| {
            if line.starts_with("warning:") {
                warn_line!("{}", wrap(line))
            } else {
                say!("{}", wrap(line))
            }
        })
        .map(|_| ()),
        Command::Layout(args) if args.model => {
            thelma_cli::layout::model(&args).map(|table| say_raw!("{table}"))
        }
        Command::Layout(args) => thelma_cli::layout::write(&args).map(|written| {
            if let Some(f) = written {
                say!(
                    "wrote {}: run it with `mpirun -np {} thelma run --layout {} ...`",
                    f.display(),
                    args.ranks,
                    f.display()
                )
            }
        }),
        Command::Init { file } => thelma_cli::init::write(&file).map(|()| {
            say!(
                "wrote {}: edit it, then `thelma run --config {}`",
                file.display(),
                file.display()
            )
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let (code, line) = failure(&e);
            warn_line!("error: {line}");
            ExitCode::from(code)
        }
    }
}

/// The exit status of a failure and its line: 2 for bad input, 3 for a diverged run, 1 otherwise.
fn failure(e: &anyhow::Error) -> (u8, String) {
    if let Some(u) = e.downcast_ref::<UsageError>() {
        (2, u.to_string())
    } else if let Some(d) = e.downcast_ref::<Diverged>() {
        (3, d.to_string())
    } else {
        (1, format!("{e:#}"))
    }
}
