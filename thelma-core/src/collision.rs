//! Equilibrium and the two collision operators, BGK and MRT (d'Humières et al. 2002), for one node.
//!
//! These functions are the reference the CUDA kernels are checked against: the CPU module calls them
//! node by node (they inline into its vectorised row loop), and the generated kernel prelude carries the
//! same rates. Both operators conserve mass and momentum exactly in exact arithmetic; with every MRT
//! rate equal to ω the MRT operator is BGK, because the equilibrium moments below are the moments of
//! the BGK equilibrium (d'Humières' free parameters ω_ε = 3, ω_εj = −11/2, ω_xx = −1/2, with j·j/ρ).

use serde::{Deserialize, Serialize};

use std::ops::{Add, Div, Mul, Neg, Sub};

use seq_macro::seq;

use crate::lattice::{C, CONSERVED, M, NM, NORM2, Q, W};
use crate::real::Real;

/// The arithmetic the collision operators are written in: a scalar (`f32`, `f64`) or a bundle of lanes
/// (the CPU module's vectors of nodes along x). Only `+ − × ÷` and constants are needed, so one source
/// of the collision maths serves the scalar reference, the vectorised CPU loop and the tests.
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
}

impl Arith for f32 {
    type Scalar = f32;
    #[inline(always)]
    fn splat(s: f32) -> Self {
        s
    }
}

impl Arith for f64 {
    type Scalar = f64;
    #[inline(always)]
    fn splat(s: f64) -> Self {
        s
    }
}

/// Density and velocity of one node.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Moments<T> {
    pub rho: T,
    pub u: [T; 3],
}

/// ρ and the momentum j = Σ c_i f_i.
// `seq!` unrolls `2 * P + 1` into literal index arithmetic such as `2 * 0 + 1`.
#[allow(clippy::identity_op, clippy::erasing_op)]
#[inline(always)]
pub fn density_momentum<V: Arith>(f: &[V; Q]) -> (V, [V; 3]) {
    let mut rho = f[0];
    let mut j = [None, None, None];
    seq!(P in 0..9 {
        rho = rho + (f[2 * P + 1] + f[2 * P + 2]);
        let d = f[2 * P + 1] - f[2 * P + 2];
        j[0] = term(j[0], C[2 * P + 1][0], d);
        j[1] = term(j[1], C[2 * P + 1][1], d);
        j[2] = term(j[2], C[2 * P + 1][2], d);
    });
    let zero = V::c(0.0);
    (
        rho,
        [
            j[0].unwrap_or(zero),
            j[1].unwrap_or(zero),
            j[2].unwrap_or(zero),
        ],
    )
}

/// ρ and u = j/ρ of a set of populations.
#[inline(always)]
pub fn moments<V: Arith>(f: &[V; Q]) -> Moments<V> {
    let (rho, j) = density_momentum(f);
    let inv = V::c(1.0) / rho;
    Moments {
        rho,
        u: [j[0] * inv, j[1] * inv, j[2] * inv],
    }
}

/// The second-order equilibrium `f_i = w_i ρ (1 + 3 c·u + 9/2 (c·u)² − 3/2 u²)`, computed per opposite
/// pair: the even part `w ρ (1 + 9/2 (c·u)² − 3/2 u²)` is shared, the odd part `3 w ρ c·u` flips sign.
// `seq!` unrolls `2 * P + 1` into literal index arithmetic such as `2 * 0 + 1`.
#[allow(clippy::identity_op, clippy::erasing_op)]
#[inline(always)]
pub fn equilibrium<V: Arith>(rho: V, u: [V; 3]) -> [V; Q] {
    let u2 = u[0] * u[0] + u[1] * u[1] + u[2] * u[2];
    let base = V::c(1.0) - V::c(1.5) * u2;
    let mut f = [rho; Q];
    f[0] = V::c(W[0]) * rho * base;
    seq!(P in 0..9 {
        let cu = term(term(term(None, C[2 * P + 1][0], u[0]), C[2 * P + 1][1], u[1]), C[2 * P + 1][2], u[2])
            .unwrap_or(V::c(0.0));
        let wr = V::c(W[2 * P + 1]) * rho;
        let even = wr * (base + V::c(4.5) * cu * cu);
        let odd = wr * (V::c(3.0) * cu);
        f[2 * P + 1] = even + odd;
        f[2 * P + 2] = even - odd;
    });
    f
}

/// Which collision operator a run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Collision {
    /// Single relaxation time (Bhatnagar–Gross–Krook).
    Bgk,
    /// Multiple relaxation times, d'Humières et al. (2002).
    #[default]
    Mrt,
}

impl Collision {
    pub fn name(self) -> &'static str {
        match self {
            Collision::Bgk => "bgk",
            Collision::Mrt => "mrt",
        }
    }
}

/// The relaxation rates of the non-shear MRT moments. The shear rate (`s_ν`, moments 3p_xx, p_ww, p_xy,
/// p_yz, p_xz) always comes from the viscosity: `s_ν = 1/τ`, `τ = 3ν + 1/2`.
///
/// Defaults are those of d'Humières et al. (2002), §4: s_e = 1.19, s_ε = s_π = 1.4, s_q = 1.2,
/// s_m = 1.98. The bulk viscosity is `ζ = (2/9)(1/s_e − 1/2)`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MrtRates {
    /// Energy `e` (sets the bulk viscosity).
    pub s_e: f64,
    /// Energy square `ε`.
    pub s_epsilon: f64,
    /// Energy fluxes `q`.
    pub s_q: f64,
    /// Fourth-order `π_xx`, `π_ww`.
    pub s_pi: f64,
    /// Third-order `m`.
    pub s_m: f64,
}

impl Default for MrtRates {
    fn default() -> Self {
        Self {
            s_e: 1.19,
            s_epsilon: 1.4,
            s_q: 1.2,
            s_pi: 1.4,
            s_m: 1.98,
        }
    }
}

impl MrtRates {
    /// All rates equal to `omega`: the MRT operator then reduces to BGK.
    pub fn uniform(omega: f64) -> Self {
        Self {
            s_e: omega,
            s_epsilon: omega,
            s_q: omega,
            s_pi: omega,
            s_m: omega,
        }
    }

    /// The diagonal of the relaxation matrix `S` in moment order, with the shear rate `omega`.
    /// Conserved moments get 0.
    pub fn diagonal(&self, omega: f64) -> [f64; NM] {
        [
            0.0,
            self.s_e,
            self.s_epsilon,
            0.0,
            self.s_q,
            0.0,
            self.s_q,
            0.0,
            self.s_q,
            omega,
            self.s_pi,
            omega,
            self.s_pi,
            omega,
            omega,
            omega,
            self.s_m,
            self.s_m,
            self.s_m,
        ]
    }

    /// Checks every rate lies in the linearly stable interval (0, 2).
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("s_e", self.s_e),
            ("s_epsilon", self.s_epsilon),
            ("s_q", self.s_q),
            ("s_pi", self.s_pi),
            ("s_m", self.s_m),
        ] {
            if !(v > 0.0 && v < 2.0) {
                return Err(format!("MRT rate {name} = {v} must lie in (0, 2)"));
            }
        }
        Ok(())
    }
}

/// The equilibrium moments of d'Humières et al. (2002) in the row order of [`M`], for density `rho`
/// and momentum `j`, using `j·j/ρ` (so that they equal the moments of [`equilibrium`]).
#[inline(always)]
pub fn equilibrium_moments<V: Arith>(rho: V, j: [V; 3]) -> [V; NM] {
    let inv = V::c(1.0) / rho;
    let (jx, jy, jz) = (j[0], j[1], j[2]);
    let jj = (jx * jx + jy * jy + jz * jz) * inv;
    let pxx3 = (V::c(3.0) * jx * jx) * inv - jj;
    let pww = (jy * jy - jz * jz) * inv;
    let half = V::c(0.5);
    [
        rho,
        V::c(-11.0) * rho + V::c(19.0) * jj,
        V::c(3.0) * rho - V::c(5.5) * jj,
        jx,
        V::c(-2.0 / 3.0) * jx,
        jy,
        V::c(-2.0 / 3.0) * jy,
        jz,
        V::c(-2.0 / 3.0) * jz,
        pxx3,
        -half * pxx3,
        pww,
        -half * pww,
        jx * jy * inv,
        jy * jz * inv,
        jx * jz * inv,
        V::c(0.0),
        V::c(0.0),
        V::c(0.0),
    ]
}

/// Precomputed per-run constants of a collision operator, in the run's precision.
#[derive(Clone, Copy, Debug)]
pub struct CollisionParams<T> {
    pub kind: Collision,
    /// The shear rate ω = 1/τ.
    pub omega: T,
    /// `s_k / ‖M_k‖²` for every moment (0 for the conserved ones); MRT only.
    pub mrt_scaled: [T; NM],
}

impl<T: Real> CollisionParams<T> {
    pub fn new(kind: Collision, omega: f64, rates: &MrtRates) -> Self {
        let s = rates.diagonal(omega);
        let mut mrt_scaled = [T::zero(); NM];
        for k in 0..NM {
            mrt_scaled[k] = T::of(s[k] / NORM2[k] as f64);
        }
        Self {
            kind,
            omega: T::of(omega),
            mrt_scaled,
        }
    }

    /// Relaxes `f` in place towards equilibrium.
    #[inline(always)]
    pub fn collide(&self, f: &mut [T; Q])
    where
        T: Arith<Scalar = T>,
    {
        match self.kind {
            Collision::Bgk => collide_bgk(f, self.omega),
            Collision::Mrt => collide_mrt(f, &self.mrt_scaled),
        }
    }
}

/// BGK: `f ← f − ω (f − f_eq)`.
#[inline(always)]
pub fn collide_bgk<V: Arith>(f: &mut [V; Q], omega: V::Scalar) {
    let m = moments(f);
    let feq = equilibrium(m.rho, m.u);
    let omega = V::splat(omega);
    seq!(I in 0..19 {
        f[I] = f[I] - omega * (f[I] - feq[I]);
    });
}

/// `acc + c·x` where `acc` may still be empty (so no `0 + x` is ever computed), for a constant `c`.
#[inline(always)]
fn term<V: Arith>(acc: Option<V>, c: i32, x: V) -> Option<V> {
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

const fn build_even() -> [bool; NM] {
    let mut e = [true; NM];
    let mut k = 0;
    while k < NM {
        let mut p = 0;
        while p < 9 {
            let (a, b) = (M[k][2 * p + 1], M[k][2 * p + 2]);
            if a == b {
                // even on this pair
            } else if a == -b {
                e[k] = false;
            } else {
                panic!("moment row is neither even nor odd");
            }
            p += 1;
        }
        k += 1;
    }
    e
}

/// Whether row `k` of `M` is even (`M[k][ī] = M[k][i]`) or odd (`M[k][ī] = −M[k][i]`) under
/// velocity reversal. Checked at compile time: every row is one or the other.
const EVEN: [bool; NM] = build_even();

/// MRT: `f ← f − M⁻¹ S (M f − m_eq)`, with `M⁻¹ = Mᵀ diag(1/‖M_k‖²)` and `scaled[k] = s_k/‖M_k‖²`.
///
/// Works on the sums and differences of opposite pairs (`i`, `i + 1`): even moments depend on the
/// sums only, odd moments on the differences only, which halves both transforms. The matrix is
/// applied with its integer entries, unrolled, so zeros and ±1 cost nothing; the conserved moments
/// (ρ, j) drop out of the back-transform.
// `seq!` unrolls `2 * P + 1` into literal index arithmetic such as `2 * 0 + 1`.
#[allow(clippy::identity_op, clippy::erasing_op)]
#[inline(always)]
pub fn collide_mrt<V: Arith>(f: &mut [V; Q], scaled: &[V::Scalar; NM]) {
    let mut sum = [f[0]; 9];
    let mut dif = [f[0]; 9];
    seq!(P in 0..9 {
        sum[P] = f[2 * P + 1] + f[2 * P + 2];
        dif[P] = f[2 * P + 1] - f[2 * P + 2];
    });
    let mut m = [f[0]; NM];
    seq!(K in 0..19 {
        let mut acc = term(None, M[K][0], f[0]);
        seq!(P in 0..9 {
            acc = term(acc, M[K][2 * P + 1], if EVEN[K] { sum[P] } else { dif[P] });
        });
        m[K] = acc.unwrap_or(V::c(0.0));
    });
    let meq = equilibrium_moments(m[0], [m[3], m[5], m[7]]);
    let mut dev = [f[0]; NM];
    seq!(K in 0..19 {
        if !is_conserved(K) {
            dev[K] = (m[K] - meq[K]) * V::splat(scaled[K]);
        }
    });
    let mut rest = None;
    seq!(K in 0..19 {
        if !is_conserved(K) {
            rest = term(rest, M[K][0], dev[K]);
        }
    });
    if let Some(r) = rest {
        f[0] = f[0] - r;
    }
    seq!(P in 0..9 {
        let mut even = None;
        let mut odd = None;
        seq!(K in 0..19 {
            if !is_conserved(K) {
                if EVEN[K] {
                    even = term(even, M[K][2 * P + 1], dev[K]);
                } else {
                    odd = term(odd, M[K][2 * P + 1], dev[K]);
                }
            }
        });
        let e = even.unwrap_or(V::c(0.0));
        let o = odd.unwrap_or(V::c(0.0));
        f[2 * P + 1] = f[2 * P + 1] - (e + o);
        f[2 * P + 2] = f[2 * P + 2] - (e - o);
    });
}

/// Whether moment `k` is conserved by collision (its deviation is zero and skipped).
#[inline(always)]
const fn is_conserved(k: usize) -> bool {
    let mut c = 0;
    while c < CONSERVED.len() {
        if CONSERVED[c] == k {
            return true;
        }
        c += 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn random_populations(seed: &[f64; Q], rho: f64, u: [f64; 3]) -> [f64; Q] {
        // A perturbed equilibrium: positive, with non-equilibrium parts in every moment.
        let feq = equilibrium(rho, u);
        let mut f = [0.0; Q];
        for i in 0..Q {
            f[i] = feq[i] * (1.0 + 0.3 * seed[i]);
        }
        f
    }

    fn conserved(f: &[f64; Q]) -> [f64; 4] {
        let mut r = [0.0; 4];
        for i in 0..Q {
            r[0] += f[i];
            for a in 0..3 {
                r[a + 1] += C[i][a] as f64 * f[i];
            }
        }
        r
    }

    #[test]
    fn equilibrium_moments_are_the_moments_of_the_equilibrium() {
        for (rho, u) in [
            (1.0, [0.0, 0.0, 0.0]),
            (1.03, [0.05, -0.02, 0.08]),
            (0.97, [-0.1, 0.07, 0.01]),
        ] {
            let f = equilibrium(rho, u);
            let j = [rho * u[0], rho * u[1], rho * u[2]];
            let meq = equilibrium_moments(rho, j);
            for k in 0..NM {
                let mk: f64 = (0..Q).map(|i| M[k][i] as f64 * f[i]).sum();
                assert!(
                    (mk - meq[k]).abs() < 1e-13,
                    "moment {} : {mk} vs {}",
                    MOMENT_NAMES_T[k],
                    meq[k]
                );
            }
        }
    }
    const MOMENT_NAMES_T: [&str; NM] = crate::lattice::MOMENT_NAMES;

    #[test]
    fn rest_equilibrium_is_a_fixed_point_of_both_operators() {
        for kind in [Collision::Bgk, Collision::Mrt] {
            for omega in [0.6, 1.0, 1.9] {
                let p32 = CollisionParams::<f32>::new(kind, omega, &MrtRates::default());
                let mut f32s = equilibrium(1.0f32, [0.0; 3]);
                let before = f32s;
                p32.collide(&mut f32s);
                for i in 0..Q {
                    // f32 weights do not sum to exactly 1; a few ulps of the density stay.
                    assert!(
                        (f32s[i] - before[i]).abs() <= 1e-6 * before[i],
                        "{kind:?} f32 dir {i}"
                    );
                }
                let p64 = CollisionParams::<f64>::new(kind, omega, &MrtRates::default());
                let mut f = equilibrium(1.0f64, [0.0; 3]);
                let before = f;
                p64.collide(&mut f);
                for i in 0..Q {
                    assert!((f[i] - before[i]).abs() <= 1e-15, "{kind:?} f64 dir {i}");
                }
            }
        }
    }

    #[test]
    fn moving_equilibrium_is_a_fixed_point_of_mrt() {
        let u = [0.05, -0.03, 0.02];
        let p = CollisionParams::<f64>::new(Collision::Mrt, 1.7, &MrtRates::default());
        let mut f = equilibrium(1.02, u);
        let before = f;
        p.collide(&mut f);
        for i in 0..Q {
            assert!((f[i] - before[i]).abs() < 1e-15, "dir {i}");
        }
    }

    proptest! {
        #[test]
        fn collision_conserves_mass_and_momentum(
            seed in prop::array::uniform19(-1.0f64..1.0),
            rho in 0.8f64..1.2,
            ux in -0.1f64..0.1, uy in -0.1f64..0.1, uz in -0.1f64..0.1,
            omega in 0.5f64..1.99,
            mrt in any::<bool>(),
        ) {
            let f0 = random_populations(&seed, rho, [ux, uy, uz]);
            let kind = if mrt { Collision::Mrt } else { Collision::Bgk };
            let p = CollisionParams::<f64>::new(kind, omega, &MrtRates::default());
            let mut f = f0;
            p.collide(&mut f);
            let a = conserved(&f0);
            let b = conserved(&f);
            for k in 0..4 {
                prop_assert!((a[k] - b[k]).abs() < 1e-14, "invariant {} {} -> {}", k, a[k], b[k]);
            }
        }

        #[test]
        fn mrt_with_all_rates_equal_is_bgk(
            seed in prop::array::uniform19(-1.0f64..1.0),
            rho in 0.8f64..1.2,
            ux in -0.1f64..0.1, uy in -0.1f64..0.1, uz in -0.1f64..0.1,
            omega in 0.5f64..1.99,
        ) {
            let f0 = random_populations(&seed, rho, [ux, uy, uz]);
            let mut bgk = f0;
            collide_bgk(&mut bgk, omega);
            let p = CollisionParams::<f64>::new(Collision::Mrt, omega, &MrtRates::uniform(omega));
            let mut mrt = f0;
            p.collide(&mut mrt);
            for i in 0..Q {
                prop_assert!((bgk[i] - mrt[i]).abs() < 1e-14, "dir {}: {} vs {}", i, bgk[i], mrt[i]);
            }
        }
    }

    /// One node collided by hand: f = w_i(1 + δ_i), with δ = +0.1 on direction 1 (+x) and −0.1 on
    /// direction 7 (+x+y) and zero elsewhere.
    ///
    /// ρ = 1 + 0.1/18 − 0.1/36 = 1 + 1/360 = 361/360.
    /// j = (0.1/18 − 0.1/36, −0.1/36, 0) = (1/360, −1/360, 0); u = j/ρ = (1/361, −1/361, 0).
    /// For BGK with ω = 1 the result is the equilibrium of (ρ, u); in direction 0:
    /// f_0' = (1/3) ρ (1 − 1.5 u²) = (1/3)(361/360)(1 − 3/361²).
    /// In direction 1 (c·u = 1/361): f_1' = (1/18)(361/360)(1 + 3/361 + 4.5/361² − 3/361²).
    #[test]
    fn one_node_collision_matches_hand_computation() {
        let mut f = W;
        f[1] *= 1.1;
        f[7] *= 0.9;
        collide_bgk(&mut f, 1.0);
        let rho = 361.0 / 360.0;
        let e0 = (1.0 / 3.0) * rho * (1.0 - 3.0 / (361.0 * 361.0));
        let e1 = (1.0 / 18.0) * rho * (1.0 + 3.0 / 361.0 + 1.5 / (361.0 * 361.0));
        assert!((f[0] - e0).abs() < 1e-15, "{} vs {e0}", f[0]);
        assert!((f[1] - e1).abs() < 1e-15, "{} vs {e1}", f[1]);

        // MRT on the same node: only the perturbed moments relax. Compute the expected post-collision
        // value of direction 2 (−x) independently through the dense matrix inverse.
        let mut g = W;
        g[1] *= 1.1;
        g[7] *= 0.9;
        let rates = MrtRates::default();
        let omega = 1.25;
        let s = rates.diagonal(omega);
        let m: Vec<f64> = (0..NM)
            .map(|k| (0..Q).map(|i| M[k][i] as f64 * g[i]).sum())
            .collect();
        // The equilibrium moments of d'Humières et al. (2002), eq. (B1) with ω_ε = 3, ω_εj = −11/2,
        // ω_xx = −1/2, written out for this node: ρ = 361/360, j = (0.1/36, −0.1/36, 0).
        let rho = 361.0 / 360.0;
        let (jx, jy, jz) = (0.1 / 36.0, -0.1 / 36.0, 0.0);
        let jj = (jx * jx + jy * jy + jz * jz) / rho;
        let pxx3 = (2.0 * jx * jx - jy * jy - jz * jz) / rho;
        let pww = (jy * jy - jz * jz) / rho;
        let meq = [
            rho,
            -11.0 * rho + 19.0 * jj,
            3.0 * rho - 5.5 * jj,
            jx,
            -2.0 / 3.0 * jx,
            jy,
            -2.0 / 3.0 * jy,
            jz,
            -2.0 / 3.0 * jz,
            pxx3,
            -0.5 * pxx3,
            pww,
            -0.5 * pww,
            jx * jy / rho,
            jy * jz / rho,
            jx * jz / rho,
            0.0,
            0.0,
            0.0,
        ];
        for (k, want) in [(0, rho), (3, jx), (5, jy), (7, jz)] {
            assert!(
                (m[k] - want).abs() < 1e-15,
                "conserved moment {k}: {}",
                m[k]
            );
        }
        let mstar: Vec<f64> = (0..NM).map(|k| m[k] - s[k] * (m[k] - meq[k])).collect();
        let expect: Vec<f64> = (0..Q)
            .map(|i| {
                (0..NM)
                    .map(|k| M[k][i] as f64 * mstar[k] / NORM2[k] as f64)
                    .sum()
            })
            .collect();
        let p = CollisionParams::<f64>::new(Collision::Mrt, omega, &rates);
        p.collide(&mut g);
        for i in 0..Q {
            assert!(
                (g[i] - expect[i]).abs() < 1e-15,
                "dir {i}: {} vs {}",
                g[i],
                expect[i]
            );
        }
    }
}
