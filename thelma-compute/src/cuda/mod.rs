//! The CUDA compute module (cudarc, NVRTC): kernels from `kernels/` compiled at run time for the GPU
//! found, a fused pull collide-and-propagate step, and the zero-copy interface exchange of TheLMA.
//!
//! `prelude` generates the kernels' constants from thelma-core, `launch` holds the kernel registry and
//! every unsafe launch, `module` the `ComputeModule` and `ModuleFactory`, `device` the driver probes,
//! `bench` the bandwidth probe. Device objects are created, used and dropped on their worker thread.

pub mod bench;
pub mod device;
pub mod launch;
pub mod module;
pub mod prelude;

pub use device::{device_count, gpu_info, GpuInfo, Unavailable};
pub use module::{CudaFactory, CudaModule, LaunchShape};

/// Threads per block along x of the collision kernel (TheLMA's 2^n layout; measured in PERFORMANCE.md).
pub const DEFAULT_BLOCK_X: u32 = 128;
/// Blocks per multiprocessor the collision kernel's registers are planned for: 8 blocks of 128 cap it at
/// 64 registers, which measured faster than the 72 the compiler picks alone (PERFORMANCE.md).
pub const DEFAULT_MIN_BLOCKS: u32 = 8;
