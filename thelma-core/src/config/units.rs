//! Physical scales of a case (`[units]`) and the conversion they give between lattice and SI units.

use serde::{Deserialize, Serialize};

/// Optional physical scales of a case, in SI units. With them the Reynolds number is `U L / ν`, and
/// lattice and physical units convert through [`UnitScales`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhysicalUnits {
    /// Edge of the domain along x, m (the characteristic length L).
    pub length: f64,
    /// Characteristic (lid) velocity U, m/s.
    pub velocity: f64,
    /// Kinematic viscosity ν, m²/s.
    pub viscosity: f64,
    /// Density ρ₀, kg/m³: with it forces are written in N and pressures in Pa.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub density: Option<f64>,
}

impl PhysicalUnits {
    /// The Reynolds number `U L / ν`.
    pub fn reynolds(&self) -> f64 {
        self.velocity * self.length / self.viscosity
    }
}

/// Conversion between lattice and physical units: `dx = L / nx`, `dt = U_lb dx / U`, so that the
/// lattice lid speed maps onto the physical velocity and `ν_lb = ν dt / dx²`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct UnitScales {
    /// Node spacing, m.
    pub dx: f64,
    /// Physical time of one step, s.
    pub dt: f64,
    /// One lattice velocity unit, m/s (`dx / dt`).
    pub velocity: f64,
    /// One lattice viscosity unit, m²/s (`dx² / dt`).
    pub viscosity: f64,
}
