//! Cluster jobs: `mpirun -np N thelma run ...` runs one process per rank. Rank 0 runs the case as
//! one process would (outputs, checkpoints, the console) and coordinates every slab; the other
//! ranks serve their own slabs ([`thelma_core::Runtime::serve`]). The layout (`--layout FILE`, or
//! an even split giving each rank one slab per device of `--devices`) says which rank and device
//! runs each slab.
//!
//! The message layer is MPI through the `mpi` crate (rsmpi), built with the `mpi` feature
//! (`cargo build --release --features mpi`, over Open MPI or MPICH): a build without it refuses to
//! run as one rank of several rather than running N copies of the whole case.

use std::sync::Arc;

use thelma_core::Cluster;

use crate::error::UsageError;

/// This process's place in a job of several ranks.
pub struct Job {
    cluster: Arc<dyn Cluster>,
    // Finalises MPI when the job ends.
    #[cfg(feature = "mpi")]
    _universe: mpi::environment::Universe,
}

impl Job {
    pub fn rank(&self) -> usize {
        self.cluster.rank()
    }
    pub fn size(&self) -> usize {
        self.cluster.size()
    }
    pub fn cluster(&self) -> Arc<dyn Cluster> {
        self.cluster.clone()
    }
    /// Ends every rank of the job with `message` and exit status `code` (never returns over MPI).
    pub fn abort(&self, message: &str, code: i32) {
        self.cluster.abort(message, code);
    }
}

/// The number of processes the launcher started, where it says (Open MPI, and PMI launchers:
/// MPICH's Hydra, Slurm's srun).
fn launched() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.trim().parse().ok())
}

/// The job this process is a rank of, when a launcher started several; `None` for one process.
pub fn join() -> Result<Option<Job>, UsageError> {
    match launched() {
        Some(n) if n > 1 => connect(n),
        _ => Ok(None),
    }
}

#[cfg(not(feature = "mpi"))]
fn connect(n: usize) -> Result<Option<Job>, UsageError> {
    Err(UsageError::new(
        "mpirun",
        format!(
            "started as one of {n} processes, but this thelma was built without MPI (build it \
             with `cargo build --release --features mpi`)"
        ),
    ))
}

#[cfg(feature = "mpi")]
fn connect(_: usize) -> Result<Option<Job>, UsageError> {
    use mpi::traits::Communicator;
    let (universe, threading) = mpi::initialize_with_threading(mpi::Threading::Multiple)
        .ok_or_else(|| UsageError::new("mpirun", "MPI was already initialised"))?;
    if threading != mpi::Threading::Multiple {
        return Err(UsageError::new(
            "mpirun",
            format!(
                "the MPI library offers {threading:?} threading; thelma's ranks need \
                 MPI_THREAD_MULTIPLE"
            ),
        ));
    }
    let world = universe.world();
    let cluster = mpi_cluster::MpiCluster {
        rank: world.rank() as usize,
        size: world.size() as usize,
    };
    if cluster.size < 2 {
        return Ok(None);
    }
    Ok(Some(Job {
        cluster: Arc::new(cluster),
        _universe: universe,
    }))
}

#[cfg(feature = "mpi")]
mod mpi_cluster {
    use mpi::point_to_point::{Destination, Source};
    use mpi::topology::SimpleCommunicator;
    use mpi::traits::{Communicator, CommunicatorCollectives};
    use thelma_core::{Cluster, ClusterError, Incoming, Outgoing, Tag};

    /// The largest piece of one message: MPI counts in `int`.
    const PIECE: usize = 1 << 30;

    /// MPI_COMM_WORLD, initialised with MPI_THREAD_MULTIPLE. Messages longer than a gibibyte go in
    /// pieces after a header giving their length; one thread sends under each tag (the runtime's
    /// proxies and relays are one per slab), so the pieces arrive in order.
    pub struct MpiCluster {
        pub rank: usize,
        pub size: usize,
    }

    fn world() -> SimpleCommunicator {
        SimpleCommunicator::world()
    }

    impl Cluster for MpiCluster {
        fn rank(&self) -> usize {
            self.rank
        }

        fn size(&self) -> usize {
            self.size
        }

        fn send(&self, to: usize, tag: Tag, bytes: &[u8]) -> Result<(), ClusterError> {
            let w = world();
            let p = w.process_at_rank(to as i32);
            p.send_with_tag(&(bytes.len() as u64), tag);
            for piece in bytes.chunks(PIECE) {
                p.send_with_tag(piece, tag);
            }
            Ok(())
        }

        fn recv(&self, from: usize, tag: Tag) -> Result<Vec<u8>, ClusterError> {
            let w = world();
            let p = w.process_at_rank(from as i32);
            let (len, _) = p.receive_with_tag::<u64>(tag);
            let mut out = Vec::with_capacity(len as usize);
            while out.len() < len as usize {
                let (piece, _) = p.receive_vec_with_tag::<u8>(tag);
                out.extend_from_slice(&piece);
            }
            Ok(out)
        }

        fn exchange(
            &self,
            sends: &[Outgoing<'_>],
            recvs: &mut [Incoming<'_>],
        ) -> Result<(), ClusterError> {
            if let Some(big) = sends.iter().map(|o| o.bytes.len()).find(|&n| n > PIECE) {
                return Err(ClusterError(format!(
                    "an interface buffer of {big} bytes: one message carries at most {PIECE}"
                )));
            }
            let w = world();
            mpi::request::scope(|scope| {
                let mut pending = Vec::with_capacity(recvs.len());
                for i in recvs.iter_mut() {
                    pending.push(
                        w.process_at_rank(i.from as i32)
                            .immediate_receive_into_with_tag(scope, &mut *i.bytes, i.tag),
                    );
                }
                let sent: Vec<_> = sends
                    .iter()
                    .map(|o| {
                        w.process_at_rank(o.to as i32)
                            .immediate_send_with_tag(scope, o.bytes, o.tag)
                    })
                    .collect();
                for r in pending {
                    r.wait();
                }
                for r in sent {
                    r.wait();
                }
            });
            Ok(())
        }

        fn any(&self, flag: bool) -> Result<bool, ClusterError> {
            let mut joined = 0u8;
            world().all_reduce_into(
                &u8::from(flag),
                &mut joined,
                mpi::collective::SystemOperation::max(),
            );
            Ok(joined != 0)
        }

        fn abort(&self, message: &str, code: i32) {
            eprintln!("error: {message}");
            world().abort(code)
        }
    }
}
