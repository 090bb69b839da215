//! Cluster jobs (several ranks, as under MPI) run in one process over [`LocalCluster`], with the
//! runtime's own protocol: rank 0 coordinates, the other ranks serve their slabs, interfaces
//! between ranks travel as messages after each step. A job equals one slab bit for bit whatever
//! the ranks and their slabs; a stop asked on any rank stops every rank after the same step; a
//! failure on any rank ends the job with its message and never hangs it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use thelma_compute::cuda::CudaFactory;
use thelma_compute::CpuFactory;
use thelma_compute::ModelParams;
use thelma_core::physics::{Collision, ThermalFace, ThermalModel, ThermalSetup};
use thelma_core::{
    BoundaryConfig, BoundaryKind, CaseConfig, ComputeError, ComputeModule, Face, Layout,
    LocalCluster, ModuleFactory, Placement, Precision, Runtime, RuntimeError, SlabSpec,
    SpongeConfig, Streaming, Transport, TransportRefused, MAX_SLABS_PER_RANK,
};
use thelma_tests::{
    box_case, cpu_factory, domain, gpus, local_job, model, run_from_vortex, variant_case,
    within_a_minute, Module, VARIANTS,
};

/// The case's domain split evenly into `ranks.len()` slabs, slab s on rank `ranks[s]`.
fn layout_of(case: &thelma_core::CaseConfig, ranks: &[usize]) -> Layout {
    let slabs = SlabSpec::split(domain(case), ranks.len()).unwrap();
    Layout {
        devices: vec![0; slabs.len()],
        ranks: ranks.to_vec(),
        slabs,
    }
}

#[test]
fn ranks_equal_one_slab_bit_for_bit() {
    // Slab placements: one slab per rank, runs of slabs per rank (uneven), and ranks alternating
    // slab by slab so that every interface crosses ranks.
    let placements: [&[usize]; 4] = [&[0, 1], &[0, 0, 1, 2, 2], &[0, 1, 0, 1], &[1, 0, 2]];
    for periodic_z in [false, true] {
        for (k, variant) in VARIANTS.iter().enumerate() {
            let precision = [Precision::F32, Precision::F16, Precision::F64][k % 3];
            let c = variant_case([16, 14, 23], periodic_z, *variant, precision);
            let reference = run_from_vortex(Module::Cpu.runtime(&c, 1), &c, 60);
            for ranks in placements {
                let layout = layout_of(&c, ranks);
                let c2 = c.clone();
                let got = within_a_minute(move || {
                    let per_rank = |r: usize| layout.ranks.iter().filter(|&&x| x == r).count();
                    let (rt, servers) = local_job(&layout, |r| cpu_factory(&c2, per_rank(r)));
                    let rt = rt.expect("the job starts");
                    let out = run_from_vortex(rt, &c2, 60);
                    for s in servers {
                        s.join().unwrap().expect("a rank served to the end");
                    }
                    out
                });
                assert!(
                    got == reference,
                    "ranks {ranks:?} differ from one slab (periodic z {periodic_z}, {variant:?}, \
                     {precision:?})"
                );
            }
        }
    }
}

/// On the CUDA module the channels between ranks are mapped host memory (outboxes and inboxes),
/// which the kernels store into and load from as over zero-copy; the ranks' overlapped steps run
/// each slab's faces on a stream of their own beside its interior.
#[test]
#[ignore = "needs a CUDA device"]
fn ranks_on_the_cuda_module_equal_one_slab_bit_for_bit() {
    if gpus().is_none() {
        return;
    }
    for periodic_z in [false, true] {
        for (variant, precision) in [(VARIANTS[0], Precision::F32), (VARIANTS[3], Precision::F16)] {
            let c = variant_case([24, 20, 23], periodic_z, variant, precision);
            let reference = run_from_vortex(Module::Cuda.runtime(&c, 1), &c, 100);
            for ranks in [&[0, 1][..], &[0, 1, 0, 1], &[1, 0, 2]] {
                let layout = layout_of(&c, ranks);
                let c2 = c.clone();
                let got = within_a_minute(move || {
                    // Kernels that run a part of the planes, the faces beside the interior.
                    let params = ModelParams {
                        overlapped_steps: true,
                        ..model(&c2)
                    };
                    let (rt, servers) = local_job(&layout, |_| {
                        Arc::new(CudaFactory::new(params.clone()).expect("CUDA is present"))
                    });
                    let out = run_from_vortex(rt.expect("the job starts"), &c2, 100);
                    for s in servers {
                        s.join().unwrap().expect("a rank served to the end");
                    }
                    out
                });
                assert!(
                    got == reference,
                    "cuda: ranks {ranks:?} differ from one slab (periodic z {periodic_z}, \
                     {variant:?}, {precision:?})"
                );
            }
        }
    }
}

/// Slabs of 1, 2, 3 and the remaining planes on ranks 0, 1, 0, 1: every interface crosses ranks,
/// so every rank splits its steps (faces, then interior), and the thin slabs' interiors are empty
/// or one plane.
fn thin_slabs(case: &CaseConfig) -> Layout {
    let d = domain(case);
    let cuts = [0, 1, 3, 6, d.size[2]];
    let z = cuts.windows(2).map(|w| w[0]..w[1]).collect();
    let whole = |a: usize| std::iter::once(0..d.size[a]).collect();
    let slabs = SlabSpec::cells(d, &[whole(0), whole(1), z]);
    Layout {
        devices: vec![0; 4],
        ranks: vec![0, 1, 0, 1],
        slabs,
    }
}

/// `run` on a job of [`thin_slabs`] whose ranks' modules are CPU modules of `params`.
fn thin_job<T: Send + 'static>(
    params: ModelParams,
    case: &CaseConfig,
    run: impl FnOnce(Runtime) -> T + Send + 'static,
) -> T {
    let layout = thin_slabs(case);
    within_a_minute(move || {
        let (rt, servers) = local_job(&layout, |_| {
            Arc::new(CpuFactory::new(params.clone(), 2, 2)) as Arc<dyn ModuleFactory>
        });
        let out = run(rt.expect("the job starts"));
        for s in servers {
            s.join().unwrap().expect("a rank served to the end");
        }
        out
    })
}

/// Split steps (the faces, their messages under way while the interior is updated) equal whole
/// steps on every kind of step the modules have: in-place streaming (both of its steps), open
/// faces with sponge layers, and the coupled temperature lattice, on slabs as thin as one plane.
#[test]
fn split_steps_equal_one_slab_with_in_place_open_faces_and_temperature() {
    for periodic_z in [false, true] {
        let mut c = variant_case([12, 10, 15], periodic_z, VARIANTS[3], Precision::F32);
        c.numerics.streaming = Streaming::InPlace;
        for steps in [30, 31] {
            let reference = run_from_vortex(Module::Cpu.runtime(&c, 1), &c, steps);
            let c2 = c.clone();
            let got = thin_job(model(&c), &c, move |rt| run_from_vortex(rt, &c2, steps));
            assert!(
                got == reference,
                "in place, periodic z {periodic_z}, {steps} steps: ranks differ from one slab"
            );
        }
    }

    let mut open = box_case(
        [14, 10, 15],
        [false; 3],
        0.03,
        Collision::TRT,
        Precision::F64,
    );
    open.boundary = vec![
        BoundaryConfig {
            velocity: [0.04, 0.01, -0.005],
            ..BoundaryConfig::new(Face::XMinus, BoundaryKind::Velocity)
        },
        BoundaryConfig {
            density: Some(1.005),
            sponge: Some(SpongeConfig {
                width: 3.0,
                strength: 0.5,
            }),
            ..BoundaryConfig::new(Face::XPlus, BoundaryKind::Pressure)
        },
        BoundaryConfig::new(Face::ZMinus, BoundaryKind::Outflow),
    ];
    let reference = run_from_vortex(Module::Cpu.runtime(&open, 1), &open, 40);
    let c2 = open.clone();
    let got = thin_job(model(&open), &open, move |rt| run_from_vortex(rt, &c2, 40));
    assert!(got == reference, "open faces: ranks differ from one slab");

    // Held faces across and along the slabs' axis, buoyancy across it, an outflow face.
    let hot = box_case(
        [10, 8, 15],
        [true, false, false],
        0.05,
        Collision::MRT,
        Precision::F32,
    );
    let mut faces = [ThermalFace::Adiabatic; 6];
    faces[2] = ThermalFace::Held(0.3);
    faces[4] = ThermalFace::Held(1.0);
    faces[5] = ThermalFace::Outflow;
    let params = ModelParams {
        thermal: Some(ThermalSetup {
            model: ThermalModel::new(0.02, 1.0, [0.0, 1e-4, -3e-4]),
            faces,
            patches: Vec::new(),
            initial: 0.0,
            store_scale: 1.0,
        }),
        ..model(&hot)
    };
    let run = |mut rt: Runtime| {
        rt.run(60).unwrap();
        let f = rt.fields().unwrap();
        rt.shutdown();
        f
    };
    let one = run(Module::Cpu.runtime_with(params.clone(), &hot, &Module::Cpu.slab_ids(1)));
    assert!(one.temperature.iter().any(|t| *t != 0.0) && one.uz.iter().any(|u| *u != 0.0));
    let got = thin_job(params, &hot, run);
    assert!(got == one, "temperature: ranks differ from one slab");
}

#[test]
fn the_coordinator_gathers_fields_and_devices_from_every_rank() {
    let c = box_case(
        [12, 10, 18],
        [true, false, true],
        0.05,
        Collision::BGK,
        Precision::F64,
    );
    let layout = layout_of(&c, &[0, 1, 1]);
    let c2 = c.clone();
    let (fields, devices, healths) = within_a_minute(move || {
        let (rt, servers) = local_job(&layout, |r| cpu_factory(&c2, 1 + r));
        let mut rt = rt.unwrap();
        rt.run(25).unwrap();
        let f = rt.fields().unwrap();
        let d = rt.devices().to_vec();
        let m = rt.health().unwrap().len();
        rt.shutdown();
        for s in servers {
            s.join().unwrap().unwrap();
        }
        (f, d, m)
    });
    let mut one = Module::Cpu.runtime(&c, 1);
    one.run(25).unwrap();
    assert_eq!(fields, one.fields().unwrap());
    assert_eq!(healths, 3, "one health report per slab");
    assert_eq!(
        devices.iter().map(|d| d.rank).collect::<Vec<_>>(),
        [0, 1, 1]
    );
    // Slab 0 reads both neighbours across ranks (the z ring), slab 1 from below only.
    assert_eq!(devices[0].across[..2], [true, true]);
    assert_eq!(devices[1].across[..2], [true, false]);
    assert_eq!(devices[2].across[..2], [false, true]);
}

/// Each rank writes its own slabs' blocks of a checkpoint (the serving rank's through its
/// messages), which loads as one process's populations; a file a rank cannot open is named for
/// each of its slabs.
#[test]
fn every_rank_writes_its_blocks_of_a_checkpoint() {
    let c = box_case(
        [12, 10, 18],
        [true, false, true],
        0.05,
        Collision::BGK,
        Precision::F32,
    );
    let mut c = c;
    c.output.average_from = Some(10.0);
    let layout = layout_of(&c, &[0, 1, 1]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let c2 = c.clone();
    let (reached, missing) = within_a_minute(move || {
        let (rt, servers) = local_job(&layout, |r| cpu_factory(&c2, 1 + r));
        let mut rt = rt.unwrap();
        // Samples at steps 10, 15, 20 and 25, on every rank alike.
        rt.set_averaging(Some(thelma_core::Averaging { from: 10, every: 5 }));
        rt.run(25).unwrap();
        let steered = thelma_cli::checkpoint::Steered::default();
        thelma_cli::checkpoint::save(&path, &c2, &mut rt, &steered, None).unwrap();
        let reached = rt
            .reach(&path.join(thelma_cli::checkpoint::FILE_NAME))
            .unwrap();
        let missing = rt.reach(&path.join("nowhere")).unwrap();
        rt.shutdown();
        for s in servers {
            s.join().unwrap().unwrap();
        }
        (reached, missing)
    });
    assert_eq!(reached, [None, None, None]);
    assert!(missing
        .iter()
        .all(|m| m.as_ref().is_some_and(|m| m.contains("No such file"))));
    let ck = thelma_cli::checkpoint::load(dir.path()).unwrap();
    assert_eq!(ck.header.blocks.len(), 3);
    assert_eq!(ck.header.means, Some(4));
    assert_eq!(ck.means.len(), 4 * 12 * 10 * 18);
    let mut one = Module::Cpu.runtime(&c, 1);
    one.run(25).unwrap();
    let want = one.read_populations().unwrap().concat();
    let want: Vec<u8> = want
        .chunks_exact(4)
        .flat_map(|b| f32::from_ne_bytes(b.try_into().unwrap()).to_le_bytes())
        .collect();
    assert!(
        ck.populations == want,
        "the job's checkpoint differs from one slab's populations"
    );
}

#[test]
fn a_stop_asked_on_any_rank_stops_every_rank_after_the_same_step() {
    let c = box_case(
        [8, 8, 12],
        [true, true, true],
        0.05,
        Collision::BGK,
        Precision::F32,
    );
    let layout = layout_of(&c, &[0, 1, 2]);
    let job = LocalCluster::job(3);
    let stops: Vec<Arc<AtomicBool>> = (0..3).map(|_| Arc::new(AtomicBool::new(false))).collect();
    // Rank 2's user pressed Ctrl-C before the run.
    stops[2].store(true, Ordering::SeqCst);
    let servers: Vec<_> = (1..3)
        .map(|r| {
            let (l, j, stop, f) = (
                layout.clone(),
                job[r].clone(),
                stops[r].clone(),
                cpu_factory(&c, 1),
            );
            std::thread::spawn(move || Runtime::serve(f, &l, j, stop))
        })
        .collect();
    let (c2, j0, s0) = (c.clone(), job[0].clone(), stops[0].clone());
    let st = within_a_minute(move || {
        let mut rt = Runtime::start_cluster(cpu_factory(&c2, 1), &layout, j0, s0).unwrap();
        let st = rt.run(100).unwrap();
        rt.shutdown();
        st
    });
    for s in servers {
        s.join().unwrap().unwrap();
    }
    assert!(st.stopped);
    assert_eq!(st.steps, 1);
    assert!(st.workers.iter().all(|w| w.steps == 1 && w.stopped));
}

/// A CPU factory whose module for one slab cannot be created.
struct Failing {
    inner: Arc<dyn ModuleFactory>,
    slab: usize,
}

impl ModuleFactory for Failing {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn placement(&self, device: usize, slab: &SlabSpec) -> Placement {
        self.inner.placement(device, slab)
    }
    fn create(
        &self,
        device: usize,
        slab: &SlabSpec,
    ) -> Result<Box<dyn ComputeModule>, ComputeError> {
        if slab.index == self.slab {
            return Err(ComputeError::OutOfMemory(format!(
                "slab {} does not fit (test)",
                slab.index
            )));
        }
        self.inner.create(device, slab)
    }
    fn transport(&self, reader: usize, writer: usize) -> Result<Transport, TransportRefused> {
        self.inner.transport(reader, writer)
    }
}

#[test]
fn a_failure_on_a_serving_rank_ends_the_job_with_its_message() {
    let c = box_case([8, 8, 16], [false; 3], 0.05, Collision::BGK, Precision::F32);
    let layout = layout_of(&c, &[0, 1, 1, 2]);
    // At creation: slab 2, on rank 1.
    let (c2, l2) = (c.clone(), layout.clone());
    let (err, served) = within_a_minute(move || {
        let (rt, servers) = local_job(&l2, |_| {
            Arc::new(Failing {
                inner: cpu_factory(&c2, 2),
                slab: 2,
            })
        });
        let served: Vec<_> = servers.into_iter().map(|s| s.join().unwrap()).collect();
        (rt.err().expect("the job fails"), served)
    });
    let m = err.to_string();
    assert!(m.contains("slab 2 does not fit (test)"), "{m}");
    assert!(served.iter().any(|s| s.is_err()), "{served:?}");

    // In a command: rank 2 is asked for a node outside its slab, after 5 steps.
    let (c2, l2) = (c.clone(), layout.clone());
    let err = within_a_minute(move || {
        let (rt, servers) = local_job(&l2, |_| cpu_factory(&c2, 2));
        let mut rt = rt.unwrap();
        rt.run(5).unwrap();
        let nodes: Vec<Arc<Vec<u32>>> = (0..4)
            .map(|s| Arc::new(vec![if s == 3 { 1 << 30 } else { 0 }]))
            .collect();
        let e = rt.read_nodes(&nodes).unwrap_err();
        // The job is over: a later command fails at once, and every rank ends.
        assert!(matches!(rt.run(1), Err(RuntimeError::Closed)));
        drop(rt);
        for s in servers {
            let _ = s.join().unwrap();
        }
        e
    });
    let m = err.to_string();
    assert!(m.contains("slab 3") && m.contains("outside a slab"), "{m}");
}

#[test]
fn ranks_that_lay_the_domain_out_otherwise_are_refused_before_any_waits() {
    let c = box_case([8, 8, 12], [false; 3], 0.05, Collision::BGK, Precision::F32);
    // Rank 1 split the domain into three slabs (as from another device count), rank 0 into two.
    let (ours, theirs) = (layout_of(&c, &[0, 1]), layout_of(&c, &[0, 1, 1]));
    let (e, served) = within_a_minute(move || {
        let job = LocalCluster::job(2);
        let (j1, c1) = (job[1].clone(), c.clone());
        let server = std::thread::spawn(move || {
            Runtime::serve(
                cpu_factory(&c1, 2),
                &theirs,
                j1,
                Arc::new(AtomicBool::new(false)),
            )
        });
        let e = Runtime::start_cluster(
            cpu_factory(&c, 1),
            &ours,
            job[0].clone(),
            Arc::new(AtomicBool::new(false)),
        )
        .err()
        .expect("refused");
        (e, server.join().unwrap())
    });
    assert_eq!(
        e.to_string(),
        "rank 1 lays the domain out as 8x8x12 in 3 slab(s) (z 0..4 on rank 0, z 4..8 on rank 1, \
         z 8..12 on rank 1), rank 0 as 8x8x12 in 2 slab(s) (z 0..6 on rank 0, z 6..12 on rank 1): \
         give every rank the same --devices count, or one --layout file"
    );
    assert!(served.is_err());
}

#[test]
fn a_layout_the_job_cannot_run_is_refused() {
    let c = box_case([8, 8, 8], [false; 3], 0.05, Collision::BGK, Precision::F32);
    let job = LocalCluster::job(2);
    let stop = Arc::new(AtomicBool::new(false));
    // Three ranks named, two in the job.
    let e = Runtime::start_cluster(
        cpu_factory(&c, 1),
        &layout_of(&c, &[0, 1, 2]),
        job[0].clone(),
        stop.clone(),
    )
    .err()
    .unwrap();
    assert_eq!(
        e.to_string(),
        "the layout places slabs on 3 ranks, and the job has 2"
    );
    // Rank 1 of three holds no slab.
    let job3 = LocalCluster::job(3);
    let e = Runtime::start_cluster(
        cpu_factory(&c, 1),
        &layout_of(&c, &[0, 2]),
        job3[0].clone(),
        stop.clone(),
    )
    .err()
    .unwrap();
    assert_eq!(e.to_string(), "rank 1 has no slab in the layout");
    let e = Runtime::start_cluster(
        cpu_factory(&c, 1),
        &layout_of(&c, &[0, 1]),
        job[1].clone(),
        stop,
    )
    .err()
    .unwrap();
    assert_eq!(e.to_string(), "rank 1 serves slabs; rank 0 coordinates");
}

/// Message tags are numbered per rank (a slab's place among its rank's slabs), not per job, so the
/// tags bound a rank's slabs, not a job's: a rank given more slabs than its tags can name is
/// refused before anything starts. (Jobs of several slabs per rank, whose tags now restart on
/// each rank, equal one slab bit for bit in `ranks_equal_one_slab_bit_for_bit`; the local job
/// refuses any tag MPI need not carry. A job of more than 910 slabs is not run here: over the
/// local job's one lock its thousands of threads would take minutes.)
#[test]
fn a_rank_with_more_slabs_than_its_tags_name_is_refused() {
    let n = MAX_SLABS_PER_RANK + 2;
    let c = box_case(
        [4, 3, n],
        [true, true, true],
        0.05,
        Collision::BGK,
        Precision::F32,
    );
    let mut ranks = vec![0; n];
    ranks[n - 1] = 1;
    let job = LocalCluster::job(2);
    let e = Runtime::start_cluster(
        cpu_factory(&c, 1),
        &layout_of(&c, &ranks),
        job[0].clone(),
        Arc::new(AtomicBool::new(false)),
    )
    .err()
    .unwrap();
    assert_eq!(
        e.to_string(),
        format!(
            "a rank runs {} slabs: a rank of a cluster job runs at most {MAX_SLABS_PER_RANK}",
            n - 1
        )
    );
}
