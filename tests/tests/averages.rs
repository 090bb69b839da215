//! Time averages (`output.average_from`), one body per module (`per_module!`): the running sums a
//! module keeps where its populations are give, bit for bit, the mean of the very fields
//! `read_fields` reports at the sampled steps (ρ, u and θ), whatever the slab count (on the CUDA
//! module in f64, the velocity to its last bit). Their restart
//! is in `restart.rs`, their files in thelma-cli's `outputs` tests.

use thelma_core::physics::Collision;
use thelma_core::{
    Averaging, BoundaryConfig, BoundaryKind, CaseConfig, Face, PatchConfig, Precision,
    ThermalConfig,
};
use thelma_tests::{box_case, per_module, Module};

/// A heated room: a warm inlet patch in the x− wall, an outlet patch in the x+ wall, cold walls,
/// buoyancy along −y; `p` its precision.
fn room(p: Precision) -> CaseConfig {
    let mut case = box_case([14, 9, 10], [false; 3], 0.03, Collision::MRT, p);
    let patch = |min, max| Some(PatchConfig { min, max });
    case.boundary = vec![
        BoundaryConfig {
            velocity: [0.05, 0.0, 0.0],
            temperature: Some(1.0),
            patch: patch([5.0, 3.0], [7.0, 6.0]),
            ..BoundaryConfig::new(Face::XMinus, BoundaryKind::Velocity)
        },
        BoundaryConfig {
            patch: patch([1.0, 2.0], [3.0, 7.0]),
            ..BoundaryConfig::new(Face::XPlus, BoundaryKind::Pressure)
        },
        BoundaryConfig {
            temperature: Some(-0.5),
            ..BoundaryConfig::new(Face::YMinus, BoundaryKind::Wall)
        },
    ];
    case.thermal = Some(ThermalConfig {
        diffusivity: Some(0.02),
        beta: 1.0,
        gravity: [0.0, -2e-4, 0.0],
        ..ThermalConfig::default()
    });
    case.run.steps = Some(33);
    case
}

per_module!(means => time_averages_are_the_mean_of_the_sampled_fields_on_the_cpu,
    time_averages_are_the_mean_of_the_sampled_fields_on_cuda);

/// Samples at steps 7, 10, …, 31 (nine states) against the fields read at those steps and summed
/// on the host in the same order: equal bit for bit, on one slab and on three, in both precisions.
fn means(m: Module) {
    let a = Averaging { from: 7, every: 3 };
    for p in [Precision::F32, Precision::F64] {
        let case = room(p);
        let mut reference = None;
        for slabs in [1, 3] {
            let mut rt = m.runtime(&case, slabs);
            rt.set_averaging(Some(a));
            rt.run(33).unwrap();
            let got = rt.mean_sums().unwrap();
            rt.shutdown();

            let mut rt = m.runtime(&case, slabs);
            let mut sums = None;
            for t in (7..=31).step_by(3) {
                rt.run(t - rt.step()).unwrap();
                let f = rt.fields().unwrap();
                sums.get_or_insert_with(|| thelma_core::MeanSums::empty(&f))
                    .add(&f);
            }
            rt.shutdown();
            let want = sums.unwrap();
            assert_eq!(got.samples, 9, "{} {p:?}", m.name());
            let (g, w) = (&got.sums, &want.sums);
            let worst = |a: &[f64], b: &[f64]| {
                a.iter()
                    .zip(b)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0.0, f64::max)
            };
            let diffs = [
                worst(&g.rho, &w.rho),
                worst(&g.ux, &w.ux),
                worst(&g.uy, &w.uy),
                worst(&g.uz, &w.uz),
                worst(&g.temperature, &w.temperature),
            ];
            // Bit for bit, except the CUDA module's f64 velocity, whose device division may
            // round its last bit otherwise than the host's.
            let tol = match (m, p) {
                (Module::Cuda, Precision::F64) => [0.0, 1e-15, 1e-15, 1e-15, 0.0],
                _ => [0.0; 5],
            };
            assert!(
                got.samples == want.samples && diffs.iter().zip(tol).all(|(d, t)| *d <= t),
                "{} {p:?} {slabs} slabs: the sums differ by up to {diffs:?} (ρ, u, θ)",
                m.name()
            );
            let mean = got.mean().unwrap();
            assert!(
                mean.temperature.iter().any(|t| *t > 0.05),
                "no warm air came in"
            );
            assert!(mean.ux.iter().any(|u| *u > 0.01), "no inflow");
            match &reference {
                None => reference = Some(got),
                Some(r) => assert!(
                    *r == got,
                    "{} {p:?}: {slabs} slabs differ from one",
                    m.name()
                ),
            }
        }
    }
}
