//! The floating-point type of a run: `f32` by default, `f64` on request ([`Precision`] in case
//! files, [`Real`] in the modules' generic code).

use std::fmt::{Debug, Display};

use num_traits::Float;
use serde::{Deserialize, Serialize};

/// Storage and arithmetic precision of the populations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[default]
    F32,
    F64,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
        }
    }
    pub fn bytes(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::F64 => 8,
        }
    }
}

/// A floating-point type the populations can be stored and collided in.
///
/// Sealed to `f32` and `f64`: kernels, file formats and the interface buffers are written for these two.
pub trait Real:
    Float + bytemuck::Pod + Default + Debug + Display + Send + Sync + sealed::Sealed + 'static
{
    /// Name used in kernel names, files and messages (`"f32"`, `"f64"`).
    const NAME: &'static str;
    /// The matching [`Precision`].
    const PRECISION: Precision;
    /// Converts a constant; rounding to nearest for `f32`.
    fn of(x: f64) -> Self;
    /// Widens to `f64` (exact for both types).
    fn to_f64(self) -> f64;
}

impl Real for f32 {
    const NAME: &'static str = "f32";
    const PRECISION: Precision = Precision::F32;
    #[inline(always)]
    fn of(x: f64) -> Self {
        x as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl Real for f64 {
    const NAME: &'static str = "f64";
    const PRECISION: Precision = Precision::F64;
    #[inline(always)]
    fn of(x: f64) -> Self {
        x
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}
