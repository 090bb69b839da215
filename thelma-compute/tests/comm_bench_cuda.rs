//! The CUDA side of `comm-bench`: the exchange kernel compiles with NVRTC (CI, no GPU needed), and
//! every transport delivers intact data on the GPUs present (ignored without a device).

use thelma_compute::comm_bench::{self, Backend, BenchConfig, Shape, Topology, Transport};

/// NVRTC is fetched by `scripts/setup` (or found on the system); without it there is nothing to
/// compile with, which this test reports rather than hides.
#[test]
fn the_exchange_kernel_compiles_to_a_cubin_for_hopper() {
    // SAFETY: only probes whether the shared library loads.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        eprintln!("NVRTC not installed: kernel compile check skipped (scripts/setup fetches it)");
        return;
    }
    let bytes = comm_bench::compile_kernel(9, 0).expect("comm_bench.cu compiles for sm_90");
    assert!(bytes > 1000, "a {bytes}-byte cubin cannot hold the kernel");
}

fn config(
    devices: Vec<usize>,
    topology: Topology,
    transport: Transport,
    transpose: bool,
) -> BenchConfig {
    BenchConfig {
        devices,
        topology,
        shape: Shape {
            arrays: 5,
            edge: 192,
            transpose,
        },
        transport,
        iterations: 200,
        warmup: 10,
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn every_transport_delivers_on_the_gpus_present() {
    let n = comm_bench::available_devices(Backend::Cuda).expect("a CUDA device");
    assert!(n >= 1);
    // One GPU: the ring of one device is its own neighbour. More: chain and ring over all of them.
    let mut graphs = vec![(vec![0], Topology::Circular)];
    if n >= 2 {
        graphs.push(((0..n).collect(), Topology::Linear));
        graphs.push(((0..n).collect(), Topology::Circular));
    }
    for (devices, topology) in graphs {
        for transport in Transport::ALL {
            for transpose in [false, true] {
                let c = config(devices.clone(), topology, transport, transpose);
                let r = comm_bench::run(Backend::Cuda, &c).unwrap_or_else(|e| {
                    panic!("{transport} {topology} {devices:?} transpose={transpose}: {e}")
                });
                assert_eq!(r.links.len(), topology.interfaces(devices.len()));
                assert!(r.aggregate_gbs > 0.0 && r.time_per_iteration_us > 0.0);
                eprintln!(
                    "{transport:>11} {topology:>8} {devices:?} transpose={transpose}: {:.2} GB/s, {:.1} µs/iteration",
                    r.aggregate_gbs, r.time_per_iteration_us
                );
            }
        }
    }
}

/// The MPI transport's GPU endpoint on a job of threads (`LocalCluster`, the same protocol as
/// MPI): three ranks, each on a GPU of the host in turn (all on one GPU where there is one), in a
/// chain and in a ring, transposed or not; every word is checked on arrival.
#[test]
#[ignore = "needs a CUDA device"]
fn the_mpi_transport_delivers_between_ranks_on_the_gpus_present() {
    use std::sync::Arc;
    use thelma_core::{Cluster, LocalCluster};
    let n = comm_bench::available_devices(Backend::Cuda).expect("a CUDA device");
    for topology in [Topology::Linear, Topology::Circular] {
        for transpose in [false, true] {
            let c = config(
                (0..3).map(|r| r % n).collect(),
                topology,
                Transport::Mpi,
                transpose,
            );
            let handles: Vec<_> = LocalCluster::job(3)
                .into_iter()
                .map(|rank| {
                    let c = c.clone();
                    std::thread::spawn(move || {
                        let rank: Arc<dyn Cluster> = rank;
                        let r = comm_bench::run_job(Backend::Cuda, &c, &rank);
                        if let Err(e) = &r {
                            rank.abort(&e.to_string(), 1);
                        }
                        r
                    })
                })
                .collect();
            let mut results = handles.into_iter().map(|h| h.join().unwrap());
            let r = results
                .next()
                .unwrap()
                .unwrap_or_else(|e| panic!("{topology} transpose={transpose}: {e}"))
                .expect("rank 0 reports");
            assert!(results.all(|o| matches!(o, Ok(None))));
            assert_eq!(r.links.len(), topology.interfaces(3));
            assert!(r.per_device.iter().all(|d| d.describe.contains("rank")));
            eprintln!(
                "mpi (threads) {topology:>8} transpose={transpose}: {:.2} GB/s, {:.1} µs/iteration",
                r.aggregate_gbs, r.time_per_iteration_us
            );
        }
    }
}
