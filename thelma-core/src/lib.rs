//! thelma-core: lattice constants, collision operators, configuration, partition maths, the
//! compute-module trait and the multi-device runtime (the paper's "init" module).

pub mod affinity;
pub mod compute;
pub mod config;
pub mod domain;
pub mod initial;
pub mod lattice;
pub mod physics;
pub mod real;
pub mod runtime;

pub use real::Real;
