//! The arithmetic every physical rule is written in: a scalar, a bundle of CPU lanes, or a symbol
//! that records the operations so that the CUDA code is printed from the same function.

use std::ops::{Add, Div, Mul, Neg, Sub};

use crate::real::Real;

/// The arithmetic the collision operators are written in: a scalar (`f32`, `f64`), a bundle of lanes
/// (the CPU module's vectors of nodes along x), or [`super::Sym`], which records each operation and
/// prints it as CUDA C. Only `+ − × ÷`, `√` and constants are needed, so one source of the collision
/// maths serves the scalar reference, the vectorised CPU loop, the kernels and the tests.
///
/// Every implementation must apply exactly the operations it is asked for, in the order asked and
/// rounded once each (no reassociation, no fused multiply-add): that is what lets the symbolic
/// recording stand for the CPU code.
pub trait Arith:
    Copy
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
{
    /// The scalar type of each lane.
    type Scalar: Real;
    /// Every lane set to `s`.
    fn splat(s: Self::Scalar) -> Self;
    /// A constant, rounded to the scalar type.
    #[inline(always)]
    fn c(x: f64) -> Self {
        Self::splat(Self::Scalar::of(x))
    }
    /// The correctly rounded square root of every lane.
    fn sqrt(self) -> Self;
}

impl Arith for f32 {
    type Scalar = f32;
    #[inline(always)]
    fn splat(s: f32) -> Self {
        s
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
}

impl Arith for f64 {
    type Scalar = f64;
    #[inline(always)]
    fn splat(s: f64) -> Self {
        s
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
}

/// `acc + c·x` where `acc` may still be empty (so no `0 + x` is ever computed), for an integer
/// constant `c`: how the lattice tables' small integers enter sums without multiplications by 0 or ±1.
#[inline(always)]
pub fn term<V: Arith>(acc: Option<V>, c: i32, x: V) -> Option<V> {
    match (acc, c) {
        (a, 0) => a,
        (None, 1) => Some(x),
        (None, -1) => Some(-x),
        (None, c) => Some(V::c(c as f64) * x),
        (Some(a), 1) => Some(a + x),
        (Some(a), -1) => Some(a - x),
        (Some(a), c) => Some(a + V::c(c as f64) * x),
    }
}
