//! The CPU module's temperature lattice (D3Q7), coupled to the flow step in three passes per step:
//! the thermal pull gives each node its θ and so the force the flow collides with; the flow's row
//! loop, with that force, keeps the velocity that advects θ; the thermal collision then stores the
//! new populations and the crossing ones for the neighbours. Per node this is the order the
//! physics layer prescribes (`thelma_core::physics::thermal`), so a fused kernel computes the same.
//!
//! Layout and protocol are the flow's: `h[i][z][y][x]`, two lattices swapped each step, and the
//! crossing populations (direction 5 up, 6 down) in the interface buffers' slot after the flow's
//! five, of the same parities.

use rayon::prelude::*;
use thelma_core::physics::d3q19::{C, OPP};
use thelma_core::physics::{
    collide_thermal, coupled_force, dirichlet_term, temperature, thermal_equilibrium_populations,
    Arith, ThermalCoefficients, ThermalFace, ThermalSetup, QT,
};
use thelma_core::{ComputeError, Real, SlabSpec, StepPart};

use super::{part_rows, SyncPtr};

/// The interface slot of the thermal crossing population: after the flow's crossing ones, where the
/// kernels put it too (`THELMA_CROSSING` planes in).
pub(super) const THERMAL_SLOT: usize = thelma_core::physics::D3Q19.crossing();

/// One slab's temperature lattice and its coupling arrays.
pub(super) struct ThermalLattice<T> {
    k: ThermalCoefficients<T>,
    /// What closes the faces (and their patches).
    setup: ThermalSetup,
    /// Lattice A (current) and B (being written), `[i][z][y][x]`.
    pub(super) ha: Vec<T>,
    hb: Vec<T>,
    /// This step's force on the flow, per axis and node: the uniform force plus `θ · (−β g)`.
    pub(super) force: [Vec<T>; 3],
    /// This step's velocity that advects θ, per axis and node, kept by the flow's row loop.
    pub(super) u: [Vec<T>; 3],
    /// This step's eddy viscosity per node, kept by the flow's row loop, when the model has a
    /// turbulent Prandtl number.
    pub(super) nu: Option<Vec<T>>,
    uniform: [T; 3],
}

/// The interface pointers of one thermal pass: this step's incoming buffers (parity (t+1)%2) and
/// outgoing ones (parity t%2), already offset to the thermal slot.
#[derive(Clone, Copy)]
pub(super) struct ThermalLinks<T> {
    pub(super) below_in: Option<SyncPtr<T>>,
    pub(super) above_in: Option<SyncPtr<T>>,
    pub(super) above_out: Option<SyncPtr<T>>,
    pub(super) below_out: Option<SyncPtr<T>>,
    /// Where the partition cuts x or y: the thermal slots of the channels across the x and y
    /// faces.
    pub(super) faces: Option<ThermalFaces<T>>,
}

/// The thermal slots of the channels across a grid subdomain's x and y faces (sides 2–5: x−, x+,
/// y−, y+), read (`(t+1)%2`) and written (`t%2`), each one value per face node at offset
/// `stride · p` for box node p.
#[derive(Clone, Copy)]
pub(super) struct ThermalFaces<T> {
    pub(super) reads: [Option<SyncPtr<T>>; 4],
    pub(super) writes: [Option<SyncPtr<T>>; 4],
    pub(super) stride: [[usize; 3]; 4],
}

impl<T> ThermalFaces<T> {
    /// The offset of box node p in the slot of face `f` (0–3).
    #[inline]
    fn at(&self, f: usize, p: [usize; 3]) -> usize {
        (0..3).map(|a| p[a] * self.stride[f][a]).sum()
    }
}

impl<T: Real + Arith<Scalar = T>> ThermalLattice<T> {
    /// A slab of `n` nodes at the setup's uniform θ, at rest; `uniform` is the model's body force.
    pub(super) fn new(setup: &ThermalSetup, n: usize, uniform: Option<[f64; 3]>) -> Self {
        let mut ha = vec![T::zero(); QT * n];
        let eq = thermal_equilibrium_populations(T::of(setup.initial), [T::zero(); 3]);
        for (i, v) in eq.into_iter().enumerate() {
            ha[i * n..(i + 1) * n].fill(v);
        }
        Self {
            k: ThermalCoefficients::new(&setup.model, |_, x| T::of(x)),
            setup: setup.clone(),
            hb: ha.clone(),
            ha,
            force: std::array::from_fn(|_| vec![T::zero(); n]),
            u: std::array::from_fn(|_| vec![T::zero(); n]),
            nu: setup.model.turbulent_prandtl.map(|_| vec![T::zero(); n]),
            uniform: uniform.unwrap_or([0.0; 3]).map(T::of),
        }
    }

    /// Holds the held faces and patches at `table` (`ThermalSetup::held_table`'s layout).
    pub(super) fn set_held(&mut self, table: &[f64]) -> Result<(), ComputeError> {
        if self.setup.set_held(table) {
            Ok(())
        } else {
            Err(ComputeError::Invalid(format!(
                "{} held temperatures for a table of {}",
                table.len(),
                self.setup.held_table().len()
            )))
        }
    }

    /// Pass 1: pulls every fluid node of the planes `part` thermal populations into lattice B
    /// (before collision) and sets its force from the θ they carry. `bounce(p)` are the flow's
    /// bounce-back bits of node p (a set bit `i ≤ 6` inside the box is an obstacle: adiabatic);
    /// `solid(p)` whether it is solid (its populations are kept).
    pub(super) fn pull(
        &mut self,
        slab: &SlabSpec,
        links: ThermalLinks<T>,
        bounce: &(impl Fn(usize) -> u32 + Sync),
        solid: &(impl Fn(usize) -> bool + Sync),
        part: StepPart,
    ) {
        let (nx, ny, nz) = (slab.nx(), slab.ny(), slab.nz());
        let n = slab.nodes();
        // x and y wrap onto the box where they are periodic and uncut.
        let g = slab.grid;
        let periodic = slab.domain.periodic;
        let periodic = [
            periodic[0] && g[0] == 1,
            periodic[1] && g[1] == 1,
            periodic[2],
        ];
        let ha = &self.ha;
        let hb = SyncPtr(self.hb.as_mut_ptr());
        let force = self.force.each_mut().map(|f| SyncPtr(f.as_mut_ptr()));
        let (k, setup, uniform) = (&self.k, &self.setup, self.uniform);
        let o = slab.origin();
        part_rows(part, nz, ny).for_each(|(z, y)| {
            for x in 0..nx {
                let p = (z * ny + y) * nx + x;
                let mut h: [T; QT] = std::array::from_fn(|i| ha[i * n + p]);
                if !solid(p) {
                    let mask = bounce(p);
                    for i in 1..QT {
                        let a = (i - 1) / 2;
                        let q = [x, y, z][a] as isize - C[i][a] as isize;
                        let size = [nx, ny, nz][a] as isize;
                        let outside = q < 0 || q >= size;
                        // Beyond the slab along z there is a neighbour where its buffer exists,
                        // and beyond a grid's x or y side where its channel does; beyond the box
                        // elsewhere, a face (or a periodic wrap along x and y).
                        let across = outside && (a == 2 || g[a] > 1);
                        let f = 2 * a + usize::from(q >= 0);
                        let buf = match (a, links.faces) {
                            (2, _) if q < 0 => links.below_in,
                            (2, _) => links.above_in,
                            (_, Some(tf)) => tf.reads[f].map(|b| {
                                // SAFETY: the slot holds one value per face node.
                                SyncPtr(unsafe { b.get().add(tf.at(f, [x, y, z])) })
                            }),
                            _ => None,
                        };
                        let face =
                            if outside && !(a < 2 && periodic[a]) && !(across && buf.is_some()) {
                                Some(setup.face_at(f, [x + o[0], y + o[1], z + o[2]]))
                            } else {
                                None
                            };
                        h[i] = match face {
                            Some(ThermalFace::Adiabatic) => ha[OPP[i] * n + p],
                            Some(ThermalFace::Held(tw)) => {
                                -ha[OPP[i] * n + p] + dirichlet_term(T::of(tw))
                            }
                            Some(ThermalFace::Outflow) => ha[i * n + p],
                            None if mask & (1 << i) != 0 => ha[OPP[i] * n + p],
                            None if across => {
                                let b = buf.expect("a neighbour's buffer");
                                // SAFETY: the buffer's thermal slot holds one plane (a side's: the
                                // pointer is the node's own value); y < ny, x < nx. The neighbour
                                // wrote it in the previous step, ordered by the barrier.
                                unsafe { *b.get().add(if a == 2 { y * nx + x } else { 0 }) }
                            }
                            None => {
                                let mut s = [x as isize, y as isize, z as isize];
                                s[a] = q.rem_euclid(size);
                                ha[i * n
                                    + ((s[2] as usize * ny + s[1] as usize) * nx)
                                    + s[0] as usize]
                            }
                        };
                    }
                }
                let f = coupled_force(temperature(&h), uniform, k);
                for a in 0..3 {
                    // SAFETY: node p is written by this task alone.
                    unsafe { *force[a].get().add(p) = f[a] };
                }
                for (i, v) in h.into_iter().enumerate() {
                    // SAFETY: as above, lattice B at node p.
                    unsafe { *hb.get().add(i * n + p) = v };
                }
            }
        });
    }

    /// Pass 3: collides the pulled populations of every fluid node of the planes `part` with the
    /// velocity the flow's pass kept, publishes the boundary layers' crossing populations, and
    /// where the part closes the step swaps the lattices.
    pub(super) fn collide(
        &mut self,
        slab: &SlabSpec,
        links: ThermalLinks<T>,
        solid: &(impl Fn(usize) -> bool + Sync),
        part: StepPart,
    ) {
        let (nx, ny, nz) = (slab.nx(), slab.ny(), slab.nz());
        let n = slab.nodes();
        let hb = SyncPtr(self.hb.as_mut_ptr());
        let (k, u, nu) = (&self.k, &self.u, &self.nu);
        part_rows(part, nz, ny).for_each(|(z, y)| {
            for x in 0..nx {
                let p = (z * ny + y) * nx + x;
                // SAFETY: node p of lattice B is read and written by this task alone.
                let mut h: [T; QT] = std::array::from_fn(|i| unsafe { *hb.get().add(i * n + p) });
                if !solid(p) {
                    let nu_t = nu.as_ref().map(|v| v[p]);
                    collide_thermal(&mut h, [u[0][p], u[1][p], u[2][p]], k, nu_t);
                    for (i, v) in h.into_iter().enumerate() {
                        // SAFETY: as above.
                        unsafe { *hb.get().add(i * n + p) = v };
                    }
                }
                let q = y * nx + x;
                if z + 1 == nz {
                    if let Some(out) = links.above_out {
                        // SAFETY: the thermal slot of up[t%2] holds one plane; q < nx·ny.
                        unsafe { *out.get().add(q) = h[5] };
                    }
                }
                if z == 0 {
                    if let Some(out) = links.below_out {
                        // SAFETY: as above, down[t%2].
                        unsafe { *out.get().add(q) = h[6] };
                    }
                }
                if let Some(tf) = links.faces {
                    // Across x−, x+, y−, y+: directions 2, 1, 4, 3 leave the box there.
                    let on = [x == 0, x + 1 == nx, y == 0, y + 1 == ny];
                    for f in 0..4 {
                        if let (true, Some(out)) = (on[f], tf.writes[f]) {
                            let i = [2, 1, 4, 3][f];
                            // SAFETY: the slot holds one value per face node; this node's is
                            // written by this task alone.
                            unsafe { *out.get().add(tf.at(f, [x, y, z])) = h[i] };
                        }
                    }
                }
            }
        });
        if part.closes() {
            std::mem::swap(&mut self.ha, &mut self.hb);
        }
    }

    /// Writes lattice A's crossing populations of the boundary layers into `up`/`down` (thermal
    /// slots of one parity), as attach and write_populations publish the flow's.
    pub(super) fn publish(
        &self,
        slab: &SlabSpec,
        up: Option<SyncPtr<T>>,
        down: Option<SyncPtr<T>>,
        faces: Option<ThermalFaces<T>>,
    ) {
        if let Some(tf) = faces {
            let (nx, ny) = (slab.nx(), slab.ny());
            let n = slab.nodes();
            for z in 0..slab.nz() {
                for y in 0..ny {
                    for x in 0..nx {
                        let on = [x == 0, x + 1 == nx, y == 0, y + 1 == ny];
                        let p = (z * ny + y) * nx + x;
                        for f in 0..4 {
                            if let (true, Some(out)) = (on[f], tf.writes[f]) {
                                let i = [2, 1, 4, 3][f];
                                // SAFETY: the slot holds one value per face node.
                                unsafe { *out.get().add(tf.at(f, [x, y, z])) = self.ha[i * n + p] };
                            }
                        }
                    }
                }
            }
        }
        let plane = slab.nx() * slab.ny();
        let n = slab.nodes();
        let top = (slab.nz() - 1) * plane;
        if let Some(up) = up {
            // SAFETY: the thermal slot holds one plane of `plane` values.
            unsafe {
                std::ptr::copy_nonoverlapping(self.ha[5 * n + top..].as_ptr(), up.get(), plane)
            }
        }
        if let Some(down) = down {
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(self.ha[6 * n..].as_ptr(), down.get(), plane) }
        }
    }

    /// Lattice A as bytes (after the flow's in a module's populations).
    pub(super) fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.ha)
    }

    /// Replaces lattice A from bytes of [`Self::bytes`]'s length.
    pub(super) fn set_bytes(&mut self, bytes: &[u8]) {
        bytemuck::cast_slice_mut(&mut self.ha).copy_from_slice(bytes);
    }

    /// The force node p collided with at its θ (the uniform force and the buoyancy,
    /// `physics::coupled_force`): θ is what the thermal collision kept of its pulled populations.
    pub(super) fn force_at(&self, p: usize) -> [T; 3] {
        coupled_force(self.theta(p), self.uniform, &self.k)
    }

    /// θ of node p of lattice A.
    pub(super) fn theta(&self, p: usize) -> T {
        let n = self.ha.len() / QT;
        temperature(&std::array::from_fn(|i| self.ha[i * n + p]))
    }
}
