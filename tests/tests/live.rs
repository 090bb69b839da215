//! What the live view asks of the modules, on every module (`per_module!`): a plane made where the
//! populations are equals the gathered fields on that plane (rounded to f32), whatever the slabs
//! or the grid of subdomains; and walls moved mid-run (the lid, a velocity inlet) step bit for bit
//! as a run started with those velocities, and so do held temperatures (a wall's, an inlet
//! patch's), on slabs and on grids, so that steering is reproducible and a resumed run continues
//! it exactly.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use thelma_compute::ModelParams;
use thelma_core::physics::{Collision, ThermalFace, ThermalModel, ThermalSetup};
use thelma_core::{
    BoundaryConfig, BoundaryKind, CaseConfig, Face, FacePatch, Layout, Precision, Runtime, SlabSpec,
};
use thelma_tests::{
    box_case, domain, gather_populations, model, per_module, scatter_populations, variant_case,
    vortex_populations, Module,
};

/// Starts `rt` from the vortex, runs `steps`.
fn stirred(rt: &mut Runtime, c: &CaseConfig, steps: u64) {
    let init = vortex_populations(domain(c), 0.05);
    let parts = scatter_populations(rt, &init, c.numerics.precision);
    rt.write_populations(parts, 0).unwrap();
    rt.run(steps).unwrap();
}

/// Asserts that every plane of `rt` (each axis, the first, a middle and the last index) holds the
/// gathered fields' values on it: equal after rounding to f32 on the CPU module, within rounding of
/// the device's arithmetic on others.
fn assert_planes_are_the_fields(m: Module, rt: &mut Runtime, what: &str) {
    let f = rt.fields().unwrap();
    let tol = if m == Module::Cpu { 0.0 } else { 1e-6 };
    for axis in 0..3 {
        let n = f.size[axis];
        assert!(
            rt.plane(axis, n).is_err(),
            "{what}: plane {axis} = {n} read"
        );
        for index in [0, n / 2, n - 1] {
            let p = rt.plane(axis, index).unwrap();
            let [a, b] = thelma_core::plane_axes(axis);
            assert_eq!(p.size, [f.size[a], f.size[b]], "{what}: axis {axis}");
            assert_eq!(p.axis, axis);
            let thermal = !f.temperature.is_empty();
            assert_eq!(p.temperature.is_empty(), !thermal, "{what}");
            for j in 0..p.size[1] {
                for i in 0..p.size[0] {
                    let k = j * p.size[0] + i;
                    let mut c = [0; 3];
                    (c[axis], c[a], c[b]) = (index, i, j);
                    let q = f.idx(c[0], c[1], c[2]);
                    assert_eq!(p.solid[k], f.solid[q], "{what}: node {c:?}");
                    if f.solid[q] {
                        continue;
                    }
                    let mut pairs = vec![
                        (p.rho[k], f.rho[q]),
                        (p.ux[k], f.ux[q]),
                        (p.uy[k], f.uy[q]),
                        (p.uz[k], f.uz[q]),
                    ];
                    if thermal {
                        pairs.push((p.temperature[k], f.temperature[q]));
                    }
                    for (got, want) in pairs {
                        let want32 = want as f32;
                        assert!(
                            (got - want32).abs() <= tol * want32.abs().max(1e-3),
                            "{what}: node {c:?} on axis {axis}: {got} against {want32}"
                        );
                    }
                }
            }
        }
    }
}

fn planes_are_the_gathered_fields(m: Module) {
    // Walls, a lid and an obstacle; one slab and three uneven ones (z-planes on every slab, x and y
    // planes joined across them).
    let c = variant_case([12, 10, 11], false, (Collision::MRT, true), Precision::F32);
    for slabs in [1, 3] {
        let mut rt = m.runtime(&c, slabs);
        stirred(&mut rt, &c, 40);
        assert_planes_are_the_fields(m, &mut rt, &format!("{slabs} slabs"));
        rt.shutdown();
    }
    // A temperature lattice: θ, and the velocity under the buoyancy at each node's θ.
    let c = box_case([8, 7, 9], [false; 3], 0.05, Collision::MRT, Precision::F32);
    let mut faces = [ThermalFace::Adiabatic; 6];
    faces[4] = ThermalFace::Held(0.5);
    faces[5] = ThermalFace::Held(-0.5);
    let params = ModelParams {
        thermal: Some(ThermalSetup {
            model: ThermalModel::new(0.05, 1.0, [0.0, 0.0, 1e-3]),
            faces,
            patches: Vec::new(),
            initial: 0.0,
            store_scale: 1.0,
        }),
        ..model(&c)
    };
    let mut rt = m.runtime_with(params.clone(), &c, &m.slab_ids(2));
    rt.run(60).unwrap();
    assert_planes_are_the_fields(m, &mut rt, "thermal, 2 slabs");
    rt.shutdown();
    // The subdomains of grids that cut x and y: each plane read from those that cross it.
    let flow = variant_case([12, 10, 11], false, (Collision::MRT, true), Precision::F32);
    for parts in [[2, 2, 1], [3, 1, 2], [1, 2, 3]] {
        let mut rt = grid_runtime(m, model(&flow), &flow, parts);
        stirred(&mut rt, &flow, 40);
        assert_planes_are_the_fields(m, &mut rt, &format!("grid {parts:?}"));
        rt.shutdown();
    }
    let mut rt = grid_runtime(m, params, &c, [2, 1, 2]);
    rt.run(60).unwrap();
    assert_planes_are_the_fields(m, &mut rt, "thermal, grid [2, 1, 2]");
    rt.shutdown();
}

/// A runtime of module `m` with `params` over `case`'s domain cut into `parts` along x, y and z
/// (slabs are `[1, 1, n]`), every subdomain in this process (on GPU 0 for the CUDA module).
fn grid_runtime(m: Module, params: ModelParams, case: &CaseConfig, parts: [usize; 3]) -> Runtime {
    let slabs = SlabSpec::grid(domain(case), parts).unwrap();
    let layout = Layout {
        devices: vec![0; slabs.len()],
        ranks: vec![0; slabs.len()],
        slabs,
    };
    let factory = m.factory(params, layout.slabs.len());
    Runtime::start_layout(factory, &layout, Arc::new(AtomicBool::new(false)))
        .unwrap_or_else(|e| panic!("{} grid starts: {e}", m.name()))
}

per_module!(planes_are_the_gathered_fields => planes_are_the_gathered_fields_on_the_cpu_module,
    planes_are_the_gathered_fields_on_the_cuda_module);

/// The sphere's mesh: beside the sources, or under the current directory where the test binary
/// runs away from them (a GPU host, from the repository's root).
fn sphere_stl() -> std::path::PathBuf {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/sphere.stl");
    if here.exists() {
        here
    } else {
        "examples/sphere.stl".into()
    }
}

fn planes_through_an_immersed_body_report_its_force(m: Module) {
    // A translating sphere in a periodic box under a uniform force, forced on the module's device
    // (one slab) and by the coordinator (two): at the nodes of its band the picture's velocity is
    // the one under the body's force as well, as the gathered fields report it.
    let mut c = box_case(
        [14, 12, 16],
        [true; 3],
        0.05,
        Collision::BGK,
        Precision::F32,
    );
    c.physics.force = Some([2e-6, 0.0, 0.0]);
    let text = format!(
        "[[body]]\nstl = {:?}\nmethod = \"immersed\"\n",
        sphere_stl()
    );
    let mut body = CaseConfig::parse(&text, false).unwrap().body.remove(0);
    body.scale = thelma_core::Scale::Uniform(3.0);
    body.translate = [6.6, 5.7, 7.8];
    body.velocity = Some([0.01, 0.0, 0.02]);
    c.body = vec![body];
    for slabs in [1, 2] {
        let mut rt = m.runtime(&c, slabs);
        rt.set_immersed(
            thelma_geometry::immersed_bodies(&c).unwrap(),
            model(&c).model.force,
        )
        .unwrap();
        rt.run(30).unwrap();
        assert_planes_are_the_fields(m, &mut rt, &format!("immersed, {slabs} slabs"));
        rt.shutdown();
    }
}

per_module!(planes_through_an_immersed_body_report_its_force =>
    planes_through_an_immersed_body_report_its_force_on_the_cpu_module,
    planes_through_an_immersed_body_report_its_force_on_the_cuda_module);

/// A box with a velocity inlet on x− (its link terms scaled by the node's density), a pressure
/// outlet on x+ and a patch of z+ moving along y, inlet speed `u` and wall speed `w`.
fn inlet_case(u: f64, w: f64) -> CaseConfig {
    let mut c = box_case(
        [14, 9, 11],
        [false; 3],
        0.04,
        Collision::TRT,
        Precision::F32,
    );
    c.boundary = vec![
        BoundaryConfig {
            velocity: [u, 0.0, 0.0],
            ..BoundaryConfig::new(Face::XMinus, BoundaryKind::Velocity)
        },
        BoundaryConfig {
            density: Some(1.0),
            ..BoundaryConfig::new(Face::XPlus, BoundaryKind::Pressure)
        },
        // A patch of the lid away from the inlet's edge (one node cannot take two walls' terms).
        BoundaryConfig {
            velocity: [0.0, w, 0.0],
            patch: Some(thelma_core::PatchConfig {
                min: [4.0, 2.0],
                max: [10.0, 6.0],
            }),
            ..BoundaryConfig::new(Face::ZPlus, BoundaryKind::Wall)
        },
    ];
    c
}

/// `steps` steps of `case` on `slabs` slabs from the vortex, the walls moved to `walls` after
/// `before` of them (`None`: never); the whole domain's populations.
fn run_moving(
    m: Module,
    case: &CaseConfig,
    parts: [usize; 3],
    walls: Option<(&[[f64; 3]], u64)>,
    steps: u64,
) -> Vec<u8> {
    let mut rt = grid_runtime(m, model(case), case, parts);
    let (before, set) = walls.map_or((0, None), |(w, b)| (b, Some(w)));
    stirred(&mut rt, case, before);
    if let Some(w) = set {
        rt.set_wall_velocities(w).unwrap();
    }
    rt.run(steps - before).unwrap();
    let out = gather_populations(&mut rt);
    rt.shutdown();
    out
}

fn moved_walls_step_as_a_run_started_with_them(m: Module) {
    // The cavity's lid, on one slab and on three: moved before the first step, the run equals the
    // case with the new lid speed bit for bit.
    let mut fast = variant_case([12, 10, 11], false, (Collision::MRT, false), Precision::F32);
    // The viscosity given, so that the lid's speed does not set it through the Reynolds number.
    fast.physics.viscosity = Some(0.03);
    let mut slow = fast.clone();
    slow.physics.lid_speed = 0.06;
    for slabs in [1, 3] {
        let want = run_moving(m, &slow, [1, 1, slabs], None, 60);
        let got = run_moving(m, &fast, [1, 1, slabs], Some((&[[0.06, 0.0, 0.0]], 0)), 60);
        assert!(got == want, "{}: lid moved on {slabs} slabs", m.name());
    }
    // An inlet and a moving wall (the open faces' step): both slots moved.
    let want = run_moving(m, &inlet_case(0.02, 0.01), [1, 1, 2], None, 60);
    let walls = [[0.02, 0.0, 0.0], [0.0, 0.01, 0.0]];
    let got = run_moving(m, &inlet_case(0.05, 0.03), [1, 1, 2], Some((&walls, 0)), 60);
    assert!(got == want, "{}: inlet and wall moved", m.name());
    // Moved mid-run: the change takes effect from the next step, and moving them back restores
    // the case's terms (a run moved there and back at once equals one never moved).
    let a = run_moving(m, &fast, [1, 1, 2], Some((&[[0.06, 0.0, 0.0]], 30)), 60);
    let b = run_moving(m, &fast, [1, 1, 2], None, 60);
    assert!(
        a != b,
        "{}: moving the lid mid-run changed nothing",
        m.name()
    );
    let mut rt = m.runtime(&fast, 2);
    stirred(&mut rt, &fast, 30);
    rt.set_wall_velocities(&[[0.06, 0.0, 0.0]]).unwrap();
    rt.set_wall_velocities(&[[fast.physics.lid_speed, 0.0, 0.0]])
        .unwrap();
    rt.run(30).unwrap();
    assert!(
        gather_populations(&mut rt) == b,
        "{}: lid moved back",
        m.name()
    );
    // A table without the case's slots is refused, not read past its end.
    assert!(rt.set_wall_velocities(&[]).is_err());
    rt.shutdown();
    // On a grid that cuts x and y (the lid split among four subdomains), moved before the first
    // step and mid-run.
    let lid = [[0.06, 0.0, 0.0]];
    assert!(
        run_moving(m, &fast, [2, 2, 1], Some((&lid, 0)), 60)
            == run_moving(m, &slow, [1, 1, 1], None, 60),
        "{}: lid moved on a grid",
        m.name()
    );
    assert!(
        run_moving(m, &fast, [2, 2, 1], Some((&lid, 30)), 60) == a,
        "{}: lid moved mid-run on a grid",
        m.name()
    );
}

per_module!(moved_walls_step_as_a_run_started_with_them =>
    moved_walls_step_as_a_run_started_with_them_on_the_cpu_module,
    moved_walls_step_as_a_run_started_with_them_on_the_cuda_module);

/// A box with gravity along −z, its floor held at `floor`, its ceiling at −0.5 and a patch of x− at
/// `patch` (θ, lattice units), on `slabs` slabs, in precision `p`; `steered`: held temperatures
/// that may change (the CUDA module's kernels read them from constant memory, not as literals).
fn heated(
    m: Module,
    temperatures: (f64, f64),
    slabs: usize,
    p: Precision,
    steered: bool,
) -> (Runtime, CaseConfig) {
    let (params, c) = heated_model(temperatures, p, steered);
    (m.runtime_with(params, &c, &m.slab_ids(slabs)), c)
}

/// The model and case of [`heated`].
fn heated_model(
    (floor, patch): (f64, f64),
    p: Precision,
    steered: bool,
) -> (ModelParams, CaseConfig) {
    let c = box_case([10, 8, 12], [false; 3], 0.05, Collision::MRT, p);
    let mut faces = [ThermalFace::Adiabatic; 6];
    faces[4] = ThermalFace::Held(floor);
    faces[5] = ThermalFace::Held(-0.5);
    let hole = FacePatch {
        face: Face::XMinus,
        lo: [2, 3],
        hi: [5, 8],
    };
    let params = ModelParams {
        thermal: Some(ThermalSetup {
            model: ThermalModel::new(0.05, 1.0, [0.0, 0.0, -1e-3]),
            faces,
            patches: vec![(hole, ThermalFace::Held(patch))],
            initial: 0.0,
            store_scale: 1.0,
        }),
        steered_temperatures: steered,
        ..model(&c)
    };
    (params, c)
}

/// The held θ table of [`heated`]: the six faces, then the patch.
fn held(floor: f64, patch: f64) -> Vec<f64> {
    vec![0.0, 0.0, 0.0, 0.0, floor, -0.5, patch]
}

fn held_temperatures_hold_as_a_run_started_with_them(m: Module) {
    // On the partition `parts` (x, y, z; slabs are [1, 1, n]).
    let run = |floor, patch, set: Option<(Vec<f64>, u64)>, parts: [usize; 3], p| {
        let (params, c) = heated_model((floor, patch), p, set.is_some());
        let mut rt = grid_runtime(m, params, &c, parts);
        let (before, table) = set.map_or((0, None), |(t, b)| (b, Some(t)));
        rt.run(before).unwrap();
        if let Some(t) = table {
            rt.set_held_temperatures(&t).unwrap();
        }
        rt.run(80 - before).unwrap();
        let out = gather_populations(&mut rt);
        rt.shutdown();
        out
    };
    // The floor and the patch changed before the first step: the run equals the case started with
    // them (on CUDA, its terms literals in the kernels rather than read from constant memory), bit
    // for bit, on one slab and on three (the floor's held θ on the last slab only), in f32 and f64.
    for (slabs, p) in [
        (1, Precision::F32),
        (3, Precision::F32),
        (1, Precision::F64),
    ] {
        let want = run(0.8, -0.2, None, [1, 1, slabs], p);
        let got = run(0.5, 0.3, Some((held(0.8, -0.2), 0)), [1, 1, slabs], p);
        assert!(
            got == want,
            "{}: held θ set on {slabs} slabs, {p:?}",
            m.name()
        );
    }
    // Mid-run the change takes effect from the next step; set there and back equals never set.
    let b = run(0.5, 0.3, None, [1, 1, 2], Precision::F32);
    assert!(
        run(
            0.5,
            0.3,
            Some((held(0.8, 0.3), 40)),
            [1, 1, 2],
            Precision::F32
        ) != b,
        "{}: a warmer floor mid-run changed nothing",
        m.name()
    );
    let (mut rt, _) = heated(m, (0.5, 0.3), 2, Precision::F32, true);
    rt.run(40).unwrap();
    rt.set_held_temperatures(&held(0.9, -0.9)).unwrap();
    rt.set_held_temperatures(&held(0.5, 0.3)).unwrap();
    rt.run(40).unwrap();
    assert!(
        gather_populations(&mut rt) == b,
        "{}: held θ set back",
        m.name()
    );
    // A table of another length is refused, and so is one for a case without a temperature
    // lattice.
    assert!(rt.set_held_temperatures(&[0.1; 6]).is_err());
    rt.shutdown();
    // On a grid that cuts x and y (the patch and the floor split among its subdomains): set
    // before the first step, as a grid started with them; and mid-run, as on two slabs.
    let grid = [2, 2, 2];
    assert!(
        run(0.5, 0.3, Some((held(0.8, -0.2), 0)), grid, Precision::F32)
            == run(0.8, -0.2, None, grid, Precision::F32),
        "{}: held θ set before the first step on a grid",
        m.name()
    );
    assert!(
        run(0.5, 0.3, Some((held(0.8, 0.3), 40)), grid, Precision::F32)
            == run(
                0.5,
                0.3,
                Some((held(0.8, 0.3), 40)),
                [1, 1, 2],
                Precision::F32
            ),
        "{}: held θ set mid-run on a grid",
        m.name()
    );
    // Not steered, the CUDA module's kernels hold the table they were compiled with: setting it
    // again (a checkpoint's, on resume) is accepted, another refused; the CPU module takes either.
    let (mut rt, _) = heated(m, (0.5, 0.3), 1, Precision::F32, false);
    assert!(rt.set_held_temperatures(&held(0.5, 0.3)).is_ok());
    // An entry of a face that holds nothing (x+) is ignored, as the CPU module ignores it.
    let mut idle = held(0.5, 0.3);
    idle[1] = 0.7;
    assert!(rt.set_held_temperatures(&idle).is_ok());
    let other = rt.set_held_temperatures(&held(0.6, 0.3));
    assert_eq!(other.is_err(), m == Module::Cuda, "{}: {other:?}", m.name());
    rt.shutdown();
    let c = box_case([8, 8, 8], [false; 3], 0.05, Collision::BGK, Precision::F32);
    let mut rt = m.runtime(&c, 1);
    assert!(rt.set_held_temperatures(&[0.0; 6]).is_err());
    rt.shutdown();
}

per_module!(held_temperatures_hold_as_a_run_started_with_them =>
    held_temperatures_hold_as_a_run_started_with_them_on_the_cpu_module,
    held_temperatures_hold_as_a_run_started_with_them_on_the_cuda_module);
