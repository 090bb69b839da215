//! The CPU module's channels across a subdomain's x and y sides, where the partition cuts x or y:
//! where a pull from beyond the box reads, and where a boundary layer's populations go.
//!
//! A channel across side `s` ([`SIDES`]) holds, per buffer, the populations a reader pulls across
//! that side ([`side_populations`]) in slot order, each over the nodes of the side's face or edge,
//! laid out along its free axes with x fastest (`[slot][z][y]` for an x face, `[slot][z][x]` for a
//! y face, `[slot][y][x]` for a z face as every slab's channel, one row for an edge). The writer's
//! box and the reader's have the same extent along every free axis (the partition is a grid), so
//! both index a value by the same box coordinates.

use thelma_core::physics::d3q19::{C, Q};
use thelma_core::{side_of, side_populations, SIDES, SIDE_COUNT};

/// Where a pull from beyond a box's face reads ([`SideShapes::resolve`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// Inside the box, at this node (wrapped along an uncut periodic x or y).
    Inside([usize; 3]),
    /// Across side `.0`, at this node along the side's free axes.
    Across(usize, [usize; 3]),
}

/// The shape of every side's channel for one box.
#[derive(Clone, Debug)]
pub(crate) struct SideShapes {
    size: [usize; 3],
    /// `slot[s][i]`: direction i's slot in the channel read across side s (`u8::MAX` if none).
    slot: [[u8; Q]; SIDE_COUNT],
    /// The directions written across side s (those its neighbour reads across `s ^ 1`), in slot
    /// order, and how many.
    out: [[u8; 5]; SIDE_COUNT],
    out_len: [u8; SIDE_COUNT],
    /// A value's offset per box coordinate in a slot of side s (zero along the side's own axes),
    /// and the nodes of one slot.
    stride: [[usize; 3]; SIDE_COUNT],
    nodes: [usize; SIDE_COUNT],
}

impl SideShapes {
    pub(crate) fn new(size: [usize; 3]) -> Self {
        let mut slot = [[u8::MAX; Q]; SIDE_COUNT];
        let mut out = [[0; 5]; SIDE_COUNT];
        let mut out_len = [0; SIDE_COUNT];
        let mut stride = [[0; 3]; SIDE_COUNT];
        let mut nodes = [0; SIDE_COUNT];
        for s in 0..SIDE_COUNT {
            for (k, i) in side_populations(&C, s).into_iter().enumerate() {
                slot[s][i] = k as u8;
            }
            let written = side_populations(&C, s ^ 1);
            out_len[s] = written.len() as u8;
            for (k, i) in written.into_iter().enumerate() {
                out[s][k] = i as u8;
            }
            let mut n = 1;
            for a in 0..3 {
                if SIDES[s][a] == 0 {
                    stride[s][a] = n;
                    n *= size[a];
                }
            }
            nodes[s] = n;
        }
        Self {
            size,
            slot,
            out,
            out_len,
            stride,
            nodes,
        }
    }

    /// Nodes of one slot of side `s`, and a node's offset in it per box coordinate.
    pub(crate) fn slot_shape(&self, s: usize) -> (usize, [usize; 3]) {
        (self.nodes[s], self.stride[s])
    }

    /// Values in one buffer of the channel of side `s`.
    pub(crate) fn values(&self, s: usize) -> usize {
        self.out_len[s] as usize * self.nodes[s]
    }

    /// The offset in a buffer of side `s` of direction `i`'s value at box node `p` (its
    /// coordinates along the side's own axes are ignored). `i` must cross side `s`.
    #[inline]
    pub(crate) fn offset(&self, s: usize, i: usize, p: [usize; 3]) -> usize {
        let k = self.slot[s][i] as usize;
        debug_assert!(k < 5, "direction {i} does not cross side {s}");
        k * self.nodes[s]
            + p[0] * self.stride[s][0]
            + p[1] * self.stride[s][1]
            + p[2] * self.stride[s][2]
    }

    /// The offset in a buffer written across side `s` of slot `k`'s value at box node `p`.
    #[inline]
    fn out_offset(&self, s: usize, k: usize, p: [usize; 3]) -> usize {
        k * self.nodes[s]
            + p[0] * self.stride[s][0]
            + p[1] * self.stride[s][1]
            + p[2] * self.stride[s][2]
    }

    /// Where a pull from position `src` (box coordinates, possibly outside the box) reads:
    /// inside the box (x and y wrapped where `wrap`), across a side with a channel, or nowhere
    /// (`None`: a wall, or a side without a channel, which only a wall leaves without one).
    #[inline]
    pub(crate) fn resolve(
        &self,
        src: [isize; 3],
        wrap: [bool; 2],
        has: impl Fn(usize) -> bool,
    ) -> Option<Source> {
        let mut d = [0; 3];
        let mut p = [0; 3];
        for a in 0..3 {
            let n = self.size[a] as isize;
            let v = src[a];
            if (0..n).contains(&v) {
                p[a] = v as usize;
            } else if a < 2 && wrap[a] {
                p[a] = v.rem_euclid(n) as usize;
            } else {
                d[a] = if v < 0 { -1 } else { 1 };
            }
        }
        if d == [0; 3] {
            return Some(Source::Inside(p));
        }
        let s = side_of(d)?;
        has(s).then_some(Source::Across(s, p))
    }

    /// The sides whose layer holds box node `p`, other than the two z faces: those that point
    /// from `p` out of the box on each of their axes.
    #[inline]
    pub(crate) fn layer_sides(&self, p: [usize; 3]) -> impl Iterator<Item = usize> + '_ {
        (2..SIDE_COUNT).filter(move |&s| {
            (0..3).all(|a| match SIDES[s][a] {
                0 => true,
                -1 => p[a] == 0,
                _ => p[a] + 1 == self.size[a],
            })
        })
    }

    /// Stores the populations of box node `p` that cross side `s` into `out` (a buffer written
    /// across `s`), taking direction `i`'s value from `value(i)`.
    ///
    /// # Safety
    /// `out` must point to a buffer of at least [`Self::values`]`(s)` values.
    #[inline]
    pub(crate) unsafe fn store<V: Copy>(
        &self,
        s: usize,
        p: [usize; 3],
        out: *mut V,
        value: impl Fn(usize) -> V,
    ) {
        for k in 0..self.out_len[s] as usize {
            let i = self.out[s][k] as usize;
            // SAFETY: the offset is below values(s), as the caller's buffer holds.
            unsafe { *out.add(self.out_offset(s, k, p)) = value(i) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layer_value_has_one_place_and_writers_and_readers_agree_on_it() {
        let sh = SideShapes::new([3, 4, 2]);
        for s in 0..SIDE_COUNT {
            let n = sh.values(s);
            let mut seen = vec![false; n];
            let d = SIDES[s];
            // The writer's layer across s: every node on it, every direction it sends.
            for z in 0..2 {
                for y in 0..4 {
                    for x in 0..3 {
                        let p = [x, y, z];
                        if !sh.layer_sides(p).any(|t| t == s) && s >= 2 {
                            continue;
                        }
                        if s < 2 && (d[2] == -1 && z != 0 || d[2] == 1 && z != 1) {
                            continue;
                        }
                        for k in 0..sh.out_len[s] as usize {
                            let o = sh.out_offset(s, k, p);
                            assert!(!seen[o], "side {s}: {p:?} slot {k} twice");
                            seen[o] = true;
                            // The reader across s ^ 1 finds the same direction at the same offset.
                            let i = sh.out[s][k] as usize;
                            assert_eq!(sh.offset(s ^ 1, i, p), o);
                        }
                    }
                }
            }
            assert!(seen.iter().all(|&v| v), "side {s} has unwritten values");
        }
    }

    #[test]
    fn pulls_beyond_the_box_resolve_to_the_side_they_cross() {
        let sh = SideShapes::new([3, 4, 2]);
        let all = |_: usize| true;
        assert_eq!(
            sh.resolve([1, 2, 1], [false; 2], all),
            Some(Source::Inside([1, 2, 1]))
        );
        let s = side_of([-1, 0, 0]).unwrap();
        assert_eq!(
            sh.resolve([-1, 2, 1], [false; 2], all),
            Some(Source::Across(s, [0, 2, 1]))
        );
        // Wrapped along an uncut periodic y, across x.
        let e = side_of([1, 0, 0]).unwrap();
        assert_eq!(
            sh.resolve([3, -1, 0], [false, true], all),
            Some(Source::Across(e, [0, 3, 0]))
        );
        let edge = side_of([1, -1, 0]).unwrap();
        assert_eq!(
            sh.resolve([3, -1, 0], [false; 2], all),
            Some(Source::Across(edge, [0, 0, 0]))
        );
        assert_eq!(sh.resolve([3, -1, 0], [false; 2], |_| false), None);
        assert_eq!(
            sh.resolve([-1, 0, -1], [true, false], all),
            Some(Source::Across(0, [2, 0, 0]))
        );
    }
}
