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
pub use cpu::{wide_rows_available, CpuFactory, CpuModule};
pub use params::ModelParams;

/// How the populations of an in-place lattice are arranged between steps (both modules; the CPU
/// module's `cpu_inplace.rs` describes the scheme).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Held {
    /// Slot i of node x holds f̃_i(x), as a lattice of the two-lattice scheme does: what readers,
    /// checkpoints and the pull step take.
    Own,
    /// f̃_i(x) is in slot ī of node x + c_i: what the local step takes.
    Streamed,
}
