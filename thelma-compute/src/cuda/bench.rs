//! The memory-bandwidth probe of `thelma bench`: a device-to-device copy kernel timed with CUDA
//! events; the figure counts bytes read plus bytes written, as the D3Q19 roofline does.

use cudarc::driver::{sys, CudaContext, DevicePtr};
use thelma_core::ComputeError;

use super::launch::{self, Kernel, BANDWIDTH_SOURCE};
use super::{device, gpu_info};

fn dev_err(e: cudarc::driver::DriverError) -> ComputeError {
    ComputeError::Device(e.to_string())
}

/// Effective bandwidth of GPU `ordinal` in bytes per second: mean over `iters` copies of a buffer of
/// `bytes` bytes into another (after one warm-up copy), counting 2 × `bytes` per copy.
pub fn copy_bandwidth(ordinal: usize, bytes: usize, iters: usize) -> Result<f64, ComputeError> {
    device::device_count().map_err(|e| ComputeError::Device(e.to_string()))?;
    let info = gpu_info(ordinal)?;
    let ctx = CudaContext::new(ordinal).map_err(dev_err)?;
    // SAFETY: before any allocation in this context object.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().map_err(dev_err)?;
    let cubin = launch::compile_cubin(
        BANDWIDTH_SOURCE,
        "bandwidth.cu",
        &launch::arch_of(info.compute_capability),
    )?;
    let name = Kernel::BandwidthCopy.name(thelma_core::Precision::F32);
    let (_module, funcs) = launch::load(&stream, &cubin, std::slice::from_ref(&name))?;
    let n16 = (bytes / 16).max(1);
    let src = stream
        .alloc_zeros::<u8>(n16 * 16)
        .map_err(|e| ComputeError::OutOfMemory(e.to_string()))?;
    let dst = stream
        .alloc_zeros::<u8>(n16 * 16)
        .map_err(|e| ComputeError::OutOfMemory(e.to_string()))?;
    let (s, _g1) = src.device_ptr(&stream);
    let (d, _g2) = dst.device_ptr(&stream);
    let blocks = (info.multiprocessors.max(1) as u32 * 8)
        .min(n16.div_ceil(256) as u32)
        .max(1);
    // SAFETY: `funcs[0]` is the bandwidth kernel; `src` and `dst` hold n16 16-byte vectors each
    // and live until the stream is synchronised below.
    unsafe { launch::bandwidth_copy(&stream, &funcs[0], s, d, n16 as u64, blocks) }?;
    let start = ctx
        .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(dev_err)?;
    let stop = ctx
        .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(dev_err)?;
    start.record(&stream).map_err(dev_err)?;
    for _ in 0..iters.max(1) {
        // SAFETY: as above.
        unsafe { launch::bandwidth_copy(&stream, &funcs[0], s, d, n16 as u64, blocks) }?;
    }
    stop.record(&stream).map_err(dev_err)?;
    stop.synchronize().map_err(dev_err)?;
    let ms = start.elapsed_ms(&stop).map_err(dev_err)? as f64;
    stream.synchronize().map_err(dev_err)?;
    Ok(2.0 * (n16 * 16) as f64 * iters.max(1) as f64 / (ms * 1e-3))
}
