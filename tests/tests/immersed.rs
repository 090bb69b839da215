//! Immersed bodies (the immersed boundary method) through the runtime: a body at rest in fluid at
//! rest stays at rest, a translating sphere feels the drag of the fixed sphere in a stream (the
//! Galilean check), N slabs equal one bit for bit with a body crossing their interfaces, and a
//! restart continues bit for bit.

use std::path::{Path, PathBuf};

use thelma_core::physics::d3q19::Q;
use thelma_core::physics::{equilibrium, Collision};
use thelma_core::{BodyMethod, CaseConfig, Precision, RotationConfig, Runtime, Scale};
use thelma_geometry::immersed_bodies;
use thelma_tests::{
    box_case, cpu_runtime, gather_populations, model, run_from_vortex, scatter_populations,
    values,
};

fn sphere_stl() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/sphere.stl")
}

/// A periodic box with one immersed sphere (the unit sphere's mesh scaled to `radius`) at `centre`.
fn sphere_case(size: [usize; 3], radius: f64, centre: [f64; 3], p: Precision) -> CaseConfig {
    let mut case = box_case(size, [true; 3], 0.016, Collision::BGK, p);
    let text = format!(
        "[[body]]\nstl = {:?}\nmethod = \"immersed\"\n",
        sphere_stl()
    );
    let mut body = CaseConfig::parse(&text, false).unwrap().body.remove(0);
    body.scale = Scale::Uniform(radius);
    body.translate = centre;
    case.body = vec![body];
    case.run.steps = Some(1000);
    case
}

/// A CPU runtime over `slabs` slabs with the case's immersed bodies.
fn runtime(case: &CaseConfig, slabs: usize) -> Runtime {
    let mut rt = cpu_runtime(case, slabs);
    rt.set_immersed(immersed_bodies(case).unwrap(), model(case).model.force);
    rt
}

/// Runs `steps`, one at a time, returning each step's load on body 0 (force, torque).
fn loads(rt: &mut Runtime, steps: u64) -> Vec<([f64; 3], [f64; 3])> {
    (0..steps)
        .map(|_| {
            rt.run(1).unwrap();
            let (_, l) = rt.immersed_loads().unwrap();
            (l[0].force, l[0].torque)
        })
        .collect()
}

#[test]
fn a_body_at_rest_in_fluid_at_rest_stays_at_rest() {
    let case = sphere_case([24, 20, 20], 4.0, [11.7, 10.2, 9.9], Precision::F64);
    assert_eq!(case.body[0].method, BodyMethod::Immersed);
    let mut rt = runtime(&case, 1);
    let l = loads(&mut rt, 30);
    assert!(l.iter().all(|(f, t)| *f == [0.0; 3] && *t == [0.0; 3]));
    let fields = rt.fields().unwrap();
    let worst = [&fields.ux, &fields.uy, &fields.uz]
        .into_iter()
        .flatten()
        .fold(0.0f64, |m, v| m.max(v.abs()));
    assert_eq!(worst, 0.0, "the fluid moved");
    rt.shutdown();
}

/// The mean drag over steps 100–300 of a sphere of radius 4 moving at −U through fluid at rest,
/// and of the same sphere fixed in fluid moving at +U: one flow seen from two frames. Both start
/// impulsively in a periodic box, so both carry the same sound waves and the same slow decay of
/// the relative velocity; the moving sphere also crosses the lattice (a third of a spacing by the
/// end), which the kernel's smoothness must hide.
#[test]
fn a_translating_sphere_feels_the_drag_of_the_fixed_sphere_in_a_stream() {
    let u = 0.02;
    let mut moving = sphere_case([40, 20, 20], 4.0, [20.0, 10.0, 10.0], Precision::F64);
    moving.body[0].velocity = Some([-u, 0.0, 0.0]);
    let fixed = sphere_case([40, 20, 20], 4.0, [20.0, 10.0, 10.0], Precision::F64);

    let mut rt = runtime(&moving, 1);
    let a = loads(&mut rt, 300);
    rt.shutdown();
    let mut rt = runtime(&fixed, 1);
    let stream = equilibrium(0.0, [u, 0.0, 0.0]);
    let n = 40 * 20 * 20;
    let whole: Vec<f64> = (0..Q * n).map(|k| stream[k / n]).collect();
    let parts = scatter_populations(&rt, &whole, Precision::F64);
    rt.write_populations(parts, 0).unwrap();
    let b = loads(&mut rt, 300);
    rt.shutdown();

    let mean = |l: &[([f64; 3], [f64; 3])]| l[100..].iter().map(|x| x.0[0]).sum::<f64>() / 200.0;
    let (da, db) = (mean(&a), mean(&b));
    // The drag pushes the moving sphere back (+x) and the fixed one downstream (+x).
    assert!(db > 0.01, "drag of the fixed sphere {db}");
    let gap = (da - db).abs() / db;
    assert!(gap < 0.02, "moving {da}, fixed {db}: {:.2} %", 100.0 * gap);
}

/// A turning, translating sphere crossing the interfaces of 1, 2 and 3 slabs (z = 24: slabs of 12
/// and 8 planes): populations and loads equal bit for bit.
#[test]
fn immersed_bodies_on_several_slabs_equal_one_slab() {
    for p in [Precision::F32, Precision::F64] {
        let mut case = sphere_case([16, 16, 24], 3.0, [7.7, 8.2, 11.4], p);
        case.body[0].velocity = Some([0.004, 0.0, 0.03]);
        case.body[0].rotation = Some(RotationConfig {
            axis: [0.3, 0.0, 1.0],
            origin: [7.7, 8.2, 11.4],
            rate: 0.01,
        });
        let run = |slabs: usize| {
            let rt = runtime(&case, slabs);
            let mut rt = rt;
            let l = loads(&mut rt, 5);
            let out = run_from_vortex(rt, &case, 60);
            (l, out)
        };
        let (l1, one) = run(1);
        for slabs in [2, 3] {
            let (l, got) = run(slabs);
            assert!(l == l1, "{p:?}: loads on {slabs} slabs differ");
            assert!(got == one, "{p:?}: populations on {slabs} slabs differ");
        }
        // The body moved through the flow (the vortex) and was forced.
        assert!(l1.iter().any(|(f, _)| f.iter().any(|c| c.abs() > 1e-3)));
    }
}

#[test]
fn a_restart_with_an_immersed_body_continues_bit_for_bit() {
    let mut case = sphere_case([16, 16, 20], 3.0, [8.0, 8.0, 8.0], Precision::F32);
    case.body[0].velocity = Some([0.0, 0.0, 0.02]);
    let mut straight = runtime(&case, 2);
    straight.run(80).unwrap();
    let want = gather_populations(&mut straight);
    straight.shutdown();

    let mut first = runtime(&case, 2);
    first.run(40).unwrap();
    let saved = first.read_populations().unwrap();
    first.shutdown();
    // Onto another partition: the state is the populations and the step.
    let mut resumed = runtime(&case, 3);
    let whole = values(
        &{
            let mut r = runtime(&case, 2);
            r.write_populations(saved, 40).unwrap();
            let g = gather_populations(&mut r);
            r.shutdown();
            g
        },
        Precision::F32,
    );
    let parts = scatter_populations(&resumed, &whole, Precision::F32);
    resumed.write_populations(parts, 40).unwrap();
    resumed.run(40).unwrap();
    let got = gather_populations(&mut resumed);
    resumed.shutdown();
    assert!(got == want, "the resumed run differs");
}
