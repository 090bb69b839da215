//! The multi-device runtime (TheLMA §4): one OS thread per device, each owning its compute module and
//! one slab, serving commands from the coordinator (the caller's thread) over channels, with a step
//! barrier between steps whenever slabs exchange data.
//!
//! The runtime knows devices only through [`ModuleFactory`] and [`ComputeModule`]. Any failure in a
//! worker (an error or a panic) aborts the barrier, so no other worker can hang, and reaches the caller
//! as one [`RuntimeError`] naming the device; every thread is joined before the error is returned.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use crate::affinity::{bind_current_thread, AffinityError, Binding};
use crate::compute::{
    ChangeSums, ComputeError, ComputeModule, Fields, Health, MeanSums, ModuleFactory, PointForces,
};
use crate::domain::{Domain, PartitionError, SlabSpec};
use crate::physics::{BodyLoad, ImmersedBodies, LeavesDomain};
use crate::transport::{
    plan as plan_transports, Channel, Links, SlabTransports, Transport, TransportRefused,
};

/// A barrier for a fixed number of parties that can be aborted (waking every waiter with an error)
/// and that carries one stop decision per generation, taken by the last party to arrive, so that all
/// workers stop after the same step.
pub struct StepBarrier {
    parties: usize,
    state: Mutex<BarrierState>,
    cv: Condvar,
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
        }
    }

    /// Waits for every party. Returns whether `stop` was set when the last party arrived.
    pub fn wait(&self, stop: &AtomicBool) -> Result<bool, Aborted> {
        let mut s = self.state.lock();
        if s.aborted {
            return Err(Aborted);
        }
        s.arrived += 1;
        if s.arrived == self.parties {
            s.arrived = 0;
            s.generation += 1;
            s.stop = stop.load(Ordering::SeqCst);
            self.cv.notify_all();
            return Ok(s.stop);
        }
        let generation = s.generation;
        while s.generation == generation && !s.aborted {
            self.cv.wait(&mut s);
        }
        if s.generation == generation {
            return Err(Aborted);
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
}

enum Command {
    /// Allocate the channels the slab reads from below and from above, in these transports.
    Allocate {
        below: Option<Transport>,
        above: Option<Transport>,
    },
    Attach(Links),
    Run {
        t0: u64,
        steps: u64,
        exchange: bool,
        averaging: Option<Averaging>,
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
    HoldImmersed(Arc<ImmersedBodies>),
    PointForces,
    WritePopulations {
        bytes: Arc<Vec<u8>>,
        next_step: u64,
    },
    Shutdown,
}

enum Reply {
    Created {
        describe: String,
        binding: Result<Binding, AffinityError>,
    },
    Channels {
        below: Option<Arc<dyn Channel>>,
        above: Option<Arc<dyn Channel>>,
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
    Panicked(String),
    Aborted,
}

/// Time one worker spent in a run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
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
    /// The transports of the channels the slab reads from below and from above.
    pub transports: SlabTransports,
}

/// Which states the time average samples: those at steps `from`, `from + every`, … (the state at
/// step t being the one the first t steps make; a state is sampled as the step that makes it ends,
/// so the starting state of a run is never sampled).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

struct Worker {
    device: usize,
    commands: Sender<Command>,
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
        let slabs = SlabSpec::split(domain, devices.len())?;
        // Every channel's transport, refused before any worker starts or allocates.
        let transports = plan_transports(&slabs, devices, |r, w| factory.transport(r, w))
            .map_err(RuntimeError::Transport)?;
        let n = slabs.len();
        let barrier = Arc::new(StepBarrier::new(n));
        let (reply_tx, replies) = unbounded();
        let backend = factory.backend();
        let mut workers: Vec<Worker> = Vec::with_capacity(n);
        for (s, slab) in slabs.iter().enumerate() {
            let (tx, rx) = bounded(4);
            let factory = factory.clone();
            let slab = slab.clone();
            let device = devices[s];
            let replies = reply_tx.clone();
            let barrier = barrier.clone();
            let stop = stop.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("thelma-{backend}-{device}"))
                .spawn(move || worker_main(s, device, slab, factory, rx, replies, barrier, stop));
            let handle = match spawned {
                Ok(h) => h,
                Err(e) => {
                    // The workers already started end when their command channel closes.
                    for w in workers.drain(..) {
                        drop(w.commands);
                        if let Some(h) = w.handle {
                            let _ = h.join();
                        }
                    }
                    return Err(RuntimeError::Spawn(e.to_string()));
                }
            };
            workers.push(Worker {
                device,
                commands: tx,
                handle: Some(handle),
            });
        }
        drop(reply_tx);
        let mut rt = Runtime {
            backend,
            domain,
            workers,
            replies,
            barrier,
            stop,
            devices: Vec::new(),
            step: 0,
            failed: false,
            averaging: None,
            immersed: None,
        };

        // Creation: each worker reports its module.
        let created = rt.collect(|_, r| match r {
            Reply::Created { describe, binding } => Ok((describe, binding)),
            other => Err(other),
        })?;
        for (s, (describe, binding)) in created.into_iter().enumerate() {
            rt.devices.push(DeviceInfo {
                device: devices[s],
                slab: slabs[s].clone(),
                describe,
                binding,
                transports: transports[s],
            });
        }
        // Channels: each slab allocates the ones it reads, in the planned transports.
        for (s, [below, above]) in transports.iter().enumerate() {
            rt.send(
                s,
                Command::Allocate {
                    below: *below,
                    above: *above,
                },
            )?;
        }
        let channels = rt.collect(|_, r| match r {
            Reply::Channels { below, above } => Ok((below, above)),
            other => Err(other),
        })?;
        // Connection: slab s writes up into what slab s + 1 reads from below, and down into what
        // slab s − 1 reads from above (around the ring when z is periodic).
        for (s, slab) in slabs.iter().enumerate() {
            let links = Links {
                from_below: channels[s].0.clone(),
                from_above: channels[s].1.clone(),
                to_above: if slab.has_above() {
                    channels[(s + 1) % n].0.clone()
                } else {
                    None
                },
                to_below: if slab.has_below() {
                    channels[(s + n - 1) % n].1.clone()
                } else {
                    None
                },
            };
            rt.send(s, Command::Attach(links))?;
        }
        drop(channels);
        rt.collect(|_, r| match r {
            Reply::Attached => Ok(()),
            other => Err(other),
        })?;
        Ok(rt)
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
    /// step, the band's pulled populations from its slabs, the direct forcing on the host (the same
    /// arithmetic in the same order whatever the partition), each slab's share of the band's
    /// forces handed back. Returns the step and the loads on the bodies.
    fn force_immersed(&mut self) -> Result<(u64, Vec<BodyLoad>), RuntimeError> {
        let t = self.step;
        let im = self.immersed.as_ref().expect("immersed bodies");
        let plan = im.bodies.plan(t)?;
        let plane = (self.domain.size[0] * self.domain.size[1]) as u64;
        // The band ascends through the domain's node order, so its slabs' shares follow one another.
        let mut lists: Vec<Vec<u32>> = Vec::with_capacity(self.devices.len());
        let mut at = 0;
        for d in &self.devices {
            let (z0, z1) = (d.slab.z.start as u64 * plane, d.slab.z.end as u64 * plane);
            let end = at + plan.band[at..].partition_point(|&g| g < z1);
            lists.push(
                plan.band[at..end]
                    .iter()
                    .map(|&g| (g - z0) as u32)
                    .collect(),
            );
            at = end;
        }
        for (s, list) in lists.iter().enumerate() {
            let nodes = list.clone();
            self.send(s, Command::PullNodes { t, nodes })?;
        }
        let pulled = self
            .collect(|_, r| match r {
                Reply::Nodes(v) => Ok(v),
                other => Err(other),
            })?
            .concat();
        let im = self.immersed.as_ref().expect("immersed bodies");
        let sol = im.bodies.solve(&plan, &pulled, im.uniform);
        let mut forces = sol.node_force.into_iter();
        for (s, nodes) in lists.into_iter().enumerate() {
            let forces = forces.by_ref().take(nodes.len()).collect();
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
        Ok(())
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
        if self.workers[s].commands.send(cmd).is_err() {
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
        mut accept: impl FnMut(usize, Reply) -> Result<T, Reply>,
    ) -> Result<Vec<T>, RuntimeError> {
        let n = self.workers.len();
        let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
        let mut answered = vec![false; n];
        let mut first_error: Option<RuntimeError> = None;
        let mut pending = n;
        while pending > 0 {
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
        if let Some(e) = first_error {
            self.fail();
            return Err(e);
        }
        Ok(out
            .into_iter()
            .map(|v| v.expect("every worker answered"))
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
            let _ = w.commands.send(Command::Shutdown);
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
        Command::Allocate { below, above } => (|| {
            let below = below.map(|t| module.allocate_channel(t)).transpose()?;
            let above = above.map(|t| module.allocate_channel(t)).transpose()?;
            Ok(Reply::Channels { below, above })
        })(),
        Command::Attach(links) => module.attach(links).map(|_| Reply::Attached),
        Command::Run {
            t0,
            steps,
            exchange,
            averaging,
        } => return run_steps(module, t0, steps, exchange, averaging, barrier, stop),
        Command::Fields => module.read_fields().map(|f| Reply::Fields(Box::new(f))),
        Command::ReadMeans => module.read_mean_sums().map(|m| Reply::Means(Box::new(m))),
        Command::WriteMeans(m) => module.write_mean_sums(&m).map(|_| Reply::Written),
        Command::Health => module.health().map(Reply::Health),
        Command::VelocityChange => module.velocity_change().map(Reply::Change),
        Command::ReadPopulations => module.read_populations().map(Reply::Populations),
        Command::ReadNodes(nodes) => module.read_nodes(&nodes).map(Reply::Nodes),
        Command::PullNodes { t, nodes } => module.pull_nodes(t, &nodes).map(Reply::Nodes),
        Command::SetForces { nodes, forces } => module
            .set_node_forces(&nodes, &forces)
            .map(|_| Reply::Written),
        Command::HoldImmersed(bodies) => module.hold_immersed(&bodies).map(Reply::Held),
        Command::PointForces => module.immersed_point_forces().map(Reply::PointForces),
        Command::WritePopulations { bytes, next_step } => module
            .write_populations(&bytes, next_step)
            .map(|_| Reply::Written),
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
    for k in 0..steps {
        let t = t0 + k;
        let tic = Instant::now();
        if let Err(e) = module.step(t) {
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
            times.compute += tic.elapsed();
            let tic = Instant::now();
            match barrier.wait(stop) {
                Ok(halt) => {
                    times.wait += tic.elapsed();
                    times.steps = k + 1;
                    if halt {
                        times.stopped = true;
                        break;
                    }
                }
                Err(Aborted) => return Reply::Aborted,
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
