//! The lattice domain, its 1D partition into slabs along z, and node indexing.
//!
//! Layout everywhere (host and device): structure of arrays, population-major, `f[i][z][y][x]` with x
//! fastest. A z-plane of one population is contiguous, so slabs are cut along z and the data crossing a
//! slab face is one coalesced row per population.

use std::ops::Range;

use serde::{Deserialize, Serialize};

/// Size and periodicity of the whole lattice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Domain {
    /// Nodes along x, y, z.
    pub size: [usize; 3],
    /// Periodic axes (a non-periodic axis is walled).
    pub periodic: [bool; 3],
}

impl Domain {
    pub fn new(size: [usize; 3], periodic: [bool; 3]) -> Self {
        Self { size, periodic }
    }
    pub fn nodes(&self) -> usize {
        self.size[0] * self.size[1] * self.size[2]
    }
    /// Nodes in one z-plane.
    pub fn plane(&self) -> usize {
        self.size[0] * self.size[1]
    }
}

/// Why a domain cannot be split as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    #[error(
        "cannot split {planes} z-planes over {slabs} devices: each device needs at least one plane"
    )]
    TooManySlabs { planes: usize, slabs: usize },
    #[error("a partition needs at least one slab")]
    NoSlabs,
}

/// Splits `planes` z-planes into `slabs` contiguous ranges whose sizes differ by at most one plane;
/// the first `planes % slabs` slabs get the extra plane.
pub fn partition(planes: usize, slabs: usize) -> Result<Vec<Range<usize>>, PartitionError> {
    if slabs == 0 {
        return Err(PartitionError::NoSlabs);
    }
    if slabs > planes {
        return Err(PartitionError::TooManySlabs { planes, slabs });
    }
    let base = planes / slabs;
    let extra = planes % slabs;
    let mut out = Vec::with_capacity(slabs);
    let mut z = 0;
    for s in 0..slabs {
        let n = base + usize::from(s < extra);
        out.push(z..z + n);
        z += n;
    }
    Ok(out)
}

/// One slab of a partitioned domain: what a compute module needs to know about its place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlabSpec {
    /// Position in slab order (0 owns the lowest planes).
    pub index: usize,
    /// Number of slabs.
    pub count: usize,
    pub domain: Domain,
    /// Global z-planes owned, `z.start..z.end`.
    pub z: Range<usize>,
}

impl SlabSpec {
    /// All slabs of `domain` split over `count` devices.
    pub fn split(domain: Domain, count: usize) -> Result<Vec<SlabSpec>, PartitionError> {
        Ok(partition(domain.size[2], count)?
            .into_iter()
            .enumerate()
            .map(|(index, z)| SlabSpec {
                index,
                count,
                domain,
                z,
            })
            .collect())
    }
    pub fn nx(&self) -> usize {
        self.domain.size[0]
    }
    pub fn ny(&self) -> usize {
        self.domain.size[1]
    }
    /// Planes owned.
    pub fn nz(&self) -> usize {
        self.z.len()
    }
    pub fn nodes(&self) -> usize {
        self.nx() * self.ny() * self.nz()
    }
    /// Whether a neighbour slab lies below (z − 1): any slab but the first, and every slab of a
    /// periodic z axis (the ring; a single slab is then its own neighbour).
    pub fn has_below(&self) -> bool {
        self.index > 0 || self.domain.periodic[2]
    }
    /// Whether a neighbour slab lies above (z + 1).
    pub fn has_above(&self) -> bool {
        self.index + 1 < self.count || self.domain.periodic[2]
    }
    /// Values in one interface buffer of a lattice on `stencil`: its crossing populations (five
    /// for D3Q19) of one plane.
    pub fn interface_values(&self, stencil: &crate::physics::Stencil) -> usize {
        stencil.crossing() * self.nx() * self.ny()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn partitions_are_contiguous_balanced_and_complete(planes in 1usize..2000, slabs in 1usize..64) {
            match partition(planes, slabs) {
                Err(PartitionError::TooManySlabs { .. }) => prop_assert!(slabs > planes),
                Err(e) => prop_assert!(false, "{}", e),
                Ok(p) => {
                    prop_assert_eq!(p.len(), slabs);
                    prop_assert_eq!(p[0].start, 0);
                    prop_assert_eq!(p[slabs - 1].end, planes);
                    for w in p.windows(2) {
                        prop_assert_eq!(w[0].end, w[1].start);
                    }
                    let min = p.iter().map(|r| r.len()).min().unwrap();
                    let max = p.iter().map(|r| r.len()).max().unwrap();
                    prop_assert!(min >= 1 && max - min <= 1);
                }
            }
        }
    }

    #[test]
    fn neighbours_follow_periodicity() {
        let walled = Domain::new([4, 4, 6], [false; 3]);
        let s = SlabSpec::split(walled, 3).unwrap();
        assert!(!s[0].has_below() && s[0].has_above());
        assert!(s[1].has_below() && s[1].has_above());
        assert!(s[2].has_below() && !s[2].has_above());
        let ring = Domain::new([4, 4, 6], [false, false, true]);
        let one = SlabSpec::split(ring, 1).unwrap();
        assert!(one[0].has_below() && one[0].has_above());
        assert_eq!(partition(6, 0), Err(PartitionError::NoSlabs));
    }
}
