//! Partition invariance: a run split over N slabs equals the one-slab run bit for bit, for 1 to 5
//! slabs (uneven sizes), walled and periodic z, BGK and MRT, f32 and f64.

use thelma_core::config::{CaseConfig, CaseKind, Obstacle, Precision};
use thelma_core::physics::Collision;
use thelma_tests::{
    cpu_runtime, domain, gather_populations, scatter_populations, vortex_populations,
};

fn case(periodic_z: bool, collision: Collision, precision: Precision) -> CaseConfig {
    let mut c = CaseConfig::default();
    // 23 planes: uneven slabs for every count from 2 to 5.
    c.domain.size = [12, 10, 23];
    c.numerics.collision = collision;
    c.numerics.precision = precision;
    c.physics.reynolds = 50.0;
    if periodic_z {
        c.domain.case = CaseKind::Box;
        c.domain.periodic = [true, false, true];
        c.domain.obstacles = vec![Obstacle::Sphere {
            centre: [5.0, 4.0, 11.0],
            radius: 2.5,
        }];
        c.physics.lid_speed = 0.0;
        c.physics.viscosity = Some(0.02);
    } else {
        c.domain.obstacles = vec![Obstacle::Box {
            min: [3, 3, 6],
            max: [6, 5, 9],
        }];
    }
    c
}

fn run(c: &CaseConfig, slabs: usize, steps: u64) -> Vec<u8> {
    let mut rt = cpu_runtime(c, slabs);
    // Start from a vortex so that every interface carries data from the first step.
    let init = vortex_populations(domain(c), 0.05);
    let parts = scatter_populations(&rt, &init, c.numerics.precision);
    rt.write_populations(parts, 0).unwrap();
    let st = rt.run(steps).unwrap();
    assert_eq!(st.steps, steps);
    gather_populations(&mut rt)
}

#[test]
fn slabs_equal_one_slab_bit_for_bit() {
    for periodic_z in [false, true] {
        for collision in [Collision::BGK, Collision::MRT] {
            for precision in [Precision::F32, Precision::F64] {
                let c = case(periodic_z, collision, precision);
                let reference = run(&c, 1, 200);
                for slabs in 2..=5 {
                    let got = run(&c, slabs, 200);
                    assert!(
                        got == reference,
                        "{slabs} slabs differ from 1 slab (periodic z {periodic_z}, {collision:?}, {precision:?})"
                    );
                }
            }
        }
    }
}

#[test]
fn the_initial_state_actually_moves_so_the_comparison_is_not_trivial() {
    let c = case(true, Collision::MRT, Precision::F64);
    let start = {
        let mut rt = cpu_runtime(&c, 1);
        let init = vortex_populations(domain(&c), 0.05);
        let parts = scatter_populations(&rt, &init, c.numerics.precision);
        rt.write_populations(parts, 0).unwrap();
        gather_populations(&mut rt)
    };
    assert_ne!(run(&c, 1, 50), start);
}
