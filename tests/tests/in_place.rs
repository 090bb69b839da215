//! In-place streaming (one lattice, `--streaming in-place`) against the two-lattice step: the same
//! populations bit for bit after every step count (odd counts read a lattice whose pairs of slots
//! the module swaps back first), on one slab and split over several, walled, or periodic in x, y
//! and z, every collision variant, 32- and 16-bit storage; reads in the middle of a run change
//! nothing. The CPU cases run in CI, the CUDA ones on a GPU host (`--ignored`).

use thelma_core::{Precision, Streaming};
use thelma_tests::{per_module, run_from_vortex, variant_case, Module, VARIANTS};

fn in_place(mut c: thelma_core::CaseConfig) -> thelma_core::CaseConfig {
    c.numerics.streaming = Streaming::InPlace;
    c
}

fn in_place_equals_two_lattices(m: Module) {
    for periodic_z in [false, true] {
        for variant in VARIANTS {
            for precision in [Precision::F32, Precision::F16c] {
                let mut two = variant_case([24, 20, 23], periodic_z, variant, precision);
                // Periodic in y too where z is, so that pull steps and swaps wrap along every axis.
                two.domain.periodic[1] = periodic_z;
                let one = in_place(two.clone());
                for steps in [40, 41] {
                    let what = format!(
                        "periodic z {periodic_z}, {variant:?}, {precision:?}, {steps} steps"
                    );
                    let reference = run_from_vortex(m.runtime(&two, 1), &two, steps);
                    let mut layouts = vec![m.slab_ids(1)];
                    layouts.extend(m.layouts());
                    for ids in layouts {
                        let got = run_from_vortex(m.runtime_on(&one, &ids), &one, steps);
                        assert!(
                            got == reference,
                            "{}: in place on devices {ids:?} differs from two lattices ({what})",
                            m.name()
                        );
                    }
                }
            }
        }
    }
}

per_module!(in_place_equals_two_lattices => in_place_equals_two_lattices_on_the_cpu_module,
    in_place_equals_two_lattices_on_the_cuda_module);

/// Narrow rows on the CPU module, whose rows go in bundles between two edge nodes: none between
/// them (nx 2, periodic), a short bundle alone (3 periodic, 4 and 5 walled, 17), one whole (18
/// with 16 lanes).
#[test]
fn narrow_rows_in_place_equal_two_lattices_on_the_cpu_module() {
    let m = Module::Cpu;
    let walled = [4, 5, 17, 18].map(|nx| (nx, false));
    let periodic = [2, 3, 17, 18].map(|nx| (nx, true));
    for (nx, periodic_x) in walled.into_iter().chain(periodic) {
        let mut two = variant_case([nx, 9, 10], false, VARIANTS[3], Precision::F32);
        two.domain.periodic[0] = periodic_x;
        let one = in_place(two.clone());
        for steps in [20, 21] {
            let reference = run_from_vortex(m.runtime(&two, 1), &two, steps);
            let got = run_from_vortex(m.runtime(&one, 1), &one, steps);
            assert!(
                got == reference,
                "nx {nx}, periodic x {periodic_x}, {steps} steps: in place differs"
            );
        }
    }
}

/// Fields, the watchdog and the convergence measure read between runs of odd and even lengths
/// (each read of a lattice held streamed swaps it back, and the next step then pulls) give what the
/// two-lattice run gives at the same steps, and the run goes on as if nothing had been read.
fn reads_between_steps_change_nothing(m: Module) {
    let two = variant_case([20, 18, 21], false, VARIANTS[3], Precision::F32);
    let one = in_place(two.clone());
    type Seen = (Vec<Vec<f64>>, [f64; 2], Option<[f64; 2]>);
    let trace = |c: &thelma_core::CaseConfig, slabs: usize| -> Vec<Seen> {
        let mut rt = m.runtime(c, slabs);
        let mut seen = Vec::new();
        for steps in [3, 4, 1, 1, 6, 5] {
            rt.run(steps).unwrap();
            let f = rt.fields().unwrap();
            let h = rt.health().unwrap();
            let bounds = [
                h.iter().map(|h| h.rho_min).fold(f64::INFINITY, f64::min),
                h.iter()
                    .map(|h| h.rho_max)
                    .fold(f64::NEG_INFINITY, f64::max),
            ];
            let change = rt.velocity_change().unwrap().map(|c| [c.diff, c.norm]);
            seen.push((vec![f.rho, f.ux, f.uy, f.uz], bounds, change));
        }
        rt.shutdown();
        seen
    };
    let want = trace(&two, 1);
    // The flow moved: reads of a fluid at rest would prove nothing.
    assert!(want.last().unwrap().0[1].iter().any(|u| u.abs() > 1e-6));
    for slabs in [1, 3] {
        let got = trace(&one, slabs);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.0 == w.0 && g.1 == w.1,
                "{}: in place on {slabs} slabs, read {k}",
                m.name()
            );
            // Sums over slabs add in another order.
            match (g.2, w.2) {
                (Some(a), Some(b)) => {
                    for (x, y) in a.iter().zip(&b) {
                        assert!((x - y).abs() <= 1e-12 * y.abs(), "{x} vs {y}");
                    }
                }
                (a, b) => assert_eq!(a.is_some(), b.is_some()),
            }
        }
    }
}

per_module!(reads_between_steps_change_nothing => reads_between_steps_change_nothing_on_the_cpu_module,
    reads_between_steps_change_nothing_on_the_cuda_module);
