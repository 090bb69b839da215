//! `thelma bench`: the measured memory bandwidth of each device (a copy kernel on a GPU, a threaded
//! copy on the CPU) and LBM throughput in MLUPS over lattice sizes and 1..N devices (weak scaling:
//! each slab gets size³; strong: size³ shared), with the share of the bandwidth roofline
//! (2·19·sizeof(real) + 1 bytes per node and step) and the parallel efficiency.
//!
//! LBM figures are means over the timed steps after warm-up steps; the runtime synchronises every
//! device before it stops the clock. The bandwidth is timed the same way, repetition by repetition,
//! and the best repetition is the roofline's (noise only ever slows a copy down).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};
use thelma_compute::cuda::{self, LaunchShape};
use thelma_compute::{ModelParams, Tuning};
use thelma_core::physics::{Collision, D3Q19};
use thelma_core::slab_bytes;
use thelma_core::{BackendName, CaseConfig, DeviceSpec, Precision, Streaming, MAX_THREADS};
use thelma_core::{Domain, Layout, SlabSpec};
use thelma_core::{Runtime, RuntimeError, Transport, TransportChoice};
use thelma_geometry::{immersed_bodies, Geometry};
use thelma_results::wrap;

use crate::cli::{BackendParser, PrecisionArg, StreamingArg};
use crate::error::UsageError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scaling {
    /// Each slab gets size³ (the domain grows with the slab count; one slab per device unless
    /// --slabs-per-device).
    Weak,
    /// size³ in all, shared by the devices.
    Strong,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Compute module: auto picks CUDA when a GPU is present.
    #[arg(long, value_name = "NAME", value_parser = BackendParser, default_value = "auto")]
    pub backend: BackendName,
    /// Devices in slab order (`all`, a count, or ids `0,1,2,3`); runs use the first 1, 2, … of them.
    #[arg(long, value_name = "SPEC", value_parser = DeviceSpec::parse, default_value = "all", allow_hyphen_values = true)]
    pub devices: DeviceSpec,
    /// Slabs per device (2: two slabs on each GPU, exchanging through the same interface protocol);
    /// measures what the exchange costs against one slab per device: the sweep then starts with a
    /// one-slab run on one device, the baseline of the efficiency column.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub slabs_per_device: usize,
    /// Cut each lattice into X × Y × Z subdomains (a partition that cuts x and y, as a layout
    /// file's grid) spread over the devices in turn, in place of slabs: measures what a grid's
    /// exchange across faces and edges costs against one slab on one device, the sweep's first
    /// run (the sweep takes the device counts that divide the subdomains).
    #[arg(long, value_name = "X,Y,Z", value_parser = crate::cli::parse_size, conflicts_with_all = ["slabs_per_device", "case"])]
    pub grid: Option<[usize; 3]>,
    /// Transports of the channels between slabs, comma-separated: auto, zero-copy, device, peer.
    /// Each multi-slab run is measured in each; the one-slab baseline once.
    #[arg(long, value_name = "NAME,...", value_parser = TransportChoice::parse, value_delimiter = ',', default_value = "auto")]
    pub transport: Vec<TransportChoice>,
    /// Only the run on all the listed devices (no 1..N sweep).
    #[arg(long)]
    pub no_sweep: bool,
    /// Edge lengths N of the cubes (per device under weak scaling). Default 128,256,384,512 on GPUs,
    /// 64 on the CPU.
    #[arg(
        long,
        value_name = "N,N,...",
        value_delimiter = ',',
        allow_hyphen_values = true
    )]
    pub sizes: Vec<usize>,
    /// Collision operators to measure (bgk, trt, mrt).
    #[arg(long, value_name = "NAME,...", value_parser = Collision::parse, value_delimiter = ',', default_value = "mrt")]
    pub collision: Vec<Collision>,
    /// Measure with the Smagorinsky eddy viscosity of constant C (rows are labelled `<op>+les`).
    #[arg(long, value_name = "C")]
    pub smagorinsky: Option<f64>,
    /// Precisions to measure.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "f32")]
    pub precision: Vec<PrecisionArg>,
    /// Streamings to measure (two-lattice, in-place), each in every precision.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "two-lattice")]
    pub streaming: Vec<StreamingArg>,
    #[arg(long, value_enum, default_value = "weak")]
    pub scaling: Scaling,
    /// Timed steps per measurement. Default on GPUs: 5·10⁹ node updates, 200 to 2,000 steps; 20 on
    /// the CPU.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub steps: Option<u64>,
    /// Untimed steps before the timed ones. Default 20 on GPUs, 3 on the CPU.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub warmup: Option<u64>,
    /// CUDA: threads per block along x of the collision kernel (a power of two). Default: 32 for
    /// the step with a temperature lattice (f32 or f16), 128 otherwise.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub block: Option<u32>,
    /// CUDA: minimum resident blocks per multiprocessor the kernel is compiled for (bounds its
    /// registers). Default: 1,024 threads' worth in f32 (896 with [thermal]; with [thermal] under
    /// the Smagorinsky model 768 for BGK, 640 for MRT and TRT), 1,280 in f16 (1,024 with
    /// [thermal]), 512 in f64.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub min_blocks: Option<u32>,
    /// CPU backend: threads in all (0: one per core).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub threads: usize,
    /// Size of the buffer of the bandwidth copy, in MiB (timed in several repetitions; a larger
    /// buffer steadies a noisy probe).
    #[arg(
        long,
        value_name = "MIB",
        default_value_t = 1024,
        allow_negative_numbers = true
    )]
    pub bandwidth_mib: usize,
    /// Also write the results as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Measure a case file's geometry (its lattice, boundaries, obstacles and bodies, shared by the
    /// devices) beside the closed box of the same lattice, and the case's share of the box's MLUPS:
    /// what open faces and bodies cost. `--sizes` and `--scaling` do not apply.
    #[arg(long, value_name = "FILE")]
    pub case: Option<PathBuf>,
    /// Also time each run served live (`thelma run --live`'s defaults: a picture every 10 steps
    /// and 100 ms at least) with a viewer connected over loopback, alternately with plain runs
    /// (`--live-rounds`), and report the median share of the plain runs' MLUPS. Every run of the
    /// measurement, the plain ones included, then has the kernels `thelma run --live` compiles
    /// (held temperatures read from constant memory, which a run not served live has as
    /// literals: PERFORMANCE.md gives that difference).
    #[arg(long)]
    pub live: bool,
    /// With `--live`: how many times a plain run and a run served live (each of `--steps`)
    /// alternate (3 unless given); the share reported is the median of each served run's MLUPS
    /// over the plain run's before it, which a machine whose speed drifts (a shared VM) moves
    /// least.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub live_rounds: Option<u32>,
}

/// One measurement.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchRow {
    pub collision: String,
    pub precision: String,
    /// `two-lattice` or `in-place` (reports written before it was recorded: two-lattice).
    #[serde(default = "two_lattice")]
    pub streaming: String,
    /// Edge of the cube per slab (weak) or in all (strong); with `--case`, the case's longest edge
    /// (its lattice is `lattice`).
    pub size: usize,
    /// Devices used (distinct device ids).
    pub devices: usize,
    /// Slabs (worker threads) over those devices; 0 in reports written before it was recorded,
    /// which had one slab per device.
    #[serde(default)]
    pub slabs: usize,
    /// With `--grid`, the subdomains along x, y and z (`slabs` is their product).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grid: Option<[usize; 3]>,
    /// The transports the run's channels took (`device`, `peer+zero-copy`), `-` for one slab
    /// without channels; empty in reports written before it was recorded (zero-copy).
    #[serde(default)]
    pub transport: String,
    pub lattice: [usize; 3],
    pub steps: u64,
    pub wall_s: f64,
    pub mlups: f64,
    pub mlups_per_device: f64,
    /// Bandwidth roofline of the devices used: devices × bandwidth / bytes per node.
    pub roofline_mlups: f64,
    pub roofline_fraction: f64,
    /// MLUPS on k devices over k × MLUPS of one slab on one device (same size), when that run was
    /// measured.
    pub parallel_efficiency: Option<f64>,
    /// The case file measured (`--case`); none for the closed box.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub case: Option<String>,
    /// A case's MLUPS over the closed box's of the same lattice, slabs and collision (`--case`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub of_box: Option<f64>,
    /// With `--live`: the same steps served live with a viewer connected, alternately with plain
    /// runs: the medians of the served runs' MLUPS and of their shares, every round, and the
    /// pictures the viewer received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<LiveCost>,
}

fn two_lattice() -> String {
    Streaming::TwoLattice.name().into()
}

/// What serving a run live costs (`thelma bench --live`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LiveCost {
    /// The median of the served runs' MLUPS.
    pub mlups: f64,
    /// The median of each served run's MLUPS over the plain run's before it.
    pub share: f64,
    /// The pictures the viewer received over all served runs.
    pub pictures: u64,
    /// Each round's plain and served MLUPS; empty in reports written before rounds were recorded
    /// (one served run, its share of the row's plain run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<[f64; 2]>,
    /// The median over the served runs of the share of their wall time spent outside their runs
    /// of steps (pictures, status messages, the breaks between runs); absent in reports written
    /// before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside: Option<f64>,
}

/// The median of `v` (not empty): the mean of the middle two for an even count.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// Alternates, `rounds` times, `steps` plain steps of `rt` and `steps` steps served live as
/// `thelma run --live` serves a run (its default cadence), a viewer connected over loopback and
/// reading every message; a served run is timed whole: the pictures, the status messages and the
/// runs of steps they cut the steps into. The server and its viewer stay up through the plain
/// runs, idle (nothing is published).
fn live_cost(rt: &mut Runtime, case: &CaseConfig, steps: u64, rounds: u32) -> Result<LiveCost> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let opts = crate::live::LiveOptions::new("127.0.0.1:0", false, 10, 100)?;
    let mut live = crate::live::LiveServer::start(&opts, case, "thelma bench")?;
    let url = live.url().replacen("http://", "ws://", 1) + "ws";
    let pictures = Arc::new(AtomicU64::new(0));
    let viewer = {
        let pictures = pictures.clone();
        std::thread::spawn(move || -> Result<()> {
            // A viewer stands for a browser on another machine (the page over an SSH tunnel): it
            // reads every message, at the priority of the server that sends them.
            crate::live::lower_priority();
            let (mut ws, _) = tungstenite::connect(&url).context("the viewer connects")?;
            // Until the server closes the socket at the end.
            while let Ok(m) = ws.read() {
                // The server writes compact JSON: a substring finds a picture without parsing it.
                if m.to_text().is_ok_and(|t| t.contains(r#""type":"frame""#)) {
                    pictures.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(())
        })
    };
    let waited = Instant::now();
    while live.viewers() == 0 {
        if waited.elapsed().as_secs() > 10 || viewer.is_finished() {
            bail!("the live view's viewer did not connect");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let nodes = rt.domain().nodes() as f64;
    let mut measured = Vec::with_capacity(rounds as usize);
    let mut outside = Vec::with_capacity(rounds as usize);
    for _ in 0..rounds {
        let st = rt.run(steps)?;
        let plain = nodes * st.steps as f64 / st.wall.as_secs_f64() / 1e6;
        let target = rt.step() + steps;
        let mut rate = plain * 1e6 / nodes;
        let t = Instant::now();
        let mut stepping = std::time::Duration::ZERO;
        while rt.step() < target {
            let chunk = live.clamp_chunk(rt.step(), target - rt.step(), rate);
            let st = rt.run(chunk)?;
            stepping += st.wall;
            rate = chunk as f64 / st.wall.as_secs_f64().max(1e-9);
            let figures = crate::live::Figures {
                step: rt.step(),
                target,
                mlups: nodes * rate / 1e6,
                ..Default::default()
            };
            live.publish(rt, &figures, false)?;
            let _ = live.poll();
        }
        let whole = t.elapsed();
        let served = nodes * steps as f64 / whole.as_secs_f64() / 1e6;
        measured.push([plain, served]);
        outside.push(1.0 - stepping.as_secs_f64() / whole.as_secs_f64().max(1e-9));
    }
    drop(live);
    let _ = viewer.join();
    Ok(LiveCost {
        mlups: median(measured.iter().map(|r| r[1]).collect()),
        share: median(measured.iter().map(|r| r[1] / r[0]).collect()),
        pictures: pictures.load(Ordering::Relaxed),
        rounds: measured,
        outside: Some(median(outside)),
    })
}

impl BenchRow {
    /// Whether every device held one slab (always so in reports that did not record slabs; never
    /// in a grid's run).
    pub fn one_slab_per_device(&self) -> bool {
        self.grid.is_none() && (self.slabs == 0 || self.slabs == self.devices)
    }
}

/// The spread of the bandwidth probe's repetitions above which it is called unreliable.
const MAX_BANDWIDTH_SPREAD: f64 = 0.10;

/// Timed repetitions of the bandwidth copy.
const BANDWIDTH_REPETITIONS: usize = 7;

/// The copy-bandwidth probe: repetitions timed one by one after a warm-up copy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BandwidthProbe {
    /// Each repetition's bandwidth (read + write), bytes per second, in the order measured.
    pub samples: Vec<f64>,
    /// The best repetition: the bandwidth of the roofline.
    pub best: f64,
    pub median: f64,
    /// (best − worst) / best.
    pub spread: f64,
}

impl BandwidthProbe {
    /// Summarises the repetitions; none when there is no finite positive one.
    pub fn from_samples(samples: Vec<f64>) -> Option<BandwidthProbe> {
        let mut sorted: Vec<f64> = samples
            .iter()
            .copied()
            .filter(|x| x.is_finite() && *x > 0.0)
            .collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            0.5 * (sorted[n / 2 - 1] + sorted[n / 2])
        };
        let (worst, best) = (sorted[0], sorted[n - 1]);
        Some(BandwidthProbe {
            samples,
            best,
            median,
            spread: (best - worst) / best,
        })
    }

    /// Whether the repetitions agree within [`MAX_BANDWIDTH_SPREAD`].
    pub fn reliable(&self) -> bool {
        self.spread <= MAX_BANDWIDTH_SPREAD
    }

    /// What the probe measured, and when it cannot be trusted, a warning saying so.
    pub fn describe(&self, device: &str) -> Vec<String> {
        let gbs = |x: f64| x / 1e9;
        // The device's name on a line of its own: a GPU's is long enough to push the figures past
        // the width of a terminal.
        let mut lines = vec![format!(
            "bandwidth (copy, read + write) on {device}:\n  {:.1} GB/s, the best of {} timed \
             repetitions (median {:.1} GB/s, spread {:.1} %)",
            gbs(self.best),
            self.samples.len(),
            gbs(self.median),
            100.0 * self.spread
        )];
        if !self.reliable() {
            let worst = self.best * (1.0 - self.spread);
            lines.push(wrap(&format!(
                "warning: the bandwidth probe is unreliable: its repetitions spread {:.1} %\n  \
                 ({:.1} to {:.1} GB/s, more than {:.0} %), so the roofline shares are too;\n  \
                 measure on an idle machine or with a larger --bandwidth-mib",
                100.0 * self.spread,
                gbs(worst),
                gbs(self.best),
                100.0 * MAX_BANDWIDTH_SPREAD
            )));
        }
        lines
    }
}

/// What `thelma bench` measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchReport {
    pub backend: String,
    /// The devices, once each, in slab order (reports written before slabs were recorded list a
    /// device once per slab).
    pub devices: Vec<String>,
    /// Effective copy bandwidth (read + write) of the first device, bytes per second: the best
    /// repetition of the probe.
    pub bandwidth_bytes_per_s: f64,
    /// The probe's repetitions (absent from reports written before they were kept).
    #[serde(default)]
    pub bandwidth: Option<BandwidthProbe>,
    pub scaling: Scaling,
    pub rows: Vec<BenchRow>,
    /// Measurements that were skipped, with why (too large for the device, say).
    pub skipped: Vec<String>,
    pub date_utc: String,
}

/// Bytes a step moves per node at the least: every population read and written once, and the
/// palette index byte; with a temperature lattice its 7 populations too (the fused step reads and
/// writes each once).
fn bytes_per_node(p: Precision, thermal: bool) -> f64 {
    let q = D3Q19.q() + if thermal { thelma_core::physics::QT } else { 0 };
    (2 * q * p.bytes() + 1) as f64
}

/// Host copy bandwidth: every core copies its share of a large buffer, `repetitions` times after a
/// warm-up copy, each repetition timed on its own (bytes read + written per second). A repetition
/// copies the buffer as often as it takes to read 256 MiB (at most 64 times), so that starting the
/// threads weighs little. A copy thread that cannot be started is an error, not a panic.
fn cpu_bandwidth(bytes: usize, threads: usize, repetitions: usize) -> Result<Vec<f64>> {
    let threads = if threads == 0 {
        thelma_core::core_count()
    } else {
        threads
    }
    .max(1);
    let n = (bytes / 8).max(1);
    let src = vec![1u64; n];
    let mut dst = vec![0u64; n];
    let chunk = n.div_ceil(threads);
    let copy = |dst: &mut [u64]| -> Result<()> {
        std::thread::scope(|s| {
            for (d, c) in dst.chunks_mut(chunk).zip(src.chunks(chunk)) {
                std::thread::Builder::new()
                    .spawn_scoped(s, move || d.copy_from_slice(c))
                    .context("cannot start a bandwidth copy thread")?;
            }
            Ok(())
        })
    };
    copy(&mut dst)?;
    let copies = ((256usize << 20) / (n * 8)).clamp(1, 64);
    let mut samples = Vec::with_capacity(repetitions);
    for _ in 0..repetitions.max(1) {
        let t = Instant::now();
        for _ in 0..copies {
            copy(&mut dst)?;
        }
        let secs = t.elapsed().as_secs_f64();
        std::hint::black_box(&dst);
        samples.push(2.0 * (n * 8) as f64 * copies as f64 / secs.max(1e-9));
    }
    Ok(samples)
}

/// The largest bandwidth buffer accepted, MiB: far above any cache, far below any memory it would
/// then have to fit twice (source and destination).
const MAX_BANDWIDTH_MIB: usize = 64 << 10;

/// The most slabs a benchmark may split its lattices into: each is a worker thread (and on the CPU
/// a pool of threads), as for `thelma run`.
const MAX_SLABS: usize = 1024;

/// Checks the options that do not depend on the backend, naming the option at fault.
fn check_args(args: &BenchArgs) -> Result<()> {
    if let Some(g) = args.grid {
        let cells = g.iter().try_fold(1usize, |a, &b| a.checked_mul(b));
        if !cells.is_some_and(|c| (1..=MAX_SLABS).contains(&c)) {
            bail!(UsageError::new(
                "--grid",
                format!(
                    "{}x{}x{} is not 1 to {MAX_SLABS} subdomains",
                    g[0], g[1], g[2]
                )
            ));
        }
        if args
            .streaming
            .iter()
            .any(|s| matches!(s, StreamingArg::InPlace))
        {
            bail!(UsageError::new(
                "--grid",
                "in-place streaming runs on slabs of whole x-y planes only",
            ));
        }
    }
    if args.slabs_per_device == 0 || args.slabs_per_device > MAX_SLABS {
        bail!(UsageError::new(
            "--slabs-per-device",
            format!("{} is not in 1..={MAX_SLABS}", args.slabs_per_device)
        ));
    }
    if args.bandwidth_mib == 0 || args.bandwidth_mib > MAX_BANDWIDTH_MIB {
        bail!(UsageError::new(
            "--bandwidth-mib",
            format!("{} is not in 1..={MAX_BANDWIDTH_MIB}", args.bandwidth_mib)
        ));
    }
    if args.threads > MAX_THREADS {
        bail!(UsageError::new(
            "--threads",
            format!(
                "{} threads is not a plausible core count (at most {MAX_THREADS})",
                args.threads
            )
        ));
    }
    if args.live_rounds.is_some() && !args.live {
        bail!(UsageError::new(
            "--live-rounds",
            "measures the live view's cost: it needs --live"
        ));
    }
    if args.case.is_some() && !args.sizes.is_empty() {
        bail!(UsageError::new(
            "--sizes",
            "a case (--case) measures its own lattice; give one or the other"
        ));
    }
    for &s in &args.sizes {
        // The same limits as `thelma run --size`, said for this option.
        let mut case = CaseConfig::default();
        case.domain.size = [s; 3];
        if let Err(e) = case.validate() {
            if e.flag == "--size" {
                bail!(UsageError::new("--sizes", e.message));
            }
        }
    }
    Ok(())
}

/// Memory the lattices of `slabs` take: on the CPU module (`passes`, whose temperature lattice
/// keeps per-node arrays between its passes) or on a GPU.
fn lattice_bytes_of(
    slabs: &[SlabSpec],
    precision: Precision,
    streaming: Streaming,
    thermal: bool,
    passes: bool,
) -> u64 {
    slabs
        .iter()
        .map(|s| {
            slab_bytes(s, &D3Q19, precision, streaming)
                + if thermal {
                    thelma_core::thermal_slab_bytes(s, precision, passes)
                } else {
                    0
                }
        })
        .sum()
}

fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Runs the benchmark; `progress` receives each row as it is measured.
pub fn run_bench(args: &BenchArgs, progress: &mut dyn FnMut(&str)) -> Result<BenchReport> {
    check_args(args)?;
    let choice = crate::backend::choose(&args.backend)?;
    if args.backend.is_auto() {
        progress(&choice.note);
    }
    let on_gpu = !choice.backend.host;
    let ids = crate::backend::resolve(&choice, &args.devices)?;
    if ids.len().saturating_mul(args.slabs_per_device) > MAX_SLABS {
        bail!(UsageError::new(
            "--slabs-per-device",
            format!(
                "{} devices × {} slabs is more than {MAX_SLABS} slabs",
                ids.len(),
                args.slabs_per_device
            )
        ));
    }
    if let Some(b) = args
        .block
        .filter(|b| on_gpu && !(b.is_power_of_two() && (32..=1024).contains(b)))
    {
        bail!(UsageError::new(
            "--block",
            format!("{b} is not a power of two in 32..=1024")
        ));
    }
    // The case of `--case`, checked whole (a bad file or key is refused before anything runs).
    let base = match &args.case {
        Some(path) => {
            let case = CaseConfig::from_file(path)
                .map_err(|e| UsageError::new("--case", format!("{e:#}")))?;
            case.validate()
                .map_err(|e| UsageError::new(e.flag, e.message))?;
            // Built once: it depends on neither the collision nor the precision nor the slabs.
            let geometry = Arc::new(Geometry::from_case(&case)?);
            Some((case, path.display().to_string(), geometry))
        }
        None => None,
    };
    // Its immersed bodies, forced in its runs as `thelma run` forces them.
    let immersed = match &base {
        Some((case, ..)) if case.has_immersed_bodies() => {
            Some(immersed_bodies(case).map_err(|e| UsageError::new("--case", e.to_string()))?)
        }
        _ => None,
    };
    let sizes = if let Some((c, ..)) = &base {
        vec![c.domain.size.into_iter().max().unwrap_or(0)]
    } else if args.sizes.is_empty() {
        if on_gpu {
            vec![128, 256, 384, 512]
        } else {
            vec![64]
        }
    } else {
        args.sizes.clone()
    };
    let available = if on_gpu {
        None
    } else {
        crate::preflight::available_host_memory()
    };
    if let Some(avail) = available {
        // The smallest measurement of each size (one device) must fit, or the size is refused.
        for &s in &sizes {
            let lattice = base.as_ref().map_or([s; 3], |(c, ..)| c.domain.size);
            let one = SlabSpec::split(Domain::new(lattice, [false; 3]), 1)?;
            let thermal = base.as_ref().is_some_and(|(c, ..)| c.thermal.is_some());
            // The least memory the listed streamings take.
            let streaming = args
                .streaming
                .iter()
                .map(|&s| Streaming::from(s))
                .min_by_key(|s| s.lattices())
                .unwrap_or_default();
            let need = lattice_bytes_of(&one, Precision::F32, streaming, thermal, true);
            if need > avail {
                bail!(UsageError::new(
                    if base.is_some() { "--case" } else { "--sizes" },
                    format!(
                        "{}x{}x{} needs {:.1} GiB of host memory, {:.1} GiB available",
                        lattice[0],
                        lattice[1],
                        lattice[2],
                        need as f64 / (1u64 << 30) as f64,
                        avail as f64 / (1u64 << 30) as f64
                    )
                ));
            }
        }
        let copy = (2 * args.bandwidth_mib as u64) << 20;
        if copy > avail {
            bail!(UsageError::new(
                "--bandwidth-mib",
                format!(
                    "{} MiB twice (source and destination) is more than the {} MiB of host memory available",
                    args.bandwidth_mib,
                    avail >> 20
                )
            ));
        }
    }
    // Small lattices step in microseconds: time at least about 5·10⁹ node updates on a GPU.
    let default_steps = |nodes: usize| {
        if on_gpu {
            (5e9 / nodes as f64).clamp(200.0, 2000.0) as u64
        } else {
            20
        }
    };
    let warmup = args.warmup.unwrap_or(if on_gpu { 20 } else { 3 });

    let samples = if on_gpu {
        cuda::bench::copy_bandwidth(ids[0], args.bandwidth_mib << 20, BANDWIDTH_REPETITIONS, 10)
            .with_context(|| format!("bandwidth probe on cuda:{}", ids[0]))?
    } else {
        cpu_bandwidth(
            args.bandwidth_mib << 20,
            args.threads,
            BANDWIDTH_REPETITIONS,
        )?
    };
    let probe = BandwidthProbe::from_samples(samples)
        .context("the bandwidth probe measured no usable repetition")?;
    let bandwidth = probe.best;
    let names: Vec<String> = ids
        .iter()
        .map(|&d| {
            if on_gpu {
                cuda::gpu_info(d)
                    .map(|g| format!("cuda:{d} {}", g.name))
                    .unwrap_or_else(|_| format!("cuda:{d}"))
            } else {
                format!("cpu:{d}")
            }
        })
        .collect();
    for line in probe.describe(&names[0]) {
        progress(&line);
    }

    // The runs of the sweep, each as its slabs' device ids: 1..N devices with
    // --slabs-per-device slabs each, after one slab on one device when that is not already the
    // first (the efficiency's baseline).
    let mut runs: Vec<Vec<usize>> = Vec::new();
    let cells = args.grid.map_or(1, |g| g.iter().product::<usize>());
    if !args.no_sweep && (args.slabs_per_device > 1 || cells > 1) {
        runs.push(vec![ids[0]]);
    }
    let counts: Vec<usize> = match (args.no_sweep, args.grid) {
        (true, _) => vec![ids.len()],
        (false, None) => (1..=ids.len()).collect(),
        // A grid's subdomains shared evenly: device counts that divide them.
        (false, Some(_)) => (1..=ids.len().min(cells))
            .filter(|k| cells.is_multiple_of(*k))
            .collect(),
    };
    for &k in &counts {
        runs.push(match args.grid {
            // Subdomain s (x fastest) on device s mod k.
            Some(_) => (0..cells).map(|s| ids[s % k]).collect(),
            None => ids[..k]
                .iter()
                .flat_map(|&d| std::iter::repeat_n(d, args.slabs_per_device))
                .collect(),
        });
    }
    let total_threads = if args.threads == 0 {
        thelma_core::core_count()
    } else {
        args.threads
    };
    // What each run measures: the cavity, or the closed box of a case's lattice and then the case.
    let geometries: Vec<Option<&CaseConfig>> = match &base {
        Some((c, ..)) => vec![None, Some(c)],
        None => vec![None],
    };
    let case_name = base.as_ref().map(|(_, name, _)| name.clone());
    let mut rows: Vec<BenchRow> = Vec::new();
    let mut skipped = Vec::new();
    let mut started = false;
    let variants = args.precision.iter().flat_map(|&p| {
        args.streaming
            .iter()
            .map(move |&s| (Precision::from(p), Streaming::from(s)))
    });
    for (precision, streaming) in variants {
        for &collision in &args.collision {
            // A case keeps its own eddy viscosity unless --smagorinsky says otherwise.
            let smagorinsky = args
                .smagorinsky
                .or(base.as_ref().and_then(|(c, ..)| c.numerics.smagorinsky));
            let label = match smagorinsky {
                Some(_) => format!("{collision}+les"),
                None => collision.name().to_string(),
            };
            for &s in &sizes {
                // MLUPS of one slab on one device, per geometry: the efficiency's baseline.
                let mut one: Vec<Option<f64>> = vec![None; geometries.len()];
                for (k, &transport) in args.transport.iter().enumerate() {
                    for slab_ids in &runs {
                        // The one-slab baseline is measured once, with the first transport, where
                        // it has no channels (a case periodic along z has: the slab is its own
                        // neighbour).
                        let ring = base.as_ref().is_some_and(|(c, ..)| c.domain.periodic[2]);
                        if k > 0 && slab_ids.len() == 1 && !ring {
                            continue;
                        }
                        let slabs = slab_ids.len();
                        let devices = distinct(slab_ids);
                        // A grid's run (the sweep's one-slab baseline is not): weak scaling
                        // stacks a cube per device along z.
                        let grid = args.grid.filter(|_| slabs > 1 || cells == 1);
                        let lattice = match (&base, args.scaling) {
                            (Some((c, ..)), _) => c.domain.size,
                            (None, Scaling::Weak) if grid.is_some() => {
                                [s, s, s.saturating_mul(devices)]
                            }
                            (None, Scaling::Weak) => [s, s, s.saturating_mul(slabs)],
                            (None, Scaling::Strong) => [s, s, s],
                        };
                        if let Some(g) = grid {
                            if (0..3).any(|a| lattice[a] < g[a]) {
                                skipped.push(format!(
                                    "{s}: a {}x{}x{} grid of {}x{}x{} nodes",
                                    g[0], g[1], g[2], lattice[0], lattice[1], lattice[2]
                                ));
                                continue;
                            }
                        } else if lattice[2] < slabs {
                            skipped.push(format!("{s}: {slabs} slabs for {} planes", lattice[2]));
                            continue;
                        }
                        // The closed box's MLUPS of this lattice and these slabs (a case's baseline).
                        let mut box_mlups: Option<f64> = None;
                        for (g, geometry_case) in geometries.iter().enumerate() {
                            let mut case = match geometry_case {
                                Some(c) => (*c).clone(),
                                None => {
                                    let mut c = CaseConfig::default();
                                    c.domain.size = lattice;
                                    c
                                }
                            };
                            case.numerics.collision = collision;
                            case.numerics.smagorinsky = smagorinsky;
                            case.numerics.precision = precision;
                            case.numerics.streaming = streaming;
                            let lat = match case.validate() {
                                Ok(lat) => lat,
                                // Weak scaling may take a size that fits one device past the node limit.
                                Err(e) if e.flag == "--size" => {
                                    skipped.push(format!("{s} on {slabs} slabs: {}", e.message));
                                    continue;
                                }
                                Err(e) => bail!(UsageError::new(e.flag, e.message)),
                            };
                            let geometry = match (geometry_case, &base) {
                                (Some(_), Some((.., g))) => g.clone(),
                                _ => Arc::new(Geometry::from_case(&case)?),
                            };
                            let params = ModelParams {
                                // Served live, a run's held temperatures may be steered: timed as
                                // `thelma run --live` compiles them.
                                steered_temperatures: args.live,
                                ..ModelParams::new(&case, &lat, geometry)
                            };
                            let uniform = params.model.force;
                            // The slabs of a device share its cores (host backends).
                            let per_device = slabs.div_ceil(devices);
                            let tuning = Tuning {
                                threads: (total_threads / per_device).max(1),
                                launch: LaunchShape {
                                    block_x: args.block,
                                    min_blocks: args.min_blocks,
                                },
                                transport,
                            };
                            let factory = choice.factory(params, devices, &tuning)?;
                            let domain = Domain::new(lattice, case.domain.periodic);
                            let slab_specs = match grid {
                                Some(g) => SlabSpec::grid(domain, g)?,
                                None => SlabSpec::split(domain, slabs)?,
                            };
                            // The flow's lattices and, for a case with [thermal], the temperature's.
                            let lattice_bytes = |sl: &SlabSpec| {
                                lattice_bytes_of(
                                    std::slice::from_ref(sl),
                                    precision,
                                    streaming,
                                    case.thermal.is_some(),
                                    !on_gpu,
                                )
                            };
                            let too_big = slab_specs
                                .iter()
                                .zip(slab_ids)
                                .find_map(|(sl, &d)| {
                                    // Slabs sharing a device share its memory.
                                    let on_device =
                                        slab_ids.iter().filter(|&&x| x == d).count() as u64;
                                    let need = on_device * lattice_bytes(sl);
                                    factory
                                        .device_memory(d)
                                        .filter(|m| need > m.free - m.free / 20)
                                        .map(|m| {
                                            format!(
                                                "{need} bytes needed on device {d}, {} free",
                                                m.free
                                            )
                                        })
                                })
                                .or_else(|| {
                                    // The CPU module's lattices all live in host memory.
                                    let need = slab_specs.iter().map(lattice_bytes).sum::<u64>();
                                    available.filter(|&a| need > a).map(|a| {
                                        format!("{need} bytes of host memory needed, {a} available")
                                    })
                                });
                            if let Some(why) = too_big {
                                skipped.push(format!(
                                    "{label} {} {s} on {devices} devices ({slabs} slabs): {why}",
                                    precision.name()
                                ));
                                continue;
                            }
                            let stop = Arc::new(AtomicBool::new(false));
                            let started_rt = match grid {
                                Some(_) => {
                                    let layout = Layout {
                                        slabs: slab_specs.clone(),
                                        devices: slab_ids.clone(),
                                        ranks: vec![0; slabs],
                                    };
                                    Runtime::start_layout(factory, &layout, stop)
                                }
                                None => Runtime::start(factory, domain, slab_ids, stop),
                            };
                            let mut rt = match started_rt {
                                Ok(rt) => rt,
                                // A transport these devices cannot take is skipped, said as such.
                                Err(RuntimeError::Transport(e)) => {
                                    skipped.push(format!(
                                        "{label} {} {s} on {devices} devices ({slabs} slabs): {e}",
                                        precision.name()
                                    ));
                                    continue;
                                }
                                Err(e) => return Err(e.into()),
                            };
                            let transport_used = transports_used(&rt);
                            if !started {
                                started = true;
                                // Where hwloc could not pin a worker the figures are of unpinned threads:
                                // said once, as `thelma run` says it.
                                if let Some(e) =
                                    rt.devices().iter().find_map(|d| d.binding.as_ref().err())
                                {
                                    progress(&format!(
                                "warning: worker threads run unpinned ({e}); the figures may suffer"
                            ));
                                }
                                progress(&format!("device 0: {}", rt.devices()[0].describe));
                                // The case's name once, not on each of its rows: a path would take a
                                // row past the width of a terminal.
                                if let Some(name) = &case_name {
                                    progress(&wrap(&format!(
                                    "case {name}: its rows follow the closed box of its lattice\n  \
                                     `case N%`: the case's MLUPS as a share of the closed box's"
                                )));
                                }
                                progress(&header());
                            }
                            if let (Some(_), Some(bodies)) = (geometry_case, &immersed) {
                                rt.set_immersed(bodies.clone(), uniform)?;
                            }
                            if warmup > 0 {
                                rt.run(warmup)?;
                            }
                            let steps = args
                                .steps
                                .unwrap_or_else(|| default_steps(domain.nodes()))
                                .max(1);
                            let st = rt.run(steps)?;
                            let live = if args.live {
                                Some(live_cost(
                                    &mut rt,
                                    &case,
                                    steps,
                                    args.live_rounds.unwrap_or(3),
                                )?)
                            } else {
                                None
                            };
                            let bad = rt.health()?.iter().find_map(|h| h.non_finite);
                            rt.shutdown();
                            if let Some(node) = bad {
                                bail!("the benchmark diverged at node {node:?}");
                            }
                            let wall = st.wall.as_secs_f64();
                            let mlups = domain.nodes() as f64 * st.steps as f64 / wall / 1e6;
                            if slabs == 1 {
                                one[g] = Some(mlups);
                            }
                            if geometry_case.is_none() {
                                box_mlups = Some(mlups);
                            }
                            let roofline = devices as f64 * bandwidth
                                / bytes_per_node(precision, case.thermal.is_some())
                                / 1e6;
                            let row = BenchRow {
                                collision: label.clone(),
                                precision: precision.name().into(),
                                streaming: streaming.name().into(),
                                size: s,
                                devices,
                                slabs,
                                grid,
                                transport: transport_used,
                                lattice,
                                steps: st.steps,
                                wall_s: wall,
                                mlups,
                                mlups_per_device: mlups / devices as f64,
                                roofline_mlups: roofline,
                                roofline_fraction: mlups / roofline,
                                parallel_efficiency: one[g].map(|m1| mlups / (devices as f64 * m1)),
                                case: geometry_case.and(case_name.clone()),
                                of_box: geometry_case.and(box_mlups).map(|b| mlups / b),
                                live,
                            };
                            progress(&format_row(&row));
                            if let Some(l) = &row.live {
                                let each: Vec<String> = l
                                    .rounds
                                    .iter()
                                    .map(|[p, s]| format!("{:.1}", 100.0 * s / p))
                                    .collect();
                                progress(&format!(
                                    "  served live: {:.0} MLUPS, {:.1} % of the plain run (median of {} rounds: {} %), {} pictures to one viewer{}",
                                    l.mlups,
                                    100.0 * l.share,
                                    l.rounds.len(),
                                    each.join(" / "),
                                    l.pictures,
                                    l.outside.map_or(String::new(), |o| format!(
                                        "; {:.2} % of the served time outside the steps",
                                        100.0 * o
                                    ))
                                ));
                            }
                            rows.push(row);
                        }
                    }
                }
            }
        }
    }
    if rows.iter().any(|r| r.roofline_fraction > 1.0) {
        progress(&format!(
            "note: a roofline share above 100 % means the lattice ran faster than the copy probe\n  \
             ({:.1} GB/s per device): its working set fits a cache, or the probe measured low{}",
            bandwidth / 1e9,
            if probe.reliable() {
                ""
            } else {
                " (it was unreliable, above)"
            }
        ));
    }
    // A size or device that does not fit is met once per transport: said once.
    let mut said = std::collections::HashSet::new();
    skipped.retain(|s| said.insert(s.clone()));
    let report = BenchReport {
        backend: choice.backend.name.into(),
        devices: names,
        bandwidth_bytes_per_s: bandwidth,
        bandwidth: Some(probe),
        scaling: args.scaling,
        rows,
        skipped,
        date_utc: utc_now(),
    };
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&report)?;
        thelma_results::write_bytes_atomic(path, json.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(report)
}

/// The transports of a runtime's channels, in `Transport::ALL` order, joined by `+`; `-` without
/// channels.
fn transports_used(rt: &Runtime) -> String {
    let used: Vec<&str> = Transport::ALL
        .iter()
        .filter(|t| {
            rt.devices()
                .iter()
                .any(|d| d.transports.contains(&Some(**t)))
        })
        .map(|t| t.name())
        .collect();
    if used.is_empty() {
        "-".into()
    } else {
        used.join("+")
    }
}

/// How many different devices `ids` names.
fn distinct(ids: &[usize]) -> usize {
    let mut seen: Vec<usize> = ids.to_vec();
    seen.sort_unstable();
    seen.dedup();
    seen.len()
}

/// The table's header line.
pub fn header() -> String {
    format!(
        "{:<4} {:<4} {:>5} {:>4} {:>5} {:>16} {:>11} {:>11} {:>9} {:>6}  {}",
        "coll",
        "prec",
        "size",
        "dev",
        "slabs",
        "lattice",
        "MLUPS",
        "MLUPS/dev",
        "roofline",
        "eff",
        "transport"
    )
}

/// One row of the table.
pub fn format_row(r: &BenchRow) -> String {
    format!(
        "{:<4} {:<4} {:>5} {:>4} {:>5} {:>16} {:>11.1} {:>11.1} {:>8.1}% {:>6}  {}",
        r.collision,
        r.precision,
        r.size,
        r.devices,
        match r.grid {
            Some(g) => format!("{}x{}x{}", g[0], g[1], g[2]),
            None => r.slabs.to_string(),
        },
        format!("{}x{}x{}", r.lattice[0], r.lattice[1], r.lattice[2]),
        r.mlups,
        r.mlups_per_device,
        100.0 * r.roofline_fraction,
        r.parallel_efficiency
            .map(|e| format!("{:.1}%", 100.0 * e))
            .unwrap_or_else(|| "-".into()),
        match (r.transport.as_str(), r.slabs) {
            // Reports written before transports were recorded exchanged through zero-copy.
            ("", 0 | 1) => "-",
            ("", _) => "zero-copy",
            (t, _) => t,
        }
    ) + &match (&r.case, r.of_box) {
        (Some(_), Some(f)) => format!("  case {:.1}%", 100.0 * f),
        (Some(_), None) => "  case".into(),
        _ => String::new(),
    } + if r.streaming == Streaming::InPlace.name() {
        "  in-place"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use thelma_results::LINE_WIDTH;

    #[test]
    fn the_probe_takes_the_best_repetition_and_flags_a_wide_spread() {
        let noisy =
            BandwidthProbe::from_samples([10.0, 12.0, 11.0, 9.0, 12.5].map(|g| g * 1e9).to_vec())
                .unwrap();
        assert_eq!(noisy.best, 12.5e9);
        assert_eq!(noisy.median, 11e9);
        assert!((noisy.spread - 3.5 / 12.5).abs() < 1e-12);
        assert!(!noisy.reliable());
        let lines = noisy.describe("cpu:0");
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains("12.5 GB/s, the best of 5"), "{lines:?}");
        assert!(
            lines
                .iter()
                .flat_map(|l| l.lines())
                .all(|l| l.chars().count() <= LINE_WIDTH),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("warning: the bandwidth probe is unreliable")
                && lines[1].contains("28.0 %"),
            "{lines:?}"
        );

        let steady =
            BandwidthProbe::from_samples([40.0, 41.0, 40.5, 39.5].map(|g| g * 1e9).to_vec())
                .unwrap();
        assert_eq!(steady.median, 40.25e9);
        assert!(steady.reliable());
        assert_eq!(steady.describe("cuda:0").len(), 1);

        // Repetitions that measured nothing are not a bandwidth.
        assert_eq!(BandwidthProbe::from_samples(vec![]), None);
        assert_eq!(
            BandwidthProbe::from_samples(vec![f64::NAN, 0.0, f64::INFINITY]),
            None
        );
        let one = BandwidthProbe::from_samples(vec![f64::NAN, 5e9]).unwrap();
        assert_eq!((one.best, one.spread), (5e9, 0.0));
    }

    #[test]
    fn the_cpu_probe_times_each_repetition() {
        let samples = cpu_bandwidth(1 << 20, 1, 4).unwrap();
        assert_eq!(samples.len(), 4);
        assert!(
            samples.iter().all(|&b| b.is_finite() && b > 0.0),
            "{samples:?}"
        );
    }

    #[test]
    fn rows_of_old_reports_count_one_slab_per_device() {
        let row: BenchRow = serde_json::from_value(serde_json::json!({
            "collision": "mrt", "precision": "f32", "size": 64, "devices": 2,
            "lattice": [64, 64, 128], "steps": 20, "wall_s": 1.0, "mlups": 10.0,
            "mlups_per_device": 5.0, "roofline_mlups": 20.0, "roofline_fraction": 0.5,
            "parallel_efficiency": null
        }))
        .unwrap();
        assert_eq!(row.slabs, 0);
        assert!(row.one_slab_per_device());
        assert!(!BenchRow {
            grid: Some([2, 1, 1]),
            ..row.clone()
        }
        .one_slab_per_device());
        assert!(!BenchRow { slabs: 4, ..row }.one_slab_per_device());
    }

    #[test]
    fn devices_are_counted_once_however_many_slabs_they_hold() {
        assert_eq!(distinct(&[0, 0, 1, 1]), 2);
        assert_eq!(distinct(&[3]), 1);
        assert_eq!(distinct(&[2, 0, 2]), 2);
    }
}
