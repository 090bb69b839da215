//! `thelma comm-bench`: the inter-GPU communication microbenchmark (TheLMA §6) from the command
//! line: options, the sweep over device counts and configurations, the table, the model estimates,
//! and the JSON and PNG outputs.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use thelma_compute::comm_bench::{
    self, model, Backend, BenchConfig, BenchResult, CommError, Shape, Topology, Transport,
};
use thelma_core::config::DeviceSpec;
use thelma_results::output::write_bytes_atomic;
use thelma_results::plot::{line_plot, Mark, Series};

use crate::app::UsageError;
use crate::cli::{BackendArg, PrecisionArg};

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

#[derive(Args, Debug)]
pub struct CommBenchArgs {
    /// Where to run: auto picks CUDA when a GPU is present, the CPU (threads and host memory)
    /// otherwise. Default auto.
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    /// Devices in graph order: `all`, a count N, or ids `0,2,1,3` (the order the solver's slabs
    /// would take). Default all.
    #[arg(long, value_name = "SPEC", value_parser = DeviceSpec::parse)]
    pub devices: Option<DeviceSpec>,
    /// Communication graphs, comma-separated: linear, circular. Default linear.
    #[arg(long, value_name = "LIST", value_parser = parse_topologies)]
    pub topology: Option<Topologies>,
    /// Transports, comma-separated, or `all`: zero-copy (mapped host memory, as the solver),
    /// peer (device stores over NVLink/PCIe), copy-engine (device→host→device copies). Default
    /// zero-copy.
    #[arg(long, value_name = "LIST", value_parser = parse_transports)]
    pub transport: Option<Transports>,
    /// Transposed (non-coalesced) accesses: `--transpose` alone means on. Default off.
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "on")]
    pub transpose: Option<TransposeArg>,
    /// Arrays per link and direction (k); 5 is the populations crossing a D3Q19 face.
    #[arg(long, value_name = "K", default_value_t = 5)]
    pub arrays: usize,
    /// Edge of each array in words (L).
    #[arg(long, value_name = "L", default_value_t = 192)]
    pub edge: usize,
    /// Measured iterations per configuration (the paper averaged 50,000).
    #[arg(long, value_name = "N", default_value_t = 50_000)]
    pub iterations: u32,
    /// Iterations run before the clock starts.
    #[arg(long, value_name = "N", default_value_t = 500)]
    pub warmup: u32,
    /// Also measure every shorter prefix of the device list (from the graph's smallest size), for
    /// the throughput-against-device-count table and plot.
    #[arg(long)]
    pub sweep: bool,
    /// Edge ℓ of the cubic domain the model speaks of. Default: L.
    #[arg(long, value_name = "ELL")]
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
    /// Precision of the solver's populations, for the bytes per interface node D (5 × 4 or 5 × 8).
    /// Default f32.
    #[arg(long, value_enum)]
    pub precision: Option<PrecisionArg>,
    /// Write every result and model row as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Draw aggregate throughput against device count as a PNG.
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
            .map(str::parse)
            .collect::<Result<Vec<_>, _>>()?,
    )
    .map(Topologies)
}

fn parse_transports(s: &str) -> Result<Transports, String> {
    if s.trim().eq_ignore_ascii_case("all") {
        return Ok(Transports(Transport::ALL.to_vec()));
    }
    dedup(
        s.split(',')
            .map(str::parse)
            .collect::<Result<Vec<_>, _>>()?,
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
}

/// Everything a `comm-bench` invocation measured.
pub struct Report {
    pub backend: Backend,
    pub domain_edge: usize,
    pub bytes_per_node: f64,
    pub single_step_s: Option<f64>,
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

/// Runs every configuration the arguments ask for, calling `progress` after each.
pub fn measure(args: &CommBenchArgs, progress: &mut dyn FnMut(&BenchResult)) -> Result<Report> {
    let backend = match args.backend.unwrap_or(BackendArg::Auto) {
        BackendArg::Cpu => Backend::Cpu,
        BackendArg::Cuda => Backend::Cuda,
        BackendArg::Auto => match comm_bench::available_devices(Backend::Cuda) {
            Ok(n) if n > 0 => Backend::Cuda,
            _ => Backend::Cpu,
        },
    };
    let available = comm_bench::available_devices(backend).map_err(comm_error)?;
    let spec = args.devices.clone().unwrap_or_default();
    let devices = match (&spec, backend) {
        // CPU devices are virtual: any count or ids name them.
        (DeviceSpec::Count(n), Backend::Cpu) => (0..*n).collect(),
        (DeviceSpec::List(ids), Backend::Cpu) => ids.clone(),
        _ => spec.resolve(available).map_err(|m| usage("--devices", m))?,
    };
    // The library checks the shape too; checking here first names the option the user typed.
    if args.edge == 0 {
        bail!(usage("--edge", "must be at least 1"));
    }
    if args.arrays == 0 {
        bail!(usage("--arrays", "must be at least 1"));
    }
    let ell = args.domain_edge.unwrap_or(args.edge);
    if ell == 0 {
        bail!(usage("--domain-edge", "must be at least 1"));
    }
    let positive = |flag: &str, v: Option<f64>| match v {
        Some(x) if !(x.is_finite() && x > 0.0) => {
            Err(usage(flag, format!("{x} must be a finite number > 0")))
        }
        _ => Ok(v),
    };
    let single_step_s = match (
        positive("--solver-mlups", args.solver_mlups)?,
        positive("--kernel-time", args.kernel_time)?,
    ) {
        (Some(p), _) => Some(model::kernel_time_from_mlups(ell, p)),
        (None, Some(us)) => Some(us * 1e-6),
        (None, None) => None,
    };
    let value_bytes = match args.precision.unwrap_or(PrecisionArg::F32) {
        PrecisionArg::F32 => 4,
        PrecisionArg::F64 => 8,
    };
    let d = model::bytes_per_node(value_bytes);
    let topologies = args
        .topology
        .clone()
        .map_or(vec![Topology::Linear], |t| t.0);
    let transports = args
        .transport
        .clone()
        .map_or(vec![Transport::ZeroCopy], |t| t.0);
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
                    match comm_bench::run(backend, &cfg) {
                        Ok(result) => {
                            progress(&result);
                            let model = model::row(
                                ell,
                                n,
                                topology,
                                d,
                                result.aggregate_gbs * 1e9,
                                single_step_s,
                            );
                            runs.push(Measured { result, model });
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
    if runs.is_empty() {
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
        let _ = writeln!(
            s,
            "{:<11} {:<8} {:<5} {:>3} {:>12} {:>12} {:>16} {:>12} {:>12}",
            "transport",
            "graph",
            "trans",
            "i",
            "need GB/s",
            "have GB/s",
            "comm-bound MLUPS",
            "ideal MLUPS",
            "est. MLUPS"
        );
        for m in &self.runs {
            let (r, row) = (&m.result, &m.model);
            let _ = writeln!(
                s,
                "{:<11} {:<8} {:<5} {:>3} {:>12} {:>12.2} {:>16} {:>12} {:>12}",
                r.transport.name(),
                r.topology.name(),
                if r.transpose { "yes" } else { "no" },
                row.devices,
                opt(row.required_gbs, 2),
                row.measured_gbs,
                opt(row.comm_bound_mlups, 0),
                opt(row.ideal_mlups, 0),
                opt(row.predicted_mlups, 0)
            );
        }
        for k in &self.skipped {
            let _ = writeln!(s, "skipped: {k}");
        }
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
                v
            })
            .collect();
        serde_json::json!({
            "benchmark": "comm-bench",
            "backend": self.backend,
            "domain_edge": self.domain_edge,
            "bytes_per_node": self.bytes_per_node,
            "single_device_step_us": self.single_step_s.map(|t| t * 1e6),
            "runs": runs,
            "skipped": self.skipped,
        })
    }

    /// One series per (transport, graph, transposition): aggregate GB/s against device count.
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
                    mark: Mark::Line,
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

/// Runs `thelma comm-bench`: measures, prints, writes the requested files.
pub fn run(args: CommBenchArgs) -> Result<()> {
    println!(
        "comm-bench: {} arrays of {}² words per link and direction ({} KiB), {} iterations after {} warm-up",
        args.arrays,
        args.edge,
        args.arrays * args.edge * args.edge * 4 / 1024,
        args.iterations,
        args.warmup
    );
    let report = measure(&args, &mut |r| {
        println!(
            "  {} {} devices {:?}{}: {:.2} GB/s, {:.2} µs/iteration",
            r.transport,
            r.topology,
            r.devices,
            if r.transpose { " transposed" } else { "" },
            r.aggregate_gbs,
            r.time_per_iteration_us
        );
    })?;
    println!("backend {}", report.backend.name());
    for d in report
        .runs
        .last()
        .map(|m| &m.result.per_device)
        .into_iter()
        .flatten()
    {
        println!("device {:>2}: {}", d.device, d.describe);
    }
    print!("{}", report.text());
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report.json())?;
        write_bytes_atomic(path, text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("json: {}", path.display());
    }
    if let Some(path) = &args.plot {
        line_plot(
            path,
            (900, 600),
            "comm-bench: aggregate exchange throughput",
            "devices",
            "GB/s",
            &report.series(),
        )
        .with_context(|| format!("cannot write {}", path.display()))?;
        println!("plot: {}", path.display());
    }
    Ok(())
}
