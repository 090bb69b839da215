//! The exchange transport layer: how the populations crossing an interface travel between the
//! modules of two neighbouring slabs.
//!
//! Every interface is two **channels**, one per direction, each **owned by its reader**: the slab
//! above reads the channel going up and allocates it on its device, the slab below the one going
//! down. A writer only stores into its neighbour's channel, so on a GPU its stores are posted
//! writes and its reader's loads stay local. A channel holds two buffers of the crossing planes
//! (parity 0 and 1): step `t` writes buffer `t % 2` and reads buffer `(t + 1) % 2`, and the runtime's
//! barrier orders one step's stores before the next step's loads (DESIGN §3).
//!
//! Where a channel lives is its [`Transport`], chosen per channel by the module factory from the
//! two devices and the user's [`TransportChoice`]: page-locked mapped host memory (TheLMA's
//! zero-copy, reachable from any device), device memory where both slabs share a GPU, or the
//! reader's device memory written over NVLink or PCIe where the writer's GPU has peer access to it.
//! The kernels and the CPU module only ever see four addresses per step, so a new transport is an
//! allocation and an address, never a change to a step.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::domain::{SlabSpec, SIDE_COUNT};

/// Where a channel's memory lives, and so how its writer reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// Page-locked host memory mapped into every device (TheLMA's zero-copy buffers): the writer's
    /// kernel stores over the host link and the reader's kernel loads over it. The CPU module's
    /// slabs share plain host memory, which is this transport without the mapping.
    ZeroCopy,
    /// Device memory of the GPU both slabs run on: stores and loads stay in that GPU's memory.
    Device,
    /// The reader's device memory, stored into by the writer's kernel over NVLink or PCIe (peer
    /// access): remote writes are posted, and the reader loads locally.
    Peer,
}

impl Transport {
    pub const ALL: [Transport; 3] = [Transport::ZeroCopy, Transport::Device, Transport::Peer];

    /// The name on the command line, in case files and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Transport::ZeroCopy => "zero-copy",
            Transport::Device => "device",
            Transport::Peer => "peer",
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The transport a run asks for: `auto` (per channel, the fastest the two devices allow) or one
/// transport for every channel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TransportChoice {
    #[default]
    Auto,
    Fixed(Transport),
}

impl TransportChoice {
    /// Parses `auto`, `zero-copy`, `device` or `peer`.
    pub fn parse(s: &str) -> Result<Self, UnknownTransport> {
        s.parse()
    }
}

/// A transport name that is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a transport (auto, zero-copy, device, peer)")]
pub struct UnknownTransport(pub String);

impl FromStr for TransportChoice {
    type Err = UnknownTransport;
    fn from_str(s: &str) -> Result<Self, UnknownTransport> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(TransportChoice::Auto),
            "zero-copy" | "zerocopy" | "host" => Ok(TransportChoice::Fixed(Transport::ZeroCopy)),
            "device" => Ok(TransportChoice::Fixed(Transport::Device)),
            "peer" | "p2p" => Ok(TransportChoice::Fixed(Transport::Peer)),
            _ => Err(UnknownTransport(s.trim().to_string())),
        }
    }
}

impl fmt::Display for TransportChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportChoice::Auto => f.write_str("auto"),
            TransportChoice::Fixed(t) => f.write_str(t.name()),
        }
    }
}

impl Serialize for TransportChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for TransportChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// What a GPU backend knows about a pair of devices when it picks a channel's transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevicePair {
    /// Whether the reader and the writer are the same device.
    pub same: bool,
    /// Whether the writer's device can store into the reader's memory (peer access).
    pub peer_access: bool,
}

/// Why a transport cannot carry a channel.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--transport {asked}: {why}")]
pub struct TransportRefused {
    pub asked: Transport,
    pub why: String,
}

/// The transport of a channel between two GPUs under `choice`. `auto`: device memory on one GPU,
/// peer memory where the writer has peer access, zero-copy otherwise. A fixed choice must fit the
/// pair: `device` only between slabs of one GPU, `peer` only between GPUs with peer access;
/// `zero-copy` always fits.
pub fn gpu_transport(
    choice: TransportChoice,
    reader: usize,
    writer: usize,
    pair: DevicePair,
) -> Result<Transport, TransportRefused> {
    match choice {
        TransportChoice::Auto if pair.same => Ok(Transport::Device),
        TransportChoice::Auto if pair.peer_access => Ok(Transport::Peer),
        TransportChoice::Auto => Ok(Transport::ZeroCopy),
        TransportChoice::Fixed(Transport::ZeroCopy) => Ok(Transport::ZeroCopy),
        TransportChoice::Fixed(asked @ Transport::Device) if !pair.same => Err(TransportRefused {
            asked,
            why: format!(
                "device memory joins slabs of one GPU, and GPUs {writer} and {reader} are two \
                 (use peer or zero-copy)"
            ),
        }),
        TransportChoice::Fixed(asked @ Transport::Peer) if pair.same => Err(TransportRefused {
            asked,
            why: format!(
                "GPU {reader} holds both sides of this interface: peer memory joins two GPUs (use \
                 device or zero-copy)"
            ),
        }),
        TransportChoice::Fixed(asked @ Transport::Peer) if !pair.peer_access => {
            Err(TransportRefused {
                asked,
                why: format!("GPU {writer} has no peer access to GPU {reader} (use zero-copy)"),
            })
        }
        TransportChoice::Fixed(t) => Ok(t),
    }
}

/// The memory of one channel: two buffers (parity 0 and 1) of [`SlabSpec::interface_values`]
/// values of the run's storage (and a temperature lattice's plane after them), laid out
/// `[parity][crossing population][y][x]`. Its reader allocates it; its writer stores into it.
///
/// # Safety
/// Modules read and write `bytes()` bytes from `address()` on several threads, in the kernels too,
/// so an implementation must guarantee that `address()` is the start of an allocation of at least
/// `bytes()` bytes, aligned to 8 bytes, that stays valid and does not move for as long as the value
/// lives, that nothing else reads or writes it except under the step protocol (DESIGN §3), and that
/// every method returns the same value for the value's whole life. The trait is `unsafe` because
/// safe code could otherwise hand a module a dangling or short buffer.
pub unsafe trait Channel: Send + Sync {
    /// Base address: a host pointer for host memory ([`Transport::ZeroCopy`]; under unified
    /// addressing also the address the kernels use), a device address otherwise.
    fn address(&self) -> *mut u8;
    /// Size in bytes.
    fn bytes(&self) -> usize;
    /// Where the memory lives.
    fn transport(&self) -> Transport;
    /// The device holding the memory (the reader's), for device and peer memory.
    fn device(&self) -> Option<usize>;
}

/// Offset (in values) of the buffer of `parity` inside a channel.
#[inline]
pub fn channel_offset(values_per_buffer: usize, parity: usize) -> usize {
    parity * values_per_buffer
}

/// The channels a subdomain uses, by side ([`crate::domain::SIDES`]): those it reads (its own) and
/// those it writes (its neighbours'). A slab uses sides 0 and 1 only, four channels; a periodic
/// single slab is its own neighbour: it writes upward into the channel it reads from below, and
/// downward into the one it reads from above.
#[derive(Clone, Default)]
pub struct Links {
    /// What arrives from the neighbour across each side (written by it).
    pub reads: [Option<Arc<dyn Channel>>; SIDE_COUNT],
    /// This subdomain's layer going across each side: the neighbour's channel, which it reads from
    /// the opposite side.
    pub writes: [Option<Arc<dyn Channel>>; SIDE_COUNT],
}

impl Links {
    /// Populations arriving from the slab below (going up).
    pub fn from_below(&self) -> &Option<Arc<dyn Channel>> {
        &self.reads[0]
    }
    /// Populations arriving from the slab above (going down).
    pub fn from_above(&self) -> &Option<Arc<dyn Channel>> {
        &self.reads[1]
    }
    /// This slab's top layer going up, into the slab above's channel.
    pub fn to_above(&self) -> &Option<Arc<dyn Channel>> {
        &self.writes[1]
    }
    /// This slab's bottom layer going down, into the slab below's channel.
    pub fn to_below(&self) -> &Option<Arc<dyn Channel>> {
        &self.writes[0]
    }

    /// Every channel held, with its side and whether this subdomain writes it.
    pub fn all(&self) -> impl Iterator<Item = (usize, &Arc<dyn Channel>, bool)> {
        let reads = self.reads.iter().enumerate().map(|(s, c)| (s, c, false));
        let writes = self.writes.iter().enumerate().map(|(s, c)| (s, c, true));
        reads
            .chain(writes)
            .filter_map(|(s, c, w)| c.as_ref().map(|c| (s, c, w)))
    }

    /// Whether a channel crosses a side other than the two z faces (the partition cuts x or y).
    pub fn crosses_x_or_y(&self) -> bool {
        self.all().any(|(s, _, _)| s >= 2)
    }

    /// Checks that every channel holds `need(side)` bytes.
    pub fn check(&self, need: impl Fn(usize) -> usize) -> Result<(), crate::ComputeError> {
        for (side, c, _) in self.all() {
            let need = need(side);
            if c.bytes() < need {
                return Err(crate::ComputeError::Invalid(format!(
                    "a {} channel of {} bytes, {need} needed",
                    c.transport(),
                    c.bytes()
                )));
            }
        }
        Ok(())
    }
}

/// The transports of the channels one subdomain reads, by side (`None` where it has no neighbour
/// across that side).
pub type SlabTransports = [Option<Transport>; SIDE_COUNT];

/// The transport of every channel of rank `rank`'s subdomains, for subdomains on `devices` and
/// `ranks` (subdomain order; all on rank 0 in one process), asked of `transport(reader, writer)`:
/// a subdomain reads across each side what its neighbour there writes ([`SlabSpec::neighbour`];
/// for slabs, slab s reads from below what slab s − 1 writes, slab n − 1 when z is periodic, and
/// from above what slab s + 1 writes). Each other rank's subdomain gets no channels (that rank
/// plans it on its own host). A channel whose writer is on another rank is host memory
/// ([`Transport::ZeroCopy`]), which that rank's messages fill after each step.
pub fn plan<E>(
    slabs: &[SlabSpec],
    devices: &[usize],
    ranks: &[usize],
    rank: usize,
    mut transport: impl FnMut(usize, usize) -> Result<Transport, E>,
) -> Result<Vec<SlabTransports>, E> {
    let mut out = Vec::with_capacity(slabs.len());
    for (s, slab) in slabs.iter().enumerate() {
        let mut t = [None; SIDE_COUNT];
        if ranks[s] == rank {
            for (side, t) in t.iter_mut().enumerate() {
                let Some(w) = slab.neighbour(side) else {
                    continue;
                };
                *t = Some(if ranks[w] == ranks[s] {
                    transport(devices[s], devices[w])?
                } else {
                    Transport::ZeroCopy
                });
            }
        }
        out.push(t);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Domain;

    const SAME: DevicePair = DevicePair {
        same: true,
        peer_access: false,
    };
    const PEERS: DevicePair = DevicePair {
        same: false,
        peer_access: true,
    };
    const APART: DevicePair = DevicePair {
        same: false,
        peer_access: false,
    };

    #[test]
    fn auto_takes_device_memory_on_one_gpu_peer_memory_between_peers_and_zero_copy_otherwise() {
        let auto = TransportChoice::Auto;
        assert_eq!(gpu_transport(auto, 0, 0, SAME), Ok(Transport::Device));
        assert_eq!(gpu_transport(auto, 1, 0, PEERS), Ok(Transport::Peer));
        assert_eq!(gpu_transport(auto, 1, 0, APART), Ok(Transport::ZeroCopy));
    }

    #[test]
    fn a_fixed_transport_that_does_not_fit_the_pair_is_refused_naming_the_option() {
        let fixed = TransportChoice::Fixed;
        for pair in [SAME, PEERS, APART] {
            assert_eq!(
                gpu_transport(fixed(Transport::ZeroCopy), 1, 0, pair),
                Ok(Transport::ZeroCopy)
            );
        }
        assert_eq!(
            gpu_transport(fixed(Transport::Device), 0, 0, SAME),
            Ok(Transport::Device)
        );
        assert_eq!(
            gpu_transport(fixed(Transport::Peer), 1, 0, PEERS),
            Ok(Transport::Peer)
        );
        for (t, pair) in [
            (Transport::Device, PEERS),
            (Transport::Device, APART),
            (Transport::Peer, SAME),
            (Transport::Peer, APART),
        ] {
            let e = gpu_transport(fixed(t), 1, 0, pair).unwrap_err();
            assert_eq!(e.asked, t);
            assert!(
                e.to_string().starts_with(&format!("--transport {t}: ")),
                "{e}"
            );
        }
    }

    #[test]
    fn a_rank_plans_its_own_slabs_and_takes_host_memory_from_other_ranks() {
        let ring = Domain::new([4, 4, 12], [false, false, true]);
        let slabs = SlabSpec::split(ring, 4).unwrap();
        let mut asked = Vec::new();
        let p = plan(&slabs, &[0, 1, 0, 1], &[0, 0, 1, 1], 1, |r, w| {
            asked.push((r, w));
            Ok::<_, ()>(Transport::Peer)
        })
        .unwrap();
        let z = |p: &SlabTransports| {
            assert!(p[2..].iter().all(Option::is_none), "slabs cross z only");
            [p[0], p[1]]
        };
        assert_eq!(z(&p[0]), [None, None]);
        assert_eq!(z(&p[1]), [None, None]);
        assert_eq!(z(&p[2]), [Some(Transport::ZeroCopy), Some(Transport::Peer)]);
        assert_eq!(z(&p[3]), [Some(Transport::Peer), Some(Transport::ZeroCopy)]);
        // Only this rank's pairs reach the factory (slab 2 reads slab 3, slab 3 reads slab 2).
        assert_eq!(asked, vec![(0, 1), (1, 0)]);
    }

    #[test]
    fn choices_read_and_print_by_name() {
        for s in ["auto", "zero-copy", "device", "peer"] {
            let c: TransportChoice = s.parse().unwrap();
            assert_eq!(c.to_string(), s);
        }
        assert_eq!("P2P".parse(), Ok(TransportChoice::Fixed(Transport::Peer)));
        let e = "nvlink".parse::<TransportChoice>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "`nvlink` is not a transport (auto, zero-copy, device, peer)"
        );
    }

    #[test]
    fn the_plan_asks_each_reader_about_its_writer_around_a_periodic_ring() {
        let open = Domain::new([4, 4, 12], [false; 3]);
        let ring = Domain::new([4, 4, 12], [false, false, true]);
        let ask = |r: usize, w: usize| -> Result<Transport, ()> {
            Ok(if r == w {
                Transport::Device
            } else {
                Transport::Peer
            })
        };
        let z = |p: Vec<SlabTransports>| -> Vec<[Option<Transport>; 2]> {
            p.iter().map(|t| [t[0], t[1]]).collect()
        };
        let slabs = SlabSpec::split(open, 3).unwrap();
        let p = plan(&slabs, &[0, 0, 1], &[0; 3], 0, ask).unwrap();
        assert_eq!(
            z(p),
            vec![
                [None, Some(Transport::Device)],
                [Some(Transport::Device), Some(Transport::Peer)],
                [Some(Transport::Peer), None],
            ]
        );
        let slabs = SlabSpec::split(ring, 3).unwrap();
        let p = plan(&slabs, &[0, 0, 1], &[0; 3], 0, ask).unwrap();
        assert_eq!(p[0][0], Some(Transport::Peer), "slab 0 reads slab 2 below");
        assert_eq!(p[2][1], Some(Transport::Peer), "slab 2 reads slab 0 above");
        let one = SlabSpec::split(ring, 1).unwrap();
        assert_eq!(
            z(plan(&one, &[0], &[0], 0, ask).unwrap()),
            vec![[Some(Transport::Device); 2]]
        );
        // The first refusal ends the plan: slab 0 reads from slab 2, on GPU 1.
        let refused = plan(&slabs, &[0, 0, 1], &[0; 3], 0, |r, w| {
            if r == w {
                Ok(Transport::Device)
            } else {
                Err((r, w))
            }
        });
        assert_eq!(refused, Err((0, 1)));
    }
}
