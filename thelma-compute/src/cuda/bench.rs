//! The memory-bandwidth probe of `thelma bench`: a device-to-device copy kernel timed with CUDA
//! events; the figure counts bytes read plus bytes written, as the D3Q19 roofline does.

use cudarc::driver::{sys, CudaContext, DevicePtr};
use thelma_core::ComputeError;

use super::launch::{self, Kernel, BANDWIDTH_SOURCE};
use super::{device, gpu_info};

fn dev_err(e: cudarc::driver::DriverError) -> ComputeError {
    ComputeError::Device(e.to_string())
}

/// Effective bandwidth of GPU `ordinal` in bytes per second, once per repetition: each of
/// `repetitions` repetitions (after one warm-up copy) times `iters` copies of a buffer of `bytes`
/// bytes into another between its own pair of events, counting 2 × `bytes` per copy.
pub fn copy_bandwidth(
    ordinal: usize,
    bytes: usize,
    repetitions: usize,
    iters: usize,
) -> Result<Vec<f64>, ComputeError> {
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
    let iters = iters.max(1);
    let events = (0..=repetitions.max(1))
        .map(|_| ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(dev_err)?;
    // Back-to-back repetitions: the event that ends one starts the next.
    events[0].record(&stream).map_err(dev_err)?;
    for stop in &events[1..] {
        for _ in 0..iters {
            // SAFETY: as above.
            unsafe { launch::bandwidth_copy(&stream, &funcs[0], s, d, n16 as u64, blocks) }?;
        }
        stop.record(&stream).map_err(dev_err)?;
    }
    stream.synchronize().map_err(dev_err)?;
    let mut samples = Vec::with_capacity(events.len() - 1);
    for pair in events.windows(2) {
        let ms = pair[0].elapsed_ms(&pair[1]).map_err(dev_err)? as f64;
        samples.push(2.0 * (n16 * 16) as f64 * iters as f64 / (ms.max(1e-6) * 1e-3));
    }
    Ok(samples)
}
