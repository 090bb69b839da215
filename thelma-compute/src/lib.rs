//! thelma-compute: the compute modules behind [`thelma_core::ComputeModule`] and the registry that
//! names them ([`BACKENDS`]): `cpu`, the threaded reference oracle, always available; and `cuda`,
//! chosen at run time when a GPU is present.
//!
//! A new collision model is a new operator in `thelma_core::physics`; a new kind of device is a new
//! module here with its entry in [`BACKENDS`]. The runtime, geometry and results do not change.

mod backend;
pub mod comm_bench;
mod cpu;
pub mod cuda;
mod fields;
mod params;

pub use backend::{
    choose, names as backend_names, parse_name as parse_backend, Backend, BackendError, Choice,
    DeviceError, Devices, Tuning, BACKENDS, MAX_CPU_DEVICES,
};
pub use cpu::{CpuFactory, CpuModule};
pub use params::ModelParams;
