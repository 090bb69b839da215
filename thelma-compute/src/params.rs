//! The model parameters every compute module receives, independent of the device.

use std::sync::Arc;

use thelma_core::collision::{Collision, MrtRates};
use thelma_core::config::{CaseConfig, LatticeParams, Precision};
use thelma_geometry::Geometry;

/// What a compute module needs to know about the model, shared by all slabs of a run.
#[derive(Clone, Debug)]
pub struct ModelParams {
    pub geometry: Arc<Geometry>,
    pub collision: Collision,
    pub precision: Precision,
    /// The shear relaxation rate ω = 1/τ.
    pub omega: f64,
    pub mrt_rates: MrtRates,
}

impl ModelParams {
    pub fn new(case: &CaseConfig, lattice: &LatticeParams, geometry: Arc<Geometry>) -> Self {
        Self {
            geometry,
            collision: case.numerics.collision,
            precision: case.numerics.precision,
            omega: lattice.omega,
            mrt_rates: case.numerics.mrt_rates,
        }
    }
}
