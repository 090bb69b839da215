//! The buffer protocol of the benchmark, shared by its CPU and CUDA modes: the words each side
//! stores, where they go, and which parity is written and read at each iteration.
//!
//! Every link has four buffers of `k · L · L` words: two per direction, as each of the solver's
//! channels holds (`thelma_core::Channel`). The CPU mode and the copy engine's host staging lay a
//! link's four out together (`up[0], up[1], down[0], down[1]`, [`buffer_offset`]); the solver's
//! transports keep each direction in its reader's channel. Iteration `t` (from 1) writes the
//! buffers of parity `t % 2` and reads those of parity `(t + 1) % 2`, which the neighbour wrote at
//! `t − 1`; a barrier separates iterations, so a buffer is never written while it is read. Setup
//! publishes iteration 0 into parity 0.

use std::sync::atomic::{AtomicU32, Ordering};

use super::graph::Side;

/// The word at logical index `i` of stream `stream` written at `iteration`. Multiplication by an odd
/// constant is a bijection, so a stale buffer (the previous iteration's words) or another stream's
/// words never pass for the expected ones. `kernels/comm_bench.cu` computes the same function.
#[inline]
pub fn pattern(iteration: u32, stream: u32, i: u32) -> u32 {
    let h = iteration.wrapping_mul(0x9E37_79B9) ^ stream.wrapping_mul(0x85EB_CA6B);
    h ^ i.wrapping_mul(0xC2B2_AE35)
}

/// Parity of the buffers written at `iteration`.
#[inline]
pub fn write_parity(iteration: u32) -> usize {
    (iteration % 2) as usize
}

/// Parity of the buffers read at `iteration` (written at `iteration − 1`).
#[inline]
pub fn read_parity(iteration: u32) -> usize {
    ((iteration + 1) % 2) as usize
}

/// The shape of the data on one link direction: `arrays` two-dimensional `edge × edge` arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Shape {
    pub arrays: usize,
    pub edge: usize,
    pub transpose: bool,
}

impl Shape {
    /// Words in one buffer (one direction, one parity).
    pub fn words(&self) -> usize {
        self.arrays * self.edge * self.edge
    }

    /// Bytes in one buffer.
    pub fn bytes(&self) -> usize {
        self.words() * 4
    }

    /// Where element `(a, y, x)` is stored: row-major, or with `transpose` column-major inside each
    /// array, which is what makes neighbouring threads' accesses `edge` words apart.
    #[inline]
    pub fn physical(&self, a: usize, y: usize, x: usize) -> usize {
        let e = self.edge;
        if self.transpose {
            a * e * e + x * e + y
        } else {
            a * e * e + y * e + x
        }
    }
}

/// Offset (in words) of buffer `up[parity]` or `down[parity]` inside a link's memory.
#[inline]
pub fn buffer_offset(shape: &Shape, upward: bool, parity: usize) -> usize {
    let buffer = if upward { parity } else { 2 + parity };
    buffer * shape.words()
}

/// A link's four buffers in ordinary host memory, for the CPU mode. Relaxed atomics make the shared
/// words safe to touch from several threads; the iteration barrier orders the writes before the
/// reads.
pub struct HostLink {
    words: Vec<AtomicU32>,
}

impl HostLink {
    pub fn new(shape: &Shape) -> Self {
        Self {
            words: (0..4 * shape.words()).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// One buffer.
    pub fn buffer(&self, shape: &Shape, upward: bool, parity: usize) -> &[AtomicU32] {
        let o = buffer_offset(shape, upward, parity);
        &self.words[o..o + shape.words()]
    }
}

/// Calls `f(physical index, word)` for every word of `stream` at `iteration`, x fastest, as the
/// kernel's threads are laid out.
#[inline]
pub fn for_each_word(shape: &Shape, stream: u32, iteration: u32, mut f: impl FnMut(usize, u32)) {
    let e = shape.edge;
    for a in 0..shape.arrays {
        for y in 0..e {
            let row = (a * e + y) * e;
            for x in 0..e {
                f(
                    shape.physical(a, y, x),
                    pattern(iteration, stream, (row + x) as u32),
                );
            }
        }
    }
}

/// Stores iteration `t`'s words of `side` into its outgoing buffer (parity `t % 2`).
pub fn write_side(link: &HostLink, shape: &Shape, side: &Side, t: u32) {
    let buf = link.buffer(shape, side.writes_up, write_parity(t));
    for_each_word(shape, side.stream_out(), t, |p, v| {
        buf[p].store(v, Ordering::Relaxed)
    });
}

/// Loads the neighbour's words of iteration `t − 1` from the incoming buffer of `side` (parity
/// `(t + 1) % 2`) and returns how many differ from what the neighbour must have written.
pub fn check_side(link: &HostLink, shape: &Shape, side: &Side, t: u32) -> u64 {
    let buf = link.buffer(shape, !side.writes_up, read_parity(t));
    let mut bad = 0u64;
    for_each_word(shape, side.stream_in(), t.wrapping_sub(1), |p, v| {
        bad += u64::from(buf[p].load(Ordering::Relaxed) != v)
    });
    bad
}

#[cfg(test)]
mod tests {
    use super::super::graph::{links, sides, Topology};
    use super::*;

    const SHAPE: Shape = Shape {
        arrays: 3,
        edge: 8,
        transpose: false,
    };

    #[test]
    fn parities_alternate_and_each_iteration_reads_what_the_previous_one_wrote() {
        for t in 1..10u32 {
            assert_ne!(write_parity(t), read_parity(t));
            assert_eq!(read_parity(t), write_parity(t - 1));
        }
        assert_eq!(write_parity(0), 0);
    }

    #[test]
    fn the_pattern_tells_iterations_streams_and_positions_apart() {
        let mut seen = std::collections::HashSet::new();
        for t in 0..4 {
            for s in 0..4 {
                for i in 0..64 {
                    assert!(seen.insert(pattern(t, s, i)), "collision at {t} {s} {i}");
                }
            }
        }
    }

    #[test]
    fn transposition_swaps_rows_and_columns_inside_each_array() {
        let t = Shape {
            transpose: true,
            ..SHAPE
        };
        assert_eq!(SHAPE.physical(1, 2, 3), 64 + 2 * 8 + 3);
        assert_eq!(t.physical(1, 2, 3), 64 + 3 * 8 + 2);
        // Both layouts are permutations of the same buffer.
        let mut a: Vec<usize> = (0..3)
            .flat_map(|a| (0..8).flat_map(move |y| (0..8).map(move |x| t.physical(a, y, x))))
            .collect();
        a.sort_unstable();
        assert_eq!(a, (0..SHAPE.words()).collect::<Vec<_>>());
    }

    #[test]
    fn buffers_of_a_link_do_not_overlap() {
        let mut spans: Vec<(usize, usize)> = [(true, 0), (true, 1), (false, 0), (false, 1)]
            .iter()
            .map(|&(u, p)| {
                let o = buffer_offset(&SHAPE, u, p);
                (o, o + SHAPE.words())
            })
            .collect();
        spans.sort_unstable();
        for w in spans.windows(2) {
            assert!(w[0].1 <= w[1].0);
        }
        assert_eq!(spans.last().unwrap().1, 4 * SHAPE.words());
    }

    /// Drives the protocol by hand on a ring and a chain: what one side writes at `t` arrives intact
    /// at the other side at `t + 1`, in both layouts.
    #[test]
    fn data_written_on_one_side_arrives_intact_on_the_other() {
        for transpose in [false, true] {
            let shape = Shape { transpose, ..SHAPE };
            for (n, topo) in [
                (3, Topology::Circular),
                (3, Topology::Linear),
                (1, Topology::Circular),
            ] {
                let ls = links(n, topo);
                let mem: Vec<HostLink> = ls.iter().map(|_| HostLink::new(&shape)).collect();
                let all: Vec<Vec<_>> = (0..n).map(|p| sides(&ls, p)).collect();
                for s in all.iter().flatten() {
                    write_side(&mem[s.link], &shape, s, 0);
                }
                for t in 1..6 {
                    for s in all.iter().flatten() {
                        write_side(&mem[s.link], &shape, s, t);
                    }
                    for s in all.iter().flatten() {
                        assert_eq!(check_side(&mem[s.link], &shape, s, t), 0, "{topo} t={t}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_wrong_parity_or_a_corrupted_word_is_detected() {
        let ls = links(2, Topology::Linear);
        let mem = HostLink::new(&SHAPE);
        let [lower, upper] = [sides(&ls, 0)[0], sides(&ls, 1)[0]];
        write_side(&mem, &SHAPE, &upper, 0);
        write_side(&mem, &SHAPE, &upper, 1);
        assert_eq!(check_side(&mem, &SHAPE, &lower, 2), 0);
        // At t = 3 the reader would want iteration 2's words, but the buffer of that parity still
        // holds iteration 0's: every word is stale.
        assert_eq!(check_side(&mem, &SHAPE, &lower, 3), SHAPE.words() as u64);
        write_side(&mem, &SHAPE, &upper, 2);
        mem.buffer(&SHAPE, false, 0)[5].store(7, Ordering::Relaxed);
        assert_eq!(check_side(&mem, &SHAPE, &lower, 3), 1);
    }
}
