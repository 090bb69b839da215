//! The CUDA compute module: one slab on one GPU, stepped by the fused pull collide-and-propagate
//! kernel, exchanging its boundary layers through channels (mapped host, device or peer memory,
//! `super::channel`) that the kernel stores to and loads from directly: no copy between steps, but
//! for a grid's x faces over host memory, which the kernels reach through device buffers that the
//! copy engine moves ([`StagedFace`]).
//!
//! Semantics are those of the CPU oracle (`crate::cpu`): same layout, same step protocol and parities,
//! same bounce-back and moving-wall terms, solid nodes keep their populations.

use std::sync::Arc;

use cudarc::driver::{
    result, sys, CudaContext, CudaEvent, CudaFunction, CudaModule as CuModule, CudaSlice,
    CudaStream, DevicePtr, DeviceRepr, DriverError, PinnedHostSlice, ValidAsZeroBits,
};
use thelma_core::physics::d3q19::Q;
use thelma_core::physics::{
    coupled_force, dirichlet_term, load_thermal, store_thermal, temperature,
    thermal_equilibrium_populations, Arith, ImmersedBodies, ThermalCoefficients, ThermalSetup,
    D3Q19, QT,
};
use thelma_core::{
    channel_offset, gpu_transport, ChangeSums, Channel, ComputeError, ComputeModule, DevicePair,
    Fields, Health, InletSchedule, Links, MeanSums, MemoryInfo, ModuleFactory, Placement,
    PlaneFields, StepPart, Transport, TransportChoice, TransportRefused, SIDES, SIDE_COUNT,
    WALL_SLOTS,
};
use thelma_core::{Half12, Precision, Real, ScaledHalf, Stored, Streaming};
use thelma_core::{PointForces, SlabSpec};

use super::channel;
use super::device;
use super::immersed::{IbKernels, ImmersedDevice, StepView};
use super::launch::{self, InletArgs, Kernel, StepArgs, CHANGE_BLOCKS, HEALTH_BLOCKS};
use super::prelude::{PreludeParams, OPEN_BIT, SOLID_BIT};
use super::shape::LaunchShape;
use crate::fields::{check_mean_shape, fields_from_populations, initial_populations, no_means};
use crate::params::ModelParams;
use crate::Held;

/// A stored type of the populations as the device holds it: bits that cudarc copies, of the same
/// size and layout as the host's value.
pub trait DeviceStored: Stored {
    type Bits: DeviceRepr + ValidAsZeroBits + bytemuck::Pod + Default;
}

impl DeviceStored for f32 {
    type Bits = f32;
}

impl DeviceStored for f64 {
    type Bits = f64;
}

impl DeviceStored for ScaledHalf {
    type Bits = u16;
}

impl DeviceStored for Half12 {
    type Bits = u16;
}

fn dev_err(what: &str) -> impl FnOnce(cudarc::driver::DriverError) -> ComputeError + '_ {
    move |e| ComputeError::Device(format!("{what}: {e}"))
}

/// Creates CUDA modules; device ids are CUDA ordinals.
pub struct CudaFactory {
    params: ModelParams,
    shape: LaunchShape,
    /// The primary contexts the memory queries before a run opened, held until the factory drops:
    /// a primary context whose last holder lets go is destroyed, and each worker would then make
    /// its device's again.
    contexts: parking_lot::Mutex<Vec<Arc<CudaContext>>>,
    transport: TransportChoice,
}

impl CudaFactory {
    /// A factory, or why CUDA cannot be used here (no driver, no GPU).
    pub fn new(params: ModelParams) -> Result<Self, device::Unavailable> {
        device::device_count()?;
        Ok(Self {
            params,
            shape: LaunchShape::default(),
            contexts: parking_lot::Mutex::new(Vec::new()),
            transport: TransportChoice::Auto,
        })
    }

    /// Uses `transport` for the channels (`auto`: device memory between slabs of one GPU, peer
    /// memory between GPUs with peer access, zero-copy otherwise).
    pub fn with_transport(mut self, transport: TransportChoice) -> Self {
        self.transport = transport;
        self
    }

    /// Uses `shape` for the collision kernel (for tuning).
    pub fn with_shape(mut self, shape: LaunchShape) -> Self {
        self.shape = shape;
        self
    }
}

impl ModuleFactory for CudaFactory {
    fn backend(&self) -> &'static str {
        "cuda"
    }
    fn transport(&self, reader: usize, writer: usize) -> Result<Transport, TransportRefused> {
        let same = reader == writer;
        // A pair the driver cannot answer for gets no peer memory (zero-copy under auto).
        let peer_access = !same && device::can_access_peer(writer, reader).unwrap_or(false);
        gpu_transport(
            self.transport,
            reader,
            writer,
            DevicePair { same, peer_access },
        )
    }
    fn placement(&self, device: usize, _slab: &SlabSpec) -> Placement {
        match device::pci_bus_id(device) {
            Ok(pci_bus_id) => Placement::Gpu { pci_bus_id },
            Err(_) => Placement::Anywhere,
        }
    }
    fn create(
        &self,
        device: usize,
        slab: &SlabSpec,
    ) -> Result<Box<dyn ComputeModule>, ComputeError> {
        Ok(match self.params.precision {
            Precision::F32 => Box::new(CudaModule::<f32>::new(
                &self.params,
                self.shape,
                device,
                slab.clone(),
            )?),
            Precision::F64 => Box::new(CudaModule::<f64>::new(
                &self.params,
                self.shape,
                device,
                slab.clone(),
            )?),
            Precision::F16 => Box::new(CudaModule::<f32, ScaledHalf>::new(
                &self.params,
                self.shape,
                device,
                slab.clone(),
            )?),
            Precision::F16c => Box::new(CudaModule::<f32, Half12>::new(
                &self.params,
                self.shape,
                device,
                slab.clone(),
            )?),
        })
    }
    fn device_memory(&self, device: usize) -> Option<MemoryInfo> {
        // The driver was found when the factory was made (`new`).
        let ctx = CudaContext::new(device).ok()?;
        let (free, total) = ctx.mem_get_info().ok()?;
        self.contexts.lock().push(ctx);
        Some(MemoryInfo {
            free: free as u64,
            total: total as u64,
        })
    }
}

/// The addresses at which this module's kernels reach its channels (0 where there is none).
#[derive(Clone, Copy, Default)]
struct LinkAddresses {
    from_below: u64,
    from_above: u64,
    to_above: u64,
    to_below: u64,
}

/// A grid subdomain's kernel tables (`THELMA_GRID` in kernels/lbm_d3q19.cu, constant memory): the
/// addresses of its channels' buffers by side, read and written, and what export_sides_d3q19
/// (and, with a temperature lattice, export_sides_d3q7) publishes with.
struct GridDevice {
    side_in: u64,
    side_out: u64,
    export: CudaFunction,
    export_thermal: Option<CudaFunction>,
    /// The x faces' channels in page-locked host memory, which the kernels reach through device
    /// copies instead ([`StagedFace`]); set by attach.
    staged: Vec<StagedFace>,
}

/// An x face's channel in page-locked host memory (a cluster job's, or the zero-copy transport's)
/// and the device buffer of the same size that the kernels' tables name in its place. Across an x
/// face each row's one node stores and loads the side's values, one access per warp: over the host
/// link each is a transaction of its own (a 2 × 1 × 1 grid of two ranks ran at two thirds of two z
/// slabs). In device memory those accesses merge in the L2, and the copy engine moves each buffer
/// whole: the one read before the step that reads it, the one written after the step or export
/// that writes it. z and y faces (rows of x, stored and loaded coalesced) and edges (a few nodes)
/// keep the host memory.
struct StagedFace {
    /// The side ([`thelma_core::SIDES`]) and whether the module writes the channel (else reads it).
    side: usize,
    writes: bool,
    /// The channel's address in this context (the channel held, so that it outlives the copies),
    /// and the device buffer standing in for it.
    host: u64,
    _channel: Arc<dyn Channel>,
    device: CudaSlice<u8>,
}

/// The CUDA module for one slab, colliding in `T` and storing the populations as `S`.
///
/// Field order is drop order: device buffers and interfaces go before the stream and context.
pub struct CudaModule<T: Real + DeviceRepr, S: DeviceStored<Arith = T> = T> {
    /// Two lattices, or one with in-place streaming (whose address `ptrs` then holds twice).
    lattices: Vec<CudaSlice<S::Bits>>,
    ptrs: [u64; 2],
    /// Which lattice holds the current state (0 with in-place streaming).
    cur: usize,
    /// With in-place streaming, its kernels and how the lattice is held.
    in_place: Option<InPlaceDevice>,
    /// Palette index per node (one or two bytes), palette masks and moving-wall terms: owned here,
    /// used by address.
    _index: CudaSlice<u8>,
    _pal_mask: CudaSlice<u32>,
    pal_term: CudaSlice<T>,
    _pal_link: CudaSlice<u32>,
    /// Whether some node has open-face links: the step kernel is then the collide-open one.
    open: bool,
    /// The temperature lattice, when the model couples one to the flow: the step kernel is then the
    /// fused collide-thermal one.
    thermal: Option<ThermalDevice<S>>,
    /// The immersed bodies' kernels and buffers, when the case has some.
    immersed: Option<ImmersedDevice>,
    health_out: CudaSlice<f64>,
    /// The convergence measure's previous velocity (3 values per node in the run's precision,
    /// which holds the velocity exactly, `[axis][node]`) and its per-block sums; made at the first
    /// measure, so that runs of a fixed length never allocate them.
    change: Option<(CudaSlice<T>, CudaSlice<f64>)>,
    /// Whether `change` holds the velocity of a state of the current run of steps (loading
    /// populations starts a new one).
    u_prev_valid: bool,
    /// The time average's running sums (`[field][node]` doubles: ρ, u_x, u_y, u_z and θ with a
    /// temperature lattice) and the samples they hold; made at the first sample.
    means: Option<(CudaSlice<f64>, u64)>,
    /// Addresses of the index, the palette masks and terms, the watchdog's output and the palette's
    /// link words.
    addr: [u64; 5],
    /// The channels read and written (held so that they outlive every kernel using them), and
    /// their addresses in this context.
    links: Links,
    link_addr: LinkAddresses,
    host_solid: Vec<bool>,
    /// The body force (lattice units), for the velocity `read_fields` reports.
    force: Option<[f64; 3]>,
    /// With a temperature lattice, its constants: the buoyancy at each node's θ is part of the
    /// force its velocity is reported under.
    thermal_k: Option<ThermalCoefficients<T>>,
    /// The velocity inlets' amplitudes over time, the device address of the kernels' copy
    /// (`thelma_amplitude`, constant memory) and what it holds.
    inlets: Arc<InletSchedule>,
    amplitude_symbol: u64,
    amplitudes_set: Option<[T; WALL_SLOTS]>,
    slab: SlabSpec,
    /// The step kernel: collide-and-propagate, or collide-open when some node has open-face links.
    collide: CudaFunction,
    export: CudaFunction,
    health_k: CudaFunction,
    change_k: CudaFunction,
    gather_k: CudaFunction,
    means_k: CudaFunction,
    /// The live view's plane kernel, the buffer it writes and the page-locked host buffer it is
    /// copied into (a pageable copy ran at a few GB/s: most of a picture's cost), made at the first
    /// plane and sized for the slab's largest.
    plane_k: CudaFunction,
    plane_out: Option<(CudaSlice<f32>, PinnedHostSlice<f32>)>,
    /// The geometry's palette, from which the terms are rebuilt when the walls move.
    flag_palette: thelma_geometry::FlagPalette,
    _image: Arc<CuModule>,
    /// Threads per block along x of the step kernels ([`LaunchShape::block_x_of`]).
    block_x: u32,
    describe: String,
    stream: Arc<CudaStream>,
    /// Whether the step kernels take their first plane slot (`ModelParams::overlapped_steps`).
    slotted: bool,
    /// In a grid's subdomain (a partition that cuts x or y), the kernels' channel tables.
    grid: Option<GridDevice>,
    /// The faces' stream of overlapped steps, made at the first.
    side: Option<SideStream>,
    ctx: Arc<CudaContext>,
    ordinal: usize,
}

/// The stream on which a cluster job's overlapped steps run their faces, and the two events that
/// order it against the module's stream ([`CudaModule::step_overlapped`]).
struct SideStream {
    stream: Arc<CudaStream>,
    /// Recorded on the module's stream before the faces: what they follow.
    opened: CudaEvent,
    /// Recorded after the faces: what the host waits for, and the module's stream after it.
    faces: CudaEvent,
}

impl SideStream {
    fn new(main: &Arc<CudaStream>) -> Result<Self, ComputeError> {
        let err =
            |e: DriverError| ComputeError::Device(format!("cannot make the faces' stream: {e}"));
        let ctx = main.context();
        let flags = Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING);
        Ok(Self {
            stream: main.fork().map_err(err)?,
            opened: ctx.new_event(flags).map_err(err)?,
            faces: ctx.new_event(flags).map_err(err)?,
        })
    }
}

impl<T, S> CudaModule<T, S>
where
    T: Real + Arith<Scalar = T> + DeviceRepr + ValidAsZeroBits + bytemuck::Pod,
    S: DeviceStored<Arith = T>,
{
    pub fn new(
        params: &ModelParams,
        shape: LaunchShape,
        ordinal: usize,
        slab: SlabSpec,
    ) -> Result<Self, ComputeError> {
        let block_x = shape.block_x_of(S::PRECISION, params.thermal.is_some());
        if !block_x.is_power_of_two() || block_x > 1024 {
            return Err(ComputeError::Invalid(format!(
                "block size {block_x} is not a power of two up to 1024"
            )));
        }
        let grid = slab.cuts_x_or_y();
        if grid && (params.immersed || params.streaming == Streaming::InPlace) {
            return Err(ComputeError::Invalid(
                "immersed bodies and in-place streaming run on slabs of whole x-y planes only, \
                 not on a partition that cuts x or y"
                    .into(),
            ));
        }
        // A grid's cluster job sends after whole steps (the runtime overlaps slabs only): its
        // kernels take no plane slot.
        let overlapped = params.overlapped_steps && !grid;
        let info = device::gpu_info(ordinal)?;
        let flags = if grid {
            params
                .geometry
                .part([slab.x.clone(), slab.y.clone(), slab.z.clone()])
        } else {
            params.geometry.slab(slab.z.clone())
        }
        .map_err(|e| ComputeError::Geometry(e.to_string()))?;
        // One byte per node while the palette allows it, two otherwise (little-endian on both sides).
        let (index_bytes, index_host) = match flags.byte_index() {
            Some(b) => (1, b),
            None => (2, bytemuck::cast_slice::<u16, u8>(&flags.index).to_vec()),
        };
        let ctx = CudaContext::new(ordinal).map_err(dev_err("cannot create a CUDA context"))?;
        // Steps are ordered by hand (one stream, explicit synchronisation before the barrier): no
        // per-buffer event tracking.
        // SAFETY: called before any allocation in this context object.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .map_err(dev_err("cannot create a stream"))?;

        let in_place = params.streaming == Streaming::InPlace;
        let pp = PreludeParams {
            in_place,
            precision: S::PRECISION,
            model: params.model.clone(),
            block_x,
            min_blocks: shape.min_blocks_of(
                S::PRECISION,
                params.thermal.is_some(),
                params.model.smagorinsky.map(|_| params.model.collision),
            ),
            index_bytes,
            thermal: params.thermal.clone(),
            steered_temperatures: params.steered_temperatures,
            sponges: params.sponges.clone(),
            immersed: params.immersed,
            slot_offset: overlapped,
            grid,
            grid_x: slab.grid[0] > 1,
        };
        let arch = launch::arch_of(info.compute_capability);
        let source = launch::lbm_source(&pp);
        if pp.slot_offset && source.matches("THELMA_STEP_SLOT").count() < 2 {
            // Kernel files from THELMA_KERNELS written before the offset would take the interior's
            // launch for the whole slab's.
            return Err(ComputeError::Invalid(
                "the kernel files have no plane-slot offset for overlapped steps (set \
                 THELMA_OVERLAP=0 or use kernels that have one)"
                    .into(),
            ));
        }
        if pp.immersed && source.matches("THELMA_IB_STEP_PASS").count() < 3 {
            // Kernel files from THELMA_KERNELS written before the step took the band would be
            // launched with arguments they ignore: the band never forced, its bits never cleared.
            return Err(ComputeError::Invalid(
                "the kernel files' steps take no immersed band (use kernels that do)".into(),
            ));
        }
        let cubin = launch::compile_cubin(&source, "lbm_d3q19.cu", &arch)?;
        let collision = params.model.collision;
        // Cases with open faces step with the kernel that has their links; closed ones keep the
        // closed step. Sponge layers are in the open kernel (a slab of one may hold no open link).
        let open = !params.sponges.is_empty()
            || flags
                .palette
                .links
                .iter()
                .any(|l| l.iter().any(|r| r.is_open()));
        // A temperature lattice steps with the fused kernel (which has the open-face links).
        if in_place && (open || params.thermal.is_some() || params.immersed) {
            return Err(ComputeError::Invalid(
                "in-place streaming steps neither open faces, a temperature lattice nor immersed bodies"
                    .into(),
            ));
        }
        let step = if params.thermal.is_some() {
            Kernel::CollideThermal(collision)
        } else if open {
            Kernel::CollideOpen(collision)
        } else {
            Kernel::CollidePropagate(collision)
        };
        let mut kernels = vec![
            step,
            Kernel::ExportFaces,
            Kernel::Health,
            Kernel::VelocityChange,
            Kernel::GatherNodes,
            Kernel::AccumulateMeans,
            Kernel::Plane,
        ];
        if params.thermal.is_some() {
            kernels.extend([Kernel::ExportThermal, Kernel::GatherThermal]);
        }
        if grid {
            kernels.push(Kernel::ExportSides);
            if params.thermal.is_some() {
                kernels.push(Kernel::ExportThermalSides);
            }
        }
        if in_place {
            kernels.extend([
                Kernel::PullInPlace(collision),
                Kernel::LocalInPlace(collision),
                Kernel::SwapInPlace,
            ]);
        }
        if params.immersed {
            kernels.extend(Kernel::IMMERSED);
        }
        let names: Vec<String> = kernels.iter().map(|k| k.name(S::PRECISION)).collect();
        let (image, mut funcs) = launch::load(&stream, &cubin, &names)?;
        let immersed = if params.immersed {
            let mut ib = funcs
                .split_off(funcs.len() - Kernel::IMMERSED.len())
                .into_iter();
            let mut next = || ib.next().expect("the immersed kernels");
            Some(ImmersedDevice::new(
                IbKernels {
                    place: next(),
                    place_group: next(),
                    count: next(),
                    scan: next(),
                    list: next(),
                    band: next(),
                    iterate: next(),
                    iterate_group: next(),
                    fold: next(),
                    collide: next(),
                    pull: next(),
                    plane: next(),
                },
                params.model.force,
            ))
        } else {
            None
        };
        let in_place_device = if in_place {
            let mut k = funcs.split_off(funcs.len() - 3).into_iter();
            let mut next = || k.next().expect("the in-place kernels");
            Some(InPlaceDevice {
                pull: next(),
                local: next(),
                swap: next(),
                held: Held::Own,
            })
        } else {
            None
        };
        let export_thermal = if grid && params.thermal.is_some() {
            funcs.pop()
        } else {
            None
        };
        let export_sides = if grid { funcs.pop() } else { None };
        let thermal_kernels = if params.thermal.is_some() {
            let gather = funcs.pop();
            funcs.pop().zip(gather)
        } else {
            None
        };
        let [collide, export, health_k, change_k, gather_k, means_k, plane_k]: [CudaFunction; 7] =
            funcs
                .try_into()
                .map_err(|_| ComputeError::Device("the image lacks a kernel".into()))?;
        let amplitude_symbol = {
            let view = image
                .get_global("thelma_amplitude", &stream)
                .map_err(dev_err("the kernels' amplitudes are missing"))?;
            let (p, _guard) = view.device_ptr(&stream);
            p
        };
        let symbol = |name: &str| -> Result<u64, ComputeError> {
            let view = image
                .get_global(name, &stream)
                .map_err(dev_err("the kernels' channel tables are missing"))?;
            let (p, _guard) = view.device_ptr(&stream);
            Ok(p)
        };
        let grid_device = match export_sides {
            Some(export) => {
                // The box's first node along x and y and the domain's size along them.
                let d = slab.domain.size;
                let at = [slab.x.start, slab.y.start, d[0], d[1]].map(|v| v as i32);
                let table = symbol("thelma_box")?;
                // SAFETY: `thelma_box` is four ints; the copy is waited for below (before any
                // step) by the uploads that follow or by attach.
                unsafe { result::memcpy_htod_async(table, &at, stream.cu_stream()) }
                    .map_err(dev_err("cannot set the box's place"))?;
                sync_stream(&stream)?;
                Some(GridDevice {
                    side_in: symbol("thelma_side_in")?,
                    side_out: symbol("thelma_side_out")?,
                    export,
                    export_thermal,
                    staged: Vec::new(),
                })
            }
            None => None,
        };
        let regs = collide
            .num_regs()
            .map_or_else(|_| "?".to_string(), |r| r.to_string());

        let n = slab.nodes();
        let len = n
            .checked_mul(Q)
            .ok_or_else(|| ComputeError::OutOfMemory("lattice size overflows".into()))?;
        let oom = |what: &'static str| {
            move |e: cudarc::driver::DriverError| {
                ComputeError::OutOfMemory(format!(
                    "cuda:{ordinal}: {what} ({} MiB): {e}",
                    (len * std::mem::size_of::<S>()) >> 20
                ))
            }
        };
        if let Some(t) = &params.thermal {
            crate::params::check_store_scale(t, S::PRECISION)?;
        }
        let a = stream
            .alloc_zeros::<S::Bits>(len)
            .map_err(oom("lattice A"))?;
        let mut lattices = vec![a];
        if !in_place {
            lattices.push(
                stream
                    .alloc_zeros::<S::Bits>(len)
                    .map_err(oom("lattice B"))?,
            );
        }
        let thermal = match (&params.thermal, thermal_kernels) {
            (Some(setup), Some((export, gather))) => Some(ThermalDevice::new(
                &stream,
                setup,
                params.steered_temperatures,
                n,
                export,
                gather,
                &image,
            )?),
            _ => None,
        };
        let index = stream.clone_htod(&index_host).map_err(oom("flag index"))?;
        // Q words per entry: each direction's link rule, except direction 0 (never a link), which
        // carries the entry's inlet word.
        let links: Vec<u32> = flags
            .palette
            .links
            .iter()
            .zip(&flags.palette.inlet)
            .flat_map(|(l, &inlet)| {
                std::iter::once(inlet).chain(l.iter().skip(1).map(|r| r.code()))
            })
            .collect();
        let mask: Vec<u32> = flags
            .palette
            .flags
            .iter()
            .zip(&flags.palette.links)
            .map(|(f, l)| {
                let open = l.iter().any(|r| r.is_open());
                f.bounce_mask()
                    | if f.is_solid() { SOLID_BIT } else { 0 }
                    | if open { OPEN_BIT } else { 0 }
            })
            .collect();
        let term: Vec<T> = flags
            .palette
            .moving_term
            .iter()
            .flat_map(|t| t.iter().map(|&v| T::of(v)))
            .collect();
        let pal_mask = stream.clone_htod(&mask).map_err(oom("palette"))?;
        let pal_term = stream.clone_htod(&term).map_err(oom("palette"))?;
        let pal_link = stream.clone_htod(&links).map_err(oom("palette"))?;
        let health_out = stream
            .alloc_zeros::<f64>(3 * HEALTH_BLOCKS as usize)
            .map_err(oom("watchdog buffer"))?;
        let solid: Vec<bool> = flags.palette.flags.iter().map(|f| f.is_solid()).collect();
        let host_solid: Vec<bool> = flags.index.iter().map(|&k| solid[k as usize]).collect();
        let ptrs = [
            raw(&lattices[0], &stream),
            raw(lattices.last().expect("a lattice"), &stream),
        ];
        let addr = [
            raw(&index, &stream),
            raw(&pal_mask, &stream),
            raw(&pal_term, &stream),
            raw(&health_out, &stream),
            raw(&pal_link, &stream),
        ];
        let mut m = Self {
            force: params.model.force,
            thermal_k: params
                .thermal
                .as_ref()
                .map(|t| ThermalCoefficients::new(&t.model, |_, x| T::of(x))),
            inlets: params.inlets.clone(),
            amplitude_symbol,
            amplitudes_set: None,
            lattices,
            ptrs,
            cur: 0,
            in_place: in_place_device,
            _index: index,
            _pal_mask: pal_mask,
            pal_term,
            _pal_link: pal_link,
            open,
            thermal,
            immersed,
            health_out,
            change: None,
            u_prev_valid: false,
            means: None,
            addr,
            links: Links::default(),
            link_addr: LinkAddresses::default(),
            host_solid,
            slab,
            collide,
            export,
            health_k,
            change_k,
            gather_k,
            means_k,
            plane_k,
            plane_out: None,
            flag_palette: flags.palette.clone(),
            _image: image,
            block_x,
            describe: format!(
                "cuda:{ordinal} {} {} (collision kernel: {} registers, block {}){}",
                info.name,
                S::PRECISION.name(),
                regs,
                block_x,
                launch::kernels_from()
                    .map(|d| format!(", kernel files from {d}"))
                    .unwrap_or_default()
            ),
            stream,
            slotted: overlapped,
            grid: grid_device,
            side: None,
            ctx,
            ordinal,
        };
        // The lattices start zeroed: shifted populations at rest (ρ = 1, u = 0).
        if let Some(init) = &params.initial {
            let g = initial_populations::<T, S>(&m.slab, init)?;
            m.upload(&g)?;
        }
        Ok(m)
    }

    fn size(&self) -> [i32; 3] {
        [
            self.slab.nx() as i32,
            self.slab.ny() as i32,
            self.slab.nz() as i32,
        ]
    }

    fn sync(&self) -> Result<(), ComputeError> {
        sync_stream(&self.stream)
    }

    fn upload(&mut self, vals: &[S]) -> Result<(), ComputeError> {
        to_device(
            &self.stream,
            bytemuck::cast_slice::<S, S::Bits>(vals),
            &mut self.lattices[self.cur],
        )
    }

    fn download(&self) -> Result<Vec<S>, ComputeError> {
        let bits = to_host(&self.stream, &self.lattices[self.cur])?;
        Ok(bytemuck::cast_slice::<S::Bits, S>(&bits).to_vec())
    }

    /// Byte offset of the buffer of `parity` inside a channel across `side`.
    fn offset(&self, side: usize, parity: usize) -> u64 {
        (channel_offset(self.channel_values(side), parity) * std::mem::size_of::<S>()) as u64
    }

    /// The address of buffer `parity` of the channel across `side` at `base` (0: none).
    fn at(&self, base: u64, side: usize, parity: usize) -> u64 {
        if base == 0 {
            0
        } else {
            base + self.offset(side, parity)
        }
    }

    /// Values in one buffer of the channel across `side`: the flow's crossing populations over
    /// the side's nodes, and across a face the temperature lattice's one after them (the CPU
    /// module's layout).
    fn channel_values(&self, side: usize) -> usize {
        let thermal = if self.thermal.is_some() && side < 6 {
            self.slab.side_nodes(side)
        } else {
            0
        };
        self.slab.side_values(&D3Q19, side) + thermal
    }

    /// The wall-velocity slots' amplitudes of step `t` in the kernels' constant memory, copied when
    /// they change.
    fn set_amplitudes(&mut self, t: u64) -> Result<(), ComputeError> {
        let amplitudes = self.inlets.amplitudes(t).map(T::of);
        if self.amplitudes_set != Some(amplitudes) {
            // SAFETY: `amplitude_symbol` is the module's `thelma_amplitude`, WALL_SLOTS values of T;
            // the copy is ordered before the step on the stream, and the driver stages the pageable
            // source before returning.
            unsafe {
                result::memcpy_htod_async(
                    self.amplitude_symbol,
                    &amplitudes,
                    self.stream.cu_stream(),
                )
            }
            .map_err(dev_err("cannot set the inlets' amplitudes"))?;
            self.amplitudes_set = Some(amplitudes);
        }
        Ok(())
    }

    /// What step `t` launches with: the lattices, palette and this step's interface buffers, and
    /// the slab's place for the inlets' profiles.
    fn step_args(&self, t: u64) -> (StepArgs, InletArgs) {
        let rin = ((t + 1) % 2) as usize;
        let rout = (t % 2) as usize;
        let l = self.link_addr;
        // The axes that wrap onto the box itself: periodic x and y the partition does not cut.
        let g = self.slab.grid;
        let p = self.slab.domain.periodic;
        let p = [p[0] && g[0] == 1, p[1] && g[1] == 1];
        let args = StepArgs {
            a: self.ptrs[self.cur],
            b: self.ptrs[1 - self.cur],
            index: self.addr[0],
            pal_mask: self.addr[1],
            pal_term: self.addr[2],
            below_in: self.at(l.from_below, 0, rin),
            above_in: self.at(l.from_above, 1, rin),
            above_out: self.at(l.to_above, 1, rout),
            below_out: self.at(l.to_below, 0, rout),
            size: self.size(),
            periodic: i32::from(p[0]) | (i32::from(p[1]) << 1),
            block_x: self.block_x,
            slot0: self.slotted.then_some(0),
            slots: self.slab.nz() as u32,
            parity: self.grid.as_ref().map(|_| rout as i32),
            ib: self.immersed.as_ref().map(|im| im.step_band(&self.stream)),
        };
        let inlets = InletArgs {
            z0: self.slab.z.start as i32,
            nz_domain: self.slab.domain.size[2] as i32,
        };
        (args, inlets)
    }

    /// Enqueues on `stream` the step kernel of this module's case on the plane slots of `args`: in-place
    /// streaming's pull or local step, the coupled step of a temperature lattice, the step with
    /// open faces, or the closed step.
    /// What opens step `t` before its kernel: the inlets' amplitudes, the immersed bodies'
    /// forcing.
    fn open_step(
        &mut self,
        t: u64,
        args: &StepArgs,
        inlets: &InletArgs,
    ) -> Result<(), ComputeError> {
        if self.open || self.thermal.is_some() {
            self.set_amplitudes(t)?;
        }
        let periodic_z = self.slab.domain.periodic[2];
        let view = self.view(args, inlets);
        if let Some(im) = &mut self.immersed {
            im.before_step(&self.stream, t, &view, periodic_z)?;
        }
        Ok(())
    }

    /// What closes a step after its kernel: the in-place lattice's arrangement, or the immersed
    /// bodies' forces and the swap of the two lattices.
    fn close_step(&mut self, args: &StepArgs, inlets: &InletArgs) -> Result<(), ComputeError> {
        if let Some(ip) = &mut self.in_place {
            ip.held = match ip.held {
                Held::Own => Held::Streamed,
                Held::Streamed => Held::Own,
            };
            return Ok(());
        }
        let view = self.view(args, inlets);
        if let Some(im) = &mut self.immersed {
            im.after_step(&self.stream, &view)?;
        }
        self.cur = 1 - self.cur;
        Ok(())
    }

    /// A step's launch arguments as the immersed bodies' kernels take them.
    fn view<'a>(&self, args: &'a StepArgs, inlets: &'a InletArgs) -> StepView<'a> {
        StepView {
            args,
            inlets,
            pal_link: self.addr[4],
            open: i32::from(self.open),
        }
    }

    fn launch_step(
        &self,
        stream: &CudaStream,
        args: &StepArgs,
        inlets: &InletArgs,
    ) -> Result<(), ComputeError> {
        if let Some(ip) = &self.in_place {
            let f = match ip.held {
                Held::Own => &ip.pull,
                Held::Streamed => &ip.local,
            };
            // SAFETY: as below, with `f` an in-place step of this module's precision and `args.a`
            // its one lattice (`args.b` is the same address and is not passed).
            return unsafe { launch::collide_in_place(stream, f, args) };
        }
        if let Some(th) = &self.thermal {
            let h = [th.ptrs[self.cur], th.ptrs[1 - self.cur]];
            // SAFETY: as below, with `collide` the collide-thermal kernel, this module's link words
            // (Q per palette entry) and its two thermal lattices (7 values per node); the
            // interfaces hold the thermal plane after the flow's (`channel_values`).
            unsafe { launch::collide_thermal(stream, &self.collide, args, self.addr[4], inlets, h) }
        } else if self.open {
            // SAFETY: as below, with `collide` the collide-open kernel and this module's link words
            // (Q per palette entry).
            unsafe { launch::collide_open(stream, &self.collide, args, self.addr[4], inlets) }
        } else {
            // SAFETY: `collide` was loaded for this module's precision; `a`/`b` are its two
            // lattices, `index` its palette index per node (built from its own flags, so below the
            // palette length), `pal_mask`/`pal_term` that palette, and the interface planes belong
            // to the interfaces it holds; all live as long as the module, which synchronises before
            // dropping.
            unsafe { launch::collide_propagate(stream, &self.collide, args) }
        }
    }

    /// The immersed bodies' kernels, or why there are none: the case has no immersed bodies (its
    /// kernels were not compiled) or a temperature lattice (not coupled to them yet).
    fn immersed_device(&mut self) -> Result<&mut ImmersedDevice, ComputeError> {
        if self.thermal.is_some() {
            return Err(ComputeError::Invalid(
                "immersed bodies are not available with a temperature lattice".into(),
            ));
        }
        self.immersed.as_mut().ok_or_else(|| {
            ComputeError::Invalid("the module was made for a case without immersed bodies".into())
        })
    }

    /// The lattice as [`Held::Own`], for what reads it: an in-place lattice held
    /// [`Held::Streamed`] has its pairs of slots swapped (enqueued; readers synchronise).
    fn own(&mut self) -> Result<(), ComputeError> {
        let Some(ip) = &self.in_place else {
            return Ok(());
        };
        if ip.held == Held::Own {
            return Ok(());
        }
        let (args, _) = self.step_args(0);
        // SAFETY: `swap` was loaded for this module's precision; `args.a` is its one lattice and
        // `index`/`pal_mask` its palette, all alive as long as the module.
        unsafe { launch::swap_in_place(&self.stream, &ip.swap, &args) }?;
        if let Some(ip) = &mut self.in_place {
            ip.held = Held::Own;
        }
        Ok(())
    }

    /// Enqueues the copies of the buffers of `parity` of the staged x faces' channels: those the
    /// module writes from their device buffers into host memory (`written`, after what writes
    /// them), or those it reads from host memory into their device buffers (before what reads
    /// them). Copies and kernels share the module's stream, and the step protocol's
    /// synchronisation before the runtime's barrier covers the copies out.
    fn copy_staged(&self, written: bool, parity: usize) -> Result<(), ComputeError> {
        let Some(g) = &self.grid else {
            return Ok(());
        };
        for f in g.staged.iter().filter(|f| f.writes == written) {
            let offset = self.offset(f.side, parity);
            let bytes = self.channel_values(f.side) * std::mem::size_of::<S>();
            let device = raw(&f.device, &self.stream) + offset;
            let host = f.host + offset;
            let (dst, src) = if written {
                (host, device)
            } else {
                (device, host)
            };
            // SAFETY: both are buffer `parity` (`bytes` long, at `offset`) of the channel and of
            // its device buffer, which are as long as the channel (checked by attach) and live as
            // long as the module holds them; under unified addressing the mapped host address is
            // a valid copy operand, and the stream orders the copy with the kernels around it.
            unsafe { sys::cuMemcpyAsync(dst, src, bytes, self.stream.cu_stream()) }
                .result()
                .map_err(dev_err("cannot copy an x face's channel"))?;
        }
        Ok(())
    }

    /// Publishes the boundary layers of the current lattice into the buffers of `parity`.
    fn publish(&self, parity: usize) -> Result<(), ComputeError> {
        if let Some(g) = &self.grid {
            // SAFETY: `export` was loaded for this module's precision from the image whose tables
            // attach filled with the channels the module holds (0 for none); `ptrs[cur]` is one of
            // its lattices, 19 values per node of its box.
            unsafe {
                launch::export_sides(
                    &self.stream,
                    &g.export,
                    self.ptrs[self.cur],
                    self.size(),
                    parity as i32,
                )
            }?;
            if let (Some(th), Some(export)) = (&self.thermal, &g.export_thermal) {
                // SAFETY: as above, with the thermal export and lattice (7 values per node); the
                // face channels hold the thermal slot after the flow's (`channel_values`).
                unsafe {
                    launch::export_sides(
                        &self.stream,
                        export,
                        th.ptrs[self.cur],
                        self.size(),
                        parity as i32,
                    )
                }?;
            }
            self.copy_staged(true, parity)?;
            return self.sync();
        }
        let up = self.at(self.link_addr.to_above, 1, parity);
        let down = self.at(self.link_addr.to_below, 0, parity);
        if up != 0 || down != 0 {
            // SAFETY: `export` was loaded for this module's precision; `ptrs[cur]` is one of the
            // module's two lattices (19 values per node of its slab) and `up`/`down` are null or
            // planes of the attached interfaces, which the module holds (and synchronises before
            // releasing).
            unsafe {
                launch::export_faces(
                    &self.stream,
                    &self.export,
                    self.ptrs[self.cur],
                    up,
                    down,
                    self.size(),
                )
            }?;
            if let Some(th) = &self.thermal {
                // SAFETY: as above, with the thermal export kernel and lattice (7 values per node);
                // the interfaces hold the thermal plane after the flow's (`channel_values`).
                unsafe {
                    launch::export_faces(
                        &self.stream,
                        &th.export,
                        th.ptrs[self.cur],
                        up,
                        down,
                        self.size(),
                    )
                }?;
            }
        }
        self.sync()
    }
}

/// In-place streaming's kernels (`THELMA_IN_PLACE` in `kernels/lbm_d3q19.cu`) and how the one
/// lattice is held.
struct InPlaceDevice {
    pull: CudaFunction,
    local: CudaFunction,
    swap: CudaFunction,
    held: Held,
}

/// The temperature lattice of a CUDA module: two lattices of 7 populations per node (swapped with
/// the flow's), stored as the flow's are under the setup's store scale, and the kernels exporting
/// their crossing populations and gathering listed nodes.
struct ThermalDevice<S: DeviceStored> {
    lattices: [CudaSlice<S::Bits>; 2],
    ptrs: [u64; 2],
    export: CudaFunction,
    gather: CudaFunction,
    /// The setup the kernels were compiled with, and, where the run's temperatures are steered,
    /// the device address of the kernels' held terms (`thelma_held_term`, constant memory: the
    /// `dirichlet_term` of each entry of `ThermalSetup::held_table`, in T) and their count;
    /// otherwise the terms are literals in the kernels and `held` is `None`.
    setup: ThermalSetup,
    held: Option<(u64, usize)>,
}

impl<T, S> ThermalDevice<S>
where
    T: Real + Arith<Scalar = T> + DeviceRepr,
    S: DeviceStored<Arith = T>,
{
    /// Both lattices of a slab of `n` nodes at the setup's uniform θ, at rest (lattice 0 current);
    /// with `steered`, the kernels' constant table of held terms filled from the setup.
    fn new(
        stream: &Arc<CudaStream>,
        setup: &ThermalSetup,
        steered: bool,
        n: usize,
        export: CudaFunction,
        gather: CudaFunction,
        image: &Arc<CuModule>,
    ) -> Result<Self, ComputeError> {
        let held = if steered {
            let view = image
                .get_global("thelma_held_term", stream)
                .map_err(dev_err("the kernels' held temperatures are missing"))?;
            let len = view.len() / std::mem::size_of::<T>();
            let (p, _guard) = view.device_ptr(stream);
            set_held_terms::<T>(stream, (p, len), &setup.held_table())?;
            Some((p, len))
        } else {
            None
        };
        let oom = |e: cudarc::driver::DriverError| {
            ComputeError::OutOfMemory(format!(
                "temperature lattice ({} MiB): {e}",
                (QT * n * std::mem::size_of::<S>()) >> 20
            ))
        };
        let mut a = stream.alloc_zeros::<S::Bits>(QT * n).map_err(oom)?;
        let b = stream.alloc_zeros::<S::Bits>(QT * n).map_err(oom)?;
        let eq = thermal_equilibrium_populations(T::of(setup.initial), [T::zero(); 3]);
        if eq.iter().any(|&v| v != T::zero()) {
            let scale = T::of(setup.store_scale);
            let mut plane = vec![S::Bits::default(); n];
            for (i, v) in eq.into_iter().enumerate() {
                plane.fill(bytemuck::cast(store_thermal::<S>(v, scale)));
                let mut dst = a.slice_mut(i * n..(i + 1) * n);
                stream
                    .memcpy_htod(&plane, &mut dst)
                    .map_err(dev_err("copy to the device"))?;
            }
            sync_stream(stream)?;
        }
        let ptrs = [raw(&a, stream), raw(&b, stream)];
        Ok(Self {
            lattices: [a, b],
            ptrs,
            export,
            gather,
            setup: setup.clone(),
            held,
        })
    }
}

impl<T: Real + Arith<Scalar = T> + DeviceRepr, S: DeviceStored<Arith = T>> ThermalDevice<S> {
    /// The current lattice `cur`'s populations, as collided.
    fn download(&self, stream: &Arc<CudaStream>, cur: usize) -> Result<Vec<T>, ComputeError> {
        let inv = T::of(1.0 / self.setup.store_scale);
        let bits = to_host(stream, &self.lattices[cur])?;
        Ok(bytemuck::cast_slice::<S::Bits, S>(&bits)
            .iter()
            .map(|&v| load_thermal(v, inv))
            .collect())
    }

    /// With the held terms compiled into the kernels: whether `table` holds what they hold (a
    /// checkpoint's table, set again on resume), the same term in T at every held face and patch,
    /// entries of rules that hold nothing ignored; `Invalid` otherwise.
    fn holds(&self, table: &[f64]) -> Result<(), ComputeError> {
        let mut asked = self.setup.clone();
        if !asked.set_held(table) {
            return Err(ComputeError::Invalid(format!(
                "{} held temperatures for a table of {}",
                table.len(),
                self.setup.held_table().len()
            )));
        }
        let term = |t: f64| dirichlet_term(T::of(t));
        let same = asked
            .held_table()
            .into_iter()
            .zip(self.setup.held_table())
            .all(|(a, b)| term(a) == term(b));
        if same {
            Ok(())
        } else {
            Err(ComputeError::Invalid(
                "the held temperatures are compiled into the kernels (the module was made without \
                 steered temperatures): they cannot change"
                    .into(),
            ))
        }
    }
}

/// Fills the kernels' held terms (`thelma_held_term` at `symbol`, `len` values of T) from the held
/// θ table: each entry's anti-bounce-back term as the CPU module computes it,
/// `dirichlet_term(T::of(θ))`, and waits for the copy.
fn set_held_terms<T>(
    stream: &Arc<CudaStream>,
    (symbol, len): (u64, usize),
    table: &[f64],
) -> Result<(), ComputeError>
where
    T: Real + Arith<Scalar = T> + DeviceRepr,
{
    if table.len() != len {
        return Err(ComputeError::Invalid(format!(
            "{} held temperatures for a table of {len}",
            table.len()
        )));
    }
    let terms: Vec<T> = table.iter().map(|&t| dirichlet_term(T::of(t))).collect();
    // SAFETY: `symbol` is the module's `thelma_held_term`, `len` values of T; the copy is ordered
    // after the steps enqueued before it and before those after, and waited for here.
    unsafe { result::memcpy_htod_async(symbol, &terms, stream.cu_stream()) }
        .map_err(dev_err("cannot set the held temperatures"))?;
    sync_stream(stream)
}

/// Waits for the work enqueued on `stream`; an error it reports is the device's.
fn sync_stream(stream: &CudaStream) -> Result<(), ComputeError> {
    stream
        .synchronize()
        .map_err(dev_err("the device reported an error"))
}

/// `buf` on the host, once the work enqueued before has finished.
fn to_host<T: DeviceRepr + Default + Clone>(
    stream: &Arc<CudaStream>,
    buf: &CudaSlice<T>,
) -> Result<Vec<T>, ComputeError> {
    sync_stream(stream)?;
    let mut out = vec![T::default(); buf.len()];
    stream
        .memcpy_dtoh(buf, &mut out)
        .map_err(dev_err("copy from the device"))?;
    sync_stream(stream)?;
    Ok(out)
}

/// Replaces the start of `buf` with `vals` and waits for the copy.
fn to_device<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    vals: &[T],
    buf: &mut CudaSlice<T>,
) -> Result<(), ComputeError> {
    stream
        .memcpy_htod(vals, buf)
        .map_err(dev_err("copy to the device"))?;
    sync_stream(stream)
}

/// The raw device address of a buffer (event tracking is off, so no synchronisation is attached).
fn raw<U>(s: &CudaSlice<U>, stream: &CudaStream) -> u64 {
    let (p, _guard) = s.device_ptr(stream);
    p
}

impl<T, S> ComputeModule for CudaModule<T, S>
where
    T: Real + Arith<Scalar = T> + DeviceRepr + ValidAsZeroBits + bytemuck::Pod,
    S: DeviceStored<Arith = T>,
{
    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn allocate_channel(
        &mut self,
        side: usize,
        transport: Transport,
    ) -> Result<Arc<dyn Channel>, ComputeError> {
        let bytes = 2 * self.channel_values(side) * std::mem::size_of::<S>();
        channel::allocate(&self.ctx, self.ordinal, transport, bytes)
    }

    fn attach(&mut self, links: Links) -> Result<(), ComputeError> {
        self.own()?;
        links.check(|side| 2 * self.channel_values(side) * std::mem::size_of::<S>())?;
        if let Some(g) = &self.grid {
            // Both buffers of every side's channels, read and written, into the kernels' tables;
            // an x face's channel in host memory through a device buffer of its size.
            let mut tables = [[[0u64; SIDE_COUNT]; 2]; 2];
            let mut staged = Vec::new();
            for (side, chan, writes) in links.all() {
                let mut base = channel::address(&self.ctx, self.ordinal, chan.as_ref())?;
                if chan.transport() == Transport::ZeroCopy && SIDES[side][1..] == [0, 0] {
                    let device = self.stream.alloc_zeros::<u8>(chan.bytes()).map_err(|e| {
                        ComputeError::OutOfMemory(format!("an x face's device buffer: {e}"))
                    })?;
                    let host = base;
                    base = raw(&device, &self.stream);
                    staged.push(StagedFace {
                        side,
                        writes,
                        host,
                        _channel: chan.clone(),
                        device,
                    });
                }
                for parity in 0..2 {
                    tables[usize::from(writes)][parity][side] = self.at(base, side, parity);
                }
            }
            self.sync()?;
            let symbols = [g.side_in, g.side_out];
            // The new device buffers join the module's before the tables name them, and the
            // ones they replace leave only once the tables no longer do (both stay on failure).
            let Some(g) = &mut self.grid else {
                unreachable!("a grid's module")
            };
            let old = g.staged.len();
            g.staged.extend(staged);
            for (table, symbol) in tables.iter().zip(symbols) {
                let flat: Vec<u64> = table.iter().flatten().copied().collect();
                // SAFETY: each table is `unsigned long long [2][THELMA_SIDES]` in the module's
                // image; no step runs (synchronised above) and the copy is waited for below.
                unsafe { result::memcpy_htod_async(symbol, &flat, self.stream.cu_stream()) }
                    .map_err(dev_err("cannot set the channel tables"))?;
            }
            self.sync()?;
            if let Some(g) = &mut self.grid {
                g.staged.drain(..old);
            }
        }
        let addr = |c: &Option<Arc<dyn Channel>>| {
            c.as_ref().map_or(Ok(0), |c| {
                channel::address(&self.ctx, self.ordinal, c.as_ref())
            })
        };
        let link_addr = LinkAddresses {
            from_below: addr(links.from_below())?,
            from_above: addr(links.from_above())?,
            to_above: addr(links.to_above())?,
            to_below: addr(links.to_below())?,
        };
        self.sync()?;
        self.links = links;
        self.link_addr = link_addr;
        self.u_prev_valid = false;
        self.publish(1)
    }

    fn step(&mut self, t: u64) -> Result<(), ComputeError> {
        let (args, inlets) = self.step_args(t);
        self.open_step(t, &args, &inlets)?;
        // Step t reads the buffers of parity (t + 1) % 2 and writes those of t % 2.
        self.copy_staged(false, ((t + 1) % 2) as usize)?;
        self.launch_step(&self.stream, &args, &inlets)?;
        self.copy_staged(true, (t % 2) as usize)?;
        self.close_step(&args, &inlets)
    }

    fn step_overlapped(
        &mut self,
        t: u64,
        faces_done: &mut dyn FnMut() -> Result<(), ComputeError>,
    ) -> Result<(), ComputeError> {
        let nz = self.slab.nz();
        if !self.slotted || StepPart::Interior.slots(nz).is_empty() {
            // Kernels that run the whole slab only, or nothing besides the faces to overlap.
            self.step(t)?;
            self.sync()?;
            return faces_done();
        }
        let (args, inlets) = self.step_args(t);
        self.open_step(t, &args, &inlets)?;
        let part = |p: StepPart| {
            let slots = p.slots(nz);
            StepArgs {
                slot0: Some(slots.start as i32),
                slots: slots.len() as u32,
                ..args
            }
        };
        // The faces on a stream of their own, after what this module's stream holds (the last
        // step, what opens this one), and the interior on the module's stream at once: the faces'
        // slow stores into host memory overlap the interior's work, and the host waits for the
        // faces alone. The module's stream then waits for them, so that what follows the step
        // (the next one, a synchronisation) follows both parts.
        if self.side.is_none() {
            self.side = Some(SideStream::new(&self.stream)?);
        }
        let side = self.side.as_ref().expect("made above");
        let err =
            |e: DriverError| ComputeError::Device(format!("cannot order the step's faces: {e}"));
        side.opened.record(&self.stream).map_err(err)?;
        side.stream.wait(&side.opened).map_err(err)?;
        self.launch_step(&side.stream, &part(StepPart::Faces), &inlets)?;
        if let Err(e) = side.faces.record(&side.stream) {
            // Nothing orders the faces before what follows: wait for them here.
            let _ = side.stream.synchronize();
            return Err(err(e));
        }
        let interior = self.launch_step(&self.stream, &part(StepPart::Interior), &inlets);
        let met = side
            .faces
            .synchronize()
            .map_err(dev_err("the step's faces failed"))
            .and(interior)
            .and_then(|()| faces_done());
        self.stream.wait(&side.faces).map_err(err)?;
        met?;
        self.close_step(&args, &inlets)
    }

    fn synchronize(&mut self) -> Result<(), ComputeError> {
        self.sync()
    }

    fn read_fields(&mut self) -> Result<Fields, ComputeError> {
        self.own()?;
        let g = self.download()?;
        let n = self.slab.nodes();
        let theta: Option<Vec<T>> = match &self.thermal {
            Some(th) => {
                let h = th.download(&self.stream, self.cur)?;
                Some(
                    (0..n)
                        .map(|p| temperature(&std::array::from_fn(|i| h[i * n + p])))
                        .collect(),
                )
            }
            None => None,
        };
        let uniform = self.force.map(|f| f.map(T::of));
        // The immersed bodies' nodes collided under their own force besides the uniform one
        // (summed in double and rounded once, as the step did).
        let forced: std::collections::HashMap<usize, [T; 3]> = match &self.immersed {
            Some(im) => {
                let u = self.force.unwrap_or([0.0; 3]);
                im.node_forces(&self.stream)?
                    .into_iter()
                    .map(|(p, f)| (p as usize, std::array::from_fn(|a| T::of(u[a] + f[a]))))
                    .collect()
            }
            None => Default::default(),
        };
        // The force each node collided with, as the CPU module's `ThermalLattice::force_at`.
        let force = |p: usize| match (&theta, &self.thermal_k) {
            (Some(t), Some(k)) => Some(coupled_force(t[p], uniform.unwrap_or([T::zero(); 3]), k)),
            _ => forced.get(&p).copied().or(uniform),
        };
        let mut fields = fields_from_populations(&self.slab, &g, |p| self.host_solid[p], force);
        if let Some(t) = &theta {
            fields.temperature = t.iter().map(|v| Real::to_f64(*v)).collect();
        }
        Ok(fields)
    }

    /// The plane by `plane_d3q19`, which reports u under the uniform force (and the buoyancy), and
    /// at the nodes an immersed body forced by `ib_plane`, under their own force too.
    fn read_plane(&mut self, axis: usize, index: usize) -> Result<PlaneFields, ComputeError> {
        self.own()?;
        let size = [self.slab.nx(), self.slab.ny(), self.slab.nz()];
        if axis > 2 || index >= size[axis] {
            return Err(ComputeError::Invalid(format!(
                "plane {} = {index} outside a slab of {size:?} nodes",
                ["x", "y", "z"].get(axis).unwrap_or(&"?")
            )));
        }
        let (dims, nodes) = crate::fields::plane_nodes(&self.slab, axis, index);
        let count = dims[0] * dims[1];
        if self.plane_out.is_none() {
            // The slab's largest plane.
            let most = (size[1] * size[2])
                .max(size[0] * size[2])
                .max(size[0] * size[1]);
            let oom = |e: cudarc::driver::DriverError| {
                ComputeError::OutOfMemory(format!(
                    "live view plane ({} KiB): {e}",
                    (20 * most) >> 10
                ))
            };
            let buf = self.stream.alloc_zeros::<f32>(5 * most).map_err(oom)?;
            // SAFETY: plain page-locked memory (no flags: readable by the host at cache speed,
            // unlike write-combined memory); every value read is first written by the copy below.
            let host =
                unsafe { self.ctx.alloc_pinned_with_flags::<f32>(5 * most, 0) }.map_err(oom)?;
            self.plane_out = Some((buf, host));
        }
        let (out, host) = self.plane_out.as_mut().expect("made above");
        let h = self.thermal.as_ref().map_or(0, |th| th.ptrs[self.cur]);
        // SAFETY: `plane_k` was compiled for this module's precision and temperature lattice; the
        // current lattices hold 19·n and 7·n values, the palette index n entries below the length
        // of its mask, `out` 5 floats for more nodes than any plane of the slab has, and `index`
        // is inside the slab along `axis` (checked above); all owned by the module until it drops.
        unsafe {
            launch::plane(
                &self.stream,
                &self.plane_k,
                self.ptrs[self.cur],
                h,
                self.addr[0],
                self.addr[1],
                size,
                (axis, index),
                raw(out, &self.stream),
            )
        }?;
        if let Some(im) = &self.immersed {
            im.plane(
                &self.stream,
                self.ptrs[self.cur],
                self.addr[0],
                self.addr[1],
                size,
                (axis, index),
                raw(out, &self.stream),
            )?;
        }
        // Into the part of the buffer this plane fills (a copy into the whole buffer would move
        // the largest plane's bytes every time).
        let dst = &mut host
            .as_mut_slice()
            .map_err(dev_err("copy from the device"))?[..5 * count];
        self.stream
            .memcpy_dtoh(&out.slice(..5 * count), dst)
            .map_err(dev_err("copy from the device"))?;
        sync_stream(&self.stream)?;
        let host = host.as_slice().map_err(dev_err("copy from the device"))?;
        let field = |k: usize| host[k * count..(k + 1) * count].to_vec();
        Ok(PlaneFields {
            axis,
            size: dims,
            rho: field(0),
            ux: field(1),
            uy: field(2),
            uz: field(3),
            temperature: if self.thermal.is_some() {
                field(4)
            } else {
                Vec::new()
            },
            solid: nodes.iter().map(|&p| self.host_solid[p]).collect(),
        })
    }

    fn set_wall_velocities(&mut self, walls: &[[f64; 3]]) -> Result<(), ComputeError> {
        let terms = self.flag_palette.terms(walls).ok_or_else(|| {
            ComputeError::Invalid(format!("{} wall velocities for more slots", walls.len()))
        })?;
        let term: Vec<T> = terms
            .iter()
            .flat_map(|t| t.iter().map(|&v| T::of(v)))
            .collect();
        // Ordered after the steps enqueued before it, before those after.
        self.stream
            .memcpy_htod(&term, &mut self.pal_term)
            .map_err(dev_err("cannot move the walls"))?;
        self.sync()
    }

    fn set_held_temperatures(&mut self, table: &[f64]) -> Result<(), ComputeError> {
        let th = self.thermal.as_ref().ok_or_else(|| {
            ComputeError::Invalid("held temperatures for a case without [thermal]".into())
        })?;
        crate::params::check_held(&th.setup, table, S::PRECISION)?;
        let Some(symbol) = th.held else {
            return th.holds(table);
        };
        set_held_terms::<T>(&self.stream, symbol, table)
    }

    fn health(&mut self) -> Result<Health, ComputeError> {
        self.own()?;
        let n = self.slab.nodes();
        // SAFETY: as for the step: the current lattice (19·n values), the palette index (n
        // entries) and mask of this module, and `health_out` of 3·HEALTH_BLOCKS doubles.
        unsafe {
            launch::health(
                &self.stream,
                &self.health_k,
                self.ptrs[self.cur],
                self.addr[0],
                self.addr[1],
                n as u64,
                self.addr[3],
            )
        }?;
        self.sync()?;
        let mut out = vec![0.0f64; 3 * HEALTH_BLOCKS as usize];
        self.stream
            .memcpy_dtoh(&self.health_out, &mut out)
            .map_err(dev_err("copy from the device"))?;
        self.sync()?;
        let mut h = Health {
            non_finite: None,
            rho_min: f64::INFINITY,
            rho_max: f64::NEG_INFINITY,
        };
        let mut bad: Option<usize> = None;
        for b in out.chunks_exact(3) {
            h.rho_min = h.rho_min.min(b[0]);
            h.rho_max = h.rho_max.max(b[1]);
            if b[2] >= 0.0 {
                let p = b[2] as usize;
                bad = Some(bad.map_or(p, |q| q.min(p)));
            }
        }
        let (nx, ny) = (self.slab.nx(), self.slab.ny());
        let o = self.slab.origin();
        h.non_finite = bad.map(|p| [o[0] + p % nx, o[1] + (p / nx) % ny, o[2] + p / (nx * ny)]);
        Ok(h)
    }

    fn velocity_change(&mut self) -> Result<Option<ChangeSums>, ComputeError> {
        self.own()?;
        let n = self.slab.nodes();
        if self.change.is_none() {
            let oom = |e: cudarc::driver::DriverError| {
                ComputeError::OutOfMemory(format!(
                    "previous velocity ({} MiB): {e}",
                    (3 * n * std::mem::size_of::<T>()) >> 20
                ))
            };
            let u_prev = self.stream.alloc_zeros::<T>(3 * n).map_err(oom)?;
            let sums = self
                .stream
                .alloc_zeros::<f64>(2 * CHANGE_BLOCKS as usize)
                .map_err(oom)?;
            self.change = Some((u_prev, sums));
        }
        let Some((u_prev, sums)) = &self.change else {
            unreachable!("made above")
        };
        let compare = self.u_prev_valid;
        // SAFETY: `change_k` was loaded for this module's precision; the current lattice holds 19·n
        // values, the palette index n entries below the length of its mask, `u_prev` 3·n values of
        // the precision and `sums` 2·CHANGE_BLOCKS doubles, all owned by the module (the copy below
        // synchronises the stream before anything could drop them).
        unsafe {
            launch::velocity_change(
                &self.stream,
                &self.change_k,
                self.ptrs[self.cur],
                self.addr[0],
                self.addr[1],
                n as u64,
                raw(u_prev, &self.stream),
                compare,
                raw(sums, &self.stream),
            )
        }?;
        let mut out = vec![0.0f64; 2 * CHANGE_BLOCKS as usize];
        self.stream
            .memcpy_dtoh(sums, &mut out)
            .map_err(dev_err("copy from the device"))?;
        self.sync()?;
        self.u_prev_valid = true;
        let blocks: Vec<ChangeSums> = out
            .chunks_exact(2)
            .map(|b| ChangeSums {
                diff: b[0],
                norm: b[1],
            })
            .collect();
        Ok(compare.then(|| ChangeSums::total(&blocks)))
    }

    fn accumulate_mean(&mut self) -> Result<(), ComputeError> {
        self.own()?;
        let n = self.slab.nodes();
        let fields = 4 + usize::from(self.thermal.is_some());
        if self.means.is_none() {
            let sums = self.stream.alloc_zeros::<f64>(fields * n).map_err(|e| {
                ComputeError::OutOfMemory(format!(
                    "time-average sums ({} MiB): {e}",
                    (fields * n * 8) >> 20
                ))
            })?;
            self.means = Some((sums, 0));
        }
        let h = self.thermal.as_ref().map_or(0, |th| th.ptrs[self.cur]);
        let Some((sums, samples)) = &mut self.means else {
            unreachable!("made above")
        };
        // SAFETY: `means_k` was compiled for this module's precision and temperature lattice; the
        // current lattices hold 19·n and 7·n values, the palette index n entries below the length
        // of its mask, and `sums` fields·n doubles, all owned by the module until it drops (which
        // synchronises the stream first).
        unsafe {
            launch::accumulate_means(
                &self.stream,
                &self.means_k,
                self.ptrs[self.cur],
                h,
                self.addr[0],
                self.addr[1],
                n as u64,
                raw(sums, &self.stream),
            )
        }?;
        *samples += 1;
        Ok(())
    }

    fn read_mean_sums(&mut self) -> Result<MeanSums, ComputeError> {
        let n = self.slab.nodes();
        let mut m = no_means(&self.slab, |p| self.host_solid[p], self.thermal.is_some());
        if let Some((sums, samples)) = &self.means {
            let host = self
                .stream
                .clone_dtoh(sums)
                .map_err(dev_err("copy from the device"))?;
            self.sync()?;
            let s = &mut m.sums;
            for (k, v) in [
                &mut s.rho,
                &mut s.ux,
                &mut s.uy,
                &mut s.uz,
                &mut s.temperature,
            ]
            .into_iter()
            .enumerate()
            {
                if !v.is_empty() {
                    v.copy_from_slice(&host[k * n..(k + 1) * n]);
                }
            }
            m.samples = *samples;
        }
        Ok(m)
    }

    fn write_mean_sums(&mut self, sums: &MeanSums) -> Result<(), ComputeError> {
        check_mean_shape(&self.slab, self.thermal.is_some(), sums)?;
        let s = &sums.sums;
        let host: Vec<f64> = [&s.rho, &s.ux, &s.uy, &s.uz, &s.temperature]
            .into_iter()
            .flat_map(|v| v.iter().copied())
            .collect();
        let dev = self.stream.clone_htod(&host).map_err(|e| {
            ComputeError::OutOfMemory(format!(
                "time-average sums ({} MiB): {e}",
                (host.len() * 8) >> 20
            ))
        })?;
        self.sync()?;
        self.means = Some((dev, sums.samples));
        Ok(())
    }

    fn read_populations(&mut self) -> Result<Vec<u8>, ComputeError> {
        self.own()?;
        let mut bytes = bytemuck::cast_slice(&self.download()?).to_vec();
        if let Some(th) = &self.thermal {
            let h = to_host(&self.stream, &th.lattices[self.cur])?;
            bytes.extend_from_slice(bytemuck::cast_slice(&h));
        }
        Ok(bytes)
    }

    fn read_nodes(&mut self, nodes: &[u32]) -> Result<Vec<f64>, ComputeError> {
        self.own()?;
        let n = self.slab.nodes();
        thelma_core::check_nodes(nodes, n)?;
        if nodes.is_empty() {
            return Ok(Vec::new());
        }
        let oom = |e: cudarc::driver::DriverError| {
            ComputeError::OutOfMemory(format!("nodes to read ({} nodes): {e}", nodes.len()))
        };
        let list = self.stream.clone_htod(nodes).map_err(oom)?;
        // The populations of lattice `a` (`q` per node, of `size` bytes each) at the listed nodes,
        // with gather kernel `f`, as bytes.
        let gather =
            |f: &CudaFunction, a: u64, q: usize, size: usize| -> Result<Vec<u8>, ComputeError> {
                let out = self
                    .stream
                    .alloc_zeros::<u8>(nodes.len() * q * size)
                    .map_err(oom)?;
                // SAFETY: `f` was loaded for this module's precision and gathers from a lattice of q
                // values per node of the slab, which `a` is (the flow's or the temperature's current
                // one); every listed index is below n (checked above), `out` has q values per node,
                // and both buffers outlive the launch (the copy below synchronises the stream).
                unsafe {
                    launch::gather_nodes(
                        &self.stream,
                        f,
                        a,
                        raw(&list, &self.stream),
                        nodes.len() as i32,
                        n as u64,
                        raw(&out, &self.stream),
                    )
                }?;
                self.stream
                    .clone_dtoh(&out)
                    .map_err(dev_err("cannot copy the nodes' populations back"))
            };
        let flow = gather(
            &self.gather_k,
            self.ptrs[self.cur],
            Q,
            std::mem::size_of::<S>(),
        )?;
        let flow: Vec<f64> = bytemuck::pod_collect_to_vec::<u8, S>(&flow)
            .into_iter()
            .map(|v| Real::to_f64(v.load()))
            .collect();
        let Some(th) = &self.thermal else {
            return Ok(flow);
        };
        let heat = gather(&th.gather, th.ptrs[self.cur], QT, std::mem::size_of::<S>())?;
        let inv = T::of(1.0 / th.setup.store_scale);
        let heat: Vec<f64> = bytemuck::pod_collect_to_vec::<u8, S>(&heat)
            .into_iter()
            .map(|v| Real::to_f64(load_thermal(v, inv)))
            .collect();
        Ok(flow
            .chunks_exact(Q)
            .zip(heat.chunks_exact(QT))
            .flat_map(|(g, h)| g.iter().chain(h))
            .copied()
            .collect())
    }

    fn pull_nodes(&mut self, t: u64, nodes: &[u32]) -> Result<Vec<f64>, ComputeError> {
        self.own()?;
        let n = self.slab.nodes();
        thelma_core::check_nodes(nodes, n)?;
        let (args, inlets) = self.step_args(t);
        if self.open {
            self.set_amplitudes(t)?;
        }
        let (pal_link, open, stream) = (self.addr[4], i32::from(self.open), self.stream.clone());
        let im = self.immersed_device()?;
        let view = StepView {
            args: &args,
            inlets: &inlets,
            pal_link,
            open,
        };
        let v: Vec<T> = im.pull(&stream, &view, nodes, Q)?;
        Ok(v.into_iter().map(Real::to_f64).collect())
    }

    fn set_node_forces(&mut self, nodes: &[u32], forces: &[[f64; 3]]) -> Result<(), ComputeError> {
        let n = self.slab.nodes();
        thelma_core::check_node_forces(nodes, forces, n)?;
        let stream = self.stream.clone();
        self.immersed_device()?.set_forces(&stream, nodes, forces)
    }

    fn hold_immersed(&mut self, bodies: &ImmersedBodies) -> Result<bool, ComputeError> {
        // The forcing needs every node a point reaches: the whole domain on this slab.
        if self.slab.z != (0..self.slab.domain.size[2]) {
            return Ok(false);
        }
        let (stream, n) = (self.stream.clone(), self.slab.nodes());
        self.immersed_device()?.hold(&stream, bodies, n)?;
        Ok(true)
    }

    fn immersed_point_forces(&mut self) -> Result<Option<PointForces>, ComputeError> {
        match &self.immersed {
            Some(im) => im.point_forces(&self.stream),
            None => Ok(None),
        }
    }

    fn write_populations(&mut self, bytes: &[u8], next_step: u64) -> Result<(), ComputeError> {
        let flow = self.lattices[self.cur].len() * std::mem::size_of::<S>();
        let thermal = self
            .thermal
            .as_ref()
            .map_or(0, |th| th.lattices[0].len() * std::mem::size_of::<S>());
        let want = flow + thermal;
        if bytes.len() != want {
            return Err(ComputeError::Invalid(format!(
                "populations of {} bytes, {want} expected",
                bytes.len()
            )));
        }
        self.upload(&bytemuck::pod_collect_to_vec::<u8, S>(&bytes[..flow]))?;
        if let Some(ip) = &mut self.in_place {
            ip.held = Held::Own;
        }
        if let Some(th) = &mut self.thermal {
            to_device(
                &self.stream,
                &bytemuck::pod_collect_to_vec::<u8, S::Bits>(&bytes[flow..]),
                &mut th.lattices[self.cur],
            )?;
        }
        self.u_prev_valid = false;
        self.publish(((next_step + 1) % 2) as usize)
    }
}

impl<T: Real + DeviceRepr, S: DeviceStored<Arith = T>> Drop for CudaModule<T, S> {
    fn drop(&mut self) {
        // Kernels may still store into interface memory that this module's handles keep alive.
        if let Some(side) = &self.side {
            let _ = side.stream.synchronize();
        }
        let _ = self.stream.synchronize();
    }
}
