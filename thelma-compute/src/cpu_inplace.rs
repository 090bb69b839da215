//! In-place streaming on the CPU module: one lattice, the AA pattern (Bailey et al. 2009), in the
//! order the CUDA module's kernels follow (`kernels/lbm_d3q19.cu`: `collide_pull_in_place_*`,
//! `collide_local_in_place_*`, `swap_in_place_*`).
//!
//! The lattice is held in one of two arrangements. **Own**: slot i of node x holds f̃_i(x), the
//! node's collided population, as lattice A of the two-lattice scheme does. **Streamed**: f̃_i(x)
//! sits in slot ī of node x + c_i, where that node's next step reads it.
//!
//! - From Own, the *pull step* pulls f_i(x) = f̃_i(x − c_i) from slot i of node x − c_i (the
//!   two-lattice pull, bounce-back f̃_ī(x) + term from the node's own slot ī) and stores each
//!   collided f̃_i(x) into slot ī of node x + c_i: Streamed.
//! - From Streamed, the *local step* reads f_j(x) from the node's own slot j̄ and stores f̃_i(x)
//!   into slot i: Own.
//!
//! A bounced link stays at its node: f̃_i(x) whose neighbour x + c_i is a wall goes into slot i of x,
//! where the bounce-back of link ī reads it in either step. A population crossing the slab's z face
//! goes into the neighbour's interface buffer, as in the two-lattice step, and also into its own
//! slot i, which no other node uses in the pull step (node x + c_i is in the neighbour's slab): the
//! arrangements then differ only in the pairs {slot i of x, slot ī of x + c_i} inside the slab, and
//! [`swap_pairs`] turns one into the other. The exchange is the two-lattice one in both steps (each
//! step stores its collided crossing populations and reads the neighbour's of the step before), so
//! slabs need not step the same way.
//!
//! Each step reads and writes exactly the same slots of each node, and no slot is touched by two
//! nodes, so rows run in parallel with no ordering. Every node computes what the two-lattice step
//! computes, from the same values in the same order: the states equal the two-lattice ones bit for
//! bit. Solid nodes are never read or written.

use thelma_core::physics::d3q19::{C, DOWN, OPP, Q, UP};
use thelma_core::physics::{Arith, Coefficients, CollisionOperator};
use thelma_core::{Real, Stored};

use super::{lane_constants, loaded, store, Entry, Lanes, SyncPtr, SLOT};

/// What one in-place step reads and writes, as raw pointers only: the lattice is read and written
/// by every row's task at once (each slot by one task), so no slice of it may exist during a step.
pub(super) struct InPlaceCtx<'a, T: Real, S> {
    pub nx: usize,
    pub ny: usize,
    pub nz: usize,
    pub periodic: [bool; 3],
    pub a: SyncPtr<S>,
    pub index: &'a [u16],
    pub palette: &'a [Entry<T>],
    pub coeff: &'a Coefficients<T>,
    pub force: Option<[T; 3]>,
    /// The interface buffers of this step, as in [`super::StepCtx`].
    pub below_in: Option<SyncPtr<S>>,
    pub above_in: Option<SyncPtr<S>>,
    pub above_out: Option<SyncPtr<S>>,
    pub below_out: Option<SyncPtr<S>>,
}

impl<T: Real + Arith<Scalar = T>, S: Stored<Arith = T>> InPlaceCtx<'_, T, S> {
    fn n(&self) -> usize {
        self.nx * self.ny * self.nz
    }

    /// Slot `i` of slab node `p`.
    ///
    /// # Safety
    /// `i < Q`, `p < n`, and no other task touches the slot during the step.
    #[inline(always)]
    unsafe fn slot(&self, i: usize, p: usize) -> *mut S {
        // SAFETY: the caller's bounds; the lattice holds Q·n values.
        unsafe { self.a.get().add(i * self.n() + p) }
    }

    /// The buffer a population crossing the z face from plane `zs` (−1 or nz) arrives in.
    fn inbox(&self, zs: isize) -> Option<SyncPtr<S>> {
        if zs < 0 {
            self.below_in
        } else {
            self.above_in
        }
    }

    /// `v` wrapped on a periodic axis of length `len`; `None` beyond a wall.
    #[inline(always)]
    fn wrap(v: isize, len: usize, periodic: bool) -> Option<usize> {
        if v >= 0 && (v as usize) < len {
            Some(v as usize)
        } else if periodic {
            Some(v.rem_euclid(len as isize) as usize)
        } else {
            None
        }
    }

    /// Whether direction `i` of a node of plane `z` leaves the slab through a face with a neighbour.
    #[inline(always)]
    fn crosses(&self, i: usize, z: usize) -> bool {
        let zt = z as isize + C[i][2] as isize;
        (zt < 0 && self.below_out.is_some()) || (zt >= self.nz as isize && self.above_out.is_some())
    }

    /// The value node (x, y, z) pulls along unbounced direction `i` in the pull step: slot i of
    /// x − c_i, or the neighbour's buffer across the z face; zero beyond a wall (where the link
    /// bounces, so it is unused).
    ///
    /// # Safety
    /// As [`Self::slot`]: the source slot belongs to this node in this step.
    #[inline(always)]
    unsafe fn pulled(&self, i: usize, x: usize, y: usize, z: usize) -> T {
        let (Some(xs), Some(ys)) = (
            Self::wrap(x as isize - C[i][0] as isize, self.nx, self.periodic[0]),
            Self::wrap(y as isize - C[i][1] as isize, self.ny, self.periodic[1]),
        ) else {
            return T::zero();
        };
        let zs = z as isize - C[i][2] as isize;
        if zs >= 0 && (zs as usize) < self.nz {
            // SAFETY: the caller's.
            return unsafe { *self.slot(i, (zs as usize * self.ny + ys) * self.nx + xs) }.load();
        }
        match self.inbox(zs) {
            // SAFETY: the buffer holds 5 planes of nx·ny values; SLOT[i] < 5 as i crosses the face.
            // The neighbour wrote it in the previous step, ordered by the barrier.
            Some(buf) => unsafe {
                *buf.get()
                    .add(SLOT[i] * self.nx * self.ny + ys * self.nx + xs)
            }
            .load(),
            None => T::zero(),
        }
    }

    /// The value node (x, y, z) reads along unbounced direction `j` in the local step: its own
    /// slot j̄, or the neighbour's buffer where j arrives across the z face.
    ///
    /// # Safety
    /// As [`Self::slot`].
    #[inline(always)]
    unsafe fn arrived(&self, j: usize, x: usize, y: usize, z: usize) -> T {
        let zs = z as isize - C[j][2] as isize;
        if zs < 0 || zs >= self.nz as isize {
            if let Some(buf) = self.inbox(zs) {
                let (Some(xs), Some(ys)) = (
                    Self::wrap(x as isize - C[j][0] as isize, self.nx, self.periodic[0]),
                    Self::wrap(y as isize - C[j][1] as isize, self.ny, self.periodic[1]),
                ) else {
                    return T::zero();
                };
                // SAFETY: as in `pulled`.
                return unsafe {
                    *buf.get()
                        .add(SLOT[j] * self.nx * self.ny + ys * self.nx + xs)
                }
                .load();
            }
        }
        // SAFETY: the caller's.
        unsafe { *self.slot(OPP[j], (z * self.ny + y) * self.nx + x) }.load()
    }

    /// Stores collided f̃_i of node (x, y, z) where the pull step puts it: slot ī of x + c_i, or the
    /// node's own slot i where that neighbour is a wall or across the slab's z face.
    ///
    /// # Safety
    /// As [`Self::slot`].
    #[inline(always)]
    unsafe fn scatter(&self, i: usize, v: T, e: &Entry<T>, x: usize, y: usize, z: usize) {
        let own = (z * self.ny + y) * self.nx + x;
        let target = if i == 0 || e.bounce >> OPP[i] & 1 != 0 || self.crosses(i, z) {
            None
        } else {
            let zt = z as isize + C[i][2] as isize;
            match (
                Self::wrap(x as isize + C[i][0] as isize, self.nx, self.periodic[0]),
                Self::wrap(y as isize + C[i][1] as isize, self.ny, self.periodic[1]),
            ) {
                (Some(xt), Some(yt)) if zt >= 0 && (zt as usize) < self.nz => {
                    Some((zt as usize * self.ny + yt) * self.nx + xt)
                }
                // Beyond a wall without a bounced link: only a node the geometry did not close.
                _ => None,
            }
        };
        // SAFETY: the caller's.
        unsafe {
            match target {
                Some(t) => *self.slot(OPP[i], t) = S::store(v),
                None => *self.slot(i, own) = S::store(v),
            }
        }
    }

    /// The fluid nodes among the `len` from x0 of the row starting at node `row0` (whose palette
    /// indices are `flags`): lane, node and palette entry.
    #[inline(always)]
    fn fluid_nodes<'f>(
        &'f self,
        flags: &'f [u16],
        row0: usize,
        x0: usize,
        len: usize,
    ) -> impl Iterator<Item = (usize, usize, &'f Entry<T>)> + 'f {
        (0..len)
            .map(move |x| (x, row0 + x0 + x, &self.palette[flags[x0 + x] as usize]))
            .filter(|(_, _, e)| !e.solid)
    }

    /// The crossing populations of the `len` nodes from x0 of boundary layer z into this step's
    /// outgoing buffers (both steps), skipping solid lanes.
    #[inline(always)]
    fn export<const L: usize>(
        &self,
        f: &[Lanes<T, L>; Q],
        z: usize,
        y: usize,
        x0: usize,
        len: usize,
    ) {
        let plane = self.nx * self.ny;
        let row0 = (z * self.ny + y) * self.nx;
        for (out, dirs, here) in [
            (self.above_out, UP, z + 1 == self.nz),
            (self.below_out, DOWN, z == 0),
        ] {
            let Some(out) = out.filter(|_| here) else {
                continue;
            };
            for x in 0..len {
                if self.palette[self.index[row0 + x0 + x] as usize].solid {
                    continue;
                }
                for (k, &i) in dirs.iter().enumerate() {
                    // SAFETY: slot k of this step's buffer; node x0 + x of this row is written by
                    // this task alone.
                    unsafe {
                        *out.get().add(k * plane + y * self.nx + x0 + x) = S::store(f[i].0[x])
                    }
                }
            }
        }
    }

    /// One row (z, y) of the pull step (from [`Held::Own`](crate::Held::Own) to [`Held::Streamed`](crate::Held::Streamed)) or of the local
    /// step (back), in bundles of `L` nodes along x collided together: each edge node alone, the
    /// nodes between in bundles. Bundles of plain fluid load and store rows of lanes (a short last
    /// one too); the others go node by node.
    #[inline(always)]
    pub fn row<O: CollisionOperator, const EXTRA: bool, const L: usize>(
        &self,
        z: usize,
        y: usize,
        pull: bool,
    ) {
        let (nx, ny, nz) = (self.nx, self.ny, self.nz);
        let (k, force) = lane_constants::<T, EXTRA, L>(self.coeff, self.force);
        let n = self.n();
        let row0 = (z * ny + y) * nx;
        let flags = &self.index[row0..row0 + nx];
        // Per direction: the row that bundle loads read and the row bundle stores write, as
        // pointers to x = 0 of that row (shifted by the direction's x offset); null where the row
        // lies beyond a wall. Interface rows are reached through the buffers.
        let row_of = |i: usize, dz: isize, dy: isize, slot: usize| -> *mut S {
            let ys = Self::wrap(y as isize + dy, ny, self.periodic[1]);
            let zs = z as isize + dz;
            match ys {
                None => std::ptr::null_mut(),
                Some(ys) if zs >= 0 && (zs as usize) < nz => {
                    // SAFETY: inside the lattice: slot < Q, row (zs, ys) of the slab.
                    unsafe { self.a.get().add(slot * n + (zs as usize * ny + ys) * nx) }
                }
                Some(ys) => match self.inbox(zs) {
                    // SAFETY: row ys of plane SLOT[i] of the buffer.
                    Some(buf) => unsafe { buf.get().add(SLOT[i] * nx * ny + ys * nx) },
                    None => std::ptr::null_mut(),
                },
            }
        };
        let (loads, stores): ([*mut S; Q], [*mut S; Q]) = if pull {
            (
                std::array::from_fn(|i| {
                    row_of(i, -(C[i][2] as isize), -(C[i][1] as isize), i)
                        .wrapping_offset(-(C[i][0] as isize))
                }),
                std::array::from_fn(|i| {
                    if i == 0 || self.crosses(i, z) {
                        // SAFETY: row (z, y) of slot i.
                        unsafe { self.a.get().add(i * n + row0) }
                    } else {
                        let dz = C[i][2] as isize;
                        if z as isize + dz < 0 || z as isize + dz >= nz as isize {
                            std::ptr::null_mut()
                        } else {
                            row_of(i, dz, C[i][1] as isize, OPP[i])
                                .wrapping_offset(C[i][0] as isize)
                        }
                    }
                }),
            )
        } else {
            (
                std::array::from_fn(|j| {
                    let zs = z as isize - C[j][2] as isize;
                    if (zs < 0 || zs >= nz as isize) && self.inbox(zs).is_some() {
                        row_of(j, -(C[j][2] as isize), -(C[j][1] as isize), j)
                            .wrapping_offset(-(C[j][0] as isize))
                    } else {
                        // SAFETY: row (z, y) of slot j̄.
                        unsafe { self.a.get().add(OPP[j] * n + row0) }
                    }
                }),
                // SAFETY: row (z, y) of slot i.
                std::array::from_fn(|i| unsafe { self.a.get().add(i * n + row0) }),
            )
        };
        // The two edge nodes alone, the nodes between them in bundles: every bundle of the middle
        // (the last one short where L does not divide nx − 2) then loads and stores
        // x0 ± 1 .. x0 + len ± 1 inside the row.
        let edges = [(0, 1), (nx - 1, 1)].into_iter().take(nx.min(2));
        let middle = (1..nx.saturating_sub(1))
            .step_by(L)
            .map(|x0| (x0, L.min(nx - 1 - x0)));
        let zero = S::store(T::zero());
        for (x0, len) in edges.chain(middle) {
            let plain = x0 > 0
                && x0 + len < nx
                && flags[x0..x0 + len].iter().fold(0, |a, &k| a | k) == 0
                && loads.iter().chain(&stores).all(|p| !p.is_null());
            let mut f = [Lanes::splat(T::zero()); Q];
            if plain {
                for i in 0..Q {
                    let src = loads[i].wrapping_add(x0);
                    // SAFETY: 0 ≤ x0 − c_x and x0 − c_x + len ≤ nx (and the same for stores):
                    // inside the row, whose slots these nodes own in this step (the module's
                    // comment). A short bundle reads its len values only (past them lie the
                    // edge node's slot and other rows, other tasks') and collides zeros in its
                    // other lanes.
                    f[i] = Lanes(loaded(unsafe {
                        if len == L {
                            src.cast::<[S; L]>().read_unaligned()
                        } else {
                            let mut v = [zero; L];
                            std::ptr::copy_nonoverlapping(src, v.as_mut_ptr(), len);
                            v
                        }
                    }));
                }
            } else {
                for (x, p, e) in self.fluid_nodes(flags, row0, x0, len) {
                    for i in 0..Q {
                        // SAFETY: slots this node owns in this step.
                        f[i].0[x] = unsafe {
                            if e.bounce >> i & 1 != 0 {
                                (*self.slot(OPP[i], p)).load() + e.term[i]
                            } else if pull {
                                self.pulled(i, x0 + x, y, z)
                            } else {
                                self.arrived(i, x0 + x, y, z)
                            }
                        };
                    }
                }
            }
            O::collide_with(&mut f, &k, force, None);
            if plain {
                for i in 0..Q {
                    // SAFETY: as for the loads.
                    unsafe { store(&f[i], stores[i].wrapping_add(x0), len) }
                }
            } else {
                for (x, p, e) in self.fluid_nodes(flags, row0, x0, len) {
                    for i in 0..Q {
                        // SAFETY: slots this node owns in this step.
                        unsafe {
                            if pull {
                                self.scatter(i, f[i].0[x], e, x0 + x, y, z)
                            } else {
                                *self.slot(i, p) = S::store(f[i].0[x])
                            }
                        }
                    }
                }
            }
            self.export(&f, z, y, x0, len);
        }
    }

    /// Swaps, in row (z, y), each node's slot i with slot ī of node x + c_i for the directions
    /// with ī > i, where that neighbour is in the slab and not a wall: turns [`Held::Streamed`](crate::Held::Streamed)
    /// into [`Held::Own`](crate::Held::Own) and back. Each pair of slots has one owner (the node from which the pair
    /// leaves along an i with ī > i), so rows swap in parallel.
    pub fn swap_row(&self, z: usize, y: usize) {
        let (nx, ny, nz) = (self.nx, self.ny, self.nz);
        for x in 0..nx {
            let p = (z * ny + y) * nx + x;
            let e = &self.palette[self.index[p] as usize];
            if e.solid {
                continue;
            }
            for i in (1..Q).filter(|&i| OPP[i] > i) {
                if e.bounce >> OPP[i] & 1 != 0 {
                    continue;
                }
                let zt = z as isize + C[i][2] as isize;
                let (Some(xt), Some(yt)) = (
                    Self::wrap(x as isize + C[i][0] as isize, nx, self.periodic[0]),
                    Self::wrap(y as isize + C[i][1] as isize, ny, self.periodic[1]),
                ) else {
                    continue;
                };
                if zt < 0 || zt >= nz as isize {
                    continue;
                }
                let t = (zt as usize * ny + yt) * nx + xt;
                // SAFETY: two distinct slots of the lattice owned by this node's pair.
                unsafe { std::ptr::swap(self.slot(i, p), self.slot(OPP[i], t)) }
            }
        }
    }
}
