//! Partition invariance and agreement with the oracle, one test body per property for every module
//! (`per_module!`): a run split over N slabs equals the one-slab run bit for bit (2 to 5 uneven slabs
//! on one device; one slab per GPU where a host has several), and a module's run equals the CPU
//! module's to rounding; walled and periodic z, every collision variant, f32, f64 and f16 storage. The CPU cases
//! run in CI, the CUDA ones on a GPU host (`--ignored`).

use thelma_core::physics::Collision;
use thelma_core::{Obstacle, Precision, Transport, TransportChoice};
use thelma_geometry::{Geometry, BYTE_PALETTE};
use thelma_tests::{
    agreement_tolerance, assert_slabs_equal_one_slab, box_case, cpu_runtime, cuda_runtime_over,
    domain, gather_populations, gpus, per_module, run_from_vortex, scatter_populations, values,
    variant_case, vortex_populations, Module, VARIANTS,
};

fn slabs_equal_one_slab(m: Module) {
    for periodic_z in [false, true] {
        for variant in VARIANTS {
            for precision in [
                Precision::F32,
                Precision::F64,
                Precision::F16,
                Precision::F16c,
            ] {
                // 23 planes: uneven slabs for every count from 2 to 5.
                let c = variant_case([24, 20, 23], periodic_z, variant, precision);
                let what = format!("periodic z {periodic_z}, {variant:?}, {precision:?}");
                assert_slabs_equal_one_slab(m, &c, 200, &what);
            }
        }
    }
}

per_module!(slabs_equal_one_slab => slabs_equal_one_slab_bit_for_bit_on_the_cpu_module,
    slabs_equal_one_slab_bit_for_bit_on_the_cuda_module);

/// Every transport the host offers carries the same bits: slabs sharing a GPU over device memory
/// and over zero-copy, and, on a host with several GPUs, one slab per GPU over peer memory (where
/// the GPUs have peer access) and over zero-copy; each run equals one slab, and each channel took
/// the transport asked for.
#[test]
#[ignore = "needs a CUDA device"]
fn every_transport_carries_one_slabs_bits_on_the_cuda_module() {
    let Some(n) = gpus() else {
        return;
    };
    let mut layouts = vec![(vec![0, 0, 0], vec![Transport::ZeroCopy, Transport::Device])];
    if n > 1 {
        let mut ts = vec![Transport::ZeroCopy];
        // Neighbours in both orders, the ring's last and first among them.
        let peers = (0..n).all(|a| {
            (0..n).all(|b| a == b || thelma_compute::cuda::can_access_peer(a, b).unwrap_or(false))
        });
        if peers {
            ts.push(Transport::Peer);
        }
        layouts.push(((0..n).collect(), ts));
    }
    for periodic_z in [false, true] {
        for precision in [Precision::F32, Precision::F16c] {
            let c = variant_case([24, 20, 23], periodic_z, (Collision::MRT, false), precision);
            let reference = run_from_vortex(Module::Cuda.runtime(&c, 1), &c, 200);
            for (ids, transports) in &layouts {
                for &t in transports {
                    let rt = cuda_runtime_over(&c, ids, TransportChoice::Fixed(t));
                    for d in rt.devices() {
                        for got in d.transports.iter().flatten() {
                            assert_eq!(*got, t, "devices {ids:?}");
                        }
                    }
                    let got = run_from_vortex(rt, &c, 200);
                    assert!(
                        got == reference,
                        "{t} on devices {ids:?}, periodic z {periodic_z}, {precision:?}: differs from one slab"
                    );
                }
            }
        }
    }
}

/// The module against the CPU module on two slabs: equal to rounding (the CPU module itself equals
/// it bit for bit, which is also partition invariance).
fn agrees_with_the_cpu_module(m: Module) {
    for periodic_z in [false, true] {
        for variant in VARIANTS {
            for precision in [
                Precision::F32,
                Precision::F64,
                Precision::F16,
                Precision::F16c,
            ] {
                // The CPU module's own case is smaller: it only repeats partition invariance.
                let size = match m {
                    Module::Cpu => [20, 18, 22],
                    Module::Cuda => [40, 36, 44],
                };
                let c = variant_case(size, periodic_z, variant, precision);
                let steps = 300;
                let cpu = values(&run_from_vortex(cpu_runtime(&c, 2), &c, steps), precision);
                let got = values(&run_from_vortex(m.runtime(&c, 1), &c, steps), precision);
                assert_eq!(cpu.len(), got.len());
                let start = vortex_populations(domain(&c), 0.05);
                let moved: f64 = cpu.iter().zip(&start).map(|(a, b)| (a - b).powi(2)).sum();
                let diff: f64 = cpu.iter().zip(&got).map(|(a, b)| (a - b).powi(2)).sum();
                let norm: f64 = cpu.iter().map(|a| a * a).sum();
                let rel = (diff / norm).sqrt();
                let tol = agreement_tolerance(m, precision);
                eprintln!(
                    "{}: periodic z {periodic_z}, {variant:?}, {precision:?}: |Δ|/|ref| = {rel:.3e}",
                    m.name()
                );
                assert!(moved > 0.0, "the state did not move");
                assert!(
                    rel <= tol,
                    "{}: {variant:?} {precision:?} periodic z {periodic_z}: |Δ|/|ref| = {rel:e} > {tol:e}",
                    m.name()
                );
            }
        }
    }
}

per_module!(agrees_with_the_cpu_module => the_cpu_module_agrees_with_itself_on_other_slabs,
    the_cuda_module_matches_the_cpu_module);

#[test]
fn the_initial_state_actually_moves_so_the_comparison_is_not_trivial() {
    let c = variant_case([24, 20, 23], true, (Collision::MRT, false), Precision::F64);
    let start = {
        let mut rt = cpu_runtime(&c, 1);
        let init = vortex_populations(domain(&c), 0.05);
        let parts = scatter_populations(&rt, &init, c.numerics.precision);
        rt.write_populations(parts, 0).unwrap();
        gather_populations(&mut rt)
    };
    assert_ne!(run_from_vortex(cpu_runtime(&c, 1), &c, 50), start);
}

/// A sphere large enough that its surface nodes take more than 256 distinct flag values, so that the
/// whole-domain slab stores a two-byte palette index while thinner slabs may store one byte: slabs
/// still equal one slab bit for bit, and a module equals the CPU module to rounding.
fn a_palette_beyond_one_byte(m: Module) {
    let mut c = box_case(
        [26, 24, 25],
        [true, false, true],
        0.02,
        Collision::TRT,
        Precision::F32,
    );
    c.domain.obstacles = vec![Obstacle::Sphere {
        centre: [12.3, 11.6, 12.2],
        radius: 8.4,
    }];
    let g = Geometry::from_case(&c).unwrap();
    let entries = g.slab(0..25).unwrap().palette.flags.len();
    assert!(entries > BYTE_PALETTE, "{entries} palette entries");
    assert_slabs_equal_one_slab(m, &c, 100, "a large sphere");
    if m != Module::Cpu {
        let cpu = values(
            &run_from_vortex(cpu_runtime(&c, 1), &c, 100),
            c.numerics.precision,
        );
        let got = values(
            &run_from_vortex(m.runtime(&c, 1), &c, 100),
            c.numerics.precision,
        );
        let diff: f64 = cpu.iter().zip(&got).map(|(a, b)| (a - b).powi(2)).sum();
        let norm: f64 = cpu.iter().map(|a| a * a).sum();
        assert!(
            (diff / norm).sqrt() < 1e-5,
            "|Δ|/|ref| = {:e}",
            (diff / norm).sqrt()
        );
    }
}

per_module!(a_palette_beyond_one_byte => a_two_byte_palette_index_is_partition_invariant_on_the_cpu_module,
    a_two_byte_palette_index_matches_the_cpu_module_on_the_cuda_module);
