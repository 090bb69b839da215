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

/// A rank's place on its host: its index among the job's ranks there, and how many share it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostPlace {
    pub index: usize,
    pub ranks: usize,
}

/// This process's place in a job of several ranks.
pub struct Job {
    cluster: Arc<dyn Cluster>,
    /// Every rank's place on its host, by rank (MPI's shared-memory split of the job).
    hosts: Vec<HostPlace>,
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
    /// Every rank's place on its host, by rank: how a GPU backend deals a host's devices among
    /// the ranks it runs (`backend::deal_devices`).
    pub fn hosts(&self) -> &[HostPlace] {
        &self.hosts
    }
    /// Ends every rank of the job with `message` and exit status `code` (never returns over MPI).
    pub fn abort(&self, message: &str, code: i32) {
        self.cluster.abort(message, code);
    }
}

/// Whether a launcher started this process as one of several: the count where it says (Open MPI,
/// PMI launchers: MPICH's Hydra, Slurm's srun), `Some(0)` where only a PMIx launcher's rank says
/// so (`srun --mpi=pmix`; MPI then tells the count).
fn launched() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.trim().parse().ok())
        .or_else(|| std::env::var_os("PMIX_RANK").map(|_| 0))
}

/// The job this process is a rank of, when a launcher started several; `None` for one process.
pub fn join() -> Result<Option<Job>, UsageError> {
    match launched() {
        Some(n) if n != 1 => connect(n),
        _ => Ok(None),
    }
}

#[cfg(not(feature = "mpi"))]
fn connect(_: usize) -> Result<Option<Job>, UsageError> {
    Err(UsageError::new(
        "mpirun",
        "started as one of several processes, but this thelma was built without MPI (build it \
         with `cargo build --release --features mpi`)",
    ))
}

#[cfg(feature = "mpi")]
fn connect(_: usize) -> Result<Option<Job>, UsageError> {
    use mpi::traits::{Communicator, CommunicatorCollectives};
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
    // The ranks sharing this host (MPI_COMM_TYPE_SHARED), then every rank's place on its own.
    let host = world.split_shared(world.rank());
    let mine = [host.rank() as u64, host.size() as u64];
    let mut all = vec![0u64; 2 * cluster.size];
    world.all_gather_into(&mine[..], &mut all[..]);
    let hosts = all
        .chunks_exact(2)
        .map(|c| HostPlace {
            index: c[0] as usize,
            ranks: c[1] as usize,
        })
        .collect();
    Ok(Some(Job {
        cluster: Arc::new(cluster),
        hosts,
        _universe: universe,
    }))
}

#[cfg(feature = "mpi")]
mod mpi_cluster {
    use std::time::Duration;

    use mpi::point_to_point::{Destination, MatchedReceiveVec, Message, Source, Status};
    use mpi::topology::{Process, SimpleCommunicator};
    use mpi::traits::Equivalence;
    use mpi::traits::{Communicator, CommunicatorCollectives};
    use thelma_core::{Cluster, ClusterError, Incoming, Outgoing, Tag};

    /// The largest piece of one message: MPI counts in `int`.
    const PIECE: usize = 1 << 30;

    /// MPI_COMM_WORLD, initialised with MPI_THREAD_MULTIPLE. Messages longer than a gibibyte go in
    /// pieces after a header giving their length; one thread sends to each rank under each tag
    /// (the runtime's proxies and relays are one per slab, and a slab's tags are its own among
    /// its rank's), so the pieces arrive in order. A thread waiting for a message polls and
    /// sleeps rather than blocking in the library, whose blocking receives spin and would take a
    /// core from the workers for the whole run.
    pub struct MpiCluster {
        pub rank: usize,
        pub size: usize,
    }

    fn world() -> SimpleCommunicator {
        SimpleCommunicator::world()
    }

    /// The next message from `p` under `tag`, waited for by probing: 20 µs, doubling to 2 ms
    /// between probes (a command's reply is late by at most that).
    fn polled(p: &Process<'_>, tag: Tag) -> (Message, Status) {
        let mut nap = Duration::from_micros(20);
        loop {
            if let Some(found) = p.immediate_matched_probe_with_tag(tag) {
                return found;
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(2));
        }
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
            let (len, _) = polled(&p, tag).0.matched_receive::<u64>();
            let mut out = Vec::with_capacity(len as usize);
            while out.len() < len as usize {
                let (piece, _) = polled(&p, tag).matched_receive_vec::<u8>();
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
            let expected: Vec<(usize, usize)> =
                recvs.iter().map(|i| (i.bytes.len(), i.from)).collect();
            let short = mpi::request::scope(|scope| {
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
                let mut short = None;
                for (r, &(want, from)) in pending.into_iter().zip(&expected) {
                    let got = r.wait().count(u8::equivalent_datatype()) as usize;
                    if got != want && short.is_none() {
                        short = Some((got, want, from));
                    }
                }
                for r in sent {
                    r.wait();
                }
                short
            });
            match short {
                // The ranks disagree on an interface: their cases differ.
                Some((got, want, from)) => Err(ClusterError(format!(
                    "{got} bytes of an interface from rank {from}, where {want} were expected: \
                     do all ranks run the same case?"
                ))),
                None => Ok(()),
            }
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
            crate::warn_line!("error: {message}");
            world().abort(code)
        }
    }
}
