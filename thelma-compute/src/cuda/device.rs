//! Finding CUDA devices without panicking: whether the driver library loads, how many GPUs it sees,
//! and what each one is (name, memory, compute capability, PCI bus id, peer access).

use std::ffi::{c_char, c_int, CStr};

use cudarc::driver::{result, sys};
use thelma_core::{ComputeError, MemoryInfo};

/// Why no CUDA device can be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    #[error("no CUDA driver found (libcuda.so cannot be loaded)")]
    NoDriver,
    #[error("the CUDA driver failed to initialise: {0}")]
    InitFailed(String),
    #[error("the CUDA driver sees no GPU")]
    NoDevice,
}

/// Initialises the driver and returns the number of GPUs, or why there is none.
pub fn device_count() -> Result<usize, Unavailable> {
    // SAFETY: only tries to open the shared library.
    if !unsafe { sys::is_culib_present() } {
        return Err(Unavailable::NoDriver);
    }
    result::init().map_err(|e| Unavailable::InitFailed(e.to_string()))?;
    let n = result::device::get_count().map_err(|e| Unavailable::InitFailed(e.to_string()))?;
    if n <= 0 {
        return Err(Unavailable::NoDevice);
    }
    Ok(n as usize)
}

/// What `thelma devices` shows about one GPU.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct GpuInfo {
    pub ordinal: usize,
    pub name: String,
    pub total_bytes: u64,
    pub compute_capability: (i32, i32),
    pub pci_bus_id: String,
    pub multiprocessors: i32,
}

fn dev(ordinal: usize) -> Result<sys::CUdevice, ComputeError> {
    device_count().map_err(|e| ComputeError::Device(e.to_string()))?;
    result::device::get(ordinal as c_int)
        .map_err(|e| ComputeError::Device(format!("cuda:{ordinal}: {e}")))
}

fn attr(d: sys::CUdevice, a: sys::CUdevice_attribute) -> Result<i32, ComputeError> {
    // SAFETY: `d` is a valid device handle from cuDeviceGet.
    unsafe { result::device::get_attribute(d, a) }.map_err(|e| ComputeError::Device(e.to_string()))
}

/// The PCI bus id of GPU `ordinal` (`0000:19:00.0`), the form hwloc looks up.
pub fn pci_bus_id(ordinal: usize) -> Result<String, ComputeError> {
    let d = dev(ordinal)?;
    let mut buf = [0 as c_char; 32];
    // SAFETY: the buffer is 32 bytes and its length is passed; the driver NUL-terminates it.
    let r = unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as c_int, d) };
    if r != sys::cudaError_enum::CUDA_SUCCESS {
        return Err(ComputeError::Device(format!("cuDeviceGetPCIBusId: {r:?}")));
    }
    // SAFETY: NUL-terminated by the driver within the buffer.
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .to_lowercase())
}

/// Name, memory, compute capability and bus id of GPU `ordinal`.
pub fn gpu_info(ordinal: usize) -> Result<GpuInfo, ComputeError> {
    let d = dev(ordinal)?;
    let name = result::device::get_name(d).map_err(|e| ComputeError::Device(e.to_string()))?;
    // SAFETY: valid device handle.
    let total = unsafe { result::device::total_mem(d) }
        .map_err(|e| ComputeError::Device(e.to_string()))? as u64;
    use sys::CUdevice_attribute::*;
    Ok(GpuInfo {
        ordinal,
        name,
        total_bytes: total,
        compute_capability: (
            attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        pci_bus_id: pci_bus_id(ordinal)?,
        multiprocessors: attr(d, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
    })
}

/// Whether GPU `a` can access GPU `b`'s memory directly (NVLink or PCIe peer to peer).
pub fn can_access_peer(a: usize, b: usize) -> Result<bool, ComputeError> {
    let (da, db) = (dev(a)?, dev(b)?);
    let mut v: c_int = 0;
    // SAFETY: both handles are valid; `v` is a valid out pointer.
    let r = unsafe { sys::cuDeviceCanAccessPeer(&mut v, da, db) };
    if r != sys::cudaError_enum::CUDA_SUCCESS {
        return Err(ComputeError::Device(format!(
            "cuDeviceCanAccessPeer: {r:?}"
        )));
    }
    Ok(v != 0)
}

/// Free and total memory of GPU `ordinal` (creates, or reuses, its primary context).
pub fn memory(ordinal: usize) -> Result<MemoryInfo, ComputeError> {
    device_count().map_err(|e| ComputeError::Device(e.to_string()))?;
    let ctx = cudarc::driver::CudaContext::new(ordinal)
        .map_err(|e| ComputeError::Device(format!("cuda:{ordinal}: {e}")))?;
    let (free, total) = ctx
        .mem_get_info()
        .map_err(|e| ComputeError::Device(e.to_string()))?;
    Ok(MemoryInfo {
        free: free as u64,
        total: total as u64,
    })
}
