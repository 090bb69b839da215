//! GPU-only tests (ignored by default; run on a machine with CUDA): the Re = 1000 cavity at 128³
//! against the published data and the on-device watchdog. The CUDA module's agreement with the CPU
//! module, its partition invariance (`partition.rs`), restart (`restart.rs`) and analytic solutions
//! (`analytic.rs`) share their test bodies with the CPU module. Where no driver or GPU exists each
//! test fails under `THELMA_REQUIRE_GPU=1` and otherwise says so and returns.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use thelma_cli::app::run_case;
use thelma_core::physics::Collision;
use thelma_core::{BackendName, CaseConfig, DeviceSpec, Precision};
use thelma_tests::{
    cpu_runtime, cuda_runtime, domain, gpus, scatter_populations, variant_case, vortex_populations,
};

#[test]
#[ignore = "needs a CUDA device"]
fn cavity_re1000_at_128_matches_published_data_on_gpus() {
    if gpus().is_none() {
        return;
    }
    let mut c = CaseConfig::default();
    c.domain.size = [128; 3];
    c.hardware.backend = BackendName::new("cuda");
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
    for precision in [
        Precision::F32,
        Precision::F64,
        Precision::F16,
        Precision::F16c,
    ] {
        let c = variant_case([20, 18, 22], false, (Collision::MRT, false), precision);
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
