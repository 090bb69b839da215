//! thelma-results: what a run produces from the macroscopic fields: centreline profiles, comparison
//! with published reference data, convergence measures and the run summary.
//!
//! Results see macroscopic fields ([`thelma_core::compute::Fields`]), never populations or devices.

pub mod convergence;
pub mod output;
pub mod plot;
pub mod profiles;
pub mod reference;
pub mod report;
