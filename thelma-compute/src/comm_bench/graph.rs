//! Communication graphs of the benchmark: which device positions exchange with which, in the order
//! of the device list, as the solver's slabs do along z.

use std::fmt;
use std::str::FromStr;

/// How the devices of the ordered list are connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Topology {
    /// A chain: position p exchanges with p − 1 and p + 1 (the solver with walls along z).
    Linear,
    /// A ring: the chain plus a link from the last position back to the first (a periodic z axis).
    /// With one device the device is its own neighbour.
    Circular,
}

impl Topology {
    pub fn name(self) -> &'static str {
        match self {
            Topology::Linear => "linear",
            Topology::Circular => "circular",
        }
    }

    /// The fewest devices the graph needs to have a link.
    pub fn min_devices(self) -> usize {
        match self {
            Topology::Linear => 2,
            Topology::Circular => 1,
        }
    }

    /// Interfaces crossed per step by a solver on `devices` slabs with this graph: the `i − 1` of
    /// the paper's model for a chain, `i` for a ring.
    pub fn interfaces(self, devices: usize) -> usize {
        match self {
            Topology::Linear => devices.saturating_sub(1),
            Topology::Circular => devices,
        }
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A topology name that is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a topology (linear, circular)")]
pub struct UnknownTopology(pub String);

impl FromStr for Topology {
    type Err = UnknownTopology;
    fn from_str(s: &str) -> Result<Self, UnknownTopology> {
        match s.trim().to_ascii_lowercase().as_str() {
            "linear" => Ok(Topology::Linear),
            "circular" => Ok(Topology::Circular),
            other => Err(UnknownTopology(other.to_string())),
        }
    }
}

/// One interface between two positions of the device list. Like the solver's interface between
/// slab `lower` and slab `upper`, it carries an upward stream (lower → upper) and a downward stream
/// (upper → lower), each in two buffers of alternating parity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    pub index: usize,
    /// Position (in the device list) below the interface.
    pub lower: usize,
    /// Position above the interface; equal to `lower` for the ring of one device.
    pub upper: usize,
}

/// The links of `topology` over `devices` positions, in order: `(0, 1), (1, 2), …`, and for the ring
/// the closing `(n − 1, 0)` (for one device, `(0, 0)`). A chain of one device has no link.
pub fn links(devices: usize, topology: Topology) -> Vec<Link> {
    let mut out: Vec<Link> = (0..devices.saturating_sub(1))
        .map(|p| Link {
            index: p,
            lower: p,
            upper: p + 1,
        })
        .collect();
    if topology == Topology::Circular && devices >= 1 {
        out.push(Link {
            index: out.len(),
            lower: devices - 1,
            upper: 0,
        });
    }
    out
}

/// One side of a link as seen from one position: the stream it writes and the stream it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Side {
    pub link: usize,
    /// The position writes the upward stream (it is the link's lower end) and reads the downward
    /// one; otherwise the reverse.
    pub writes_up: bool,
}

impl Side {
    /// Stream id of what this side writes: `link * 2` upward, `link * 2 + 1` downward.
    pub fn stream_out(&self) -> u32 {
        stream_id(self.link, self.writes_up)
    }
    /// Stream id of what this side reads.
    pub fn stream_in(&self) -> u32 {
        stream_id(self.link, !self.writes_up)
    }
}

/// Stream id of one direction of one link.
pub fn stream_id(link: usize, upward: bool) -> u32 {
    (link * 2 + usize::from(!upward)) as u32
}

/// The sides of `position`: first the link below it (where it is the upper end, writing down), then
/// the link above it (where it is the lower end, writing up). A ring of one device has both sides on
/// its single link; a chain's ends have one side.
pub fn sides(links: &[Link], position: usize) -> Vec<Side> {
    let mut out = Vec::with_capacity(2);
    for l in links.iter().filter(|l| l.upper == position) {
        out.push(Side {
            link: l.index,
            writes_up: false,
        });
    }
    for l in links.iter().filter(|l| l.lower == position) {
        out.push(Side {
            link: l.index,
            writes_up: true,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(n: usize, t: Topology) -> Vec<(usize, usize)> {
        links(n, t).iter().map(|l| (l.lower, l.upper)).collect()
    }

    #[test]
    fn a_chain_links_neighbours_in_list_order() {
        assert_eq!(pairs(4, Topology::Linear), vec![(0, 1), (1, 2), (2, 3)]);
        assert_eq!(pairs(2, Topology::Linear), vec![(0, 1)]);
        assert!(pairs(1, Topology::Linear).is_empty());
        assert!(pairs(0, Topology::Linear).is_empty());
    }

    #[test]
    fn a_ring_closes_the_chain_and_a_single_device_is_its_own_neighbour() {
        assert_eq!(
            pairs(4, Topology::Circular),
            vec![(0, 1), (1, 2), (2, 3), (3, 0)]
        );
        // Two devices in a ring share two distinct interfaces, as two periodic slabs do.
        assert_eq!(pairs(2, Topology::Circular), vec![(0, 1), (1, 0)]);
        assert_eq!(pairs(1, Topology::Circular), vec![(0, 0)]);
        assert!(pairs(0, Topology::Circular).is_empty());
    }

    #[test]
    fn every_stream_has_exactly_one_writer_and_one_reader() {
        for t in [Topology::Linear, Topology::Circular] {
            for n in 1..=6 {
                let ls = links(n, t);
                let mut written = vec![0; ls.len() * 2];
                let mut read = vec![0; ls.len() * 2];
                for p in 0..n {
                    let s = sides(&ls, p);
                    // Interior positions and every ring position have two sides.
                    let expect = if t == Topology::Circular || (p > 0 && p + 1 < n) {
                        2
                    } else {
                        usize::from(n > 1)
                    };
                    assert_eq!(s.len(), expect, "{t} n={n} p={p}");
                    for side in s {
                        written[side.stream_out() as usize] += 1;
                        read[side.stream_in() as usize] += 1;
                        let l = ls[side.link];
                        let writer_is = if side.writes_up { l.lower } else { l.upper };
                        assert_eq!(writer_is, p);
                    }
                }
                assert!(written.iter().all(|&c| c == 1), "{t} n={n}: {written:?}");
                assert!(read.iter().all(|&c| c == 1), "{t} n={n}: {read:?}");
                assert_eq!(ls.len(), t.interfaces(n));
            }
        }
    }

    #[test]
    fn topology_names_round_trip() {
        for t in [Topology::Linear, Topology::Circular] {
            assert_eq!(t.name().parse::<Topology>().unwrap(), t);
        }
        assert!("ring".parse::<Topology>().is_err());
    }
}
