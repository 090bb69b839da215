//! The multi-device runtime (TheLMA §4): one OS thread per device, each owning its compute module and
//! one slab, serving commands from the coordinator (the caller's thread) over channels, with a step
//! barrier between steps whenever slabs exchange data.
//!
//! The runtime knows devices only through [`ModuleFactory`] and [`ComputeModule`]. Any failure in a
//! worker (an error or a panic) aborts the barrier, so no other worker can hang, and reaches the caller
//! as one [`RuntimeError`] naming the device; every thread is joined before the error is returned.

use crate::block::{write_block, BlockWritten};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use parking_lot::{Condvar, Mutex, MutexGuard};
use serde::{Deserialize, Serialize};

use crate::affinity::{bind_current_thread, AffinityError, Binding};
use crate::cluster::{
    command_tag, exchange_tag, Cluster, Incoming, Layout, Outgoing, Tag, MAX_SLABS_PER_RANK,
};
use crate::compute::{
    ChangeSums, ComputeError, ComputeModule, Fields, Health, MeanSums, ModuleFactory, PlaneFields,
    PointForces,
};
use crate::domain::{Domain, PartitionError, SlabSpec, SubdomainOf, SIDE_COUNT};
use crate::physics::d3q19::Q;
use crate::physics::{BodyLoad, ImmersedBodies, LeavesDomain};
use crate::transport::{
    plan as plan_transports, Channel, Links, SlabTransports, Transport, TransportRefused,
};

/// A barrier for a fixed number of parties that can be aborted (waking every waiter with an error)
/// and that carries one stop decision per generation, taken by the last party to arrive, so that all
/// workers stop after the same step.
///
/// A barrier may hold a [`StepHook`], which the last party to arrive runs before releasing the
/// others: the exchange with other ranks of a cluster job.
pub struct StepBarrier {
    parties: usize,
    state: Mutex<BarrierState>,
    cv: Condvar,
    hook: OnceLock<Box<dyn StepHook>>,
}

/// What the last worker of a rank to reach the step barrier does before the others go on.
pub trait StepHook: Send + Sync {
    /// After step `t`, whose interface buffers are those of parity `t % 2`: returns the job's stop
    /// decision, given this rank's `stop`.
    fn after_step(&self, t: u64, stop: bool) -> Result<bool, String>;

    /// Whether the workers run their steps through [`ComputeModule::step_overlapped`] and meet
    /// once their slabs' boundary planes are done, so that [`Self::after_faces`] can start what
    /// [`Self::after_step`] then finishes while the interiors are updated.
    fn splits(&self) -> bool {
        false
    }

    /// After the faces of step `t` (every buffer of parity `t % 2` written, the interiors not yet
    /// updated): starts carrying them, without waiting.
    fn after_faces(&self, _t: u64) -> Result<(), String> {
        Ok(())
    }
}

/// Where the workers meet: after a step's faces, or after a step (`None`: a plain barrier).
#[derive(Clone, Copy)]
enum Meeting {
    Faces(u64),
    Step(Option<u64>),
}

/// Why a worker left the step barrier without a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
enum StepError {
    /// Another worker failed.
    Aborted,
    /// This worker ran the hook, and it failed.
    Hook(String),
}

struct BarrierState {
    arrived: usize,
    generation: u64,
    aborted: bool,
    stop: bool,
}

/// The barrier was aborted because another worker failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aborted;

impl StepBarrier {
    pub fn new(parties: usize) -> Self {
        Self {
            parties,
            state: Mutex::new(BarrierState {
                arrived: 0,
                generation: 0,
                aborted: false,
                stop: false,
            }),
            cv: Condvar::new(),
            hook: OnceLock::new(),
        }
    }

    /// Gives the barrier its hook (once; later calls are ignored).
    pub fn set_hook(&self, hook: Box<dyn StepHook>) {
        let _ = self.hook.set(hook);
    }

    /// Waits for every party. Returns whether `stop` was set when the last party arrived.
    pub fn wait(&self, stop: &AtomicBool) -> Result<bool, Aborted> {
        self.wait_step(None, stop).map_err(|_| Aborted)
    }

    /// Whether the workers split their steps for the hook ([`StepHook::splits`]).
    fn splits(&self) -> bool {
        self.hook.get().is_some_and(|h| h.splits())
    }

    /// [`Self::wait`] after step `t`, the last party running the hook (when there is one and `t`
    /// is given) with the lock released, so that an abort can reach the waiters meanwhile.
    fn wait_step(&self, t: Option<u64>, stop: &AtomicBool) -> Result<bool, StepError> {
        self.meet(Meeting::Step(t), stop)
    }

    /// Waits for every party after the faces of step `t`, the last running the hook's
    /// [`StepHook::after_faces`] as [`Self::wait_step`] runs its `after_step`.
    fn wait_faces(&self, t: u64, stop: &AtomicBool) -> Result<(), StepError> {
        self.meet(Meeting::Faces(t), stop).map(|_| ())
    }

    fn meet(&self, meeting: Meeting, stop: &AtomicBool) -> Result<bool, StepError> {
        let mut s = self.state.lock();
        if s.aborted {
            return Err(StepError::Aborted);
        }
        s.arrived += 1;
        if s.arrived == self.parties {
            let mut halt = stop.load(Ordering::SeqCst);
            if let Some(hook) = self.hook.get() {
                // No other party can arrive before this generation ends: they all wait.
                let run = || match meeting {
                    Meeting::Faces(t) => hook.after_faces(t).map(|()| halt),
                    Meeting::Step(Some(t)) => hook.after_step(t, halt),
                    Meeting::Step(None) => Ok(halt),
                };
                match MutexGuard::unlocked(&mut s, run) {
                    Ok(h) => halt = h,
                    Err(e) => {
                        s.aborted = true;
                        self.cv.notify_all();
                        return Err(StepError::Hook(e));
                    }
                }
                if s.aborted {
                    return Err(StepError::Aborted);
                }
            }
            s.arrived = 0;
            s.generation += 1;
            s.stop = halt;
            self.cv.notify_all();
            return Ok(s.stop);
        }
        let generation = s.generation;
        while s.generation == generation && !s.aborted {
            self.cv.wait(&mut s);
        }
        if s.generation == generation {
            return Err(StepError::Aborted);
        }
        Ok(s.stop)
    }

    /// Wakes every waiter with [`Aborted`]; later waits fail at once.
    pub fn abort(&self) {
        let mut s = self.state.lock();
        s.aborted = true;
        self.cv.notify_all();
    }
}

/// A failure of the runtime, with the device it happened on.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Partition(#[from] PartitionError),
    /// The transport asked for cannot join two of the run's devices (bad input).
    #[error(transparent)]
    Transport(TransportRefused),
    // The module's error is part of this message rather than a `source`, so that error chains
    // printed with `{:#}` do not repeat it.
    #[error("device {device} ({backend}, slab {slab}): {error}")]
    Device {
        device: usize,
        slab: usize,
        backend: &'static str,
        error: ComputeError,
    },
    #[error("device {device} ({backend}, slab {slab}): worker panicked: {message}")]
    Panic {
        device: usize,
        slab: usize,
        backend: &'static str,
        message: String,
    },
    #[error("device {device} ({backend}, slab {slab}): worker thread ended unexpectedly")]
    Lost {
        device: usize,
        slab: usize,
        backend: &'static str,
    },
    #[error("the runtime has already failed and shut down")]
    Closed,
    #[error(transparent)]
    Immersed(#[from] LeavesDomain),
    #[error("cannot start a worker thread: {0}")]
    Spawn(String),
    /// A layout the job cannot run, or a failed message between ranks.
    #[error("{0}")]
    Cluster(String),
    /// A request outside the domain (a plane beyond its nodes).
    #[error("{0}")]
    Outside(String),
}

/// What the coordinator asks of a slab's worker. Commands and replies travel between ranks as
/// messages (postcard); those holding channels or shared bodies never leave their rank.
#[derive(Serialize, Deserialize)]
enum Command {
    Run {
        t0: u64,
        steps: u64,
        exchange: bool,
        averaging: Option<Averaging>,
    },
    /// Meet the rank's other slabs at the barrier, whose hook carries the interface buffers of
    /// parity `t % 2` to other ranks: what the modules published (on attaching, on loading
    /// populations) for step `t` to read.
    Flush {
        t: u64,
    },
    Fields,
    ReadMeans,
    WriteMeans(Box<MeanSums>),
    Health,
    VelocityChange,
    ReadPopulations,
    ReadNodes(Arc<Vec<u32>>),
    PullNodes {
        t: u64,
        nodes: Vec<u32>,
    },
    SetForces {
        nodes: Vec<u32>,
        forces: Vec<[f64; 3]>,
    },
    PointForces,
    WritePopulations {
        bytes: Arc<Vec<u8>>,
        next_step: u64,
    },
    Shutdown,
    /// The slab's part of the plane `axis = index` (slab-local).
    ReadPlane {
        axis: usize,
        index: usize,
    },
    SetWalls(Arc<Vec<[f64; 3]>>),
    SetHeld(Arc<Vec<f64>>),
    /// Write the slab's populations (values `width` bytes long), and its time averages' sums with
    /// `means`, into the file `path` at `offset` ([`crate::block::write_block`]).
    WriteBlock {
        path: std::path::PathBuf,
        offset: u64,
        width: usize,
        means: bool,
    },
    /// Open the existing file `path` for writing, and say why not where it cannot.
    Reach(std::path::PathBuf),
    // What never leaves its rank comes last: a variant serde skips must not shift the indices of
    // the others.
    /// Allocate the channels the subdomain reads across each side, in these transports, and the
    /// outboxes (host memory) it writes for readers on other ranks across each side.
    #[serde(skip)]
    Allocate {
        reads: SlabTransports,
        outboxes: [bool; SIDE_COUNT],
    },
    #[serde(skip)]
    Attach(Box<Links>),
    #[serde(skip)]
    HoldImmersed(Arc<ImmersedBodies>),
}

#[derive(Serialize, Deserialize)]
enum Reply {
    Created {
        describe: String,
        binding: Result<Binding, AffinityError>,
        /// The transports a serving rank chose for the slab's channels (`None` from this process's
        /// own workers, whose transports the coordinator planned).
        transports: Option<SlabTransports>,
    },
    Attached,
    Ran(WorkerTimes),
    Fields(Box<Fields>),
    Means(Box<MeanSums>),
    Health(Health),
    Change(Option<ChangeSums>),
    Populations(Vec<u8>),
    Nodes(Vec<f64>),
    Held(bool),
    PointForces(Option<PointForces>),
    Written,
    Failed(ComputeError),
    Plane(Box<PlaneFields>),
    Panicked(String),
    Aborted,
    Block(BlockWritten),
    /// Why a file could not be opened for writing (`None`: it could).
    Reached(Option<String>),
    // Last, as in `Command`.
    #[serde(skip)]
    Channels(Box<SideChannels>),
}

/// What a module allocated for its subdomain's sides ([`Reply::Channels`]).
struct SideChannels {
    /// The channels read across each side.
    reads: [Option<Arc<dyn Channel>>; SIDE_COUNT],
    /// The outboxes written across each side.
    outboxes: [Option<Arc<dyn Channel>>; SIDE_COUNT],
}

/// Time one worker spent in a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerTimes {
    /// Steps completed.
    pub steps: u64,
    /// Time in the module's step and synchronisation.
    pub compute: Duration,
    /// Time waiting at the step barrier for other slabs.
    pub wait: Duration,
    /// Whether the run stopped early on request.
    pub stopped: bool,
}

/// What the caller learns about each device.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// The device id as the user gave it.
    pub device: usize,
    pub slab: SlabSpec,
    /// The module's own description.
    pub describe: String,
    /// The thread binding, or why there is none.
    pub binding: Result<Binding, AffinityError>,
    /// The transports of the channels the subdomain reads, by side (for a slab: from below and
    /// from above).
    pub transports: SlabTransports,
    /// The rank running the slab (0 outside a cluster job).
    pub rank: usize,
    /// Whether the channel it reads across each side is written by another rank (its contents
    /// then arrive as messages after each step).
    pub across: [bool; SIDE_COUNT],
}

/// Which states the time average samples: those at steps `from`, `from + every`, … (the state at
/// step t being the one the first t steps make; a state is sampled as the step that makes it ends,
/// so the starting state of a run is never sampled).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Averaging {
    pub from: u64,
    pub every: u64,
}

impl Averaging {
    /// Whether the state at step `t` (after `t` steps) is sampled.
    pub fn samples(&self, t: u64) -> bool {
        t >= self.from && (t - self.from).is_multiple_of(self.every)
    }
}

/// Statistics of one [`Runtime::run`].
#[derive(Clone, Debug)]
pub struct RunStats {
    pub steps: u64,
    pub wall: Duration,
    /// Per device, in slab order.
    pub workers: Vec<WorkerTimes>,
    /// Whether a stop request ended the run early.
    pub stopped: bool,
}

/// How the coordinator reaches one slab's worker: a thread of this process, or on rank 0 of a
/// cluster job a proxy thread forwarding to the slab's rank; `None` on a serving rank for the slabs
/// of other ranks.
struct Worker {
    device: usize,
    commands: Option<Sender<Command>>,
    handle: Option<JoinHandle<()>>,
}

/// The running devices of one simulation.
pub struct Runtime {
    backend: &'static str,
    domain: Domain,
    workers: Vec<Worker>,
    replies: Receiver<(usize, Reply)>,
    barrier: Arc<StepBarrier>,
    stop: Arc<AtomicBool>,
    devices: Vec<DeviceInfo>,
    /// The next step to run.
    step: u64,
    failed: bool,
    averaging: Option<Averaging>,
    immersed: Option<Immersed>,
    /// The job this process is a rank of; `None` for a run in one process.
    cluster: Option<Arc<dyn Cluster>>,
    /// The slabs this process's own workers run (every slab outside a cluster job).
    local: Vec<usize>,
}

/// The immersed bodies of a run: forced before every step from the coordinator, or held by the
/// module of a run on one slab that forces them on its device.
struct Immersed {
    bodies: Arc<ImmersedBodies>,
    uniform: Option<[f64; 3]>,
    /// The loads of the last step forced from here, and its number.
    last: Option<(u64, Vec<BodyLoad>)>,
    /// Each body's reach from its centre ([`ImmersedBodies::radii`]) when the module holds them.
    held: Option<Vec<f64>>,
}

impl Runtime {
    /// Starts one worker per device (in slab order), creates their modules, allocates and connects
    /// the interfaces. `stop` may be set at any time (Ctrl-C) to end a run after the current step.
    pub fn start(
        factory: Arc<dyn ModuleFactory>,
        domain: Domain,
        devices: &[usize],
        stop: Arc<AtomicBool>,
    ) -> Result<Runtime, RuntimeError> {
        let layout = Layout::single(domain, devices)?;
        Self::start_layout_on(factory, &layout, None, stop)
    }

    /// [`Self::start`] with the slabs of `layout` (all on rank 0): uneven slabs from a layout file.
    pub fn start_layout(
        factory: Arc<dyn ModuleFactory>,
        layout: &Layout,
        stop: Arc<AtomicBool>,
    ) -> Result<Runtime, RuntimeError> {
        if layout.rank_count() != 1 {
            return Err(RuntimeError::Cluster(format!(
                "the layout places slabs on {} ranks, and one process runs",
                layout.rank_count()
            )));
        }
        Self::start_layout_on(factory, layout, None, stop)
    }

    /// [`Self::start`] as rank 0 of a cluster job: the coordinator of every slab of `layout`, which
    /// runs its own slabs and reaches the others through their ranks, each running
    /// [`Self::serve`] with the same factory and layout.
    pub fn start_cluster(
        factory: Arc<dyn ModuleFactory>,
        layout: &Layout,
        cluster: Arc<dyn Cluster>,
        stop: Arc<AtomicBool>,
    ) -> Result<Runtime, RuntimeError> {
        if cluster.rank() != 0 {
            return Err(RuntimeError::Cluster(format!(
                "rank {} serves slabs; rank 0 coordinates",
                cluster.rank()
            )));
        }
        check_layout(layout, cluster.as_ref())?;
        // Every rank lays the domain out on its own (from its own device list or layout file):
        // they must agree before any rank waits for another's slabs.
        let ours = LayoutSummary::of(layout);
        for r in 1..cluster.size() {
            let theirs = cluster
                .recv(r, SETUP_TAG)
                .map_err(|e| e.to_string())
                .and_then(|b| postcard::from_bytes::<LayoutSummary>(&b).map_err(|e| e.to_string()));
            let refused = match theirs {
                Ok(t) if t == ours => continue,
                Ok(t) => format!(
                    "rank {r} lays the domain out as {t}, rank 0 as {ours}: give every rank the \
                     same --devices count, or one --layout file"
                ),
                Err(e) => format!("rank {r}: {e}"),
            };
            cluster.abort(&refused, 2);
            return Err(RuntimeError::Cluster(refused));
        }
        Self::start_layout_on(factory, layout, Some(cluster), stop)
    }

    fn start_layout_on(
        factory: Arc<dyn ModuleFactory>,
        layout: &Layout,
        cluster: Option<Arc<dyn Cluster>>,
        stop: Arc<AtomicBool>,
    ) -> Result<Runtime, RuntimeError> {
        let (mut rt, transports) = Self::launch(factory, layout, cluster, stop)?;
        // Creation: each worker (or proxy) reports its module.
        let all: Vec<usize> = (0..layout.slabs.len()).collect();
        let created = rt.collect_from(&all, |_, r| match r {
            Reply::Created {
                describe,
                binding,
                transports,
            } => Ok((describe, binding, transports)),
            other => Err(other),
        })?;
        rt.devices = created
            .into_iter()
            .enumerate()
            .map(|(s, (describe, binding, theirs))| DeviceInfo {
                device: layout.devices[s],
                slab: layout.slabs[s].clone(),
                describe,
                binding,
                transports: theirs.unwrap_or(transports[s]),
                rank: layout.ranks[s],
                across: across(layout, s),
            })
            .collect();
        let exchange = rt.connect(layout, &transports)?;
        if let Some(c) = &rt.cluster {
            rt.barrier.set_hook(Box::new(RankExchange::new(
                c.clone(),
                exchange,
                overlaps(layout),
            )));
            // What the modules published on attaching, for step 0 to read.
            rt.flush(1)?;
        }
        Ok(rt)
    }

    /// Serves, as rank r > 0 of a cluster job, this rank's slabs of `layout` for the coordinator
    /// (rank 0's [`Self::start_cluster`]) until it shuts them down. A failure here reaches the
    /// coordinator as its slab's reply, or ends the job through [`Cluster::abort`].
    pub fn serve(
        factory: Arc<dyn ModuleFactory>,
        layout: &Layout,
        cluster: Arc<dyn Cluster>,
        stop: Arc<AtomicBool>,
    ) -> Result<(), RuntimeError> {
        let rank = cluster.rank();
        let local = layout.local(rank);
        let places = layout.places();
        let tag = |s: usize| command_tag(places[s]);
        let tell_all = |reply: &dyn Fn(usize) -> Reply| {
            for &s in &local {
                if let Ok(bytes) = postcard::to_allocvec(&reply(s)) {
                    let _ = cluster.send(0, tag(s), &bytes);
                }
            }
        };
        let refused = |e: &RuntimeError| {
            let m = e.to_string();
            move |_| Reply::Failed(ComputeError::Invalid(format!("rank {rank}: {m}")))
        };
        if let Err(e) = check_layout(layout, cluster.as_ref()) {
            tell_all(&refused(&e));
            return Err(e);
        }
        let summary =
            postcard::to_allocvec(&LayoutSummary::of(layout)).map_err(|e| cluster_error(&e))?;
        cluster
            .send(0, SETUP_TAG, &summary)
            .map_err(|e| cluster_error(&e))?;
        let (mut rt, transports) = match Self::launch(factory, layout, Some(cluster.clone()), stop)
        {
            Ok(v) => v,
            Err(e) => {
                tell_all(&refused(&e));
                return Err(e);
            }
        };
        let set_up = rt
            .collect_from(&local, |_, r| match r {
                Reply::Created {
                    describe, binding, ..
                } => Ok((describe, binding)),
                other => Err(other),
            })
            .and_then(|created| Ok((created, rt.connect(layout, &transports)?)));
        let created = match set_up {
            Ok((created, exchange)) => {
                rt.barrier.set_hook(Box::new(RankExchange::new(
                    cluster.clone(),
                    exchange,
                    overlaps(layout),
                )));
                created
            }
            Err(e) => {
                tell_all(&refused(&e));
                return Err(e);
            }
        };
        for (&s, (describe, binding)) in local.iter().zip(created) {
            let reply = Reply::Created {
                describe,
                binding,
                transports: Some(transports[s]),
            };
            let bytes = postcard::to_allocvec(&reply).map_err(|e| cluster_error(&e))?;
            cluster
                .send(0, tag(s), &bytes)
                .map_err(|e| cluster_error(&e))?;
        }
        // One relay per slab feeds its worker the coordinator's commands; this thread sends the
        // workers' replies back, until every worker has shut down.
        let mut relays = Vec::with_capacity(local.len());
        for &s in &local {
            let commands = rt.workers[s].commands.clone().expect("a local worker");
            let job = cluster.clone();
            let t = tag(s);
            let spawned = std::thread::Builder::new()
                .name(format!("thelma-relay-{s}"))
                .spawn(move || relay_main(t, job.as_ref(), commands));
            match spawned {
                Ok(h) => relays.push(h),
                Err(e) => {
                    let e = RuntimeError::Spawn(e.to_string());
                    cluster.abort(&e.to_string(), 1);
                    return Err(e);
                }
            }
        }
        // The runtime keeps one sender per worker: drop them, so that the replies end with the
        // workers.
        for w in &mut rt.workers {
            w.commands = None;
        }
        while let Ok((s, reply)) = rt.replies.recv() {
            let sent = postcard::to_allocvec(&reply)
                .map_err(|e| cluster_error(&e))
                .and_then(|b| cluster.send(0, tag(s), &b).map_err(|e| cluster_error(&e)));
            if let Err(e) = sent {
                cluster.abort(&format!("rank {rank}, slab {s}: {e}"), 1);
            }
        }
        for h in relays {
            let _ = h.join();
        }
        rt.shutdown();
        Ok(())
    }

    /// Starts this process's workers (and on rank 0 the proxies of other ranks' slabs), after
    /// planning every channel's transport.
    fn launch(
        factory: Arc<dyn ModuleFactory>,
        layout: &Layout,
        cluster: Option<Arc<dyn Cluster>>,
        stop: Arc<AtomicBool>,
    ) -> Result<(Runtime, Vec<SlabTransports>), RuntimeError> {
        let rank = cluster.as_ref().map_or(0, |c| c.rank());
        let slabs = &layout.slabs;
        // Every channel's transport, refused before any worker starts or allocates.
        let transports = plan_transports(slabs, &layout.devices, &layout.ranks, rank, |r, w| {
            factory.transport(r, w)
        })
        .map_err(RuntimeError::Transport)?;
        let n = slabs.len();
        let local = layout.local(rank);
        let (reply_tx, replies) = unbounded();
        let backend = factory.backend();
        let mut rt = Runtime {
            backend,
            domain: layout.domain(),
            workers: Vec::with_capacity(n),
            replies,
            barrier: Arc::new(StepBarrier::new(local.len())),
            stop: stop.clone(),
            devices: Vec::new(),
            step: 0,
            failed: false,
            averaging: None,
            immersed: None,
            cluster: cluster.clone(),
            local,
        };
        let places = layout.places();
        for (s, slab) in slabs.iter().enumerate() {
            let device = layout.devices[s];
            let replies = reply_tx.clone();
            let (tx, rx) = bounded(4);
            let spawned = if layout.ranks[s] == rank {
                let factory = factory.clone();
                let slab = slab.clone();
                let barrier = rt.barrier.clone();
                let stop = stop.clone();
                std::thread::Builder::new()
                    .name(format!("thelma-{backend}-{device}"))
                    .spawn(move || {
                        worker_main(s, device, slab, factory, rx, replies, barrier, stop)
                    })
            } else if rank == 0 {
                let cluster = cluster.clone().expect("slabs on other ranks are in a job");
                let (on, tag) = (layout.ranks[s], command_tag(places[s]));
                std::thread::Builder::new()
                    .name(format!("thelma-proxy-{s}"))
                    .spawn(move || proxy_main(s, on, tag, cluster.as_ref(), rx, replies))
            } else {
                rt.workers.push(Worker {
                    device,
                    commands: None,
                    handle: None,
                });
                continue;
            };
            match spawned {
                Ok(h) => rt.workers.push(Worker {
                    device,
                    commands: Some(tx),
                    handle: Some(h),
                }),
                Err(e) => {
                    let e = RuntimeError::Spawn(e.to_string());
                    if let Some(c) = &rt.cluster {
                        c.abort(&e.to_string(), 1);
                    }
                    // The workers already started end when the runtime is dropped.
                    return Err(e);
                }
            }
        }
        Ok((rt, transports))
    }

    /// Allocates and attaches the channels of this process's subdomains: each allocates the ones
    /// it reads, in the planned transports, and an outbox for each neighbour on another rank; a
    /// subdomain writes across each side into what its neighbour there reads across the opposite
    /// side (for slabs: slab s writes up into what slab s + 1 reads from below, and down into what
    /// slab s − 1 reads from above, around the ring when z is periodic). Returns the messages of
    /// each step's exchange.
    fn connect(
        &mut self,
        layout: &Layout,
        transports: &[SlabTransports],
    ) -> Result<Exchange, RuntimeError> {
        let n = layout.slabs.len();
        let local = self.local.clone();
        for &s in &local {
            // An outbox for each neighbour on another rank: it reads this subdomain's layer
            // across the side between them.
            let slab = &layout.slabs[s];
            let outboxes = std::array::from_fn(|side| {
                slab.neighbour(side)
                    .is_some_and(|w| layout.ranks[w] != layout.ranks[s])
            });
            self.send(
                s,
                Command::Allocate {
                    reads: transports[s],
                    outboxes,
                },
            )?;
        }
        let allocated = self.collect_from(&local, |_, r| match r {
            Reply::Channels(c) => Ok((c.reads, c.outboxes)),
            other => Err(other),
        })?;
        let mut channels = vec![None; n];
        for (&s, c) in local.iter().zip(allocated) {
            channels[s] = Some(c);
        }
        let reads = |s: usize, side: usize| channels[s].as_ref().and_then(|c| c.0[side].clone());
        let mut exchange = Exchange::default();
        let places = layout.places();
        for &s in &local {
            let slab = &layout.slabs[s];
            let (from, outboxes) = channels[s].clone().expect("allocated");
            let mut links = Links {
                reads: from,
                writes: Default::default(),
            };
            for side in 0..SIDE_COUNT {
                let Some(w) = slab.neighbour(side) else {
                    continue;
                };
                // The neighbour across `side` reads this layer across the opposite side.
                links.writes[side] = match &outboxes[side] {
                    Some(out) => {
                        let tag = exchange_tag(places[w], side ^ 1);
                        exchange.sends.push((out.clone(), layout.ranks[w], tag));
                        Some(out.clone())
                    }
                    None => reads(w, side ^ 1),
                };
                if layout.ranks[w] != layout.ranks[s] {
                    let c = links.reads[side]
                        .clone()
                        .expect("a channel across the side");
                    exchange
                        .recvs
                        .push((c, layout.ranks[w], exchange_tag(places[s], side)));
                }
            }
            self.send(s, Command::Attach(Box::new(links)))?;
        }
        drop(channels);
        self.collect_from(&local, |_, r| match r {
            Reply::Attached => Ok(()),
            other => Err(other),
        })?;
        Ok(exchange)
    }

    /// In a cluster job, carries the interface buffers of parity `t % 2` to the ranks that read
    /// them (every rank's slabs meet at their barrier); nothing in one process.
    fn flush(&mut self, t: u64) -> Result<(), RuntimeError> {
        if self.cluster.is_none() {
            return Ok(());
        }
        self.broadcast(|| Command::Flush { t })?;
        self.collect(|_, r| match r {
            Reply::Written => Ok(()),
            other => Err(other),
        })?;
        Ok(())
    }

    /// Whether this rank of a cluster job sends its messages while its slabs' interiors are
    /// updated (each step split into its faces and its interior); `false` in one process.
    pub fn overlaps(&self) -> bool {
        self.barrier.splits()
    }

    pub fn devices(&self) -> &[DeviceInfo] {
        &self.devices
    }
    pub fn domain(&self) -> Domain {
        self.domain
    }
    pub fn backend(&self) -> &'static str {
        self.backend
    }
    /// The next step to be run (the number of steps done so far).
    pub fn step(&self) -> u64 {
        self.step
    }
    /// The flag that stops a run after the current step.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Samples the time average from now on as `a` says (`None`: no longer).
    pub fn set_averaging(&mut self, a: Option<Averaging>) {
        self.averaging = a;
    }

    /// How the time average is sampled, if it is.
    pub fn averaging(&self) -> Option<Averaging> {
        self.averaging
    }

    /// The running sums of the time average of the whole domain, gathered from every slab.
    pub fn mean_sums(&mut self) -> Result<MeanSums, RuntimeError> {
        Ok(MeanSums::concat(self.slab_mean_sums()?))
    }

    /// The running sums of the time average of each slab, in slab order.
    pub fn slab_mean_sums(&mut self) -> Result<Vec<MeanSums>, RuntimeError> {
        self.broadcast(|| Command::ReadMeans)?;
        self.collect(|_, r| match r {
            Reply::Means(m) => Ok(*m),
            other => Err(other),
        })
    }

    /// Replaces the running sums of the time average of each slab (slab order).
    pub fn write_mean_sums(&mut self, slabs: Vec<MeanSums>) -> Result<(), RuntimeError> {
        assert_eq!(slabs.len(), self.workers.len(), "one set of sums per slab");
        for (s, m) in slabs.into_iter().enumerate() {
            self.send(s, Command::WriteMeans(Box::new(m)))?;
        }
        self.collect(|_, r| match r {
            Reply::Written => Ok(()),
            other => Err(other),
        })?;
        Ok(())
    }

    /// Moves `bodies` through the flow from now on, forced by the immersed boundary method before
    /// every step, the fluid under the `uniform` force besides (none when `bodies` has none). A
    /// run on one slab whose module can force them on its device hands them over
    /// ([`ComputeModule::hold_immersed`]); otherwise the coordinator forces them through the
    /// slabs' band pulls and per-node forces.
    pub fn set_immersed(
        &mut self,
        bodies: ImmersedBodies,
        uniform: Option<[f64; 3]>,
    ) -> Result<(), RuntimeError> {
        if bodies.bodies.is_empty() {
            self.immersed = None;
            return Ok(());
        }
        let bodies = Arc::new(bodies);
        let mut held = None;
        if self.workers.len() == 1 {
            self.send(0, Command::HoldImmersed(bodies.clone()))?;
            let took = self.collect(|_, r| match r {
                Reply::Held(h) => Ok(h),
                other => Err(other),
            })?;
            if took[0] {
                held = Some(bodies.radii());
            }
        }
        self.immersed = Some(Immersed {
            bodies,
            uniform,
            last: None,
            held,
        });
        Ok(())
    }

    /// Whether the module of the run forces the immersed bodies on its device.
    pub fn immersed_on_device(&self) -> bool {
        self.immersed.as_ref().is_some_and(|im| im.held.is_some())
    }

    /// The force and torque the fluid exerted on each immersed body (in body order, lattice
    /// units) in the last step run, and that step's number; `None` before the first.
    pub fn immersed_loads(&mut self) -> Result<Option<(u64, Vec<BodyLoad>)>, RuntimeError> {
        let Some(im) = &self.immersed else {
            return Ok(None);
        };
        if im.held.is_none() {
            return Ok(im.last.clone());
        }
        self.send(0, Command::PointForces)?;
        let mut got = self.collect(|_, r| match r {
            Reply::PointForces(f) => Ok(f),
            other => Err(other),
        })?;
        let Some((t, forces)) = got.pop().flatten() else {
            return Ok(None);
        };
        let im = self.immersed.as_ref().expect("immersed bodies");
        Ok(Some((t, im.bodies.place(t).loads(&forces))))
    }

    /// Runs `steps` steps on every device (fewer if the stop flag is raised), sampling the time
    /// average where [`Self::set_averaging`] says.
    pub fn run(&mut self, steps: u64) -> Result<RunStats, RuntimeError> {
        let Some(im) = &self.immersed else {
            return self.run_plain(steps);
        };
        if let Some(radii) = &im.held {
            // Forced on the device: the steps up to the first that would take a body out of the
            // domain run, and that one is refused as the coordinator refuses it.
            let t0 = self.step;
            return match im.bodies.check_steps(radii, t0..t0 + steps) {
                Ok(()) => self.run_plain(steps),
                Err(e) => {
                    let st = self.run_plain(e.step - t0)?;
                    if st.stopped {
                        Ok(st)
                    } else {
                        Err(e.into())
                    }
                }
            };
        }
        // Immersed bodies: each step forced from the band's pulled populations, gathered here.
        let mut total = RunStats {
            steps: 0,
            wall: Duration::ZERO,
            workers: vec![WorkerTimes::default(); self.workers.len()],
            stopped: false,
        };
        for _ in 0..steps {
            let tic = Instant::now();
            let (t, loads) = self.force_immersed()?;
            let forcing = tic.elapsed();
            let st = self.run_plain(1)?;
            if let Some(im) = &mut self.immersed {
                im.last = Some((t, loads));
            }
            total.steps += st.steps;
            total.wall += forcing + st.wall;
            for (t, w) in total.workers.iter_mut().zip(&st.workers) {
                t.steps += w.steps;
                t.compute += w.compute + forcing;
                t.wait += w.wait;
                t.stopped |= w.stopped;
            }
            if st.stopped {
                total.stopped = true;
                break;
            }
        }
        Ok(total)
    }

    /// The immersed boundary method's forcing of the next step: the bodies' points and band at this
    /// step, the band's pulled populations from the subdomains that hold its nodes, the direct
    /// forcing on the host (the same arithmetic in the same order whatever the partition), each
    /// subdomain's share of the band's forces handed back. Returns the step and the loads on the
    /// bodies.
    fn force_immersed(&mut self) -> Result<(u64, Vec<BodyLoad>), RuntimeError> {
        let t = self.step;
        let im = self.immersed.as_ref().expect("immersed bodies");
        let plan = im.bodies.plan(t)?;
        // Each band node's subdomain (`owner`) and each subdomain's nodes, in band order.
        let [nx, ny, _] = self.domain.size;
        let slabs: Vec<&SlabSpec> = self.devices.iter().map(|d| &d.slab).collect();
        let boxes: Vec<_> = slabs.iter().map(|s| (s.origin(), s.size())).collect();
        let find = SubdomainOf::new(&boxes).expect("the subdomains tile the domain");
        let mut lists: Vec<Vec<u32>> = vec![Vec::new(); slabs.len()];
        let owner: Vec<usize> = plan
            .band
            .iter()
            .map(|&g| {
                let g = g as usize;
                let p = [g % nx, g / nx % ny, g / (nx * ny)];
                let s = find.of(p);
                let o = slabs[s].origin();
                let [sx, sy, _] = slabs[s].size();
                lists[s].push((((p[2] - o[2]) * sy + p[1] - o[1]) * sx + p[0] - o[0]) as u32);
                s
            })
            .collect();
        for (s, list) in lists.iter().enumerate() {
            let nodes = list.clone();
            self.send(s, Command::PullNodes { t, nodes })?;
        }
        let parts = self.collect(|_, r| match r {
            Reply::Nodes(v) => Ok(v),
            other => Err(other),
        })?;
        // Back into band order.
        let mut next = vec![0; parts.len()];
        let mut pulled = Vec::with_capacity(plan.band.len() * Q);
        for &s in &owner {
            pulled.extend_from_slice(&parts[s][next[s]..next[s] + Q]);
            next[s] += Q;
        }
        let im = self.immersed.as_ref().expect("immersed bodies");
        let sol = im.bodies.solve(&plan, &pulled, im.uniform);
        let mut forces: Vec<Vec<[f64; 3]>> =
            lists.iter().map(|l| Vec::with_capacity(l.len())).collect();
        for (&s, f) in owner.iter().zip(sol.node_force) {
            forces[s].push(f);
        }
        for (s, (nodes, forces)) in lists.into_iter().zip(forces).enumerate() {
            self.send(s, Command::SetForces { nodes, forces })?;
        }
        self.collect(|_, r| match r {
            Reply::Written => Ok(()),
            other => Err(other),
        })?;
        Ok((t, sol.loads))
    }

    fn run_plain(&mut self, steps: u64) -> Result<RunStats, RuntimeError> {
        let exchange = self.workers.len() > 1;
        let averaging = self.averaging;
        let t0 = self.step;
        let start = Instant::now();
        for s in 0..self.workers.len() {
            self.send(
                s,
                Command::Run {
                    t0,
                    steps,
                    exchange,
                    averaging,
                },
            )?;
        }
        let times = self.collect(|_, r| match r {
            Reply::Ran(t) => Ok(t),
            other => Err(other),
        })?;
        let wall = start.elapsed();
        let done = times.iter().map(|t| t.steps).min().unwrap_or(0);
        debug_assert!(
            times.iter().all(|t| t.steps == done),
            "workers disagree on the steps done"
        );
        self.step += done;
        Ok(RunStats {
            steps: done,
            wall,
            stopped: times.iter().any(|t| t.stopped),
            workers: times,
        })
    }

    /// The fields of the whole domain, gathered from every slab.
    pub fn fields(&mut self) -> Result<Fields, RuntimeError> {
        Ok(Fields::concat(self.slab_fields()?))
    }

    /// The fields of every slab, in slab order, not concatenated (for outputs written per slab).
    pub fn slab_fields(&mut self) -> Result<Vec<Fields>, RuntimeError> {
        self.broadcast(|| Command::Fields)?;
        self.collect(|_, r| match r {
            Reply::Fields(f) => Ok(*f),
            other => Err(other),
        })
    }

    /// The watchdog's view of every slab, in slab order.
    pub fn health(&mut self) -> Result<Vec<Health>, RuntimeError> {
        self.broadcast(|| Command::Health)?;
        self.collect(|_, r| match r {
            Reply::Health(h) => Ok(h),
            other => Err(other),
        })
    }

    /// The convergence measure of the whole domain: every slab's sums (computed on its device, see
    /// [`ComputeModule::velocity_change`]) added in slab order. `None` when some slab had no previous
    /// velocity to compare with (the first call, or the first after populations were loaded).
    pub fn velocity_change(&mut self) -> Result<Option<ChangeSums>, RuntimeError> {
        self.broadcast(|| Command::VelocityChange)?;
        let slabs = self.collect(|_, r| match r {
            Reply::Change(c) => Ok(c),
            other => Err(other),
        })?;
        Ok(slabs
            .into_iter()
            .collect::<Option<Vec<ChangeSums>>>()
            .map(|s| ChangeSums::total(&s)))
    }

    /// The populations of every slab, in slab order.
    pub fn read_populations(&mut self) -> Result<Vec<Vec<u8>>, RuntimeError> {
        self.broadcast(|| Command::ReadPopulations)?;
        self.collect(|_, r| match r {
            Reply::Populations(p) => Ok(p),
            other => Err(other),
        })
    }

    /// Writes each slab's block into the existing file `path` (a path every rank reaches) at
    /// `offsets[s]`, all at once: its populations (values `width` bytes long) and, with `means`,
    /// its time averages' sums ([`crate::block::write_block`]). Answers what each wrote, in slab
    /// order.
    pub fn write_blocks(
        &mut self,
        path: &std::path::Path,
        offsets: &[u64],
        width: usize,
        means: bool,
    ) -> Result<Vec<BlockWritten>, RuntimeError> {
        assert_eq!(offsets.len(), self.workers.len(), "one offset per slab");
        for (s, &offset) in offsets.iter().enumerate() {
            self.send(
                s,
                Command::WriteBlock {
                    path: path.to_path_buf(),
                    offset,
                    width,
                    means,
                },
            )?;
        }
        self.collect(|_, r| match r {
            Reply::Block(w) => Ok(w),
            other => Err(other),
        })
    }

    /// Whether every slab's worker (on its rank) can open the existing file `path` for writing,
    /// as it must to write its checkpoint blocks: for each slab in order, why not (`None`: it can).
    pub fn reach(&mut self, path: &std::path::Path) -> Result<Vec<Option<String>>, RuntimeError> {
        self.broadcast(|| Command::Reach(path.to_path_buf()))?;
        self.collect(|_, r| match r {
            Reply::Reached(why) => Ok(why),
            other => Err(other),
        })
    }

    /// The current populations of chosen nodes: for each slab (in slab order) the slab-local node
    /// indices `nodes[s]`, answered with their `Q` populations each, node after node (see
    /// [`ComputeModule::read_nodes`]).
    pub fn read_nodes(&mut self, nodes: &[Arc<Vec<u32>>]) -> Result<Vec<Vec<f64>>, RuntimeError> {
        for (s, list) in nodes.iter().enumerate() {
            self.send(s, Command::ReadNodes(list.clone()))?;
        }
        self.collect(|_, r| match r {
            Reply::Nodes(v) => Ok(v),
            other => Err(other),
        })
    }

    /// The plane of the whole domain normal to `axis` at `index` (global), from the slabs or
    /// subdomains that hold part of it ([`ComputeModule::read_plane`]), each part put in its place.
    pub fn plane(&mut self, axis: usize, index: usize) -> Result<PlaneFields, RuntimeError> {
        let size = self.domain.size;
        if axis > 2 || index >= size[axis] {
            return Err(RuntimeError::Outside(format!(
                "plane {} = {index} outside a domain of {size:?} nodes",
                ["x", "y", "z"].get(axis).unwrap_or(&"?")
            )));
        }
        let [a, b] = crate::compute::plane_axes(axis);
        let held: Vec<(usize, usize, [usize; 2])> = self
            .devices
            .iter()
            .enumerate()
            .filter_map(|(s, d)| {
                let r = [&d.slab.x, &d.slab.y, &d.slab.z];
                r[axis]
                    .contains(&index)
                    .then(|| (s, index - r[axis].start, [r[a].start, r[b].start]))
            })
            .collect();
        for &(s, index, _) in &held {
            self.send(s, Command::ReadPlane { axis, index })?;
        }
        let slabs: Vec<usize> = held.iter().map(|h| h.0).collect();
        let parts = self.collect_from(&slabs, |_, r| match r {
            Reply::Plane(p) => Ok(*p),
            other => Err(other),
        })?;
        let placed = held.iter().map(|h| h.2).zip(parts).collect();
        Ok(PlaneFields::join(axis, [size[a], size[b]], placed))
    }

    /// Moves the walls of every wall-velocity slot at `walls` (lattice units) from the next step
    /// on, on every slab ([`ComputeModule::set_wall_velocities`]).
    pub fn set_wall_velocities(&mut self, walls: &[[f64; 3]]) -> Result<(), RuntimeError> {
        let walls = Arc::new(walls.to_vec());
        self.broadcast(|| Command::SetWalls(walls.clone()))?;
        self.collect(|_, r| match r {
            Reply::Written => Ok(()),
            other => Err(other),
        })?;
        Ok(())
    }

    /// Holds the temperature lattice's held faces and patches at `table` (θ, lattice units, the
    /// layout of `ThermalSetup::held_table`) from the next step on, on every slab
    /// ([`ComputeModule::set_held_temperatures`], which a module made without steered
    /// temperatures refuses for a table other than its own).
    pub fn set_held_temperatures(&mut self, table: &[f64]) -> Result<(), RuntimeError> {
        let table = Arc::new(table.to_vec());
        self.broadcast(|| Command::SetHeld(table.clone()))?;
        self.collect(|_, r| match r {
            Reply::Written => Ok(()),
            other => Err(other),
        })?;
        Ok(())
    }

    /// Loads populations (one buffer per slab, in slab order) saved at step `step`.
    pub fn write_populations(
        &mut self,
        slabs: Vec<Vec<u8>>,
        step: u64,
    ) -> Result<(), RuntimeError> {
        for (s, bytes) in slabs.into_iter().enumerate() {
            self.send(
                s,
                Command::WritePopulations {
                    bytes: Arc::new(bytes),
                    next_step: step,
                },
            )?;
        }
        self.collect(|_, r| match r {
            Reply::Written => Ok(()),
            other => Err(other),
        })?;
        self.step = step;
        // What the modules published for the next step to read.
        self.flush(step + 1)
    }

    fn broadcast(&mut self, cmd: impl Fn() -> Command) -> Result<(), RuntimeError> {
        for s in 0..self.workers.len() {
            self.send(s, cmd())?;
        }
        Ok(())
    }

    fn send(&mut self, s: usize, cmd: Command) -> Result<(), RuntimeError> {
        if self.failed {
            return Err(RuntimeError::Closed);
        }
        let sent = match &self.workers[s].commands {
            Some(c) => c.send(cmd).is_ok(),
            None => false,
        };
        if !sent {
            let err = self.lost(s);
            self.fail();
            return Err(err);
        }
        Ok(())
    }

    fn lost(&self, s: usize) -> RuntimeError {
        RuntimeError::Lost {
            device: self.workers[s].device,
            slab: s,
            backend: self.backend,
        }
    }

    /// Collects one reply per worker. On any failure, aborts the barrier, waits for the other replies
    /// (which then come quickly), shuts every worker down and returns the first real error.
    fn collect<T>(
        &mut self,
        accept: impl FnMut(usize, Reply) -> Result<T, Reply>,
    ) -> Result<Vec<T>, RuntimeError> {
        let all: Vec<usize> = (0..self.workers.len()).collect();
        self.collect_from(&all, accept)
    }

    /// [`Self::collect`] from the workers of `slabs` (ascending), in that order. In a cluster job
    /// the first failure also ends the job ([`Cluster::abort`]), so that no rank waits forever for
    /// the failed one.
    fn collect_from<T>(
        &mut self,
        slabs: &[usize],
        mut accept: impl FnMut(usize, Reply) -> Result<T, Reply>,
    ) -> Result<Vec<T>, RuntimeError> {
        let n = self.workers.len();
        let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
        // Slabs not asked count as answered.
        let mut answered = vec![true; n];
        for &s in slabs {
            answered[s] = false;
        }
        let mut first_error: Option<RuntimeError> = None;
        let mut pending = slabs.len();
        // In a cluster job the other replies may never come after a failure: the job ends at once.
        let mut ended = false;
        let mut end_job = |e: &Option<RuntimeError>| {
            if let (Some(e), Some(c), false) = (e, &self.cluster, ended) {
                ended = true;
                c.abort(&e.to_string(), exit_code(e));
            }
        };
        while pending > 0 {
            end_job(&first_error);
            let (s, reply) = match self.replies.recv_timeout(Duration::from_millis(200)) {
                Ok(r) => r,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    // A reply may have arrived just after the timeout: read it before judging threads.
                    if !self.replies.is_empty() {
                        continue;
                    }
                    // A worker whose thread is gone will never answer.
                    let gone = (0..n).find(|&s| {
                        !answered[s]
                            && self.workers[s]
                                .handle
                                .as_ref()
                                .is_some_and(|h| h.is_finished())
                    });
                    if let Some(s) = gone {
                        self.barrier.abort();
                        first_error.get_or_insert_with(|| self.lost(s));
                        answered[s] = true;
                        pending -= 1;
                    }
                    continue;
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    first_error.get_or_insert(RuntimeError::Closed);
                    break;
                }
            };
            if answered[s] {
                continue;
            }
            answered[s] = true;
            pending -= 1;
            let (device, slab, backend) = (self.workers[s].device, s, self.backend);
            match accept(s, reply) {
                Ok(v) => out[s] = Some(v),
                Err(Reply::Failed(error)) => {
                    self.barrier.abort();
                    first_error.get_or_insert(RuntimeError::Device {
                        device,
                        slab,
                        backend,
                        error,
                    });
                }
                Err(Reply::Panicked(message)) => {
                    self.barrier.abort();
                    first_error.get_or_insert(RuntimeError::Panic {
                        device,
                        slab,
                        backend,
                        message,
                    });
                }
                Err(Reply::Aborted) => {}
                Err(_) => {
                    self.barrier.abort();
                    first_error.get_or_insert(RuntimeError::Device {
                        device,
                        slab,
                        backend,
                        error: ComputeError::Invalid("unexpected reply from worker".into()),
                    });
                }
            }
        }
        end_job(&first_error);
        if let Some(e) = first_error {
            self.fail();
            return Err(e);
        }
        Ok(slabs
            .iter()
            .map(|&s| out[s].take().expect("every worker answered"))
            .collect())
    }

    /// Shuts every worker down and joins it.
    fn fail(&mut self) {
        self.failed = true;
        self.barrier.abort();
        self.join_all();
    }

    fn join_all(&mut self) {
        for w in &self.workers {
            if let Some(c) = &w.commands {
                let _ = c.send(Command::Shutdown);
            }
        }
        for w in &mut self.workers {
            if let Some(h) = w.handle.take() {
                let _ = h.join();
            }
        }
    }

    /// Stops every worker and joins its thread.
    pub fn shutdown(mut self) {
        self.join_all();
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.barrier.abort();
        self.join_all();
    }
}

/// The exit status of a job ended by `e`: 2 where the devices refuse the case's geometry (bad
/// input), 1 otherwise.
fn exit_code(e: &RuntimeError) -> i32 {
    match e {
        RuntimeError::Device {
            error: ComputeError::Geometry(_),
            ..
        } => 2,
        _ => 1,
    }
}

/// The tag of each serving rank's first message: its [`LayoutSummary`].
const SETUP_TAG: Tag = crate::cluster::SETUP_TAG;

/// What every rank of a job must agree on before any waits for another's slabs: the domain, and
/// each slab's planes and rank.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct LayoutSummary {
    size: [usize; 3],
    periodic: [bool; 3],
    slabs: Vec<([usize; 3], [usize; 3], usize)>,
}

impl LayoutSummary {
    fn of(layout: &Layout) -> Self {
        let d = layout.domain();
        Self {
            size: d.size,
            periodic: d.periodic,
            slabs: layout
                .slabs
                .iter()
                .zip(&layout.ranks)
                .map(|(s, &r)| (s.origin(), s.size(), r))
                .collect(),
        }
    }
}

impl std::fmt::Display for LayoutSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [x, y, z] = self.size;
        let slabs = self.slabs.iter().all(|(_, n, _)| n[0] == x && n[1] == y);
        let what = if slabs { "slab(s)" } else { "subdomain(s)" };
        write!(f, "{x}x{y}x{z} in {} {what}", self.slabs.len())?;
        let cuts: Vec<String> = self
            .slabs
            .iter()
            .map(|(o, n, r)| {
                let range = |a: usize| format!("{}..{}", o[a], o[a] + n[a]);
                if n[0] == x && n[1] == y {
                    format!("z {} on rank {r}", range(2))
                } else {
                    format!(
                        "{} on rank {r}",
                        (0..3).map(range).collect::<Vec<_>>().join(" x ")
                    )
                }
            })
            .collect();
        write!(f, " ({})", cuts.join(", "))
    }
}

/// Whether the channel subdomain `s` reads across each side is written by another rank.
fn across(layout: &Layout, s: usize) -> [bool; SIDE_COUNT] {
    let slab = &layout.slabs[s];
    std::array::from_fn(|side| {
        slab.neighbour(side)
            .is_some_and(|w| layout.ranks[w] != layout.ranks[s])
    })
}

/// Refuses a layout the job cannot run: ranks it does not have, a rank without a slab, a rank with
/// more slabs than the exchange's tags can name.
fn check_layout(layout: &Layout, cluster: &dyn Cluster) -> Result<(), RuntimeError> {
    let size = cluster.size();
    let most = layout.places().into_iter().max().map_or(0, |p| p + 1);
    if most > MAX_SLABS_PER_RANK {
        return Err(RuntimeError::Cluster(format!(
            "a rank runs {most} slabs: a rank of a cluster job runs at most {MAX_SLABS_PER_RANK}"
        )));
    }
    if layout.rank_count() != size {
        return Err(RuntimeError::Cluster(format!(
            "the layout places slabs on {} ranks, and the job has {size}",
            layout.rank_count()
        )));
    }
    match (0..size).find(|r| !layout.ranks.contains(r)) {
        Some(r) => Err(RuntimeError::Cluster(format!(
            "rank {r} has no slab in the layout"
        ))),
        None => Ok(()),
    }
}

fn cluster_error(e: &dyn std::fmt::Display) -> RuntimeError {
    RuntimeError::Cluster(e.to_string())
}

/// The messages of one rank's step exchange: each outbox with its reader's rank and tag, each
/// inbox with its writer's.
#[derive(Default)]
struct Exchange {
    sends: Vec<(Arc<dyn Channel>, usize, Tag)>,
    recvs: Vec<(Arc<dyn Channel>, usize, Tag)>,
}

impl Exchange {
    /// Sends the halves of parity `t % 2` of the outboxes to their readers and receives those of
    /// the inboxes, returning once all have gone and arrived.
    fn carry(&self, cluster: &dyn Cluster, t: u64) -> Result<(), String> {
        let parity = (t % 2) as usize;
        // SAFETY: a channel's two buffers are its two halves (`Channel`'s layout). Until the step
        // barrier after step t releases the workers, nothing else touches the buffers of parity
        // t % 2: their writers finished them (each module synchronised before the barrier, or
        // before the meeting after its faces where the step is split, and the interiors touch no
        // channel) and their readers use them only in step t + 1; each buffer is one channel's,
        // named once.
        let half = |c: &Arc<dyn Channel>| unsafe {
            let h = c.bytes() / 2;
            (c.address().add(parity * h), h)
        };
        let sends: Vec<Outgoing> = self
            .sends
            .iter()
            .map(|(c, to, tag)| {
                let (p, h) = half(c);
                Outgoing {
                    to: *to,
                    tag: *tag,
                    bytes: unsafe { std::slice::from_raw_parts(p, h) },
                }
            })
            .collect();
        let mut recvs: Vec<Incoming> = self
            .recvs
            .iter()
            .map(|(c, from, tag)| {
                let (p, h) = half(c);
                Incoming {
                    from: *from,
                    tag: *tag,
                    bytes: unsafe { std::slice::from_raw_parts_mut(p, h) },
                }
            })
            .collect();
        cluster
            .exchange(&sends, &mut recvs)
            .map_err(|e| format!("exchange after step {t}: {e}"))
    }
}

/// The step hook of a rank of a cluster job: after step t, the halves of parity t % 2 of its
/// outboxes go to their readers and those of its inboxes arrive, then every rank's stop decisions
/// are joined. With a [`Carrier`], the workers split their steps and the messages travel while
/// the interiors are updated (the overlap of TheLMA's cluster code).
struct RankExchange {
    cluster: Arc<dyn Cluster>,
    exchange: Arc<Exchange>,
    carrier: Option<Carrier>,
}

/// The thread that carries a step's messages between a rank's meeting after the faces and its
/// step barrier.
struct Carrier {
    start: Option<Sender<u64>>,
    done: Receiver<Result<(), String>>,
    /// The step whose messages are under way.
    pending: Mutex<Option<u64>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Whether the ranks of a job over `layout` overlap their messages with the interiors: where
/// [`overlap_wanted`], and the partition does not cut x or y (a step's parts are ranges of
/// z-planes, and where it cuts x or y every plane holds a boundary layer, so such a job sends
/// after whole steps).
fn overlaps(layout: &Layout) -> bool {
    overlap_wanted() && !layout.slabs.iter().any(SlabSpec::cuts_x_or_y)
}

/// Whether a cluster job's ranks overlap their messages with the interiors (`THELMA_OVERLAP=0`,
/// `false`, `off` or `no` turns it off, to measure what it gains): the runtime's choice, and the
/// one a module's kernels are compiled for (`ModelParams::overlapped_steps`).
pub fn overlap_wanted() -> bool {
    std::env::var("THELMA_OVERLAP").map_or(true, |v| {
        !["0", "false", "off", "no"].contains(&v.trim().to_ascii_lowercase().as_str())
    })
}

impl RankExchange {
    /// The hook of a rank with `exchange`; its carrier where `overlap` and the rank sends or
    /// receives anything (a thread that cannot be started only means no overlap).
    fn new(cluster: Arc<dyn Cluster>, exchange: Exchange, overlap: bool) -> Self {
        let exchange = Arc::new(exchange);
        let busy = !exchange.sends.is_empty() || !exchange.recvs.is_empty();
        let carrier = (overlap && busy)
            .then(|| Carrier::start(&cluster, &exchange))
            .flatten();
        Self {
            cluster,
            exchange,
            carrier,
        }
    }
}

impl Carrier {
    fn start(cluster: &Arc<dyn Cluster>, exchange: &Arc<Exchange>) -> Option<Self> {
        let (start, steps) = bounded::<u64>(1);
        let (finished, done) = bounded(1);
        let (cluster, exchange) = (cluster.clone(), exchange.clone());
        let thread = std::thread::Builder::new()
            .name("thelma-carrier".into())
            .spawn(move || {
                while let Ok(t) = steps.recv() {
                    if finished.send(exchange.carry(cluster.as_ref(), t)).is_err() {
                        break;
                    }
                }
            })
            .ok()?;
        Some(Self {
            start: Some(start),
            done,
            pending: Mutex::new(None),
            thread: Some(thread),
        })
    }
}

impl Drop for Carrier {
    fn drop(&mut self) {
        // Ends the thread's loop. It is joined where it is idle (so that it has let go of the
        // cluster before the job ends); one still carrying a step belongs to a failed job.
        self.start = None;
        if self.pending.get_mut().is_none() {
            if let Some(h) = self.thread.take() {
                let _ = h.join();
            }
        }
    }
}

impl StepHook for RankExchange {
    fn splits(&self) -> bool {
        self.carrier.is_some()
    }

    fn after_faces(&self, t: u64) -> Result<(), String> {
        let c = self
            .carrier
            .as_ref()
            .expect("only a carrier's rank splits its steps");
        let start = c
            .start
            .as_ref()
            .expect("a carrier is started until it is dropped");
        start
            .send(t)
            .map_err(|_| format!("exchange after step {t}: its thread has ended"))?;
        *c.pending.lock() = Some(t);
        Ok(())
    }

    fn after_step(&self, t: u64, stop: bool) -> Result<bool, String> {
        let pending = self.carrier.as_ref().and_then(|c| c.pending.lock().take());
        match (pending, &self.carrier) {
            (Some(p), Some(c)) => {
                debug_assert_eq!(p, t, "the carrier carries the step the workers ran");
                c.done
                    .recv()
                    .map_err(|_| format!("exchange after step {t}: its thread has ended"))??
            }
            // Published buffers (a flush), or a rank that does not split.
            _ => self.exchange.carry(self.cluster.as_ref(), t)?,
        }
        self.cluster
            .any(stop)
            .map_err(|e| format!("stop decision after step {t}: {e}"))
    }
}

/// Rank 0's stand-in for the worker of slab `s` on rank `rank`, whose messages travel under `tag`
/// ([`command_tag`]): forwards each command as a message and hands its reply to the coordinator
/// as a local worker would, starting with the report of the module's creation.
fn proxy_main(
    s: usize,
    rank: usize,
    tag: Tag,
    cluster: &dyn Cluster,
    commands: Receiver<Command>,
    replies: Sender<(usize, Reply)>,
) {
    let receive = || -> Reply {
        let got = cluster
            .recv(rank, tag)
            .map_err(|e| e.to_string())
            .and_then(|b| postcard::from_bytes(&b).map_err(|e| e.to_string()));
        got.unwrap_or_else(|e| Reply::Failed(ComputeError::Device(format!("rank {rank}: {e}"))))
    };
    let _ = replies.send((s, receive()));
    while let Ok(cmd) = commands.recv() {
        let last = matches!(cmd, Command::Shutdown);
        let sent = postcard::to_allocvec(&cmd)
            .map_err(|e| e.to_string())
            .and_then(|b| cluster.send(rank, tag, &b).map_err(|e| e.to_string()));
        if last {
            return;
        }
        let reply = match sent {
            Ok(()) => receive(),
            Err(e) => Reply::Failed(ComputeError::Device(format!("rank {rank}: {e}"))),
        };
        let _ = replies.send((s, reply));
    }
}

/// A serving rank's feed of a slab's worker: the coordinator's commands under the slab's `tag`
/// ([`command_tag`]), until it shuts the worker down or the job ends.
fn relay_main(tag: Tag, cluster: &dyn Cluster, commands: Sender<Command>) {
    loop {
        let cmd = cluster
            .recv(0, tag)
            .ok()
            .and_then(|b| postcard::from_bytes::<Command>(&b).ok())
            .unwrap_or(Command::Shutdown);
        let last = matches!(cmd, Command::Shutdown);
        if commands.send(cmd).is_err() || last {
            return;
        }
    }
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

#[allow(clippy::too_many_arguments)]
fn worker_main(
    s: usize,
    device: usize,
    slab: SlabSpec,
    factory: Arc<dyn ModuleFactory>,
    commands: Receiver<Command>,
    replies: Sender<(usize, Reply)>,
    barrier: Arc<StepBarrier>,
    stop: Arc<AtomicBool>,
) {
    let reply = |r: Reply| {
        let _ = replies.send((s, r));
    };
    let binding = bind_current_thread(&factory.placement(device, &slab));
    let created = catch_unwind(AssertUnwindSafe(|| factory.create(device, &slab)));
    let mut module: Box<dyn ComputeModule> = match created {
        Ok(Ok(module)) => {
            reply(Reply::Created {
                describe: module.describe(),
                binding,
                transports: None,
            });
            module
        }
        Ok(Err(e)) => return reply(Reply::Failed(e)),
        Err(p) => return reply(Reply::Panicked(panic_message(p))),
    };
    while let Ok(cmd) = commands.recv() {
        if matches!(cmd, Command::Shutdown) {
            break;
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            serve(module.as_mut(), cmd, &barrier, &stop)
        }));
        match outcome {
            Ok(r) => {
                let failed = matches!(r, Reply::Failed(_));
                if failed {
                    barrier.abort();
                }
                reply(r);
            }
            Err(p) => {
                barrier.abort();
                reply(Reply::Panicked(panic_message(p)));
                // The module's state is unknown after a panic: serve nothing more.
                break;
            }
        }
    }
}

fn serve(
    module: &mut dyn ComputeModule,
    cmd: Command,
    barrier: &StepBarrier,
    stop: &AtomicBool,
) -> Reply {
    let r = match cmd {
        Command::Allocate { reads, outboxes } => (|| {
            let mut channels: [Option<Arc<dyn Channel>>; SIDE_COUNT] = Default::default();
            let mut out: [Option<Arc<dyn Channel>>; SIDE_COUNT] = Default::default();
            for side in 0..SIDE_COUNT {
                channels[side] = reads[side]
                    .map(|t| module.allocate_channel(side, t))
                    .transpose()?;
                // Outboxes are host memory, which the exchange's messages read. The neighbour's
                // channel across the opposite side has the extent of this side's.
                if outboxes[side] {
                    out[side] = Some(module.allocate_channel(side, Transport::ZeroCopy)?);
                }
            }
            Ok(Reply::Channels(Box::new(SideChannels {
                reads: channels,
                outboxes: out,
            })))
        })(),
        Command::Attach(links) => module.attach(*links).map(|_| Reply::Attached),
        Command::Run {
            t0,
            steps,
            exchange,
            averaging,
        } => return run_steps(module, t0, steps, exchange, averaging, barrier, stop),
        Command::Flush { t } => {
            if let Err(e) = module.synchronize() {
                return Reply::Failed(e);
            }
            return match barrier.wait_step(Some(t), &AtomicBool::new(false)) {
                Ok(_) => Reply::Written,
                Err(StepError::Aborted) => Reply::Aborted,
                Err(StepError::Hook(e)) => Reply::Failed(ComputeError::Device(e)),
            };
        }
        Command::Fields => module.read_fields().map(|f| Reply::Fields(Box::new(f))),
        Command::ReadMeans => module.read_mean_sums().map(|m| Reply::Means(Box::new(m))),
        Command::WriteMeans(m) => module.write_mean_sums(&m).map(|_| Reply::Written),
        Command::Health => module.health().map(Reply::Health),
        Command::VelocityChange => module.velocity_change().map(Reply::Change),
        Command::ReadPopulations => module.read_populations().map(Reply::Populations),
        Command::ReadNodes(nodes) => module.read_nodes(&nodes).map(Reply::Nodes),
        Command::ReadPlane { axis, index } => module
            .read_plane(axis, index)
            .map(|p| Reply::Plane(Box::new(p))),
        Command::SetWalls(walls) => module.set_wall_velocities(&walls).map(|_| Reply::Written),
        Command::SetHeld(table) => module.set_held_temperatures(&table).map(|_| Reply::Written),
        Command::PullNodes { t, nodes } => module.pull_nodes(t, &nodes).map(Reply::Nodes),
        Command::SetForces { nodes, forces } => module
            .set_node_forces(&nodes, &forces)
            .map(|_| Reply::Written),
        Command::HoldImmersed(bodies) => module.hold_immersed(&bodies).map(Reply::Held),
        Command::PointForces => module.immersed_point_forces().map(Reply::PointForces),
        Command::WritePopulations { bytes, next_step } => module
            .write_populations(&bytes, next_step)
            .map(|_| Reply::Written),
        Command::WriteBlock {
            path,
            offset,
            width,
            means,
        } => (|| {
            let populations = module.read_populations()?;
            let sums = if means {
                Some(module.read_mean_sums()?)
            } else {
                None
            };
            write_block(&path, offset, &populations, width, sums.as_ref())
                .map(Reply::Block)
                .map_err(|e| ComputeError::Invalid(format!("cannot write {}: {e}", path.display())))
        })(),
        Command::Reach(path) => Ok(Reply::Reached(
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .err()
                .map(|e| e.to_string()),
        )),
        Command::Shutdown => unreachable!("handled by the worker loop"),
    };
    r.unwrap_or_else(Reply::Failed)
}

fn run_steps(
    module: &mut dyn ComputeModule,
    t0: u64,
    steps: u64,
    exchange: bool,
    averaging: Option<Averaging>,
    barrier: &StepBarrier,
    stop: &AtomicBool,
) -> Reply {
    let mut times = WorkerTimes::default();
    let start = Instant::now();
    // Overlapped steps: the workers meet once their faces are done, the hook starting their
    // messages while the interiors are updated.
    let split = exchange && barrier.splits();
    for k in 0..steps {
        let t = t0 + k;
        let tic = Instant::now();
        let mut met_for = Duration::ZERO;
        let ran = if split {
            let mut failed = None;
            let ran = module.step_overlapped(t, &mut || {
                let met = Instant::now();
                let r = barrier.wait_faces(t, stop);
                met_for = met.elapsed();
                r.map_err(|e| {
                    failed = Some(e);
                    ComputeError::Device(format!("no meeting after the faces of step {t}"))
                })
            });
            match failed {
                Some(StepError::Aborted) => return Reply::Aborted,
                Some(StepError::Hook(e)) => return Reply::Failed(ComputeError::Device(e)),
                None => ran,
            }
        } else {
            module.step(t)
        };
        if let Err(e) = ran {
            return Reply::Failed(e);
        }
        // The state step t made is that of step t + 1.
        if averaging.is_some_and(|a| a.samples(t + 1)) {
            if let Err(e) = module.accumulate_mean() {
                return Reply::Failed(e);
            }
        }
        if exchange {
            // Neighbours read this step's interface stores in the next step: finish before the barrier.
            if let Err(e) = module.synchronize() {
                return Reply::Failed(e);
            }
            times.compute += tic.elapsed().saturating_sub(met_for);
            times.wait += met_for;
            let tic = Instant::now();
            match barrier.wait_step(Some(t), stop) {
                Ok(halt) => {
                    times.wait += tic.elapsed();
                    times.steps = k + 1;
                    if halt {
                        times.stopped = true;
                        break;
                    }
                }
                Err(StepError::Aborted) => return Reply::Aborted,
                Err(StepError::Hook(e)) => return Reply::Failed(ComputeError::Device(e)),
            }
        } else {
            times.steps = k + 1;
            if stop.load(Ordering::SeqCst) {
                times.stopped = true;
                break;
            }
        }
    }
    if let Err(e) = module.synchronize() {
        return Reply::Failed(e);
    }
    if !exchange {
        times.compute = start.elapsed();
    }
    Reply::Ran(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_replies_cross_ranks_as_messages_and_channels_do_not() {
        let round = |c: &Command| {
            let b = postcard::to_allocvec(c).unwrap();
            postcard::from_bytes::<Command>(&b).unwrap()
        };
        assert!(matches!(
            round(&Command::Flush { t: 7 }),
            Command::Flush { t: 7 }
        ));
        let run = Command::Run {
            t0: 3,
            steps: 9,
            exchange: true,
            averaging: Some(Averaging { from: 2, every: 5 }),
        };
        assert!(matches!(
            round(&run),
            Command::Run {
                t0: 3,
                steps: 9,
                exchange: true,
                averaging: Some(Averaging { from: 2, every: 5 })
            }
        ));
        let block = Command::WriteBlock {
            path: "/shared/out/.thelma-x.tmp".into(),
            offset: 20,
            width: 2,
            means: true,
        };
        let written = Reply::Block(BlockWritten {
            crc: 0xdead_beef,
            bytes: 1 << 40,
            samples: Some(3),
        });
        let b = postcard::to_allocvec(&written).unwrap();
        assert!(matches!(
            postcard::from_bytes::<Reply>(&b).unwrap(),
            Reply::Block(BlockWritten {
                crc: 0xdead_beef,
                bytes: 1_099_511_627_776,
                samples: Some(3)
            })
        ));
        assert!(matches!(
            round(&block),
            Command::WriteBlock { path, offset: 20, width: 2, means: true }
                if path == std::path::Path::new("/shared/out/.thelma-x.tmp")
        ));
        assert!(matches!(
            round(&Command::Reach("/shared/out/.thelma-shared-7.tmp".into())),
            Command::Reach(p) if p == std::path::Path::new("/shared/out/.thelma-shared-7.tmp")
        ));
        let b = postcard::to_allocvec(&Reply::Reached(Some("denied".into()))).unwrap();
        assert!(matches!(
            postcard::from_bytes::<Reply>(&b).unwrap(),
            Reply::Reached(Some(why)) if why == "denied"
        ));
        let nodes = Command::ReadNodes(Arc::new(vec![4, 1 << 30]));
        assert!(matches!(round(&nodes), Command::ReadNodes(n) if *n == vec![4, 1 << 30]));
        assert!(matches!(round(&Command::Shutdown), Command::Shutdown));
        let attach = Command::Attach(Box::default());
        assert!(postcard::to_allocvec(&attach).is_err());
        let reply = Reply::Failed(ComputeError::OutOfMemory("12 GiB".into()));
        let b = postcard::to_allocvec(&reply).unwrap();
        assert!(matches!(
            postcard::from_bytes::<Reply>(&b).unwrap(),
            Reply::Failed(ComputeError::OutOfMemory(m)) if m == "12 GiB"
        ));
        let mut f = Fields::zeros([2, 1, 1], 3);
        f.rho = vec![1.5, f64::MIN_POSITIVE];
        let b = postcard::to_allocvec(&Reply::Fields(Box::new(f.clone()))).unwrap();
        assert!(matches!(postcard::from_bytes::<Reply>(&b).unwrap(), Reply::Fields(g) if *g == f));
    }

    #[test]
    fn barrier_carries_one_stop_decision_and_aborts() {
        // One party raises the stop flag partway; every party must see the same decision at the same
        // generation, whenever the others arrive.
        let b = Arc::new(StepBarrier::new(3));
        let stop = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (0..3)
            .map(|k| {
                let (b, stop) = (b.clone(), stop.clone());
                std::thread::spawn(move || {
                    for g in 0..1000 {
                        if k == 1 && g == 17 {
                            stop.store(true, Ordering::SeqCst);
                        }
                        if b.wait(&stop).unwrap() {
                            return g;
                        }
                    }
                    usize::MAX
                })
            })
            .collect();
        let stopped_at: Vec<usize> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(stopped_at[0] != usize::MAX, "nobody stopped");
        assert!(
            stopped_at.iter().all(|&g| g == stopped_at[0]),
            "{stopped_at:?}"
        );
        assert!(stopped_at[0] >= 17);

        let b = Arc::new(StepBarrier::new(2));
        let b2 = b.clone();
        let waiter = std::thread::spawn(move || b2.wait(&AtomicBool::new(false)));
        std::thread::sleep(Duration::from_millis(20));
        b.abort();
        assert_eq!(waiter.join().unwrap(), Err(Aborted));
        assert_eq!(b.wait(&AtomicBool::new(false)), Err(Aborted));
    }
}
