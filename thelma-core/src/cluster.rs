//! Runs spread over several processes (the ranks of an MPI job, TheLMA on GPU clusters): the one
//! view the runtime has of them, and the [`Layout`] saying which rank and device runs each slab.
//!
//! Rank 0 runs the coordinator: the caller's [`crate::Runtime`], whose slabs on other ranks are
//! served through proxies that forward each command and its reply as a message. Every other rank
//! runs [`crate::Runtime::serve`]: its own slabs' workers, fed by relays. Inside a rank, slabs
//! exchange through their channels as in one process; a channel whose writer is on another rank
//! is written into a host-memory *outbox* on the writer's rank, and after each step the rank whose
//! workers arrive last at the step barrier sends its outboxes and receives its inboxes
//! ([`Cluster::exchange`]) and joins every rank's stop decision ([`Cluster::any`]), so that all
//! stop after the same step.
//!
//! Failures never hang a job: the coordinator, on the first error, calls [`Cluster::abort`], which
//! ends every rank (MPI: `MPI_Abort`) with the error's message.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::domain::{Domain, PartitionError, SlabSpec, SIDE_COUNT};
use parking_lot::{Condvar, Mutex};

/// A message tag. MPI matches a message by its sender, receiver and tag, so a tag need only tell
/// apart the messages between one pair of ranks: each slab's commands and replies travel between
/// rank 0 and the slab's rank under [`command_tag`], and its rank alone receives its channels'
/// messages, under [`exchange_tag`]; both are numbered by the slab's place among its rank's slabs
/// ([`Layout::places`]), so the tags bound the slabs of one rank, never a job's.
pub type Tag = i32;

/// The tag of the commands and replies of the slab at `place` among its rank's slabs.
pub fn command_tag(place: usize) -> Tag {
    place as Tag
}

/// The tag of the channel that the slab at `place` among its rank's slabs reads across `side`
/// ([`SIDES`]; a slab's are 0, from below, and 1, from above).
///
/// [`SIDES`]: crate::domain::SIDES
pub fn exchange_tag(place: usize, side: usize) -> Tag {
    EXCHANGE_TAGS + (SIDE_COUNT * place + side) as Tag
}

/// The first exchange tag; command tags stay below it. MPI guarantees tags up to 32,767.
const EXCHANGE_TAGS: Tag = 16_384;

/// The tag of what ranks say before their slabs exist (their layouts), below the exchange's and
/// above any command's.
pub(crate) const SETUP_TAG: Tag = EXCHANGE_TAGS - 1;

/// The most slabs (subdomains) one rank of a job may run: each one's exchange tags (one per side)
/// must be valid MPI tags. A job's count is not bounded by its tags.
pub const MAX_SLABS_PER_RANK: usize = (32_768 - EXCHANGE_TAGS as usize) / SIDE_COUNT;

/// Refuses a tag MPI need not accept (it guarantees 0 to 32,767): the local job holds the
/// runtime to what an MPI job can carry.
fn check_tag(tag: Tag) -> Result<(), ClusterError> {
    if (0..=32_767).contains(&tag) {
        Ok(())
    } else {
        Err(ClusterError(format!(
            "tag {tag} is outside MPI's guaranteed 0 to 32,767"
        )))
    }
}

/// A failed message, collective or job.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ClusterError(pub String);

/// One send of a step's exchange: `bytes` to `to` under `tag`.
pub struct Outgoing<'a> {
    pub to: usize,
    pub tag: Tag,
    pub bytes: &'a [u8],
}

/// One receive of a step's exchange: into `bytes` (exactly its length) from `from` under `tag`.
pub struct Incoming<'a> {
    pub from: usize,
    pub tag: Tag,
    pub bytes: &'a mut [u8],
}

/// The processes of a job. Calls may come from several threads at once (MPI_THREAD_MULTIPLE):
/// point-to-point messages from the coordinator's proxies and the ranks' relays, and the step
/// exchange and its collective from one thread per rank at a time.
pub trait Cluster: Send + Sync {
    /// This process's rank, 0 being the coordinator.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn size(&self) -> usize;
    /// Sends `bytes` to rank `to`; messages between two ranks under one tag arrive in order.
    fn send(&self, to: usize, tag: Tag, bytes: &[u8]) -> Result<(), ClusterError>;
    /// The next message from rank `from` under `tag`, waiting for it.
    fn recv(&self, from: usize, tag: Tag) -> Result<Vec<u8>, ClusterError>;
    /// One step's exchange: every send and receive posted at once, returning when all are done.
    fn exchange(
        &self,
        sends: &[Outgoing<'_>],
        recvs: &mut [Incoming<'_>],
    ) -> Result<(), ClusterError>;
    /// Whether any rank passes `true`: a collective every rank calls once per step, in step order.
    fn any(&self, flag: bool) -> Result<bool, ClusterError>;
    /// Ends the job after a failure with `message`, with exit status `code`. Over MPI it prints
    /// the message and ends every process; in one process ([`LocalCluster`]) every waiting or later
    /// call on every rank fails at once, and it returns.
    fn abort(&self, message: &str, code: i32);
}

/// Which rank and which of its devices runs each slab of a domain, in slab (z) order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub slabs: Vec<SlabSpec>,
    pub devices: Vec<usize>,
    pub ranks: Vec<usize>,
}

impl Layout {
    /// One process: `domain` split evenly over `devices`.
    pub fn single(domain: Domain, devices: &[usize]) -> Result<Layout, PartitionError> {
        Self::spread(domain, 1, devices)
    }

    /// `ranks` processes, each running one slab per device of `devices`: the domain is split
    /// evenly into `ranks × devices.len()` slabs, rank r taking the r-th run of them.
    pub fn spread(
        domain: Domain,
        ranks: usize,
        devices: &[usize],
    ) -> Result<Layout, PartitionError> {
        let per = devices.len();
        let slabs = SlabSpec::split(domain, ranks * per)?;
        Ok(Layout {
            devices: (0..slabs.len()).map(|s| devices[s % per]).collect(),
            ranks: (0..slabs.len()).map(|s| s / per).collect(),
            slabs,
        })
    }

    /// The slabs rank `rank` runs.
    pub fn local(&self, rank: usize) -> Vec<usize> {
        (0..self.slabs.len())
            .filter(|&s| self.ranks[s] == rank)
            .collect()
    }

    /// Each slab's place among its rank's slabs (in slab order): what its message tags are
    /// numbered by ([`command_tag`], [`exchange_tag`]).
    pub fn places(&self) -> Vec<usize> {
        let mut next = vec![0; self.rank_count()];
        self.ranks
            .iter()
            .map(|&r| {
                next[r] += 1;
                next[r] - 1
            })
            .collect()
    }

    /// The number of ranks the layout names (one more than the highest).
    pub fn rank_count(&self) -> usize {
        self.ranks.iter().max().map_or(1, |r| r + 1)
    }

    /// The domain the slabs tile.
    pub fn domain(&self) -> Domain {
        self.slabs[0].domain
    }
}

/// A job of `size` ranks inside one process, one thread (or more) per rank: what the tests of the
/// cluster runtime run on, with the same protocol as MPI. Sends never wait (messages are queued).
pub struct LocalCluster {
    rank: usize,
    hub: Arc<Hub>,
}

struct Hub {
    size: usize,
    state: Mutex<HubState>,
    cv: Condvar,
}

#[derive(Default)]
struct HubState {
    /// Messages in flight, by (from, to, tag).
    queues: HashMap<(usize, usize, Tag), VecDeque<Vec<u8>>>,
    /// The reduction under way for [`Cluster::any`]: arrivals, the flag so far, its generation.
    arrived: usize,
    flag: bool,
    generation: u64,
    result: bool,
    aborted: Option<String>,
}

impl LocalCluster {
    /// One handle per rank of a job of `size` ranks.
    pub fn job(size: usize) -> Vec<Arc<LocalCluster>> {
        let hub = Arc::new(Hub {
            size,
            state: Mutex::new(HubState::default()),
            cv: Condvar::new(),
        });
        (0..size)
            .map(|rank| {
                Arc::new(LocalCluster {
                    rank,
                    hub: hub.clone(),
                })
            })
            .collect()
    }

    /// The message of the job's abort, once aborted.
    pub fn aborted(&self) -> Option<String> {
        self.hub.state.lock().aborted.clone()
    }

    fn check(s: &HubState) -> Result<(), ClusterError> {
        match &s.aborted {
            Some(m) => Err(ClusterError(format!("the job was aborted: {m}"))),
            None => Ok(()),
        }
    }
}

impl Cluster for LocalCluster {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.hub.size
    }

    fn send(&self, to: usize, tag: Tag, bytes: &[u8]) -> Result<(), ClusterError> {
        check_tag(tag)?;
        let mut s = self.hub.state.lock();
        Self::check(&s)?;
        s.queues
            .entry((self.rank, to, tag))
            .or_default()
            .push_back(bytes.to_vec());
        self.hub.cv.notify_all();
        Ok(())
    }

    fn recv(&self, from: usize, tag: Tag) -> Result<Vec<u8>, ClusterError> {
        check_tag(tag)?;
        let mut s = self.hub.state.lock();
        loop {
            Self::check(&s)?;
            if let Some(m) = s
                .queues
                .get_mut(&(from, self.rank, tag))
                .and_then(|q| q.pop_front())
            {
                return Ok(m);
            }
            self.hub.cv.wait(&mut s);
        }
    }

    fn exchange(
        &self,
        sends: &[Outgoing<'_>],
        recvs: &mut [Incoming<'_>],
    ) -> Result<(), ClusterError> {
        for o in sends {
            self.send(o.to, o.tag, o.bytes)?;
        }
        for i in recvs.iter_mut() {
            let m = self.recv(i.from, i.tag)?;
            if m.len() != i.bytes.len() {
                return Err(ClusterError(format!(
                    "a message of {} bytes from rank {} where {} were expected",
                    m.len(),
                    i.from,
                    i.bytes.len()
                )));
            }
            i.bytes.copy_from_slice(&m);
        }
        Ok(())
    }

    fn any(&self, flag: bool) -> Result<bool, ClusterError> {
        let mut s = self.hub.state.lock();
        Self::check(&s)?;
        s.flag |= flag;
        s.arrived += 1;
        if s.arrived == self.hub.size {
            s.result = s.flag;
            s.flag = false;
            s.arrived = 0;
            s.generation += 1;
            self.hub.cv.notify_all();
            return Ok(s.result);
        }
        let generation = s.generation;
        while s.generation == generation {
            Self::check(&s)?;
            self.hub.cv.wait(&mut s);
        }
        Ok(s.result)
    }

    fn abort(&self, message: &str, _code: i32) {
        let mut s = self.hub.state.lock();
        s.aborted.get_or_insert_with(|| message.to_string());
        self.hub.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_layout_gives_each_rank_a_run_of_slabs_one_per_device() {
        let d = Domain::new([4, 4, 24], [false; 3]);
        let l = Layout::spread(d, 3, &[0, 1]).unwrap();
        assert_eq!(l.ranks, vec![0, 0, 1, 1, 2, 2]);
        assert_eq!(l.devices, vec![0, 1, 0, 1, 0, 1]);
        assert_eq!(l.local(1), vec![2, 3]);
        assert_eq!(l.rank_count(), 3);
        assert_eq!(l.slabs[5].z, 20..24);
        assert_eq!(Layout::single(d, &[7]).unwrap().ranks, vec![0]);
    }

    /// Each slab's place counts its rank's slabs before it; the tags of its rank's slabs (and of
    /// its rank's channels) are distinct, within MPI's guaranteed range, and apart from the setup
    /// tag, up to the most slabs a rank may run.
    #[test]
    fn tags_are_distinct_per_rank_and_valid_mpi_tags() {
        let d = Domain::new([2, 2, 8], [false; 3]);
        let l = Layout {
            ranks: vec![1, 0, 1, 1, 2, 0, 2, 1],
            devices: vec![0; 8],
            slabs: SlabSpec::split(d, 8).unwrap(),
        };
        assert_eq!(l.places(), vec![0, 0, 1, 2, 0, 1, 1, 3]);
        let mut tags: Vec<Tag> = (0..MAX_SLABS_PER_RANK).map(command_tag).collect();
        for place in 0..MAX_SLABS_PER_RANK {
            tags.extend((0..SIDE_COUNT).map(|side| exchange_tag(place, side)));
        }
        tags.push(SETUP_TAG);
        let n = tags.len();
        tags.sort_unstable();
        tags.dedup();
        assert_eq!(tags.len(), n);
        assert!(
            tags[0] >= 0 && tags[n - 1] <= 32_767,
            "{:?}",
            (tags[0], tags[n - 1])
        );
        // The local job refuses what MPI need not carry, as the runtime's tests run over it.
        let one = &LocalCluster::job(1)[0];
        assert!(one.send(0, 32_768, &[]).is_err() && one.send(0, -1, &[]).is_err());
        one.send(0, 32_767, &[7]).unwrap();
        assert_eq!(one.recv(0, 32_767).unwrap(), vec![7]);
    }

    #[test]
    fn the_local_job_orders_messages_joins_flags_and_aborts_every_waiter() {
        let job = LocalCluster::job(3);
        let handles: Vec<_> = job
            .iter()
            .cloned()
            .map(|c| {
                std::thread::spawn(move || {
                    let r = c.rank();
                    let next = (r + 1) % 3;
                    let prev = (r + 2) % 3;
                    let mut got = Vec::new();
                    for step in 0..50u8 {
                        let out = [r as u8, step];
                        let mut into = [0u8; 2];
                        c.exchange(
                            &[Outgoing {
                                to: next,
                                tag: 5,
                                bytes: &out,
                            }],
                            &mut [Incoming {
                                from: prev,
                                tag: 5,
                                bytes: &mut into,
                            }],
                        )
                        .unwrap();
                        got.push(into);
                        // Rank 1 asks to stop at step 20: every rank learns it at the same step.
                        if c.any(r == 1 && step == 20).unwrap() {
                            return (step, got);
                        }
                    }
                    (u8::MAX, got)
                })
            })
            .collect();
        for (r, h) in handles.into_iter().enumerate() {
            let (stopped, got) = h.join().unwrap();
            assert_eq!(stopped, 20);
            let prev = ((r + 2) % 3) as u8;
            assert!(got.iter().enumerate().all(|(k, m)| *m == [prev, k as u8]));
        }

        let job = LocalCluster::job(2);
        let waiter = {
            let c = job[1].clone();
            std::thread::spawn(move || c.recv(0, 9))
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        job[0].abort("rank 0 failed", 1);
        let e = waiter.join().unwrap().unwrap_err();
        assert!(e.0.contains("rank 0 failed"), "{e}");
        assert!(job[1].any(false).is_err());
        assert_eq!(job[1].aborted().as_deref(), Some("rank 0 failed"));
    }
}
