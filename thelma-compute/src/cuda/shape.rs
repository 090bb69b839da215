//! How the collision kernel is launched: the block shape and the register plan, measured per
//! precision (PERFORMANCE.md).

use thelma_core::Precision;

/// Threads per block along x of the collision kernel (TheLMA's 2^n layout; measured in PERFORMANCE.md).
pub const DEFAULT_BLOCK_X: u32 = 128;
/// Resident threads per multiprocessor the f32 collision kernel's registers are planned for
/// (`__launch_bounds__`): 1,024 caps it at 64 registers, which measured faster than the 72 the
/// compiler picks alone, and faster than 40 (PERFORMANCE.md).
pub const RESIDENT_THREADS_F32: u32 = 1024;
/// The same for f64, whose collision needs about 108 registers: 512 threads (a cap of 128) keeps it
/// from spilling (a 64-register cap cost 40 % on the H100).
pub const RESIDENT_THREADS_F64: u32 = 512;

/// The same for the f32 step with a temperature lattice (the fused flow and thermal step), whose 64
/// registers under the flow's plan spilled: 896 threads (a cap of 72) measured fastest of 1,024, 896
/// and 768 on an H100 with blocks of 128 (PERFORMANCE.md). Its f64 step keeps the flow's plan.
pub const RESIDENT_THREADS_THERMAL_F32: u32 = 896;

/// The same for that step under the Smagorinsky model (the eddy viscosity's stress and square root
/// beside both collisions): 768 threads (a cap of 80 registers) measured fastest of 640, 768, 896
/// and 1,024 on an H200 for MRT (+9 % over 896) and BGK (+13 %); TRT lost 0.8 % and shares it
/// (PERFORMANCE.md).
pub const RESIDENT_THREADS_THERMAL_LES_F32: u32 = 768;

/// The same for f16 storage (collided in f32): its loads and stores carry half the bytes, so the
/// bandwidth needs more of them in flight. 1,280 threads (a cap of 48 registers) measured fastest
/// of 1,024 (62 registers), 1,152 (56), 1,280, 1,408 (40) and 2,048 (32) on an H100 at 256³–512³:
/// MRT 86.8 % of the 77 B/node roofline at 512³ against 81.9 % (PERFORMANCE.md).
pub const RESIDENT_THREADS_F16: u32 = 1280;

/// Launch shape of the collision kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchShape {
    /// Threads per block along x (a power of two, at most 1024).
    pub block_x: u32,
    /// `__launch_bounds__` minimum blocks per multiprocessor; `None`: the measured default of the
    /// precision ([`RESIDENT_THREADS_F32`], [`RESIDENT_THREADS_THERMAL_F32`],
    /// [`RESIDENT_THREADS_THERMAL_LES_F32`], [`RESIDENT_THREADS_F16`] or [`RESIDENT_THREADS_F64`]
    /// resident threads, in whole blocks: 896 threads are 7 blocks of 128
    /// but 3 of 256).
    pub min_blocks: Option<u32>,
}

impl LaunchShape {
    /// Blocks of `block_x` threads with the default register plan.
    pub fn for_block(block_x: u32) -> Self {
        Self {
            block_x,
            min_blocks: None,
        }
    }

    /// The minimum blocks per multiprocessor for `precision`.
    pub fn min_blocks_for(&self, precision: Precision) -> u32 {
        self.min_blocks_of(precision, false, false)
    }

    /// The minimum blocks per multiprocessor for the step of `precision`, with a temperature lattice
    /// or not, under the Smagorinsky model (`les`) or not.
    pub fn min_blocks_of(&self, precision: Precision, thermal: bool, les: bool) -> u32 {
        let threads = match (precision, thermal) {
            (Precision::F32, false) => RESIDENT_THREADS_F32,
            (Precision::F16 | Precision::F16c, false) => RESIDENT_THREADS_F16,
            // A temperature lattice is refused with 16-bit storage (CaseConfig::validate).
            (Precision::F32 | Precision::F16 | Precision::F16c, true) if les => {
                RESIDENT_THREADS_THERMAL_LES_F32
            }
            (Precision::F32 | Precision::F16 | Precision::F16c, true) => {
                RESIDENT_THREADS_THERMAL_F32
            }
            (Precision::F64, _) => RESIDENT_THREADS_F64,
        };
        self.min_blocks
            .unwrap_or(threads / self.block_x.max(1))
            .max(1)
    }
}

impl Default for LaunchShape {
    fn default() -> Self {
        Self::for_block(DEFAULT_BLOCK_X)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The measured plans in blocks of 128: 8 in f32, 7 with a temperature lattice, 6 with one
    /// under LES, 10 in 16 bits, 4 in f64; LES alone keeps the flow's plan; an explicit
    /// `min_blocks` wins, and blocks of 256 halve the counts.
    #[test]
    fn each_step_takes_its_measured_register_plan() {
        let s = LaunchShape::default();
        let plans = [
            (Precision::F32, false, false, 8),
            (Precision::F32, false, true, 8),
            (Precision::F32, true, false, 7),
            (Precision::F32, true, true, 6),
            (Precision::F16, false, false, 10),
            (Precision::F16c, false, true, 10),
            (Precision::F64, true, true, 4),
        ];
        for (p, thermal, les, blocks) in plans {
            assert_eq!(
                s.min_blocks_of(p, thermal, les),
                blocks,
                "{p:?} {thermal} {les}"
            );
        }
        let wide = LaunchShape::for_block(256);
        assert_eq!(wide.min_blocks_of(Precision::F32, true, true), 3);
        let fixed = LaunchShape {
            block_x: 128,
            min_blocks: Some(5),
        };
        assert_eq!(fixed.min_blocks_of(Precision::F32, true, true), 5);
    }
}
