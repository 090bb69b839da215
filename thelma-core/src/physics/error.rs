//! What the physics layer refuses: an operator name it does not know, a relaxation rate outside the
//! stable range, a stencil table that breaks its invariants.

/// A physics description that cannot be used.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PhysicsError {
    #[error("unknown collision operator {name:?} (one of {known})")]
    UnknownOperator { name: String, known: String },
    #[error("MRT rate {name} = {value} must lie in (0, 2)")]
    Rate { name: &'static str, value: f64 },
    #[error("{stencil}: {what}")]
    Stencil { stencil: &'static str, what: String },
}
