//! The registry of CUDA kernels, their NVRTC compilation to a cubin for the device's architecture, and
//! every kernel launch of the CUDA module: the one place with `unsafe` launches.
//!
//! Kernel sources are embedded (`include_str!`) and compiled at run time after the generated prelude;
//! a cubin for the exact architecture (`sm_90` on H100/H200) avoids any PTX-version mismatch with the
//! driver. The launch wrappers are `unsafe fn`s: they take device addresses, and their `# Safety`
//! sections say what the caller (the module that owns the buffers) must guarantee. Compiled images are
//! kept per source and architecture for the life of the process, so that many modules of one run
//! (several slabs on one GPU, say) compile once, and on disk (`cache`), so that later runs do not
//! compile at all.

use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{
    CudaFunction, CudaModule, CudaStream, LaunchArgs, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{result as nvrtc, sys as nvrtc_sys, Ptx};
use thelma_core::physics::{Collision, OPERATORS};
use thelma_core::ComputeError;
use thelma_core::Precision;

use super::cache;
use super::prelude::{prelude, PreludeParams};

/// The D3Q19 kernels (collide-and-propagate, face export, watchdog, convergence measure, node
/// gather), compiled after the prelude.
pub const LBM_SOURCE: &str = include_str!("../../../kernels/lbm_d3q19.cu");
/// The temperature lattice's coupled step and face export, compiled after [`LBM_SOURCE`] when the
/// case has one.
pub const THERMAL_SOURCE: &str = include_str!("../../../kernels/thermal_d3q7.cu");
/// The immersed bodies' kernels, compiled after [`LBM_SOURCE`] when the case has some.
pub const IMMERSED_SOURCE: &str = include_str!("../../../kernels/immersed.cu");
/// The bandwidth probe of `thelma bench`, compiled alone.
pub const BANDWIDTH_SOURCE: &str = include_str!("../../../kernels/bandwidth.cu");

/// Every kernel of the project, by what it does. Names of precision-generic kernels get `_f32`/`_f64`;
/// the collide-and-propagate step is named after its collision operator, whose code the prelude
/// prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    CollidePropagate(Collision),
    /// The step of a case with open faces (the open-face links called where the palette marks them).
    CollideOpen(Collision),
    /// The step of a case with a temperature lattice: the flow's (with open-face links) and the
    /// temperature's, fused.
    CollideThermal(Collision),
    /// The two steps of in-place streaming: the pull step (the lattice held with each node's own
    /// populations) and the local step (held streamed), and the swap between the two arrangements.
    PullInPlace(Collision),
    LocalInPlace(Collision),
    SwapInPlace,
    ExportFaces,
    /// A grid subdomain's export across every side of its box.
    ExportSides,
    /// A grid subdomain's export of the temperature lattice's crossing populations.
    ExportThermalSides,
    /// The export of the temperature lattice's crossing populations.
    ExportThermal,
    /// The temperature lattice's populations of listed nodes (probes).
    GatherThermal,
    Health,
    /// The convergence measure: the velocity's change since the previous measure, summed.
    VelocityChange,
    /// The populations of listed nodes (forces and probes).
    GatherNodes,
    /// The time average's sample: the fields added to their running sums.
    AccumulateMeans,
    /// The live view's plane: the fields of one plane of nodes.
    Plane,
    /// The immersed bodies' points placed and their support nodes marked: a thread per point, or
    /// a group of lanes.
    IbPlace,
    IbPlaceGroup,
    /// The marked nodes listed in node order: counted per chunk of the bitmap, the counts summed
    /// into the chunks' first slots, the band and its map written.
    IbCount,
    IbScan,
    IbList,
    /// The band's pulled state before the forcing.
    IbBand,
    /// One iteration of the direct forcing: interpolate, correct, spread; a thread per point, or
    /// a group of lanes.
    IbIterate,
    IbIterateGroup,
    /// The band's force records after an iteration.
    IbFold,
    /// Listed nodes collided again under their own force after the step.
    IbCollide,
    /// The populations the step will pull into listed nodes (the coordinator's forcing).
    IbPull,
    /// The live view's plane at the listed nodes, under their own force.
    IbPlane,
    BandwidthCopy,
}

impl Kernel {
    /// Every kernel: one step per registered operator, and the others.
    pub fn all() -> Vec<Kernel> {
        OPERATORS
            .iter()
            .flat_map(|(name, _)| {
                let c = Collision::parse(name).expect("a registered name");
                [
                    Kernel::CollidePropagate(c),
                    Kernel::CollideOpen(c),
                    Kernel::CollideThermal(c),
                    Kernel::PullInPlace(c),
                    Kernel::LocalInPlace(c),
                ]
            })
            .chain([
                Kernel::SwapInPlace,
                Kernel::ExportFaces,
                Kernel::ExportSides,
                Kernel::ExportThermalSides,
                Kernel::ExportThermal,
                Kernel::GatherThermal,
                Kernel::Health,
                Kernel::VelocityChange,
                Kernel::GatherNodes,
                Kernel::AccumulateMeans,
                Kernel::Plane,
            ])
            .chain(Kernel::IMMERSED)
            .chain([Kernel::BandwidthCopy])
            .collect()
    }

    /// The symbol in the compiled image.
    pub fn name(self, precision: Precision) -> String {
        let suffix = precision.name();
        match self {
            Kernel::CollidePropagate(c) => format!("collide_propagate_d3q19_{c}_{suffix}"),
            Kernel::CollideOpen(c) => format!("collide_open_d3q19_{c}_{suffix}"),
            Kernel::CollideThermal(c) => format!("collide_thermal_d3q19_{c}_{suffix}"),
            Kernel::PullInPlace(c) => format!("collide_pull_in_place_d3q19_{c}_{suffix}"),
            Kernel::LocalInPlace(c) => format!("collide_local_in_place_d3q19_{c}_{suffix}"),
            Kernel::SwapInPlace => format!("swap_in_place_d3q19_{suffix}"),
            Kernel::ExportFaces => format!("export_faces_d3q19_{suffix}"),
            Kernel::ExportSides => format!("export_sides_d3q19_{suffix}"),
            Kernel::ExportThermalSides => format!("export_sides_d3q7_{suffix}"),
            Kernel::ExportThermal => format!("export_faces_d3q7_{suffix}"),
            Kernel::GatherThermal => format!("gather_nodes_d3q7_{suffix}"),
            Kernel::Health => format!("health_d3q19_{suffix}"),
            Kernel::VelocityChange => format!("velocity_change_d3q19_{suffix}"),
            Kernel::GatherNodes => format!("gather_nodes_d3q19_{suffix}"),
            Kernel::AccumulateMeans => format!("accumulate_means_d3q19_{suffix}"),
            Kernel::Plane => format!("plane_d3q19_{suffix}"),
            Kernel::IbPlace => format!("ib_place_{suffix}"),
            Kernel::IbPlaceGroup => format!("ib_place_group_{suffix}"),
            Kernel::IbCount => format!("ib_count_{suffix}"),
            Kernel::IbScan => format!("ib_scan_{suffix}"),
            Kernel::IbList => format!("ib_list_{suffix}"),
            Kernel::IbBand => format!("ib_band_{suffix}"),
            Kernel::IbIterate => format!("ib_iterate_{suffix}"),
            Kernel::IbIterateGroup => format!("ib_iterate_group_{suffix}"),
            Kernel::IbFold => format!("ib_fold_{suffix}"),
            Kernel::IbCollide => format!("ib_collide_{suffix}"),
            Kernel::IbPull => format!("ib_pull_{suffix}"),
            Kernel::IbPlane => format!("ib_plane_{suffix}"),
            Kernel::BandwidthCopy => "bandwidth_copy".to_string(),
        }
    }

    /// Whether the kernel lives in the LBM source (after the prelude) or the bandwidth source.
    pub fn in_lbm_source(self) -> bool {
        !matches!(self, Kernel::BandwidthCopy)
    }

    /// Whether the kernel is compiled only for a case with a temperature lattice.
    pub fn thermal(self) -> bool {
        matches!(
            self,
            Kernel::CollideThermal(_)
                | Kernel::ExportThermal
                | Kernel::ExportThermalSides
                | Kernel::GatherThermal
        )
    }

    /// Whether the kernel is compiled only for a grid's subdomain.
    pub fn grid(self) -> bool {
        matches!(self, Kernel::ExportSides | Kernel::ExportThermalSides)
    }

    /// Whether the kernel is compiled only for in-place streaming.
    pub fn in_place(self) -> bool {
        matches!(
            self,
            Kernel::PullInPlace(_) | Kernel::LocalInPlace(_) | Kernel::SwapInPlace
        )
    }

    /// Whether the kernel is compiled only for a case with immersed bodies.
    pub fn immersed(self) -> bool {
        matches!(
            self,
            Kernel::IbPlace
                | Kernel::IbPlaceGroup
                | Kernel::IbCount
                | Kernel::IbScan
                | Kernel::IbList
                | Kernel::IbBand
                | Kernel::IbIterate
                | Kernel::IbIterateGroup
                | Kernel::IbFold
                | Kernel::IbCollide
                | Kernel::IbPull
                | Kernel::IbPlane
        )
    }

    /// Every immersed-body kernel, in the order [`crate::cuda::CudaModule`] loads them.
    pub const IMMERSED: [Kernel; 12] = [
        Kernel::IbPlace,
        Kernel::IbPlaceGroup,
        Kernel::IbCount,
        Kernel::IbScan,
        Kernel::IbList,
        Kernel::IbBand,
        Kernel::IbIterate,
        Kernel::IbIterateGroup,
        Kernel::IbFold,
        Kernel::IbCollide,
        Kernel::IbPull,
        Kernel::IbPlane,
    ];
}

/// The complete LBM source for `p`: prelude, then the kernels (the temperature lattice's too when
/// `p` has one).
pub fn lbm_source(p: &PreludeParams) -> String {
    let mut s = format!(
        "{}\n#line 1 \"lbm_d3q19.cu\"\n{}",
        prelude(p),
        kernel_file("lbm_d3q19.cu", LBM_SOURCE)
    );
    if p.thermal.is_some() {
        s.push_str("\n#line 1 \"thermal_d3q7.cu\"\n");
        s.push_str(&kernel_file("thermal_d3q7.cu", THERMAL_SOURCE));
    }
    if p.immersed {
        s.push_str("\n#line 1 \"immersed.cu\"\n");
        s.push_str(&kernel_file("immersed.cu", IMMERSED_SOURCE));
    }
    s
}

/// The folder `THELMA_KERNELS` names, from which kernel files replace the built-in ones (said in
/// each CUDA module's description).
pub fn kernels_from() -> Option<String> {
    std::env::var_os("THELMA_KERNELS").map(|d| d.to_string_lossy().into_owned())
}

/// Kernel file `name`: the copy built in, or, for kernel development, the file of that name in the
/// folder `THELMA_KERNELS` names (a file it lacks keeps the built-in copy). A changed kernel is then
/// measured on a GPU host with the same binary, no rebuild; the disk cache keys on the source.
fn kernel_file(name: &str, built_in: &'static str) -> std::borrow::Cow<'static, str> {
    std::env::var_os("THELMA_KERNELS")
        .and_then(|dir| std::fs::read_to_string(std::path::Path::new(&dir).join(name)).ok())
        .map_or(
            std::borrow::Cow::Borrowed(built_in),
            std::borrow::Cow::Owned,
        )
}

/// Whether the NVRTC library can be loaded (without it, compiling would panic inside cudarc).
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to open the shared library.
    unsafe { nvrtc_sys::is_culib_present() }
}

/// Compiled images by (source, architecture).
type CubinCache = Mutex<HashMap<(String, String), Arc<Vec<u8>>>>;

fn cache() -> &'static CubinCache {
    static CACHE: OnceLock<CubinCache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// NVRTC's options for `arch`: part of the disk cache's key, so that changing them recompiles.
fn options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        "--extra-device-vectorization".to_string(),
    ]
}

/// The version (major, minor) of the NVRTC library loaded, or `None` where it cannot tell.
fn nvrtc_version() -> Option<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two valid out pointers; the library is loaded (checked by the caller).
    let r = unsafe { nvrtc_sys::nvrtcVersion(&mut major, &mut minor) };
    (r == nvrtc_sys::nvrtcResult::NVRTC_SUCCESS).then_some((major, minor))
}

/// A cubin of `source` for `arch`, a real architecture (`sm_90`; a virtual one would store PTX
/// under the cubin's key): from this process's images, else from the disk cache
/// ([`cache::Store::from_env`]), else compiled by NVRTC and saved there. A disk cache that cannot
/// be used only means compiling (with one warning per process); a compile failure carries NVRTC's
/// log.
pub fn compile_cubin(source: &str, name: &str, arch: &str) -> Result<Arc<Vec<u8>>, ComputeError> {
    if !nvrtc_present() {
        return Err(ComputeError::Compile(
            "the NVRTC library (libnvrtc.so) cannot be loaded".into(),
        ));
    }
    let key = (source.to_string(), arch.to_string());
    if let Some(c) = cache().lock().map_err(|_| poisoned())?.get(&key) {
        return Ok(c.clone());
    }
    let options = options(arch);
    // Without NVRTC's version the key would not tell compilers apart: compile and keep nothing.
    let store = nvrtc_version().and_then(|v| {
        cache::Store::from_env().map(|s| (s, cache::Key::new(source, arch, v, &options)))
    });
    let stored = store.as_ref().and_then(|(s, k)| {
        s.load(k).unwrap_or_else(|e| {
            cache::warn_once(s, "read", &e);
            None
        })
    });
    let cubin = match stored {
        Some(c) => Arc::new(c),
        None => {
            let c = Arc::new(compile_with(source, name, arch, &options)?);
            if let Some((s, k)) = &store {
                if let Err(e) = s.save(k, &c) {
                    cache::warn_once(s, "written", &e);
                }
            }
            c
        }
    };
    cache()
        .lock()
        .map_err(|_| poisoned())?
        .insert(key, cubin.clone());
    Ok(cubin)
}

/// Compiles `source` with NVRTC for `arch`, caching nothing (the compile check's way: it must run
/// the compiler): a cubin for a real architecture (`sm_90`), PTX for a virtual one (`compute_90`,
/// which stops before the assembler, ptxas, about half of a compile and three quarters of the
/// immersed bodies'; PTX ends in NVRTC's terminating NUL). A failure carries NVRTC's log.
pub fn compile(source: &str, name: &str, arch: &str) -> Result<Vec<u8>, ComputeError> {
    if !nvrtc_present() {
        return Err(ComputeError::Compile(
            "the NVRTC library (libnvrtc.so) cannot be loaded".into(),
        ));
    }
    compile_with(source, name, arch, &options(arch))
}

/// Runs NVRTC on `source` with `options`, made for `arch`: the cubin, or the PTX for a virtual
/// architecture (`compute_*`).
fn compile_with(
    source: &str,
    name: &str,
    arch: &str,
    options: &[String],
) -> Result<Vec<u8>, ComputeError> {
    let src =
        CString::new(source).map_err(|_| ComputeError::Compile("NUL in kernel source".into()))?;
    let cname =
        CString::new(name).map_err(|_| ComputeError::Compile("NUL in kernel name".into()))?;
    let prog = nvrtc::create_program(&src, Some(&cname))
        .map_err(|e| ComputeError::Compile(format!("{name}: cannot create the program: {e:?}")))?;
    let (what, get_size, get): (_, unsafe fn(_, _) -> _, unsafe fn(_, _) -> _) =
        if arch.starts_with("compute_") {
            ("PTX", nvrtc_sys::nvrtcGetPTXSize, nvrtc_sys::nvrtcGetPTX)
        } else {
            (
                "cubin",
                nvrtc_sys::nvrtcGetCUBINSize,
                nvrtc_sys::nvrtcGetCUBIN,
            )
        };
    // SAFETY: `prog` was created above and is destroyed exactly once below; the log and the image are
    // copied into buffers of the sizes NVRTC reports.
    unsafe {
        let compiled = nvrtc::compile_program(prog, options);
        let result = match compiled {
            Err(e) => {
                let log = nvrtc::get_program_log(prog)
                    .map(|l| CStr::from_ptr(l.as_ptr()).to_string_lossy().into_owned())
                    .unwrap_or_default();
                Err(ComputeError::Compile(format!(
                    "{name} for {arch}: {e:?}\n{log}"
                )))
            }
            Ok(()) => {
                let mut size = 0usize;
                let r = get_size(prog, &mut size);
                if r != nvrtc_sys::nvrtcResult::NVRTC_SUCCESS || size == 0 {
                    Err(ComputeError::Compile(format!("{name}: no {what} ({r:?})")))
                } else {
                    let mut buf = vec![0u8; size];
                    let r = get(prog, buf.as_mut_ptr() as *mut c_char);
                    if r != nvrtc_sys::nvrtcResult::NVRTC_SUCCESS {
                        Err(ComputeError::Compile(format!(
                            "{name}: cannot read the {what} ({r:?})"
                        )))
                    } else {
                        Ok(buf)
                    }
                }
            }
        };
        let _ = nvrtc::destroy_program(prog);
        result
    }
}

fn poisoned() -> ComputeError {
    ComputeError::Compile("the kernel cache is poisoned by an earlier panic".into())
}

/// `sm_XY` for compute capability (X, Y).
pub fn arch_of(cc: (i32, i32)) -> String {
    format!("sm_{}{}", cc.0, cc.1)
}

/// Loads a compiled image into the context of `stream` and looks up `kernels` in it.
pub fn load(
    stream: &Arc<CudaStream>,
    cubin: &[u8],
    names: &[String],
) -> Result<(Arc<CudaModule>, Vec<CudaFunction>), ComputeError> {
    let module = stream
        .context()
        .load_module(Ptx::from_binary(cubin.to_vec()))
        .map_err(|e| ComputeError::Device(format!("cannot load the kernels: {e}")))?;
    let funcs = names
        .iter()
        .map(|n| {
            module.load_function(n).map_err(|e| {
                ComputeError::Device(format!("kernel {n} missing from the image: {e}"))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((module, funcs))
}

fn launch_err(what: &str) -> impl FnOnce(cudarc::driver::DriverError) -> ComputeError + '_ {
    move |e| ComputeError::Device(format!("launch of {what} failed: {e}"))
}

/// Device addresses and sizes of one collide-and-propagate launch. Null (0) interface addresses mean
/// "no neighbour on that side".
#[derive(Clone, Copy, Debug)]
pub struct StepArgs {
    pub a: u64,
    pub b: u64,
    pub index: u64,
    pub pal_mask: u64,
    pub pal_term: u64,
    pub below_in: u64,
    pub above_in: u64,
    pub above_out: u64,
    pub below_out: u64,
    pub size: [i32; 3],
    /// Bit 0: x periodic; bit 1: y periodic.
    pub periodic: i32,
    pub block_x: u32,
    /// The first plane slot the grid runs (`StepPart::slots`), passed to kernels compiled with
    /// `THELMA_SLOT_OFFSET`; `None` for the plain kernels, whose grid starts at slot 0.
    pub slot0: Option<i32>,
    /// The plane slots the grid runs (its z).
    pub slots: u32,
    /// In a grid's subdomain (kernels compiled with `THELMA_GRID`), the step's parity t % 2: the
    /// buffers of its channel tables it writes (it reads the others); `None` for slabs.
    pub parity: Option<i32>,
    /// For the flow's steps compiled with `THELMA_IMMERSED` (a case with immersed bodies), the
    /// band they collide under its forces (`THELMA_IB_STEP_PARAM`), `Some` for every module
    /// compiled so (only the flow's steps push it: a temperature lattice's step ignores it, and
    /// in-place and grid modules take no immersed bodies); `None` for the others.
    pub ib: Option<IbStep>,
}

/// The immersed bodies' band as the flow's step takes it (`THELMA_IB_STEP_PARAM` in
/// kernels/lbm_d3q19.cu): a bit a slab node, the band map and the band's forces (device
/// addresses; `marks` 0 when no body is held), and the uniform force.
#[derive(Clone, Copy, Debug)]
pub struct IbStep {
    pub marks: u64,
    pub slot: u64,
    pub force: u64,
    pub uniform: [f64; 3],
}

/// Pushes `THELMA_IB_STEP_PARAM` where the step takes it.
fn ib_step_args<'a>(b: &mut LaunchArgs<'a>, s: &'a StepArgs) {
    if let Some(ib) = &s.ib {
        b.arg(&ib.marks)
            .arg(&ib.slot)
            .arg(&ib.force)
            .arg(&ib.uniform[0])
            .arg(&ib.uniform[1])
            .arg(&ib.uniform[2]);
    }
}

/// Pushes THELMA_COLLIDE_ARGS (kernels/lbm_d3q19.cu): nine device addresses, the size, the
/// periodic axes, the first plane slot for kernels that take it and a grid's parity; or, `in_place`,
/// THELMA_IN_PLACE_ARGS: the same without lattice b.
fn step_args<'a>(b: &mut LaunchArgs<'a>, s: &'a StepArgs, in_place: bool) {
    b.arg(&s.a);
    if !in_place {
        b.arg(&s.b);
    }
    b.arg(&s.index)
        .arg(&s.pal_mask)
        .arg(&s.pal_term)
        .arg(&s.below_in)
        .arg(&s.above_in)
        .arg(&s.above_out)
        .arg(&s.below_out)
        .arg(&s.size[0])
        .arg(&s.size[1])
        .arg(&s.size[2])
        .arg(&s.periodic);
    if let Some(k) = &s.slot0 {
        b.arg(k);
    }
    if let Some(p) = &s.parity {
        b.arg(p);
    }
}

/// The grid of every step kernel: blocks of `block_x` threads along x, one per (x block, y, plane
/// slot).
fn step_grid(s: &StepArgs) -> LaunchConfig {
    let [nx, ny, _] = s.size;
    LaunchConfig {
        grid_dim: ((nx as u32).div_ceil(s.block_x), ny as u32, s.slots),
        block_dim: (s.block_x, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Enqueues one collide-and-propagate step on `stream`.
///
/// # Safety
/// `f` is a collide-and-propagate kernel of the lattices' precision; `a` and `b` are device
/// lattices of 19·nx·ny·nz values of that precision; `index` holds nx·ny·nz palette indices, each
/// below the length of the palettes `pal_mask` and `pal_term`; every interface address is null or
/// points at a plane of 5·nx·ny values in mapped, page-locked memory. All of it stays allocated until
/// the stream has finished the launch.
pub unsafe fn collide_propagate(
    stream: &CudaStream,
    f: &CudaFunction,
    s: &StepArgs,
) -> Result<(), ComputeError> {
    let cfg = step_grid(s);
    let mut b = stream.launch_builder(f);
    step_args(&mut b, s, false);
    ib_step_args(&mut b, s);
    // SAFETY: the argument list matches THELMA_COLLIDE_ARGS in kernels/lbm_d3q19.cu (nine device
    // addresses, four ints, and the first slot where the kernel takes it), then the band where the
    // kernel was compiled with immersed bodies; the buffers are as the caller promises. The grid
    // covers each node of its slots once; threads past nx return.
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(launch_err("collide_propagate"))
}

/// Enqueues one step of in-place streaming: `f` the pull or the local step, on lattice `s.a`
/// alone ([`collide_propagate`]'s grid; `s.b` is not passed).
///
/// # Safety
/// As for [`collide_propagate`], with `f` an in-place step kernel of the lattice's precision and
/// `s.a` the one lattice.
pub unsafe fn collide_in_place(
    stream: &CudaStream,
    f: &CudaFunction,
    s: &StepArgs,
) -> Result<(), ComputeError> {
    let cfg = step_grid(s);
    let mut b = stream.launch_builder(f);
    step_args(&mut b, s, true);
    // SAFETY: the argument list matches THELMA_IN_PLACE_ARGS in kernels/lbm_d3q19.cu (eight device
    // addresses, four ints, and the first slot where the kernel takes it); the buffers are as the
    // caller promises. The grid covers each node of its slots once; threads past nx return.
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(launch_err("collide_in_place"))
}

/// Enqueues the swap between the two arrangements of an in-place lattice `s.a`.
///
/// # Safety
/// As for [`collide_in_place`], with `f` the swap kernel (which reads no interface).
pub unsafe fn swap_in_place(
    stream: &CudaStream,
    f: &CudaFunction,
    s: &StepArgs,
) -> Result<(), ComputeError> {
    let nodes = s.size.iter().map(|&v| v as u64).product::<u64>();
    let cfg = reduction_grid(nodes.div_ceil(256).clamp(1, 65_535) as u32);
    let mut b = stream.launch_builder(f);
    b.arg(&s.a)
        .arg(&s.index)
        .arg(&s.pal_mask)
        .arg(&s.size[0])
        .arg(&s.size[1])
        .arg(&s.size[2])
        .arg(&s.periodic);
    // SAFETY: matches swap_in_place_d3q19 (three device addresses, four ints); the threads stride
    // over the nodes, each pair of slots swapped by one of them.
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(launch_err("swap_in_place"))
}

/// What a collide-open step adds for velocity inlets' profiles: the slab's first plane and the
/// domain's planes.
#[derive(Clone, Copy, Debug)]
pub struct InletArgs {
    pub z0: i32,
    pub nz_domain: i32,
}

/// Enqueues one step of a case with open faces: [`collide_propagate`]'s grid, the open-face links
/// applied where the palette marks them.
///
/// # Safety
/// As for [`collide_propagate`], with `f` a collide-open kernel of the same precision and `pal_link`
/// Q link words per palette entry, allocated until the stream has finished the launch.
pub unsafe fn collide_open(
    stream: &CudaStream,
    f: &CudaFunction,
    s: &StepArgs,
    pal_link: u64,
    inlets: &InletArgs,
) -> Result<(), ComputeError> {
    let cfg = step_grid(s);
    let mut b = stream.launch_builder(f);
    step_args(&mut b, s, false);
    b.arg(&pal_link).arg(&inlets.z0).arg(&inlets.nz_domain);
    ib_step_args(&mut b, s);
    // SAFETY: the argument list matches THELMA_COLLIDE_ARGS followed by the link words and two
    // ints, then the band where the kernel was compiled with immersed bodies; the buffers are as
    // the caller promises. The grid covers each node of its slots once; threads past nx return.
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(launch_err("collide_open"))
}

/// Enqueues one step of a case with a temperature lattice: [`collide_open`]'s grid and arguments,
/// then the current and the written thermal lattices `h`.
///
/// # Safety
/// As for [`collide_open`], with `f` a collide-thermal kernel of the same precision, `h` two device
/// lattices of 7·nx·ny·nz values of that precision, and every interface address null or pointing at
/// a buffer of 6·nx·ny values (the flow's five crossing planes, then the thermal one), all allocated
/// until the stream has finished the launch.
pub unsafe fn collide_thermal(
    stream: &CudaStream,
    f: &CudaFunction,
    s: &StepArgs,
    pal_link: u64,
    inlets: &InletArgs,
    h: [u64; 2],
) -> Result<(), ComputeError> {
    let cfg = step_grid(s);
    let mut b = stream.launch_builder(f);
    step_args(&mut b, s, false);
    b.arg(&pal_link)
        .arg(&inlets.z0)
        .arg(&inlets.nz_domain)
        .arg(&h[0])
        .arg(&h[1]);
    // SAFETY: the argument list matches THELMA_COLLIDE_ARGS followed by the link words, two ints
    // and the two thermal lattices (kernels/thermal_d3q7.cu); the buffers are as the caller
    // promises. The grid covers each node of its slots once; threads past nx return.
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(launch_err("collide_thermal"))
}

/// Enqueues the export of lattice `a`'s crossing populations into `up_out`/`down_out` (null: skipped):
/// the flow's (`export_faces_d3q19`) or the temperature lattice's (`export_faces_d3q7`, into the
/// plane after the flow's five).
///
/// # Safety
/// `f` is an export kernel of the lattice's precision; `a` is a device lattice of its populations
/// (19 or 7 per node of nx·ny·nz) and each non-null output a channel buffer this context reaches with
/// the planes the kernel writes (5·nx·ny values, 6·nx·ny for the thermal export), all allocated
/// until the stream has finished the launch.
pub unsafe fn export_faces(
    stream: &CudaStream,
    f: &CudaFunction,
    a: u64,
    up_out: u64,
    down_out: u64,
    size: [i32; 3],
) -> Result<(), ComputeError> {
    let [nx, ny, nz] = size;
    let plane = (nx as u64) * (ny as u64);
    let cfg = LaunchConfig {
        grid_dim: (plane.div_ceil(256).clamp(1, 65_535) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut b = stream.launch_builder(f);
    b.arg(&a)
        .arg(&up_out)
        .arg(&down_out)
        .arg(&nx)
        .arg(&ny)
        .arg(&nz);
    // SAFETY: matches the parameters of export_faces_d3q19 and export_faces_d3q7 (a lattice, two
    // buffers, three ints); the buffers are as the caller promises.
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(launch_err("export_faces"))
}

/// Enqueues the export of a grid subdomain's boundary layers from lattice `a` into buffers
/// `parity` of the channels its kernels' tables name.
///
/// # Safety
/// `f` is export_sides_d3q19 (or export_sides_d3q7) of the lattice's precision, from an image
/// whose channel tables hold live channels (or 0); `a` is a lattice of 19 (or 7) values per node
/// of a box of `size`.
pub unsafe fn export_sides(
    stream: &CudaStream,
    f: &CudaFunction,
    a: u64,
    size: [i32; 3],
    parity: i32,
) -> Result<(), ComputeError> {
    let [nx, ny, nz] = size;
    let nodes = size.iter().map(|&v| v as u64).product::<u64>();
    let cfg = reduction_grid(nodes.div_ceil(256).clamp(1, 65_535) as u32);
    let mut b = stream.launch_builder(f);
    b.arg(&a).arg(&nx).arg(&ny).arg(&nz).arg(&parity);
    // SAFETY: matches export_sides_d3q19 and _d3q7 (a lattice, four ints); the threads stride over the
    // nodes; the buffers are as the caller promises.
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(launch_err("export_sides"))
}

/// The grid of a reduction over the nodes: `blocks` blocks of 256 threads striding over them (the
/// kernels' shared arrays hold 256 values).
fn reduction_grid(blocks: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Blocks of the watchdog's reduction (each writes three doubles).
pub const HEALTH_BLOCKS: u32 = 1024;

/// Enqueues the watchdog's reduction of lattice `a` into `out` (3·[`HEALTH_BLOCKS`] doubles).
///
/// # Safety
/// `f` is a health kernel of the lattice's precision; `a` holds 19·`nodes` values, `index` `nodes`
/// entries below the length of the palette `pal_mask`, and `out` 3·[`HEALTH_BLOCKS`] doubles, all on
/// the device and allocated until the stream has finished the launch.
pub unsafe fn health(
    stream: &CudaStream,
    f: &CudaFunction,
    a: u64,
    index: u64,
    pal_mask: u64,
    nodes: u64,
    out: u64,
) -> Result<(), ComputeError> {
    let cfg = reduction_grid(HEALTH_BLOCKS);
    let mut b = stream.launch_builder(f);
    b.arg(&a).arg(&index).arg(&pal_mask).arg(&nodes).arg(&out);
    // SAFETY: matches health_d3q19's parameters; the buffers are as the caller promises.
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(launch_err("health"))
}

/// Blocks of the convergence measure's reduction (each writes two doubles).
pub const CHANGE_BLOCKS: u32 = 1024;

/// Enqueues the convergence measure of lattice `a` into `out` (2·[`CHANGE_BLOCKS`] doubles): the
/// fluid nodes' velocity compared with `u_prev` (when `compare`), then stored there.
///
/// # Safety
/// `f` is a velocity-change kernel of the lattice's precision; `a` holds 19·`nodes` values, `index`
/// `nodes` entries below the length of the palette `pal_mask`, `u_prev` 3·`nodes` values of the
/// lattice's precision and `out` 2·[`CHANGE_BLOCKS`] doubles, all on the device and allocated until
/// the stream has finished the launch.
#[allow(clippy::too_many_arguments)]
pub unsafe fn velocity_change(
    stream: &CudaStream,
    f: &CudaFunction,
    a: u64,
    index: u64,
    pal_mask: u64,
    nodes: u64,
    u_prev: u64,
    compare: bool,
    out: u64,
) -> Result<(), ComputeError> {
    let cfg = reduction_grid(CHANGE_BLOCKS);
    let compare = i32::from(compare);
    let mut b = stream.launch_builder(f);
    b.arg(&a)
        .arg(&index)
        .arg(&pal_mask)
        .arg(&nodes)
        .arg(&u_prev)
        .arg(&compare)
        .arg(&out);
    // SAFETY: matches velocity_change_d3q19's parameters (five device addresses around an unsigned
    // 64-bit count and an int flag); the buffers are as the caller promises. Every thread strides over
    // the nodes, so each node's u_prev is written by one thread only.
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(launch_err("velocity_change"))
}

/// Enqueues the time average's sample of lattice `a` (and the temperature lattice `h`, or 0) into
/// `sums`.
///
/// # Safety
/// `f` is an accumulate-means kernel of the lattices' precision, compiled with a temperature
/// lattice exactly when `h` is not 0; `a` holds 19·`nodes` values, `h` 7·`nodes`, `index` `nodes`
/// entries below the length of the palette `pal_mask`, and `sums` 4·`nodes` doubles (5·`nodes`
/// with `h`), all on the device and allocated until the stream has finished the launch.
#[allow(clippy::too_many_arguments)]
pub unsafe fn accumulate_means(
    stream: &CudaStream,
    f: &CudaFunction,
    a: u64,
    h: u64,
    index: u64,
    pal_mask: u64,
    nodes: u64,
    sums: u64,
) -> Result<(), ComputeError> {
    let cfg = reduction_grid(CHANGE_BLOCKS);
    let mut b = stream.launch_builder(f);
    b.arg(&a)
        .arg(&h)
        .arg(&index)
        .arg(&pal_mask)
        .arg(&nodes)
        .arg(&sums);
    // SAFETY: matches accumulate_means_d3q19's parameters (four device addresses, an unsigned
    // 64-bit count, a device address); the buffers are as the caller promises. Every thread
    // strides over the nodes, so each node's sums are written by one thread only.
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(launch_err("accumulate_means"))
}

/// Enqueues the live view's plane `axis = at` (slab-local) of a slab of `size` nodes into `out`:
/// five floats per node of the plane (ρ, u_x, u_y, u_z, θ; `plane_d3q19`).
///
/// # Safety
/// `f` is `plane_d3q19` of the lattice's precision; `a` holds 19 values per node of the slab, `h`
/// (with a temperature lattice; 0 otherwise) 7, `index` one entry per node below the length of
/// `pal_mask`, and `out` room for 5 floats per node of the plane, all on the device and allocated
/// until the stream has finished the launch; `at` is inside the slab along `axis`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn plane(
    stream: &CudaStream,
    f: &CudaFunction,
    a: u64,
    h: u64,
    index: u64,
    pal_mask: u64,
    size: [usize; 3],
    (axis, at): (usize, usize),
    out: u64,
) -> Result<(), ComputeError> {
    let [sa, sb] = thelma_core::plane_axes(axis).map(|k| size[k]);
    let count = (sa * sb) as u32;
    let cfg = LaunchConfig {
        grid_dim: (count.div_ceil(256).max(1), 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let [nx, ny, nz] = size.map(|v| v as i32);
    let (axis, at) = (axis as i32, at as i32);
    let mut b = stream.launch_builder(f);
    b.arg(&a)
        .arg(&h)
        .arg(&index)
        .arg(&pal_mask)
        .arg(&nx)
        .arg(&ny)
        .arg(&nz)
        .arg(&axis)
        .arg(&at)
        .arg(&out);
    // SAFETY: matches plane_d3q19's parameters (four device addresses, five ints, a device
    // address); the buffers are as the caller promises, and each thread writes its own node.
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(launch_err("plane"))
}

/// Enqueues the gather of the populations of `count` listed nodes of lattice `a` into `out`: the
/// flow's (`gather_nodes_d3q19`, Q = 19) or the temperature lattice's (`gather_nodes_d3q7`, Q = 7).
///
/// # Safety
/// `f` is a gather kernel of the lattice's precision; `a` holds Q·`n` values, `nodes` `count`
/// indices below `n` and `out` room for Q·`count` values, all on the device and allocated until the
/// stream has finished the launch.
pub unsafe fn gather_nodes(
    stream: &CudaStream,
    f: &CudaFunction,
    a: u64,
    nodes: u64,
    count: i32,
    n: u64,
    out: u64,
) -> Result<(), ComputeError> {
    let cfg = LaunchConfig {
        grid_dim: ((count.max(1) as u32).div_ceil(128), 1, 1),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut b = stream.launch_builder(f);
    b.arg(&a).arg(&nodes).arg(&count).arg(&n).arg(&out);
    // SAFETY: matches gather_nodes_d3q19's parameters; the buffers are as the caller promises.
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(launch_err("gather_nodes"))
}

/// Enqueues a copy of `n16` 16-byte vectors from `src` to `dst`.
///
/// # Safety
/// `f` is the bandwidth kernel; `src` and `dst` are device buffers of at least `n16` 16-byte
/// vectors, allocated until the stream has finished the launch.
pub unsafe fn bandwidth_copy(
    stream: &CudaStream,
    f: &CudaFunction,
    src: u64,
    dst: u64,
    n16: u64,
    blocks: u32,
) -> Result<(), ComputeError> {
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut b = stream.launch_builder(f);
    b.arg(&src).arg(&dst).arg(&n16);
    // SAFETY: matches bandwidth_copy's parameters; the buffers are as the caller promises.
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(launch_err("bandwidth_copy"))
}
