//! thelma-results: what a run produces from the macroscopic fields: VTK files, slice images,
//! centreline profiles and their comparison with published reference data, convergence measures,
//! velocity derivatives (vorticity, Q-criterion), progress lines and the run summary.
//!
//! Results see macroscopic fields ([`thelma_core::Fields`]), never populations or devices.

//!
//! Modules are private and the root re-exports what the application uses, so that the compiler
//! reports what nothing uses; `vtk` stays a namespace (`vtk::write_vti`).

mod convergence;
mod gradient;
mod image;
mod live;
mod nusselt;
mod output;
mod plot;
mod profiles;
mod reference;
mod report;
pub mod vtk;

pub use convergence::relative_change;
pub use image::{write_slice_png, Slice, SliceStyle};
pub use live::{field_values, picture, LiveField, Picture};
pub use nusselt::{wall_nusselt, WallNusselt};
pub use output::{write_atomic, write_atomic_with, write_bytes_atomic};
pub use plot::{line_plot, profile_plot, DrawError, Mark, Series, XAxis};
pub use profiles::{cavity_centrelines, write_csv, Profile};
pub use reference::{
    compare, compare_wall_units, Comparison, Reference, ReferenceError, WallUnitsError,
    CHANNEL_RETAU180,
};
pub use report::{
    clock, seconds, wrap, Convergence, DeviceSummary, ForceMean, ProgressLine, RunSummary,
    SteerAction, Steering, StopReason, Timings, UnitsReport, LINE_WIDTH,
};
