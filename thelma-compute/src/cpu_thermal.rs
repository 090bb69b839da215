//! The CPU module's temperature lattice (D3Q7), coupled to the flow step in three passes per step:
//! the thermal pull gives each node its θ and so the force the flow collides with; the flow's row
//! loop, with that force, keeps the velocity that advects θ; the thermal collision then collides
//! the pulled populations (kept between the passes in the arithmetic's precision, as the fused
//! kernel keeps them in registers) and stores the new populations and the crossing ones for the
//! neighbours. Per node this is the order the physics layer prescribes
//! (`thelma_core::physics::thermal`), so a fused kernel computes the same.
//!
//! Layout and protocol are the flow's: `h[i][z][y][x]`, two lattices swapped each step, and the
//! crossing populations (direction 5 up, 6 down) in the interface buffers' slot after the flow's
//! five, of the same parities. Populations are kept in the flow's stored type `S`, scaled by the
//! setup's store scale (`load_thermal`, `store_thermal`: 1 unless stored in 16 bits).

use rayon::prelude::*;
use thelma_core::physics::d3q19::{C, OPP};
use thelma_core::physics::{
    collide_thermal, coupled_force, dirichlet_term, load_thermal, store_thermal, temperature,
    thermal_equilibrium_populations, Arith, ThermalCoefficients, ThermalFace, ThermalSetup, QT,
};
use thelma_core::{ComputeError, Real, SlabSpec, StepPart, Stored};

use super::{part_rows, SyncPtr};

/// The interface slot of the thermal crossing population: after the flow's crossing ones, where the
/// kernels put it too (`THELMA_CROSSING` planes in).
pub(super) const THERMAL_SLOT: usize = thelma_core::physics::D3Q19.crossing();

/// One slab's temperature lattice and its coupling arrays.
pub(super) struct ThermalLattice<T, S> {
    k: ThermalCoefficients<T>,
    /// What closes the faces (and their patches).
    setup: ThermalSetup,
    /// The store scale and its inverse (`ThermalSetup::store_scale`).
    scale: T,
    inv: T,
    /// Lattice A (current) and B (being written), `[i][z][y][x]`, as stored.
    ha: Vec<S>,
    hb: Vec<S>,
    /// Each node's pulled populations between the passes, as collided (`[i][z][y][x]`).
    kept: Vec<T>,
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

impl<T: Real + Arith<Scalar = T>, S: Stored<Arith = T>> ThermalLattice<T, S> {
    /// A slab of `n` nodes at the setup's uniform θ, at rest; `uniform` is the model's body force.
    pub(super) fn new(setup: &ThermalSetup, n: usize, uniform: Option<[f64; 3]>) -> Self {
        let scale = T::of(setup.store_scale);
        let mut ha = vec![S::default(); QT * n];
        let eq = thermal_equilibrium_populations(T::of(setup.initial), [T::zero(); 3]);
        for (i, v) in eq.into_iter().enumerate() {
            ha[i * n..(i + 1) * n].fill(store_thermal(v, scale));
        }
        Self {
            k: ThermalCoefficients::new(&setup.model, |_, x| T::of(x)),
            setup: setup.clone(),
            scale,
            inv: T::of(1.0 / setup.store_scale),
            hb: ha.clone(),
            kept: vec![T::zero(); QT * n],
            ha,
            force: std::array::from_fn(|_| vec![T::zero(); n]),
            u: std::array::from_fn(|_| vec![T::zero(); n]),
            nu: setup.model.turbulent_prandtl.map(|_| vec![T::zero(); n]),
            uniform: uniform.unwrap_or([0.0; 3]).map(T::of),
        }
    }

    /// Holds the held faces and patches at `table` (`ThermalSetup::held_table`'s layout); refused
    /// where an entry leaves what the stored populations can hold (`ThermalSetup::held_bound`).
    pub(super) fn set_held(&mut self, table: &[f64]) -> Result<(), ComputeError> {
        crate::params::check_held(&self.setup, table, S::PRECISION)?;
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

    /// Node p's stored population i of lattice A, as collided.
    #[inline(always)]
    fn load(&self, i: usize, p: usize) -> T {
        load_thermal(self.ha[i * (self.ha.len() / QT) + p], self.inv)
    }

    /// The populations h̃_i(x − c_i) fluid node (x, y, z) = p pulls from lattice A: across a box
    /// face its closure (adiabatic: bounce-back; held: anti-bounce-back to the face's θ; outflow:
    /// the node's own), from an obstacle (a set bit `i ≤ 6` of `mask`, the flow's bounce-back
    /// bits) bounce-back, across a slab or subdomain face the neighbour's interface value,
    /// elsewhere the neighbour (wrapped on periodic, uncut x and y).
    #[inline(always)]
    fn pulled(
        &self,
        slab: &SlabSpec,
        links: &ThermalLinks<S>,
        mask: u32,
        [x, y, z]: [usize; 3],
    ) -> [T; QT] {
        let (nx, ny, nz) = (slab.nx(), slab.ny(), slab.nz());
        let n = slab.nodes();
        let g = slab.grid;
        let periodic = slab.domain.periodic;
        let periodic = [
            periodic[0] && g[0] == 1,
            periodic[1] && g[1] == 1,
            periodic[2],
        ];
        let o = slab.origin();
        let p = (z * ny + y) * nx + x;
        let ha = &self.ha;
        let ld = |j: usize| load_thermal(ha[j], self.inv);
        let mut h = [T::zero(); QT];
        h[0] = ld(p);
        for i in 1..QT {
            let a = (i - 1) / 2;
            let q = [x, y, z][a] as isize - C[i][a] as isize;
            let size = [nx, ny, nz][a] as isize;
            let outside = q < 0 || q >= size;
            // Beyond the slab along z there is a neighbour where its buffer exists, and beyond a
            // grid's x or y side where its channel does; beyond the box elsewhere, a face (or a
            // periodic wrap along x and y).
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
            let face = if outside && !(a < 2 && periodic[a]) && !(across && buf.is_some()) {
                Some(self.setup.face_at(f, [x + o[0], y + o[1], z + o[2]]))
            } else {
                None
            };
            h[i] = match face {
                Some(ThermalFace::Adiabatic) => ld(OPP[i] * n + p),
                Some(ThermalFace::Held(tw)) => -ld(OPP[i] * n + p) + dirichlet_term(T::of(tw)),
                Some(ThermalFace::Outflow) => ld(i * n + p),
                None if mask & (1 << i) != 0 => ld(OPP[i] * n + p),
                None if across => {
                    let b = buf.expect("a neighbour's buffer");
                    // SAFETY: the buffer's thermal slot holds one plane (a side's: the pointer is
                    // the node's own value); y < ny, x < nx. The neighbour wrote it in the
                    // previous step, ordered by the barrier.
                    let v = unsafe { *b.get().add(if a == 2 { y * nx + x } else { 0 }) };
                    load_thermal(v, self.inv)
                }
                None => {
                    let mut s = [x as isize, y as isize, z as isize];
                    s[a] = q.rem_euclid(size);
                    ld(i * n + ((s[2] as usize * ny + s[1] as usize) * nx) + s[0] as usize)
                }
            };
        }
        h
    }

    /// Pass 1: pulls every fluid node of the planes `part` and keeps its populations for pass 3,
    /// and sets the force of every node from the θ its pulled populations carry (a solid node's
    /// own). `bounce(p)` are the flow's bounce-back bits of node p, `solid(p)` whether it is solid.
    pub(super) fn pull(
        &mut self,
        slab: &SlabSpec,
        links: ThermalLinks<S>,
        bounce: &(impl Fn(usize) -> u32 + Sync),
        solid: &(impl Fn(usize) -> bool + Sync),
        part: StepPart,
    ) {
        let (nx, ny, nz) = (slab.nx(), slab.ny(), slab.nz());
        let n = slab.nodes();
        let force = self.force.each_mut().map(|f| SyncPtr(f.as_mut_ptr()));
        let kept = SyncPtr(self.kept.as_mut_ptr());
        let this = &*self;
        part_rows(part, nz, ny).for_each(|(z, y)| {
            for x in 0..nx {
                let p = (z * ny + y) * nx + x;
                let h = if solid(p) {
                    std::array::from_fn(|i| load_thermal(this.ha[i * n + p], this.inv))
                } else {
                    let h = this.pulled(slab, &links, bounce(p), [x, y, z]);
                    for (i, v) in h.into_iter().enumerate() {
                        // SAFETY: node p is written by this task alone.
                        unsafe { *kept.get().add(i * n + p) = v };
                    }
                    h
                };
                let f = coupled_force(temperature(&h), this.uniform, &this.k);
                for a in 0..3 {
                    // SAFETY: as above.
                    unsafe { *force[a].get().add(p) = f[a] };
                }
            }
        });
    }

    /// Pass 3: collides the pulled populations of every fluid node of the planes `part` with the
    /// velocity the flow's pass kept, stores them into lattice B and publishes the boundary
    /// layers' crossing populations (a solid node's are kept as they are); where the part closes
    /// the step, swaps the lattices.
    pub(super) fn collide(
        &mut self,
        slab: &SlabSpec,
        links: ThermalLinks<S>,
        solid: &(impl Fn(usize) -> bool + Sync),
        part: StepPart,
    ) {
        let (nx, ny, nz) = (slab.nx(), slab.ny(), slab.nz());
        let n = slab.nodes();
        let hb = SyncPtr(self.hb.as_mut_ptr());
        let this = &*self;
        let (k, u, nu) = (&this.k, &this.u, &this.nu);
        part_rows(part, nz, ny).for_each(|(z, y)| {
            for x in 0..nx {
                let p = (z * ny + y) * nx + x;
                let h: [S; QT] = if solid(p) {
                    std::array::from_fn(|i| this.ha[i * n + p])
                } else {
                    let mut h: [T; QT] = std::array::from_fn(|i| this.kept[i * n + p]);
                    let nu_t = nu.as_ref().map(|v| v[p]);
                    collide_thermal(&mut h, [u[0][p], u[1][p], u[2][p]], k, nu_t);
                    h.map(|v| store_thermal(v, this.scale))
                };
                for (i, v) in h.into_iter().enumerate() {
                    // SAFETY: node p of lattice B is written by this task alone.
                    unsafe { *hb.get().add(i * n + p) = v };
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
        up: Option<SyncPtr<S>>,
        down: Option<SyncPtr<S>>,
        faces: Option<ThermalFaces<S>>,
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

    /// Lattice A as bytes (after the flow's in a module's populations), as stored.
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
        temperature(&self.populations(p))
    }

    /// The populations of node p of lattice A, as collided.
    pub(super) fn populations(&self, p: usize) -> [T; QT] {
        std::array::from_fn(|i| self.load(i, p))
    }
}
