//! The lattice domain, its partition into subdomains, and node indexing.
//!
//! Layout everywhere (host and device): structure of arrays, population-major, `f[i][z][y][x]` with x
//! fastest. A z-plane of one population is contiguous, so the default partition cuts slabs along z
//! and the data crossing a slab face is one coalesced row per population. A partition may also cut
//! along x and y ([`SlabSpec::grid`]): its subdomains form a grid, and each exchanges with the
//! neighbours across its 6 faces and 12 edges ([`SIDES`]), the directions D3Q19's velocities cross.

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
    #[error(
        "cannot cut {nodes} nodes along {axis} into {parts} parts: each needs at least one node"
    )]
    TooManyParts {
        axis: char,
        nodes: usize,
        parts: usize,
    },
}

/// The directions from a subdomain to the neighbours it exchanges with: its 6 faces, then its 12
/// edges (the D3Q19 velocities with two non-zero components). Opposite sides are paired, side
/// `s ^ 1` being the opposite of side `s`; sides 0 and 1 are below (z − 1) and above (z + 1), a
/// slab's two.
pub const SIDES: [[i32; 3]; 18] = [
    [0, 0, -1],
    [0, 0, 1],
    [-1, 0, 0],
    [1, 0, 0],
    [0, -1, 0],
    [0, 1, 0],
    [-1, -1, 0],
    [1, 1, 0],
    [-1, 1, 0],
    [1, -1, 0],
    [-1, 0, -1],
    [1, 0, 1],
    [-1, 0, 1],
    [1, 0, -1],
    [0, -1, -1],
    [0, 1, 1],
    [0, -1, 1],
    [0, 1, -1],
];

/// The number of [`SIDES`].
pub const SIDE_COUNT: usize = SIDES.len();

/// The side towards offset `d` (each component −1, 0 or 1), if it is one of [`SIDES`].
pub fn side_of(d: [i32; 3]) -> Option<usize> {
    SIDES.iter().position(|&s| s == d)
}

/// The directions of `c` that a reader pulls from its neighbour at `side`, increasing: those
/// whose components are opposite to the side's on each of its axes (for a z face, a stencil's
/// `up` or `down` list).
pub fn side_populations(c: &[[i32; 3]], side: usize) -> Vec<usize> {
    let d = SIDES[side];
    (0..c.len())
        .filter(|&i| (0..3).all(|a| d[a] == 0 || c[i][a] == -d[a]))
        .collect()
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

/// Which of the boxes tiling a domain holds each node: the boxes' faces cut each axis into
/// intervals (cells), and each cell of the grid they span lies in one box.
#[derive(Clone, Debug)]
pub struct SubdomainOf {
    size: [usize; 3],
    /// For each axis, the cell of each coordinate along it.
    cell: [Vec<usize>; 3],
    /// Cells along x and y.
    cells: [usize; 2],
    /// The position in the list given of the box holding each cell, x fastest.
    owner: Vec<usize>,
}

impl SubdomainOf {
    /// The lookup over `boxes` (each its first node and its nodes along x, y, z), which must tile
    /// the box from the origin to their farthest ends, in any order (empty boxes are skipped):
    /// otherwise why not.
    pub fn new(boxes: &[([usize; 3], [usize; 3])]) -> Result<Self, &'static str> {
        let size: [usize; 3] =
            std::array::from_fn(|a| boxes.iter().map(|(o, n)| o[a] + n[a]).max().unwrap_or(0));
        // Each axis's cuts: where some box starts or ends.
        let cell: [Vec<usize>; 3] = std::array::from_fn(|a| {
            let mut cut = vec![false; size[a]];
            for (o, n) in boxes.iter().filter(|(_, n)| n[a] > 0) {
                cut[o[a]] = true;
                if let Some(end) = cut.get_mut(o[a] + n[a]) {
                    *end = true;
                }
            }
            let mut c = 0;
            (0..size[a])
                .map(|x| {
                    if cut[x] && x > 0 {
                        c += 1;
                    }
                    c
                })
                .collect()
        });
        let count = |a: usize| cell[a].last().map_or(0, |&c| c + 1);
        let cells = [count(0), count(1)];
        const NONE: usize = usize::MAX;
        let mut owner = vec![NONE; cells[0] * cells[1] * count(2)];
        let mut covered = 0;
        for (k, (o, n)) in boxes.iter().enumerate() {
            if n.contains(&0) {
                continue;
            }
            let range = |a: usize| cell[a][o[a]]..=cell[a][o[a] + n[a] - 1];
            for cz in range(2) {
                for cy in range(1) {
                    for cx in range(0) {
                        let w = &mut owner[(cz * cells[1] + cy) * cells[0] + cx];
                        if *w != NONE {
                            return Err("parts overlap");
                        }
                        *w = k;
                        covered += 1;
                    }
                }
            }
        }
        if covered != owner.len() {
            return Err("parts do not tile the domain");
        }
        Ok(Self {
            size,
            cell,
            cells,
            owner,
        })
    }

    /// Nodes along x, y, z of the domain the boxes tile.
    pub fn size(&self) -> [usize; 3] {
        self.size
    }

    /// The position in the list of the box holding node `p` (inside the domain).
    pub fn of(&self, p: [usize; 3]) -> usize {
        let [x, y, z] = [0, 1, 2].map(|a| self.cell[a][p[a]]);
        self.owner[(z * self.cells[1] + y) * self.cells[0] + x]
    }
}

/// One subdomain of a partitioned domain (a slab of whole x-y planes unless the partition cuts x
/// or y): what a compute module needs to know about its place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlabSpec {
    /// Position in subdomain order: along x fastest, then y, then z (for slabs, 0 owns the lowest
    /// planes).
    pub index: usize,
    /// Number of subdomains.
    pub count: usize,
    pub domain: Domain,
    /// Global nodes owned along x, y and z.
    pub x: Range<usize>,
    pub y: Range<usize>,
    pub z: Range<usize>,
    /// Subdomains along each axis (`[1, 1, count]` for slabs), and this one's place among them.
    pub grid: [usize; 3],
    pub at: [usize; 3],
}

impl SlabSpec {
    /// All slabs of `domain` split over `count` devices.
    pub fn split(domain: Domain, count: usize) -> Result<Vec<SlabSpec>, PartitionError> {
        partition(domain.size[2], count)?;
        Self::grid(domain, [1, 1, count])
    }

    /// The whole of `domain` as one slab.
    pub fn whole(domain: Domain) -> SlabSpec {
        let [nx, ny, nz] = domain.size;
        SlabSpec {
            index: 0,
            count: 1,
            domain,
            x: 0..nx,
            y: 0..ny,
            z: 0..nz,
            grid: [1, 1, 1],
            at: [0, 0, 0],
        }
    }

    /// The subdomains of `domain` cut into `parts[a]` balanced ranges along each axis a, in
    /// subdomain order.
    pub fn grid(domain: Domain, parts: [usize; 3]) -> Result<Vec<SlabSpec>, PartitionError> {
        let mut cuts: [Vec<Range<usize>>; 3] = Default::default();
        for a in 0..3 {
            cuts[a] = partition(domain.size[a], parts[a]).map_err(|e| match e {
                PartitionError::TooManySlabs { planes, slabs } => PartitionError::TooManyParts {
                    axis: ['x', 'y', 'z'][a],
                    nodes: planes,
                    parts: slabs,
                },
                e => e,
            })?;
        }
        Ok(Self::cells(domain, &cuts))
    }

    /// The subdomains of `domain` on the grid of ranges `cuts` along each axis (each tiling its
    /// axis), in subdomain order.
    pub fn cells(domain: Domain, cuts: &[Vec<Range<usize>>; 3]) -> Vec<SlabSpec> {
        let grid = [cuts[0].len(), cuts[1].len(), cuts[2].len()];
        let count = grid.iter().product();
        (0..count)
            .map(|index| {
                let at = [
                    index % grid[0],
                    index / grid[0] % grid[1],
                    index / (grid[0] * grid[1]),
                ];
                SlabSpec {
                    index,
                    count,
                    domain,
                    x: cuts[0][at[0]].clone(),
                    y: cuts[1][at[1]].clone(),
                    z: cuts[2][at[2]].clone(),
                    grid,
                    at,
                }
            })
            .collect()
    }

    /// This subdomain's part of a whole-domain array of `comps` components `[c][z][y][x]`, each
    /// node's value `elem` items long (bytes, for an array of bytes), as its own array of the
    /// same layout.
    pub fn cut<T: Copy>(&self, whole: &[T], comps: usize, elem: usize) -> Vec<T> {
        let mut part = Vec::with_capacity(comps * self.nodes() * elem);
        self.rows(comps, elem, |w, _| part.extend_from_slice(&whole[w]));
        part
    }

    /// Writes this subdomain's part (as [`Self::cut`] makes it) into the whole-domain array.
    pub fn paste<T: Copy>(&self, part: &[T], whole: &mut [T], comps: usize, elem: usize) {
        self.rows(comps, elem, |w, p| whole[w].copy_from_slice(&part[p]));
    }

    /// Calls `f(whole, part)` with the ranges of each x-row of the subdomain in a whole-domain
    /// array and in the subdomain's own, in the part's order.
    fn rows(&self, comps: usize, elem: usize, mut f: impl FnMut(Range<usize>, Range<usize>)) {
        let [nx, ny, nz] = self.domain.size;
        let row = self.nx() * elem;
        let mut at = 0;
        for c in 0..comps {
            for z in self.z.clone() {
                for y in self.y.clone() {
                    let w = (((c * nz + z) * ny + y) * nx + self.x.start) * elem;
                    f(w..w + row, at..at + row);
                    at += row;
                }
            }
        }
    }

    /// Whether the partition cuts x or y (not a slab of whole planes).
    pub fn cuts_x_or_y(&self) -> bool {
        self.grid[0] > 1 || self.grid[1] > 1
    }

    /// The first global node along each axis.
    pub fn origin(&self) -> [usize; 3] {
        [self.x.start, self.y.start, self.z.start]
    }

    /// Nodes owned along each axis.
    pub fn size(&self) -> [usize; 3] {
        [self.nx(), self.ny(), self.nz()]
    }

    /// The index of the subdomain across side `side` ([`SIDES`]), if that side has a channel: every
    /// axis the side crosses is cut (z always counts as cut, a periodic single slab being its own
    /// neighbour), and a neighbour lies that way (around the domain on a periodic axis). A side
    /// across an uncut x or y axis has none: there the subdomain wraps onto itself (periodic) or
    /// meets a wall.
    pub fn neighbour(&self, side: usize) -> Option<usize> {
        let d = SIDES[side];
        let mut at = self.at;
        for a in 0..3 {
            if d[a] == 0 {
                continue;
            }
            if self.grid[a] == 1 && a < 2 {
                return None;
            }
            let p = at[a] as i64 + d[a] as i64;
            let n = self.grid[a] as i64;
            if (0..n).contains(&p) {
                at[a] = p as usize;
            } else if self.domain.periodic[a] {
                at[a] = p.rem_euclid(n) as usize;
            } else {
                return None;
            }
        }
        Some((at[2] * self.grid[1] + at[1]) * self.grid[0] + at[0])
    }

    /// Nodes along the axis a side's channel runs along, or across its face: the values of one
    /// crossing population in the channel of `side`.
    pub fn side_nodes(&self, side: usize) -> usize {
        let d = SIDES[side];
        (0..3)
            .filter(|&a| d[a] == 0)
            .map(|a| self.size()[a])
            .product()
    }

    pub fn nx(&self) -> usize {
        self.x.len()
    }
    pub fn ny(&self) -> usize {
        self.y.len()
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
        self.neighbour(0).is_some()
    }
    /// Whether a neighbour slab lies above (z + 1).
    pub fn has_above(&self) -> bool {
        self.neighbour(1).is_some()
    }
    /// Values in one interface buffer of a lattice on `stencil`: its crossing populations (five
    /// for D3Q19) of one plane.
    pub fn interface_values(&self, stencil: &crate::physics::Stencil) -> usize {
        stencil.crossing() * self.nx() * self.ny()
    }
    /// Values in one buffer of the channel of `side` for a lattice on `stencil`: the populations
    /// crossing that side ([`side_populations`]) over its face or edge.
    pub fn side_values(&self, stencil: &crate::physics::Stencil, side: usize) -> usize {
        side_populations(stencil.c, side).len() * self.side_nodes(side)
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

    #[test]
    fn sides_pair_with_their_opposites_and_name_the_populations_crossing_them() {
        use crate::physics::d3q19::{C, DOWN, UP};
        for s in 0..SIDE_COUNT {
            let (d, o) = (SIDES[s], SIDES[s ^ 1]);
            assert_eq!(d.map(|v| -v), o, "side {s}");
            assert_eq!(side_of(d), Some(s));
            let faces = d.iter().filter(|&&v| v != 0).count();
            assert_eq!(
                side_populations(&C, s).len(),
                if faces == 1 { 5 } else { 1 }
            );
        }
        assert_eq!(side_populations(&C, 0), UP.to_vec());
        assert_eq!(side_populations(&C, 1), DOWN.to_vec());
        // Every velocity but rest crosses exactly the sides its own components point away from.
        for (i, c) in C.iter().enumerate().skip(1) {
            let n = (0..SIDE_COUNT)
                .filter(|&s| side_populations(&C, s).contains(&i))
                .count();
            let axes = c.iter().filter(|&&v| v != 0).count();
            assert_eq!(n, if axes == 1 { 1 } else { 3 }, "direction {i}");
        }
    }

    #[test]
    fn parts_cut_from_a_whole_array_paste_back_into_it() {
        let d = Domain::new([5, 4, 3], [false; 3]);
        let whole: Vec<u16> = (0..2 * d.nodes() as u16 * 2).collect();
        let mut back = vec![0; whole.len()];
        for s in SlabSpec::grid(d, [2, 2, 1]).unwrap() {
            let part = s.cut(&whole, 2, 2);
            assert_eq!(part.len(), 2 * s.nodes() * 2);
            // The part's first value is its origin's in component 0.
            let [x, y, z] = s.origin();
            assert_eq!(part[0], whole[((z * 4 + y) * 5 + x) * 2]);
            s.paste(&part, &mut back, 2, 2);
        }
        assert_eq!(back, whole);
    }

    #[test]
    fn a_grid_tiles_the_domain_and_finds_neighbours_across_faces_and_edges() {
        let d = Domain::new([7, 6, 5], [true, false, false]);
        let g = SlabSpec::grid(d, [2, 3, 1]).unwrap();
        assert_eq!(g.len(), 6);
        let nodes: usize = g.iter().map(|s| s.nodes()).sum();
        assert_eq!(nodes, d.nodes());
        let s = &g[1];
        assert_eq!((s.x.clone(), s.y.clone(), s.at), (4..7, 0..2, [1, 0, 0]));
        // x is periodic: both x sides lead to subdomain 0; y is walled below, z is uncut and walled.
        assert_eq!(s.neighbour(side_of([-1, 0, 0]).unwrap()), Some(0));
        assert_eq!(s.neighbour(side_of([1, 0, 0]).unwrap()), Some(0));
        assert_eq!(s.neighbour(side_of([0, -1, 0]).unwrap()), None);
        assert_eq!(s.neighbour(side_of([0, 1, 0]).unwrap()), Some(3));
        assert_eq!(s.neighbour(side_of([1, 1, 0]).unwrap()), Some(2));
        assert_eq!(s.neighbour(side_of([1, -1, 0]).unwrap()), None);
        assert!(!s.has_below() && !s.has_above());
        assert_eq!(s.side_nodes(side_of([1, 0, 0]).unwrap()), 2 * 5);
        assert_eq!(s.side_nodes(side_of([1, 1, 0]).unwrap()), 5);
        // An uncut periodic x wraps onto itself: no channel; slabs keep their two.
        let slabs = SlabSpec::grid(Domain::new([4, 4, 6], [true, true, true]), [1, 1, 1]).unwrap();
        assert_eq!(
            slabs,
            SlabSpec::split(Domain::new([4, 4, 6], [true; 3]), 1).unwrap()
        );
        let one = &slabs[0];
        assert_eq!(one.neighbour(0), Some(0));
        assert!((2..SIDE_COUNT).all(|s| one.neighbour(s).is_none()));
        assert_eq!(
            SlabSpec::grid(d, [8, 1, 1]),
            Err(PartitionError::TooManyParts {
                axis: 'x',
                nodes: 7,
                parts: 8
            })
        );
    }

    /// Every node of grids cut unevenly (some subdomains one node thick), the subdomains listed in
    /// a shuffled order, is found in the one subdomain whose box holds it.
    #[test]
    fn each_node_is_found_in_the_subdomain_that_holds_it() {
        let domain = Domain::new([7, 5, 6], [false; 3]);
        for parts in [[1, 1, 1], [1, 1, 6], [7, 1, 1], [3, 2, 4], [2, 5, 3]] {
            let mut slabs = SlabSpec::grid(domain, parts).unwrap();
            // A fixed shuffle: every third, then the rest reversed.
            let (mut order, rest): (Vec<_>, Vec<_>) =
                slabs.drain(..).enumerate().partition(|(k, _)| k % 3 == 0);
            order.extend(rest.into_iter().rev());
            let slabs: Vec<SlabSpec> = order.into_iter().map(|(_, s)| s).collect();
            let boxes: Vec<_> = slabs.iter().map(|s| (s.origin(), s.size())).collect();
            let find = SubdomainOf::new(&boxes).unwrap();
            assert_eq!(find.size(), domain.size);
            for z in 0..6 {
                for y in 0..5 {
                    for x in 0..7 {
                        let s = &slabs[find.of([x, y, z])];
                        assert!(
                            s.x.contains(&x) && s.y.contains(&y) && s.z.contains(&z),
                            "{parts:?}: node {:?} in {:?}",
                            [x, y, z],
                            s.origin()
                        );
                    }
                }
            }
        }
    }
}
