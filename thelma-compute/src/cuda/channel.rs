//! The CUDA transports of the exchange layer (`thelma_core::Transport`): where a channel's memory
//! lives and the address a kernel reaches it at. The solver and `thelma comm-bench` allocate and
//! address their channels through these functions only, so the benchmark measures exactly the
//! solver's transports.
//!
//! - zero-copy: page-locked host memory mapped into every context (PORTABLE | DEVICEMAP), TheLMA's
//!   buffers; the writer's stores and the reader's loads cross the host link.
//! - device: memory of the GPU both slabs share (one primary context, so one address space).
//! - peer: the reader's device memory; the writer's context is granted peer access to it and its
//!   kernels store over NVLink or PCIe (posted writes), the reader loads locally.
//!
//! Ordering is the step protocol's: a writer synchronises its stream before the runtime's barrier,
//! and the reader's next kernel is launched after it, so a kernel boundary and a host
//! synchronisation separate every store from the load that reads it, whatever the memory.

use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext, DriverError};
use thelma_core::{Channel, ComputeError, Transport};

fn dev_err(what: &str) -> impl FnOnce(DriverError) -> ComputeError + '_ {
    move |e| ComputeError::Device(format!("{what}: {e}"))
}

/// Page-locked host memory mapped into every context: a zero-copy channel.
struct MappedChannel {
    ptr: *mut u8,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: the memory is a page-locked allocation owned by this value and valid in every context
// (PORTABLE). Concurrent access follows the step protocol: within a step each buffer is written by
// exactly one kernel and the other parity is only read; the barrier orders steps. The context handle
// is only used to bind a context for the free.
unsafe impl Send for MappedChannel {}
unsafe impl Sync for MappedChannel {}

impl Drop for MappedChannel {
    fn drop(&mut self) {
        // Freeing page-locked memory needs a current context; any context of the process will do.
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by cuMemHostAlloc in `allocate`; every module using it has synchronised
        // its stream before releasing its handle.
        let _ = unsafe { result::free_host(self.ptr as *mut std::ffi::c_void) };
    }
}

// SAFETY: `ptr` is a page-locked allocation of `bytes` bytes made by cuMemHostAlloc (page aligned),
// owned by this value and freed only when it drops; modules access it under the step protocol.
unsafe impl Channel for MappedChannel {
    fn address(&self) -> *mut u8 {
        self.ptr
    }
    fn bytes(&self) -> usize {
        self.bytes
    }
    fn transport(&self) -> Transport {
        Transport::ZeroCopy
    }
    fn device(&self) -> Option<usize> {
        None
    }
}

/// Device memory of the reader's GPU: a device or peer channel.
struct DeviceChannel {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    transport: Transport,
    ordinal: usize,
    ctx: Arc<CudaContext>,
}

impl Drop for DeviceChannel {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by cuMemAlloc in `allocate` in this context; every module using it has
        // synchronised its stream before releasing its handle.
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}

// SAFETY: a cuMemAlloc allocation of `bytes` bytes (256-byte aligned) owned by this value and freed
// only when it drops; its address is the same in every context of the device's primary context and,
// under unified addressing, in peer contexts granted access; modules access it under the step
// protocol.
unsafe impl Channel for DeviceChannel {
    fn address(&self) -> *mut u8 {
        self.ptr as *mut u8
    }
    fn bytes(&self) -> usize {
        self.bytes
    }
    fn transport(&self) -> Transport {
        self.transport
    }
    fn device(&self) -> Option<usize> {
        Some(self.ordinal)
    }
}

/// Allocates a zeroed channel of `bytes` bytes for a reader on GPU `ordinal` (context `ctx`).
pub fn allocate(
    ctx: &Arc<CudaContext>,
    ordinal: usize,
    transport: Transport,
    bytes: usize,
) -> Result<Arc<dyn Channel>, ComputeError> {
    ctx.bind_to_thread().map_err(dev_err("bind context"))?;
    let oom = |e: DriverError| {
        ComputeError::OutOfMemory(format!("{transport} channel of {bytes} bytes: {e}"))
    };
    match transport {
        Transport::ZeroCopy => {
            // SAFETY: a plain allocation request; the pointer is checked and zeroed before use.
            let ptr = unsafe {
                result::malloc_host(
                    bytes.max(1),
                    sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
                )
            }
            .map_err(oom)? as *mut u8;
            // SAFETY: `ptr` points at `bytes` writable bytes.
            unsafe { std::ptr::write_bytes(ptr, 0, bytes) };
            Ok(Arc::new(MappedChannel {
                ptr,
                bytes,
                ctx: ctx.clone(),
            }))
        }
        Transport::Device | Transport::Peer => {
            // SAFETY: a plain allocation request in the current context.
            let ptr = unsafe { result::malloc_sync(bytes.max(1)) }.map_err(oom)?;
            let channel = DeviceChannel {
                ptr,
                bytes,
                transport,
                ordinal,
                ctx: ctx.clone(),
            };
            // SAFETY: `ptr` is the allocation just made, `bytes` long.
            unsafe { result::memset_d8_sync(ptr, 0, bytes) }.map_err(dev_err("zero a channel"))?;
            Ok(Arc::new(channel))
        }
    }
}

/// The address at which kernels of GPU `ordinal` (context `ctx`, current) reach `channel`; a writer
/// of a peer channel is granted peer access to the reader's GPU first.
pub fn address(
    ctx: &Arc<CudaContext>,
    ordinal: usize,
    channel: &dyn Channel,
) -> Result<u64, ComputeError> {
    ctx.bind_to_thread().map_err(dev_err("bind context"))?;
    match (channel.transport(), channel.device()) {
        (Transport::ZeroCopy, _) => {
            let mut d: sys::CUdeviceptr = 0;
            // SAFETY: `d` is a valid out pointer; the driver rejects memory that is not mapped
            // page-locked memory.
            unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, channel.address() as *mut _, 0) }
                .result()
                .map_err(|e| {
                    ComputeError::Invalid(format!("channel is not mapped into the device ({e})"))
                })?;
            Ok(d)
        }
        (_, Some(owner)) if owner == ordinal => Ok(channel.address() as u64),
        (Transport::Peer, Some(owner)) => {
            enable_peer(ctx, ordinal, owner)?;
            Ok(channel.address() as u64)
        }
        (t, owner) => Err(ComputeError::Invalid(format!(
            "GPU {ordinal} cannot reach a {t} channel on {owner:?}"
        ))),
    }
}

/// Lets the context of GPU `ordinal` (current) store into GPU `peer`'s memory; an already enabled
/// pair is fine. Peer access lasts as long as the primary contexts.
pub fn enable_peer(
    ctx: &Arc<CudaContext>,
    ordinal: usize,
    peer: usize,
) -> Result<(), ComputeError> {
    let other = CudaContext::new(peer).map_err(dev_err("open the peer GPU"))?;
    ctx.bind_to_thread().map_err(dev_err("bind context"))?;
    // SAFETY: this device's context is current and `other` keeps the peer's primary context alive
    // for the call; peer access stays enabled for the primary context's lifetime.
    let r = unsafe { sys::cuCtxEnablePeerAccess(other.cu_ctx(), 0) };
    // Dropping the peer's handle binds its context: leave this one current.
    drop(other);
    ctx.bind_to_thread().map_err(dev_err("bind context"))?;
    match r {
        sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {
            Ok(())
        }
        e => Err(ComputeError::Device(format!(
            "GPU {ordinal} cannot store into GPU {peer}'s memory: {}",
            DriverError(e)
        ))),
    }
}
