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
/// Resident threads per multiprocessor the f32 collision kernel's registers are planned for
/// (`__launch_bounds__`): 1,024 caps it at 64 registers, which measured faster than the 72 the
/// compiler picks alone, and faster than 40 (PERFORMANCE.md).
pub const RESIDENT_THREADS_F32: u32 = 1024;
/// The same for f64, whose collision needs about 108 registers: 512 threads (a cap of 128) keeps it
/// from spilling (a 64-register cap cost 40 % on the H100).
pub const RESIDENT_THREADS_F64: u32 = 512;
