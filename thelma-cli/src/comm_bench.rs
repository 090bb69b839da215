//! `thelma comm-bench`: the inter-GPU communication microbenchmark (TheLMA §6) from the command
//! line: options, the sweep over device counts and configurations, the table, the model estimates
//! (next to the solver's measured MLUPS when a `thelma bench --json` report is given), and the JSON
//! and PNG outputs.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use thelma_compute::comm_bench::{
    self, model, Backend, BenchConfig, BenchResult, CommError, Shape, Topology, Transport,
};
use thelma_core::{BackendName, Cluster, DeviceSpec};
use thelma_results::write_bytes_atomic;
use thelma_results::{line_plot, Mark, Series, XAxis};

use crate::bench::{BenchReport, Scaling};
use crate::cli::{BackendParser, PrecisionArg};
use crate::cluster::HostPlace;
use crate::error::UsageError;

/// Whether transposed accesses are measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TransposeArg {
    /// Coalesced accesses only.
    Off,
    /// Transposed (non-coalesced) accesses only.
    On,
    /// Both, one after the other.
    Both,
}

/// What the throughput columns mean; printed under the tables and in `--help`.
pub const COLUMNS: &str = "\
GB/s: the whole graph's bytes per iteration (every link, both directions) over the wall time of
  an iteration, barrier included: the aggregate throughput T of the model (its \"have GB/s\").
link GB/s: one link's bytes per iteration (both directions) over the time its busier end spent in
  the exchange, barrier excluded; the slowest and the fastest link.
need GB/s: the aggregate throughput the solver needs for 100 % parallel efficiency.";

#[derive(Args, Debug)]
#[command(after_help = COLUMNS)]
pub struct CommBenchArgs {
    /// Where to run: auto picks CUDA when a GPU is present, the CPU (threads and host memory)
    /// otherwise. Default auto.
    #[arg(long, value_name = "NAME", value_parser = BackendParser)]
    pub backend: Option<BackendName>,
    /// Devices in graph order: `all`, a count N, or ids `0,2,1,3` (the order the solver's slabs
    /// would take). Default all. In an MPI job (`--transport mpi`), the k-th rank of a host
    /// drives device k mod n of the n devices listed here, whatever order the launcher placed
    /// the ranks in: two ranks on a one-GPU host share it. CPU devices are virtual: rank r takes
    /// the r-th, mod n.
    #[arg(long, value_name = "SPEC", value_parser = DeviceSpec::parse, allow_hyphen_values = true)]
    pub devices: Option<DeviceSpec>,
    /// Communication graphs, comma-separated: linear, circular. Default linear.
    #[arg(long, value_name = "LIST", value_parser = parse_topologies, allow_hyphen_values = true)]
    pub topology: Option<Topologies>,
    /// Transports, comma-separated, or `all`: zero-copy (mapped host memory, as the solver),
    /// peer (device stores over NVLink/PCIe), copy-engine (device→host→device copies); or mpi,
    /// one process per device under `mpirun -np N` exchanging through a cluster job's messages
    /// (host-staged, a build with the `mpi` feature). Default zero-copy, and mpi in an MPI job.
    #[arg(long, value_name = "LIST", value_parser = parse_transports, allow_hyphen_values = true)]
    pub transport: Option<Transports>,
    /// Transposed (non-coalesced) accesses: `--transpose` alone means on. Default off.
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "on")]
    pub transpose: Option<TransposeArg>,
    /// Arrays per link and direction (k); 5 is the populations crossing a D3Q19 face.
    #[arg(
        long,
        value_name = "K",
        default_value_t = 5,
        allow_negative_numbers = true
    )]
    pub arrays: usize,
    /// Edge of each array in words (L).
    #[arg(
        long,
        value_name = "L",
        default_value_t = 192,
        allow_negative_numbers = true
    )]
    pub edge: usize,
    /// Measured iterations per configuration (the paper averaged 50,000).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 50_000,
        allow_negative_numbers = true
    )]
    pub iterations: u32,
    /// Iterations run before the clock starts.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 500,
        allow_negative_numbers = true
    )]
    pub warmup: u32,
    /// Also measure every shorter prefix of the device list (from the graph's smallest size), for
    /// the throughput-against-device-count table and plot.
    #[arg(long)]
    pub sweep: bool,
    /// Edge ℓ of the cubic domain the model speaks of. Default: L.
    #[arg(long, value_name = "ELL", allow_negative_numbers = true)]
    pub domain_edge: Option<usize>,
    /// Single-device performance of the solver on the ℓ³ domain (MLUPS), for the throughput
    /// needed at 100 % efficiency and the predicted performance.
    #[arg(
        long,
        value_name = "MLUPS",
        allow_negative_numbers = true,
        conflicts_with = "kernel_time"
    )]
    pub solver_mlups: Option<f64>,
    /// Single-device kernel time per step of the ℓ³ domain, in microseconds (instead of
    /// --solver-mlups).
    #[arg(long, value_name = "US", allow_negative_numbers = true)]
    pub kernel_time: Option<f64>,
    /// The solver's figures from a `thelma bench --json` report (weak scaling), instead of
    /// --solver-mlups: its 1-device row of size ℓ in --precision (mrt when several collisions)
    /// gives the single-device performance, and its rows on i devices the measured MLUPS shown
    /// next to the estimate.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["solver_mlups", "kernel_time"]
    )]
    pub bench_json: Option<PathBuf>,
    /// Precision of the solver's populations, for the bytes per interface node D (5 × 4 or 5 × 8).
    /// Default f32.
    #[arg(long, value_enum)]
    pub precision: Option<PrecisionArg>,
    /// Write every result and model row as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Draw the aggregate throughput (GB/s) against the device count as a PNG, a marked line per
    /// transport and graph.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
}

/// A list of graphs given as one option value (`linear,circular` or `all`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topologies(pub Vec<Topology>);

/// A list of transports given as one option value (`zero-copy,peer` or `all`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transports(pub Vec<Transport>);

fn parse_topologies(s: &str) -> Result<Topologies, String> {
    if s.trim().eq_ignore_ascii_case("all") || s.trim().eq_ignore_ascii_case("both") {
        return Ok(Topologies(vec![Topology::Linear, Topology::Circular]));
    }
    dedup(
        s.split(',')
            .map(str::parse::<Topology>)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?,
    )
    .map(Topologies)
}

fn parse_transports(s: &str) -> Result<Transports, String> {
    if s.trim().eq_ignore_ascii_case("all") {
        return Ok(Transports(Transport::ALL.to_vec()));
    }
    dedup(
        s.split(',')
            .map(str::parse::<Transport>)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?,
    )
    .map(Transports)
}

fn dedup<T: PartialEq + Copy>(v: Vec<T>) -> Result<Vec<T>, String> {
    let mut out = Vec::new();
    for x in v {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    if out.is_empty() {
        return Err("the list is empty".into());
    }
    Ok(out)
}

/// One measured configuration with its model row.
pub struct Measured {
    pub result: BenchResult,
    pub model: model::ModelRow,
    /// The solver's measured MLUPS on as many devices, from `--bench-json`, when it has that row.
    pub measured_mlups: Option<f64>,
}

/// The solver's own figures for the model's domain, taken from a `thelma bench --json` report.
#[derive(Clone, Debug, PartialEq)]
pub struct SolverFigures {
    /// Where the report was measured (`cpu`, `cuda`).
    pub backend: String,
    pub collision: String,
    pub precision: String,
    /// Edge of the cube on each device, ℓ.
    pub size: usize,
    /// MLUPS of the 1-device row.
    pub single_mlups: f64,
    /// (devices, transport, MLUPS) of the rows of that collision, precision and size, one per
    /// device count and transport (`-` for one device, which exchanges nothing).
    pub measured: Vec<(usize, String, f64)>,
}

impl SolverFigures {
    /// The solver's measured MLUPS on `devices` devices over `transport` (the benchmark's name
    /// of it), when the report has that row; one device's row serves every transport.
    pub fn measured_mlups(&self, devices: usize, transport: &str) -> Option<f64> {
        self.measured
            .iter()
            .find(|(n, t, _)| *n == devices && (devices == 1 || t == transport))
            .map(|&(_, _, m)| m)
    }
}

/// Whether the first `k` slabs of a bench report sat on `k` different devices: the report lists a
/// device once per slab, so a `--slabs-per-device 2` run on "2 devices" is one device twice.
fn distinct_devices(names: &[String], k: usize) -> bool {
    let first = &names[..k.min(names.len())];
    first
        .iter()
        .enumerate()
        .all(|(i, a)| !first[..i].contains(a))
}

/// Picks the solver's figures for the ℓ³ domain (`ell`) in `precision` (`f32`, `f64`) out of a
/// `thelma bench` report; the error says in one line why nothing fits.
pub fn solver_figures(
    report: &BenchReport,
    ell: usize,
    precision: &str,
) -> Result<SolverFigures, String> {
    // Under strong scaling a k-device row shares one size³ domain, not the ℓ³ per device the model
    // is about, so its figures would be compared with the wrong estimate.
    if report.scaling == Scaling::Strong {
        return Err(
            "a strong-scaling report (size³ shared by the devices); the model needs \
                    weak scaling (size³ per device): rerun `thelma bench --scaling weak`"
                .into(),
        );
    }
    // The model speaks of one slab per device and cubes; rows of --slabs-per-device 2 add an
    // exchange inside each device, and rows of a case (--case) are not cubes.
    let of_domain = |r: &&crate::bench::BenchRow| {
        r.size == ell && r.precision == precision && r.one_slab_per_device() && r.case.is_none()
    };
    let singles: Vec<_> = report
        .rows
        .iter()
        .filter(of_domain)
        .filter(|r| r.devices == 1)
        .collect();
    // The paper's solver is MRT; BGK only stands in when the report has nothing else.
    let Some(one) = singles
        .iter()
        .find(|r| r.collision == "mrt")
        .or_else(|| singles.first())
    else {
        let have: Vec<String> = report
            .rows
            .iter()
            .filter(|r| r.devices == 1)
            .map(|r| format!("{} {} size {}", r.collision, r.precision, r.size))
            .collect();
        return Err(format!(
            "no 1-device row of size {ell} (--domain-edge, default --edge) in {precision} \
             (--precision){}",
            if have.is_empty() {
                "; the report has no 1-device row (was it run with --no-sweep?)".to_string()
            } else {
                format!("; its 1-device rows: {}", have.join(", "))
            }
        ));
    };
    if !(one.mlups.is_finite() && one.mlups > 0.0) {
        return Err(format!(
            "its 1-device {} {precision} row of size {ell} has {} MLUPS, not a number > 0",
            one.collision, one.mlups
        ));
    }
    let mut measured: Vec<(usize, String, f64)> = Vec::new();
    for r in report.rows.iter().filter(of_domain) {
        // Reports written before transports were recorded exchanged through zero-copy.
        let transport = match (r.transport.as_str(), r.devices) {
            (_, 1) => "-",
            ("", _) => "zero-copy",
            (t, _) => t,
        };
        if r.collision == one.collision
            && distinct_devices(&report.devices, r.devices)
            && !measured
                .iter()
                .any(|(n, t, _)| *n == r.devices && t == transport)
        {
            measured.push((r.devices, transport.to_string(), r.mlups));
        }
    }
    Ok(SolverFigures {
        backend: report.backend.clone(),
        collision: one.collision.clone(),
        precision: precision.into(),
        size: ell,
        single_mlups: one.mlups,
        measured,
    })
}

/// Reads a `thelma bench --json` report; every failure is a one-line `--bench-json` usage error.
fn read_bench_report(path: &Path) -> Result<BenchReport> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        usage(
            "--bench-json",
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    serde_json::from_str(&text).map_err(|e| {
        usage(
            "--bench-json",
            format!(
                "{} is not a `thelma bench --json` report: {e}",
                path.display()
            ),
        )
    })
}

/// Everything a `comm-bench` invocation measured.
pub struct Report {
    pub backend: Backend,
    pub domain_edge: usize,
    pub bytes_per_node: f64,
    pub single_step_s: Option<f64>,
    /// The `--bench-json` report and what it gave, when one was named.
    pub solver: Option<(PathBuf, SolverFigures)>,
    pub runs: Vec<Measured>,
    /// Configurations that could not run on this backend, with the reason.
    pub skipped: Vec<String>,
}

fn usage(flag: &str, message: impl Into<String>) -> anyhow::Error {
    UsageError::new(flag, message).into()
}

fn comm_error(e: CommError) -> anyhow::Error {
    match e {
        CommError::Config { flag, message } => usage(flag, message),
        other => other.into(),
    }
}

/// The largest ℓ the model speaks of: an ℓ³ domain within the 2^40 nodes a run accepts.
const MAX_DOMAIN_EDGE: usize = 10_321;

/// The most virtual CPU devices: each is a thread, as with `thelma run --backend cpu`.
const MAX_CPU_DEVICES: usize = 1024;

/// Checks that `n` virtual CPU devices can run: a thread each, and their links' buffers (two
/// parities of two directions, and for the copy-engine transport a staged copy of each side) in the
/// host memory available.
fn cpu_devices_fit(n: usize, args: &CommBenchArgs) -> Result<()> {
    if n > MAX_CPU_DEVICES {
        bail!(usage(
            "--devices",
            format!("{n} CPU devices: at most {MAX_CPU_DEVICES} (each is a thread)")
        ));
    }
    let bytes = args
        .arrays
        .checked_mul(args.edge)
        .and_then(|r| r.checked_mul(args.edge))
        .and_then(|w| w.checked_mul(4 * 8))
        .and_then(|per| per.checked_mul(n));
    let avail = crate::preflight::available_host_memory();
    match (bytes, avail) {
        (None, _) => bail!(usage(
            "--edge",
            format!("{} arrays of {}² words on {n} devices do not fit any memory", args.arrays, args.edge)
        )),
        (Some(b), Some(a)) if b as u64 > a => bail!(usage(
            "--devices",
            format!(
                "{n} CPU devices with {} arrays of {}² words need {} MiB of host memory, {} MiB available",
                args.arrays,
                args.edge,
                b >> 20,
                a >> 20
            )
        )),
        _ => Ok(()),
    }
}

/// Runs every configuration the arguments ask for, calling `progress` after each. In an MPI job
/// (`cluster`, with every rank's place on its host, `hosts`) every rank calls it, and only rank
/// 0's report has the results.
pub fn measure(
    args: &CommBenchArgs,
    cluster: Option<&Arc<dyn Cluster>>,
    hosts: &[HostPlace],
    progress: &mut dyn FnMut(&BenchResult),
) -> Result<Report> {
    let name = args.backend.clone().unwrap_or_default();
    let backend = if name.is_auto() {
        match comm_bench::available_devices(Backend::Cuda) {
            Ok(n) if n > 0 => Backend::Cuda,
            _ => Backend::Cpu,
        }
    } else {
        Backend::named(name.as_str()).ok_or_else(|| {
            usage(
                "--backend",
                format!("the exchange benchmark has no `{name}` transport"),
            )
        })?
    };
    let available = comm_bench::available_devices(backend).map_err(|e| match e {
        // Asked for by name and not there: the same bad input as `run --backend cuda`.
        CommError::NoCuda(m) => usage("--backend", format!("cuda: {m}")),
        e => comm_error(e),
    })?;
    let spec = args.devices.clone().unwrap_or_default();
    let mut devices: Vec<usize> = match (&spec, backend) {
        // CPU devices are virtual: any count or ids name them.
        (DeviceSpec::Count(n), Backend::Cpu) => {
            cpu_devices_fit(*n, args)?;
            (0..*n).collect()
        }
        (DeviceSpec::List(ids), Backend::Cpu) => {
            cpu_devices_fit(ids.len(), args)?;
            ids.clone()
        }
        _ => spec
            .resolve(available)
            .map_err(|m| usage("--devices", m.to_string()))?,
    };
    // The library checks the shape too; checking here first names the option the user typed.
    if args.edge == 0 {
        bail!(usage("--edge", "must be at least 1"));
    }
    if args.arrays == 0 {
        bail!(usage("--arrays", "must be at least 1"));
    }
    let ell = args.domain_edge.unwrap_or(args.edge);
    if ell == 0 || ell > MAX_DOMAIN_EDGE {
        bail!(usage(
            if args.domain_edge.is_some() {
                "--domain-edge"
            } else {
                "--edge"
            },
            format!("a domain edge of {ell} is not in 1..={MAX_DOMAIN_EDGE} (at most 2^40 nodes, as for a run)")
        ));
    }
    let positive = |flag: &str, v: Option<f64>| match v {
        Some(x) if !(x.is_finite() && x > 0.0) => {
            Err(usage(flag, format!("{x} must be a finite number > 0")))
        }
        _ => Ok(v),
    };
    let p = thelma_core::Precision::from(args.precision.unwrap_or(PrecisionArg::F32));
    let (precision, value_bytes) = (p.name(), p.bytes());
    // Read before anything is measured, so a bad report costs no benchmark time; in a job, by
    // rank 0 alone (the one that reports; the file may be on its host only).
    let solver = match &args.bench_json {
        Some(_) if cluster.is_some_and(|c| c.rank() > 0) => None,
        Some(path) => {
            let figures = solver_figures(&read_bench_report(path)?, ell, precision)
                .map_err(|m| usage("--bench-json", format!("{}: {m}", path.display())))?;
            Some((path.clone(), figures))
        }
        None => None,
    };
    let solver_mlups = match &solver {
        Some((_, f)) => Some(f.single_mlups),
        None => positive("--solver-mlups", args.solver_mlups)?,
    };
    let single_step_s = match (solver_mlups, positive("--kernel-time", args.kernel_time)?) {
        (Some(p), _) => Some(model::kernel_time_from_mlups(ell, p)),
        (None, Some(us)) => Some(us * 1e-6),
        (None, None) => None,
    };
    let d = model::bytes_per_node(value_bytes);
    let topologies = args
        .topology
        .clone()
        .map_or(vec![Topology::Linear], |t| t.0);
    let in_job = cluster.is_some();
    let transports = args.transport.clone().map_or(
        vec![if in_job {
            Transport::Mpi
        } else {
            Transport::ZeroCopy
        }],
        |t| t.0,
    );
    if let Some(c) = cluster {
        if transports != [Transport::Mpi] {
            bail!(usage(
                "--transport",
                "a process of an MPI job measures the mpi transport only (--transport mpi)"
            ));
        }
        if args.sweep {
            bail!(usage(
                "--sweep",
                format!(
                    "an MPI job measures the graph of its {} processes only",
                    c.size()
                )
            ));
        }
        devices = position_devices(&devices, c.size(), hosts, matches!(backend, Backend::Cpu));
    }
    let transposes: &[bool] = match args.transpose.unwrap_or(TransposeArg::Off) {
        TransposeArg::Off => &[false],
        TransposeArg::On => &[true],
        TransposeArg::Both => &[false, true],
    };

    let mut runs = Vec::new();
    let mut skipped = Vec::new();
    for &transport in &transports {
        for &topology in &topologies {
            let counts: Vec<usize> = if args.sweep {
                (topology.min_devices()..=devices.len()).collect()
            } else {
                vec![devices.len()]
            };
            if counts.is_empty() {
                bail!(usage(
                    "--devices",
                    format!(
                        "a {topology} graph needs at least {} device(s), {} given",
                        topology.min_devices(),
                        devices.len()
                    )
                ));
            }
            for &transpose in transposes {
                for &n in &counts {
                    let cfg = BenchConfig {
                        devices: devices[..n].to_vec(),
                        topology,
                        shape: Shape {
                            arrays: args.arrays,
                            edge: args.edge,
                            transpose,
                        },
                        transport,
                        iterations: args.iterations,
                        warmup: args.warmup,
                    };
                    let ran = match cluster {
                        Some(c) if transport == Transport::Mpi => {
                            comm_bench::run_job(backend, &cfg, c)
                        }
                        _ => comm_bench::run(backend, &cfg).map(Some),
                    };
                    match ran {
                        // Another rank of the job: rank 0 reports.
                        Ok(None) => {}
                        Ok(Some(result)) => {
                            progress(&result);
                            let model = model::row(
                                ell,
                                n,
                                topology,
                                d,
                                result.aggregate_gbs * 1e9,
                                single_step_s,
                            );
                            let measured_mlups = solver
                                .as_ref()
                                .and_then(|(_, f)| f.measured_mlups(n, transport.name()));
                            runs.push(Measured {
                                result,
                                model,
                                measured_mlups,
                            });
                        }
                        Err(CommError::Unsupported { transport, reason }) => {
                            let note = format!("{transport}: {reason}");
                            if !skipped.contains(&note) {
                                skipped.push(note);
                            }
                        }
                        Err(e) => {
                            return Err(comm_error(e)).with_context(|| {
                                format!(
                                    "{transport}, {topology}, devices {:?}, transpose {transpose}",
                                    cfg.devices
                                )
                            })
                        }
                    }
                }
            }
        }
    }
    if runs.is_empty() && cluster.is_none_or(|c| c.rank() == 0) {
        bail!(usage(
            "--transport",
            format!(
                "nothing could run on the {} backend: {}",
                backend.name(),
                skipped.join("; ")
            )
        ));
    }
    Ok(Report {
        backend,
        domain_edge: ell,
        bytes_per_node: d,
        single_step_s,
        solver,
        runs,
        skipped,
    })
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "—".into())
}

impl Report {
    /// The results table and the model table, as printed.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<11} {:<8} {:<5} {:<12} {:>10} {:>10} {:>17}",
            "transport", "graph", "trans", "devices", "µs/iter", "GB/s", "link GB/s min–max"
        );
        for m in &self.runs {
            let r = &m.result;
            let (lo, hi) = r.links.iter().fold((f64::INFINITY, 0.0f64), |(a, b), l| {
                (a.min(l.gbs), b.max(l.gbs))
            });
            let devs: Vec<String> = r.devices.iter().map(|d| d.to_string()).collect();
            let _ = writeln!(
                s,
                "{:<11} {:<8} {:<5} {:<12} {:>10.2} {:>10.2} {:>8.2}–{:<8.2}",
                r.transport.name(),
                r.topology.name(),
                if r.transpose { "yes" } else { "no" },
                devs.join(","),
                r.time_per_iteration_us,
                r.aggregate_gbs,
                lo,
                hi
            );
        }
        let _ = writeln!(
            s,
            "\nmodel (TheLMA §6): domain {ell}³, D = {d} B per interface node and direction{t}",
            ell = self.domain_edge,
            d = self.bytes_per_node,
            t = self
                .single_step_s
                .map(|t| format!(
                    ", single-device step {:.1} µs ({:.0} MLUPS)",
                    t * 1e6,
                    model::mlups_from_kernel_time(self.domain_edge, t)
                ))
                .unwrap_or_default()
        );
        if let Some((path, f)) = &self.solver {
            let _ = writeln!(
                s,
                "solver figures from {}: {} {} on {}, {}³ per device (weak scaling)",
                path.display(),
                f.collision,
                f.precision,
                f.backend,
                f.size
            );
        }
        let _ = writeln!(
            s,
            "{:<11} {:<8} {:<5} {:>3} {:>12} {:>12} {:>16} {:>12} {:>12} {:>15}",
            "transport",
            "graph",
            "trans",
            "i",
            "need GB/s",
            "have GB/s",
            "comm-bound MLUPS",
            "ideal MLUPS",
            "est. MLUPS",
            "measured MLUPS"
        );
        for m in &self.runs {
            let (r, row) = (&m.result, &m.model);
            let _ = writeln!(
                s,
                "{:<11} {:<8} {:<5} {:>3} {:>12} {:>12.2} {:>16} {:>12} {:>12} {:>15}",
                r.transport.name(),
                r.topology.name(),
                if r.transpose { "yes" } else { "no" },
                row.devices,
                opt(row.required_gbs, 2),
                row.measured_gbs,
                opt(row.comm_bound_mlups, 0),
                opt(row.ideal_mlups, 0),
                opt(row.predicted_mlups, 0),
                opt(m.measured_mlups, 0)
            );
        }
        for k in &self.skipped {
            let _ = writeln!(s, "skipped: {k}");
        }
        let _ = writeln!(s, "\n{COLUMNS}");
        s
    }

    /// The report as JSON: the settings, then one object per configuration with its model row.
    pub fn json(&self) -> serde_json::Value {
        let runs: Vec<serde_json::Value> = self
            .runs
            .iter()
            .map(|m| {
                let mut v = serde_json::to_value(&m.result).unwrap_or_default();
                v["model"] = serde_json::to_value(&m.model).unwrap_or_default();
                v["model"]["measured_mlups"] = serde_json::json!(m.measured_mlups);
                v
            })
            .collect();
        let bench_json = self.solver.as_ref().map(|(path, f)| {
            serde_json::json!({
                "path": path.display().to_string(),
                "backend": f.backend,
                "collision": f.collision,
                "precision": f.precision,
                "size": f.size,
                "single_device_mlups": f.single_mlups,
            })
        });
        serde_json::json!({
            "benchmark": "comm-bench",
            "backend": self.backend,
            "domain_edge": self.domain_edge,
            "bytes_per_node": self.bytes_per_node,
            "single_device_step_us": self.single_step_s.map(|t| t * 1e6),
            "bench_json": bench_json,
            "runs": runs,
            "skipped": self.skipped,
        })
    }

    /// One series per (transport, graph, transposition): aggregate GB/s against device count, each
    /// measurement marked (a sweep has only a few).
    pub fn series(&self) -> Vec<Series> {
        let mut out: Vec<Series> = Vec::new();
        for m in &self.runs {
            let r = &m.result;
            let label = format!(
                "{} {}{}",
                r.transport.name(),
                r.topology.name(),
                if r.transpose { " transposed" } else { "" }
            );
            let p = (r.devices.len() as f64, r.aggregate_gbs);
            match out.iter_mut().find(|s| s.label == label) {
                Some(s) => s.points.push(p),
                None => out.push(Series {
                    label,
                    points: vec![p],
                    mark: Mark::LineAndPoints,
                }),
            }
        }
        // A single point draws no line.
        for s in &mut out {
            if s.points.len() < 2 {
                s.mark = Mark::Points;
            }
        }
        out
    }
}

/// The device of each position of an MPI job of `ranks` processes, one position per rank, from
/// the device list each rank resolved (`devices`): a GPU rank takes the device of its index
/// among its host's ranks (`hosts`), so that the ranks of one host take distinct GPUs whatever
/// order the launcher placed them in (`--map-by node` deals ranks round the hosts); CPU devices
/// are virtual and go by rank, as do GPUs where the hosts are not known.
pub fn position_devices(
    devices: &[usize],
    ranks: usize,
    hosts: &[HostPlace],
    virtual_devices: bool,
) -> Vec<usize> {
    debug_assert!(!devices.is_empty(), "a device list is never empty");
    (0..ranks)
        .map(|r| {
            let k = match hosts.get(r) {
                Some(h) if !virtual_devices && hosts.len() == ranks => h.index,
                _ => r,
            };
            devices[k % devices.len()]
        })
        .collect()
}

/// Runs `thelma comm-bench`, alone or as one rank of an MPI job (`--transport mpi`): measures,
/// prints, writes the requested files. Only rank 0 of a job speaks and writes.
pub fn run(args: CommBenchArgs, job: Option<&crate::cluster::Job>) -> Result<()> {
    let cluster = job.map(crate::cluster::Job::cluster);
    let hosts = job.map_or(&[][..], crate::cluster::Job::hosts);
    if job.is_some_and(|j| j.rank() > 0) {
        return measure(&args, cluster.as_ref(), hosts, &mut |_| {}).map(|_| ());
    }
    crate::say!(
        "comm-bench: {} arrays of {}² words per link and direction ({} KiB), {} iterations after {} warm-up",
        args.arrays,
        args.edge,
        args.arrays * args.edge * args.edge * 4 / 1024,
        args.iterations,
        args.warmup
    );
    let report = measure(&args, cluster.as_ref(), hosts, &mut |r| {
        crate::say!(
            "  {} {} devices {:?}{}: {:.2} GB/s, {:.2} µs/iteration",
            r.transport,
            r.topology,
            r.devices,
            if r.transpose { " transposed" } else { "" },
            r.aggregate_gbs,
            r.time_per_iteration_us
        );
    })?;
    crate::say!("backend {}", report.backend.name());
    for d in report
        .runs
        .last()
        .map(|m| &m.result.per_device)
        .into_iter()
        .flatten()
    {
        crate::say!("device {:>2}: {}", d.device, d.describe);
    }
    crate::say_raw!("{}", report.text());
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report.json())?;
        write_bytes_atomic(path, text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        crate::say!("json: {}", path.display());
    }
    if let Some(path) = &args.plot {
        line_plot(
            path,
            (900, 600),
            "comm-bench: aggregate exchange throughput",
            "devices",
            "aggregate GB/s",
            XAxis::Count,
            &report.series(),
        )
        .with_context(|| format!("cannot write {}", path.display()))?;
        crate::say!("plot: {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::BenchRow;

    #[test]
    fn the_ranks_of_a_host_take_its_gpus_in_their_order_there() {
        let place = |index, ranks| HostPlace { index, ranks };
        // Four ranks dealt round two hosts (`--map-by node`): 0 and 2 on one, 1 and 3 on the other.
        let hosts = [place(0, 2), place(0, 2), place(1, 2), place(1, 2)];
        assert_eq!(
            position_devices(&[0, 1], 4, &hosts, false),
            vec![0, 0, 1, 1]
        );
        // By rank they would have shared a GPU on each host (0 and 2 both on device 0).
        assert_eq!(position_devices(&[0, 1], 4, &[], false), vec![0, 1, 0, 1]);
        // Virtual (CPU) devices go by rank; more ranks on a host than GPUs share them.
        assert_eq!(position_devices(&[0, 1], 4, &hosts, true), vec![0, 1, 0, 1]);
        let crowded = [place(0, 3), place(1, 3), place(2, 3)];
        assert_eq!(position_devices(&[4, 5], 3, &crowded, false), vec![4, 5, 4]);
    }

    fn row(collision: &str, precision: &str, size: usize, devices: usize, mlups: f64) -> BenchRow {
        BenchRow {
            collision: collision.into(),
            precision: precision.into(),
            streaming: "two-lattice".into(),
            size,
            devices,
            slabs: devices,
            grid: None,
            transport: String::new(),
            lattice: [size, size, size * devices],
            steps: 10,
            wall_s: 1.0,
            mlups,
            mlups_per_device: mlups / devices as f64,
            roofline_mlups: 1e4,
            roofline_fraction: mlups / 1e4,
            parallel_efficiency: None,
            case: None,
            of_box: None,
            live: None,
        }
    }

    fn report(scaling: Scaling, devices: &[&str], rows: Vec<BenchRow>) -> BenchReport {
        BenchReport {
            backend: "cuda".into(),
            devices: devices.iter().map(|d| d.to_string()).collect(),
            bandwidth_bytes_per_s: 2e12,
            bandwidth: None,
            scaling,
            rows,
            skipped: vec![],
            date_utc: "2025-01-01T00:00:00Z".into(),
        }
    }

    const FOUR: &[&str] = &["cuda:0", "cuda:1", "cuda:2", "cuda:3"];

    #[test]
    fn the_single_device_row_matches_size_and_precision_and_prefers_mrt() {
        let r = report(
            Scaling::Weak,
            FOUR,
            vec![
                row("bgk", "f32", 192, 1, 900.0),
                row("bgk", "f32", 192, 2, 1700.0),
                row("mrt", "f64", 192, 1, 300.0),
                row("mrt", "f32", 128, 1, 700.0),
                row("mrt", "f32", 192, 1, 800.0),
                row("mrt", "f32", 192, 2, 1500.0),
                row("mrt", "f32", 192, 4, 2900.0),
            ],
        );
        let f = solver_figures(&r, 192, "f32").unwrap();
        assert_eq!((f.collision.as_str(), f.single_mlups), ("mrt", 800.0));
        // The i-device figures are of the same collision as the single-device one.
        assert_eq!(f.measured_mlups(1, "zero-copy"), Some(800.0));
        assert_eq!(f.measured_mlups(2, "zero-copy"), Some(1500.0));
        assert_eq!(f.measured_mlups(3, "zero-copy"), None);
        assert_eq!(f.measured_mlups(4, "zero-copy"), Some(2900.0));
        assert_eq!(solver_figures(&r, 192, "f64").unwrap().single_mlups, 300.0);
        assert_eq!(
            solver_figures(&r, 128, "f32")
                .unwrap()
                .measured_mlups(2, "zero-copy"),
            None
        );
        // Without an MRT row the BGK one stands in, with its own multi-device rows.
        let bgk = report(Scaling::Weak, FOUR, r.rows[..2].to_vec());
        let f = solver_figures(&bgk, 192, "f32").unwrap();
        assert_eq!(
            (f.collision.as_str(), f.measured_mlups(2, "zero-copy")),
            ("bgk", Some(1700.0))
        );
    }

    #[test]
    fn reports_that_do_not_fit_give_one_line_saying_why() {
        let rows = vec![
            row("mrt", "f32", 64, 1, 50.0),
            row("mrt", "f32", 64, 2, 90.0),
        ];
        let strong = report(Scaling::Strong, FOUR, rows.clone());
        assert!(solver_figures(&strong, 64, "f32")
            .unwrap_err()
            .contains("strong-scaling"));
        let weak = report(Scaling::Weak, FOUR, rows.clone());
        for (ell, p) in [(32, "f32"), (64, "f64")] {
            let e = solver_figures(&weak, ell, p).unwrap_err();
            assert!(
                e.contains("no 1-device row") && e.contains("mrt f32 size 64"),
                "{e}"
            );
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        // A --no-sweep report has no 1-device row at all.
        let no_sweep = report(Scaling::Weak, FOUR, rows[1..].to_vec());
        assert!(solver_figures(&no_sweep, 64, "f32")
            .unwrap_err()
            .contains("--no-sweep"));
        // A single-device figure that cannot give a kernel time is refused, not divided by.
        let zero = report(Scaling::Weak, FOUR, vec![row("mrt", "f32", 64, 1, 0.0)]);
        assert!(solver_figures(&zero, 64, "f32")
            .unwrap_err()
            .contains("> 0"));
    }

    #[test]
    fn slabs_sharing_a_device_are_not_counted_as_more_devices() {
        // `--slabs-per-device 2` on two GPUs: rows of 1..4 slabs over cuda:0, cuda:0, cuda:1, cuda:1.
        let r = report(
            Scaling::Weak,
            &["cuda:0", "cuda:0", "cuda:1", "cuda:1"],
            (1..=4)
                .map(|k| row("mrt", "f32", 128, k, 100.0 * k as f64))
                .collect(),
        );
        let f = solver_figures(&r, 128, "f32").unwrap();
        assert_eq!(f.measured, vec![(1, "-".to_string(), 100.0)]);
    }

    #[test]
    fn rows_with_several_slabs_per_device_are_not_the_models_figures() {
        // `--slabs-per-device 2 --devices 2`: one slab on one device (the baseline), then two
        // slabs on one device and four on two.
        let mut rows = vec![row("mrt", "f32", 128, 1, 100.0)];
        for (devices, slabs, mlups) in [(1, 2, 97.0), (2, 4, 190.0)] {
            rows.push(BenchRow {
                slabs,
                ..row("mrt", "f32", 128, devices, mlups)
            });
        }
        let r = report(Scaling::Weak, &["cuda:0", "cuda:1"], rows);
        let f = solver_figures(&r, 128, "f32").unwrap();
        assert_eq!(f.single_mlups, 100.0);
        assert_eq!(f.measured, vec![(1, "-".to_string(), 100.0)]);
    }

    #[test]
    fn the_plot_marks_every_measurement_and_the_text_says_what_each_rate_is() {
        let measured = |devices: Vec<usize>, gbs: f64| {
            let n = devices.len();
            Measured {
                result: BenchResult {
                    backend: Backend::Cpu,
                    transport: Transport::ZeroCopy,
                    topology: Topology::Linear,
                    devices,
                    arrays: 5,
                    edge: 32,
                    transpose: false,
                    iterations: 10,
                    warmup: 1,
                    time_per_iteration_us: 10.0,
                    aggregate_gbs: gbs,
                    links: vec![],
                    per_device: vec![],
                },
                model: model::row(32, n, Topology::Linear, 20.0, gbs * 1e9, None),
                measured_mlups: None,
            }
        };
        let report = Report {
            backend: Backend::Cpu,
            domain_edge: 32,
            bytes_per_node: 20.0,
            single_step_s: None,
            solver: None,
            runs: vec![measured(vec![0, 1], 4.0), measured(vec![0, 1, 2], 7.0)],
            skipped: vec![],
        };
        let series = report.series();
        assert_eq!(series.len(), 1);
        assert_eq!(series[0].points, [(2.0, 4.0), (3.0, 7.0)]);
        assert_eq!(series[0].mark, Mark::LineAndPoints);
        let text = report.text();
        assert!(text.contains("\nGB/s: the whole graph's bytes"), "{text}");
        assert!(text.contains("\nlink GB/s: one link's bytes"), "{text}");
        assert!(
            COLUMNS.lines().all(|l| l.chars().count() <= 100),
            "{COLUMNS}"
        );
    }

    #[test]
    fn a_bench_report_reads_back_from_its_own_json() {
        let r = report(Scaling::Weak, FOUR, vec![row("mrt", "f32", 64, 1, 123.456)]);
        let dir =
            std::env::temp_dir().join(format!("thelma-comm-bench-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bench.json");
        std::fs::write(&path, serde_json::to_string_pretty(&r).unwrap()).unwrap();
        let back = read_bench_report(&path).unwrap();
        assert_eq!(back.scaling, Scaling::Weak);
        assert_eq!(back.rows[0].mlups, 123.456);
        std::fs::write(&path, "{").unwrap();
        let e = read_bench_report(&path).unwrap_err();
        let u = e.downcast_ref::<UsageError>().expect("a usage error");
        assert_eq!(u.flag, "--bench-json");
        let _ = std::fs::remove_dir_all(dir);
    }
}
