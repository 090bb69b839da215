//! The D3Q19 lattice: velocities, weights, opposites and the MRT moment basis, in the one order every
//! module and every kernel depends on.
//!
//! There is no common direction order in the literature, only a consistent one. This table is the
//! single source of truth: the CPU module indexes it directly and the CUDA kernels receive it through the
//! generated prelude (`thelma_compute::cuda::prelude`), so changing the order here changes it everywhere.
//!
//! Order: 0 is the rest population; 1–6 the axis directions as ± pairs (+x, −x, +y, −y, +z, −z);
//! 7–18 the face diagonals, again as ± pairs. Every odd index `i` has its opposite at `i + 1`.

/// Number of discrete velocities.
pub const Q: usize = 19;

/// Discrete velocities `c_i`, in lattice units.
pub const C: [[i32; 3]; Q] = [
    [0, 0, 0],
    [1, 0, 0],
    [-1, 0, 0],
    [0, 1, 0],
    [0, -1, 0],
    [0, 0, 1],
    [0, 0, -1],
    [1, 1, 0],
    [-1, -1, 0],
    [1, -1, 0],
    [-1, 1, 0],
    [1, 0, 1],
    [-1, 0, -1],
    [1, 0, -1],
    [-1, 0, 1],
    [0, 1, 1],
    [0, -1, -1],
    [0, 1, -1],
    [0, -1, 1],
];

/// Quadrature weights `w_i`: 1/3 at rest, 1/18 on the axes, 1/36 on the diagonals.
pub const W: [f64; Q] = [
    1.0 / 3.0,
    1.0 / 18.0,
    1.0 / 18.0,
    1.0 / 18.0,
    1.0 / 18.0,
    1.0 / 18.0,
    1.0 / 18.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
];

/// `OPP[i]` is the index of `−c_i`.
pub const OPP: [usize; Q] = [
    0, 2, 1, 4, 3, 6, 5, 8, 7, 10, 9, 12, 11, 14, 13, 16, 15, 18, 17,
];

/// The five directions with `c_z = +1`: the populations that cross a slab's top face upwards.
pub const UP: [usize; 5] = [5, 11, 14, 15, 18];
/// The five directions with `c_z = −1`: the populations that cross a slab's bottom face downwards.
pub const DOWN: [usize; 5] = [6, 12, 13, 16, 17];

/// Squared speed of sound, `c_s² = 1/3`.
pub const CS2: f64 = 1.0 / 3.0;

/// Number of moments of the MRT basis (one per velocity).
pub const NM: usize = Q;

/// Names of the moments of d'Humières et al. (2002), in the row order of [`M`].
pub const MOMENT_NAMES: [&str; NM] = [
    "rho", "e", "epsilon", "jx", "qx", "jy", "qy", "jz", "qz", "3pxx", "3pixx", "pww", "piww",
    "pxy", "pyz", "pxz", "mx", "my", "mz",
];

/// Value of row `k` of the d'Humières (2002) D3Q19 moment matrix at velocity `c`.
///
/// The rows are polynomials of the velocity, so they hold for any direction order:
/// ρ, e = 19c² − 30, ε = (21c⁴ − 53c² + 24)/2, j, q = (5c² − 9)c, 3p_xx = 3c_x² − c², 3π_xx =
/// (3c² − 5)(3c_x² − c²), p_ww = c_y² − c_z², π_ww = (3c² − 5)(c_y² − c_z²), p_xy, p_yz, p_xz, and
/// the third-order m_x = (c_y² − c_z²)c_x, m_y = (c_z² − c_x²)c_y, m_z = (c_x² − c_y²)c_z.
const fn moment_row(k: usize, c: [i32; 3]) -> i32 {
    let [x, y, z] = c;
    let c2 = x * x + y * y + z * z;
    match k {
        0 => 1,
        1 => 19 * c2 - 30,
        2 => (21 * c2 * c2 - 53 * c2 + 24) / 2,
        3 => x,
        4 => (5 * c2 - 9) * x,
        5 => y,
        6 => (5 * c2 - 9) * y,
        7 => z,
        8 => (5 * c2 - 9) * z,
        9 => 3 * x * x - c2,
        10 => (3 * c2 - 5) * (3 * x * x - c2),
        11 => y * y - z * z,
        12 => (3 * c2 - 5) * (y * y - z * z),
        13 => x * y,
        14 => y * z,
        15 => x * z,
        16 => (y * y - z * z) * x,
        17 => (z * z - x * x) * y,
        18 => (x * x - y * y) * z,
        _ => panic!("moment index out of range"),
    }
}

const fn build_m() -> [[i32; Q]; NM] {
    let mut m = [[0; Q]; NM];
    let mut k = 0;
    while k < NM {
        let mut i = 0;
        while i < Q {
            m[k][i] = moment_row(k, C[i]);
            i += 1;
        }
        k += 1;
    }
    m
}

/// The MRT moment matrix `M` (integers): `m_k = Σ_i M[k][i] f_i`. Rows are mutually orthogonal.
pub const M: [[i32; Q]; NM] = build_m();

const fn build_norms() -> [i32; NM] {
    let mut n = [0; NM];
    let mut k = 0;
    while k < NM {
        let mut i = 0;
        while i < Q {
            n[k] += M[k][i] * M[k][i];
            i += 1;
        }
        k += 1;
    }
    n
}

/// Squared norms of the rows of `M`: since the rows are orthogonal, `M⁻¹ = Mᵀ · diag(1 / NORM2)`.
pub const NORM2: [i32; NM] = build_norms();

/// Moment indices of the conserved quantities (ρ, j_x, j_y, j_z), whose relaxation rate is irrelevant.
pub const CONSERVED: [usize; 4] = [0, 3, 5, 7];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_sum_to_one_and_second_moment_is_cs2() {
        let s: f64 = W.iter().sum();
        assert!((s - 1.0).abs() < 1e-15);
        for a in 0..3 {
            for b in 0..3 {
                let m: f64 = (0..Q).map(|i| W[i] * (C[i][a] * C[i][b]) as f64).sum();
                let expect = if a == b { CS2 } else { 0.0 };
                assert!((m - expect).abs() < 1e-15, "second moment {a}{b} = {m}");
            }
        }
    }

    #[test]
    fn opposites_are_negated_velocities() {
        for i in 0..Q {
            let o = OPP[i];
            assert_eq!(OPP[o], i);
            for a in 0..3 {
                assert_eq!(C[o][a], -C[i][a]);
            }
        }
    }

    #[test]
    fn crossing_sets_are_exactly_the_vertical_directions() {
        for i in 0..Q {
            assert_eq!(UP.contains(&i), C[i][2] == 1, "direction {i}");
            assert_eq!(DOWN.contains(&i), C[i][2] == -1, "direction {i}");
        }
        for (u, d) in UP.iter().zip(DOWN.iter()) {
            // Each downward direction is the opposite of the upward one in the same slot.
            assert_eq!(OPP[*u], *d);
        }
    }

    #[test]
    fn moment_matrix_rows_are_orthogonal_and_match_published_norms() {
        for k in 0..NM {
            for l in 0..NM {
                let dot: i32 = (0..Q).map(|i| M[k][i] * M[l][i]).sum();
                if k != l {
                    assert_eq!(dot, 0, "rows {k} and {l}");
                }
            }
        }
        // Row norms listed by d'Humières et al. (2002), Appendix A.
        assert_eq!(
            NORM2,
            [19, 2394, 252, 10, 40, 10, 40, 10, 40, 36, 72, 12, 24, 4, 4, 4, 8, 8, 8]
        );
    }
}
