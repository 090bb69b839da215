//! thelma-results: what a run produces from the macroscopic fields: VTK files, slice images,
//! centreline profiles and their comparison with published reference data, convergence measures,
//! progress lines and the run summary.
//!
//! Results see macroscopic fields ([`thelma_core::Fields`]), never populations or devices.

pub mod convergence;
pub mod image;
pub mod output;
pub mod plot;
pub mod profiles;
pub mod reference;
pub mod report;
pub mod vtk;
