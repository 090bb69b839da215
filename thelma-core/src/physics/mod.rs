//! The physics layer: stencils as values, the arithmetic every rule is written in, the collision
//! operators of the flow lattice with their options (Smagorinsky LES, Guo forcing), the temperature
//! lattice (advection–diffusion on D3Q7, Boussinesq buoyancy), the sponge layers of pressure outlets, and the
//! symbolic number type through which the CUDA kernels are printed from the same Rust functions the
//! CPU module runs.
//!
//! Adding a collision operator: a type implementing [`CollisionOperator`] in `collision.rs` and its
//! name in the `registry!` line there. Nothing else in the workspace names operators one by one.

mod arith;
mod boundary;
mod collision;
pub mod d3q19;
mod error;
mod immersed;
mod sponge;
mod stencil;
pub mod symbolic;
mod thermal;

pub use arith::{term, Arith};
pub use boundary::{momentum_exchange, node_density, parabola, pressure_terms};
pub use collision::{
    density_momentum, dispatch, eddy_of, eddy_viscosity, equilibrium, equilibrium_moments,
    equilibrium_pairs, guo_moments, guo_source, macroscopic, smagorinsky_relaxation,
    stored_macroscopic, Bgk, Coefficients, Collision, CollisionOperator, FlowModel, Macroscopic,
    Mrt, MrtRates, OperatorVisitor, Pairs, Trt, DEFAULT_TRT_MAGIC, OPERATORS,
};
pub use error::PhysicsError;
pub use immersed::{
    delta_inner, delta_outer, delta_roma, support_1d, BodyLoad, ForcingPlan, ForcingSolution,
    ImmersedBodies, LagrangianBody, LeavesDomain, Pose, RigidMotion, SUPPORT,
};
pub use sponge::{absorb, absorb_recording, sponge_rate, Absorption, SpongeLayer, Sponges};
pub use stencil::{Stencil, D3Q19, D3Q7, MAX_SPEED};
pub use symbolic::{Recording, Sym};
pub use thermal::{
    advecting_velocity, buoyancy_force, collide_thermal, coupled_force, dirichlet_term,
    load_thermal, store_scale_of, store_thermal, temperature, thermal_equilibrium,
    thermal_equilibrium_populations, ThermalCoefficients, ThermalFace, ThermalModel, ThermalSetup,
    DEFAULT_THERMAL_MAGIC, HELD_FACES, QT,
};

#[cfg(test)]
mod tests;
