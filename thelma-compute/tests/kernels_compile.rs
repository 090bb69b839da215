//! Every CUDA kernel variant compiles with NVRTC for sm_90 (H100/H200), with no GPU or driver needed.
//!
//! NVRTC comes from the PyPI wheel `scripts/setup` installs. Where it is missing the test prints a
//! note and passes, unless `THELMA_REQUIRE_NVRTC=1` (set by `scripts/test`, so CI cannot skip it).

use thelma_compute::cuda::launch::{compile, lbm_source, nvrtc_present, Kernel, BANDWIDTH_SOURCE};
use thelma_compute::cuda::prelude::PreludeParams;
use thelma_core::physics::{
    Collision, SpongeLayer, ThermalFace, ThermalModel, ThermalSetup, OPERATORS,
};
use thelma_core::ComputeError;
use thelma_core::Face;
use thelma_core::Precision;

fn nvrtc_or_skip() -> bool {
    if nvrtc_present() {
        return true;
    }
    if std::env::var("THELMA_REQUIRE_NVRTC").as_deref() == Ok("1") {
        panic!("THELMA_REQUIRE_NVRTC=1 but libnvrtc cannot be loaded (run scripts/setup and source scripts/env.sh)");
    }
    eprintln!("note: libnvrtc not found; kernel compile check skipped (run scripts/setup)");
    false
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// A pressure outlet's sponge layer on `face`.
fn sponge(face: Face, width: usize, extent: usize) -> SpongeLayer {
    SpongeLayer {
        face,
        width,
        strength: 0.4,
        drho: -0.002,
        extent,
    }
}

#[test]
fn every_kernel_variant_compiles_for_sm_90() {
    if !nvrtc_or_skip() {
        return;
    }
    // Every variant with every operator and every storage precision, though not every pair of
    // them: the variant's k-th compile takes the k-th precision and operator k + variant (so the
    // pairs shift from one variant to the next). The full product (47 compiles after the refusals,
    // most of them the immersed bodies' slow ones) took half of CI's test time. One compile of each
    // variant (its k-th, k = min(variant, n − 1): f32, f64, f16, f16, f16c) runs to a cubin through
    // the assembler (ptxas), which alone checks the resource limits (constant bank, shared memory,
    // parameter space); the others stop at PTX, which checks the same source and kernel list in
    // about half the time (a quarter for the immersed bodies).
    let jobs: Vec<(Precision, usize, usize, &str)> = (0..5)
        .flat_map(|variant| {
            let precisions: Vec<Precision> = [
                Precision::F32,
                Precision::F64,
                Precision::F16,
                Precision::F16c,
            ]
            .into_iter()
            // f16c is refused with a temperature lattice (CaseConfig::validate).
            .filter(|&p| variant != 3 || p != Precision::F16c)
            .collect();
            let n = precisions.len().max(OPERATORS.len());
            (0..n).map(move |k| {
                (
                    precisions[k % precisions.len()],
                    (k + variant) % OPERATORS.len(),
                    variant,
                    if k == variant.min(n - 1) {
                        "sm_90"
                    } else {
                        "compute_90"
                    },
                )
            })
        })
        .collect();
    // The variants compiled side by side, one thread per core (NVRTC is thread-safe): a third of
    // the CI machine's test time went into compiling them one after another.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while let Some(&(precision, op, variant, arch)) =
                    jobs.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                {
                    variant_compiles(precision, op, variant, arch);
                }
            });
        }
    });
}

#[test]
fn every_kernel_is_in_a_source_and_the_bandwidth_kernel_compiles() {
    assert_eq!(
        Kernel::all().iter().filter(|k| k.in_lbm_source()).count(),
        5 * OPERATORS.len() + 11 + Kernel::IMMERSED.len()
    );
    if !nvrtc_or_skip() {
        return;
    }
    let cubin = compile(BANDWIDTH_SOURCE, "bandwidth.cu", "sm_90").expect("bandwidth kernel");
    assert!(contains(
        &cubin,
        &Kernel::BandwidthCopy.name(Precision::F32)
    ));
}

/// Variant `variant` of operator `op_index` with `precision` storage compiles and holds exactly the
/// kernels its case needs: plain (0, with in-place streaming), and with the eddy viscosity and a
/// force (which change the printed collision), both block sizes the launch shape may take, both
/// palette index widths, and with a temperature lattice (3: its fused step and export, each face
/// closure once, under the eddy viscosity and a turbulent Prandtl number, the held terms literals
/// or, as a run served live reads them, in constant memory); with sponge layers in the open and
/// coupled steps; and a grid's subdomain (4: every side through channel tables, with the eddy
/// viscosity, a force, a sponge layer and a temperature lattice but in f16c, where it is refused);
/// the temperature lattice in f16 under its store scale. `arch` is `sm_90` for a cubin or
/// `compute_90` for PTX.
fn variant_compiles(precision: Precision, op_index: usize, variant: usize, arch: &str) {
    let op = OPERATORS[op_index].0;
    let collision = Collision::parse(op).unwrap();
    let mut p = PreludeParams::example(precision, collision);
    match variant {
        1 => {
            p.block_x = 256;
            p.index_bytes = 2;
            p.immersed = true;
        }
        2 => {
            p.immersed = true;
            p.model.smagorinsky = Some(0.12);
            p.model.force = Some([1e-6, 0.0, -2e-6]);
            p.sponges.layers.push(sponge(Face::XPlus, 12, 96));
        }
        3 => {
            p.model.force = Some([1e-6, 0.0, 0.0]);
            p.model.smagorinsky = Some(0.1);
            p.thermal = Some(ThermalSetup {
                model: ThermalModel::new(0.02, 1e-3, [0.0, 0.0, -1e-3]),
                faces: [
                    ThermalFace::Held(0.5),
                    ThermalFace::Held(-0.5),
                    ThermalFace::Adiabatic,
                    ThermalFace::Outflow,
                    ThermalFace::Adiabatic,
                    ThermalFace::Adiabatic,
                ],
                patches: vec![(
                    thelma_core::FacePatch {
                        face: thelma_core::Face::ZPlus,
                        lo: [1, 2],
                        hi: [3, 4],
                    },
                    ThermalFace::Held(0.25),
                )],
                initial: 0.1,
                store_scale: 1.0,
            });
            if let Some(t) = &mut p.thermal {
                t.model.turbulent_prandtl = Some(0.85);
                t.store_scale = t.store_scale_for(precision);
            }
            // The held terms as literals (in f16) and, in f32 and f64, in constant memory (a
            // run served live).
            p.steered_temperatures = precision != Precision::F16;
            p.sponges.layers.push(sponge(Face::XMinus, 8, 40));
            p.sponges.layers.push(sponge(Face::ZPlus, 10, 33));
        }
        4 => {
            p.grid = true;
            // The x sides' fast path for the odd operators (here f32 and f16c).
            p.grid_x = !op_index.is_multiple_of(2);
            p.model.smagorinsky = Some(0.1);
            p.model.force = Some([0.0, 2e-6, 0.0]);
            p.sponges.layers.push(sponge(Face::YMinus, 6, 30));
            p.thermal = Some(ThermalSetup {
                model: ThermalModel::new(0.05, 2e-3, [0.0, -1e-3, 0.0]),
                faces: [
                    ThermalFace::Held(0.2),
                    ThermalFace::Adiabatic,
                    ThermalFace::Outflow,
                    ThermalFace::Adiabatic,
                    ThermalFace::Adiabatic,
                    ThermalFace::Held(-0.1),
                ],
                patches: Vec::new(),
                initial: 0.0,
                store_scale: 1.0,
            });
            if let Some(t) = &mut p.thermal {
                t.store_scale = t.store_scale_for(precision);
            }
            if precision == Precision::F16c {
                p.thermal = None;
            }
        }
        _ => {}
    }
    // In-place streaming beside the two-lattice kernels of the plain variant.
    p.in_place = variant == 0;
    // The step kernels of overlapped steps (a plane-slot offset) for the even operators of the
    // plain variant (closed, open and in-place steps: here f32, f16 and f16c) and of the thermal
    // one (f32 and f16).
    p.slot_offset = (variant == 0 || variant == 3) && op_index.is_multiple_of(2);
    let image = compile(&lbm_source(&p), "lbm_d3q19.cu", arch)
        .unwrap_or_else(|e| panic!("{precision:?} {op} variant {variant} for {arch}: {e}"));
    let kernels = [
        Kernel::CollidePropagate(collision),
        Kernel::CollideOpen(collision),
        Kernel::ExportFaces,
        Kernel::Health,
        Kernel::VelocityChange,
        Kernel::GatherNodes,
        Kernel::AccumulateMeans,
        Kernel::Plane,
    ];
    let thermal = [
        Kernel::CollideThermal(collision),
        Kernel::ExportThermal,
        Kernel::GatherThermal,
    ];
    let in_place = [
        Kernel::PullInPlace(collision),
        Kernel::LocalInPlace(collision),
        Kernel::SwapInPlace,
    ];
    let all = kernels
        .into_iter()
        .chain(thermal)
        .chain(in_place)
        .chain([Kernel::ExportSides, Kernel::ExportThermalSides]);
    for k in all.chain(Kernel::IMMERSED) {
        let name = k.name(precision);
        // The temperature lattice's, in-place streaming's and the immersed bodies'
        // kernels are compiled only for a case with them.
        let want = (!k.thermal() || p.thermal.is_some())
            && (!k.in_place() || p.in_place)
            && (!k.grid() || p.grid)
            && (!k.immersed() || p.immersed);
        assert_eq!(
            contains(&image, &name),
            want,
            "{name} in variant {variant} for {arch}"
        );
    }
}

#[test]
fn a_broken_kernel_reports_the_compiler_log() {
    if !nvrtc_or_skip() {
        return;
    }
    match compile(
        "extern \"C\" __global__ void k() { undefined_thing(); }",
        "broken.cu",
        "sm_90",
    ) {
        Err(ComputeError::Compile(log)) => assert!(log.contains("undefined_thing"), "{log}"),
        other => panic!("expected a compile error, got {other:?}"),
    }
}

#[test]
fn a_virtual_architecture_gives_ptx_with_the_kernel() {
    if !nvrtc_or_skip() {
        return;
    }
    let ptx = compile(BANDWIDTH_SOURCE, "bandwidth.cu", "compute_90").expect("bandwidth PTX");
    let text = String::from_utf8_lossy(&ptx);
    assert!(text.contains(".target sm_90"), "{text}");
    assert!(text.contains(&format!(
        ".entry {}",
        Kernel::BandwidthCopy.name(Precision::F32)
    )));
}
