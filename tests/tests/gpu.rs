//! GPU tests (ignored by default; run on a machine with CUDA): the CUDA module against the CPU oracle,
//! partition invariance on GPUs (several slabs on one GPU, and one slab per GPU present), and the
//! Re = 1000 cavity at 128³ against the published data. Where no driver or GPU exists each test says
//! so and returns.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use thelma_cli::app::run_case;
use thelma_core::config::{Backend, CaseConfig, CaseKind, DeviceSpec, Obstacle, Precision};
use thelma_core::physics::Collision;
use thelma_core::runtime::Runtime;
use thelma_tests::{
    cpu_runtime, cuda_runtime, domain, gather_populations, gpus, scatter_populations,
    vortex_populations,
};

/// The collision variants every GPU test covers: each operator plain, and two with the eddy
/// viscosity and a body force (the other branch of the printed collision).
const VARIANTS: [(Collision, bool); 5] = [
    (Collision::MRT, false),
    (Collision::BGK, false),
    (Collision::TRT, false),
    (Collision::MRT, true),
    (Collision::TRT, true),
];

/// Walls, a moving lid and a box obstacle (walled z), or a sphere in a channel periodic in x and z;
/// `extra`: with a Smagorinsky eddy viscosity and a body force.
fn case(
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
            min: [(nx / 4) as i64, (ny / 3) as i64, (nz / 4) as i64],
            max: [(nx / 2) as i64, (ny / 2) as i64, (nz / 2) as i64],
        }];
    }
    c
}

fn run(mut rt: Runtime, c: &CaseConfig, steps: u64) -> Vec<u8> {
    let init = vortex_populations(domain(c), 0.05);
    let parts = scatter_populations(&rt, &init, c.numerics.precision);
    rt.write_populations(parts, 0).unwrap();
    let st = rt.run(steps).unwrap();
    assert_eq!(st.steps, steps);
    let out = gather_populations(&mut rt);
    rt.shutdown();
    out
}

fn values(bytes: &[u8], p: Precision) -> Vec<f64> {
    match p {
        Precision::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_ne_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        Precision::F64 => bytes
            .chunks_exact(8)
            .map(|b| f64::from_ne_bytes(b.try_into().unwrap()))
            .collect(),
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn cuda_module_matches_the_cpu_module() {
    if gpus().is_none() {
        return;
    }
    for periodic_z in [false, true] {
        for collision in VARIANTS {
            for precision in [Precision::F32, Precision::F64] {
                let c = case([40, 36, 44], periodic_z, collision, precision);
                let steps = 300;
                let cpu = values(&run(cpu_runtime(&c, 2), &c, steps), precision);
                let gpu = values(&run(cuda_runtime(&c, &[0]), &c, steps), precision);
                assert_eq!(cpu.len(), gpu.len());
                let start = vortex_populations(domain(&c), 0.05);
                let moved: f64 = cpu.iter().zip(&start).map(|(a, b)| (a - b).powi(2)).sum();
                let diff: f64 = cpu.iter().zip(&gpu).map(|(a, b)| (a - b).powi(2)).sum();
                let norm: f64 = cpu.iter().map(|a| a * a).sum();
                let rel = (diff / norm).sqrt();
                let tol = if precision == Precision::F32 {
                    1e-5
                } else {
                    1e-12
                };
                eprintln!(
                    "periodic z {periodic_z}, {collision:?}, {precision:?}: |Δ|/|ref| = {rel:.3e}"
                );
                assert!(moved > 0.0, "the state did not move");
                assert!(
                    rel < tol,
                    "{collision:?} {precision:?} periodic z {periodic_z}: |Δ|/|ref| = {rel:e} ≥ {tol:e}"
                );
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn gpu_slabs_equal_one_slab_bit_for_bit() {
    let Some(n) = gpus() else { return };
    let mut layouts: Vec<Vec<usize>> = vec![vec![0, 0], vec![0, 0, 0], vec![0, 0, 0, 0, 0]];
    if n > 1 {
        layouts.push((0..n).collect());
        layouts.push((0..n).rev().collect());
    }
    for periodic_z in [false, true] {
        for collision in VARIANTS {
            for precision in [Precision::F32, Precision::F64] {
                let c = case([24, 20, 23], periodic_z, collision, precision);
                let reference = run(cuda_runtime(&c, &[0]), &c, 200);
                for ids in &layouts {
                    let got = run(cuda_runtime(&c, ids), &c, 200);
                    assert!(
                        got == reference,
                        "devices {ids:?} differ from one slab (periodic z {periodic_z}, {collision:?}, {precision:?})"
                    );
                }
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn cavity_re1000_at_128_matches_published_data_on_gpus() {
    if gpus().is_none() {
        return;
    }
    let mut c = CaseConfig::default();
    c.domain.size = [128; 3];
    c.hardware.backend = Backend::Cuda;
    c.hardware.devices = DeviceSpec::All;
    c.output.dir = std::env::temp_dir().join(format!("thelma-gpu-cavity-{}", std::process::id()));
    let out = run_case(&c, Arc::new(AtomicBool::new(false)), &mut |_| {}).expect("cavity runs");
    eprintln!("128³ on {}:\n{}", out.summary.backend, out.summary.text());
    let _ = std::fs::remove_dir_all(&c.output.dir);
    assert_eq!(out.summary.backend, "cuda");
    assert!(
        out.summary.converged,
        "did not converge in {} steps",
        out.summary.steps
    );
    let v = out
        .summary
        .validation
        .expect("the Re = 1000 cube is validated");
    for p in &v.profiles {
        assert!(p.l2 < 0.02, "{}: L2 error {} at 128³", p.profile, p.l2);
    }
    for e in &v.extrema {
        assert!(
            (e.value - e.reference_value).abs() < 0.02,
            "{} = {} vs {}",
            e.name,
            e.value,
            e.reference_value
        );
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn on_device_watchdog_agrees_with_the_cpu_module_and_finds_the_first_bad_node() {
    if gpus().is_none() {
        return;
    }
    for precision in [Precision::F32, Precision::F64] {
        let c = case([20, 18, 22], false, (Collision::MRT, false), precision);
        let d = domain(&c);
        let mut init = vortex_populations(d, 0.05);
        let mut cpu = cpu_runtime(&c, 2);
        let mut gpu = cuda_runtime(&c, &[0, 0]);
        for rt in [&mut cpu, &mut gpu] {
            let parts = scatter_populations(rt, &init, precision);
            rt.write_populations(parts, 0).unwrap();
        }
        let (hc, hg) = (cpu.health().unwrap(), gpu.health().unwrap());
        for (a, b) in hc.iter().zip(&hg) {
            assert_eq!(a.rho_min, b.rho_min, "{precision:?}");
            assert_eq!(a.rho_max, b.rho_max, "{precision:?}");
            assert_eq!(b.non_finite, None);
        }
        // Two bad nodes in the upper slab (z ≥ 11): the watchdog names the first in memory order.
        let (nx, ny) = (d.size[0], d.size[1]);
        let n = d.nodes();
        for (x, y, z, i) in [(15usize, 9usize, 16usize, 3usize), (2, 16, 14, 11)] {
            init[i * n + (z * ny + y) * nx + x] = f64::NAN;
        }
        let parts = scatter_populations(&gpu, &init, precision);
        gpu.write_populations(parts, 0).unwrap();
        let h = gpu.health().unwrap();
        assert_eq!(h[0].non_finite, None);
        assert_eq!(h[1].non_finite, Some([2, 16, 14]), "{precision:?}");
        cpu.shutdown();
        gpu.shutdown();
    }
}
