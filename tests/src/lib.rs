//! Helpers shared by the end-to-end tests: building runtimes over the CPU module and gathering the
//! whole domain's populations from slabs.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use thelma_compute::cpu::CpuFactory;
use thelma_compute::cuda::{self, CudaFactory};
use thelma_compute::ModelParams;
use thelma_core::compute::ModuleFactory;
use thelma_core::config::{CaseConfig, Precision};
use thelma_core::domain::{Domain, SlabSpec};
use thelma_core::lattice::Q;
use thelma_core::physics::equilibrium;
use thelma_core::runtime::Runtime;
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
    let factory: Arc<dyn ModuleFactory> = Arc::new(CpuFactory::new(model(case), devices, devices));
    let ids: Vec<usize> = (0..devices).collect();
    Runtime::start(
        factory,
        domain(case),
        &ids,
        Arc::new(AtomicBool::new(false)),
    )
    .expect("runtime starts")
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
    let factory: Arc<dyn ModuleFactory> =
        Arc::new(CudaFactory::new(model(case)).expect("CUDA is present"));
    Runtime::start(factory, domain(case), ids, Arc::new(AtomicBool::new(false)))
        .expect("CUDA runtime starts")
}

/// The compute modules a test body can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Module {
    Cpu,
    Cuda,
}

impl Module {
    /// A runtime of `slabs` slabs (CPU devices, or slabs sharing GPU 0).
    pub fn runtime(self, case: &CaseConfig, slabs: usize) -> Runtime {
        match self {
            Module::Cpu => cpu_runtime(case, slabs),
            Module::Cuda => cuda_runtime(case, &vec![0; slabs]),
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

/// The populations of the whole domain, `[i][z][y][x]`, reassembled from slabs (bytes).
pub fn gather_populations(rt: &mut Runtime) -> Vec<u8> {
    let slabs = rt.read_populations().expect("populations");
    let plane_bytes: Vec<usize> = slabs.iter().map(|s| s.len() / Q).collect();
    let mut out = Vec::with_capacity(plane_bytes.iter().sum::<usize>() * Q);
    for i in 0..Q {
        for (s, bytes) in slabs.iter().enumerate() {
            out.extend_from_slice(&bytes[i * plane_bytes[s]..(i + 1) * plane_bytes[s]]);
        }
    }
    out
}

/// Splits whole-domain populations `[i][z][y][x]` into the slabs of `rt`, in its precision's bytes.
pub fn scatter_populations(rt: &Runtime, whole: &[f64], precision: Precision) -> Vec<Vec<u8>> {
    let d = rt.domain();
    let n = d.nodes();
    let plane = d.plane();
    rt.devices()
        .iter()
        .map(|dev| {
            let s: &SlabSpec = &dev.slab;
            let mut vals = Vec::with_capacity(Q * s.nodes());
            for i in 0..Q {
                vals.extend_from_slice(&whole[i * n + s.z.start * plane..i * n + s.z.end * plane]);
            }
            match precision {
                Precision::F32 => vals
                    .iter()
                    .flat_map(|v| (*v as f32).to_ne_bytes())
                    .collect(),
                Precision::F64 => vals.iter().flat_map(|v| v.to_ne_bytes()).collect(),
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
