//! `comm-bench`: the inter-GPU communication microbenchmark of TheLMA (Obrecht et al. 2011, §6).
//!
//! The solver with its collision taken out: each device, served by its own thread, stores `k`
//! arrays of `L × L` 32-bit words per link side and direction and loads what its neighbours stored
//! the iteration before, with the solver's buffer protocol (two buffers per direction, a parity flip
//! each iteration, a barrier between iterations). It measures the sustained exchange throughput that
//! bounds the multi-device solver, and [`model`] turns it into the paper's estimates.
//!
//! - [`graph`]: linear and circular communication graphs over an ordered device list.
//! - [`protocol`]: the words, buffers and parities (shared with `kernels/comm_bench.cu`).
//! - [`model`]: the throughput the solver needs and the communication-bound performance.
//! - `cpu`: threads and host memory; `cuda`: zero-copy, peer-to-peer and copy-engine transports.
//! - `job`: the MPI transport, one process per position, its buffers carried by a cluster job's
//!   messages ([`run_job`]).

mod cpu;
mod cuda;
pub mod graph;
mod job;
pub mod model;
pub mod protocol;

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use thelma_core::StepBarrier;

pub use graph::{Topology, UnknownTopology};
pub use protocol::Shape;

/// How the words travel between devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// Kernel stores and loads to page-locked, device-mapped host memory (the paper's and the
    /// solver's). On the CPU backend: shared host memory.
    ZeroCopy,
    /// Kernel stores straight into the neighbour's device memory over NVLink or PCIe.
    Peer,
    /// The kernel works on local device memory; asynchronous copies move it device → host → device.
    CopyEngine,
    /// One process per position (`mpirun -np N`), as a cluster job runs its slabs: each stores
    /// into its own host memory (mapped, page-locked on a GPU, as the solver's outboxes) and the
    /// job's messages carry every outgoing buffer to the neighbour's copy after each iteration.
    Mpi,
}

impl Transport {
    /// The transports of one process.
    pub const ALL: [Transport; 3] = [Transport::ZeroCopy, Transport::Peer, Transport::CopyEngine];

    /// The solver's transport this one measures (`thelma_core::Transport`); the copy engine is
    /// the benchmark's own comparison, and the MPI transport is a cluster job's messages.
    pub fn solver(self) -> Option<thelma_core::Transport> {
        match self {
            Transport::ZeroCopy => Some(thelma_core::Transport::ZeroCopy),
            Transport::Peer => Some(thelma_core::Transport::Peer),
            Transport::CopyEngine | Transport::Mpi => None,
        }
    }

    /// The solver's name of its transport, or `copy-engine`, or `mpi`.
    pub fn name(self) -> &'static str {
        match self {
            Transport::CopyEngine => "copy-engine",
            Transport::Mpi => "mpi",
            t => t.solver().map_or("", thelma_core::Transport::name),
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A transport name that is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a transport (zero-copy, peer, copy-engine, mpi)")]
pub struct UnknownTransport(pub String);

impl FromStr for Transport {
    type Err = UnknownTransport;
    fn from_str(s: &str) -> Result<Self, UnknownTransport> {
        match s.trim().to_ascii_lowercase().as_str() {
            "zero-copy" | "zerocopy" => Ok(Transport::ZeroCopy),
            "peer" | "p2p" => Ok(Transport::Peer),
            "copy-engine" | "copy" => Ok(Transport::CopyEngine),
            "mpi" => Ok(Transport::Mpi),
            other => Err(UnknownTransport(other.to_string())),
        }
    }
}

/// Where the benchmark runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Cpu,
    Cuda,
}

impl Backend {
    /// The benchmark of the registered backend `name` (`thelma_compute::BACKENDS`), if it has one.
    pub fn named(name: &str) -> Option<Self> {
        [Backend::Cpu, Backend::Cuda]
            .into_iter()
            .find(|b| b.name().eq_ignore_ascii_case(name))
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Cuda => "cuda",
        }
    }
}

/// One benchmark configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchConfig {
    /// Device ids in graph order (positions).
    pub devices: Vec<usize>,
    pub topology: Topology,
    pub shape: Shape,
    pub transport: Transport,
    /// Measured iterations.
    pub iterations: u32,
    /// Iterations run before the clock starts.
    pub warmup: u32,
}

impl BenchConfig {
    /// Checks what every backend needs; the message names the option at fault.
    pub fn validate(&self) -> Result<(), CommError> {
        let bad = |flag: &'static str, message: String| Err(CommError::Config { flag, message });
        if self.devices.len() < self.topology.min_devices() {
            return bad(
                "--devices",
                format!(
                    "a {} graph of {} device(s) has no link; it needs at least {}",
                    self.topology,
                    self.devices.len(),
                    self.topology.min_devices()
                ),
            );
        }
        if self.shape.arrays == 0 {
            return bad("--arrays", "must be at least 1".into());
        }
        if self.shape.edge == 0 {
            return bad("--edge", "must be at least 1".into());
        }
        // Logical indices are 32-bit words in the kernel; rows are the grid's y dimension. Checked
        // products: the options are any usize, and a wrapped product would pass.
        let rows = self.shape.arrays.checked_mul(self.shape.edge);
        let words = rows.and_then(|r| r.checked_mul(self.shape.edge));
        if words.is_none_or(|w| w > u32::MAX as usize) || rows.is_none_or(|r| r > 65_535) {
            return bad(
                "--edge",
                format!(
                    "{} arrays of {}² words are too many: k · L must stay below 65,536",
                    self.shape.arrays, self.shape.edge
                ),
            );
        }
        if self.iterations == 0 {
            return bad("--iterations", "must be at least 1".into());
        }
        if u64::from(self.iterations) + u64::from(self.warmup) >= u64::from(u32::MAX) {
            // Named after the larger of the two, the one that took the sum past the limit.
            let flag = if self.warmup > self.iterations {
                "--warmup"
            } else {
                "--iterations"
            };
            return bad(
                flag,
                format!(
                    "{} iterations after {} warm-up ones: together they must stay below 2^32 − 1",
                    self.iterations, self.warmup
                ),
            );
        }
        Ok(())
    }
}

/// A failure of the benchmark.
#[derive(Debug, thiserror::Error)]
pub enum CommError {
    /// A bad option value.
    #[error("{flag}: {message}")]
    Config { flag: &'static str, message: String },
    /// The transport cannot run on this backend or these devices.
    #[error("transport {transport} is not available: {reason}")]
    Unsupported {
        transport: Transport,
        reason: String,
    },
    /// The CUDA driver or NVRTC cannot be loaded.
    #[error("{0}")]
    NoCuda(String),
    /// A device (or its driver) failed.
    #[error("device {device}: {message}")]
    Device { device: usize, message: String },
    /// The exchange delivered wrong words: a broken transport or protocol.
    #[error("link {link} (devices {lower} → {upper} and back): {mismatches} words arrived stale or corrupted")]
    Corrupted {
        link: usize,
        lower: usize,
        upper: usize,
        mismatches: u64,
    },
    /// Another worker failed first (never the error reported).
    #[error("stopped because another device failed")]
    Aborted,
    /// A message of an MPI job failed (or another rank ended the job).
    #[error("the job's messages: {0}")]
    Job(String),
}

/// What one device sees of the exchange, per iteration. Implemented by the CPU and CUDA modes;
/// created and used on the device's own thread.
pub(crate) trait Endpoint {
    /// Starts iteration `t`: store this iteration's words (parity `t % 2`) and, for `t > 0`, load and
    /// check the neighbours' words of `t − 1` (parity `(t + 1) % 2`). May return before it is done.
    fn exchange(&mut self, t: u32) -> Result<(), CommError>;
    /// Waits until the iteration is done and its stores are visible to the neighbours.
    fn finish(&mut self) -> Result<(), CommError>;
    /// Words that arrived wrong so far, per side: `(link, count)`.
    fn mismatches(&mut self) -> Result<Vec<(usize, u64)>, CommError>;
    /// One line naming the device.
    fn describe(&self) -> String;
}

/// One device's timings over the measured iterations.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct WorkerReport {
    /// Time inside exchange + finish (excluding the barrier).
    busy: Duration,
    /// From the end of the warm-up to the last barrier.
    wall: Duration,
    mismatches: Vec<(usize, u64)>,
    describe: String,
}

/// Runs `ep` through the protocol: publish iteration 0, warm up, then the measured iterations,
/// passing the barrier after each.
pub(crate) fn drive(
    ep: &mut dyn Endpoint,
    barrier: &StepBarrier,
    cfg: &BenchConfig,
) -> Result<WorkerReport, CommError> {
    let never = AtomicBool::new(false);
    drive_with(
        ep,
        &|| {
            barrier
                .wait(&never)
                .map(|_| ())
                .map_err(|_| CommError::Aborted)
        },
        cfg,
    )
}

/// [`drive`] with `pass` standing for the barrier between iterations.
pub(crate) fn drive_with(
    ep: &mut dyn Endpoint,
    pass: &dyn Fn() -> Result<(), CommError>,
    cfg: &BenchConfig,
) -> Result<WorkerReport, CommError> {
    let mut step = |t: u32| -> Result<(), CommError> {
        ep.exchange(t)?;
        ep.finish()
    };
    for t in 0..=cfg.warmup {
        step(t)?;
        pass()?;
    }
    let start = Instant::now();
    let mut busy = Duration::ZERO;
    for t in cfg.warmup + 1..=cfg.warmup + cfg.iterations {
        let s = Instant::now();
        step(t)?;
        busy += s.elapsed();
        pass()?;
    }
    let wall = start.elapsed();
    Ok(WorkerReport {
        busy,
        wall,
        mismatches: ep.mismatches()?,
        describe: ep.describe(),
    })
}

/// Binds the calling worker thread as `placement` asks (as the solver's runtime does) and says
/// where it ended up; a failure leaves the thread unbound and is only reported.
pub(crate) fn bind_worker(placement: &thelma_core::Placement) -> String {
    // Binding is an optimisation: even a panic inside hwloc's bindings must not stop a measurement.
    let bound = std::panic::catch_unwind(|| thelma_core::bind_current_thread(placement));
    match bound {
        Ok(Ok(b)) => b.to_string(),
        Ok(Err(e)) => format!("unbound ({e})"),
        Err(_) => "unbound (hwloc failed)".into(),
    }
}

/// Runs `work(position, barrier)` on one scoped thread per position. A failing worker aborts the
/// barrier so that the others stop; the first real error is returned.
pub(crate) fn run_workers<F>(cfg: &BenchConfig, work: F) -> Result<Vec<WorkerReport>, CommError>
where
    F: Fn(usize, &StepBarrier) -> Result<WorkerReport, CommError> + Sync,
{
    let n = cfg.devices.len();
    let barrier = StepBarrier::new(n);
    let results: Vec<Result<WorkerReport, CommError>> = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(n);
        let mut not_started = None;
        for pos in 0..n {
            let (barrier, work) = (&barrier, &work);
            let spawned = std::thread::Builder::new()
                .name(format!("comm-bench-{pos}"))
                .spawn_scoped(s, move || {
                    let r = work(pos, barrier);
                    if r.is_err() {
                        barrier.abort();
                    }
                    r
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    // The workers already started wait at the barrier for this one: release them.
                    barrier.abort();
                    not_started = Some(CommError::Device {
                        device: cfg.devices[pos],
                        message: format!("cannot start its worker thread: {e}"),
                    });
                    break;
                }
            }
        }
        let mut results: Vec<_> = handles
            .into_iter()
            .enumerate()
            .map(|(pos, h)| {
                h.join().unwrap_or_else(|_| {
                    barrier.abort();
                    Err(CommError::Device {
                        device: cfg.devices[pos],
                        message: "the worker thread panicked".into(),
                    })
                })
            })
            .collect();
        results.extend(not_started.map(Err));
        results
    });
    let mut reports = Vec::with_capacity(n);
    let mut aborted = false;
    let mut first = None;
    for r in results {
        match r {
            Ok(rep) => reports.push(rep),
            Err(CommError::Aborted) => aborted = true,
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    match (first, aborted) {
        (Some(e), _) => Err(e),
        (None, true) => Err(CommError::Aborted),
        (None, false) => Ok(reports),
    }
}

/// Throughput of one link.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LinkResult {
    pub index: usize,
    /// Device ids at the two ends (equal for the ring of one device).
    pub lower_device: usize,
    pub upper_device: usize,
    /// Bytes the link carries per iteration, both directions.
    pub bytes_per_iteration: usize,
    /// Those bytes over the busier endpoint's exchange time per iteration (GB/s).
    pub gbs: f64,
}

/// One device's share of the time.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DeviceResult {
    pub device: usize,
    pub describe: String,
    /// Mean time inside the exchange per iteration, barrier excluded (µs).
    pub busy_us: f64,
}

/// The outcome of one configuration. Figures are means over the measured iterations.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchResult {
    pub backend: Backend,
    pub transport: Transport,
    pub topology: Topology,
    pub devices: Vec<usize>,
    pub arrays: usize,
    pub edge: usize,
    pub transpose: bool,
    pub iterations: u32,
    pub warmup: u32,
    /// Wall time per iteration, barrier included (µs).
    pub time_per_iteration_us: f64,
    /// All links' bytes per iteration over the wall time per iteration (GB/s).
    pub aggregate_gbs: f64,
    pub links: Vec<LinkResult>,
    pub per_device: Vec<DeviceResult>,
}

/// Runs one configuration on `backend`. Every word read is checked; a wrong word is an error.
pub fn run(backend: Backend, cfg: &BenchConfig) -> Result<BenchResult, CommError> {
    cfg.validate()?;
    if cfg.transport == Transport::Mpi {
        return Err(CommError::Unsupported {
            transport: cfg.transport,
            reason: "it runs one process per device: start the benchmark with `mpirun -np N`, \
                     N ≥ 2"
                .into(),
        });
    }
    let reports = match backend {
        Backend::Cpu => cpu::run(cfg)?,
        Backend::Cuda => cuda::run(cfg)?,
    };
    summarise(backend, cfg, &reports)
}

/// Runs one configuration of the MPI transport as rank `cluster.rank()` of a job of one rank per
/// position of `cfg.devices`: every rank calls it, rank 0 gets the result (the others `None`).
pub fn run_job(
    backend: Backend,
    cfg: &BenchConfig,
    cluster: &std::sync::Arc<dyn thelma_core::Cluster>,
) -> Result<Option<BenchResult>, CommError> {
    cfg.validate()?;
    let reports = job::run(backend, cfg, cluster)?;
    reports.map(|r| summarise(backend, cfg, &r)).transpose()
}

/// Devices the backend offers: the GPUs, or for the CPU one virtual device per core (at least two,
/// so that a chain has a link).
pub fn available_devices(backend: Backend) -> Result<usize, CommError> {
    match backend {
        Backend::Cpu => Ok(thelma_core::core_count().max(2)),
        Backend::Cuda => cuda::device_count(),
    }
}

/// Compiles `kernels/comm_bench.cu` with NVRTC for compute capability `major.minor` (no GPU
/// needed) and returns the cubin's size in bytes.
pub fn compile_kernel(major: i32, minor: i32) -> Result<usize, CommError> {
    cuda::compile_check(major, minor)
}

fn summarise(
    backend: Backend,
    cfg: &BenchConfig,
    reports: &[WorkerReport],
) -> Result<BenchResult, CommError> {
    let ls = graph::links(cfg.devices.len(), cfg.topology);
    let iters = f64::from(cfg.iterations);
    for (link, m) in reports.iter().flat_map(|r| r.mismatches.iter()) {
        if *m > 0 {
            let l = ls[*link];
            return Err(CommError::Corrupted {
                link: *link,
                lower: cfg.devices[l.lower],
                upper: cfg.devices[l.upper],
                mismatches: *m,
            });
        }
    }
    let wall = reports
        .iter()
        .map(|r| r.wall.as_secs_f64())
        .fold(0.0, f64::max)
        / iters;
    let busy: Vec<f64> = reports
        .iter()
        .map(|r| r.busy.as_secs_f64() / iters)
        .collect();
    let per_link = 2 * cfg.shape.bytes();
    let links: Vec<LinkResult> = ls
        .iter()
        .map(|l| LinkResult {
            index: l.index,
            lower_device: cfg.devices[l.lower],
            upper_device: cfg.devices[l.upper],
            bytes_per_iteration: per_link,
            gbs: per_link as f64 / busy[l.lower].max(busy[l.upper]).max(1e-12) / 1e9,
        })
        .collect();
    Ok(BenchResult {
        backend,
        transport: cfg.transport,
        topology: cfg.topology,
        devices: cfg.devices.clone(),
        arrays: cfg.shape.arrays,
        edge: cfg.shape.edge,
        transpose: cfg.shape.transpose,
        iterations: cfg.iterations,
        warmup: cfg.warmup,
        time_per_iteration_us: wall * 1e6,
        aggregate_gbs: (per_link * ls.len()) as f64 / wall.max(1e-12) / 1e9,
        links,
        per_device: cfg
            .devices
            .iter()
            .zip(reports)
            .zip(&busy)
            .map(|((&device, r), &b)| DeviceResult {
                device,
                describe: r.describe.clone(),
                busy_us: b * 1e6,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(n: usize, topology: Topology, transport: Transport, transpose: bool) -> BenchConfig {
        BenchConfig {
            devices: (0..n).collect(),
            topology,
            shape: Shape {
                arrays: 5,
                edge: 16,
                transpose,
            },
            transport,
            iterations: 20,
            warmup: 3,
        }
    }

    #[test]
    fn the_cpu_mode_runs_every_graph_and_counts_every_link() {
        for topology in [Topology::Linear, Topology::Circular] {
            for n in topology.min_devices()..=4 {
                for transport in [Transport::ZeroCopy, Transport::CopyEngine] {
                    for transpose in [false, true] {
                        let c = cfg(n, topology, transport, transpose);
                        let r = run(Backend::Cpu, &c).unwrap();
                        assert_eq!(r.links.len(), topology.interfaces(n));
                        assert_eq!(r.per_device.len(), n);
                        let bytes = r.links.len() * 2 * 5 * 16 * 16 * 4;
                        assert!(r.aggregate_gbs > 0.0 && r.time_per_iteration_us > 0.0);
                        // The aggregate is exactly the bytes moved over the time per iteration.
                        let back = bytes as f64 / (r.time_per_iteration_us * 1e-6) / 1e9;
                        assert!((back - r.aggregate_gbs).abs() < 1e-9 * back);
                        assert!(r.links.iter().all(|l| l.gbs > 0.0));
                    }
                }
            }
        }
    }

    #[test]
    fn impossible_configurations_are_refused_with_the_option_named() {
        let one_chain = cfg(1, Topology::Linear, Transport::ZeroCopy, false);
        match run(Backend::Cpu, &one_chain) {
            Err(CommError::Config { flag, .. }) => assert_eq!(flag, "--devices"),
            other => panic!("{other:?}"),
        }
        let mut c = cfg(2, Topology::Linear, Transport::ZeroCopy, false);
        c.iterations = 0;
        assert!(matches!(
            run(Backend::Cpu, &c),
            Err(CommError::Config {
                flag: "--iterations",
                ..
            })
        ));
        c.iterations = 1;
        c.shape.edge = 70_000;
        assert!(matches!(
            run(Backend::Cpu, &c),
            Err(CommError::Config { flag: "--edge", .. })
        ));
        let peer = cfg(2, Topology::Linear, Transport::Peer, false);
        assert!(matches!(
            run(Backend::Cpu, &peer),
            Err(CommError::Unsupported { .. })
        ));
    }

    #[test]
    fn transport_names_round_trip() {
        for t in Transport::ALL {
            assert_eq!(t.name().parse::<Transport>().unwrap(), t);
        }
        assert!("nvlink".parse::<Transport>().is_err());
    }
}
