//! How the collision kernel is launched: the block shape and the register plan, measured per
//! precision (PERFORMANCE.md).

use thelma_core::physics::Collision;
use thelma_core::Precision;

/// Threads per block along x of the collision kernel (TheLMA's 2^n layout; measured in PERFORMANCE.md).
pub const DEFAULT_BLOCK_X: u32 = 128;
/// The same for the f32 step with a temperature lattice: blocks of one warp measured 2.4–3.8 %
/// faster than blocks of 128 at 256³ for every operator, with and without LES, and 10 % faster on
/// the ventilated room, whose 160-node rows blocks of 128 cover with 256 threads (one H200,
/// PERFORMANCE.md). The flow's steps measured within ±1.1 % of 128 at 256³–512³ in f32 and lost
/// 2.5–5 % in 16 bits and 9–18 % in place, so they keep 128.
pub const BLOCK_X_THERMAL_F32: u32 = 32;
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

/// The same for that step under the Smagorinsky model with BGK (the eddy viscosity's stress and
/// square root beside both collisions): 768 threads (a cap of 80 registers) measured fastest of
/// 640, 768, 896 and 1,024 on an H200 in blocks of 128 (+13 % over 896), and again in blocks of 32
/// (640 lost 6.4 % at 256³) (PERFORMANCE.md).
pub const RESIDENT_THREADS_THERMAL_LES_F32: u32 = 768;

/// The same under the Smagorinsky model with an operator other than BGK (MRT, TRT) in blocks of
/// one warp ([`BLOCK_X_THERMAL_F32`]), whose moments spill under the cap of 80 registers (Nsight Compute: 0.65 million local-memory requests per step of the ventilated room):
/// 640 threads (a cap of 96) in blocks of 32 on an H200, against 768: the room +4.1 %, 256³ MRT
/// +0.5 %, TRT +16.5 %; 512 threads gained nothing more on the room (PERFORMANCE.md). In wider
/// blocks (an explicit `--block`) they keep 768, which measured faster in blocks of 128.
pub const RESIDENT_THREADS_THERMAL_LES_MOMENTS_F32: u32 = 640;

/// The same for f16 storage (collided in f32): its loads and stores carry half the bytes, so the
/// bandwidth needs more of them in flight. 1,280 threads (a cap of 48 registers) measured fastest
/// of 1,024 (62 registers), 1,152 (56), 1,280, 1,408 (40) and 2,048 (32) on an H100 at 256³–512³:
/// MRT 86.8 % of the 77 B/node roofline at 512³ against 81.9 % (PERFORMANCE.md).
pub const RESIDENT_THREADS_F16: u32 = 1280;

/// The same for the coupled step in 16-bit storage (collided in f32, with or without LES): 1,024
/// threads measured fastest of 768, 896, 1,024 and 1,280 on an H200 in blocks of 32, on the
/// ventilated room (+8.9 % over 768) and at 256³ (MRT +2.0 % over 896) (PERFORMANCE.md).
pub const RESIDENT_THREADS_THERMAL_16: u32 = 1024;

/// Launch shape of the collision kernel; the default takes every step's measured block width and
/// register plan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchShape {
    /// Threads per block along x (a power of two, at most 1024); `None`: the measured default of
    /// the step ([`DEFAULT_BLOCK_X`], [`BLOCK_X_THERMAL_F32`]).
    pub block_x: Option<u32>,
    /// `__launch_bounds__` minimum blocks per multiprocessor; `None`: the measured default of the
    /// precision ([`RESIDENT_THREADS_F32`], [`RESIDENT_THREADS_THERMAL_F32`],
    /// [`RESIDENT_THREADS_THERMAL_LES_F32`], [`RESIDENT_THREADS_THERMAL_LES_MOMENTS_F32`],
    /// [`RESIDENT_THREADS_THERMAL_16`],
    /// [`RESIDENT_THREADS_F16`] or [`RESIDENT_THREADS_F64`]
    /// resident threads, in whole blocks: 896 threads are 7 blocks of 128, 28 of 32
    /// but 3 of 256).
    pub min_blocks: Option<u32>,
}

impl LaunchShape {
    /// Blocks of `block_x` threads with the default register plan.
    pub fn for_block(block_x: u32) -> Self {
        Self {
            block_x: Some(block_x),
            min_blocks: None,
        }
    }

    /// Threads per block along x of the step of `precision`, with a temperature lattice or not.
    pub fn block_x_of(&self, precision: Precision, thermal: bool) -> u32 {
        self.block_x.unwrap_or(match (precision, thermal) {
            (Precision::F32 | Precision::F16 | Precision::F16c, true) => BLOCK_X_THERMAL_F32,
            _ => DEFAULT_BLOCK_X,
        })
    }

    /// The minimum blocks per multiprocessor for `precision`.
    pub fn min_blocks_for(&self, precision: Precision) -> u32 {
        self.min_blocks_of(precision, false, None)
    }

    /// The minimum blocks per multiprocessor for the step of `precision`, with a temperature lattice
    /// or not, under the Smagorinsky model with the collision `les` or not (`None`).
    pub fn min_blocks_of(
        &self,
        precision: Precision,
        thermal: bool,
        les: Option<Collision>,
    ) -> u32 {
        let threads = match (precision, thermal) {
            (Precision::F32, false) => RESIDENT_THREADS_F32,
            (Precision::F16 | Precision::F16c, false) => RESIDENT_THREADS_F16,
            (Precision::F16 | Precision::F16c, true) => RESIDENT_THREADS_THERMAL_16,
            // Operators other than BGK (MRT, TRT) in blocks of one warp; 768 in wider blocks.
            (Precision::F32, true)
                if les.is_some_and(|c| c != Collision::BGK)
                    && self.block_x_of(precision, thermal) == BLOCK_X_THERMAL_F32 =>
            {
                RESIDENT_THREADS_THERMAL_LES_MOMENTS_F32
            }
            (Precision::F32, true) if les.is_some() => RESIDENT_THREADS_THERMAL_LES_F32,
            (Precision::F32, true) => RESIDENT_THREADS_THERMAL_F32,
            (Precision::F64, _) => RESIDENT_THREADS_F64,
        };
        self.min_blocks
            .unwrap_or(threads / self.block_x_of(precision, thermal).max(1))
            .max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The measured shapes: blocks of 128 with 8 of them resident in f32, 10 in 16 bits and 4 in
    /// f64 (LES alone keeps the flow's plan); blocks of 32 for the f32 step with a temperature
    /// lattice, 28 of them resident (896 threads), under LES 24 with BGK (768) and 20 with MRT or
    /// TRT (640; 768 in wider blocks), while the f64 one keeps the flow's shape. An explicit width keeps the thread counts (blocks of 256 halve those of 128);
    /// an explicit `min_blocks` wins.
    #[test]
    fn each_step_takes_its_measured_shape() {
        let s = LaunchShape::default();
        let (bgk, mrt, trt) = (
            Some(Collision::BGK),
            Some(Collision::MRT),
            Some(Collision::TRT),
        );
        let plans = [
            (Precision::F32, false, None, 128, 8),
            (Precision::F32, false, mrt, 128, 8),
            (Precision::F32, true, None, 32, 28),
            (Precision::F32, true, bgk, 32, 24),
            (Precision::F32, true, mrt, 32, 20),
            (Precision::F32, true, trt, 32, 20),
            (Precision::F16, false, None, 128, 10),
            (Precision::F16c, false, mrt, 128, 10),
            (Precision::F16, true, None, 32, 32),
            (Precision::F16c, true, mrt, 32, 32),
            (Precision::F64, false, None, 128, 4),
            (Precision::F64, true, bgk, 128, 4),
        ];
        for (p, thermal, les, width, blocks) in plans {
            assert_eq!(s.block_x_of(p, thermal), width, "{p:?} {thermal}");
            assert_eq!(
                s.min_blocks_of(p, thermal, les),
                blocks,
                "{p:?} {thermal} {les:?}"
            );
        }
        let narrow = LaunchShape::for_block(128);
        assert_eq!(narrow.block_x_of(Precision::F32, true), 128);
        assert_eq!(narrow.min_blocks_of(Precision::F32, true, bgk), 6);
        assert_eq!(narrow.min_blocks_of(Precision::F32, true, mrt), 6);
        let wide = LaunchShape::for_block(256);
        assert_eq!(wide.min_blocks_of(Precision::F32, true, bgk), 3);
        assert_eq!(wide.min_blocks_of(Precision::F32, false, None), 4);
        let fixed = LaunchShape {
            block_x: Some(128),
            min_blocks: Some(5),
        };
        assert_eq!(fixed.min_blocks_of(Precision::F32, true, mrt), 5);
    }
}
