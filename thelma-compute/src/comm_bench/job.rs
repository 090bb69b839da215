//! The MPI transport: one process (rank) per position of the device list, as a cluster job runs
//! its slabs. Each rank stores its words into buffers of its own (ordinary host memory on the CPU;
//! on a GPU, page-locked memory mapped into the device, the solver's zero-copy outboxes and
//! inboxes), and after each iteration the job's messages ([`Cluster::exchange`], the step exchange
//! of a cluster job) carry every outgoing buffer of the iteration's parity to the neighbour's
//! incoming one. A collective ([`Cluster::any`], which ends the solver's step too) stands for the
//! barrier. The messages are part of the exchange: they count in a rank's busy time.
//!
//! Rank `r` runs position `r`; rank 0 gathers every rank's timings and reports.

use std::sync::Arc;

use thelma_core::{Cluster, Incoming, Outgoing, Tag};

use super::graph::{links, sides, Side};
use super::protocol::{for_each_word, read_parity, write_parity, Shape};
use super::{cuda, drive_with, Backend, BenchConfig, CommError, Endpoint, WorkerReport};

/// The tag under which ranks send rank 0 their timings; streams travel under [`stream_tag`].
const REPORT_TAG: Tag = 0;

/// The tag of stream `stream`'s messages.
fn stream_tag(stream: u32) -> Tag {
    1 + stream as Tag
}

fn job_err(e: thelma_core::ClusterError) -> CommError {
    CommError::Job(e.0)
}

/// A side of position `pos` with the rank at its other end.
pub(super) fn peers(cfg: &BenchConfig, pos: usize) -> Vec<(Side, usize)> {
    let ls = links(cfg.devices.len(), cfg.topology);
    sides(&ls, pos)
        .into_iter()
        .map(|s| {
            let l = ls[s.link];
            (s, if s.writes_up { l.upper } else { l.lower })
        })
        .collect()
}

/// One iteration's messages: `out[k]`, what side `k` wrote, goes to its peer; `inc[k]`, side
/// `k`'s incoming buffer, receives what the peer wrote.
pub(super) fn trade(
    cluster: &dyn Cluster,
    peers: &[(Side, usize)],
    out: &[&[u8]],
    inc: &mut [&mut [u8]],
) -> Result<(), CommError> {
    let sends: Vec<Outgoing> = peers
        .iter()
        .zip(out)
        .map(|((s, to), bytes)| Outgoing {
            to: *to,
            tag: stream_tag(s.stream_out()),
            bytes,
        })
        .collect();
    let mut recvs: Vec<Incoming> = peers
        .iter()
        .zip(inc.iter_mut())
        .map(|((s, from), bytes)| Incoming {
            from: *from,
            tag: stream_tag(s.stream_in()),
            bytes,
        })
        .collect();
    cluster.exchange(&sends, &mut recvs).map_err(job_err)
}

/// A CPU position of a job: its sides' outgoing and incoming buffers, both parities each.
struct CpuRank {
    cluster: Arc<dyn Cluster>,
    device: usize,
    shape: Shape,
    peers: Vec<(Side, usize)>,
    out: Vec<Vec<u32>>,
    inc: Vec<Vec<u32>>,
    mismatches: Vec<u64>,
    /// The iteration under way.
    t: u32,
}

impl CpuRank {
    fn new(cfg: &BenchConfig, pos: usize, cluster: Arc<dyn Cluster>) -> Self {
        let peers = peers(cfg, pos);
        let words = cfg.shape.words();
        Self {
            cluster,
            device: cfg.devices[pos],
            shape: cfg.shape,
            out: vec![vec![0; 2 * words]; peers.len()],
            inc: vec![vec![0; 2 * words]; peers.len()],
            mismatches: vec![0; peers.len()],
            peers,
            t: 0,
        }
    }
}

impl Endpoint for CpuRank {
    fn exchange(&mut self, t: u32) -> Result<(), CommError> {
        self.t = t;
        let (words, w, r) = (self.shape.words(), write_parity(t), read_parity(t));
        for (k, (side, _)) in self.peers.iter().enumerate() {
            let out = &mut self.out[k][w * words..][..words];
            for_each_word(&self.shape, side.stream_out(), t, |p, v| out[p] = v);
            if t > 0 {
                let inc = &self.inc[k][r * words..][..words];
                let mut bad = 0u64;
                for_each_word(&self.shape, side.stream_in(), t - 1, |p, v| {
                    bad += u64::from(inc[p] != v)
                });
                self.mismatches[k] += bad;
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), CommError> {
        let (words, w) = (self.shape.words(), write_parity(self.t));
        let out: Vec<&[u8]> = self
            .out
            .iter()
            .map(|b| bytemuck::cast_slice(&b[w * words..][..words]))
            .collect();
        let mut inc: Vec<&mut [u8]> = self
            .inc
            .iter_mut()
            .map(|b| bytemuck::cast_slice_mut(&mut b[w * words..][..words]))
            .collect();
        trade(self.cluster.as_ref(), &self.peers, &out, &mut inc)
    }

    fn mismatches(&mut self) -> Result<Vec<(usize, u64)>, CommError> {
        Ok(self
            .peers
            .iter()
            .zip(&self.mismatches)
            .map(|((s, _), &m)| (s.link, m))
            .collect())
    }

    fn describe(&self) -> String {
        format!(
            "cpu:{} (rank {} of {})",
            self.device,
            self.cluster.rank(),
            self.cluster.size()
        )
    }
}

/// Runs this rank's position of `cfg` and gathers every rank's report on rank 0.
pub(super) fn run(
    backend: Backend,
    cfg: &BenchConfig,
    cluster: &Arc<dyn Cluster>,
) -> Result<Option<Vec<WorkerReport>>, CommError> {
    let (rank, size) = (cluster.rank(), cluster.size());
    if cfg.transport != super::Transport::Mpi {
        return Err(CommError::Unsupported {
            transport: cfg.transport,
            reason: "a job of processes measures the mpi transport only".into(),
        });
    }
    if cfg.devices.len() != size {
        return Err(CommError::Config {
            flag: "--devices",
            message: format!(
                "{} device(s) for a job of {size} processes: the MPI transport runs one device \
                 per process (mpirun -np {})",
                cfg.devices.len(),
                cfg.devices.len()
            ),
        });
    }
    let report = {
        let mut ep: Box<dyn Endpoint> = match backend {
            Backend::Cpu => Box::new(CpuRank::new(cfg, rank, cluster.clone())),
            Backend::Cuda => cuda::job_endpoint(cfg, rank, cluster.clone())?,
        };
        let pass = || cluster.any(false).map(|_| ()).map_err(job_err);
        drive_with(ep.as_mut(), &pass, cfg)?
    };
    let encode =
        |r: &WorkerReport| postcard::to_allocvec(r).map_err(|e| CommError::Job(e.to_string()));
    if rank > 0 {
        cluster
            .send(0, REPORT_TAG, &encode(&report)?)
            .map_err(job_err)?;
        return Ok(None);
    }
    let mut reports = vec![report];
    for from in 1..size {
        let bytes = cluster.recv(from, REPORT_TAG).map_err(job_err)?;
        reports.push(
            postcard::from_bytes(&bytes)
                .map_err(|e| CommError::Job(format!("rank {from}'s report: {e}")))?,
        );
    }
    Ok(Some(reports))
}

#[cfg(test)]
mod tests {
    use super::super::{run_job, summarise, BenchResult, Topology, Transport};
    use super::*;
    use thelma_core::LocalCluster;

    fn cfg(n: usize, topology: Topology) -> BenchConfig {
        BenchConfig {
            devices: (10..10 + n).collect(),
            topology,
            shape: Shape {
                arrays: 3,
                edge: 8,
                transpose: false,
            },
            transport: Transport::Mpi,
            iterations: 12,
            warmup: 2,
        }
    }

    /// Runs `cfg` on a job of one thread per rank; rank 0's result.
    fn job(cfg: &BenchConfig) -> Result<BenchResult, CommError> {
        let ranks = LocalCluster::job(cfg.devices.len());
        let handles: Vec<_> = ranks
            .into_iter()
            .map(|c| {
                let cfg = cfg.clone();
                std::thread::spawn(move || {
                    let c: Arc<dyn Cluster> = c;
                    let r = run_job(Backend::Cpu, &cfg, &c);
                    if let Err(e) = &r {
                        c.abort(&e.to_string(), 1);
                    }
                    r
                })
            })
            .collect();
        let mut out = handles.into_iter().map(|h| h.join().unwrap());
        let first = out.next().unwrap();
        assert!(out.all(|r| matches!(r, Ok(None) | Err(_))));
        first.map(|r| r.expect("rank 0 reports"))
    }

    #[test]
    fn ranks_exchange_every_stream_and_rank_0_reports_every_link() {
        for (n, topology) in [
            (2, Topology::Linear),
            (3, Topology::Linear),
            (2, Topology::Circular),
            (3, Topology::Circular),
        ] {
            let c = cfg(n, topology);
            let r = job(&c).unwrap();
            assert_eq!(r.transport, Transport::Mpi);
            assert_eq!(r.links.len(), topology.interfaces(n), "{n} {topology}");
            assert_eq!(r.per_device.len(), n);
            assert!(r
                .per_device
                .iter()
                .enumerate()
                .all(|(k, d)| d.device == 10 + k
                    && d.describe == format!("cpu:{} (rank {k} of {n})", 10 + k)));
            assert!(r.aggregate_gbs > 0.0 && r.links.iter().all(|l| l.gbs > 0.0));
        }
    }

    /// A rank whose messages stop at one iteration: its neighbour reads stale words.
    #[test]
    fn a_lost_message_is_reported_as_corruption_of_its_link() {
        let c = cfg(2, Topology::Linear);
        let ranks = LocalCluster::job(2);
        let handles: Vec<_> = ranks
            .into_iter()
            .map(|cl| {
                let c = c.clone();
                std::thread::spawn(move || {
                    let cl: Arc<dyn Cluster> = cl;
                    let pos = cl.rank();
                    let mut ep = CpuRank::new(&c, pos, cl.clone());
                    let pass = || cl.any(false).map(|_| ()).map_err(job_err);
                    // Rank 1 writes nothing at iteration 6 but still sends: rank 0 gets its
                    // words of iteration 4 (the same parity) at 7.
                    let mut lossy = Lossy {
                        inner: &mut ep,
                        skip: if pos == 1 { 6 } else { u32::MAX },
                    };
                    let r = drive_with(&mut lossy, &pass, &c);
                    // A failure ends the job, so that the other rank does not wait forever.
                    if let Err(e) = &r {
                        cl.abort(&e.to_string(), 1);
                    }
                    r.unwrap()
                })
            })
            .collect();
        let reports: Vec<WorkerReport> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        match summarise(Backend::Cpu, &c, &reports) {
            Err(CommError::Corrupted {
                link: 0,
                lower: 10,
                upper: 11,
                mismatches,
            }) => assert_eq!(mismatches, c.shape.words() as u64),
            other => panic!("{other:?}"),
        }
    }

    struct Lossy<'a> {
        inner: &'a mut CpuRank,
        skip: u32,
    }

    impl Endpoint for Lossy<'_> {
        fn exchange(&mut self, t: u32) -> Result<(), CommError> {
            if t == self.skip {
                self.inner.t = t;
                return Ok(());
            }
            self.inner.exchange(t)
        }
        fn finish(&mut self) -> Result<(), CommError> {
            self.inner.finish()
        }
        fn mismatches(&mut self) -> Result<Vec<(usize, u64)>, CommError> {
            self.inner.mismatches()
        }
        fn describe(&self) -> String {
            self.inner.describe()
        }
    }

    #[test]
    fn a_device_count_other_than_the_jobs_is_refused_naming_devices() {
        let c = cfg(3, Topology::Linear);
        let ranks = LocalCluster::job(2);
        let c0: Arc<dyn Cluster> = ranks[0].clone();
        match run_job(Backend::Cpu, &c, &c0) {
            Err(CommError::Config {
                flag: "--devices",
                message,
            }) => {
                assert!(message.contains("mpirun -np 3"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        // Outside a job the transport is refused, not run in one process.
        assert!(matches!(
            super::super::run(Backend::Cpu, &c),
            Err(CommError::Unsupported {
                transport: Transport::Mpi,
                ..
            })
        ));
    }
}
