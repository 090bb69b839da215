//! The CPU compute module: the reference oracle, and the way everything runs without a GPU.
//!
//! Same data layout and step protocol as the GPU (DESIGN §2–3): two lattices `[i][z][y][x]`, a fused
//! pull collide-and-propagate that reads lattice A (and the neighbours' interface buffers of the
//! previous step's parity) and writes lattice B (and this step's interface buffers), then swaps A and B.
//! Rows `(z, y)` are spread over a rayon pool; each row is handled in bundles of nodes along x,
//! collided together as vectors: [`LANES`] nodes (one or two AVX2 registers), or on a CPU with
//! AVX-512, detected at run time, one 512-bit register per population ([`WIDE_LANES_F32`] in f32,
//! [`WIDE_LANES_F64`] in f64), with 32 registers instead of 16.
//! Both widths compute every node with the same operations in the same order, so they agree bit for
//! bit.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::Arc;

use rayon::prelude::*;
use thelma_core::physics::d3q19::{C, DOWN, OPP, Q, UP};
use thelma_core::physics::{
    absorb, advecting_velocity, dispatch, eddy_of, node_density, parabola, pressure_terms,
    smagorinsky_relaxation, Absorption, Arith, Coefficients, CollisionOperator, OperatorVisitor,
    Sponges, D3Q19,
};
use thelma_core::{
    channel_offset, ChangeSums, Channel, ComputeError, ComputeModule, Fields, Health, Links,
    MeanSums, ModuleFactory, Placement, PlaneFields, StepPart, Transport, TransportChoice,
    TransportRefused, WALL_SLOTS,
};
use thelma_core::{Half12, Real, ScaledHalf, Stored, Streaming};
use thelma_core::{SlabSpec, SIDES, SIDE_COUNT};
use thelma_geometry::{FlagPalette, LinkRule, NodeFlags};

use crate::fields::{
    check_mean_shape, fields_from_populations, health_of_populations, initial_populations,
    no_means, plane_from_populations, velocity_change_of_populations,
};
use crate::params::ModelParams;

#[path = "cpu_thermal.rs"]
mod thermal;
use crate::params::check_store_scale;
use thermal::{ThermalFaces, ThermalLattice, ThermalLinks, THERMAL_SLOT};

#[path = "cpu_inplace.rs"]
mod inplace;

#[path = "cpu_sides.rs"]
mod sides;
use crate::Held;
use inplace::InPlaceCtx;
use sides::{SideShapes, Source};

/// Nodes along x collided together as one bundle of lanes (one or two AVX2 registers).
pub const LANES: usize = 8;
/// The bundle on a CPU with AVX-512 in f32: one 64-byte register (a cache line) per population.
pub const WIDE_LANES_F32: usize = 16;
/// The same in f64. (Two registers per population, 16 lanes, measured 15–25 % slower: spills.)
pub const WIDE_LANES_F64: usize = 8;

/// Whether this CPU runs the AVX-512 build of the row loop (the wide bundles).
pub fn wide_rows_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512bw")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A bundle of `L` values handled lane by lane; the collision maths, written once over [`Arith`],
/// becomes vector code on it.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Lanes<T, const L: usize>(pub [T; L]);

macro_rules! lane_op {
    ($tr:ident, $f:ident, $op:tt) => {
        impl<T: Real, const L: usize> std::ops::$tr for Lanes<T, L> {
            type Output = Self;
            #[inline(always)]
            fn $f(self, o: Self) -> Self {
                Lanes(std::array::from_fn(|l| self.0[l] $op o.0[l]))
            }
        }
    };
}
lane_op!(Add, add, +);
lane_op!(Sub, sub, -);
lane_op!(Mul, mul, *);
lane_op!(Div, div, /);

impl<T: Real, const L: usize> std::ops::Neg for Lanes<T, L> {
    type Output = Self;
    #[inline(always)]
    fn neg(self) -> Self {
        Lanes(std::array::from_fn(|l| -self.0[l]))
    }
}

impl<T: Real + Arith<Scalar = T>, const L: usize> Arith for Lanes<T, L> {
    type Scalar = T;
    #[inline(always)]
    fn splat(s: T) -> Self {
        Lanes([s; L])
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        Lanes(std::array::from_fn(|l| Arith::sqrt(self.0[l])))
    }
}

/// Creates CPU modules; `devices` CPU devices share the machine's cores evenly.
pub struct CpuFactory {
    params: ModelParams,
    devices: usize,
    threads_per_device: usize,
    transport: TransportChoice,
    wide_rows: bool,
}

impl CpuFactory {
    /// `threads` in all (0: one per core), split over `devices` devices (at least one each).
    pub fn new(params: ModelParams, devices: usize, threads: usize) -> Self {
        let total = if threads == 0 {
            thelma_core::core_count()
        } else {
            threads
        };
        Self {
            params,
            devices,
            threads_per_device: (total / devices.max(1)).max(1),
            transport: TransportChoice::Auto,
            wide_rows: true,
        }
    }

    /// Whether the rows may run in AVX-512 bundles where the CPU has them ([`wide_rows_available`];
    /// the default). `false` runs the portable bundles everywhere, as on a CPU without AVX-512:
    /// both compute every node alike, bit for bit, and the tests compare them.
    pub fn with_wide_rows(mut self, wide: bool) -> Self {
        self.wide_rows = wide;
        self
    }

    /// With the transport a run asks for (`auto` and `zero-copy` are host memory; the GPU
    /// transports are refused when the runtime plans its channels).
    pub fn with_transport(mut self, transport: TransportChoice) -> Self {
        self.transport = transport;
        self
    }
}

impl ModuleFactory for CpuFactory {
    fn backend(&self) -> &'static str {
        "cpu"
    }
    fn transport(&self, _reader: usize, _writer: usize) -> Result<Transport, TransportRefused> {
        match self.transport {
            TransportChoice::Auto | TransportChoice::Fixed(Transport::ZeroCopy) => {
                Ok(Transport::ZeroCopy)
            }
            TransportChoice::Fixed(asked) => Err(TransportRefused {
                asked,
                why: "the CPU module's slabs share host memory (use zero-copy, or --backend cuda)"
                    .into(),
            }),
        }
    }
    fn placement(&self, device: usize, _slab: &SlabSpec) -> Placement {
        Placement::Cores {
            share: device,
            of: self.devices,
        }
    }
    fn create(
        &self,
        _device: usize,
        slab: &SlabSpec,
    ) -> Result<Box<dyn ComputeModule>, ComputeError> {
        /// A module of `T` arithmetic on `S` storage, in the bundles the factory allows.
        fn boxed<T: RowArith, S: Stored<Arith = T>>(
            f: &CpuFactory,
            slab: &SlabSpec,
        ) -> Result<Box<dyn ComputeModule>, ComputeError> {
            let mut m = CpuModule::<T, S>::new(&f.params, slab.clone(), f.threads_per_device)?;
            m.wide &= f.wide_rows;
            Ok(Box::new(m))
        }
        match self.params.precision {
            thelma_core::Precision::F32 => boxed::<f32, f32>(self, slab),
            thelma_core::Precision::F64 => boxed::<f64, f64>(self, slab),
            thelma_core::Precision::F16 => boxed::<f32, ScaledHalf>(self, slab),
            thelma_core::Precision::F16c => boxed::<f32, Half12>(self, slab),
        }
    }
}

/// Zeroed host memory aligned to a cache line (64 bytes), with optional zeroed padding on both sides.
/// The lattices use it so that, where nx is a multiple of the bundle, the wide row loop's stores never
/// straddle two lines, and so that a bundle may load up to [`LATTICE_PAD`] values past either end of
/// the lattice; the interface buffers use it without padding.
struct AlignedBuf<T> {
    /// The allocation; `ptr − pad`.
    base: *mut T,
    /// The first of the `len` values.
    ptr: *mut T,
    len: usize,
    layout: Layout,
}

/// Values of padding before and after each lattice: more than a bundle plus one, so that a bundle's
/// load `x0 − c_x .. x0 − c_x + L` of any row stays inside the allocation; a multiple of 16, so that
/// the lattice itself stays 64-byte aligned in f32 and f64.
const LATTICE_PAD: usize = 64;
const _: () = assert!(
    LATTICE_PAD > LANES + 1
        && LATTICE_PAD > WIDE_LANES_F32 + 1
        && LATTICE_PAD > WIDE_LANES_F64 + 1
        && LATTICE_PAD.is_multiple_of(16)
);

// SAFETY: the memory is a plain allocation owned by this value. Through `&`/`&mut` it is a slice,
// like a `Vec`'s. Raw pointers to it (`ptr`, as the step's `a_raw` and `b`, and as an interface's
// `as_ptr`) are used across threads only under the step protocol: within a step lattice A is only
// read, each row of lattice B and of an interface buffer is written by one task, and an interface's
// buffers of the other parity are only read (see `HostChannel`). In place, each slot of the one
// lattice is read and written by one node's task alone (`cpu_inplace.rs`).
unsafe impl<T: Send> Send for AlignedBuf<T> {}
unsafe impl<T: Sync> Sync for AlignedBuf<T> {}

impl<T: bytemuck::Zeroable> AlignedBuf<T> {
    /// `len` zeroed values, with `pad` more before and after; `what` names the buffer in the
    /// out-of-memory error. `pad · size_of::<T>()` must be a multiple of 64.
    fn zeroed(len: usize, pad: usize, what: &str) -> Result<Self, ComputeError> {
        debug_assert!((pad * std::mem::size_of::<T>()).is_multiple_of(64));
        let oom = || {
            ComputeError::OutOfMemory(format!(
                "cannot allocate {what} of {} MiB",
                len.saturating_mul(std::mem::size_of::<T>()) >> 20
            ))
        };
        let bytes = len
            .checked_add(2 * pad)
            .and_then(|n| n.checked_mul(std::mem::size_of::<T>()))
            .ok_or_else(oom)?;
        let layout = Layout::from_size_align(bytes.max(1), 64).map_err(|_| oom())?;
        // SAFETY: the layout has a non-zero size; all-zero bytes are a valid T (Zeroable).
        let base = unsafe { alloc_zeroed(layout) } as *mut T;
        if base.is_null() {
            return Err(oom());
        }
        // SAFETY: pad ≤ the allocation's length in values.
        let ptr = unsafe { base.add(pad) };
        Ok(Self {
            base,
            ptr,
            len,
            layout,
        })
    }
}

impl<T> Drop for AlignedBuf<T> {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { dealloc(self.base as *mut u8, self.layout) }
    }
}

impl<T> std::ops::Deref for AlignedBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialised (zeroed) values owned by this buffer.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T> std::ops::DerefMut for AlignedBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as above, borrowed mutably through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// Plain, zeroed, cache-line aligned host memory for one channel. Modules on several threads write
/// it through `address`, following the step protocol: within a step, each buffer of a channel is
/// written by exactly one module and the buffer of the other parity is only read; the runtime's
/// barrier (a mutex) orders one step's writes before the next step's reads.
struct HostChannel(AlignedBuf<u8>);

// SAFETY: an `AlignedBuf` of `len` bytes, 64-byte aligned, owned by this value and freed only when it
// drops; modules access it under the step protocol.
unsafe impl Channel for HostChannel {
    fn address(&self) -> *mut u8 {
        self.0.ptr
    }
    fn bytes(&self) -> usize {
        self.0.len
    }
    fn transport(&self) -> Transport {
        Transport::ZeroCopy
    }
    fn device(&self) -> Option<usize> {
        None
    }
}

/// Per palette entry: what the bounce-back and the open-face links of a node of that kind need.
#[derive(Clone, Copy)]
struct Entry<T> {
    solid: bool,
    bounce: u32,
    /// Directions whose rule is anti-bounce-back or a shifted pull (open faces).
    open: u32,
    /// The moving-wall term of a bounce-back link; an anti-bounce-back link's `δρ_w`.
    term: [T; Q],
    links: [LinkRule; Q],
    /// The inlet word ([`thelma_geometry::FlagPalette::inlet`]).
    inlet: u32,
}

/// For each direction, its slot among the five crossing populations (UP for c_z = +1, DOWN for −1).
const fn crossing_slots() -> [usize; Q] {
    let mut s = [usize::MAX; Q];
    let mut k = 0;
    while k < UP.len() {
        s[UP[k]] = k;
        s[DOWN[k]] = k;
        k += 1;
    }
    s
}
const SLOT: [usize; Q] = crossing_slots();

/// The CPU module for one slab, colliding in `T` and storing the populations as `S`.
pub struct CpuModule<T: Real + Arith<Scalar = T>, S: Stored<Arith = T> = T> {
    slab: SlabSpec,
    index: Vec<u16>,
    palette: Vec<Entry<T>>,
    /// The geometry's palette, from which the entries' terms are rebuilt when the walls move.
    flag_palette: FlagPalette,
    params: ModelParams,
    coeff: Coefficients<T>,
    /// The body force in the run's precision, when the model has one.
    force: Option<[T; 3]>,
    a: AlignedBuf<S>,
    /// Lattice B of the two-lattice scheme; empty with in-place streaming.
    b: AlignedBuf<S>,
    /// With in-place streaming, how lattice A is arranged (`cpu_inplace.rs`); `None` with two
    /// lattices.
    held: Option<Held>,
    /// The channels read and written.
    links: Links,
    /// Where the partition cuts x or y: the shapes of the channels across the box's sides.
    sides: Option<SideShapes>,
    pool: rayon::ThreadPool,
    threads: usize,
    /// 512-bit bundles with AVX-512 (when the CPU has it) rather than [`LANES`].
    wide: bool,
    /// The temperature lattice, when the model couples one to the flow.
    thermal: Option<ThermalLattice<T, S>>,
    /// The velocity of the last convergence measure (x, y, z per node; empty until the first) and
    /// whether it belongs to the current run of states (loading populations starts a new one).
    u_prev: Vec<T>,
    u_prev_valid: bool,
    /// The running sums of the time average, made at the first sample.
    means: Option<MeanSums>,
    /// Per-node forces (the immersed bodies'), made at the first [`ComputeModule::set_node_forces`].
    node_forces: Option<NodeForces<T>>,
}

/// The force of every node, per axis (the uniform force where nothing else is set), and the nodes
/// the last call set.
struct NodeForces<T> {
    force: [Vec<T>; 3],
    set: Vec<u32>,
}

impl<T: RowArith, S: Stored<Arith = T>> CpuModule<T, S> {
    pub fn new(params: &ModelParams, slab: SlabSpec, threads: usize) -> Result<Self, ComputeError> {
        let flags = params
            .geometry
            .part([slab.x.clone(), slab.y.clone(), slab.z.clone()])
            .map_err(|e| ComputeError::Geometry(e.to_string()))?;
        let palette: Vec<Entry<T>> = flags
            .palette
            .flags
            .iter()
            .zip(&flags.palette.moving_term)
            .zip(&flags.palette.links)
            .zip(&flags.palette.inlet)
            .map(|(((f, term), links), &inlet)| {
                let mut t = [T::zero(); Q];
                let mut open = 0;
                for i in 0..Q {
                    t[i] = T::of(term[i]);
                    if links[i].is_open() {
                        open |= 1 << i;
                    }
                }
                Entry {
                    solid: f.is_solid(),
                    bounce: f.bounce_mask(),
                    open,
                    term: t,
                    links: *links,
                    inlet,
                }
            })
            .collect();
        let n = slab.nodes();
        let len = n
            .checked_mul(Q)
            .ok_or_else(|| ComputeError::OutOfMemory("lattice size overflows".into()))?;
        let in_place = params.streaming == Streaming::InPlace;
        let open = palette.iter().any(|e| e.open != 0);
        if in_place
            && (open || !params.sponges.is_empty() || params.thermal.is_some() || params.immersed)
        {
            return Err(ComputeError::Invalid(
                "in-place streaming steps neither open faces, a temperature lattice nor immersed bodies"
                    .into(),
            ));
        }
        if slab.cuts_x_or_y() && in_place {
            return Err(ComputeError::Invalid(
                "a partition that cuts x or y steps walls, open faces, periodic axes, obstacles, \
                 immersed bodies and a temperature lattice: not yet in-place streaming"
                    .into(),
            ));
        }
        let a = AlignedBuf::zeroed(len, LATTICE_PAD, "a lattice")?;
        let b = if in_place {
            AlignedBuf::zeroed(0, 0, "a lattice")?
        } else {
            AlignedBuf::zeroed(len, LATTICE_PAD, "a lattice")?
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name({
                let slab = slab.index;
                move |k| format!("thelma-cpu-slab{slab}-{k}")
            })
            .build()
            .map_err(|e| ComputeError::Device(format!("cannot start the CPU thread pool: {e}")))?;
        // The lattices start zeroed: shifted populations at rest (ρ = 1, u = 0).
        let mut m = Self {
            slab,
            index: flags.index,
            palette,
            flag_palette: flags.palette,
            coeff: Coefficients::new(&params.model, |_, x| T::of(x)),
            force: params.model.force.map(|f| f.map(T::of)),
            params: params.clone(),
            a,
            b,
            held: in_place.then_some(Held::Own),
            links: Links::default(),
            sides: None,
            pool,
            threads,
            wide: wide_rows_available(),
            u_prev: Vec::new(),
            u_prev_valid: false,
            means: None,
            node_forces: None,
            thermal: params
                .thermal
                .as_ref()
                .map(|t| ThermalLattice::new(t, n, params.model.force)),
        };
        if m.slab.cuts_x_or_y() {
            m.sides = Some(SideShapes::new(m.slab.size()));
        }
        if let Some(t) = &params.thermal {
            check_store_scale(t, S::PRECISION)?;
        }
        if let Some(init) = &params.initial {
            let g = initial_populations::<T, S>(&m.slab, init)?;
            m.a.copy_from_slice(&g);
        }
        Ok(m)
    }

    fn n(&self) -> usize {
        self.slab.nodes()
    }

    /// Values in one interface buffer: the flow's crossing planes, and the thermal lattice's one
    /// after them when there is one.
    fn interface_values(&self) -> usize {
        let thermal = if self.thermal.is_some() {
            self.slab.nx() * self.slab.ny()
        } else {
            0
        };
        self.slab.interface_values(&D3Q19) + thermal
    }

    /// Values in one buffer of the channel across `side`: a z face's [`Self::interface_values`],
    /// the crossing populations of an x or y side's face or edge.
    fn side_values(&self, side: usize) -> usize {
        match &self.sides {
            // A temperature lattice's crossing population after the flow's across x and y faces.
            Some(sh) if side >= 2 => {
                let (nodes, _) = sh.slot_shape(side);
                let thermal = self.thermal.is_some() && side < 6;
                sh.values(side) + if thermal { nodes } else { 0 }
            }
            _ => self.interface_values(),
        }
    }

    /// The thermal slots of buffers `rin` (read) and `rout` (written) of the channels across the
    /// x and y faces, where the partition cuts x or y and a temperature lattice is coupled.
    fn thermal_faces(&self, rin: usize, rout: usize) -> Option<ThermalFaces<S>> {
        let sh = self.sides.as_ref()?;
        self.thermal.as_ref()?;
        let ptr = |c: &Option<Arc<dyn Channel>>, s: usize, parity: usize| {
            c.as_ref().map(|c| {
                let (nodes, _) = sh.slot_shape(s);
                let at = channel_offset(self.side_values(s), parity) + THERMAL_SLOT * nodes;
                // SAFETY: the channel holds 2 buffers of side_values(s) values, each ending with
                // the thermal slot (checked at attach).
                SyncPtr(unsafe { (c.address() as *mut S).add(at) })
            })
        };
        Some(ThermalFaces {
            reads: std::array::from_fn(|f| ptr(&self.links.reads[f + 2], f + 2, rin)),
            writes: std::array::from_fn(|f| ptr(&self.links.writes[f + 2], f + 2, rout)),
            stride: std::array::from_fn(|f| sh.slot_shape(f + 2).1),
        })
    }

    /// The thermal slot of buffer `parity` of a channel.
    fn thermal_ptr(&self, m: &Option<Arc<dyn Channel>>, parity: usize) -> Option<SyncPtr<S>> {
        let vals = self.interface_values();
        let plane = self.slab.nx() * self.slab.ny();
        m.as_ref().map(|m| {
            // SAFETY: the channel holds 2 buffers of `vals` values, each ending with the thermal
            // plane at THERMAL_SLOT · plane (a module with a thermal lattice allocates it so).
            SyncPtr(unsafe {
                (m.address() as *mut S).add(channel_offset(vals, parity) + THERMAL_SLOT * plane)
            })
        })
    }

    /// The thermal interface pointers of step `t`.
    fn thermal_links(&self, t: u64) -> ThermalLinks<S> {
        let (rin, rout) = (((t + 1) % 2) as usize, (t % 2) as usize);
        let l = &self.links;
        ThermalLinks {
            below_in: self.thermal_ptr(l.from_below(), rin),
            above_in: self.thermal_ptr(l.from_above(), rin),
            above_out: self.thermal_ptr(l.to_above(), rout),
            below_out: self.thermal_ptr(l.to_below(), rout),
            faces: self.thermal_faces(rin, rout),
        }
    }

    /// Writes the crossing populations of the boundary layers of lattice A into the buffers of
    /// `parity` of the channels it writes.
    fn publish(&mut self, parity: usize) {
        let (nx, ny, nz) = (self.slab.nx(), self.slab.ny(), self.slab.nz());
        let n = self.n();
        let plane = nx * ny;
        let off = channel_offset(self.interface_values(), parity);
        if let Some(th) = &self.thermal {
            let up = self.thermal_ptr(self.links.to_above(), parity);
            let down = self.thermal_ptr(self.links.to_below(), parity);
            th.publish(&self.slab, up, down, self.thermal_faces(parity, parity));
        }
        if let Some(above) = self.links.to_above() {
            let out = above.address() as *mut S;
            for (k, &i) in UP.iter().enumerate() {
                let src = &self.a[i * n + (nz - 1) * plane..i * n + nz * plane];
                // SAFETY: the channel holds 2 buffers of `vals` values; `off + k·plane + plane ≤ 2·vals`.
                unsafe {
                    std::ptr::copy_nonoverlapping(src.as_ptr(), out.add(off + k * plane), plane)
                }
            }
        }
        if let Some(below) = self.links.to_below() {
            let out = below.address() as *mut S;
            for (k, &i) in DOWN.iter().enumerate() {
                let src = &self.a[i * n..i * n + plane];
                // SAFETY: as above.
                unsafe {
                    std::ptr::copy_nonoverlapping(src.as_ptr(), out.add(off + k * plane), plane)
                }
            }
        }
        let Some(sh) = &self.sides else { return };
        for s in 2..SIDE_COUNT {
            let Some(c) = &self.links.writes[s] else {
                continue;
            };
            // SAFETY: the channel holds 2 buffers of `side_values(s)` values (checked at attach).
            let off = channel_offset(self.side_values(s), parity);
            let out = unsafe { (c.address() as *mut S).add(off) };
            for z in 0..nz {
                for y in 0..ny {
                    for x in 0..nx {
                        let p = [x, y, z];
                        if !sh.layer_sides(p).any(|t| t == s) {
                            continue;
                        }
                        let at = (z * ny + y) * nx + x;
                        // SAFETY: `out` holds values(s) values.
                        unsafe { sh.store(s, p, out, |i| self.a[i * n + at]) };
                    }
                }
            }
        }
    }

    /// The planes `part` of step `t` ([`StepPart`]: faces and interior, in that order, make the
    /// whole step). With a temperature lattice: its pull (θ, so the force), the flow's step with
    /// that force (which keeps the velocity that advects θ), then its collision; each over the
    /// part's planes, whose nodes depend on no other node's work of this step.
    fn step_part(&mut self, t: u64, part: StepPart) {
        let links = self.thermal_links(t);
        let (index, palette) = (&self.index, &self.palette);
        let bounce = |p: usize| palette[index[p] as usize].bounce;
        let solid = |p: usize| palette[index[p] as usize].solid;
        if let Some(th) = &mut self.thermal {
            self.pool
                .install(|| th.pull(&self.slab, links, &bounce, &solid, part));
        }
        dispatch(
            self.params.model.collision,
            StepWith {
                module: self,
                t,
                part,
            },
        );
        let (index, palette) = (&self.index, &self.palette);
        let solid = |p: usize| palette[index[p] as usize].solid;
        if let Some(th) = &mut self.thermal {
            self.pool
                .install(|| th.collide(&self.slab, links, &solid, part));
        }
    }

    /// Step `t` with operator `O`; `EXTRA`: whether the model has an eddy viscosity or a force (the
    /// plain variant is compiled without either, so it carries no branch on them).
    fn step_with<O: CollisionOperator, const EXTRA: bool>(&mut self, t: u64, part: StepPart) {
        if let Some(held) = self.held {
            return self.step_in_place::<O, EXTRA>(t, held, part);
        }
        let coupling = self.coupling();
        let ctx = self.ctx(t, coupling);
        self.for_rows::<_, O, EXTRA>(&ctx, ctx.nz, ctx.ny, part);
        if part.closes() {
            std::mem::swap(&mut self.a, &mut self.b);
        }
    }

    /// Runs `step` on every row of the planes `part` of the slab (`nz` planes of `ny` rows) on the
    /// pool's threads, in runs of at least 4 rows, in bundles of 512-bit registers where the CPU
    /// has AVX-512.
    fn for_rows<R: RowStep, O: CollisionOperator, const EXTRA: bool>(
        &self,
        step: &R,
        nz: usize,
        ny: usize,
        part: StepPart,
    ) {
        let rows = || part_rows(part, nz, ny).with_min_len(4);
        self.pool.install(|| {
            #[cfg(target_arch = "x86_64")]
            if self.wide {
                // SAFETY: `wide` is set only where the CPU has these AVX-512 subsets.
                return rows().for_each(|(z, y)| unsafe { step.wide_row::<O, EXTRA>(z, y) });
            }
            rows().for_each(|(z, y)| step.narrow_row::<O, EXTRA>(z, y))
        });
    }

    /// The per-node force arrays (and the thermal lattice's side) a step uses, as pointers.
    fn coupling(&mut self) -> Option<Coupling<T>> {
        match (self.thermal.as_mut(), self.node_forces.as_mut()) {
            (Some(th), _) => Some(Coupling {
                force: th.force.each_mut().map(|f| SyncPtr(f.as_mut_ptr())),
                u: Some(th.u.each_mut().map(|u| SyncPtr(u.as_mut_ptr()))),
                nu: th.nu.as_mut().map(|v| SyncPtr(v.as_mut_ptr())),
            }),
            (None, Some(nf)) => Some(Coupling {
                force: nf.force.each_mut().map(|f| SyncPtr(f.as_mut_ptr())),
                u: None,
                nu: None,
            }),
            (None, None) => None,
        }
    }

    /// The interface buffers step `t` reads and writes: from below, from above (buffer
    /// `(t+1)%2` of the channels read), to above, to below (buffer `t%2` of those written).
    fn step_buffers(&self, t: u64) -> [Option<SyncPtr<S>>; 4] {
        let rin = ((t + 1) % 2) as usize;
        let rout = (t % 2) as usize;
        let vals = self.interface_values();
        let ptr_at = |m: &Option<Arc<dyn Channel>>, parity: usize| {
            m.as_ref().map(|m| {
                // SAFETY: the offset lies inside the channel (2 buffers of `vals`).
                SyncPtr(unsafe { (m.address() as *mut S).add(channel_offset(vals, parity)) })
            })
        };
        let l = &self.links;
        [
            ptr_at(l.from_below(), rin),
            ptr_at(l.from_above(), rin),
            ptr_at(l.to_above(), rout),
            ptr_at(l.to_below(), rout),
        ]
    }

    /// The channels across the x and y sides step `t` reads and writes, where the partition cuts
    /// x or y.
    fn side_ctx(&self, t: u64) -> Option<SideCtx<'_, S>> {
        let sh = self.sides.as_ref()?;
        let (rin, rout) = (((t + 1) % 2) as usize, (t % 2) as usize);
        let ptr = |c: &Option<Arc<dyn Channel>>, s: usize, parity: usize| {
            c.as_ref().map(|c| {
                // SAFETY: the channel holds 2 buffers of `values(s)` values (checked at attach).
                SyncPtr(unsafe {
                    (c.address() as *mut S).add(channel_offset(self.side_values(s), parity))
                })
            })
        };
        Some(SideCtx {
            shapes: sh,
            reads: std::array::from_fn(|s| ptr(&self.links.reads[s], s, rin)),
            writes: std::array::from_fn(|s| ptr(&self.links.writes[s], s, rout)),
        })
    }

    /// What step `t` of in-place streaming reads and writes.
    fn in_place_ctx(&self, t: u64) -> InPlaceCtx<'_, T, S> {
        let [below_in, above_in, above_out, below_out] = self.step_buffers(t);
        InPlaceCtx {
            nx: self.slab.nx(),
            ny: self.slab.ny(),
            nz: self.slab.nz(),
            periodic: self.slab.domain.periodic,
            a: SyncPtr(self.a.ptr),
            index: &self.index,
            palette: &self.palette,
            coeff: &self.coeff,
            force: self.force,
            below_in,
            above_in,
            above_out,
            below_out,
        }
    }

    /// Step `t` of in-place streaming with operator `O` (`EXTRA` as for [`Self::step_with`]): the
    /// pull step from [`Held::Own`], the local step from [`Held::Streamed`].
    fn step_in_place<O: CollisionOperator, const EXTRA: bool>(
        &mut self,
        t: u64,
        held: Held,
        part: StepPart,
    ) {
        let pull = held == Held::Own;
        let ctx = self.in_place_ctx(t);
        self.for_rows::<_, O, EXTRA>(&InPlaceStep { ctx: &ctx, pull }, ctx.nz, ctx.ny, part);
        if part.closes() {
            self.held = Some(if pull { Held::Streamed } else { Held::Own });
        }
    }

    /// Lattice A as [`Held::Own`], for what reads it (readers, checkpoints, the exports): an
    /// in-place lattice held [`Held::Streamed`] has its pairs of slots swapped.
    fn own(&mut self) {
        if self.held != Some(Held::Streamed) {
            return;
        }
        let ctx = self.in_place_ctx(0);
        let ny = ctx.ny;
        self.pool.install(|| {
            (0..ctx.nz * ny)
                .into_par_iter()
                .with_min_len(4)
                .for_each(|r| ctx.swap_row(r / ny, r % ny))
        });
        self.held = Some(Held::Own);
    }

    /// Which axes wrap onto the box itself: periodic x and y the partition does not cut, and z
    /// (whose ring of slabs, one or more, exchanges through channels; the step never wraps z).
    fn wraps(&self) -> [bool; 3] {
        let p = self.slab.domain.periodic;
        let g = self.slab.grid;
        [p[0] && g[0] == 1, p[1] && g[1] == 1, p[2]]
    }

    /// What step `t` reads and writes: lattices, this step's interface buffers, per-node forces.
    fn ctx(&self, t: u64, coupling: Option<Coupling<T>>) -> StepCtx<'_, T, S> {
        let [below_in, above_in, above_out, below_out] = self.step_buffers(t);
        StepCtx {
            nx: self.slab.nx(),
            ny: self.slab.ny(),
            nz: self.slab.nz(),
            periodic: self.wraps(),
            a: &self.a,
            a_raw: SyncPtr(self.a.ptr),
            b: SyncPtr(self.b.ptr),
            index: &self.index,
            palette: &self.palette,
            coeff: &self.coeff,
            force: self.force,
            below_in,
            above_in,
            above_out,
            below_out,
            amplitude: self.params.inlets.amplitudes(t).map(T::of),
            z0: self.slab.z.start,
            xy0: [self.slab.x.start, self.slab.y.start],
            size: self.slab.domain.size,
            sides: self.side_ctx(t),
            coupling,
            sponges: (!self.params.sponges.is_empty()).then_some(&self.params.sponges),
        }
    }
}

/// The rows (z, y) of the planes `part` of a slab of `nz` planes of `ny` rows, as a parallel
/// iterator: in plane order for the whole slab, in [`StepPart::slots`] order for a part.
pub(crate) fn part_rows(
    part: StepPart,
    nz: usize,
    ny: usize,
) -> impl IndexedParallelIterator<Item = (usize, usize)> {
    let slots = part.slots(nz);
    let whole = part == StepPart::Whole;
    (slots.start * ny..slots.end * ny)
        .into_par_iter()
        .map(move |r| {
            let (k, y) = (r / ny, r % ny);
            (if whole { k } else { StepPart::plane(k, nz) }, y)
        })
}

/// The run constants (collision coefficients, body force) as lanes of `L`; without `EXTRA` the
/// options are known to be absent, so the collision compiles without them.
#[inline(always)]
fn lane_constants<T: Real + Arith<Scalar = T>, const EXTRA: bool, const L: usize>(
    coeff: &Coefficients<T>,
    force: Option<[T; 3]>,
) -> (Coefficients<Lanes<T, L>>, Option<[Lanes<T, L>; 3]>) {
    let mut k = coeff.map(Lanes::<T, L>::splat);
    let force = if EXTRA {
        force.map(|f| f.map(Lanes::splat))
    } else {
        k.smagorinsky = None;
        None
    };
    (k, force)
}

/// Stores the first `len` lanes of `v` at `dst`: a whole bundle as one fixed-size (vector) store.
///
/// # Safety
/// `dst` must be valid for `len ≤ L` writes that no other thread performs concurrently.
#[inline(always)]
unsafe fn store<T: Real, S: Stored<Arith = T>, const L: usize>(
    v: &Lanes<T, L>,
    dst: *mut S,
    len: usize,
) {
    if len == L {
        let s: [S; L] = std::array::from_fn(|k| S::store(v.0[k]));
        // SAFETY: the caller guarantees L writable values; unaligned, as a row need not be.
        unsafe { (dst as *mut [S; L]).write_unaligned(s) }
    } else {
        for k in 0..len {
            // SAFETY: as above, for len values.
            unsafe { dst.add(k).write(S::store(v.0[k])) }
        }
    }
}

/// The stored values of `src` as a bundle in the arithmetic type (a plain copy where `S` is `T`).
#[inline(always)]
fn loaded<T: Real, S: Stored<Arith = T>, const L: usize>(src: [S; L]) -> [T; L] {
    src.map(S::load)
}

/// A raw pointer that may be shared by the pool's threads during a step.
#[derive(Clone, Copy)]
struct SyncPtr<T>(*mut T);
// SAFETY: used only for writes to disjoint rows (one row per task: lattice B and this step's interface
// buffers), for reads of lattice A (padding included), which no thread writes during the step, and
// for reads of the interface buffers of the other parity, which no thread of this step writes. In
// place, for the reads and writes of slots that belong to one node's task each (`cpu_inplace.rs`).
unsafe impl<T> Send for SyncPtr<T> {}
unsafe impl<T> Sync for SyncPtr<T> {}

impl<T> SyncPtr<T> {
    /// The pointer, taken from the whole value (a closure that names the field would capture the
    /// bare pointer, which is not Sync).
    #[inline(always)]
    fn get(self) -> *mut T {
        self.0
    }
}

/// Runs step `t` of a module with the operator the model names, monomorphised.
struct StepWith<'m, T: Real + Arith<Scalar = T>, S: Stored<Arith = T>> {
    module: &'m mut CpuModule<T, S>,
    t: u64,
    part: StepPart,
}

impl<T: RowArith, S: Stored<Arith = T>> OperatorVisitor for StepWith<'_, T, S> {
    type Output = ();
    fn visit<O: CollisionOperator>(self) {
        let m = self.module;
        if m.coeff.smagorinsky.is_some()
            || m.force.is_some()
            || m.thermal.is_some()
            || m.node_forces.is_some()
        {
            m.step_with::<O, true>(self.t, self.part)
        } else {
            m.step_with::<O, false>(self.t, self.part)
        }
    }
}

/// What a step does to row (z, y), in bundles of `L` nodes collided together: the two-lattice
/// step's [`StepCtx::row`] or an in-place step's [`InPlaceCtx::row`]. [`CpuModule::for_rows`] runs it
/// on every row, in bundles of [`LANES`] ([`RowStep::narrow_row`]) or of 512-bit registers
/// ([`RowStep::wide_row`]).
///
/// Each kind of step has its [`LANES`] rows compiled in a module of its own, and each kind of step
/// and arithmetic type its AVX-512 rows ([`row_modules!`]): the compiler builds each module's functions as one unit, and with the rows
/// of every precision, operator and instruction set in one unit, that unit alone took most of a
/// clean build on one core.
pub trait RowStep: Sync {
    fn step_row<O: CollisionOperator, const EXTRA: bool, const L: usize>(&self, z: usize, y: usize);
    /// Row (z, y) in bundles of [`LANES`].
    fn narrow_row<O: CollisionOperator, const EXTRA: bool>(&self, z: usize, y: usize);
    /// Row (z, y) built for AVX-512, in bundles of one 512-bit register per population.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F, VL, DQ and BW ([`wide_rows_available`]).
    #[cfg(target_arch = "x86_64")]
    unsafe fn wide_row<O: CollisionOperator, const EXTRA: bool>(&self, z: usize, y: usize);
}

/// The CPU module's arithmetic types (f32 and f64), each with its AVX-512 rows in bundles of its
/// 512-bit lanes ([`WIDE_LANES_F32`], [`WIDE_LANES_F64`]): chosen by type, so that no row is
/// compiled for the other type's width. Public in this private module (not exported): a bound of
/// the public `CpuModule`'s impls.
pub trait RowArith: Real + Arith<Scalar = Self> {
    /// A two-lattice step's row; safety as [`RowStep::wide_row`].
    #[cfg(target_arch = "x86_64")]
    unsafe fn wide_pull<R: RowStep, O: CollisionOperator, const EXTRA: bool>(
        step: &R,
        z: usize,
        y: usize,
    );
    /// An in-place step's row; safety as [`RowStep::wide_row`].
    #[cfg(target_arch = "x86_64")]
    unsafe fn wide_in_place<R: RowStep, O: CollisionOperator, const EXTRA: bool>(
        step: &R,
        z: usize,
        y: usize,
    );
}

/// Modules of row functions ([`RowStep`] says why): each `narrow` module runs a kind of step's
/// rows in bundles of [`LANES`], each `wide` one in bundles of its `$lanes`, built for AVX-512.
macro_rules! row_modules {
    (narrow: $($narrow:ident),*; wide: $($wide:ident: $lanes:expr),*;) => {
        $(
            mod $narrow {
                use super::{CollisionOperator, RowStep, LANES};
                /// `step`'s row (z, y) in bundles of [`LANES`].
                pub(super) fn row<R: RowStep, O: CollisionOperator, const EXTRA: bool>(
                    step: &R,
                    z: usize,
                    y: usize,
                ) {
                    step.step_row::<O, EXTRA, LANES>(z, y)
                }
            }
        )*
        $(
            #[cfg(target_arch = "x86_64")]
            mod $wide {
                use super::{CollisionOperator, RowStep};
                /// `step`'s row (z, y) built for AVX-512, in bundles of one 512-bit register per
                /// population: the bundle path (loads, patches, collision, stores) is inlined into
                /// it, so the whole collision is built for the wider registers.
                ///
                /// # Safety
                /// The CPU must support AVX-512 F, VL, DQ and BW.
                #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw")]
                pub(super) unsafe fn row<R: RowStep, O: CollisionOperator, const EXTRA: bool>(
                    step: &R,
                    z: usize,
                    y: usize,
                ) {
                    step.step_row::<O, EXTRA, { $lanes }>(z, y)
                }
            }
        )*
    };
}

row_modules! {
    narrow: pull_rows, in_place_rows;
    wide: pull_rows_f32: super::WIDE_LANES_F32, pull_rows_f64: super::WIDE_LANES_F64,
        in_place_rows_f32: super::WIDE_LANES_F32, in_place_rows_f64: super::WIDE_LANES_F64;
}

/// [`RowArith`] for an arithmetic type whose AVX-512 rows are in modules `$pull` and `$in_place`.
macro_rules! row_arith {
    ($($t:ty: $pull:ident, $in_place:ident;)*) => {$(
        impl RowArith for $t {
            #[cfg(target_arch = "x86_64")]
            #[inline(always)]
            unsafe fn wide_pull<R: RowStep, O: CollisionOperator, const EXTRA: bool>(
                step: &R,
                z: usize,
                y: usize,
            ) {
                $pull::row::<R, O, EXTRA>(step, z, y)
            }
            #[cfg(target_arch = "x86_64")]
            #[inline(always)]
            unsafe fn wide_in_place<R: RowStep, O: CollisionOperator, const EXTRA: bool>(
                step: &R,
                z: usize,
                y: usize,
            ) {
                $in_place::row::<R, O, EXTRA>(step, z, y)
            }
        }
    )*};
}

row_arith! {
    f32: pull_rows_f32, in_place_rows_f32;
    f64: pull_rows_f64, in_place_rows_f64;
}

impl<T: RowArith, S: Stored<Arith = T>> RowStep for StepCtx<'_, T, S> {
    #[inline(always)]
    fn step_row<O: CollisionOperator, const EXTRA: bool, const L: usize>(
        &self,
        z: usize,
        y: usize,
    ) {
        self.row::<O, EXTRA, L>(z, y)
    }
    #[inline(always)]
    fn narrow_row<O: CollisionOperator, const EXTRA: bool>(&self, z: usize, y: usize) {
        pull_rows::row::<Self, O, EXTRA>(self, z, y)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn wide_row<O: CollisionOperator, const EXTRA: bool>(&self, z: usize, y: usize) {
        T::wide_pull::<Self, O, EXTRA>(self, z, y)
    }
}

/// The pull step (`pull`) or the local step of in-place streaming.
struct InPlaceStep<'c, 'a, T: Real, S> {
    ctx: &'c InPlaceCtx<'a, T, S>,
    pull: bool,
}

impl<T: RowArith, S: Stored<Arith = T>> RowStep for InPlaceStep<'_, '_, T, S> {
    #[inline(always)]
    fn step_row<O: CollisionOperator, const EXTRA: bool, const L: usize>(
        &self,
        z: usize,
        y: usize,
    ) {
        self.ctx.row::<O, EXTRA, L>(z, y, self.pull)
    }
    #[inline(always)]
    fn narrow_row<O: CollisionOperator, const EXTRA: bool>(&self, z: usize, y: usize) {
        in_place_rows::row::<Self, O, EXTRA>(self, z, y)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn wide_row<O: CollisionOperator, const EXTRA: bool>(&self, z: usize, y: usize) {
        T::wide_in_place::<Self, O, EXTRA>(self, z, y)
    }
}

struct StepCtx<'a, T: Real + Arith<Scalar = T>, S: Stored<Arith = T>> {
    nx: usize,
    ny: usize,
    nz: usize,
    periodic: [bool; 3],
    a: &'a [S],
    /// Lattice A as a raw pointer to the whole padded allocation, for bundle loads that may reach
    /// past a row's ends into the neighbouring rows or the padding.
    a_raw: SyncPtr<S>,
    b: SyncPtr<S>,
    index: &'a [u16],
    palette: &'a [Entry<T>],
    coeff: &'a Coefficients<T>,
    force: Option<[T; 3]>,
    /// Buffer `(t+1)%2` of the channel from below: populations arriving from below.
    below_in: Option<SyncPtr<S>>,
    /// Buffer `(t+1)%2` of the channel from above: populations arriving from above.
    above_in: Option<SyncPtr<S>>,
    /// Buffer `t%2` of the slab above's channel from below: this slab's top layer going up.
    above_out: Option<SyncPtr<S>>,
    /// Buffer `t%2` of the slab below's channel from above: this slab's bottom layer going down.
    below_out: Option<SyncPtr<S>>,
    /// This step's amplitude of each wall-velocity slot (velocity inlets scale their links by it).
    amplitude: [T; WALL_SLOTS],
    /// The slab's first plane in the domain, and the domain's size (inlet profiles are in global
    /// coordinates).
    z0: usize,
    /// The box's first node along x and y (zero but in a grid that cuts them).
    xy0: [usize; 2],
    size: [usize; 3],
    /// With a temperature lattice: each node's force from this step's θ, and where the velocity
    /// that advects θ is kept.
    coupling: Option<Coupling<T>>,
    /// The sponge layers of pressure outlets, when the case has any.
    sponges: Option<&'a Sponges>,
    /// The channels across the x and y sides, where the partition cuts x or y.
    sides: Option<SideCtx<'a, S>>,
}

/// One step's channels across a box's sides ([`sides`]): buffer `(t+1)%2` of those read, `t%2` of
/// those written, by side (the z faces' are the step's other buffers).
#[derive(Clone, Copy)]
struct SideCtx<'a, S> {
    shapes: &'a SideShapes,
    reads: [Option<SyncPtr<S>>; SIDE_COUNT],
    writes: [Option<SyncPtr<S>>; SIDE_COUNT],
}

impl<S: Copy> SideCtx<'_, S> {
    /// Direction `i`'s value pulled from box position `src` beyond an x or y side: from the
    /// channel across that side, or `None` at a wall.
    #[inline]
    fn pulled(&self, i: usize, src: [isize; 3], wrap: [bool; 2]) -> Option<S> {
        match self
            .shapes
            .resolve(src, wrap, |s| self.reads[s].is_some())?
        {
            Source::Inside(_) => unreachable!("a pull across a side from inside the box"),
            Source::Across(s, p) => {
                let buf = self.reads[s].expect("resolved to a channel");
                // SAFETY: the offset lies in the buffer (values(s) values); the neighbour wrote it
                // in the previous step, ordered before this one by the barrier.
                Some(unsafe { *buf.0.add(self.shapes.offset(s, i, p)) })
            }
        }
    }

    /// Whether row (z, y) pulls across a y side with a channel (the gather path).
    #[inline]
    fn y_row(&self, y: usize, ny: usize) -> bool {
        (y == 0 && self.reads[4].is_some()) || (y + 1 == ny && self.reads[5].is_some())
    }
}

/// The flow step's per-node force: per-axis arrays of one value per node, the force read and, with a
/// temperature lattice, the advecting velocity written (each node by the task of its row).
#[derive(Clone, Copy)]
struct Coupling<T> {
    force: [SyncPtr<T>; 3],
    /// Without a temperature lattice (forces of immersed bodies only), none.
    u: Option<[SyncPtr<T>; 3]>,
    /// The eddy viscosity per node, kept for a turbulent Prandtl number.
    nu: Option<SyncPtr<T>>,
}

impl<T: Real + Arith<Scalar = T>, S: Stored<Arith = T>> StepCtx<'_, T, S> {
    /// Where direction `i` pulls from for destination row (z, y): a row of lattice A (its offset), a
    /// row of an interface buffer (`Err(ys)`, the source row's y), or `None` for a wall.
    #[inline]
    fn source(&self, i: usize, z: usize, y: usize) -> Option<Result<usize, usize>> {
        let (nx, ny, nz) = (self.nx, self.ny, self.nz);
        let mut ys = y as isize - C[i][1] as isize;
        if ys < 0 || ys >= ny as isize {
            if !self.periodic[1] {
                return None;
            }
            ys = ys.rem_euclid(ny as isize);
        }
        let ys = ys as usize;
        let zs = z as isize - C[i][2] as isize;
        if zs >= 0 && (zs as usize) < nz {
            return Some(Ok(i * nx * ny * nz + (zs as usize * ny + ys) * nx));
        }
        let buf = if zs < 0 { self.below_in } else { self.above_in };
        buf.map(|_| Err(ys))
    }

    /// The row of `nx` values that direction `i` pulls from for destination row (z, y), or `None`
    /// when the whole source row is a wall.
    #[inline]
    fn source_row(&self, i: usize, z: usize, y: usize) -> Option<&[S]> {
        let (nx, ny) = (self.nx, self.ny);
        if let Some(sc) = &self.sides {
            // Rows pulled across an x or y side's channel too; a whole row lies along x in every
            // channel whose side does not cross x.
            let src = [
                0,
                y as isize - C[i][1] as isize,
                z as isize - C[i][2] as isize,
            ];
            let wrap = [self.periodic[0], self.periodic[1]];
            return match sc.shapes.resolve(src, wrap, |s| sc.reads[s].is_some())? {
                Source::Inside(p) => {
                    let start = i * nx * ny * self.nz + (p[2] * ny + p[1]) * nx;
                    Some(&self.a[start..start + nx])
                }
                Source::Across(s, p) => {
                    let buf = sc.reads[s].expect("resolved to a channel");
                    // SAFETY: the row's nx values lie in the buffer (x is a free axis of the
                    // side, with stride 1); written in the previous step, ordered by the barrier.
                    Some(unsafe {
                        std::slice::from_raw_parts(buf.0.add(sc.shapes.offset(s, i, p)), nx)
                    })
                }
            };
        }
        let plane = nx * ny;
        let ys = match self.source(i, z, y)? {
            Ok(start) => return Some(&self.a[start..start + nx]),
            Err(ys) => ys,
        };
        // The source plane z − c_z lies below the slab (z = 0, c_z = +1) or above it.
        let below = (z as isize) < C[i][2] as isize;
        let buf = if below { self.below_in } else { self.above_in }?;
        // SAFETY: the buffer holds 5 planes of `plane` values; SLOT[i] < 5 and ys < ny. The neighbour
        // wrote it in the previous step, ordered before this step by the barrier.
        Some(unsafe { std::slice::from_raw_parts(buf.0.add(SLOT[i] * plane + ys * nx), nx) })
    }

    /// Pulls the populations of the `len ≤ L` nodes from `x0` of row (z, y) into `f`, with the
    /// bounce-back of their flags; returns whether one of them is solid.
    #[inline(always)]
    fn gather<const L: usize>(
        &self,
        f: &mut [Lanes<T, L>; Q],
        sources: &[Option<&[S]>; Q],
        row0: usize,
        x0: usize,
        len: usize,
    ) -> bool {
        let nx = self.nx;
        // Pull: f_i(x) = f̃_i(x − c_i). From a wall row, or across a non-periodic x boundary, the
        // value is unused (bounced below) and set to zero.
        for i in 0..Q {
            let dst = &mut f[i].0[..len];
            let Some(src) = sources[i] else {
                dst.fill(T::zero());
                continue;
            };
            let lo = x0 as isize - C[i][0] as isize;
            if len == L && lo >= 0 && lo as usize + L <= nx {
                // Fixed-size copy: inline vector moves rather than a memmove call.
                f[i].0 = loaded(
                    src[lo as usize..lo as usize + L]
                        .try_into()
                        .expect("bundle"),
                );
            } else if lo >= 0 && lo as usize + len <= nx {
                for (d, s) in dst.iter_mut().zip(&src[lo as usize..lo as usize + len]) {
                    *d = s.load();
                }
            } else {
                // One node pulls from across the x boundary (|c_x| = 1): copy the in-range part,
                // then the wrapped (periodic) or unused (wall) end.
                let (a, b) = (lo.max(0) as usize, ((lo + len as isize) as usize).min(nx));
                let off = (a as isize - lo) as usize;
                for (d, s) in dst[off..off + (b - a)].iter_mut().zip(&src[a..b]) {
                    *d = s.load();
                }
                let edge = |xs: isize| {
                    if self.periodic[0] {
                        src[xs.rem_euclid(nx as isize) as usize].load()
                    } else {
                        self.across_x(i, xs, row0)
                    }
                };
                if lo < 0 {
                    dst[0] = edge(lo);
                }
                if lo + len as isize > nx as isize {
                    dst[len - 1] = edge(lo + len as isize - 1);
                }
            }
        }
        self.bounce_back(f, row0, x0, len)
    }

    /// Direction `i`'s value pulled from x = `xs` (−1 or nx) by the node of row `row0` at the x
    /// boundary: from the channel across the x side where the partition cuts x, otherwise zero (a
    /// wall; the node bounces back there).
    #[inline]
    fn across_x(&self, i: usize, xs: isize, row0: usize) -> T {
        let Some(sc) = &self.sides else {
            return T::zero();
        };
        let (y, z) = (row0 / self.nx % self.ny, row0 / (self.nx * self.ny));
        let src = [
            xs,
            y as isize - C[i][1] as isize,
            z as isize - C[i][2] as isize,
        ];
        sc.pulled(i, src, [self.periodic[0], self.periodic[1]])
            .map_or(T::zero(), |v| v.load())
    }

    /// Bounce-back of the `len` nodes of the bundle at x0: f_i(x) = f̃_ī(x) + 6 w_i ρ_w (c_i · u_w)
    /// where x − c_i is a wall. Returns whether one of them is solid.
    #[inline(always)]
    fn bounce_back<const L: usize>(
        &self,
        f: &mut [Lanes<T, L>; Q],
        row0: usize,
        x0: usize,
        len: usize,
    ) -> bool {
        let n = self.nx * self.ny * self.nz;
        let mut any_solid = false;
        for x in 0..len {
            let k = self.index[row0 + x0 + x] as usize;
            if k == 0 {
                continue;
            }
            let e = &self.palette[k];
            any_solid |= e.solid;
            let mut m = e.bounce;
            while m != 0 {
                let i = m.trailing_zeros() as usize;
                m &= m - 1;
                f[i].0[x] = self.a[OPP[i] * n + row0 + x0 + x].load() + e.term[i];
            }
            if e.open != 0 {
                self.open_links(f, e, row0 + x0 + x, x);
            }
        }
        any_solid
    }

    /// The open-face links of the node at offset `p` of the slab (lane `lane` of the bundle):
    /// anti-bounce-back to a pressure outlet's density, and the shifted pulls of outflows and
    /// free-slip walls.
    #[cold]
    fn open_links<const L: usize>(
        &self,
        f: &mut [Lanes<T, L>; Q],
        e: &Entry<T>,
        p: usize,
        lane: usize,
    ) {
        let (nx, ny) = (self.nx, self.ny);
        let n = nx * ny * self.nz;
        let node: [T; Q] = std::array::from_fn(|j| self.a[j * n + p].load());
        let mut terms = None;
        let mut rho = None;
        let (x, y, z) = (p % nx, p / nx % ny, p / (nx * ny));
        let mut m = e.open;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            f[i].0[lane] = match e.links[i] {
                LinkRule::AntiBounce { .. } => {
                    let t = terms.get_or_insert_with(|| pressure_terms(&node, e.term[i]));
                    -node[OPP[i]] + t[(i - 1) / 2]
                }
                LinkRule::Shift { dir, offset } => self.value_at(
                    dir,
                    x as isize + offset[0] as isize,
                    y as isize + offset[1] as isize,
                    z as isize + offset[2] as isize,
                ),
                LinkRule::Inlet => {
                    let rho = *rho.get_or_insert_with(|| node_density(&node));
                    let bits = NodeFlags::SLOT_BITS;
                    let a = self.amplitude[(e.inlet & ((1 << bits) - 1)) as usize];
                    node[OPP[i]] + rho * e.term[i] * self.inlet_scale(e.inlet, a, i, [x, y, z])
                }
                LinkRule::Pull | LinkRule::Bounce => unreachable!("not an open link"),
            };
        }
    }

    /// The factor on inlet link `i` of slab node `p`: the amplitude `s` times the profile's
    /// [`parabola`] across each axis of the inlet word, in the domain's coordinates, at the point
    /// where the link crosses the face (`x − c_i/2`).
    fn inlet_scale(&self, word: u32, mut s: T, i: usize, p: [usize; 3]) -> T {
        let bits = NodeFlags::SLOT_BITS;
        let q = [p[0] + self.xy0[0], p[1] + self.xy0[1], p[2] + self.z0];
        for a in 0..3 {
            if word >> (bits + a as u32) & 1 != 0 {
                let at = T::of(q[a] as f64) - T::of(0.5 * C[i][a] as f64);
                s = s * parabola(at, T::of(self.size[a] as f64));
            }
        }
        s
    }

    /// Population `j` of lattice A at node (x, y, z) of the slab, wrapped on periodic x and y; a
    /// plane beyond the slab's z faces is read from the neighbour's interface buffer (`j` then
    /// crosses that face, as every shifted pull's source does).
    fn value_at(&self, j: usize, x: isize, y: isize, z: isize) -> T {
        let (nx, ny, nz) = (self.nx, self.ny, self.nz);
        if let Some(sc) = &self.sides {
            // A grid's subdomain: beyond an x or y side the value comes through its channel.
            let wrap = [self.periodic[0], self.periodic[1]];
            let has = |s: usize| sc.reads[s].is_some();
            return match sc.shapes.resolve([x, y, z], wrap, has) {
                Some(Source::Inside(p)) => {
                    self.a[j * nx * ny * nz + (p[2] * ny + p[1]) * nx + p[0]].load()
                }
                Some(Source::Across(..)) => {
                    sc.pulled(j, [x, y, z], wrap).expect("a channel").load()
                }
                None => panic!("a shifted pull across a side without a neighbour"),
            };
        }
        let x = x.rem_euclid(nx as isize) as usize;
        let y = y.rem_euclid(ny as isize) as usize;
        if z >= 0 && (z as usize) < nz {
            return self.a[j * nx * ny * nz + (z as usize * ny + y) * nx + x].load();
        }
        let buf = if z < 0 { self.below_in } else { self.above_in };
        let buf = buf.expect("a shifted pull across a slab face has a neighbour");
        debug_assert_eq!(C[j][2], if z < 0 { 1 } else { -1 });
        // SAFETY: the buffer holds 5 planes of nx·ny values; SLOT[j] < 5 as j crosses the face, and
        // x < nx, y < ny. The neighbour wrote it in the previous step, ordered by the barrier.
        unsafe { *buf.0.add(SLOT[j] * nx * ny + y * nx + x) }.load()
    }

    /// Stores the first `len` nodes of a collided bundle at x0 of row (z, y) to lattice B and, on a
    /// boundary layer, to the interface buffers.
    #[inline(always)]
    fn put<const L: usize>(&self, f: &[Lanes<T, L>; Q], z: usize, y: usize, x0: usize, len: usize) {
        let (nx, ny, nz) = (self.nx, self.ny, self.nz);
        let plane = nx * ny;
        let n = plane * nz;
        let at = (z * ny + y) * nx + x0;
        for i in 0..Q {
            // SAFETY: row (z, y) of lattice B is written by this task alone; x0 + len ≤ nx.
            unsafe { store(&f[i], self.b.0.add(i * n + at), len) }
        }
        if z + 1 == nz {
            if let Some(out) = self.above_out {
                for (k, &i) in UP.iter().enumerate() {
                    // SAFETY: slot k of buffer up[t%2]; this row's values are written by this task alone.
                    unsafe { store(&f[i], out.0.add(k * plane + y * nx + x0), len) }
                }
            }
        }
        if z == 0 {
            if let Some(out) = self.below_out {
                for (k, &i) in DOWN.iter().enumerate() {
                    // SAFETY: as above, buffer down[t%2].
                    unsafe { store(&f[i], out.0.add(k * plane + y * nx + x0), len) }
                }
            }
        }
        if let Some(sc) = &self.sides {
            self.put_sides(sc, f, z, y, x0, len);
        }
    }

    /// Stores the nodes of a collided bundle on an x or y layer into the channels across those
    /// sides: lanes at x = 0 and x = nx − 1 across x, the whole bundle across y.
    #[cold]
    fn put_sides<const L: usize>(
        &self,
        sc: &SideCtx<'_, S>,
        f: &[Lanes<T, L>; Q],
        z: usize,
        y: usize,
        x0: usize,
        len: usize,
    ) {
        let (nx, ny, nz) = (self.nx, self.ny, self.nz);
        let on = |d: i32, v: usize, n: usize| d == 0 || (d < 0 && v == 0) || (d > 0 && v + 1 == n);
        for s in 2..SIDE_COUNT {
            let Some(out) = sc.writes[s] else { continue };
            let d = SIDES[s];
            if !on(d[2], z, nz) || !on(d[1], y, ny) {
                continue;
            }
            let lanes = match d[0] {
                0 => 0..len,
                -1 if x0 == 0 => 0..1,
                1 if x0 + len == nx => len - 1..len,
                _ => continue,
            };
            for lane in lanes {
                // SAFETY: `out` is buffer t%2 of the channel across s (values(s) values); this
                // node's values there are written by this task alone.
                unsafe {
                    sc.shapes
                        .store(s, [x0 + lane, y, z], out.0, |i| S::store(f[i].0[lane]))
                };
            }
        }
    }

    /// Corrects the bundle at x0 of row (z, y), loaded whole from its source rows, where that load
    /// is not the pull: lanes that pull across an x boundary (wrapped on a periodic axis, otherwise
    /// zero, as such a node bounces back there) and nodes with bounce-back. Returns whether one of
    /// the `len` nodes is solid.
    #[inline(always)]
    fn patch<const L: usize>(
        &self,
        f: &mut [Lanes<T, L>; Q],
        starts: &[Option<usize>; Q],
        row0: usize,
        x0: usize,
        len: usize,
    ) -> bool {
        let nx = self.nx;
        for i in 0..Q {
            let Some(start) = starts[i] else { continue };
            // Node 0 pulls from x = −1 for c_x = +1; node nx − 1 from x = nx for c_x = −1.
            if x0 == 0 && C[i][0] == 1 {
                f[i].0[0] = if self.periodic[0] {
                    self.a[start + nx - 1].load()
                } else {
                    self.across_x(i, -1, row0)
                };
            }
            if x0 + len == nx && C[i][0] == -1 {
                f[i].0[len - 1] = if self.periodic[0] {
                    self.a[start].load()
                } else {
                    self.across_x(i, nx as isize, row0)
                };
            }
        }
        self.bounce_back(f, row0, x0, len)
    }

    /// Solid nodes among the `len` of the bundle at x0 keep their populations.
    #[inline(always)]
    fn keep_solids<const L: usize>(
        &self,
        f: &mut [Lanes<T, L>; Q],
        row0: usize,
        x0: usize,
        len: usize,
    ) {
        let n = self.nx * self.ny * self.nz;
        for x in 0..len {
            if self.palette[self.index[row0 + x0 + x] as usize].solid {
                for i in 0..Q {
                    f[i].0[x] = self.a[i * n + row0 + x0 + x].load();
                }
            }
        }
    }

    /// With per-node forces (immersed bodies): the force of the `len` nodes at slab offset `at`
    /// instead of the uniform one. With a temperature lattice: that force (from their θ,
    /// set by the thermal pull), and the velocity that advects θ, from
    /// their pulled populations under that force, kept for the thermal collision (with the eddy
    /// viscosity under the run constants `k`, for a turbulent Prandtl number, whose relaxation
    /// time it returns for the flow's collision). Without one, the uniform force as it is.
    #[inline(always)]
    fn couple<const L: usize>(
        &self,
        f: &[Lanes<T, L>; Q],
        force: Option<[Lanes<T, L>; 3]>,
        k: &Coefficients<Lanes<T, L>>,
        at: usize,
        len: usize,
    ) -> (Option<[Lanes<T, L>; 3]>, Option<Lanes<T, L>>) {
        let Some(c) = &self.coupling else {
            return (force, None);
        };
        let fl: [Lanes<T, L>; 3] = std::array::from_fn(|a| {
            let mut l = Lanes::splat(T::zero());
            for x in 0..len {
                // SAFETY: at + len ≤ the slab's nodes; the thermal pull wrote these before the step.
                l.0[x] = unsafe { *c.force[a].0.add(at + x) };
            }
            l
        });
        let Some(cu) = c.u else {
            return (Some(fl), None);
        };
        let u = advecting_velocity(f, Some(fl));
        for a in 0..3 {
            for x in 0..len {
                // SAFETY: nodes at..at + len belong to this task's row.
                unsafe { *cu[a].0.add(at + x) = u[a].0[x] };
            }
        }
        // The eddy viscosity's relaxation time, evaluated once: the temperature's diffusivity
        // follows it, and the flow collides with it.
        let mut tau = None;
        if let Some(nu) = c.nu {
            if let Some(t) = smagorinsky_relaxation(f, k, Some(fl)) {
                let v = eddy_of(t, k);
                for x in 0..len {
                    // SAFETY: as above.
                    unsafe { *nu.0.add(at + x) = v.0[x] };
                }
                tau = Some(t);
            }
        }
        (Some(fl), tau)
    }

    /// The sponge layers' absorption of the collided bundle at x0 of row (z, y): each of its `len`
    /// nodes in a layer is relaxed towards the outlet's density ([`absorb`], computed on the whole
    /// bundle and kept in those lanes only, so that each equals the node-by-node call bit for bit).
    #[inline(always)]
    fn absorb<const L: usize>(
        &self,
        f: &mut [Lanes<T, L>; Q],
        z: usize,
        y: usize,
        x0: usize,
        len: usize,
    ) {
        let Some(sp) = self.sponges else { return };
        let z = self.z0 + z;
        let [gx, y] = [self.xy0[0] + x0, self.xy0[1] + y];
        if !sp.touches(gx, gx + len, y, z) {
            return;
        }
        let zero = Lanes::splat(T::zero());
        let mut lanes = Absorption {
            sigma: zero,
            drho_w: zero,
            normal: [zero; 3],
        };
        let mut hit = [false; L];
        for x in 0..len {
            if let Some(a) = sp.at::<T>([gx + x, y, z]) {
                lanes.sigma.0[x] = a.sigma;
                lanes.drho_w.0[x] = a.drho_w;
                for k in 0..3 {
                    lanes.normal[k].0[x] = a.normal[k];
                }
                hit[x] = true;
            }
        }
        if !hit.contains(&true) {
            return;
        }
        let mut g = *f;
        absorb(&mut g, &lanes);
        for x in (0..len).filter(|&x| hit[x]) {
            for i in 0..Q {
                f[i].0[x] = g[i].0[x];
            }
        }
    }

    /// One row (z, y): bundles of `L` nodes along x are pulled, collided and stored to lattice B
    /// (and, on a boundary layer, to the interface buffers).
    ///
    /// Rows that pull only from lattice A (all but a slab's boundary layers next to a neighbour) load
    /// every bundle whole, 19 vector loads, then [`Self::patch`] the few lanes where that load is not
    /// the pull (x edges, bounce-back, next to obstacles): the lattice's padding keeps the loads of
    /// the edge bundles inside the allocation. Rows that pull from an interface buffer gather their
    /// bundles through [`Self::gather`].
    #[inline(always)]
    fn row<O: CollisionOperator, const EXTRA: bool, const L: usize>(&self, z: usize, y: usize) {
        let (nx, ny, nz) = (self.nx, self.ny, self.nz);
        let (k, force) = lane_constants::<T, EXTRA, L>(self.coeff, self.force);
        let row0 = (z * ny + y) * nx;
        let flags = &self.index[row0..row0 + nx];
        let from_neighbour = (z == 0 && self.below_in.is_some())
            || (z + 1 == nz && self.above_in.is_some())
            || self.sides.is_some_and(|sc| sc.y_row(y, ny));
        if from_neighbour {
            let sources: [Option<&[S]>; Q] = std::array::from_fn(|i| self.source_row(i, z, y));
            let mut x0 = 0;
            while x0 < nx {
                let len = L.min(nx - x0);
                // Lanes past `len` stay zero; they are collided (ρ = 0 gives inf or NaN there, which
                // costs nothing on these units) but never stored.
                let mut f = [Lanes::splat(T::zero()); Q];
                let any_solid = self.gather(&mut f, &sources, row0, x0, len);
                let (force, tau) = if EXTRA {
                    self.couple(&f, force, &k, row0 + x0, len)
                } else {
                    (force, None)
                };
                O::collide_with(&mut f, &k, force, tau);
                self.absorb(&mut f, z, y, x0, len);
                if any_solid {
                    self.keep_solids(&mut f, row0, x0, len);
                }
                self.put::<L>(&f, z, y, x0, len);
                x0 += len;
            }
            return;
        }
        // Offsets of the source rows in lattice A, `None` for a wall. No source is an interface row
        // here: only z = 0 pulls from below and z = nz − 1 from above, and those rows with a
        // neighbour took the gather path above.
        let starts: [Option<usize>; Q] = std::array::from_fn(|i| {
            self.source(i, z, y)
                .map(|s| s.unwrap_or_else(|_| unreachable!("an interface row outside the gather")))
        });
        // Where bundle x0 of direction i loads from: `pulled[i] + x0`, the source row shifted by −c_x.
        let pulled: [*const S; Q] = std::array::from_fn(|i| match starts[i] {
            Some(start) => self
                .a_raw
                .0
                .wrapping_add(start)
                .wrapping_offset(-(C[i][0] as isize)) as *const S,
            None => std::ptr::null(),
        });
        // SAFETY (of every load below): a lattice row starts at least LATTICE_PAD values after the
        // allocation's start and ends at least LATTICE_PAD before its end, and a load reads
        // x0 − c_x .. x0 − c_x + L with 0 ≤ x0 < nx, |c_x| ≤ 1 and L + 1 < LATTICE_PAD: inside the
        // allocation, whose values are all initialised; lattice A is not written during the step.
        let load = |x0: usize| -> [Lanes<T, L>; Q] {
            std::array::from_fn(|i| {
                if pulled[i].is_null() {
                    Lanes::splat(T::zero())
                } else {
                    Lanes(loaded(unsafe {
                        pulled[i].wrapping_add(x0).cast::<[S; L]>().read_unaligned()
                    }))
                }
            })
        };
        let mut x0 = 0;
        while x0 < nx {
            let len = L.min(nx - x0);
            let plain =
                x0 > 0 && x0 + L < nx && flags[x0..x0 + L].iter().fold(0, |a, &k| a | k) == 0;
            // In the tail bundle, lanes past `len` hold the next row's values or the padding's zeros;
            // they are collided but never stored.
            let mut f = load(x0);
            if plain {
                let (force, tau) = if EXTRA {
                    self.couple(&f, force, &k, row0 + x0, len)
                } else {
                    (force, None)
                };
                O::collide_with(&mut f, &k, force, tau);
                self.absorb(&mut f, z, y, x0, len);
            } else {
                let any_solid = self.patch(&mut f, &starts, row0, x0, len);
                let (force, tau) = if EXTRA {
                    self.couple(&f, force, &k, row0 + x0, len)
                } else {
                    (force, None)
                };
                O::collide_with(&mut f, &k, force, tau);
                self.absorb(&mut f, z, y, x0, len);
                if any_solid {
                    self.keep_solids(&mut f, row0, x0, len);
                }
            }
            self.put::<L>(&f, z, y, x0, len);
            x0 += len;
        }
    }
}

impl<T: Real + Arith<Scalar = T>, S: Stored<Arith = T>> CpuModule<T, S> {
    /// The force node `p` collided with, which its velocity is reported under: with a temperature
    /// lattice the coupled force at its θ, else the immersed bodies' where they set one, else the
    /// uniform force.
    fn force_at(&self, p: usize) -> Option<[T; 3]> {
        match (&self.thermal, &self.node_forces) {
            (Some(th), _) => Some(th.force_at(p)),
            (None, Some(nf)) => Some(nf.force.each_ref().map(|f| f[p])),
            (None, None) => self.force,
        }
    }
}

impl<T: RowArith, S: Stored<Arith = T>> ComputeModule for CpuModule<T, S> {
    fn describe(&self) -> String {
        format!(
            "cpu {} ({} thread{})",
            S::PRECISION.name(),
            self.threads,
            if self.threads == 1 { "" } else { "s" }
        )
    }

    fn allocate_channel(
        &mut self,
        side: usize,
        transport: Transport,
    ) -> Result<Arc<dyn Channel>, ComputeError> {
        if transport != Transport::ZeroCopy {
            return Err(ComputeError::Invalid(format!(
                "the CPU module's slabs share host memory, not {transport} memory"
            )));
        }
        let bytes = 2 * self.side_values(side) * std::mem::size_of::<S>();
        Ok(Arc::new(HostChannel(AlignedBuf::zeroed(
            bytes,
            0,
            "a channel",
        )?)))
    }

    fn attach(&mut self, links: Links) -> Result<(), ComputeError> {
        self.own();
        links.check(|side| 2 * self.side_values(side) * std::mem::size_of::<S>())?;
        if let Some((_, c, _)) = links
            .all()
            .find(|(_, c, _)| c.transport() != Transport::ZeroCopy)
        {
            return Err(ComputeError::Invalid(format!(
                "the CPU module cannot reach a channel in {} memory",
                c.transport()
            )));
        }
        self.links = links;
        self.u_prev_valid = false;
        self.publish(1);
        Ok(())
    }

    fn step(&mut self, t: u64) -> Result<(), ComputeError> {
        self.step_part(t, StepPart::Whole);
        Ok(())
    }

    fn step_overlapped(
        &mut self,
        t: u64,
        faces_done: &mut dyn FnMut() -> Result<(), ComputeError>,
    ) -> Result<(), ComputeError> {
        self.step_part(t, StepPart::Faces);
        faces_done()?;
        self.step_part(t, StepPart::Interior);
        Ok(())
    }

    fn synchronize(&mut self) -> Result<(), ComputeError> {
        Ok(())
    }

    fn read_fields(&mut self) -> Result<Fields, ComputeError> {
        self.own();
        let solid = |p: usize| self.palette[self.index[p] as usize].solid;
        let force = |p: usize| self.force_at(p);
        let mut fields = fields_from_populations(&self.slab, &self.a, solid, force);
        if let Some(th) = &self.thermal {
            fields.temperature = (0..self.n()).map(|p| th.theta(p).to_f64()).collect();
        }
        Ok(fields)
    }

    fn health(&mut self) -> Result<Health, ComputeError> {
        self.own();
        let solid = |p: usize| self.palette[self.index[p] as usize].solid;
        Ok(health_of_populations(&self.slab, &self.a, solid))
    }

    fn velocity_change(&mut self) -> Result<Option<ChangeSums>, ComputeError> {
        self.own();
        if self.u_prev.is_empty() {
            let len = 3 * self.n();
            self.u_prev
                .try_reserve_exact(len)
                .map_err(|e| ComputeError::OutOfMemory(format!("previous velocity: {e}")))?;
            self.u_prev.resize(len, T::zero());
        }
        let (index, palette) = (&self.index, &self.palette);
        let solid = |p: usize| palette[index[p] as usize].solid;
        let compare = self.u_prev_valid;
        let sums = velocity_change_of_populations(
            &self.slab,
            &self.a,
            solid,
            self.params.model.force,
            &mut self.u_prev,
            compare,
        );
        self.u_prev_valid = true;
        Ok(compare.then_some(sums))
    }

    fn accumulate_mean(&mut self) -> Result<(), ComputeError> {
        let f = self.read_fields()?;
        self.means
            .get_or_insert_with(|| MeanSums::empty(&f))
            .add(&f);
        Ok(())
    }

    fn read_mean_sums(&mut self) -> Result<MeanSums, ComputeError> {
        match &self.means {
            Some(m) => Ok(m.clone()),
            None => Ok(no_means(
                &self.slab,
                |p| self.palette[self.index[p] as usize].solid,
                self.thermal.is_some(),
            )),
        }
    }

    fn write_mean_sums(&mut self, sums: &MeanSums) -> Result<(), ComputeError> {
        check_mean_shape(&self.slab, self.thermal.is_some(), sums)?;
        self.means = Some(sums.clone());
        Ok(())
    }

    fn read_populations(&mut self) -> Result<Vec<u8>, ComputeError> {
        self.own();
        let mut bytes = bytemuck::cast_slice(&self.a).to_vec();
        if let Some(th) = &self.thermal {
            bytes.extend_from_slice(th.bytes());
        }
        Ok(bytes)
    }

    fn read_plane(&mut self, axis: usize, index: usize) -> Result<PlaneFields, ComputeError> {
        self.own();
        let solid = |p: usize| self.palette[self.index[p] as usize].solid;
        let force = |p: usize| self.force_at(p);
        let theta = self
            .thermal
            .as_ref()
            .map(|th| move |p: usize| th.theta(p).to_f64());
        self.pool.install(|| {
            plane_from_populations(
                &self.slab,
                &self.a,
                (axis, index),
                solid,
                force,
                theta.as_ref().map(|f| f as &(dyn Fn(usize) -> f64 + Sync)),
            )
        })
    }

    fn set_wall_velocities(&mut self, walls: &[[f64; 3]]) -> Result<(), ComputeError> {
        let terms = self.flag_palette.terms(walls).ok_or_else(|| {
            ComputeError::Invalid(format!("{} wall velocities for more slots", walls.len()))
        })?;
        for (e, t) in self.palette.iter_mut().zip(terms) {
            e.term = t.map(T::of);
        }
        Ok(())
    }

    fn set_held_temperatures(&mut self, table: &[f64]) -> Result<(), ComputeError> {
        let th = self.thermal.as_mut().ok_or_else(|| {
            ComputeError::Invalid("held temperatures for a case without [thermal]".into())
        })?;
        th.set_held(table)
    }

    fn read_nodes(&mut self, nodes: &[u32]) -> Result<Vec<f64>, ComputeError> {
        self.own();
        let n = self.slab.nodes();
        thelma_core::check_nodes(nodes, n)?;
        let a = &self.a;
        // The temperature lattice's populations after the flow's, per node.
        let th = self.thermal.as_ref();
        Ok(nodes
            .iter()
            .flat_map(|&p| {
                let p = p as usize;
                let h = th.map(|th| th.populations(p));
                (0..Q)
                    .map(move |i| a[i * n + p].load().to_f64())
                    .chain(h.into_iter().flatten().map(|v| v.to_f64()))
            })
            .collect())
    }

    fn pull_nodes(&mut self, t: u64, nodes: &[u32]) -> Result<Vec<f64>, ComputeError> {
        self.own();
        let n = self.slab.nodes();
        thelma_core::check_nodes(nodes, n)?;
        // The pull reads no per-node force.
        let ctx = self.ctx(t, None);
        let (nx, ny) = (ctx.nx, ctx.ny);
        let mut out = vec![0.0; nodes.len() * Q];
        self.pool.install(|| {
            out.par_chunks_mut(Q).zip(nodes).for_each(|(o, &p)| {
                let p = p as usize;
                let (x, y, z) = (p % nx, p / nx % ny, p / (nx * ny));
                let sources: [Option<&[S]>; Q] = std::array::from_fn(|i| ctx.source_row(i, z, y));
                // One node as a bundle of one: the step's own gather, bounce-back and open links.
                let mut f = [Lanes::<T, 1>::splat(T::zero()); Q];
                ctx.gather(&mut f, &sources, p - x, x, 1);
                for (o, l) in o.iter_mut().zip(&f) {
                    *o = l.0[0].to_f64();
                }
            })
        });
        Ok(out)
    }

    fn set_node_forces(&mut self, nodes: &[u32], forces: &[[f64; 3]]) -> Result<(), ComputeError> {
        let n = self.slab.nodes();
        if self.thermal.is_some() {
            return Err(ComputeError::Invalid(
                "immersed bodies are not available with a temperature lattice".into(),
            ));
        }
        if self.held.is_some() {
            return Err(ComputeError::Invalid(
                "immersed bodies are not available with in-place streaming".into(),
            ));
        }
        thelma_core::check_node_forces(nodes, forces, n)?;
        let uniform = self.params.model.force.unwrap_or([0.0; 3]);
        let nf = self.node_forces.get_or_insert_with(|| NodeForces {
            force: uniform.map(|f| vec![T::of(f); n]),
            set: Vec::new(),
        });
        for &p in &nf.set {
            for a in 0..3 {
                nf.force[a][p as usize] = T::of(uniform[a]);
            }
        }
        for (&p, f) in nodes.iter().zip(forces) {
            for a in 0..3 {
                nf.force[a][p as usize] = T::of(uniform[a] + f[a]);
            }
        }
        nf.set = nodes.to_vec();
        Ok(())
    }

    fn write_populations(&mut self, bytes: &[u8], next_step: u64) -> Result<(), ComputeError> {
        let flow = self.a.len() * std::mem::size_of::<S>();
        let thermal = self.thermal.as_ref().map_or(0, |th| th.bytes().len());
        let want = flow + thermal;
        if bytes.len() != want {
            return Err(ComputeError::Invalid(format!(
                "populations of {} bytes, {want} expected",
                bytes.len()
            )));
        }
        bytemuck::cast_slice_mut(&mut self.a).copy_from_slice(&bytes[..flow]);
        if self.held.is_some() {
            self.held = Some(Held::Own);
        }
        if let Some(th) = &mut self.thermal {
            th.set_bytes(&bytes[flow..]);
        }
        self.u_prev_valid = false;
        self.publish(((next_step + 1) % 2) as usize);
        Ok(())
    }
}
