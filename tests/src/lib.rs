//! Helpers shared by the end-to-end tests: building runtimes over the CPU module and gathering the
//! whole domain's populations from slabs.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use thelma_compute::cuda::{self, CudaFactory};
use thelma_compute::CpuFactory;
use thelma_compute::ModelParams;
use thelma_core::physics::d3q19::Q;
use thelma_core::physics::equilibrium;
use thelma_core::physics::Collision;
use thelma_core::physics::QT;
use thelma_core::Domain;
use thelma_core::ModuleFactory;
use thelma_core::{
    BoundaryConfig, BoundaryKind, CaseConfig, CaseKind, Face, Half12, Obstacle, Precision,
    ScaledHalf, SpongeConfig, Stored, TransportChoice,
};
use thelma_core::{Cluster, Layout, LocalCluster, Runtime, RuntimeError};
use thelma_geometry::Geometry;

/// Model parameters of a validated case.
pub fn model(case: &CaseConfig) -> ModelParams {
    let lattice = case.validate().expect("valid case");
    let geometry = Arc::new(Geometry::from_case(case).expect("valid geometry"));
    ModelParams::new(case, &lattice, geometry)
}

/// The domain of a case.
pub fn domain(case: &CaseConfig) -> Domain {
    Domain::new(case.domain.size, case.domain.periodic)
}

/// A runtime over `devices` CPU devices (one thread each, so that tests can run many at once).
pub fn cpu_runtime(case: &CaseConfig, devices: usize) -> Runtime {
    Module::Cpu.runtime_with(model(case), case, &Module::Cpu.slab_ids(devices))
}

/// The ranks of an in-process cluster job ([`LocalCluster`]) over the CPU module: rank 0's
/// runtime from `factory(rank)`'s modules (one thread each), and the threads of the serving ranks;
/// join them after shutting the runtime down.
pub type Job = (
    Result<Runtime, RuntimeError>,
    Vec<std::thread::JoinHandle<Result<(), RuntimeError>>>,
);

/// Starts a job of `layout.rank_count()` ranks in this process, each rank's modules made by its
/// own `factory(rank)`, as each process of an MPI job makes its own.
pub fn local_job(layout: &Layout, factory: impl Fn(usize) -> Arc<dyn ModuleFactory>) -> Job {
    let job = LocalCluster::job(layout.rank_count());
    let servers = job[1..]
        .iter()
        .map(|c| {
            let (f, l, c) = (factory(c.rank()), layout.clone(), c.clone());
            std::thread::spawn(move || Runtime::serve(f, &l, c, Arc::new(AtomicBool::new(false))))
        })
        .collect();
    let rt = Runtime::start_cluster(
        factory(0),
        layout,
        job[0].clone(),
        Arc::new(AtomicBool::new(false)),
    );
    (rt, servers)
}

/// The CPU factory of `case` for a rank running `slabs` slabs, one thread each.
pub fn cpu_factory(case: &CaseConfig, slabs: usize) -> Arc<dyn ModuleFactory> {
    Arc::new(CpuFactory::new(model(case), slabs, slabs))
}

/// The number of GPUs, or `None` (with a note) where there is no driver or GPU. With
/// `THELMA_REQUIRE_GPU=1` (how GPU hosts run the ignored tests) a missing GPU fails the test instead.
pub fn gpus() -> Option<usize> {
    match cuda::device_count() {
        Ok(n) if n > 0 => Some(n),
        Ok(_) => no_gpu("no GPU found".to_string()),
        Err(e) => no_gpu(e.to_string()),
    }
}

fn no_gpu(why: String) -> Option<usize> {
    if std::env::var("THELMA_REQUIRE_GPU").as_deref() == Ok("1") {
        panic!("THELMA_REQUIRE_GPU=1 but {why}");
    }
    eprintln!("skipped: {why}");
    None
}

/// A runtime over the CUDA module on the GPUs `ids` (repeat an id for several slabs on one GPU).
pub fn cuda_runtime(case: &CaseConfig, ids: &[usize]) -> Runtime {
    Module::Cuda.runtime_with(model(case), case, ids)
}

/// A CUDA runtime on the GPUs `ids` whose channels take `transport`.
pub fn cuda_runtime_over(case: &CaseConfig, ids: &[usize], transport: TransportChoice) -> Runtime {
    let factory = CudaFactory::new(model(case))
        .expect("CUDA is present")
        .with_transport(transport);
    Runtime::start(
        Arc::new(factory),
        domain(case),
        ids,
        Arc::new(AtomicBool::new(false)),
    )
    .unwrap_or_else(|e| panic!("cuda runtime over {transport} starts: {e}"))
}

/// The compute modules a test body can run on, by their names in `thelma_compute::BACKENDS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Module {
    Cpu,
    Cuda,
}

impl Module {
    /// The module's name in the backend registry (`--backend`).
    pub fn name(self) -> &'static str {
        match self {
            Module::Cpu => "cpu",
            Module::Cuda => "cuda",
        }
    }

    /// A runtime of `slabs` slabs (CPU devices, or slabs sharing GPU 0).
    pub fn runtime(self, case: &CaseConfig, slabs: usize) -> Runtime {
        self.runtime_with(model(case), case, &self.slab_ids(slabs))
    }

    /// The devices of `slabs` slabs: CPU devices 0..slabs, or GPU 0 for each.
    pub fn slab_ids(self, slabs: usize) -> Vec<usize> {
        match self {
            Module::Cpu => (0..slabs).collect(),
            Module::Cuda => vec![0; slabs],
        }
    }

    /// A runtime of the module with `params` (a case's model, or one with something added, such
    /// as a temperature lattice) over `case`'s domain, one slab per entry of `ids`.
    pub fn runtime_with(self, params: ModelParams, case: &CaseConfig, ids: &[usize]) -> Runtime {
        let factory = self.factory(params, ids.len());
        Runtime::start(factory, domain(case), ids, Arc::new(AtomicBool::new(false)))
            .unwrap_or_else(|e| panic!("{} runtime starts: {e}", self.name()))
    }

    /// The module's factory with `params` for `slabs` subdomains (on the CPU, one thread each).
    pub fn factory(self, params: ModelParams, slabs: usize) -> Arc<dyn ModuleFactory> {
        self.factory_over(params, slabs, TransportChoice::Auto)
    }

    /// [`Module::factory`] whose channels take `transport`.
    pub fn factory_over(
        self,
        params: ModelParams,
        slabs: usize,
        transport: TransportChoice,
    ) -> Arc<dyn ModuleFactory> {
        match self {
            Module::Cpu => {
                Arc::new(CpuFactory::new(params, slabs, slabs).with_transport(transport))
            }
            Module::Cuda => Arc::new(
                CudaFactory::new(params)
                    .expect("CUDA is present")
                    .with_transport(transport),
            ),
        }
    }

    /// A runtime with one slab per entry of `ids` (CPU devices are virtual: only the count counts).
    pub fn runtime_on(self, case: &CaseConfig, ids: &[usize]) -> Runtime {
        match self {
            Module::Cpu => cpu_runtime(case, ids.len()),
            Module::Cuda => cuda_runtime(case, ids),
        }
    }

    /// Device lists a partition test splits a run over: several slabs on one device (2, 3, 5
    /// slabs; on the CPU also 4), and on a host with several GPUs one slab per GPU, in both orders.
    pub fn layouts(self) -> Vec<Vec<usize>> {
        match self {
            Module::Cpu => (2..=5).map(|k| (0..k).collect()).collect(),
            Module::Cuda => {
                let mut l = vec![vec![0, 0], vec![0, 0, 0], vec![0; 5]];
                let n = gpus().unwrap_or(1);
                if n > 1 {
                    l.push((0..n).collect());
                    l.push((0..n).rev().collect());
                }
                l
            }
        }
    }

    /// `want` devices for `--devices`, or as many as the host has (GPUs are physical).
    pub fn devices_up_to(self, want: usize) -> usize {
        match self {
            Module::Cpu => want,
            Module::Cuda => want.min(gpus().unwrap_or(1)),
        }
    }
}

/// One test body for every module: `per_module!(body => cpu_test, cuda_test)` defines `cpu_test`,
/// run in CI, and `cuda_test`, ignored unless a GPU host runs the ignored tests (where it fails
/// without a GPU under `THELMA_REQUIRE_GPU=1`). `body` is a `fn(Module)`.
#[macro_export]
macro_rules! per_module {
    ($body:path => $cpu:ident, $cuda:ident) => {
        #[test]
        fn $cpu() {
            $body($crate::Module::Cpu)
        }
        #[test]
        #[ignore = "needs a CUDA device"]
        fn $cuda() {
            if $crate::gpus().is_some() {
                $body($crate::Module::Cuda)
            }
        }
    };
}

/// The collision variants the per-module tests cover: each operator plain, and two with the eddy
/// viscosity and a body force (the other branch of every module's collision).
pub const VARIANTS: [(Collision, bool); 5] = [
    (Collision::MRT, false),
    (Collision::BGK, false),
    (Collision::TRT, false),
    (Collision::MRT, true),
    (Collision::TRT, true),
];

/// Walls, a moving lid and a box obstacle (walled z), or a sphere in a channel periodic in x and z;
/// `extra`: with a Smagorinsky eddy viscosity and a body force.
pub fn variant_case(
    size: [usize; 3],
    periodic_z: bool,
    (collision, extra): (Collision, bool),
    precision: Precision,
) -> CaseConfig {
    let mut c = CaseConfig::default();
    if extra {
        c.numerics.smagorinsky = Some(0.15);
        c.physics.force = Some([2e-6, -1e-6, 3e-6]);
    }
    c.domain.size = size;
    c.numerics.collision = collision;
    c.numerics.precision = precision;
    c.physics.reynolds = 50.0;
    let [nx, ny, nz] = size;
    if periodic_z {
        c.domain.case = CaseKind::Box;
        c.domain.periodic = [true, false, true];
        c.domain.obstacles = vec![Obstacle::Sphere {
            centre: [nx as f64 * 0.4, ny as f64 * 0.4, nz as f64 * 0.5],
            radius: 3.5,
        }];
        c.physics.lid_speed = 0.0;
        c.physics.viscosity = Some(0.02);
    } else {
        c.domain.obstacles = vec![Obstacle::Box {
            min: [(nx / 4) as f64, (ny / 3) as f64, (nz / 4) as f64],
            max: [(nx / 2) as f64, (ny / 2) as f64, (nz / 2) as f64],
        }];
    }
    c
}

/// A box (no lid) of the given size and periodicity, viscosity `nu`, collision `c`, precision `p`.
pub fn box_case(
    size: [usize; 3],
    periodic: [bool; 3],
    nu: f64,
    c: Collision,
    p: Precision,
) -> CaseConfig {
    let mut case = CaseConfig::default();
    case.domain.case = CaseKind::Box;
    case.domain.size = size;
    case.domain.periodic = periodic;
    case.physics.viscosity = Some(nu);
    case.numerics.collision = c;
    case.numerics.precision = p;
    case
}

/// Asserts that `case` split over each of `m`'s slab layouts equals the one-slab run bit for bit
/// after `steps` from [`vortex_populations`]; `what` names the case in the message.
pub fn assert_slabs_equal_one_slab(m: Module, case: &CaseConfig, steps: u64, what: &str) {
    let reference = run_from_vortex(m.runtime(case, 1), case, steps);
    for ids in m.layouts() {
        let got = run_from_vortex(m.runtime_on(case, &ids), case, steps);
        assert!(
            got == reference,
            "{}: devices {ids:?} differ from one slab ({what})",
            m.name()
        );
    }
}

/// Starts `rt` from [`vortex_populations`] (so that every interface carries data from the first
/// step), runs `steps` and returns the whole domain's populations.
pub fn run_from_vortex(mut rt: Runtime, c: &CaseConfig, steps: u64) -> Vec<u8> {
    let init = vortex_populations(domain(c), 0.05);
    let parts = scatter_populations(&rt, &init, c.numerics.precision);
    rt.write_populations(parts, 0).unwrap();
    let st = rt.run(steps).unwrap();
    assert_eq!(st.steps, steps);
    let out = gather_populations(&mut rt);
    rt.shutdown();
    out
}

/// The largest relative difference |Δ|/|ref| (2-norm over all populations) allowed between a
/// module's run and the CPU module's: none for the CPU module itself (other slab counts equal one slab
/// bit for bit), rounding for the others.
pub fn agreement_tolerance(m: Module, p: Precision) -> f64 {
    match (m, p) {
        (Module::Cpu, _) => 0.0,
        (_, Precision::F32) => 1e-5,
        (_, Precision::F64) => 1e-12,
        // The modules' f32 arithmetic differs in its last bit (fused multiply-adds), which now and
        // then rounds a stored value to the neighbouring binary16 value (2⁻¹¹ of it).
        (_, Precision::F16) => 2e-3,
        // Likewise at Half12's spacing (2⁻¹² of a value).
        (_, Precision::F16c) => 1e-3,
    }
}

/// Population bytes as numbers.
pub fn values(bytes: &[u8], p: Precision) -> Vec<f64> {
    match p {
        Precision::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_ne_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        Precision::F64 => bytes
            .chunks_exact(8)
            .map(|b| f64::from_ne_bytes(b.try_into().unwrap()))
            .collect(),
        Precision::F16 => bytes
            .chunks_exact(2)
            .map(|b| ScaledHalf(u16::from_ne_bytes(b.try_into().unwrap())).load() as f64)
            .collect(),
        Precision::F16c => bytes
            .chunks_exact(2)
            .map(|b| Half12(u16::from_ne_bytes(b.try_into().unwrap())).load() as f64)
            .collect(),
    }
}

/// The populations of the whole domain, `[i][z][y][x]`, reassembled from its subdomains (bytes):
/// the flow's Q, and with a temperature lattice its QT after them.
pub fn gather_populations(rt: &mut Runtime) -> Vec<u8> {
    let parts = rt.read_populations().expect("populations");
    let n = rt.domain().nodes();
    let per_node = parts.iter().map(Vec::len).sum::<usize>() / n;
    // 2, 4 or 8 bytes a value: 19 or 26 values a node tell apart (38, 76, 152 against 52, 104, 208).
    let (q, bytes) = [Q, Q + QT]
        .into_iter()
        .find_map(|q| {
            let b = per_node / q;
            (per_node.is_multiple_of(q) && [2, 4, 8].contains(&b)).then_some((q, b))
        })
        .unwrap_or_else(|| panic!("{per_node} bytes a node are no lattice's populations"));
    let mut out = vec![0; q * n * bytes];
    for (dev, part) in rt.devices().iter().zip(&parts) {
        dev.slab.paste(part, &mut out, q, bytes);
    }
    out
}

/// Splits whole-domain populations `[i][z][y][x]` into the subdomains of `rt`, in its precision's
/// bytes.
pub fn scatter_populations(rt: &Runtime, whole: &[f64], precision: Precision) -> Vec<Vec<u8>> {
    rt.devices()
        .iter()
        .map(|dev| {
            let vals = dev.slab.cut(whole, Q, 1);
            match precision {
                Precision::F32 => vals
                    .iter()
                    .flat_map(|v| (*v as f32).to_ne_bytes())
                    .collect(),
                Precision::F64 => vals.iter().flat_map(|v| v.to_ne_bytes()).collect(),
                Precision::F16 => vals
                    .iter()
                    .flat_map(|v| ScaledHalf::store(*v as f32).0.to_ne_bytes())
                    .collect(),
                Precision::F16c => vals
                    .iter()
                    .flat_map(|v| Half12::store(*v as f32).0.to_ne_bytes())
                    .collect(),
            }
        })
        .collect()
}

/// Equilibrium populations (shifted, as the modules store them) of a smooth, fully three-dimensional
/// velocity field (a Taylor–Green-like vortex plus a shear wave), so that every direction and every
/// interface carries non-trivial data.
pub fn vortex_populations(domain: Domain, amplitude: f64) -> Vec<f64> {
    let [nx, ny, nz] = domain.size;
    let n = domain.nodes();
    let mut f = vec![0.0; Q * n];
    let tau = std::f64::consts::TAU;
    for z in 0..nz {
        for y in 0..ny {
            for x in 0..nx {
                let (a, b, c) = (
                    tau * x as f64 / nx as f64,
                    tau * y as f64 / ny as f64,
                    tau * z as f64 / nz as f64,
                );
                let u = [
                    amplitude * a.sin() * b.cos() * c.cos(),
                    -amplitude * a.cos() * b.sin() * c.cos() + 0.3 * amplitude * c.sin(),
                    0.5 * amplitude * (a + b).sin() * c.sin(),
                ];
                let drho = 0.01 * (a + 2.0 * c).cos();
                let feq = equilibrium(drho, u);
                let p = (z * ny + y) * nx + x;
                for i in 0..Q {
                    f[i * n + p] = feq[i];
                }
            }
        }
    }
    f
}

/// Every open kind at once across slabs: an inlet on x−, a pressure outlet or an outflow on x+, a
/// free-slip y+, an outflow z− (its shifted pulls cross the slab interfaces) and an obstacle.
pub fn open_case(outlet: BoundaryKind, c: Collision, p: Precision) -> CaseConfig {
    let mut case = box_case([20, 14, 23], [false; 3], 0.03, c, p);
    case.boundary = vec![
        BoundaryConfig {
            velocity: [0.04, 0.01, -0.005],
            ..BoundaryConfig::new(Face::XMinus, BoundaryKind::Velocity)
        },
        BoundaryConfig {
            density: (outlet == BoundaryKind::Pressure).then_some(1.005),
            ..BoundaryConfig::new(Face::XPlus, outlet)
        },
        BoundaryConfig::new(Face::YPlus, BoundaryKind::FreeSlip),
        BoundaryConfig::new(Face::ZMinus, BoundaryKind::Outflow),
    ];
    case.domain.obstacles = vec![Obstacle::Sphere {
        centre: [8.0, 6.0, 11.0],
        radius: 3.0,
    }];
    case
}

/// [`open_case`] with sponge layers in front of its x+ pressure outlet and of a second one on z+,
/// whose layer spans slab interfaces and meets the first along an edge.
pub fn sponge_case(c: Collision, p: Precision) -> CaseConfig {
    let mut case = open_case(BoundaryKind::Pressure, c, p);
    case.boundary[1].sponge = Some(SpongeConfig {
        width: 6.0,
        strength: 0.45,
    });
    case.boundary.push(BoundaryConfig {
        // Pressure faces meeting along an edge share their density.
        density: Some(1.005),
        sponge: Some(SpongeConfig {
            width: 10.0,
            strength: 0.3,
        }),
        ..BoundaryConfig::new(Face::ZPlus, BoundaryKind::Pressure)
    });
    case
}

/// The open cases of the invariance tests: every kind, and the sponge layers.
pub fn open_cases() -> Vec<(String, CaseConfig)> {
    let kinds =
        OPEN.map(|(outlet, c, p)| (format!("{outlet:?}, {c}, {p:?}"), open_case(outlet, c, p)));
    let sponges = [
        (Collision::MRT, Precision::F32),
        (Collision::TRT, Precision::F64),
    ]
    .map(|(c, p)| (format!("sponges, {c}, {p:?}"), sponge_case(c, p)));
    kinds.into_iter().chain(sponges).collect()
}

pub const OPEN: [(BoundaryKind, Collision, Precision); 5] = [
    (BoundaryKind::Pressure, Collision::MRT, Precision::F32),
    (BoundaryKind::Outflow, Collision::BGK, Precision::F64),
    (BoundaryKind::Pressure, Collision::TRT, Precision::F64),
    (BoundaryKind::Outflow, Collision::MRT, Precision::F32),
    (BoundaryKind::Pressure, Collision::BGK, Precision::F16),
];

/// Runs `f` on a thread and fails the test if it takes longer than a minute (a hung job).
pub fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("the job hung")
}
