//! The compute-module trait: the one seam between the runtime and whatever updates a slab (the CPU
//! oracle, the CUDA module, later ones); the channels two neighbouring modules share are in
//! `transport`.
//!
//! A module is created on its worker thread and never leaves it (a CUDA context is bound to its
//! thread), so the trait does not require `Send`. Channels are the only thing shared across
//! threads; its access discipline is the step protocol of DESIGN §3, enforced by the runtime's barrier.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::{Precision, Streaming};
use crate::domain::SlabSpec;

use crate::physics::{ImmersedBodies, Stencil};

/// Refuses a list of slab-local nodes with one outside a slab of `n` nodes (the node-list calls of
/// every module: reads, pulls, per-node forces).
pub fn check_nodes(nodes: &[u32], n: usize) -> Result<(), ComputeError> {
    match nodes.iter().find(|&&p| p as usize >= n) {
        Some(&p) => Err(ComputeError::Invalid(format!(
            "node {p} outside a slab of {n} nodes"
        ))),
        None => Ok(()),
    }
}

/// [`check_nodes`], and one force per node ([`ComputeModule::set_node_forces`]).
pub fn check_node_forces(nodes: &[u32], forces: &[[f64; 3]], n: usize) -> Result<(), ComputeError> {
    if nodes.len() != forces.len() {
        return Err(ComputeError::Invalid(format!(
            "{} forces for {} nodes",
            forces.len(),
            nodes.len()
        )));
    }
    check_nodes(nodes, n)
}

/// A step's number and each immersed point's force density summed over the iterations of that
/// step, in point order ([`ComputeModule::immersed_point_forces`]).
pub type PointForces = (u64, Vec<[f64; 3]>);
use crate::transport::{Channel, Links, Transport, TransportRefused};

/// The macroscopic fields of one slab (or of the whole domain once gathered), `[z][y][x]`, x fastest.
///
/// Always `f64`: widening an `f32` run's values is exact, so comparisons stay bit-exact.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Fields {
    /// Nodes along x, y, z.
    pub size: [usize; 3],
    /// First global z-plane held.
    pub z0: usize,
    /// First global x and y node held: zero but for the subdomains of a partition that cuts x or
    /// y.
    #[serde(default)]
    pub xy0: [usize; 2],
    pub rho: Vec<f64>,
    pub ux: Vec<f64>,
    pub uy: Vec<f64>,
    pub uz: Vec<f64>,
    /// Whether the node is solid (its values are meaningless).
    pub solid: Vec<bool>,
    /// θ = T − T₀ of every node, where the case couples a temperature lattice; empty otherwise.
    pub temperature: Vec<f64>,
    /// The time averages of the same fields (ρ, u and θ over the states sampled since
    /// `output.average_from`), where the outputs carry them; `None` otherwise.
    pub mean: Option<Box<Fields>>,
}

impl Fields {
    pub fn zeros(size: [usize; 3], z0: usize) -> Self {
        let n = size[0] * size[1] * size[2];
        Self {
            size,
            z0,
            xy0: [0, 0],
            rho: vec![0.0; n],
            ux: vec![0.0; n],
            uy: vec![0.0; n],
            uz: vec![0.0; n],
            solid: vec![false; n],
            temperature: Vec::new(),
            mean: None,
        }
    }
    /// Index of local node (x, y, z).
    #[inline]
    pub fn idx(&self, x: usize, y: usize, z: usize) -> usize {
        (z * self.size[1] + y) * self.size[0] + x
    }
    /// Joins the parts of a partition into the whole domain: slabs given in z order are
    /// concatenated, the subdomains of a partition that cuts x or y are copied into place.
    pub fn concat(slabs: Vec<Fields>) -> Fields {
        if slabs.iter().any(|s| s.xy0 != [0, 0])
            || slabs.windows(2).any(|w| w[0].size[..2] != w[1].size[..2])
        {
            return Self::assemble(slabs);
        }
        let mut it = slabs.into_iter();
        let mut all = it.next().unwrap_or_default();
        // The slabs' averages, concatenated once at the end (all or none).
        let mut means: Option<Vec<Fields>> = all.mean.take().map(|m| vec![*m]);
        for s in it {
            debug_assert_eq!(s.z0, all.z0 + all.size[2], "slabs out of order");
            all.size[2] += s.size[2];
            all.rho.extend(s.rho);
            all.ux.extend(s.ux);
            all.uy.extend(s.uy);
            all.uz.extend(s.uz);
            all.solid.extend(s.solid);
            all.temperature.extend(s.temperature);
            means = means.zip(s.mean).map(|(mut v, m)| {
                v.push(*m);
                v
            });
        }
        all.mean = means.map(|v| Box::new(Fields::concat(v)));
        all
    }
    /// The parts of a partition, in any order, copied into one array over the box they tile.
    fn assemble(parts: Vec<Fields>) -> Fields {
        let lo = |a: usize, p: &Fields| if a == 2 { p.z0 } else { p.xy0[a] };
        let origin: [usize; 3] =
            std::array::from_fn(|a| parts.iter().map(|p| lo(a, p)).min().unwrap_or(0));
        let size: [usize; 3] = std::array::from_fn(|a| {
            parts
                .iter()
                .map(|p| lo(a, p) + p.size[a] - origin[a])
                .max()
                .unwrap_or(0)
        });
        let mut all = Fields::zeros(size, origin[2]);
        all.xy0 = [origin[0], origin[1]];
        let theta = parts.iter().any(|p| !p.temperature.is_empty());
        if theta {
            all.temperature = vec![0.0; all.rho.len()];
        }
        let mut means = Vec::new();
        for mut p in parts {
            let at = [p.xy0[0] - origin[0], p.xy0[1] - origin[1], p.z0 - origin[2]];
            let nx = p.size[0];
            for z in 0..p.size[2] {
                for y in 0..p.size[1] {
                    let from = p.idx(0, y, z);
                    let to = all.idx(at[0], at[1] + y, at[2] + z);
                    let row = |dst: &mut Vec<f64>, src: &Vec<f64>| {
                        dst[to..to + nx].copy_from_slice(&src[from..from + nx])
                    };
                    row(&mut all.rho, &p.rho);
                    row(&mut all.ux, &p.ux);
                    row(&mut all.uy, &p.uy);
                    row(&mut all.uz, &p.uz);
                    if theta {
                        row(&mut all.temperature, &p.temperature);
                    }
                    all.solid[to..to + nx].copy_from_slice(&p.solid[from..from + nx]);
                }
            }
            means.push(p.mean.take());
        }
        if means.iter().all(Option::is_some) && !means.is_empty() {
            let m = means.into_iter().map(|m| *m.expect("all")).collect();
            all.mean = Some(Box::new(Fields::assemble(m)));
        }
        all
    }

    /// Total mass over fluid nodes, summed in f64.
    pub fn mass(&self) -> f64 {
        self.rho
            .iter()
            .zip(&self.solid)
            .filter(|(_, s)| !**s)
            .map(|(r, _)| r)
            .sum()
    }
}

/// The axes across a plane normal to `axis`, in increasing order: the plane's first (fastest) and
/// second axes ([`PlaneFields`]).
pub fn plane_axes(axis: usize) -> [usize; 2] {
    match axis {
        0 => [1, 2],
        1 => [0, 2],
        _ => [0, 1],
    }
}

/// The nodes of a slab on one plane normal to an axis: what the live view draws, made where the
/// populations are ([`ComputeModule::read_plane`]) so that only the plane leaves the device.
///
/// Values are `f32` (a picture's precision, half the bytes of `f64`), row-major over the plane's
/// two axes ([`plane_axes`]), the first fastest.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlaneFields {
    /// The axis the plane is normal to.
    pub axis: usize,
    /// Nodes along the plane's first and second axes.
    pub size: [usize; 2],
    pub rho: Vec<f32>,
    pub ux: Vec<f32>,
    pub uy: Vec<f32>,
    pub uz: Vec<f32>,
    /// θ = T − T₀ where the case couples a temperature lattice; empty otherwise.
    pub temperature: Vec<f32>,
    pub solid: Vec<bool>,
}

impl PlaneFields {
    /// An empty plane normal to `axis` (no nodes): what a slab without a z-plane answers.
    pub fn empty(axis: usize) -> Self {
        Self {
            axis,
            ..Default::default()
        }
    }

    /// The parts of one plane normal to `axis` held by the slabs or subdomains, each with its first
    /// node along the plane's two axes, put in place in a plane of `size` nodes (each part in any
    /// order; nodes no part holds stay empty: zero and not solid).
    pub fn join(axis: usize, size: [usize; 2], parts: Vec<([usize; 2], PlaneFields)>) -> Self {
        let n = size[0] * size[1];
        let thermal = parts.iter().any(|(_, p)| !p.temperature.is_empty());
        let mut all = PlaneFields {
            axis,
            size,
            rho: vec![0.0; n],
            ux: vec![0.0; n],
            uy: vec![0.0; n],
            uz: vec![0.0; n],
            temperature: if thermal { vec![0.0; n] } else { Vec::new() },
            solid: vec![false; n],
        };
        for ([i0, j0], p) in parts {
            let w = p.size[0];
            for j in 0..p.size[1] {
                let (from, to) = (j * w, (j0 + j) * size[0] + i0);
                let row = from..from + w;
                all.rho[to..to + w].copy_from_slice(&p.rho[row.clone()]);
                all.ux[to..to + w].copy_from_slice(&p.ux[row.clone()]);
                all.uy[to..to + w].copy_from_slice(&p.uy[row.clone()]);
                all.uz[to..to + w].copy_from_slice(&p.uz[row.clone()]);
                all.solid[to..to + w].copy_from_slice(&p.solid[row.clone()]);
                if !p.temperature.is_empty() {
                    all.temperature[to..to + w].copy_from_slice(&p.temperature[row]);
                }
            }
        }
        all
    }
}

/// The running sums of a slab's time average: over `samples` sampled states, the sum of each
/// field as [`ComputeModule::read_fields`] reports it (ρ, u, and θ with a temperature lattice),
/// added node by node in f64 in the order sampled, so that every slab layout sums the same values
/// to the same bits, and every module too but for the last bit of the CUDA module's f64 velocity
/// (its device division).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MeanSums {
    pub samples: u64,
    /// The sums, in a `Fields` of the slab's shape (its `solid` the slab's mask).
    pub sums: Fields,
}

impl MeanSums {
    /// No samples yet, over a slab shaped like `f` (θ's sum where `f` has a temperature).
    pub fn empty(f: &Fields) -> Self {
        let mut sums = Fields::zeros(f.size, f.z0);
        sums.xy0 = f.xy0;
        sums.solid.clone_from(&f.solid);
        if !f.temperature.is_empty() {
            sums.temperature = vec![0.0; f.rho.len()];
        }
        Self { samples: 0, sums }
    }
    /// Adds one state (its fluid nodes' values; solid nodes keep 0).
    pub fn add(&mut self, f: &Fields) {
        let s = &mut self.sums;
        let add = |sum: &mut [f64], v: &[f64]| {
            for ((a, b), &solid) in sum.iter_mut().zip(v).zip(&f.solid) {
                if !solid {
                    *a += *b;
                }
            }
        };
        add(&mut s.rho, &f.rho);
        add(&mut s.ux, &f.ux);
        add(&mut s.uy, &f.uy);
        add(&mut s.uz, &f.uz);
        add(&mut s.temperature, &f.temperature);
        self.samples += 1;
    }
    /// The sums of several slabs, in z order.
    pub fn concat(slabs: Vec<MeanSums>) -> MeanSums {
        let samples = slabs.first().map_or(0, |m| m.samples);
        debug_assert!(
            slabs.iter().all(|m| m.samples == samples),
            "slabs sampled apart"
        );
        MeanSums {
            samples,
            sums: Fields::concat(slabs.into_iter().map(|m| m.sums).collect()),
        }
    }
    /// The averages (`None` before the first sample).
    pub fn mean(&self) -> Option<Fields> {
        if self.samples == 0 {
            return None;
        }
        let k = self.samples as f64;
        let mut m = self.sums.clone();
        for v in [
            &mut m.rho,
            &mut m.ux,
            &mut m.uy,
            &mut m.uz,
            &mut m.temperature,
        ] {
            v.iter_mut().for_each(|x| *x /= k);
        }
        Some(m)
    }
}

/// What the divergence watchdog learns from a slab.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// The first fluid node (global x, y, z) whose density or velocity is not finite, if any.
    pub non_finite: Option<[usize; 3]>,
    /// Smallest and largest fluid density.
    pub rho_min: f64,
    pub rho_max: f64,
}

/// What the convergence measure learns from a slab: sums over its fluid nodes, in f64, of the
/// velocity's change since the previous measure and of the velocity itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChangeSums {
    /// Σ |u − u_prev|².
    pub diff: f64,
    /// Σ |u|².
    pub norm: f64,
}

impl ChangeSums {
    /// The sums of several slabs, added in the order given (slab order, so that a run's figures do
    /// not depend on which slab answers first).
    pub fn total<'a>(slabs: impl IntoIterator<Item = &'a ChangeSums>) -> ChangeSums {
        slabs
            .into_iter()
            .fold(ChangeSums::default(), |a, s| ChangeSums {
                diff: a.diff + s.diff,
                norm: a.norm + s.norm,
            })
    }

    /// The relative L2 change `‖u − u_prev‖₂ / ‖u‖₂` (0 when the field is zero and unchanged,
    /// infinite when only the previous one was not).
    pub fn relative(&self) -> f64 {
        if self.norm == 0.0 {
            return if self.diff == 0.0 { 0.0 } else { f64::INFINITY };
        }
        (self.diff / self.norm).sqrt()
    }
}

/// An error inside a compute module.
#[derive(Debug, thiserror::Error, Serialize, Deserialize)]
pub enum ComputeError {
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    #[error("{0}")]
    Device(String),
    #[error("kernel compilation failed: {0}")]
    Compile(String),
    #[error("{0}")]
    Invalid(String),
    /// The geometry cannot be represented on the device (bad input, not a device fault).
    #[error("{0}")]
    Geometry(String),
}

/// Which planes of a step a module runs at once ([`ComputeModule::step_overlapped`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepPart {
    /// Every plane of the slab.
    Whole,
    /// The slab's two boundary planes (z = 0 and z = nz − 1; one where nz = 1): those that pull
    /// from the channels and store into them, so that their messages can travel to another rank
    /// while the interior is updated.
    Faces,
    /// The planes between the two boundary planes (none where nz ≤ 2). Faces and interior, in
    /// either order or at once, equal the whole step: no node's update reads another's.
    Interior,
}

impl StepPart {
    /// The part's planes of a slab of `nz` planes as a range of *plane slots*, boundary planes
    /// first: slot 0 is plane 0, slot 1 plane nz − 1, slot k ≥ 2 plane k − 1 ([`Self::plane`]).
    /// The kernels' grids run these slots in this order, and so do the CPU module's rows of a
    /// part (its whole steps run the planes in order).
    pub fn slots(self, nz: usize) -> std::ops::Range<usize> {
        let faces = nz.min(2);
        match self {
            StepPart::Whole => 0..nz,
            StepPart::Faces => 0..faces,
            StepPart::Interior => faces..nz,
        }
    }

    /// The plane of slot `k` of a slab of `nz` planes ([`Self::slots`]).
    #[inline(always)]
    pub fn plane(k: usize, nz: usize) -> usize {
        match k {
            0 => 0,
            1 => nz - 1,
            _ => k - 1,
        }
    }

    /// Whether this part closes a step, run after the other's planes: the work done once after
    /// them (the lattices' swap) is done by it.
    pub fn closes(self) -> bool {
        self != StepPart::Faces
    }
}

/// A collide-and-stream engine for one slab.
///
/// Lifecycle, driven by the runtime on the module's own thread: create (by a [`ModuleFactory`]) →
/// [`allocate_channel`](Self::allocate_channel) for each neighbour it reads from → [`attach`](Self::attach)
/// → any number of [`step`](Self::step) / [`synchronize`](Self::synchronize) / reads → drop.
pub trait ComputeModule {
    /// One line naming the device (`cpu (8 threads)`, `cuda:0 NVIDIA H200`).
    fn describe(&self) -> String;

    /// Allocates the channel this subdomain reads across `side` ([`crate::SIDES`]: populations
    /// from one neighbour), in `transport` (which the module's factory chose), sized for the
    /// populations of the lattices the module exchanges that cross that side. (An outbox written
    /// across `side` has the same size, and is allocated here too.)
    fn allocate_channel(
        &mut self,
        side: usize,
        transport: Transport,
    ) -> Result<Arc<dyn Channel>, ComputeError>;

    /// Connects the channels it reads and writes (a periodic single slab writes its own) and
    /// publishes this slab's boundary layers of the current state into the buffers of parity 1 of
    /// the channels it writes, which step 0 reads.
    fn attach(&mut self, links: Links) -> Result<(), ComputeError>;

    /// Enqueues step `t`: reads the lattice and the buffers of parity `(t + 1) % 2` of the channels
    /// it reads, writes the other lattice and the buffers of parity `t % 2` of the channels it
    /// writes. May return before the step is done.
    fn step(&mut self, t: u64) -> Result<(), ComputeError>;

    /// Enqueues step `t` as [`Self::step`] does, bit for bit, and calls `faces_done` as soon as the
    /// slab's two boundary planes ([`StepPart::Faces`], the only planes that read or write the
    /// channels) are updated and their stores into the channels visible, while the interior may
    /// still be under way: a cluster job's ranks send those stores meanwhile. An error of
    /// `faces_done` is returned as it is. The default runs the whole step first.
    fn step_overlapped(
        &mut self,
        t: u64,
        faces_done: &mut dyn FnMut() -> Result<(), ComputeError>,
    ) -> Result<(), ComputeError> {
        self.step(t)?;
        self.synchronize()?;
        faces_done()
    }

    /// Waits until every enqueued step has finished and its interface stores are visible.
    fn synchronize(&mut self) -> Result<(), ComputeError>;

    /// ρ and u of the owned planes, computed from the current populations.
    fn read_fields(&mut self) -> Result<Fields, ComputeError>;

    /// The watchdog's check of the current populations.
    fn health(&mut self) -> Result<Health, ComputeError>;

    /// The convergence measure, computed where the populations are: over the fluid nodes, Σ |u −
    /// u_prev|² and Σ |u|² in f64, with u exactly as [`read_fields`](Self::read_fields) reports it
    /// (the force's half step included) and u_prev the velocity of the previous call, which the
    /// current velocity then replaces. `None` on the first call after [`attach`](Self::attach) or
    /// [`write_populations`](Self::write_populations), which only records the velocity.
    fn velocity_change(&mut self) -> Result<Option<ChangeSums>, ComputeError>;

    /// The populations of the current lattice, `[i][z][y][x]`, as bytes in the run's precision.
    fn read_populations(&mut self) -> Result<Vec<u8>, ComputeError>;

    /// The current populations of the slab-local nodes `nodes` (index `(z · ny + y) · nx + x`),
    /// `Q` values per node in the order given, widened to `f64`, as stored (shifted, `g = f − w`),
    /// and with a temperature lattice its 7 after them (`Q + 7` per node): what forces on bodies
    /// and probes are computed from, on the host, every few steps.
    fn read_nodes(&mut self, nodes: &[u32]) -> Result<Vec<f64>, ComputeError>;

    /// The populations step `t` will pull into the slab-local nodes `nodes` (what it collides
    /// them from: streamed, bounced back and through the open faces' rules), `Q` per node widened
    /// to `f64`, shifted: the immersed boundary method's velocity before its forcing. Valid
    /// between steps `t − 1` and `t`. Modules without immersed bodies need not provide it.
    fn pull_nodes(&mut self, _t: u64, _nodes: &[u32]) -> Result<Vec<f64>, ComputeError> {
        Err(ComputeError::Invalid(format!(
            "the {} module has no immersed bodies yet",
            self.describe()
        )))
    }

    /// Sets the force density added to the uniform force at the slab-local nodes `nodes` (lattice
    /// units, one per node) for the steps from the next one on, replacing what the last call set
    /// (its nodes go back to the uniform force): the immersed boundary method's forcing.
    fn set_node_forces(
        &mut self,
        _nodes: &[u32],
        _forces: &[[f64; 3]],
    ) -> Result<(), ComputeError> {
        Err(ComputeError::Invalid(format!(
            "the {} module has no immersed bodies yet",
            self.describe()
        )))
    }

    /// Takes `bodies` to force inside its own steps from the next one on (the immersed boundary
    /// method where the populations are, under the model's uniform force besides), when it can: it
    /// holds the whole domain and forces on the device. `false`: the runtime forces them through
    /// [`pull_nodes`](Self::pull_nodes) and [`set_node_forces`](Self::set_node_forces) instead.
    fn hold_immersed(&mut self, _bodies: &ImmersedBodies) -> Result<bool, ComputeError> {
        Ok(false)
    }

    /// Each held body's point forces of the last step run (the force density each point applied
    /// to the fluid, summed over the iterations, in point order) and that step's number; `None`
    /// before the first or without held bodies.
    fn immersed_point_forces(&mut self) -> Result<Option<PointForces>, ComputeError> {
        Ok(None)
    }

    /// Adds the current state to the running sums of the time average ([`MeanSums`]), kept where
    /// the populations are (made at the first call). Enqueued like a step: ordered after the steps
    /// before it, and it may return before it is done.
    fn accumulate_mean(&mut self) -> Result<(), ComputeError>;

    /// The running sums of the time average (no samples before the first
    /// [`accumulate_mean`](Self::accumulate_mean)).
    fn read_mean_sums(&mut self) -> Result<MeanSums, ComputeError>;

    /// Replaces the running sums (a restart; the slab's shape, θ's sum with a temperature lattice).
    fn write_mean_sums(&mut self, sums: &MeanSums) -> Result<(), ComputeError>;

    /// ρ, u and θ of the slab-local nodes whose coordinate along `axis` is `index` (slab-local),
    /// computed as [`read_fields`](Self::read_fields) computes them but only there, and rounded to
    /// `f32`: the live view's picture, at the cost of one plane.
    fn read_plane(&mut self, axis: usize, index: usize) -> Result<PlaneFields, ComputeError>;

    /// Moves the walls of every wall-velocity slot (the geometry's table, in lattice units) at the
    /// velocities `walls` from the next step on: steering a lid, a moving wall or a velocity inlet.
    /// The modules rebuild their bounce-back terms as the geometry builds them
    /// (`thelma_geometry::Geometry::wall_terms`), so that a run resumed with the same table steps
    /// bit for bit as the one steered.
    fn set_wall_velocities(&mut self, walls: &[[f64; 3]]) -> Result<(), ComputeError>;

    /// Holds the temperature lattice's held faces and patches at `table` (θ, lattice units, laid
    /// out as [`ThermalSetup::held_table`](crate::physics::ThermalSetup::held_table)) from the
    /// next step on: steering an inlet's or a wall's temperature. `Invalid` without a temperature
    /// lattice or for a table of another length; a module may also refuse a table other than its
    /// model's where that model did not ask for steered temperatures (the CUDA module then
    /// compiles the held terms into its kernels).
    fn set_held_temperatures(&mut self, table: &[f64]) -> Result<(), ComputeError>;

    /// Replaces the current populations (same layout as [`read_populations`](Self::read_populations)) and
    /// republishes the boundary layers so that the next step `t` reads them (parity `(t + 1) % 2`).
    fn write_populations(&mut self, bytes: &[u8], next_step: u64) -> Result<(), ComputeError>;
}

/// Creates compute modules on their worker threads.
pub trait ModuleFactory: Send + Sync {
    /// Short name of the backend (`cpu`, `cuda`).
    fn backend(&self) -> &'static str;
    /// Where the worker thread of `device` should run: a GPU's PCI bus id, or a share of the cores.
    fn placement(&self, device: usize, slab: &SlabSpec) -> Placement;
    /// Creates the module for `slab` on `device`. Called on the worker thread after it is bound.
    fn create(
        &self,
        device: usize,
        slab: &SlabSpec,
    ) -> Result<Box<dyn ComputeModule>, ComputeError>;
    /// Free and total memory of `device` in bytes, where the backend can tell; checked against
    /// [`slab_bytes`] before anything is allocated.
    fn device_memory(&self, _device: usize) -> Option<MemoryInfo> {
        None
    }
    /// The transport of the channel through which `reader` receives from `writer` (devices of this
    /// backend, possibly the same), under the run's choice; a choice the pair cannot take is
    /// refused. Host backends share plain host memory ([`Transport::ZeroCopy`]).
    fn transport(&self, _reader: usize, _writer: usize) -> Result<Transport, TransportRefused> {
        Ok(Transport::ZeroCopy)
    }
}

/// Free and total memory of a device, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryInfo {
    pub free: u64,
    pub total: u64,
}

/// Bytes a slab of a lattice on `stencil` needs on its device: the lattices of Q populations the
/// streaming holds (two, or one in place), one flag byte per node, the previous velocity of the convergence measure (3 values per node in the
/// arithmetic's precision, made at the first measure) and the channels it reads (two, each of 2
/// buffers of the crossing planes).
pub fn slab_bytes(
    slab: &SlabSpec,
    stencil: &Stencil,
    precision: Precision,
    streaming: Streaming,
) -> u64 {
    let nodes = slab.nodes() as u64;
    let b = precision.bytes() as u64;
    let velocity = 3 * precision.arithmetic().bytes() as u64;
    let lattices = streaming.lattices() as u64;
    (lattices * stencil.q() as u64 * b + velocity + 1) * nodes
        + 4 * slab.interface_values(stencil) as u64 * b
}

/// Bytes a slab's temperature lattice adds to [`slab_bytes`] (D3Q7 beside the flow): two lattices
/// of 7 populations as stored and the thermal plane of the 4 channel buffers; with `passes` (the
/// CPU module, whose step runs in passes) also what it keeps between them in the arithmetic's
/// precision: the pulled populations, the per-node force and the advecting velocity (7 + 3 + 3
/// values). The CUDA module's fused step keeps them in registers.
pub fn thermal_slab_bytes(slab: &SlabSpec, precision: Precision, passes: bool) -> u64 {
    let nodes = slab.nodes() as u64;
    let b = precision.bytes() as u64;
    let arith = precision.arithmetic().bytes() as u64;
    let qt = crate::physics::QT as u64;
    let kept = if passes { (qt + 6) * arith } else { 0 };
    (2 * qt * b + kept) * nodes + 4 * (slab.nx() * slab.ny()) as u64 * b
}

/// Where a worker thread should be bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Near the GPU with this PCI bus id (`0000:19:00.0`).
    Gpu { pci_bus_id: String },
    /// Share `share` of `of` equal shares of the machine's cores.
    Cores { share: usize, of: usize },
    /// Nowhere in particular.
    Anywhere,
}

#[cfg(test)]
mod tests {
    use super::StepPart;

    #[test]
    fn the_faces_and_the_interior_cover_every_plane_once_faces_first() {
        for nz in 1..8 {
            let planes = |p: StepPart| -> Vec<usize> {
                p.slots(nz).map(|k| StepPart::plane(k, nz)).collect()
            };
            let faces = planes(StepPart::Faces);
            assert_eq!(faces, if nz == 1 { vec![0] } else { vec![0, nz - 1] });
            let mut split = faces;
            split.extend(planes(StepPart::Interior));
            let mut whole = planes(StepPart::Whole);
            assert_eq!(
                split, whole,
                "nz = {nz}: the parts run the whole step's slots in order"
            );
            whole.sort_unstable();
            assert_eq!(whole, (0..nz).collect::<Vec<_>>(), "nz = {nz}");
        }
        assert!(!StepPart::Faces.closes());
        assert!(StepPart::Interior.closes() && StepPart::Whole.closes());
    }
}
