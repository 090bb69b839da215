//! Analytic solutions, for every collision operator in f32 and f64, one body per module (the CPU
//! module in CI, the CUDA module on a GPU host: `per_module!`): a decaying shear wave (the viscosity),
//! a body-force Poiseuille channel (the force and the walls, second order), a Taylor–Green vortex
//! started from the case file's initial-state expressions (second order), and Couette flow between
//! two walls moving in opposite directions.

use thelma_core::physics::Collision;
use thelma_core::{BoundaryConfig, BoundaryKind, Expression, Face, InitialConfig, Precision};
use thelma_tests::{box_case, per_module, Module};

const OPERATORS: [Collision; 3] = [Collision::BGK, Collision::TRT, Collision::MRT];
const PRECISIONS: [Precision; 2] = [Precision::F32, Precision::F64];

fn text(s: String) -> Expression {
    Expression::Text(s)
}

/// The viscosity a shear wave `u_x = U sin(k z)` decays with, measured between two times.
fn shear_wave_viscosity(m: Module, c: Collision, p: Precision) -> f64 {
    let (n, nu, u) = (32, 0.05, 0.01);
    let mut case = box_case([4, 4, n], [true; 3], nu, c, p);
    case.initial = Some(InitialConfig {
        velocity: [
            text(format!("{u}*sin(2*PI*z/nz)")),
            Expression::Number(0.0),
            Expression::Number(0.0),
        ],
        ..InitialConfig::default()
    });
    let mut rt = m.runtime(&case, 2);
    let k = std::f64::consts::TAU / n as f64;
    // The wave's amplitude (up to a constant factor) on one column of nodes.
    let mut amplitude = |steps: u64| {
        rt.run(steps).unwrap();
        let f = rt.fields().unwrap();
        (0..n)
            .map(|z| f.ux[f.idx(1, 2, z)] * (k * z as f64).sin())
            .sum::<f64>()
    };
    // From t1 on, past the initial layer of the equilibrium start.
    let (t1, t2) = (200, 1200);
    let a1 = amplitude(t1);
    let a2 = amplitude(t2 - t1);
    (a1 / a2).ln() / (k * k * (t2 - t1) as f64)
}

per_module!(shear_wave => a_shear_wave_decays_with_the_viscosity_of_tau, a_shear_wave_decays_with_the_viscosity_of_tau_on_cuda);

fn shear_wave(m: Module) {
    for c in OPERATORS {
        for p in PRECISIONS {
            let measured = shear_wave_viscosity(m, c, p);
            let err = measured / 0.05 - 1.0;
            eprintln!(
                "shear wave {c} {p:?}: ν {measured:.6} ({:+.3} %)",
                100.0 * err
            );
            assert!(err.abs() < 0.005, "{c} {p:?}: ν {measured} against 0.05");
        }
    }
}

/// The relative L2 error of a body-force Poiseuille channel `n` nodes across (walls halfway beyond
/// z = 0 and z = n − 1), at steady state.
fn poiseuille_error(m: Module, c: Collision, p: Precision, n: usize) -> f64 {
    poiseuille_error_at(m, c, p, n, 0.01)
}

/// The same with the centreline speed `umax`.
fn poiseuille_error_at(m: Module, c: Collision, p: Precision, n: usize, umax: f64) -> f64 {
    let nu = 1.0 / 6.0;
    let f = umax * 8.0 * nu / (n * n) as f64;
    let mut case = box_case([4, 4, n], [true, true, false], nu, c, p);
    case.physics.force = Some([f, 0.0, 0.0]);
    let mut rt = m.runtime(&case, 2);
    // About twelve e-folds of the slowest transient, n²/(π² ν).
    let steps = (12.0 * (n * n) as f64 / (std::f64::consts::PI.powi(2) * nu)) as u64;
    rt.run(steps).unwrap();
    let fields = rt.fields().unwrap();
    let (mut e2, mut u2) = (0.0, 0.0);
    for z in 0..n {
        let zc = z as f64 + 0.5;
        let exact = f / (2.0 * nu) * zc * (n as f64 - zc);
        let got = fields.ux[fields.idx(2, 1, z)];
        e2 += (got - exact).powi(2);
        u2 += exact * exact;
    }
    (e2 / u2).sqrt()
}

per_module!(poiseuille => a_body_force_drives_poiseuille_flow_to_second_order, a_body_force_drives_poiseuille_flow_to_second_order_on_cuda);

fn poiseuille(m: Module) {
    for c in OPERATORS {
        for p in PRECISIONS {
            let (e16, e32) = (poiseuille_error(m, c, p, 16), poiseuille_error(m, c, p, 32));
            eprintln!("Poiseuille {c} {p:?}: L2 {e16:.3e} at 16, {e32:.3e} at 32");
            assert!(e32 < 0.01, "{c} {p:?}: L2 error {e32} at 32 nodes");
            if c == Collision::TRT {
                // TRT with Λ = 3/16 is exact for this flow, up to the transient that twelve
                // e-folds leave (e⁻¹² = 6e-6): no order to measure. (Reported from the stored
                // populations with Guo's +F/2 instead of −F/2, u had a uniform excess of F: 1.8e-3
                // at 32 nodes, which passed as second order.)
                assert!(
                    e16 < 2e-5 && e32 < 2e-5,
                    "{c} {p:?}: L2 {e16:.3e} at 16, {e32:.3e} at 32 where TRT is exact"
                );
            } else {
                assert!(
                    e16 / e32 > 3.5,
                    "{c} {p:?}: error {e16:.3e} → {e32:.3e} is not second order"
                );
            }
        }
    }
}

/// The relative L2 error of a Taylor–Green vortex on an n × n periodic square after two decay times,
/// in diffusive scaling (U ∝ 1/n, ν fixed), started from `[initial]` expressions with the vortex's
/// pressure field.
fn taylor_green_error(m: Module, c: Collision, p: Precision, n: usize) -> f64 {
    let nu = 0.05;
    let u = 0.02 * 16.0 / n as f64;
    let mut case = box_case([n, n, 2], [true; 3], nu, c, p);
    case.initial = Some(InitialConfig {
        density: text(format!(
            "1 - 0.75*{}*(cos(4*PI*x/nx) + cos(4*PI*y/ny))",
            u * u
        )),
        velocity: [
            text(format!("{u}*sin(2*PI*x/nx)*cos(2*PI*y/ny)")),
            text(format!("-{u}*cos(2*PI*x/nx)*sin(2*PI*y/ny)")),
            Expression::Number(0.0),
        ],
    });
    let mut rt = m.runtime(&case, 1);
    let k = std::f64::consts::TAU / n as f64;
    // Two decay times: an equilibrium start lacks the viscous stress (Mei et al. 2006), which seeds
    // an acoustic transient whose relative size does not shrink with the grid at fixed Re (BGK f64:
    // L2 2.8e-2, 1.0e-2, 4.7e-3 at 16, 32, 64 after one decay time, 2.6e-2, 6.6e-3, 1.7e-3 after
    // two, U = 0.02·16/n).
    let steps = (2.0 / (2.0 * nu * k * k)).round() as u64;
    rt.run(steps).unwrap();
    let decay = (-2.0 * nu * k * k * steps as f64).exp();
    let f = rt.fields().unwrap();
    let (mut e2, mut u2) = (0.0, 0.0);
    for y in 0..n {
        for x in 0..n {
            let (a, b) = (k * x as f64, k * y as f64);
            let ex = u * a.sin() * b.cos() * decay;
            let ey = -u * a.cos() * b.sin() * decay;
            let i = f.idx(x, y, 1);
            e2 += (f.ux[i] - ex).powi(2) + (f.uy[i] - ey).powi(2);
            u2 += ex * ex + ey * ey;
        }
    }
    (e2 / u2).sqrt()
}

per_module!(taylor_green => a_taylor_green_vortex_from_initial_expressions_decays_to_second_order, a_taylor_green_vortex_from_initial_expressions_decays_to_second_order_on_cuda);

fn taylor_green(m: Module) {
    for c in OPERATORS {
        for p in PRECISIONS {
            let (e16, e32) = (
                taylor_green_error(m, c, p, 16),
                taylor_green_error(m, c, p, 32),
            );
            eprintln!("Taylor–Green {c} {p:?}: L2 {e16:.3e} at 16, {e32:.3e} at 32");
            assert!(e32 < 0.01, "{c} {p:?}: L2 error {e32}");
            assert!(
                e16 / e32 > 3.5,
                "{c} {p:?}: {e16:.3e} → {e32:.3e} is not second order"
            );
        }
    }
}

per_module!(couette => two_walls_moving_in_opposite_directions_give_couette_flow, two_walls_moving_in_opposite_directions_give_couette_flow_on_cuda);

/// Couette flow: walls at z− and z+ moving in −x and +x; the steady profile is linear, which halfway
/// bounce-back with the moving-wall term reproduces exactly.
fn couette(m: Module) {
    let (n, u) = (16, 0.02);
    for c in OPERATORS {
        for p in PRECISIONS {
            let mut case = box_case([4, 4, n], [true, true, false], 1.0 / 6.0, c, p);
            let wall = |face, v: f64| BoundaryConfig {
                velocity: [v, 0.0, 0.0],
                ..BoundaryConfig::new(face, BoundaryKind::Wall)
            };
            case.boundary = vec![wall(Face::ZMinus, -u), wall(Face::ZPlus, u)];
            let mut rt = m.runtime(&case, 2);
            rt.run(3000).unwrap();
            let f = rt.fields().unwrap();
            let worst = (0..n)
                .map(|z| {
                    let exact = u * (2.0 * (z as f64 + 0.5) / n as f64 - 1.0);
                    (f.ux[f.idx(0, 3, z)] - exact).abs() / u
                })
                .fold(0.0, f64::max);
            eprintln!("Couette {c} {p:?}: largest error {worst:.2e} U");
            assert!(worst < 1e-4, "{c} {p:?}: {worst:e} U");
            // The closed channel keeps its mass: the walls' terms cancel in pairs.
            let mass = f.mass() / (4 * 4 * n) as f64;
            assert!((mass - 1.0).abs() < 1e-6, "{c} {p:?}: mean density {mass}");
        }
    }
}

per_module!(f16_storage => sixteen_bit_storage_keeps_the_viscosity_and_bounds_the_channel_error, sixteen_bit_storage_keeps_the_viscosity_and_bounds_the_channel_error_on_cuda);

/// The largest viscosity error of a shear wave with f16 storage (measured −0.95 % with TRT, +0.30 %
/// BGK, −0.01 % MRT).
const F16_VISCOSITY: f64 = 0.015;
/// The largest L2 error of the body-force Poiseuille channel at 32 nodes with f16 storage, whatever
/// the speed (measured 3.9–9.3 % at 0.01, 2.7–6.9 % at 0.1).
const F16_POISEUILLE: f64 = 0.12;

/// With populations stored in 16 bits (collided in f32): the shear wave keeps its viscosity to a per
/// cent, and the Poiseuille channel's error is bounded but not small. Its steady state balances the
/// force, a relative change of 8ν/n² = 1.3e-3 of the populations per step at 32 nodes, against a
/// rounding of up to 2⁻¹² = 2.4e-4 of them at every store: a fixed rounding pattern acts as a
/// spurious source of a fifth of the force, whatever the speed (the ratio does not depend on it).
/// Flows driven by inertia (a cavity) change their populations far more per step
/// ([`sixteen_bit_storage_follows_the_f32_cavity`]).
fn f16_storage(m: Module) {
    for c in OPERATORS {
        let nu = shear_wave_viscosity(m, c, Precision::F16);
        let err = nu / 0.05 - 1.0;
        let slow = poiseuille_error(m, c, Precision::F16, 32);
        let fast = poiseuille_error_at(m, c, Precision::F16, 32, 0.1);
        eprintln!(
            "f16 {c}: shear-wave ν {:+.3} %, Poiseuille L2 {slow:.3e} at u 0.01, {fast:.3e} at 0.1",
            100.0 * err
        );
        assert!(err.abs() < F16_VISCOSITY, "{c}: ν {nu} against 0.05");
        for e in [slow, fast] {
            assert!(e < F16_POISEUILLE, "{c}: Poiseuille L2 {e:e} in f16");
        }
    }
}

per_module!(f16_cavity => sixteen_bit_storage_follows_the_f32_cavity, sixteen_bit_storage_follows_the_f32_cavity_on_cuda);

/// The rms of f16's velocity against f32's in the cavity of `f16_cavity` (measured 1.9e-4 U on the
/// CPU module and on an H100).
const F16_CAVITY_RMS: f64 = 1e-3;

/// The lid-driven cavity (32³, Re 100, lid 0.1, MRT) after 4,500 steps, when the f32 run has
/// converged: each 16-bit storage's velocity within 0.01 U of f32's at every node (the largest
/// differences sit at the lid's edges) and within [`F16_CAVITY_RMS`] (rms) over the nodes (measured
/// 2.6e-4 U on the centreline profiles in f16), and f16c's rms (measured 7.3e-5 U against f16's
/// 1.9e-4 on an H100) below three quarters of f16's.
fn f16_cavity(m: Module) {
    let velocity = |p: Precision| {
        let mut case = thelma_core::CaseConfig::default();
        case.domain.size = [32; 3];
        case.physics.reynolds = 100.0;
        case.numerics.precision = p;
        let mut rt = m.runtime(&case, 2);
        rt.run(4500).unwrap();
        rt.fields().unwrap()
    };
    let a = velocity(Precision::F32);
    let lid = 0.1;
    let moved = a.ux.iter().map(|u| u.abs()).fold(0.0, f64::max) / lid;
    assert!(moved > 0.3, "the cavity did not move ({moved} U)");
    let mut rms_of = Vec::new();
    for p in [Precision::F16, Precision::F16c] {
        let b = velocity(p);
        let d: Vec<f64> = (0..a.ux.len())
            .filter(|&k| !a.solid[k])
            .map(|k| {
                let d = [a.ux[k] - b.ux[k], a.uy[k] - b.uy[k], a.uz[k] - b.uz[k]];
                (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt() / lid
            })
            .collect();
        let worst = d.iter().copied().fold(0.0, f64::max);
        let rms = (d.iter().map(|v| v * v).sum::<f64>() / d.len() as f64).sqrt();
        eprintln!(
            "{}: {} cavity: |u − u_f32| largest {worst:.3e} U, rms {rms:.3e} U",
            m.name(),
            p.name()
        );
        assert!(
            worst < 0.01 && rms < F16_CAVITY_RMS,
            "{}: largest {worst:e} U, rms {rms:e} U",
            p.name()
        );
        rms_of.push(rms);
    }
    // One more significand bit: f16c's rounding pulls the flow less far from f32's.
    assert!(rms_of[1] < 0.75 * rms_of[0], "f16 / f16c rms {rms_of:?}");
}
