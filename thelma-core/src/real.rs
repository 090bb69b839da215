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
    /// Populations stored in 16 bits with one more significand bit than binary16 and a narrower
    /// range ([`Half12`]), collided in `f32`.
    F16c,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
            Precision::F16 => "f16",
            Precision::F16c => "f16c",
        }
    }
    /// Bytes of one stored population.
    pub fn bytes(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::F64 => 8,
            Precision::F16 | Precision::F16c => 2,
        }
    }
    /// The relative change of the velocity field between two convergence checks below which the
    /// storage cannot tell a flow still settling from its own rounding, where that is above any
    /// tolerance a run would ask for: f16 storage's rounding moves a steady velocity field by about
    /// 2⁻¹² (2.2–2.6e-4, a 32³ cavity at Re 100 over checks 300 steps apart), and the floor is twice
    /// that, one binary16 rounding (2⁻¹¹ of a value); [`Half12`] rounds to half of that. f32 and
    /// f64 have none.
    pub fn resolution(self) -> Option<f64> {
        match self {
            Precision::F16 => Some(1.0 / 2048.0),
            Precision::F16c => Some(1.0 / 4096.0),
            _ => None,
        }
    }
    /// Whether the populations are stored in 16 bits (and collided in `f32`).
    pub fn is_16_bit(self) -> bool {
        self.bytes() == 2
    }
    /// The precision the populations are collided in (and fields are reported in).
    pub fn arithmetic(self) -> Precision {
        match self {
            Precision::F16 | Precision::F16c => Precision::F32,
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
    impl Sealed for super::Half12 {}
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

/// A population stored in 16 bits with a 12-bit significand: 1 sign bit, 4 exponent bits (bias 15)
/// and 11 fraction bits of the shifted population `g = f − w` itself, collided in `f32`.
///
/// Against [`ScaledHalf`]: binary16's fifth exponent bit buys range the shifted populations do not
/// use (they lie in (−1/3, 1)), so this format gives it to the significand. Normal values run from
/// 2⁻¹⁴ ≈ 6.1e-5 to just under 2 with a relative rounding error of 2⁻¹² ≈ 2.4e-4, half binary16's;
/// below 2⁻¹⁴ the values are subnormal, spaced 2⁻²⁵ ≈ 3.0e-8 apart (absolute). There are no
/// infinities: the largest code of each sign (`0x7FFF`, `0xFFFF`) is NaN, and a value that would
/// round to it or beyond (|g| ≥ 2 − 2⁻¹², or NaN) is stored as NaN, so a diverging run still
/// shows non-finite populations to the watchdog.
///
/// The conversions are exact bit operations on `f32`, printed into the CUDA prelude as they are
/// written here: a load places the 15 magnitude bits under an `f32` exponent and scales by 2¹¹²
/// (exact, subnormal codes included); a store rounds the `f32` to nearest even, by integer carry in
/// the normal range and by adding 2⁻² (whose spacing is the subnormal one) below it.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Half12(pub u16);

impl Half12 {
    /// The code every NaN loads from and every out-of-range value is stored as (with its sign).
    pub const NAN_BITS: u16 = 0x7FFF;
    /// `f32` bits of 2⁻¹⁴, the smallest normal value.
    pub const MIN_NORMAL_BITS: u32 = (127 - 14) << 23;
    /// `f32` bits of 2⁻², added to a subnormal value to round it at the spacing 2⁻²⁵.
    pub const SUBNORMAL_MAGIC_BITS: u32 = (127 - 2) << 23;
    /// What rebiases an `f32` exponent (bias 127) to this format's (bias 15), in `f32` bits.
    pub const REBIAS_BITS: u32 = (127 - 15) << 23;
    /// 2¹¹², the exact factor from a code placed under an `f32` exponent to its value.
    pub const LOAD_SCALE: f32 = 5192296858534827628530496329220096.0;
}

impl Stored for Half12 {
    type Arith = f32;
    const PRECISION: Precision = Precision::F16c;
    #[inline(always)]
    fn load(self) -> f32 {
        let b = self.0 as u32;
        if b & 0x7FFF == Self::NAN_BITS as u32 {
            return f32::NAN;
        }
        f32::from_bits(((b & 0x8000) << 16) | ((b & 0x7FFF) << 12)) * Self::LOAD_SCALE
    }
    #[inline(always)]
    fn store(x: f32) -> Half12 {
        let bits = x.to_bits();
        let sign = ((bits >> 16) & 0x8000) as u16;
        let a = bits & 0x7FFF_FFFF;
        let code = if a < Self::MIN_NORMAL_BITS {
            let magic = f32::from_bits(Self::SUBNORMAL_MAGIC_BITS);
            (f32::from_bits(a) + magic).to_bits() - Self::SUBNORMAL_MAGIC_BITS
        } else {
            let r = a.wrapping_sub(Self::REBIAS_BITS);
            (r + 0x7FF + ((r >> 12) & 1)) >> 12
        };
        Half12(sign | code.min(Self::NAN_BITS as u32) as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of a `Half12` code from its definition (sign, exponent, fraction), in f64.
    fn value(c: u16) -> f64 {
        let s = if c & 0x8000 != 0 { -1.0 } else { 1.0 };
        let e = ((c >> 11) & 0xF) as i32;
        let m = (c & 0x7FF) as f64;
        s * if e == 0 {
            m * 2f64.powi(-25)
        } else {
            (1.0 + m / 2048.0) * 2f64.powi(e - 15)
        }
    }

    #[test]
    fn every_half12_code_loads_as_its_definition_and_stores_back_to_itself() {
        for c in 0..=u16::MAX {
            let h = Half12(c);
            if c & 0x7FFF == Half12::NAN_BITS {
                assert!(h.load().is_nan());
                continue;
            }
            let v = h.load();
            assert_eq!(v as f64, value(c), "code {c:#06x}");
            // -0 stores as -0; every other value round-trips to its own code.
            assert_eq!(Half12::store(v), h, "code {c:#06x}");
        }
    }

    #[test]
    fn a_half12_store_rounds_to_the_nearest_code_ties_to_even() {
        // Every finite positive code but the largest, with the midpoint to the next and values just
        // either side of it.
        for c in 0..0x7FFEu16 {
            let (lo, hi) = (value(c), value(c + 1));
            let mid = 0.5 * (lo + hi);
            let even = if c % 2 == 0 { c } else { c + 1 };
            for (x, want) in [
                (mid, even),
                (mid - (hi - lo) * 0.01, c),
                (mid + (hi - lo) * 0.01, c + 1),
            ] {
                let xf = x as f32;
                // Only where the f32 holds the probe exactly (all midpoints do: 13 bits).
                if xf as f64 != x {
                    continue;
                }
                assert_eq!(Half12::store(xf).0, want, "x {x:e} between codes {c:#06x}");
                assert_eq!(Half12::store(-xf).0, want | 0x8000, "x {:e}", -x);
            }
        }
        // Out of range and NaN keep their sign as NaN codes; the largest finite value is stored.
        assert_eq!(Half12::store(2.0).0, 0x7FFF);
        assert_eq!(Half12::store(-1e9).0, 0xFFFF);
        assert_eq!(Half12::store(f32::INFINITY).0, 0x7FFF);
        assert_eq!(Half12::store(f32::NAN).0 & 0x7FFF, 0x7FFF);
        assert_eq!(Half12::store(value(0x7FFE) as f32).0, 0x7FFE);
        assert_eq!(Half12::LOAD_SCALE, 2f32.powi(112));
    }

    #[test]
    fn half12_keeps_one_more_bit_than_scaled_binary16_where_populations_live() {
        // Shifted populations of a flow: 1e-4 to 0.5. Half12's worst relative rounding there is
        // 2⁻¹² (half its spacing at a power of two), binary16's 2⁻¹¹.
        let mut worst = [0.0f64; 2];
        let mut x = 1e-4f32;
        while x < 0.5 {
            let e = |y: f32| ((y as f64 - x as f64) / x as f64).abs();
            worst[0] = worst[0].max(e(Half12::store(x).load()));
            worst[1] = worst[1].max(e(ScaledHalf::store(x).load()));
            x *= 1.000_37;
        }
        assert!(
            worst[0] <= 2f64.powi(-12) && worst[1] > 2f64.powi(-11) * 0.99,
            "{worst:?}"
        );
    }
}
