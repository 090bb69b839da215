//! CUDA mode of the benchmark: one thread and one primary context per device, the exchange kernel
//! of `kernels/comm_bench.cu` compiled by NVRTC to a cubin for each device's compute capability,
//! and the three transports. Every `unsafe` call of the benchmark (driver, NVRTC, kernel launches)
//! lives in this file, each with its `SAFETY:` note.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex};

use cudarc::driver::{result, sys, CudaContext, CudaFunction, CudaStream, DriverError};
use cudarc::nvrtc;
use thelma_core::StepBarrier;
use thelma_core::{Channel, ComputeError, Placement};

use crate::cuda::{can_access_peer, channel};

use super::graph::{links, sides, Side};
use super::protocol::{buffer_offset, read_parity, write_parity, Shape};
use super::{run_workers, BenchConfig, CommError, Endpoint, Transport, WorkerReport};

const SOURCE: &str = include_str!("../../../kernels/comm_bench.cu");
const KERNEL: &str = "comm_exchange";

/// Fails (instead of cudarc's panic at first use) when the driver or NVRTC library is missing.
fn libraries_present() -> Result<(), CommError> {
    // SAFETY: both probes only try to load the shared library; they call nothing in it.
    let driver = unsafe { sys::is_culib_present() };
    // SAFETY: as above.
    let compiler = unsafe { nvrtc::sys::is_culib_present() };
    let missing = match (driver, compiler) {
        (true, true) => return Ok(()),
        (false, _) => "the CUDA driver (libcuda) is not installed",
        (true, false) => "NVRTC (libnvrtc) is not installed",
    };
    Err(CommError::NoCuda(format!("{missing}; use --backend cpu")))
}

/// Number of CUDA devices.
pub(super) fn device_count() -> Result<usize, CommError> {
    libraries_present()?;
    CudaContext::device_count()
        .map(|n| n.max(0) as usize)
        .map_err(|e| CommError::Device {
            device: 0,
            message: format!("cannot count CUDA devices: {e}"),
        })
}

fn driver(device: usize, what: &'static str) -> impl Fn(DriverError) -> CommError {
    move |e| CommError::Device {
        device,
        message: format!("{what}: {e}"),
    }
}

/// Cubins already compiled, by compute capability: every configuration of a sweep reuses them.
static CUBINS: Mutex<Option<CubinCache>> = Mutex::new(None);

/// Cubin bytes by compute capability `(major, minor)`.
type CubinCache = HashMap<(i32, i32), Vec<u8>>;

/// The exchange kernel as a cubin for compute capability `cc` (a cubin avoids any PTX-version
/// mismatch between NVRTC and the driver).
fn cubin(cc: (i32, i32)) -> Result<Vec<u8>, String> {
    let mut cache = CUBINS.lock().map_err(|_| "the kernel cache is poisoned")?;
    let cache = cache.get_or_insert_with(HashMap::new);
    if let Some(c) = cache.get(&cc) {
        return Ok(c.clone());
    }
    let src = CString::new(SOURCE).map_err(|e| e.to_string())?;
    let prog =
        nvrtc::result::create_program(&src, Some(c"comm_bench.cu")).map_err(|e| e.to_string())?;
    let opts = [format!("--gpu-architecture=sm_{}{}", cc.0, cc.1)];
    // SAFETY: `prog` was just created and is destroyed exactly once, below.
    let compiled = unsafe { nvrtc::result::compile_program(prog, &opts) };
    let out = match compiled {
        Err(e) => {
            // SAFETY: `prog` is alive; the log is a NUL-terminated string NVRTC owns a copy of.
            let log = unsafe { nvrtc::result::get_program_log(prog) }
                .map(|l| {
                    let bytes: Vec<u8> = l
                        .iter()
                        .take_while(|&&c| c != 0)
                        .map(|&c| c as u8)
                        .collect();
                    String::from_utf8_lossy(&bytes).into_owned()
                })
                .unwrap_or_default();
            Err(format!("NVRTC failed ({e}): {log}"))
        }
        Ok(()) => {
            let mut size = 0usize;
            // SAFETY: `prog` compiled successfully; `size` is a valid out-pointer.
            let r = unsafe { nvrtc::sys::nvrtcGetCUBINSize(prog, &mut size) }.result();
            let mut bin = vec![0u8; size];
            // SAFETY: `bin` holds exactly the `size` bytes NVRTC reported for the cubin.
            let r = r.and_then(|()| {
                unsafe { nvrtc::sys::nvrtcGetCUBIN(prog, bin.as_mut_ptr().cast()) }.result()
            });
            r.map(|()| bin).map_err(|e| format!("NVRTC cubin: {e}"))
        }
    };
    // SAFETY: `prog` is destroyed once and not used afterwards.
    let _ = unsafe { nvrtc::result::destroy_program(prog) };
    let bin = out?;
    cache.insert(cc, bin.clone());
    Ok(bin)
}

/// Compiles the exchange kernel for compute capability `major.minor` without any device (NVRTC
/// only) and returns the cubin's size: the kernel compile check of CI.
pub(super) fn compile_check(major: i32, minor: i32) -> Result<usize, CommError> {
    // SAFETY: only probes whether the shared library loads.
    if !unsafe { nvrtc::sys::is_culib_present() } {
        return Err(CommError::NoCuda(
            "NVRTC (libnvrtc) is not installed".into(),
        ));
    }
    cubin((major, minor))
        .map(|c| c.len())
        .map_err(|message| CommError::Device { device: 0, message })
}

/// The PCI bus id of `device` as hwloc spells it (`0000:19:00.0`; CUDA gives an 8-digit domain).
fn pci_bus_id(device: usize) -> Result<String, DriverError> {
    result::init()?;
    let dev = result::device::get(device as i32)?;
    let mut buf = [0 as std::ffi::c_char; 32];
    // SAFETY: `buf` has room for the 32 bytes passed as its length; the driver NUL-terminates.
    unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, dev) }.result()?;
    // SAFETY: the driver wrote a NUL-terminated string into `buf`.
    let id = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .to_ascii_lowercase();
    Ok(normalize_bus_id(&id))
}

/// `00000000:19:00.0` → `0000:19:00.0`; anything unexpected is passed through.
fn normalize_bus_id(id: &str) -> String {
    match id.split_once(':') {
        Some((domain, rest)) => match u32::from_str_radix(domain, 16) {
            Ok(d) => format!("{d:04x}:{rest}"),
            Err(_) => id.to_string(),
        },
        None => id.to_string(),
    }
}

/// Page-locked, device-mapped, portable host memory for every link (zero-copy and copy-engine
/// transports): allocated and freed on the coordinating thread, under the first device's context,
/// and shared with the workers only as addresses.
struct PinnedLinks {
    ctx: Arc<CudaContext>,
    bases: Vec<*mut c_void>,
}

impl PinnedLinks {
    fn new(device: usize, count: usize, bytes: usize) -> Result<Self, CommError> {
        let ctx = CudaContext::new(device).map_err(driver(device, "cannot open the device"))?;
        let mut me = Self {
            ctx,
            bases: Vec::with_capacity(count),
        };
        for _ in 0..count {
            let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
            // SAFETY: the context is current on this thread (`CudaContext::new` binds it); the memory
            // is freed once, in `Drop`, and its address never outlives `self` in any worker (the
            // workers are scoped threads joined before `self` drops).
            let p = unsafe { result::malloc_host(bytes, flags) }
                .map_err(driver(device, "cannot allocate page-locked host memory"))?;
            // SAFETY: `p` points to `bytes` writable bytes just allocated.
            unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, bytes) };
            me.bases.push(p);
        }
        Ok(me)
    }

    /// Host addresses, which the workers translate for their own contexts.
    fn addresses(&self) -> Vec<usize> {
        self.bases.iter().map(|&p| p as usize).collect()
    }
}

impl Drop for PinnedLinks {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        for &p in &self.bases {
            // SAFETY: allocated by `malloc_host` in `new`, freed once; every worker has finished.
            let _ = unsafe { result::free_host(p) };
        }
    }
}

/// The device addresses one side uses.
struct SidePtrs {
    side: Side,
    /// Kernel store targets by parity: mapped host memory (zero-copy), the neighbour's device
    /// memory (peer) or the local staging array (copy-engine, both parities).
    out: [u64; 2],
    /// Kernel load sources by parity.
    inp: [u64; 2],
    /// Copy-engine only: the pinned host buffers by parity, as host addresses.
    host_out: [usize; 2],
    host_in: [usize; 2],
}

/// One device's end of the exchange, created and dropped on its worker thread.
struct CudaEndpoint {
    device: usize,
    describe: String,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    func: CudaFunction,
    shape: Shape,
    transport: Transport,
    sides: Vec<SidePtrs>,
    /// One mismatch counter (u64) per side.
    counters: u64,
    /// Device allocations this endpoint frees.
    owned: Vec<u64>,
}

impl CudaEndpoint {
    fn open(device: usize, shape: Shape, transport: Transport) -> Result<Self, CommError> {
        let ctx = CudaContext::new(device).map_err(driver(device, "cannot open the device"))?;
        let name = ctx.name().map_err(driver(device, "device name"))?;
        let cc = ctx
            .compute_capability()
            .map_err(driver(device, "compute capability"))?;
        let bin = cubin(cc).map_err(|message| CommError::Device { device, message })?;
        let module = ctx
            .load_module(nvrtc::Ptx::from_binary(bin))
            .map_err(driver(device, "cannot load the exchange kernel"))?;
        let func = module
            .load_function(KERNEL)
            .map_err(driver(device, "cannot find the exchange kernel"))?;
        let stream = ctx
            .new_stream()
            .map_err(driver(device, "cannot create a stream"))?;
        Ok(Self {
            device,
            describe: format!("cuda:{device} {name} (sm_{}{})", cc.0, cc.1),
            ctx,
            stream,
            func,
            shape,
            transport,
            sides: Vec::new(),
            counters: 0,
            owned: Vec::new(),
        })
    }

    /// Zeroed device memory of `bytes` bytes, freed with the endpoint. Plain `cuMemAlloc` memory
    /// rather than the stream-ordered pool, so that peer access needs only `cuCtxEnablePeerAccess`.
    fn alloc(&mut self, bytes: usize) -> Result<u64, CommError> {
        self.ctx
            .bind_to_thread()
            .map_err(driver(self.device, "bind"))?;
        // SAFETY: the endpoint's context is current; the allocation is recorded in `owned` and freed
        // once, in `Drop`, after this device's stream is synchronised.
        let p = unsafe { result::malloc_sync(bytes) }
            .map_err(driver(self.device, "cannot allocate device memory"))?;
        self.owned.push(p);
        // SAFETY: `p` is a fresh allocation of `bytes` bytes on the current context.
        unsafe { result::memset_d8_sync(p, 0, bytes) }
            .map_err(driver(self.device, "cannot clear device memory"))?;
        Ok(p)
    }

    fn launch(
        &self,
        t: u32,
        out: [u64; 2],
        inp: [u64; 2],
        streams: [u32; 4],
    ) -> Result<(), CommError> {
        let e = self.shape.edge as u32;
        let block = e.next_multiple_of(32).min(256);
        let grid = (
            e.div_ceil(block),
            (self.shape.arrays * self.shape.edge) as u32,
            self.sides.len() as u32,
        );
        let (mut out0, mut in0, mut out1, mut in1) = (out[0], inp[0], out[1], inp[1]);
        let [mut so0, mut si0, mut so1, mut si1] = streams;
        let (mut it, mut edge) = (t, e);
        let mut transpose = i32::from(self.shape.transpose);
        let mut check = i32::from(t > 0);
        let mut counters = self.counters;
        let mut params: [*mut c_void; 13] = [
            (&mut out0 as *mut u64).cast(),
            (&mut in0 as *mut u64).cast(),
            (&mut out1 as *mut u64).cast(),
            (&mut in1 as *mut u64).cast(),
            (&mut so0 as *mut u32).cast(),
            (&mut si0 as *mut u32).cast(),
            (&mut so1 as *mut u32).cast(),
            (&mut si1 as *mut u32).cast(),
            (&mut it as *mut u32).cast(),
            (&mut edge as *mut u32).cast(),
            (&mut transpose as *mut i32).cast(),
            (&mut check as *mut i32).cast(),
            (&mut counters as *mut u64).cast(),
        ];
        // SAFETY: the parameters match `comm_exchange`'s signature in kernels/comm_bench.cu in
        // order and type (4 pointers, 6 unsigned, 2 int, 1 pointer); the driver copies them at the
        // call. Every store target holds `words` words of the side's stream (mapped host memory, the
        // neighbour's device memory with peer access enabled, or local staging), and every load
        // source likewise; the grid covers exactly `arrays · edge` rows of `edge` words per side. The
        // protocol (parity flip and barrier) guarantees nothing else touches those buffers meanwhile.
        unsafe {
            result::launch_kernel(
                self.func.cu_function(),
                grid,
                (block, 1, 1),
                0,
                self.stream.cu_stream(),
                &mut params,
            )
        }
        .map_err(driver(self.device, "exchange kernel launch"))
    }
}

impl Endpoint for CudaEndpoint {
    fn exchange(&mut self, t: u32) -> Result<(), CommError> {
        if self.sides.is_empty() {
            return Ok(());
        }
        // Opening a peer's context during setup leaves that context current; launches and copies
        // need this device's.
        self.ctx
            .bind_to_thread()
            .map_err(driver(self.device, "bind"))?;
        let (w, r) = (write_parity(t), read_parity(t));
        let bytes = self.shape.bytes();
        // A chain's end has one side; the kernel then runs one z-slice and ignores the second set.
        let a = &self.sides[0];
        let b = self.sides.get(1).unwrap_or(a);
        let streams = [
            a.side.stream_out(),
            a.side.stream_in(),
            b.side.stream_out(),
            b.side.stream_in(),
        ];
        let cs = self.stream.cu_stream();
        if self.transport == Transport::CopyEngine && t > 0 {
            for s in &self.sides {
                // SAFETY: `host_in[r]` is a pinned buffer of `bytes` bytes that the neighbour's copy
                // filled before the last barrier; `inp[r]` is this endpoint's staging array of
                // `bytes` bytes. The copy is ordered before the kernel on the same stream.
                unsafe {
                    sys::cuMemcpyHtoDAsync_v2(s.inp[r], s.host_in[r] as *const c_void, bytes, cs)
                }
                .result()
                .map_err(driver(self.device, "host-to-device copy"))?;
            }
        }
        self.launch(t, [a.out[w], b.out[w]], [a.inp[r], b.inp[r]], streams)?;
        if self.transport == Transport::CopyEngine {
            for s in &self.sides {
                // SAFETY: `out[w]` is this endpoint's staging array of `bytes` bytes written by the
                // kernel just enqueued on this stream; `host_out[w]` is a pinned buffer of `bytes`
                // bytes that no one reads until the next barrier.
                unsafe {
                    sys::cuMemcpyDtoHAsync_v2(s.host_out[w] as *mut c_void, s.out[w], bytes, cs)
                }
                .result()
                .map_err(driver(self.device, "device-to-host copy"))?;
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), CommError> {
        self.stream
            .synchronize()
            .map_err(driver(self.device, "exchange"))
    }

    fn mismatches(&mut self) -> Result<Vec<(usize, u64)>, CommError> {
        let mut counts = vec![0u64; self.sides.len()];
        if !counts.is_empty() {
            self.ctx
                .bind_to_thread()
                .map_err(driver(self.device, "bind"))?;
            // SAFETY: `counters` holds one u64 per side, allocated by `alloc`; the stream is idle.
            unsafe {
                sys::cuMemcpyDtoH_v2(
                    counts.as_mut_ptr().cast(),
                    self.counters,
                    counts.len() * std::mem::size_of::<u64>(),
                )
            }
            .result()
            .map_err(driver(self.device, "reading the mismatch counters"))?;
        }
        Ok(self
            .sides
            .iter()
            .zip(counts)
            .map(|(s, c)| (s.side.link, c))
            .collect())
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }
}

impl Drop for CudaEndpoint {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        let _ = self.stream.synchronize();
        for &p in &self.owned {
            // SAFETY: allocated by `malloc_sync` in `alloc`, freed once; this device's work is done
            // and, past the final barrier, so is every neighbour's store into it.
            let _ = unsafe { result::free_sync(p) };
        }
    }
}

/// The solver's transports: each stream's channel, allocated by its reader; writers look it up here.
type ChannelTable = Mutex<Vec<Option<Arc<dyn Channel>>>>;

fn compute(device: usize) -> impl Fn(ComputeError) -> CommError {
    move |e| CommError::Device {
        device,
        message: e.to_string(),
    }
}

/// Sets up and runs one device's endpoint.
fn worker(
    cfg: &BenchConfig,
    pos: usize,
    barrier: &StepBarrier,
    pinned: &[usize],
    table: &ChannelTable,
) -> Result<WorkerReport, CommError> {
    let device = cfg.devices[pos];
    let ls = links(cfg.devices.len(), cfg.topology);
    let my_sides = sides(&ls, pos);
    let shape = cfg.shape;
    let bytes = shape.bytes();
    let binding = match pci_bus_id(device) {
        Ok(id) => super::bind_worker(&Placement::Gpu { pci_bus_id: id }),
        Err(e) => format!("unbound ({e})"),
    };
    let mut ep = CudaEndpoint::open(device, shape, cfg.transport)?;
    ep.describe = format!("{}, {binding}", ep.describe);
    ep.counters = ep.alloc(8 * my_sides.len().max(1))?;
    let host_at = |link: usize, upward: bool, parity: usize| {
        pinned[link] + 4 * buffer_offset(&shape, upward, parity)
    };
    let never = std::sync::atomic::AtomicBool::new(false);
    let pass = || {
        barrier
            .wait(&never)
            .map(|_| ())
            .map_err(|_| CommError::Aborted)
    };
    match cfg.transport.solver() {
        Some(transport) => {
            // Exactly the solver's channels: each reader allocates its inbound stream's two
            // buffers in the transport's memory, and writers store into them.
            for s in &my_sides {
                if transport == thelma_core::Transport::Peer {
                    let l = ls[s.link];
                    let peer = cfg.devices[if s.writes_up { l.upper } else { l.lower }];
                    // The writer (`peer`) stores into this reader's memory; one device is its own.
                    if peer != device && !can_access_peer(peer, device).map_err(compute(device))? {
                        return Err(CommError::Unsupported {
                            transport: cfg.transport,
                            reason: format!("device {device} cannot access device {peer}"),
                        });
                    }
                }
                let c = channel::allocate(&ep.ctx, device, transport, 2 * bytes)
                    .map_err(compute(device))?;
                table.lock().map_err(|_| CommError::Aborted)?[s.stream_in() as usize] = Some(c);
            }
            pass()?;
            for s in &my_sides {
                let (inp, out) = {
                    let t = table.lock().map_err(|_| CommError::Aborted)?;
                    (
                        t[s.stream_in() as usize].clone(),
                        t[s.stream_out() as usize].clone(),
                    )
                };
                let (Some(inp), Some(out)) = (inp, out) else {
                    return Err(CommError::Aborted);
                };
                let at = |c: &Arc<dyn Channel>| {
                    channel::address(&ep.ctx, device, c.as_ref()).map_err(compute(device))
                };
                let (inp, out) = (at(&inp)?, at(&out)?);
                let mut p = SidePtrs::empty(*s);
                p.out = [out, out + bytes as u64];
                p.inp = [inp, inp + bytes as u64];
                ep.sides.push(p);
            }
        }
        None => {
            for s in &my_sides {
                let mut p = SidePtrs::empty(*s);
                let (out, inp) = (ep.alloc(bytes)?, ep.alloc(bytes)?);
                p.out = [out; 2];
                p.inp = [inp; 2];
                for parity in 0..2 {
                    p.host_out[parity] = host_at(s.link, s.writes_up, parity);
                    p.host_in[parity] = host_at(s.link, !s.writes_up, parity);
                }
                ep.sides.push(p);
            }
            pass()?;
        }
    }
    super::drive(&mut ep, barrier, cfg)
}

/// The MPI transport's endpoint of position `pos` on this rank (`super::job`): the exchange
/// kernel stores into and loads from page-locked host memory mapped into the device (zero-copy
/// channels, as the solver's outboxes and inboxes of a cluster job), and after each kernel the
/// job's messages carry the outgoing halves of the iteration's parity to the neighbours.
pub(super) fn job_endpoint(
    cfg: &BenchConfig,
    pos: usize,
    cluster: Arc<dyn thelma_core::Cluster>,
) -> Result<Box<dyn Endpoint>, CommError> {
    let available = device_count()?;
    let device = cfg.devices[pos];
    if device >= available {
        return Err(CommError::Config {
            flag: "--devices",
            message: format!(
                "device {device} (rank {pos}) does not exist ({available} CUDA devices)"
            ),
        });
    }
    let binding = match pci_bus_id(device) {
        Ok(id) => super::bind_worker(&Placement::Gpu { pci_bus_id: id }),
        Err(e) => format!("unbound ({e})"),
    };
    let mut ep = CudaEndpoint::open(device, cfg.shape, Transport::ZeroCopy)?;
    ep.describe = format!(
        "{}, rank {pos} of {}, {binding}",
        ep.describe,
        cluster.size()
    );
    let peers = super::job::peers(cfg, pos);
    ep.counters = ep.alloc(8 * peers.len().max(1))?;
    let bytes = cfg.shape.bytes();
    let mut boxes = Vec::with_capacity(peers.len());
    for (s, _) in &peers {
        let zero_copy = || {
            channel::allocate(&ep.ctx, device, thelma_core::Transport::ZeroCopy, 2 * bytes)
                .map_err(compute(device))
        };
        let (out, inp) = (zero_copy()?, zero_copy()?);
        let at = |c: &Arc<dyn Channel>| {
            channel::address(&ep.ctx, device, c.as_ref()).map_err(compute(device))
        };
        let mut p = SidePtrs::empty(*s);
        let (o, i) = (at(&out)?, at(&inp)?);
        p.out = [o, o + bytes as u64];
        p.inp = [i, i + bytes as u64];
        ep.sides.push(p);
        boxes.push((out, inp));
    }
    Ok(Box::new(CudaRank {
        ep,
        boxes,
        peers,
        cluster,
        t: 0,
    }))
}

/// A GPU position of an MPI job: the endpoint, each side's outbox and inbox, its peers' ranks.
struct CudaRank {
    ep: CudaEndpoint,
    boxes: Vec<(Arc<dyn Channel>, Arc<dyn Channel>)>,
    peers: Vec<(Side, usize)>,
    cluster: Arc<dyn thelma_core::Cluster>,
    t: u32,
}

impl Endpoint for CudaRank {
    fn exchange(&mut self, t: u32) -> Result<(), CommError> {
        self.t = t;
        self.ep.exchange(t)
    }

    fn finish(&mut self) -> Result<(), CommError> {
        self.ep.finish()?;
        let half = self.ep.shape.bytes();
        let w = write_parity(self.t);
        // SAFETY: each channel holds two halves of `half` bytes (allocated above). The kernel that
        // wrote the outboxes' halves of parity w has finished (the stream was just synchronised),
        // and no kernel reads the inboxes' halves of parity w before the next iteration, which
        // starts after this returns; every channel is named once, so no two slices alias.
        let out: Vec<&[u8]> = self
            .boxes
            .iter()
            .map(|(o, _)| unsafe { std::slice::from_raw_parts(o.address().add(w * half), half) })
            .collect();
        // SAFETY: as above.
        let mut inc: Vec<&mut [u8]> = self
            .boxes
            .iter()
            .map(|(_, i)| unsafe {
                std::slice::from_raw_parts_mut(i.address().add(w * half), half)
            })
            .collect();
        super::job::trade(self.cluster.as_ref(), &self.peers, &out, &mut inc)
    }

    fn mismatches(&mut self) -> Result<Vec<(usize, u64)>, CommError> {
        self.ep.mismatches()
    }

    fn describe(&self) -> String {
        self.ep.describe()
    }
}

impl SidePtrs {
    fn empty(side: Side) -> Self {
        Self {
            side,
            out: [0; 2],
            inp: [0; 2],
            host_out: [0; 2],
            host_in: [0; 2],
        }
    }
}

/// Runs one configuration on the GPUs `cfg.devices`.
pub(super) fn run(cfg: &BenchConfig) -> Result<Vec<WorkerReport>, CommError> {
    let available = device_count()?;
    if let Some(&bad) = cfg.devices.iter().find(|&&d| d >= available) {
        return Err(CommError::Config {
            flag: "--devices",
            message: format!("device {bad} does not exist ({available} CUDA devices)"),
        });
    }
    let ls = links(cfg.devices.len(), cfg.topology);
    let pinned = match cfg.transport {
        Transport::CopyEngine => Some(PinnedLinks::new(
            cfg.devices[0],
            ls.len(),
            4 * cfg.shape.bytes(),
        )?),
        _ => None,
    };
    let addresses = pinned
        .as_ref()
        .map(PinnedLinks::addresses)
        .unwrap_or_default();
    let table: ChannelTable = Mutex::new(vec![None; 2 * ls.len()]);
    let reports = run_workers(cfg, |pos, barrier| {
        worker(cfg, pos, barrier, &addresses, &table)
    });
    drop(pinned);
    reports
}

#[cfg(test)]
mod tests {
    use super::normalize_bus_id;

    #[test]
    fn cuda_bus_ids_take_hwlocs_four_digit_domain() {
        assert_eq!(normalize_bus_id("00000000:19:00.0"), "0000:19:00.0");
        assert_eq!(normalize_bus_id("0001:9a:00.0"), "0001:9a:00.0");
        assert_eq!(normalize_bus_id("odd"), "odd");
    }
}
