//! Partitions that cut x and y as well as z (a grid of subdomains, TheLMA on GPU clusters): each
//! subdomain exchanges across its 6 faces and 12 edges, and the whole equals one slab bit for bit,
//! in one process and over the ranks of a cluster job, with walls, a moving lid, periodic axes,
//! obstacles and open faces, on the CPU module and (in one process, subdomains sharing a GPU) on
//! the CUDA module.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use thelma_compute::ModelParams;
use thelma_core::physics::Collision;
use thelma_core::{CaseConfig, Layout, Precision, Runtime, SlabSpec, Transport, TransportChoice};
use thelma_tests::{
    cpu_factory, domain, local_job, model, open_cases, per_module, run_from_vortex, variant_case,
    within_a_minute, Module, VARIANTS,
};

/// The case's domain cut into `parts` along x, y and z, subdomain s on rank `ranks(s)`.
fn grid_layout(case: &CaseConfig, parts: [usize; 3], ranks: impl Fn(usize) -> usize) -> Layout {
    let slabs = SlabSpec::grid(domain(case), parts).unwrap();
    Layout {
        devices: vec![0; slabs.len()],
        ranks: (0..slabs.len()).map(ranks).collect(),
        slabs,
    }
}

/// `case` on module `m` over the subdomains of `layout`, all in this process (on GPU 0), made as
/// a cluster job makes them (for overlapped steps, which the runtime runs on slabs only).
fn one_process(m: Module, case: &CaseConfig, layout: &Layout, steps: u64) -> Vec<u8> {
    one_process_over(m, case, layout, steps, TransportChoice::Auto)
}

/// [`one_process`] with the channels in `transport`.
fn one_process_over(
    m: Module,
    case: &CaseConfig,
    layout: &Layout,
    steps: u64,
    transport: TransportChoice,
) -> Vec<u8> {
    let params = ModelParams {
        overlapped_steps: true,
        ..model(case)
    };
    let factory = m.factory_over(params, layout.slabs.len(), transport);
    let rt = Runtime::start_layout(factory, layout, Arc::new(AtomicBool::new(false)))
        .expect("the grid starts");
    run_from_vortex(rt, case, steps)
}

/// Grids of every shape the cluster issue names (2 × 1 × 1, 1 × 2 × 2, 2 × 2 × 2) and some
/// uneven ones, with subdomains one node thick.
const GRIDS: [[usize; 3]; 6] = [
    [2, 1, 1],
    [1, 2, 2],
    [2, 2, 2],
    [3, 2, 1],
    [1, 3, 1],
    [5, 1, 2],
];

fn grids_equal_one_slab(m: Module) {
    for periodic_z in [false, true] {
        for (k, variant) in VARIANTS.iter().enumerate() {
            let precision = [Precision::F32, Precision::F16, Precision::F64][k % 3];
            // x is 7 nodes: cut into 5 parts, some subdomains are one node wide.
            let c = variant_case([7, 9, 8], periodic_z, *variant, precision);
            let reference = run_from_vortex(m.runtime(&c, 1), &c, 25);
            for parts in GRIDS {
                let got = one_process(m, &c, &grid_layout(&c, parts, |_| 0), 25);
                assert!(
                    got == reference,
                    "{} grid {parts:?} differs from one slab (periodic z {periodic_z}, \
                     {variant:?}, {precision:?})",
                    m.name()
                );
            }
        }
    }
}

per_module!(grids_equal_one_slab => grids_equal_one_slab_bit_for_bit_in_one_process,
            grids_equal_one_slab_bit_for_bit_on_the_cuda_module);

fn grids_with_open_faces_equal_one_slab(m: Module) {
    // An inlet, a pressure outlet or an outflow, a free-slip wall, an outflow whose shifted pulls
    // cross the cuts, sponge layers spanning subdomains, and an obstacle on a cut.
    for (what, c) in open_cases() {
        let reference = run_from_vortex(m.runtime(&c, 1), &c, 40);
        for parts in [[2, 2, 1], [3, 1, 2], [1, 2, 3]] {
            let got = one_process(m, &c, &grid_layout(&c, parts, |_| 0), 40);
            assert!(
                got == reference,
                "{} grid {parts:?} differs from one slab ({what})",
                m.name()
            );
        }
    }
}

/// Channels in page-locked host memory, as a cluster job's are: the CUDA module moves its x
/// faces' through device buffers (the other sides' it reaches in place), and the CPU module reads
/// and writes them all in place; the grids still equal one slab bit for bit, closed and open.
fn grids_over_host_memory_equal_one_slab(m: Module) {
    let zero_copy = TransportChoice::Fixed(Transport::ZeroCopy);
    for periodic_z in [false, true] {
        for (k, variant) in VARIANTS.iter().enumerate() {
            let precision = [Precision::F16, Precision::F64, Precision::F32][k % 3];
            let c = variant_case([7, 9, 8], periodic_z, *variant, precision);
            let reference = run_from_vortex(m.runtime(&c, 1), &c, 25);
            for parts in [[2, 1, 1], [2, 2, 2], [5, 1, 2], [1, 3, 1]] {
                let layout = grid_layout(&c, parts, |_| 0);
                let got = one_process_over(m, &c, &layout, 25, zero_copy);
                assert!(
                    got == reference,
                    "{} grid {parts:?} over host memory differs from one slab (periodic z \
                     {periodic_z}, {variant:?}, {precision:?})",
                    m.name()
                );
            }
        }
    }
    for (what, c) in open_cases() {
        let reference = run_from_vortex(m.runtime(&c, 1), &c, 40);
        let got = one_process_over(m, &c, &grid_layout(&c, [3, 1, 2], |_| 0), 40, zero_copy);
        assert!(
            got == reference,
            "{} grid 3x1x2 over host memory differs from one slab ({what})",
            m.name()
        );
    }
}

per_module!(grids_over_host_memory_equal_one_slab =>
            grids_over_host_memory_equal_one_slab_bit_for_bit,
            grids_over_host_memory_equal_one_slab_bit_for_bit_on_the_cuda_module);

per_module!(grids_with_open_faces_equal_one_slab =>
            grids_with_open_faces_and_sponges_equal_one_slab_bit_for_bit,
            grids_with_open_faces_and_sponges_equal_one_slab_bit_for_bit_on_the_cuda_module);

fn grids_periodic_on_every_axis(m: Module) {
    // Periodic x, y and z cut in two: both x sides of a subdomain lead to the same neighbour,
    // and every edge channel wraps around the domain.
    let mut c = variant_case([6, 6, 6], true, (Collision::MRT, true), Precision::F64);
    c.domain.periodic = [true, true, true];
    c.domain.obstacles.clear();
    let reference = run_from_vortex(m.runtime(&c, 1), &c, 20);
    for parts in [[2, 2, 2], [2, 3, 1], [1, 2, 3]] {
        let got = one_process(m, &c, &grid_layout(&c, parts, |_| 0), 20);
        assert!(
            got == reference,
            "{} grid {parts:?} differs from one slab",
            m.name()
        );
    }
}

per_module!(grids_periodic_on_every_axis => grids_periodic_on_every_axis_equal_one_slab,
            grids_periodic_on_every_axis_equal_one_slab_on_the_cuda_module);

#[test]
fn grids_over_ranks_equal_one_slab_bit_for_bit() {
    // 1, 2, 4 and 8 ranks: 1 x 1 x 1, 2 x 1 x 1, 1 x 2 x 2 and 2 x 2 x 2, one subdomain per rank,
    // and a 2 x 2 x 2 grid over 3 ranks (every other subdomain's neighbours on other ranks).
    let runs: [([usize; 3], usize); 5] = [
        ([1, 1, 1], 1),
        ([2, 1, 1], 2),
        ([1, 2, 2], 4),
        ([2, 2, 2], 8),
        ([2, 2, 2], 3),
    ];
    for periodic_z in [false, true] {
        let c = variant_case(
            [8, 7, 9],
            periodic_z,
            (Collision::TRT, true),
            Precision::F32,
        );
        let reference = run_from_vortex(Module::Cpu.runtime(&c, 1), &c, 30);
        for (parts, ranks) in runs {
            let layout = grid_layout(&c, parts, |s| s % ranks);
            let c2 = c.clone();
            let got = within_a_minute(move || {
                let per_rank = |r: usize| layout.ranks.iter().filter(|&&x| x == r).count();
                let (rt, servers) = local_job(&layout, |r| cpu_factory(&c2, per_rank(r)));
                let out = run_from_vortex(rt.expect("the job starts"), &c2, 30);
                for s in servers {
                    s.join().unwrap().expect("a rank served to the end");
                }
                out
            });
            assert!(
                got == reference,
                "grid {parts:?} over {ranks} ranks differs from one slab (periodic z {periodic_z})"
            );
        }
    }
}
