//! The immersed bodies of a CUDA module (`kernels/immersed.cu`): the direct forcing on the device
//! for a module that holds the bodies (the whole domain on one slab), whose band the fused step
//! collides under its forces (it takes the band's bitmap, [`IbStep`]), and the per-node forces
//! the coordinator sets on modules that do not (several slabs), applied by colliding the listed
//! nodes again after the fused step.

use std::sync::Arc;

use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, LaunchArgs, LaunchConfig, PushKernelArg,
};
use thelma_core::physics::ImmersedBodies;
use thelma_core::{ComputeError, PointForces};

use super::launch::{IbStep, InletArgs, StepArgs};

/// Threads per block of every immersed-body kernel (`__launch_bounds__(128)`).
const BLOCK: u32 = 128;
/// Doubles per body pose (`THELMA_IB_POSE`).
const POSE: usize = 21;
/// Steps of poses uploaded at once: the host computes them ahead, so that a step copies nothing.
const POSE_STEPS: u64 = 64;
/// Words (i64) of a band slot's force record (`THELMA_IB_RECORD`, printed into the prelude):
/// three fixed-point sums and 1/(2ρ) over the fixed point's scale, 32 bytes, one sector.
pub const RECORD: usize = 4;

fn grid(threads: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((threads.max(1) as u32).div_ceil(BLOCK), 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The launch of a kernel that loops over the band (`ib_band`, `ib_fold`, `ib_collide`), whose
/// size only the device knows: [`BAND_THREADS`] threads, fewer where the band holds fewer nodes.
/// (A thread per slot of the band's capacity, 27 a point, started mostly empty blocks: the
/// supports of neighbouring points overlap, so a band has a few nodes a point.)
fn band_grid(capacity: usize) -> LaunchConfig {
    grid(capacity.min(BAND_THREADS))
}

/// Threads of a band loop: 1,024 blocks, eight per multiprocessor of an H100 or H200.
const BAND_THREADS: usize = 1024 * BLOCK as usize;

/// The lanes of a group that serves one point (`THELMA_IB_GROUP`, printed into the prelude): each
/// lane every eighth of its 27 support nodes when interpolating, of its 27 support entries and
/// nine rows when placing, of its 81 sums (node, component) when spreading.
pub const GROUP: usize = 8;

/// Words of the band's bitmap a block of `ib_count` and `ib_list` takes (`THELMA_IB_CHUNK`,
/// printed into the prelude): a word a thread of [`BLOCK`].
pub const CHUNK: usize = BLOCK as usize;

/// The chunks of the bitmap of a slab of `nodes` nodes (a bit a node, in whole chunks).
fn chunks(nodes: usize) -> usize {
    nodes.div_ceil(32).div_ceil(CHUNK).max(1)
}

fn dev_err(what: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> ComputeError {
    move |e| ComputeError::Device(format!("{what}: {e}"))
}

fn oom(what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> ComputeError {
    move |e| ComputeError::OutOfMemory(format!("immersed bodies, {what}: {e}"))
}

fn raw<U>(s: &CudaSlice<U>, stream: &CudaStream) -> u64 {
    use cudarc::driver::DevicePtr;
    let (p, _guard) = s.device_ptr(stream);
    p
}

/// The kernels, in [`super::launch::Kernel::IMMERSED`]'s order.
pub struct IbKernels {
    pub place: CudaFunction,
    pub place_group: CudaFunction,
    pub count: CudaFunction,
    pub scan: CudaFunction,
    pub list: CudaFunction,
    pub band: CudaFunction,
    pub iterate: CudaFunction,
    pub iterate_group: CudaFunction,
    pub fold: CudaFunction,
    pub collide: CudaFunction,
    pub pull: CudaFunction,
    pub plane: CudaFunction,
}

/// What a module holds for its immersed bodies.
pub struct ImmersedDevice {
    pub kernels: IbKernels,
    /// The uniform force (lattice units) every forced node collides under besides its own.
    uniform: [f64; 3],
    /// Bodies forced here (the device path).
    held: Option<Held>,
    /// Forces the coordinator set: the nodes, their count (on the device, as the band's), the
    /// forces, and the same on the host for the fields.
    set: Option<SetForces>,
}

struct SetForces {
    nodes: CudaSlice<u32>,
    count: CudaSlice<u32>,
    force: CudaSlice<f64>,
    host: Vec<(u32, [f64; 3])>,
}

/// Bodies forced on the device, and the buffers of their forcing.
struct Held {
    bodies: Arc<ImmersedBodies>,
    points: usize,
    capacity: usize,
    /// Per point: body, reference position, area; its support this step (27 entries: the node,
    /// then the band slot, and the weight) and desired velocity; force density summed over the
    /// iterations; what the first iteration keeps for the next (the velocity to correct and the
    /// interpolated ρ, 4 doubles).
    body: CudaSlice<u32>,
    reference: CudaSlice<f64>,
    area: CudaSlice<f64>,
    support: CudaSlice<u32>,
    weights: CudaSlice<f64>,
    ud: CudaSlice<f64>,
    total: CudaSlice<f64>,
    vr: CudaSlice<f64>,
    /// The poses of steps `pose_base..pose_base + POSE_STEPS`, step after step.
    pose: CudaSlice<f64>,
    pose_base: Option<u64>,
    /// Threads per point: 1 (a thread serves a point), or [`GROUP`] (a group of lanes).
    lanes: usize,
    /// A bit a node of the slab, set where a point's support lies (zero between steps), in
    /// `chunks` chunks of [`CHUNK`] words; per chunk, its count of marked nodes, then its first
    /// band slot.
    marks: CudaSlice<u32>,
    chunk: CudaSlice<u32>,
    chunks: usize,
    /// Per node of the slab: its band slot this step, read only at the band's nodes (elsewhere
    /// zero or a slot of an earlier step, always below the capacity).
    slot: CudaSlice<u32>,
    /// Per band slot: node, ρ, u*, the two force records (the one read, then the one written:
    /// `RECORD` words each), the force; and the count.
    band: CudaSlice<u32>,
    count: CudaSlice<u32>,
    rho: CudaSlice<f64>,
    u: CudaSlice<f64>,
    acc: CudaSlice<i64>,
    force: CudaSlice<f64>,
    /// The last step forced.
    last: Option<u64>,
    /// Whether a band was marked and its step has not closed (it failed on the way, and its bits
    /// may still be set: the next placing clears them first).
    open: bool,
}

/// The bytes a module's forcing of `points` points on a slab of `nodes` nodes takes on the
/// device (the memory check before a run).
pub fn immersed_device_bytes(points: usize, nodes: usize) -> u64 {
    let capacity = (points.saturating_mul(27)).min(nodes) as u64;
    // body 4, reference 24, area 8, support 27 · (4 + 8), ud 24, total 24, vr 32 per point;
    // slot 4 and a bit per node (and the chunks' counts, 4 bytes a chunk); band 4, ρ 8, u 24,
    // records 64, force 24 per band slot; and 64 steps of poses per body (small).
    points as u64 * 440
        + nodes as u64 * 4
        + (chunks(nodes) * (CHUNK + 1) * 4) as u64
        + capacity * 124
}

/// The addresses and sizes the immersed kernels share with the step.
pub struct StepView<'a> {
    pub args: &'a StepArgs,
    pub inlets: &'a InletArgs,
    pub pal_link: u64,
    /// 1 where the case has open-face links (the step is the collide-open one), 0 otherwise.
    pub open: i32,
}

impl<'a> StepView<'a> {
    /// Pushes what every kernel pulling nodes as the step does takes first (THELMA_IB_PULL_ARGS):
    /// the lattice read, the palette, the incoming interfaces, the size, the periodic axes, the
    /// slab's place in the domain and whether links are open.
    fn pull_args(&'a self, b: &mut LaunchArgs<'a>) {
        let a = self.args;
        b.arg(&a.a)
            .arg(&a.index)
            .arg(&a.pal_mask)
            .arg(&a.pal_term)
            .arg(&self.pal_link)
            .arg(&a.below_in)
            .arg(&a.above_in)
            .arg(&a.size[0])
            .arg(&a.size[1])
            .arg(&a.size[2])
            .arg(&a.periodic)
            .arg(&self.inlets.z0)
            .arg(&self.inlets.nz_domain)
            .arg(&self.open);
    }

    /// Periodic axes for the points' kernels: x, y and z (bit 2), unlike the step's two.
    fn periodic3(&self, z: bool) -> i32 {
        self.args.periodic | (i32::from(z) << 2)
    }
}

impl ImmersedDevice {
    pub fn new(kernels: IbKernels, uniform: Option<[f64; 3]>) -> Self {
        Self {
            kernels,
            uniform: uniform.unwrap_or([0.0; 3]),
            held: None,
            set: None,
        }
    }

    /// Takes `bodies` to force on the device from now on, on a slab of `nodes` nodes.
    pub fn hold(
        &mut self,
        stream: &Arc<CudaStream>,
        bodies: &ImmersedBodies,
        nodes: usize,
    ) -> Result<(), ComputeError> {
        let points = bodies.points();
        let capacity = points.saturating_mul(27).min(nodes);
        let mut body = Vec::with_capacity(points);
        let mut reference = Vec::with_capacity(3 * points);
        let mut area = Vec::with_capacity(points);
        for (b, lb) in bodies.bodies.iter().enumerate() {
            for (p, &a) in lb.points.iter().zip(&lb.areas) {
                body.push(b as u32);
                reference.extend_from_slice(p);
                area.push(a);
            }
        }
        let zeros_f64 = |len: usize, what| stream.alloc_zeros::<f64>(len.max(1)).map_err(oom(what));
        // Every entry of the band map stays below the band's capacity (zero, or a slot ib_list
        // wrote), so that no read of it leaves the band's buffers.
        let slot = stream
            .alloc_zeros::<u32>(nodes.max(1))
            .map_err(oom("band map"))?;
        self.set = None;
        self.held = Some(Held {
            bodies: Arc::new(bodies.clone()),
            points,
            capacity,
            body: stream.clone_htod(&body).map_err(oom("points"))?,
            reference: stream.clone_htod(&reference).map_err(oom("points"))?,
            area: stream.clone_htod(&area).map_err(oom("points"))?,
            support: stream
                .alloc_zeros::<u32>((27 * points).max(1))
                .map_err(oom("points"))?,
            weights: zeros_f64(27 * points, "points")?,
            ud: zeros_f64(3 * points, "points")?,
            total: zeros_f64(3 * points, "points")?,
            vr: zeros_f64(4 * points, "points")?,
            pose: zeros_f64(POSE * bodies.bodies.len() * POSE_STEPS as usize, "poses")?,
            pose_base: None,
            // A group of lanes a point; THELMA_IB_LANES = 1, a thread (to measure both).
            lanes: match std::env::var("THELMA_IB_LANES").as_deref() {
                Ok("1") => 1,
                _ => GROUP,
            },
            marks: stream
                .alloc_zeros::<u32>(chunks(nodes) * CHUNK)
                .map_err(oom("band bitmap"))?,
            chunk: stream
                .alloc_zeros::<u32>(chunks(nodes))
                .map_err(oom("band bitmap"))?,
            chunks: chunks(nodes),
            slot,
            band: stream
                .alloc_zeros::<u32>(capacity.max(1))
                .map_err(oom("band"))?,
            count: stream.alloc_zeros::<u32>(1).map_err(oom("band"))?,
            rho: zeros_f64(capacity, "band")?,
            u: zeros_f64(3 * capacity, "band")?,
            acc: stream
                .alloc_zeros::<i64>(2 * RECORD * capacity.max(1))
                .map_err(oom("band"))?,
            force: zeros_f64(3 * capacity, "band")?,
            last: None,
            open: false,
        });
        stream
            .synchronize()
            .map_err(dev_err("the device reported an error"))
    }

    /// Sets the coordinator's per-node forces (replacing the last ones; none: the uniform force).
    pub fn set_forces(
        &mut self,
        stream: &Arc<CudaStream>,
        nodes: &[u32],
        forces: &[[f64; 3]],
    ) -> Result<(), ComputeError> {
        self.held = None;
        if nodes.is_empty() {
            self.set = None;
            return Ok(());
        }
        let flat: Vec<f64> = forces.iter().flatten().copied().collect();
        self.set = Some(SetForces {
            nodes: stream.clone_htod(nodes).map_err(oom("forced nodes"))?,
            count: stream
                .clone_htod(&[nodes.len() as u32])
                .map_err(oom("forced nodes"))?,
            force: stream.clone_htod(&flat).map_err(oom("forced nodes"))?,
            host: nodes.iter().copied().zip(forces.iter().copied()).collect(),
        });
        Ok(())
    }

    /// Before step `t`'s fused kernel: the held bodies' points placed, the band pulled and the
    /// direct forcing iterated (nothing without held bodies).
    pub fn before_step(
        &mut self,
        stream: &Arc<CudaStream>,
        t: u64,
        view: &StepView<'_>,
        periodic_z: bool,
    ) -> Result<(), ComputeError> {
        let Some(h) = &mut self.held else {
            return Ok(());
        };
        if h.open {
            stream
                .memset_zeros(&mut h.marks)
                .map_err(dev_err("cannot clear the band's bitmap"))?;
        }
        h.open = true;
        let k = &self.kernels;
        let bodies = h.bodies.bodies.len();
        let base = match h.pose_base {
            Some(b) if (b..b + POSE_STEPS).contains(&t) => b,
            _ => {
                // The next steps' poses in one copy, ordered after the steps that read the last.
                let poses: Vec<f64> = (t..t + POSE_STEPS)
                    .flat_map(|s| {
                        h.bodies.bodies.iter().flat_map(move |b| {
                            let p = b.motion.pose(s as f64);
                            let mut v = Vec::with_capacity(POSE);
                            v.extend_from_slice(&p.origin);
                            v.extend_from_slice(&p.centre);
                            v.extend(p.rotation.iter().flatten());
                            v.extend_from_slice(&p.omega);
                            v.extend_from_slice(&p.velocity);
                            v
                        })
                    })
                    .collect();
                stream
                    .memcpy_htod(&poses, &mut h.pose)
                    .map_err(dev_err("cannot copy the bodies' poses"))?;
                h.pose_base = Some(t);
                t
            }
        };
        let a = view.args;
        let [nx, ny, nz] = a.size;
        let periodic = view.periodic3(periodic_z);
        let points = h.points as i32;
        let addr = |s: &CudaSlice<f64>| raw(s, stream);
        let (pose, support, weights, ud, total, vr, area) = (
            addr(&h.pose)
                + ((t - base) as usize * bodies * POSE * std::mem::size_of::<f64>()) as u64,
            raw(&h.support, stream),
            addr(&h.weights),
            addr(&h.ud),
            addr(&h.total),
            addr(&h.vr),
            addr(&h.area),
        );
        let (body, reference) = (raw(&h.body, stream), addr(&h.reference));
        let (slot, band, count, marks, chunk) = (
            raw(&h.slot, stream),
            raw(&h.band, stream),
            raw(&h.count, stream),
            raw(&h.marks, stream),
            raw(&h.chunk, stream),
        );
        let chunks = h.chunks as u32;
        let (rho, u, force) = (addr(&h.rho), addr(&h.u), addr(&h.force));
        let acc = raw(&h.acc, stream);
        let acc_write = acc + (RECORD * h.capacity * std::mem::size_of::<i64>()) as u64;
        let capacity = h.capacity as u32;
        let launch_err = |what: &'static str| dev_err(what);
        // SAFETY (every launch below): the argument lists match the kernels of
        // kernels/immersed.cu, loaded for this module's precision; the lattice, palette and
        // interface addresses are the step's own (as in `step`); the points' buffers hold
        // `points` entries (3 doubles for reference positions, velocities and forces, 27 support
        // entries of a u32 and a double, 4 doubles for `vr`), the band's
        // `capacity` (27 per point, at most the slab's nodes: a band has no more) with the force
        // records two blocks of RECORD·capacity words, the band map one slot per node of the
        // slab, the bitmap `chunks` chunks of CHUNK words (a bit per node of the slab, zero
        // between steps: the step clears what ib_place set) and `chunk` a count per chunk. All of
        // them belong to `self`, which the module synchronises before dropping. The first
        // iteration, after this call's placing, turns the support's nodes into band slots (below
        // `capacity`) before any later one indexes the records by them.
        unsafe {
            let (place, iterate) = if h.lanes == 1 {
                (&k.place, &k.iterate)
            } else {
                (&k.place_group, &k.iterate_group)
            };
            let mut b = stream.launch_builder(place);
            b.arg(&pose)
                .arg(&body)
                .arg(&reference)
                .arg(&points)
                .arg(&support)
                .arg(&weights)
                .arg(&ud)
                .arg(&marks)
                .arg(&nx)
                .arg(&ny)
                .arg(&nz)
                .arg(&periodic);
            let per_point = grid(h.points * h.lanes);
            b.launch(per_point)
                .map_err(launch_err("launch of ib_place failed"))?;
            // A thread a word of the bitmap: a block a chunk.
            let per_chunk = grid(h.chunks * CHUNK);
            let mut b = stream.launch_builder(&k.count);
            b.arg(&marks).arg(&chunk);
            b.launch(per_chunk)
                .map_err(launch_err("launch of ib_count failed"))?;
            let mut b = stream.launch_builder(&k.scan);
            b.arg(&chunk).arg(&chunks).arg(&count).arg(&capacity);
            b.launch(LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (1024, 1, 1),
                shared_mem_bytes: 0,
            })
            .map_err(launch_err("launch of ib_scan failed"))?;
            let mut b = stream.launch_builder(&k.list);
            b.arg(&marks)
                .arg(&chunk)
                .arg(&slot)
                .arg(&band)
                .arg(&capacity);
            b.launch(per_chunk)
                .map_err(launch_err("launch of ib_list failed"))?;
            let mut b = stream.launch_builder(&k.band);
            view.pull_args(&mut b);
            b.arg(&band)
                .arg(&count)
                .arg(&rho)
                .arg(&u)
                .arg(&acc)
                .arg(&capacity);
            b.launch(band_grid(h.capacity))
                .map_err(launch_err("launch of ib_band failed"))?;
            let iterations = h.bodies.iterations;
            for it in 0..iterations {
                let first = i32::from(it == 0);
                let mut b = stream.launch_builder(iterate);
                b.arg(&support)
                    .arg(&weights)
                    .arg(&ud)
                    .arg(&area)
                    .arg(&points)
                    .arg(&slot)
                    .arg(&rho)
                    .arg(&u)
                    .arg(&acc)
                    .arg(&acc_write)
                    .arg(&total)
                    .arg(&vr)
                    .arg(&first);
                b.launch(per_point)
                    .map_err(launch_err("launch of ib_iterate failed"))?;
                let last = i32::from(it + 1 == iterations);
                let mut b = stream.launch_builder(&k.fold);
                b.arg(&count)
                    .arg(&acc)
                    .arg(&acc_write)
                    .arg(&force)
                    .arg(&last);
                b.launch(band_grid(h.capacity))
                    .map_err(launch_err("launch of ib_fold failed"))?;
            }
        }
        h.last = Some(t);
        Ok(())
    }

    /// The nodes a step forces: the band of the held bodies or the coordinator's nodes, their
    /// count and forces (device addresses) and the most there may be; `None` without either.
    fn listed(&self, stream: &Arc<CudaStream>) -> Option<(u64, u64, u64, usize)> {
        match (&self.held, &self.set) {
            (Some(h), _) => Some((
                raw(&h.band, stream),
                raw(&h.count, stream),
                raw(&h.force, stream),
                h.capacity,
            )),
            (None, Some(s)) => Some((
                raw(&s.nodes, stream),
                raw(&s.count, stream),
                raw(&s.force, stream),
                s.host.len(),
            )),
            (None, None) => None,
        }
    }

    /// What the fused step takes of the band (`THELMA_IB_STEP_PARAM`): the held bodies' bitmap,
    /// band map and forces with the uniform force, whose band nodes it collides under their
    /// forces; null addresses without held bodies.
    pub fn step_band(&self, stream: &Arc<CudaStream>) -> IbStep {
        let (marks, slot, force) = self.held.as_ref().map_or((0, 0, 0), |h| {
            (
                raw(&h.marks, stream),
                raw(&h.slot, stream),
                raw(&h.force, stream),
            )
        });
        IbStep {
            marks,
            slot,
            force,
            uniform: self.uniform,
        }
    }

    /// After the fused step: the coordinator's nodes collided again under their forces (the held
    /// bodies' band was collided by the step itself).
    pub fn after_step(
        &mut self,
        stream: &Arc<CudaStream>,
        view: &StepView<'_>,
    ) -> Result<(), ComputeError> {
        if let Some(h) = &mut self.held {
            h.open = false;
            return Ok(());
        }
        let Some((nodes, count, force, threads)) = self.listed(stream) else {
            return Ok(());
        };
        let a = view.args;
        // Each node collides under the uniform force plus its own, summed in double (the CPU
        // module's per-node force).
        let uniform = self.uniform;
        // SAFETY: the argument list matches ib_collide (kernels/immersed.cu); the lattices,
        // palette and interfaces are the step's (as in `step`); `nodes`, `count` and `force`
        // list at most `threads` slab nodes with 3 doubles each; all belong to `self`.
        unsafe {
            let mut b = stream.launch_builder(&self.kernels.collide);
            view.pull_args(&mut b);
            b.arg(&a.b)
                .arg(&a.above_out)
                .arg(&a.below_out)
                .arg(&nodes)
                .arg(&count)
                .arg(&force)
                .arg(&uniform[0])
                .arg(&uniform[1])
                .arg(&uniform[2]);
            b.launch(band_grid(threads))
                .map_err(dev_err("launch of ib_collide failed"))?;
        }
        Ok(())
    }

    /// After the live view's plane kernel (`plane_d3q19`, which took the uniform force alone): the
    /// plane's velocity again at the nodes forced in the last step, under their own force besides
    /// the uniform one, as `read_fields` reports it (`ib_plane`). Nothing before a forced step.
    #[allow(clippy::too_many_arguments)]
    pub fn plane(
        &self,
        stream: &Arc<CudaStream>,
        a: u64,
        index: u64,
        pal_mask: u64,
        size: [usize; 3],
        (axis, at): (usize, usize),
        out: u64,
    ) -> Result<(), ComputeError> {
        // A held body's band is listed only once a step has forced it.
        if self.held.as_ref().is_some_and(|h| h.last.is_none()) {
            return Ok(());
        }
        let Some((nodes, count, force, threads)) = self.listed(stream) else {
            return Ok(());
        };
        let [nx, ny, nz] = size.map(|v| v as i32);
        let (axis, at) = (axis as i32, at as i32);
        let uniform = self.uniform;
        // SAFETY: the argument list matches ib_plane (kernels/immersed.cu); `a`, `index` and
        // `pal_mask` are the module's current lattice and palette for a slab of `size`, `out` its
        // plane buffer of 5 floats per node of the largest plane; `nodes`, `count` and `force` list
        // at most `threads` slab nodes with 3 doubles each; all outlive the launch.
        unsafe {
            let mut b = stream.launch_builder(&self.kernels.plane);
            b.arg(&a)
                .arg(&index)
                .arg(&pal_mask)
                .arg(&nx)
                .arg(&ny)
                .arg(&nz)
                .arg(&axis)
                .arg(&at)
                .arg(&nodes)
                .arg(&count)
                .arg(&force)
                .arg(&uniform[0])
                .arg(&uniform[1])
                .arg(&uniform[2])
                .arg(&out);
            b.launch(grid(threads))
                .map_err(dev_err("launch of ib_plane failed"))?;
        }
        Ok(())
    }

    /// The force density of every node forced in the last step (slab-local index, force without
    /// the uniform one): the band's or the coordinator's.
    pub fn node_forces(
        &self,
        stream: &Arc<CudaStream>,
    ) -> Result<Vec<(u32, [f64; 3])>, ComputeError> {
        match (&self.held, &self.set) {
            (Some(h), _) if h.last.is_some() => {
                let back = |e| dev_err("cannot copy the band back")(e);
                let count = stream.clone_dtoh(&h.count).map_err(back)?[0] as usize;
                let band = stream.clone_dtoh(&h.band).map_err(back)?;
                let force = stream.clone_dtoh(&h.force).map_err(back)?;
                Ok((0..count)
                    .map(|s| (band[s], std::array::from_fn(|a| force[3 * s + a])))
                    .collect())
            }
            (None, Some(s)) => Ok(s.host.clone()),
            _ => Ok(Vec::new()),
        }
    }

    /// The held bodies' point forces of the last step forced, and its number.
    pub fn point_forces(
        &self,
        stream: &Arc<CudaStream>,
    ) -> Result<Option<PointForces>, ComputeError> {
        let Some(h) = &self.held else {
            return Ok(None);
        };
        let Some(t) = h.last else {
            return Ok(None);
        };
        let total = stream
            .clone_dtoh(&h.total)
            .map_err(dev_err("cannot copy the point forces back"))?;
        Ok(Some((
            t,
            (0..h.points)
                .map(|k| std::array::from_fn(|a| total[3 * k + a]))
                .collect(),
        )))
    }

    /// The populations the step will pull into the slab-local `nodes`, `Q` per node in the run's
    /// arithmetic type `T` (the coordinator's forcing).
    pub fn pull<
        T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits + Default + Clone,
    >(
        &self,
        stream: &Arc<CudaStream>,
        view: &StepView<'_>,
        nodes: &[u32],
        q: usize,
    ) -> Result<Vec<T>, ComputeError> {
        if nodes.is_empty() {
            return Ok(Vec::new());
        }
        let list = stream.clone_htod(nodes).map_err(oom("pulled nodes"))?;
        let out = stream
            .alloc_zeros::<T>(nodes.len() * q)
            .map_err(oom("pulled nodes"))?;
        let count = nodes.len() as i32;
        let (list_p, out_p) = (raw(&list, stream), raw(&out, stream));
        // SAFETY: the argument list matches ib_pull (kernels/immersed.cu); the lattice, palette
        // and incoming interfaces are the step's (as in `step`); `list` holds `count` slab nodes
        // (checked by the caller) and `out` Q values of the run's arithmetic type for each; the
        // copy back below synchronises before they are dropped.
        unsafe {
            let mut b = stream.launch_builder(&self.kernels.pull);
            view.pull_args(&mut b);
            b.arg(&list_p).arg(&count).arg(&out_p);
            b.launch(grid(nodes.len()))
                .map_err(dev_err("launch of ib_pull failed"))?;
        }
        stream
            .clone_dtoh(&out)
            .map_err(dev_err("cannot copy the pulled nodes back"))
    }
}
