//! thelma-compute: the compute modules behind [`thelma_core::compute::ComputeModule`]: `cpu`, the
//! threaded reference oracle, always available; and `cuda`, chosen at run time when a GPU is present.
//!
//! A new collision model or propagation scheme is a new module here; the runtime, geometry and results
//! do not change.

pub mod comm_bench;
pub mod cpu;
mod fields;
mod params;

pub use params::ModelParams;
pub mod cuda;
