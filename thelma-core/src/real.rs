//! The number formats of a run: `f32` by default, `f64` or 16-bit storage on request ([`Precision`]
//! in case files; [`Real`], the type the modules collide in, and [`Stored`], the type they keep the
//! populations in, in their generic code).

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
    /// Populations stored in 16 bits ([`ScaledHalf`]), collided in `f32`.
    F16,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
            Precision::F16 => "f16",
        }
    }
    /// Bytes of one stored population.
    pub fn bytes(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::F64 => 8,
            Precision::F16 => 2,
        }
    }
    /// The relative change of the velocity field between two convergence checks below which the
    /// storage cannot tell a flow still settling from its own rounding, where that is above any
    /// tolerance a run would ask for: f16 storage's rounding moves a steady velocity field by about
    /// 2⁻¹² (2.2–2.6e-4, a 32³ cavity at Re 100 over checks 300 steps apart), and the floor is twice
    /// that, one binary16 rounding (2⁻¹¹ of a value). f32 and f64 have none.
    pub fn resolution(self) -> Option<f64> {
        match self {
            Precision::F16 => Some(1.0 / 2048.0),
            _ => None,
        }
    }
    /// The precision the populations are collided in (and fields are reported in).
    pub fn arithmetic(self) -> Precision {
        match self {
            Precision::F16 => Precision::F32,
            p => p,
        }
    }
}

/// A floating-point type the populations can be stored and collided in.
///
/// Sealed to `f32` and `f64` (the stored formats, [`Stored`], are sealed likewise): kernels, file
/// formats and the interface buffers are written for these.
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
    impl Sealed for super::ScaledHalf {}
}

/// How a run keeps its populations in memory: the arithmetic type [`Real`] they are collided in, and
/// the conversions every load and store makes. `f32` and `f64` are stored as they are computed;
/// [`ScaledHalf`] stores `f32` populations in 16 bits.
///
/// One source for both modules: the CPU module converts through these functions, and the CUDA
/// prelude prints the same conversions (`thelma_load`, `thelma_store`) from [`ScaledHalf::SCALE`].
pub trait Stored:
    bytemuck::Pod + Default + Debug + PartialEq + Send + Sync + sealed::Sealed
{
    /// The type the populations are collided in.
    type Arith: Real;
    /// The matching [`Precision`].
    const PRECISION: Precision;
    /// The stored value as the arithmetic type (exact).
    fn load(self) -> Self::Arith;
    /// A value in the arithmetic type, stored (rounded to nearest, ties to even).
    fn store(x: Self::Arith) -> Self;
}

/// Formats stored as they are computed: the conversions are the identity.
macro_rules! stored_as_computed {
    ($($t:ty => $p:expr),*) => {$(
        impl Stored for $t {
            type Arith = $t;
            const PRECISION: Precision = $p;
            #[inline(always)]
            fn load(self) -> $t {
                self
            }
            #[inline(always)]
            fn store(x: $t) -> $t {
                x
            }
        }
    )*};
}

stored_as_computed!(f32 => Precision::F32, f64 => Precision::F64);

/// A population stored in 16 bits: the IEEE 754 binary16 bits of `g · 2^15`, `g = f − w` the shifted
/// population (thelma_core::physics), collided in `f32`.
///
/// Why scaled: the shifted populations of any state a run can reach lie in (−w₀, 1) = (−1/3, 1),
/// while binary16 is normal from 2⁻¹⁴ ≈ 6.1e-5 to 65504. Multiplied by 2^15 (exact, a power of two)
/// they stay below 2^15 < 65504 and keep binary16's full 11-bit significand down to 2⁻²⁹ ≈ 1.9e-9,
/// where unscaled values would turn subnormal and lose digits below 6.1e-5, the size of the
/// deviations a slow flow's populations carry. The relative rounding error is 2⁻¹¹ ≈ 4.9e-4 of the
/// shifted value, which is what shifting buys: of the deviation from rest, not of f ≈ w.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ScaledHalf(pub u16);

impl ScaledHalf {
    /// The factor on a shifted population before it is rounded to binary16.
    pub const SCALE: f32 = 32768.0;
}

impl Stored for ScaledHalf {
    type Arith = f32;
    const PRECISION: Precision = Precision::F16;
    #[inline(always)]
    fn load(self) -> f32 {
        half::f16::from_bits(self.0).to_f32() * (1.0 / Self::SCALE)
    }
    #[inline(always)]
    fn store(x: f32) -> ScaledHalf {
        ScaledHalf(half::f16::from_f32(x * Self::SCALE).to_bits())
    }
}
