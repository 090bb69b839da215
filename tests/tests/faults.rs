//! Fault injection: a worker that fails (with an error, or a panic) at a chosen step ends the run with
//! that error, naming the device, within a bounded time, with every thread joined. A device that runs
//! out of memory, while its module is created or later, is reported the same way.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use thelma_compute::CpuFactory;
use thelma_core::CaseConfig;
use thelma_core::SlabSpec;
use thelma_core::{
    ChangeSums, Channel, ComputeError, ComputeModule, Fields, Health, Links, MeanSums,
    ModuleFactory, Placement, PlaneFields, Transport, TransportChoice, TransportRefused,
};
use thelma_core::{Runtime, RuntimeError};
use thelma_tests::{domain, model};

#[derive(Clone, Copy)]
enum Fault {
    Error,
    Panic,
    /// The module cannot get its memory when it is created.
    OutOfMemoryAtCreate,
    /// A step needs memory the device no longer has.
    OutOfMemoryAtStep,
}

/// Asks the allocator for 64 TiB, as a lattice far beyond the machine would, and reports the failure
/// as the CPU module does. Where the system overcommits without limit and grants it, the same error
/// is returned anyway: what is tested is its reporting, not the allocator.
fn huge_allocation() -> ComputeError {
    let mut v: Vec<f32> = Vec::new();
    match v.try_reserve_exact(1 << 44) {
        Err(e) => ComputeError::OutOfMemory(format!("cannot allocate a lattice of 64 TiB: {e}")),
        Ok(()) => ComputeError::OutOfMemory("cannot allocate a lattice of 64 TiB".into()),
    }
}

struct Faulty {
    inner: CpuFactory,
    device: usize,
    at: u64,
    fault: Fault,
    alive: Arc<AtomicUsize>,
}

struct FaultyModule {
    inner: Box<dyn ComputeModule>,
    fail_at: Option<(u64, Fault)>,
    alive: Arc<AtomicUsize>,
}

impl Drop for FaultyModule {
    fn drop(&mut self) {
        self.alive.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ModuleFactory for Faulty {
    fn backend(&self) -> &'static str {
        "cpu"
    }
    fn placement(&self, device: usize, slab: &SlabSpec) -> Placement {
        self.inner.placement(device, slab)
    }
    fn transport(&self, reader: usize, writer: usize) -> Result<Transport, TransportRefused> {
        self.inner.transport(reader, writer)
    }
    fn create(
        &self,
        device: usize,
        slab: &SlabSpec,
    ) -> Result<Box<dyn ComputeModule>, ComputeError> {
        if device == self.device && matches!(self.fault, Fault::OutOfMemoryAtCreate) {
            return Err(huge_allocation());
        }
        let inner = self.inner.create(device, slab)?;
        self.alive.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(FaultyModule {
            inner,
            fail_at: (device == self.device).then_some((self.at, self.fault)),
            alive: self.alive.clone(),
        }))
    }
}

impl ComputeModule for FaultyModule {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn allocate_channel(
        &mut self,
        side: usize,
        t: Transport,
    ) -> Result<Arc<dyn Channel>, ComputeError> {
        self.inner.allocate_channel(side, t)
    }
    fn attach(&mut self, links: Links) -> Result<(), ComputeError> {
        self.inner.attach(links)
    }
    fn step(&mut self, t: u64) -> Result<(), ComputeError> {
        match self.fail_at {
            Some((at, Fault::Error)) if t == at => Err(ComputeError::Device(format!(
                "injected failure at step {t}"
            ))),
            Some((at, Fault::Panic)) if t == at => panic!("injected panic at step {t}"),
            Some((at, Fault::OutOfMemoryAtStep)) if t == at => Err(huge_allocation()),
            _ => self.inner.step(t),
        }
    }
    fn synchronize(&mut self) -> Result<(), ComputeError> {
        self.inner.synchronize()
    }
    fn read_fields(&mut self) -> Result<Fields, ComputeError> {
        self.inner.read_fields()
    }
    fn health(&mut self) -> Result<Health, ComputeError> {
        self.inner.health()
    }
    fn velocity_change(&mut self) -> Result<Option<ChangeSums>, ComputeError> {
        self.inner.velocity_change()
    }
    fn accumulate_mean(&mut self) -> Result<(), ComputeError> {
        self.inner.accumulate_mean()
    }
    fn read_mean_sums(&mut self) -> Result<MeanSums, ComputeError> {
        self.inner.read_mean_sums()
    }
    fn write_mean_sums(&mut self, m: &MeanSums) -> Result<(), ComputeError> {
        self.inner.write_mean_sums(m)
    }
    fn read_populations(&mut self) -> Result<Vec<u8>, ComputeError> {
        self.inner.read_populations()
    }
    fn read_nodes(&mut self, nodes: &[u32]) -> Result<Vec<f64>, ComputeError> {
        self.inner.read_nodes(nodes)
    }
    fn write_populations(&mut self, b: &[u8], t: u64) -> Result<(), ComputeError> {
        self.inner.write_populations(b, t)
    }
    fn read_plane(&mut self, axis: usize, index: usize) -> Result<PlaneFields, ComputeError> {
        self.inner.read_plane(axis, index)
    }
    fn set_wall_velocities(&mut self, walls: &[[f64; 3]]) -> Result<(), ComputeError> {
        self.inner.set_wall_velocities(walls)
    }
    fn set_held_temperatures(&mut self, table: &[f64]) -> Result<(), ComputeError> {
        self.inner.set_held_temperatures(table)
    }
}

fn inject(fault: Fault, device: usize, at: u64) -> (RuntimeError, Duration, usize) {
    let mut c = CaseConfig::default();
    c.domain.size = [16, 16, 24];
    let alive = Arc::new(AtomicUsize::new(0));
    let factory = Arc::new(Faulty {
        inner: CpuFactory::new(model(&c), 4, 4),
        device,
        at,
        fault,
        alive: alive.clone(),
    });
    let mut rt = Runtime::start(
        factory,
        domain(&c),
        &[0, 1, 2, 3],
        Arc::new(AtomicBool::new(false)),
    )
    .unwrap();
    let start = Instant::now();
    let err = rt
        .run(1000)
        .expect_err("the injected fault must end the run");
    let took = start.elapsed();
    // After a failure the runtime has joined every worker, so every module has been dropped.
    let left = alive.load(Ordering::SeqCst);
    assert!(matches!(rt.run(1), Err(RuntimeError::Closed)));
    (err, took, left)
}

#[test]
fn a_failing_worker_stops_every_worker_with_its_error() {
    let (err, took, left) = inject(Fault::Error, 2, 37);
    let msg = err.to_string();
    assert!(
        msg.contains("device 2") && msg.contains("injected failure at step 37"),
        "{msg}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert_eq!(left, 0, "modules still alive: threads not joined");
}

#[test]
fn a_panicking_worker_stops_every_worker_with_its_message() {
    let (err, took, left) = inject(Fault::Panic, 0, 5);
    let msg = err.to_string();
    assert!(
        msg.contains("device 0")
            && msg.contains("panicked")
            && msg.contains("injected panic at step 5"),
        "{msg}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert_eq!(left, 0, "modules still alive: threads not joined");
}

#[test]
fn a_device_out_of_memory_at_a_step_is_named_and_stops_every_worker() {
    let (err, took, left) = inject(Fault::OutOfMemoryAtStep, 3, 12);
    let msg = err.to_string();
    assert!(
        msg.starts_with("device 3 (cpu, slab 3): out of memory: cannot allocate"),
        "{msg}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert_eq!(left, 0, "modules still alive: threads not joined");
}

#[test]
fn a_device_out_of_memory_at_creation_fails_the_start_and_joins_every_worker() {
    let mut c = CaseConfig::default();
    c.domain.size = [16, 16, 24];
    let alive = Arc::new(AtomicUsize::new(0));
    let factory = Arc::new(Faulty {
        inner: CpuFactory::new(model(&c), 4, 4),
        device: 1,
        at: 0,
        fault: Fault::OutOfMemoryAtCreate,
        alive: alive.clone(),
    });
    let start = Instant::now();
    let err = Runtime::start(
        factory,
        domain(&c),
        &[0, 1, 2, 3],
        Arc::new(AtomicBool::new(false)),
    )
    .err()
    .expect("the start must fail");
    let msg = err.to_string();
    assert!(
        msg.starts_with("device 1 (cpu, slab 1): out of memory"),
        "{msg}"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(alive.load(Ordering::SeqCst), 0, "modules still alive");
}

#[test]
fn a_transport_the_devices_cannot_take_fails_the_start_naming_it_and_joins_every_worker() {
    let mut c = CaseConfig::default();
    c.domain.size = [8, 8, 12];
    for t in [Transport::Device, Transport::Peer] {
        let alive = Arc::new(AtomicUsize::new(0));
        let factory = Arc::new(Faulty {
            inner: CpuFactory::new(model(&c), 3, 3).with_transport(TransportChoice::Fixed(t)),
            device: 0,
            at: u64::MAX,
            fault: Fault::Error,
            alive: alive.clone(),
        });
        let err = Runtime::start(
            factory,
            domain(&c),
            &[0, 1, 2],
            Arc::new(AtomicBool::new(false)),
        )
        .err()
        .expect("the start must fail");
        assert!(matches!(err, RuntimeError::Transport(_)), "{err}");
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!("--transport {t}: ")) && msg.contains("host memory"),
            "{msg}"
        );
        assert_eq!(alive.load(Ordering::SeqCst), 0, "modules still alive");
    }
    // What host memory can carry starts.
    for choice in [
        TransportChoice::Auto,
        TransportChoice::Fixed(Transport::ZeroCopy),
    ] {
        let f = CpuFactory::new(model(&c), 3, 3).with_transport(choice);
        let rt = Runtime::start(
            Arc::new(f),
            domain(&c),
            &[0, 1, 2],
            Arc::new(AtomicBool::new(false)),
        )
        .unwrap();
        for d in rt.devices() {
            assert_eq!(
                [d.transports[0], d.transports[1]],
                [d.slab.has_below(), d.slab.has_above()].map(|h| h.then_some(Transport::ZeroCopy))
            );
        }
        rt.shutdown();
    }
}
