//! The CUDA compute module (cudarc, NVRTC): kernels from `kernels/` compiled at run time for the GPU
//! found, a fused pull collide-and-propagate step, and the exchange through channels in mapped
//! host, device or peer memory.
//!
//! `shape` holds the launch shape, `channel` the transports, `prelude` prints the kernels' constants and collision from
//! thelma-core, `cache` keeps compiled images on disk, `launch` holds the kernel registry, the
//! compilation and every unsafe launch, `module` the `ComputeModule` and `ModuleFactory`, `device`
//! the driver probes, `bench` the bandwidth probe (each file uses only those before it). Device
//! objects are created, used and dropped on their worker thread.

pub mod bench;
mod cache;
pub mod channel;
mod device;
mod immersed;
pub mod launch;
mod module;
pub mod prelude;
mod shape;

pub use device::{
    can_access_peer, device_count, gpu_info, memory, pci_bus_id, GpuInfo, Unavailable,
};
pub use immersed::immersed_device_bytes;
pub use module::{CudaFactory, CudaModule};
pub use shape::{LaunchShape, DEFAULT_BLOCK_X, RESIDENT_THREADS_F32, RESIDENT_THREADS_F64};
