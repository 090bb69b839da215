//! Forces on bodies (momentum exchange) and probes, through the sampler the `thelma run` loop uses:
//! a hand-computed case, a body at rest in fluid at rest, the momentum balance of a body in a
//! force-driven periodic box, partition invariance, a probe in a uniform stream, and the CUDA
//! module against the CPU module.

use std::path::Path;

use thelma_cli::samples::Samples;
use thelma_core::physics::d3q19::{C, OPP, Q};
use thelma_core::physics::Collision;
use thelma_core::{
    CaseConfig, Expression, InitialConfig, Obstacle, Precision, ProbeConfig, Runtime,
};
use thelma_geometry::Geometry;
use thelma_tests::{box_case, cpu_runtime, per_module, Module};

/// The rows of a CSV written by the sampler, as numbers.
fn rows(path: &Path) -> Vec<Vec<f64>> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(|v| v.parse().unwrap()).collect())
        .collect()
}

fn sampler(case: &CaseConfig, rt: &Runtime) -> Samples {
    let g = Geometry::from_case(case).unwrap();
    let slabs: Vec<_> = rt.devices().iter().map(|d| d.slab.clone()).collect();
    Samples::new(case, &g, &slabs, false).unwrap()
}

fn with_dir(mut case: CaseConfig, dir: &Path) -> CaseConfig {
    case.output.dir = dir.to_path_buf();
    case
}

/// One solid node in a periodic box, every population of the lattice set to a value of its own: the
/// force on the node is, by hand, `Σ 2 c_ī g̃_ī(x)` over its 18 fluid neighbours `x = s + c_ī`...
/// that is, for each direction `j` (= ī) the population `g̃_j` of the neighbour at `s − c_j`, which
/// moves towards the node: `F = Σ_j 2 c_j g̃_j(s − c_j)`.
#[test]
fn momentum_exchange_matches_a_hand_computed_sum() {
    let tmp = tempfile::tempdir().unwrap();
    let n = 6;
    let mut case = box_case([n, n, n], [true; 3], 0.1, Collision::BGK, Precision::F64);
    case.domain.obstacles = vec![Obstacle::Box {
        min: [2.0, 3.0, 1.0],
        max: [3.0, 4.0, 2.0],
    }];
    case.forces.every = 1;
    let case = with_dir(case, tmp.path());
    case.validate().unwrap();
    let mut rt = cpu_runtime(&case, 1);
    let nodes = n * n * n;
    let value = |i: usize, p: usize| ((i * 31 + p * 7) % 23) as f64 * 1e-3 - 0.01;
    let g: Vec<f64> = (0..Q * nodes)
        .map(|k| value(k / nodes, k % nodes))
        .collect();
    rt.write_populations(vec![bytes(&g)], 0).unwrap();
    let mut s = sampler(&case, &rt);
    s.sample(&mut rt).unwrap();
    let solid = [2i64, 3, 1];
    let mut want = [0.0; 3];
    for j in 1..Q {
        let x: Vec<usize> = (0..3)
            .map(|a| (solid[a] - C[j][a] as i64).rem_euclid(n as i64) as usize)
            .collect();
        let p = (x[2] * n + x[1]) * n + x[0];
        for a in 0..3 {
            want[a] += 2.0 * C[j][a] as f64 * value(j, p);
        }
    }
    let r = &rows(&tmp.path().join("forces.csv"))[0];
    for a in 0..3 {
        assert!(
            (r[2 + a] - want[a]).abs() < 1e-15,
            "{a}: {} against {}",
            r[2 + a],
            want[a]
        );
    }
    assert!(
        want.iter().any(|v| v.abs() > 1e-3),
        "a trivial case: {want:?}"
    );
    assert_eq!(OPP[1], 2);
}

fn bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A sphere and a box in fluid at rest: no force at all, in either precision.
#[test]
fn bodies_at_rest_in_fluid_at_rest_feel_no_force() {
    for p in [Precision::F32, Precision::F64] {
        let tmp = tempfile::tempdir().unwrap();
        let mut case = box_case([20, 16, 18], [false; 3], 0.05, Collision::TRT, p);
        case.domain.obstacles = vec![
            Obstacle::Sphere {
                centre: [7.3, 8.0, 9.1],
                radius: 3.6,
            },
            Obstacle::Box {
                min: [13.0, 2.0, 3.0],
                max: [16.0, 9.0, 12.0],
            },
        ];
        case.forces.every = 10;
        let case = with_dir(case, tmp.path());
        let mut rt = cpu_runtime(&case, 2);
        let mut s = sampler(&case, &rt);
        for _ in 0..5 {
            rt.run(10).unwrap();
            s.sample(&mut rt).unwrap();
        }
        let r = rows(&tmp.path().join("forces.csv"));
        assert_eq!(r.len(), 5);
        assert!(
            r.iter().all(|row| row[2..].iter().all(|&v| v == 0.0)),
            "{p:?}: {r:?}"
        );
    }
}

/// A box obstacle in a box periodic on every axis, the fluid driven by a uniform body force density
/// `F`: at steady state nothing but the obstacle holds the fluid back, so the drag equals `F` times
/// the fluid nodes (measured: to 5e-8 after 6,000 steps; asserted to 1e-4), and the lift vanishes. Split over slabs the forces are the same bit for
/// bit.
fn balance(m: Module) {
    let f = 2e-6;
    let mut case = box_case([24, 14, 15], [true; 3], 0.1, Collision::TRT, Precision::F64);
    case.physics.force = Some([f, 0.0, 0.0]);
    case.domain.obstacles = vec![Obstacle::Box {
        min: [9.0, 4.0, 5.0],
        max: [13.0, 10.0, 10.0],
    }];
    case.forces.every = 500;
    case.forces.area = Some(30.0);
    case.forces.velocity = Some(0.01);
    let fluid = (24 * 14 * 15 - 4 * 6 * 5) as f64;
    let mut runs = Vec::new();
    for slabs in [1, 3] {
        let tmp = tempfile::tempdir().unwrap();
        let case = with_dir(case.clone(), tmp.path());
        case.validate().unwrap();
        let mut rt = m.runtime(&case, slabs);
        let mut s = sampler(&case, &rt);
        for _ in 0..12 {
            rt.run(500).unwrap();
            s.sample(&mut rt).unwrap();
        }
        let means = s.finish().unwrap();
        let r = rows(&tmp.path().join("forces.csv"));
        let last = r.last().unwrap().clone();
        eprintln!(
            "{} {slabs} slabs: drag {:e} against F·N = {:e}, mean {:?}",
            m.name(),
            last[2],
            f * fluid,
            means[0]
        );
        assert!(
            (last[2] / (f * fluid) - 1.0).abs() < 1e-4,
            "drag {}",
            last[2]
        );
        assert!(last[3].abs() < 1e-6 * last[2] && last[4].abs() < 1e-6 * last[2]);
        // Coefficient columns: 2 F / (U² A).
        assert!((last[5] - last[2] * 2.0 / (0.01 * 0.01 * 30.0)).abs() < 1e-12 * last[5]);
        assert!(tmp.path().join("forces.png").exists());
        runs.push(r);
    }
    assert_eq!(runs[0], runs[1], "{}: slabs change the forces", m.name());
}

per_module!(balance => a_body_holds_back_a_driven_periodic_flow_on_the_cpu_module,
    a_body_holds_back_a_driven_periodic_flow_on_the_cuda_module);

/// A probe in a uniform stream reads the stream; two probes name their columns.
#[test]
fn a_probe_reads_the_stream_it_sits_in() {
    let tmp = tempfile::tempdir().unwrap();
    let mut case = box_case([12, 10, 9], [true; 3], 0.05, Collision::MRT, Precision::F64);
    case.initial = Some(InitialConfig {
        density: Expression::Number(1.01),
        velocity: [
            Expression::Number(0.03),
            Expression::Number(-0.01),
            Expression::Number(0.002),
        ],
    });
    case.probe = vec![
        ProbeConfig {
            at: [3.0, 4.4, 8.0],
            name: Some("inlet".into()),
        },
        ProbeConfig {
            at: [11.0, 0.0, 0.0],
            name: None,
        },
    ];
    case.output.probe_every = 20;
    let case = with_dir(case, tmp.path());
    case.validate().unwrap();
    let mut rt = cpu_runtime(&case, 3);
    let mut s = sampler(&case, &rt);
    s.sample(&mut rt).unwrap();
    rt.run(20).unwrap();
    s.sample(&mut rt).unwrap();
    let text = std::fs::read_to_string(tmp.path().join("probes.csv")).unwrap();
    assert!(
        text.starts_with("step,time,inlet_p,inlet_ux,inlet_uy,inlet_uz,probe1_p,"),
        "{text}"
    );
    for r in rows(&tmp.path().join("probes.csv")) {
        for k in 0..2 {
            let v = &r[2 + 4 * k..6 + 4 * k];
            assert!((v[0] - 0.01 / 3.0).abs() < 1e-12, "{r:?}");
            assert!(
                (v[1] - 0.03).abs() < 1e-12 && (v[2] + 0.01).abs() < 1e-12,
                "{r:?}"
            );
            assert!((v[3] - 0.002).abs() < 1e-12, "{r:?}");
        }
    }
}

/// `examples/cylinder-3d.toml` is the benchmark it says: Re = Ū D / ν = 20 with Ū = 4/9 of the
/// inlet's peak, the coefficients' reference area D·H and velocity Ū, the cylinder at 0.5 m and
/// 0.2 m of a 2.5 × 0.41 m channel (D = 0.1 m).
#[test]
fn the_cylinder_example_is_schafer_turek_3d_1z() {
    let case = CaseConfig::parse(include_str!("../../examples/cylinder-3d.toml"), false).unwrap();
    case.validate().unwrap();
    let Obstacle::Cylinder { centre, radius, .. } = case.domain.obstacles[0] else {
        panic!("not a cylinder")
    };
    let d = 2.0 * radius;
    let [nx, ny, nz] = case.domain.size.map(|n| n as f64);
    assert_eq!(ny, nz);
    assert!((nx / d - 25.0).abs() < 1e-12 && (ny / d - 4.1).abs() < 1e-12);
    // Node i's centre is (i + ½) spacings from the wall.
    assert!(((centre[0] + 0.5) / d - 5.0).abs() < 1e-12);
    assert!(((centre[1] + 0.5) / d - 2.0).abs() < 1e-12);
    let um = case.boundary[0].velocity[0];
    let ubar = 4.0 / 9.0 * um;
    let nu = case.physics.viscosity.unwrap();
    assert!(
        (ubar * d / nu - 20.0).abs() < 1e-9,
        "Re = {}",
        ubar * d / nu
    );
    assert!((case.forces.area.unwrap() - d * ny).abs() < 1e-9);
    assert!((case.forces.velocity.unwrap() - ubar).abs() < 1e-12);
}

/// With `[units]` and a density, probes read m/s and Pa: the lattice values times dx/dt and
/// ρ₀ (dx/dt)² (forces take ρ₀ dx² (dx/dt)² to N the same way).
#[test]
fn probes_read_si_units_with_a_density() {
    let tmp = tempfile::tempdir().unwrap();
    let mut case = box_case([12, 10, 9], [true; 3], 0.05, Collision::MRT, Precision::F64);
    case.physics.viscosity = None;
    case.physics.lid_speed = 0.05;
    case.units = Some(thelma_core::PhysicalUnits {
        length: 0.12,
        velocity: 0.5,
        viscosity: 1e-5,
        density: Some(1.2),
    });
    let s = case.unit_scales().unwrap();
    // A stream of 0.2 m/s = 0.02 lattice units (dx/dt = 10 m/s), ρ = 1.01.
    case.initial = Some(InitialConfig {
        density: Expression::Number(1.01),
        velocity: [
            Expression::Number(0.2),
            Expression::Number(0.0),
            Expression::Number(0.0),
        ],
    });
    case.probe = vec![ProbeConfig {
        at: [0.05, 0.05, 0.05],
        name: Some("p".into()),
    }];
    let case = with_dir(case, tmp.path());
    case.validate().unwrap();
    assert!((s.velocity - 10.0).abs() < 1e-12, "{s:?}");
    let mut rt = cpu_runtime(&case, 1);
    let mut sampler = sampler(&case, &rt);
    sampler.sample(&mut rt).unwrap();
    let text = std::fs::read_to_string(tmp.path().join("probes.csv")).unwrap();
    assert!(
        text.starts_with("step,time_s,p_p_Pa,p_ux_m_s,p_uy_m_s,p_uz_m_s\n"),
        "{text}"
    );
    let r = &rows(&tmp.path().join("probes.csv"))[0];
    assert!((r[2] - 0.01 / 3.0 * 1.2 * 100.0).abs() < 1e-9, "{r:?}");
    assert!((r[3] - 0.2).abs() < 1e-12, "{r:?}");
}
