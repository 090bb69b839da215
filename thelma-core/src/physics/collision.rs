//! Collision operators of the flow lattice (D3Q19): BGK, TRT and MRT, each with a Smagorinsky eddy
//! viscosity and a Guo body force as options, written once over [`Arith`] on weight-shifted
//! populations, and the registry that names them.
//!
//! **Shifted populations.** Every module stores and collides `g_i = f_i − w_i` (the deviation from
//! the rest state at ρ = 1), as the fastest GPU codes do: in f32 the values near the rest state keep
//! their full mantissa instead of losing it to the `w_i` they sit on, so mass is conserved to about
//! 1e-7 instead of drifting. The density is `ρ = 1 + δρ`, `δρ = Σ g_i`; the momentum `Σ c_i g_i`
//! equals `Σ c_i f_i`; the equilibrium is written out as `g_eq = f_eq − w` so that no `w_i` is ever
//! added and subtracted again; bounce-back is unchanged (`w_i = w_ī`).
//!
//! **One source for both modules.** The CPU module runs these functions on bundles of lanes; the
//! CUDA module runs them once on [`super::Sym`] values and prints what they recorded as the kernels'
//! collision (`thelma_compute::cuda::prelude`). A change here changes both, and a test evaluates the
//! printed code's recording against the scalar call bit for bit.

use seq_macro::seq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::arith::{term, Arith};
use super::d3q19::{C, CONSERVED, M, NM, NORM2, Q, W};
use super::error::PhysicsError;

/// The relaxation rates of the non-shear MRT moments. The shear rate (`s_ν`, moments 3p_xx, p_ww,
/// p_xy, p_yz, p_xz) always comes from the viscosity: `s_ν = 1/τ`, `τ = 3ν + 1/2`.
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
        let (e, eps, q, pi, m) = (self.s_e, self.s_epsilon, self.s_q, self.s_pi, self.s_m);
        [
            0.0, e, eps, 0.0, q, 0.0, q, 0.0, q, omega, pi, omega, pi, omega, omega, omega, m, m, m,
        ]
    }

    /// Checks every rate lies in the linearly stable interval (0, 2).
    pub fn validate(&self) -> Result<(), PhysicsError> {
        for (name, v) in [
            ("s_e", self.s_e),
            ("s_epsilon", self.s_epsilon),
            ("s_q", self.s_q),
            ("s_pi", self.s_pi),
            ("s_m", self.s_m),
        ] {
            if !(v > 0.0 && v < 2.0) {
                return Err(PhysicsError::Rate { name, value: v });
            }
        }
        Ok(())
    }
}

/// The TRT magic parameter `Λ = (1/ω⁺ − ½)(1/ω⁻ − ½)` used by default: 3/16 puts a halfway
/// bounce-back wall exactly halfway for Poiseuille flow at every viscosity (Ginzburg et al. 2008).
pub const DEFAULT_TRT_MAGIC: f64 = 3.0 / 16.0;

/// Everything the collision of the flow lattice depends on, in `f64` as configured.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowModel {
    pub collision: Collision,
    /// The shear relaxation rate ω = 1/τ of the molecular viscosity.
    pub omega: f64,
    pub mrt_rates: MrtRates,
    /// TRT's Λ.
    pub trt_magic: f64,
    /// The Smagorinsky constant `C_s`, when the eddy viscosity is on.
    pub smagorinsky: Option<f64>,
    /// A uniform body force (force density, lattice units), when there is one.
    pub force: Option<[f64; 3]>,
}

impl FlowModel {
    /// A model with only the operator and its rate (no LES, no force, default MRT rates and Λ).
    pub fn plain(collision: Collision, omega: f64) -> Self {
        Self {
            collision,
            omega,
            mrt_rates: MrtRates::default(),
            trt_magic: DEFAULT_TRT_MAGIC,
            smagorinsky: None,
            force: None,
        }
    }
}

/// The run constants a collision reads, in the lane type: splatted numbers on the CPU, named
/// symbols (defined by the kernel prelude) when the CUDA code is printed.
#[derive(Clone, Copy, Debug)]
pub struct Coefficients<V> {
    /// ω = 1/τ of the molecular viscosity.
    pub omega: V,
    /// τ = 1/ω (the Smagorinsky model's base).
    pub tau: V,
    /// TRT: ω⁻ from Λ and ω.
    pub omega_minus: V,
    /// TRT: Λ (the Smagorinsky model recomputes ω⁻ from the local ω⁺ with it).
    pub trt_magic: V,
    /// MRT: `s_k / ‖M_k‖²` per moment (the shear moments with ω).
    pub mrt: [V; NM],
    /// MRT with a force: `(1 − s_k/2) / ‖M_k‖²` per moment.
    pub mrt_keep: [V; NM],
    /// Smagorinsky: `18 √2 C_s²`, in `τ = ½ (τ₀ + √(τ₀² + 18√2 C_s² |Π_neq| / ρ))`.
    pub smagorinsky: Option<V>,
}

impl<V: Copy> Coefficients<V> {
    /// The constants of `model`, each made a lane value by `lift(name, value)`.
    pub fn new(model: &FlowModel, mut lift: impl FnMut(&str, f64) -> V) -> Self {
        let omega = model.omega;
        let tau = 1.0 / omega;
        let omega_minus = 1.0 / (0.5 + model.trt_magic / (tau - 0.5));
        let s = model.mrt_rates.diagonal(omega);
        Self {
            omega: lift("omega", omega),
            tau: lift("tau", tau),
            omega_minus: lift("omega_minus", omega_minus),
            trt_magic: lift("trt_magic", model.trt_magic),
            mrt: std::array::from_fn(|k| lift(&format!("mrt_s{k}"), s[k] / NORM2[k] as f64)),
            mrt_keep: std::array::from_fn(|k| {
                lift(
                    &format!("mrt_keep{k}"),
                    (1.0 - 0.5 * s[k]) / NORM2[k] as f64,
                )
            }),
            smagorinsky: model
                .smagorinsky
                .map(|cs| lift("smagorinsky", 18.0 * std::f64::consts::SQRT_2 * cs * cs)),
        }
    }

    /// The same constants in another lane type (`Lanes::splat` on the CPU).
    #[inline(always)]
    pub fn map<U: Copy>(&self, f: impl Fn(V) -> U) -> Coefficients<U> {
        Coefficients {
            omega: f(self.omega),
            tau: f(self.tau),
            omega_minus: f(self.omega_minus),
            trt_magic: f(self.trt_magic),
            mrt: self.mrt.map(&f),
            mrt_keep: self.mrt_keep.map(&f),
            smagorinsky: self.smagorinsky.map(&f),
        }
    }
}

/// A collision operator of the flow lattice: relaxes one node's (or one bundle's) weight-shifted
/// populations in place, with the node's body force if the model has one.
pub trait CollisionOperator: 'static {
    /// The name in case files and on the command line.
    const NAME: &'static str;
    /// One line for `--help` and the docs.
    const SUMMARY: &'static str;
    fn collide<V: Arith>(g: &mut [V; Q], k: &Coefficients<V>, force: Option<[V; 3]>) {
        Self::collide_with(g, k, force, None);
    }
    /// The same collision, under the Smagorinsky model with the relaxation time `tau` when it is
    /// given (the node's [`smagorinsky_relaxation`], computed once for the flow and a lattice
    /// coupled to it) instead of its own evaluation of the stress. Without the model `tau` is not
    /// read.
    fn collide_with<V: Arith>(
        g: &mut [V; Q],
        k: &Coefficients<V>,
        force: Option<[V; 3]>,
        tau: Option<V>,
    );
}

/// Code that needs the operator as a type (to monomorphise a CPU loop, to print a kernel).
pub trait OperatorVisitor {
    type Output;
    fn visit<O: CollisionOperator>(self) -> Self::Output;
}

/// A registered collision operator, by name (`"bgk"`, `"trt"`, `"mrt"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Collision(&'static str);

macro_rules! registry {
    ($($ty:ident),+ $(,)?) => {
        /// Every collision operator, by name, in the order `--help` lists them.
        pub const OPERATORS: &[(&str, &str)] = &[$(($ty::NAME, $ty::SUMMARY)),+];

        /// Calls `v` with the operator `c` names: the one place that turns a name into a type.
        pub fn dispatch<Vis: OperatorVisitor>(c: Collision, v: Vis) -> Vis::Output {
            $(if c.0 == $ty::NAME {
                return v.visit::<$ty>();
            })+
            unreachable!("a Collision always holds a registered name")
        }
    };
}

// Adding an operator: a type implementing `CollisionOperator` below, and its name here.
registry!(Bgk, Trt, Mrt);

impl Collision {
    pub const BGK: Collision = Collision(Bgk::NAME);
    pub const TRT: Collision = Collision(Trt::NAME);
    pub const MRT: Collision = Collision(Mrt::NAME);

    /// The registered operator called `name`.
    pub fn parse(name: &str) -> Result<Self, PhysicsError> {
        OPERATORS
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(n, _)| Collision(n))
            .ok_or_else(|| PhysicsError::UnknownOperator {
                name: name.to_string(),
                known: OPERATORS
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
    pub fn name(self) -> &'static str {
        self.0
    }
}

impl Default for Collision {
    fn default() -> Self {
        Collision::MRT
    }
}

impl std::fmt::Display for Collision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl Serialize for Collision {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
    }
}

impl<'de> Deserialize<'de> for Collision {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Collision::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// `δρ = Σ g_i` and the momentum `j = Σ c_i g_i` of shifted populations.
// `seq!` unrolls `2 * P + 1` into literal index arithmetic such as `2 * 0 + 1`.
#[allow(clippy::identity_op, clippy::erasing_op)]
#[inline(always)]
pub fn density_momentum<V: Arith>(g: &[V; Q]) -> (V, [V; 3]) {
    let mut drho = g[0];
    let mut j = [None, None, None];
    seq!(P in 0..9 {
        drho = drho + (g[2 * P + 1] + g[2 * P + 2]);
        let d = g[2 * P + 1] - g[2 * P + 2];
        j[0] = term(j[0], C[2 * P + 1][0], d);
        j[1] = term(j[1], C[2 * P + 1][1], d);
        j[2] = term(j[2], C[2 * P + 1][2], d);
    });
    let zero = V::c(0.0);
    (
        drho,
        [
            j[0].unwrap_or(zero),
            j[1].unwrap_or(zero),
            j[2].unwrap_or(zero),
        ],
    )
}

/// The macroscopic state of a node: `δρ`, `ρ = 1 + δρ`, and the velocity `u = (j + F/2)/ρ` (Guo's
/// half-force shift where there is a force).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Macroscopic<V> {
    pub drho: V,
    pub rho: V,
    pub u: [V; 3],
}

/// The macroscopic state of shifted populations `g` under `force`.
#[inline(always)]
pub fn macroscopic<V: Arith>(g: &[V; Q], force: Option<[V; 3]>) -> Macroscopic<V> {
    let (drho, j) = density_momentum(g);
    let rho = V::c(1.0) + drho;
    let inv = V::c(1.0) / rho;
    let u = match force {
        None => [j[0] * inv, j[1] * inv, j[2] * inv],
        Some(f) => {
            let h = V::c(0.5);
            std::array::from_fn(|a| (j[a] + h * f[a]) * inv)
        }
    };
    Macroscopic { drho, rho, u }
}

/// The macroscopic state a node's *stored* populations stand for: those its last step wrote, after
/// the collision. Guo's source adds the whole force `F` to the momentum (`Σ c_i g̃_i = j + F`,
/// every operator: the momentum is conserved, its rate is 0), so the velocity the step collided
/// with, `(j + F/2)/ρ`, is `(j̃ − F/2)/ρ` of the stored momentum `j̃`. This is the velocity the
/// modules report (fields, probes, time averages, the convergence measure); read with
/// [`macroscopic`]'s `+F/2` instead, a body-force channel showed a uniform excess of exactly `F`.
#[inline(always)]
pub fn stored_macroscopic<V: Arith>(g: &[V; Q], force: Option<[V; 3]>) -> Macroscopic<V> {
    macroscopic(g, force.map(|f| f.map(|c| -c)))
}

/// A per-direction quantity split into its rest value and, per opposite pair `(2p+1, 2p+2)`, the part
/// even under `c → −c` and the odd part: direction `2p+1` has `even + odd`, `2p+2` has `even − odd`.
#[derive(Clone, Copy, Debug)]
pub struct Pairs<V> {
    pub rest: V,
    pub even: [V; 9],
    pub odd: [V; 9],
}

impl<V: Arith> Pairs<V> {
    /// The values per direction.
    pub fn unpack(&self) -> [V; Q] {
        let mut f = [self.rest; Q];
        for p in 0..9 {
            f[2 * p + 1] = self.even[p] + self.odd[p];
            f[2 * p + 2] = self.even[p] - self.odd[p];
        }
        f
    }
}

/// `c_i · v` for the first direction of pair `p`, with the lattice's integer entries.
#[inline(always)]
fn dot_c<V: Arith>(i: usize, v: &[V; 3]) -> V {
    term(
        term(term(None, C[i][0], v[0]), C[i][1], v[1]),
        C[i][2],
        v[2],
    )
    .unwrap_or(V::c(0.0))
}

/// The shifted second-order equilibrium `g_eq_i = f_eq_i − w_i = w_i (δρ + ρ (3 c·u + 9/2 (c·u)² −
/// 3/2 u²))`, in pairs.
// `seq!` unrolls `2 * P + 1` into literal index arithmetic such as `2 * 0 + 1`.
#[allow(clippy::identity_op, clippy::erasing_op)]
#[inline(always)]
pub fn equilibrium_pairs<V: Arith>(m: &Macroscopic<V>) -> Pairs<V> {
    let u = &m.u;
    let u2 = u[0] * u[0] + u[1] * u[1] + u[2] * u[2];
    // What every direction shares, hoisted out of the pairs: δρ − 3/2 ρ u², 9/2 ρ and 3 ρ.
    let c0 = m.drho + m.rho * (V::c(-1.5) * u2);
    let rho45 = m.rho * V::c(4.5);
    let rho3 = m.rho * V::c(3.0);
    let rest = V::c(W[0]) * c0;
    let mut even = [rest; 9];
    let mut odd = [rest; 9];
    seq!(P in 0..9 {
        let cu = dot_c(2 * P + 1, u);
        let w = V::c(W[2 * P + 1]);
        even[P] = w * (c0 + rho45 * (cu * cu));
        odd[P] = w * (rho3 * cu);
    });
    Pairs { rest, even, odd }
}

/// The shifted equilibrium of (δρ, u) per direction (for initial states and tests).
#[inline(always)]
pub fn equilibrium<V: Arith>(drho: V, u: [V; 3]) -> [V; Q] {
    let m = Macroscopic {
        drho,
        rho: V::c(1.0) + drho,
        u,
    };
    equilibrium_pairs(&m).unpack()
}

/// Guo et al. (2002)'s forcing term without its relaxation factor,
/// `F_i = w_i (3 (c_i − u)·F + 9 (c_i·u)(c_i·F))`, in pairs.
// `seq!` unrolls `2 * P + 1` into literal index arithmetic such as `2 * 0 + 1`.
#[allow(clippy::identity_op, clippy::erasing_op)]
#[inline(always)]
pub fn guo_source<V: Arith>(u: &[V; 3], f: &[V; 3]) -> Pairs<V> {
    let uf = V::c(-3.0) * (u[0] * f[0] + u[1] * f[1] + u[2] * f[2]);
    let rest = V::c(W[0]) * uf;
    let mut even = [rest; 9];
    let mut odd = [rest; 9];
    seq!(P in 0..9 {
        let cu = dot_c(2 * P + 1, u);
        let cf = dot_c(2 * P + 1, f);
        let w = V::c(W[2 * P + 1]);
        even[P] = w * (V::c(9.0) * cu * cf + uf);
        odd[P] = w * (V::c(3.0) * cf);
    });
    Pairs { rest, even, odd }
}

/// The local relaxation rate of the Smagorinsky model from the non-equilibrium stress
/// `Π_ab = Σ c_a c_b (g − g_eq)` (Hou et al. 1996): the eddy viscosity `ν_t = (C_s Δ)² |S|` with the
/// strain rate from `Π = −2 ρ c_s² τ S` gives `τ = ½ (τ₀ + √(τ₀² + 18√2 C_s² √(Π:Π) / ρ))`.
/// `k` is `18√2 C_s²`. Only pair sums enter: `c_a c_b` is even.
#[inline(always)]
fn smagorinsky_omega<V: Arith>(pi: [V; 6], rho: V, tau0: V, k: V) -> V {
    V::c(1.0) / smagorinsky_tau(pi, rho, tau0, k)
}

/// The local relaxation time of [`smagorinsky_omega`].
#[inline(always)]
fn smagorinsky_tau<V: Arith>(pi: [V; 6], rho: V, tau0: V, k: V) -> V {
    let [xx, yy, zz, xy, yz, xz] = pi;
    let q = xx * xx + yy * yy + zz * zz + V::c(2.0) * (xy * xy + yz * yz + xz * xz);
    V::c(0.5) * (tau0 + (tau0 * tau0 + k * q.sqrt() / rho).sqrt())
}

/// The Smagorinsky eddy viscosity `ν_t = c_s² (τ − τ₀)` at a node's pulled populations under its
/// force, or `None` without the model: what a coupled scalar's turbulent diffusivity follows
/// (`ν_t / Pr_t`). The stress is BGK's (the pair sums of `g − g_eq`); TRT and MRT compute the same
/// stress from their own moments, so their rate equals this one to rounding.
// `seq!` unrolls `2 * P + 1` into literal index arithmetic such as `2 * 0 + 1`.
#[allow(clippy::identity_op, clippy::erasing_op)]
#[inline(always)]
pub fn eddy_viscosity<V: Arith>(
    g: &[V; Q],
    k: &Coefficients<V>,
    force: Option<[V; 3]>,
) -> Option<V> {
    smagorinsky_relaxation(g, k, force).map(|tau| eddy_of(tau, k))
}

/// The eddy viscosity `ν_t = c_s² (τ − τ₀)` of a node's Smagorinsky relaxation time.
#[inline(always)]
pub fn eddy_of<V: Arith>(tau: V, k: &Coefficients<V>) -> V {
    V::c(1.0 / 3.0) * (tau - k.tau)
}

/// The Smagorinsky model's local relaxation time at a node's pulled populations under its force
/// (from BGK's stress, the pair sums of `g − g_eq`), or `None` without the model: what
/// [`eddy_viscosity`] follows, and what a coupled step hands to
/// [`CollisionOperator::collide_with`] so that the stress is evaluated once per node.
// `seq!` unrolls `2 * P + 1` into literal index arithmetic such as `2 * 0 + 1`.
#[allow(clippy::identity_op, clippy::erasing_op)]
#[inline(always)]
pub fn smagorinsky_relaxation<V: Arith>(
    g: &[V; Q],
    k: &Coefficients<V>,
    force: Option<[V; 3]>,
) -> Option<V> {
    let cs = k.smagorinsky?;
    let m = macroscopic(g, force);
    let eq = equilibrium_pairs(&m);
    let mut neq = eq.even;
    seq!(P in 0..9 {
        neq[P] = (g[2 * P + 1] + g[2 * P + 2]) - V::c(2.0) * eq.even[P];
    });
    Some(smagorinsky_tau(stress_from_pairs(&neq), m.rho, k.tau, cs))
}

/// `Π_neq` (xx, yy, zz, xy, yz, xz) from the pair sums of `g − g_eq`.
// `seq!` unrolls `2 * P + 1` into literal index arithmetic such as `2 * 0 + 1`.
#[allow(clippy::identity_op, clippy::erasing_op)]
#[inline(always)]
fn stress_from_pairs<V: Arith>(neq_sum: &[V; 9]) -> [V; 6] {
    let mut s: [Option<V>; 6] = [None; 6];
    seq!(P in 0..9 {
        let c = C[2 * P + 1];
        s[0] = term(s[0], c[0] * c[0], neq_sum[P]);
        s[1] = term(s[1], c[1] * c[1], neq_sum[P]);
        s[2] = term(s[2], c[2] * c[2], neq_sum[P]);
        s[3] = term(s[3], c[0] * c[1], neq_sum[P]);
        s[4] = term(s[4], c[1] * c[2], neq_sum[P]);
        s[5] = term(s[5], c[0] * c[2], neq_sum[P]);
    });
    s.map(|v| v.unwrap_or(V::c(0.0)))
}

/// Single relaxation time (Bhatnagar–Gross–Krook): `g ← g − ω (g − g_eq) + (1 − ω/2) F`.
pub struct Bgk;

impl CollisionOperator for Bgk {
    const NAME: &'static str = "bgk";
    const SUMMARY: &'static str = "single relaxation time (BGK)";

    // `seq!` unrolls `2 * P + 1` into literal index arithmetic such as `2 * 0 + 1`.
    #[allow(clippy::identity_op, clippy::erasing_op)]
    #[inline(always)]
    fn collide_with<V: Arith>(
        g: &mut [V; Q],
        k: &Coefficients<V>,
        force: Option<[V; 3]>,
        tau: Option<V>,
    ) {
        let m = macroscopic(g, force);
        let eq = equilibrium_pairs(&m);
        let omega = match (k.smagorinsky, tau) {
            (None, _) => k.omega,
            (Some(_), Some(t)) => V::c(1.0) / t,
            (Some(cs), None) => {
                let mut neq = eq.even;
                seq!(P in 0..9 {
                    neq[P] = (g[2 * P + 1] + g[2 * P + 2]) - V::c(2.0) * eq.even[P];
                });
                smagorinsky_omega(stress_from_pairs(&neq), m.rho, k.tau, cs)
            }
        };
        let feq = eq.unpack();
        seq!(I in 0..19 {
            g[I] = g[I] - omega * (g[I] - feq[I]);
        });
        if let Some(f) = force {
            let keep = V::c(1.0) - V::c(0.5) * omega;
            let s = guo_source(&m.u, &f).unpack();
            seq!(I in 0..19 {
                g[I] = g[I] + keep * s[I];
            });
        }
    }
}

/// Two relaxation times (Ginzburg): the parts of each pair even under `c → −c` relax with ω⁺ = ω
/// (the viscosity), the odd parts with ω⁻, set by the magic parameter Λ.
pub struct Trt;

impl CollisionOperator for Trt {
    const NAME: &'static str = "trt";
    const SUMMARY: &'static str = "two relaxation times (TRT, magic parameter Λ = 3/16 by default)";

    // `seq!` unrolls `2 * P + 1` into literal index arithmetic such as `2 * 0 + 1`.
    #[allow(clippy::identity_op, clippy::erasing_op)]
    #[inline(always)]
    fn collide_with<V: Arith>(
        g: &mut [V; Q],
        k: &Coefficients<V>,
        force: Option<[V; 3]>,
        tau: Option<V>,
    ) {
        let m = macroscopic(g, force);
        let eq = equilibrium_pairs(&m);
        let half = V::c(0.5);
        // Non-equilibrium halves of each pair: (g_i + g_ī)/2 − even, (g_i − g_ī)/2 − odd.
        let mut ne = eq.even;
        let mut no = eq.odd;
        seq!(P in 0..9 {
            ne[P] = half * (g[2 * P + 1] + g[2 * P + 2]) - eq.even[P];
            no[P] = half * (g[2 * P + 1] - g[2 * P + 2]) - eq.odd[P];
        });
        let (wp, wm) = match k.smagorinsky {
            None => (k.omega, k.omega_minus),
            Some(cs) => {
                let wp = match tau {
                    Some(t) => V::c(1.0) / t,
                    None => {
                        let twice = ne.map(|v| V::c(2.0) * v);
                        smagorinsky_omega(stress_from_pairs(&twice), m.rho, k.tau, cs)
                    }
                };
                let wm = V::c(1.0) / (half + k.trt_magic / (V::c(1.0) / wp - half));
                (wp, wm)
            }
        };
        let src = force.map(|f| guo_source(&m.u, &f));
        let kp = V::c(1.0) - half * wp;
        let km = V::c(1.0) - half * wm;
        g[0] = g[0] - wp * (g[0] - eq.rest);
        if let Some(s) = &src {
            g[0] = g[0] + kp * s.rest;
        }
        seq!(P in 0..9 {
            let mut a = wp * ne[P];
            let mut b = wm * no[P];
            if let Some(s) = &src {
                a = a - kp * s.even[P];
                b = b - km * s.odd[P];
            }
            g[2 * P + 1] = g[2 * P + 1] - (a + b);
            g[2 * P + 2] = g[2 * P + 2] - (a - b);
        });
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

/// The moment rows whose rate is the shear rate (3p_xx, p_ww, p_xy, p_yz, p_xz).
const SHEAR: [usize; 5] = [9, 11, 13, 14, 15];

const fn is_shear(k: usize) -> bool {
    k == 9 || k == 11 || k == 13 || k == 14 || k == 15
}

/// The moments `M v` of a per-direction quantity given in pairs (sums feed the even rows,
/// differences the odd ones).
// `seq!` unrolls `2 * P + 1` into literal index arithmetic such as `2 * 0 + 1`.
#[allow(clippy::identity_op, clippy::erasing_op)]
#[inline(always)]
fn moments_of<V: Arith>(rest: V, sum: &[V; 9], dif: &[V; 9]) -> [V; NM] {
    let mut m = [rest; NM];
    seq!(K in 0..19 {
        let mut acc = term(None, M[K][0], rest);
        seq!(P in 0..9 {
            acc = term(acc, M[K][2 * P + 1], if EVEN[K] { sum[P] } else { dif[P] });
        });
        m[K] = acc.unwrap_or(V::c(0.0));
    });
    m
}

/// The moments `M F` of Guo's source ([`guo_source`]) in closed form, `None` where one is zero (ρ
/// and the three ghost moments). The source is the equilibrium's derivative along the force at
/// fixed density, `F_i = ∂g_eq_i/∂j · F` with `u = j/ρ`, so its moments are those of
/// [`equilibrium_moments`] differentiated along `F`: about 30 operations where the transform of
/// the 19 source terms takes some 150 (the coupled step's buoyancy forces every node).
#[inline(always)]
pub fn guo_moments<V: Arith>(u: &[V; 3], f: &[V; 3]) -> [Option<V>; NM] {
    let uf = u[0] * f[0] + u[1] * f[1] + u[2] * f[2];
    let (ux_fx, uy_fy, uz_fz) = (u[0] * f[0], u[1] * f[1], u[2] * f[2]);
    let two = V::c(2.0);
    let q = V::c(-2.0 / 3.0);
    let half = V::c(-0.5);
    let pxx3 = V::c(6.0) * ux_fx - two * uf;
    let pww = two * (uy_fy - uz_fz);
    [
        None,
        Some(V::c(38.0) * uf),
        Some(V::c(-11.0) * uf),
        Some(f[0]),
        Some(q * f[0]),
        Some(f[1]),
        Some(q * f[1]),
        Some(f[2]),
        Some(q * f[2]),
        Some(pxx3),
        Some(half * pxx3),
        Some(pww),
        Some(half * pww),
        Some(u[0] * f[1] + u[1] * f[0]),
        Some(u[1] * f[2] + u[2] * f[1]),
        Some(u[0] * f[2] + u[2] * f[0]),
        None,
        None,
        None,
    ]
}

/// The equilibrium moments of d'Humières et al. (2002) of the shifted populations, in the row order
/// of [`M`], for `δρ`, `ρ` and the momentum `j` (with `j·j/ρ`, so that they are the moments of
/// [`equilibrium`]; the rest state's moments, `ρ = 1`, `e = −11`, `ε = 3`, are taken out).
#[inline(always)]
pub fn equilibrium_moments<V: Arith>(drho: V, rho: V, j: [V; 3]) -> [V; NM] {
    let inv = V::c(1.0) / rho;
    let (jx, jy, jz) = (j[0], j[1], j[2]);
    let jj = (jx * jx + jy * jy + jz * jz) * inv;
    let pxx3 = (V::c(3.0) * jx * jx) * inv - jj;
    let pww = (jy * jy - jz * jz) * inv;
    let half = V::c(0.5);
    [
        drho,
        V::c(-11.0) * drho + V::c(19.0) * jj,
        V::c(3.0) * drho - V::c(5.5) * jj,
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

/// Multiple relaxation times (d'Humières et al. 2002): `g ← g − M⁻¹ [S (M g − m_eq) − (I − S/2) M F]`,
/// with `M⁻¹ = Mᵀ diag(1/‖M_k‖²)`.
///
/// Works on the sums and differences of opposite pairs: even moments depend on the sums only, odd
/// moments on the differences only, which halves both transforms. The matrix is applied with its
/// integer entries, unrolled, so zeros and ±1 cost nothing; the conserved moments (ρ, j) drop out
/// of the back-transform unless a force changes j (by exactly F, whatever their rate).
pub struct Mrt;

impl CollisionOperator for Mrt {
    const NAME: &'static str = "mrt";
    const SUMMARY: &'static str = "multiple relaxation times (d'Humières et al. 2002)";

    // `seq!` unrolls `2 * P + 1` into literal index arithmetic such as `2 * 0 + 1`.
    #[allow(clippy::identity_op, clippy::erasing_op)]
    #[inline(always)]
    fn collide_with<V: Arith>(
        g: &mut [V; Q],
        k: &Coefficients<V>,
        force: Option<[V; 3]>,
        tau: Option<V>,
    ) {
        let mut sum = [g[0]; 9];
        let mut dif = [g[0]; 9];
        seq!(P in 0..9 {
            sum[P] = g[2 * P + 1] + g[2 * P + 2];
            dif[P] = g[2 * P + 1] - g[2 * P + 2];
        });
        let m = moments_of(g[0], &sum, &dif);
        let drho = m[0];
        let rho = V::c(1.0) + drho;
        let mut j = [m[3], m[5], m[7]];
        if let Some(f) = force {
            let h = V::c(0.5);
            j = std::array::from_fn(|a| j[a] + h * f[a]);
        }
        let meq = equilibrium_moments(drho, rho, j);
        let mut d = m;
        seq!(K in 0..19 {
            if !is_conserved(K) {
                d[K] = m[K] - meq[K];
            }
        });
        // The shear rate and its forcing factor: constant, or the Smagorinsky model's local rate.
        let (shear, shear_keep) = match (k.smagorinsky, tau) {
            (None, _) => (None, None),
            (Some(_), Some(t)) => {
                let w = V::c(1.0) / t;
                (Some(w), Some(V::c(1.0) - V::c(0.5) * w))
            }
            (Some(cs), None) => {
                // Π_neq from the deviations: tr Π = d_e/19 (δρ_neq = 0), 3Π_xx − tr = d_3pxx,
                // Π_yy − Π_zz = d_pww, and the off-diagonal moments are Π_xy, Π_yz, Π_xz.
                let tr = d[1] * V::c(1.0 / 19.0);
                let xx = (d[9] + tr) * V::c(1.0 / 3.0);
                let rest = tr - xx;
                let yy = V::c(0.5) * (rest + d[11]);
                let zz = V::c(0.5) * (rest - d[11]);
                let w = smagorinsky_omega([xx, yy, zz, d[13], d[14], d[15]], rho, k.tau, cs);
                (Some(w), Some(V::c(1.0) - V::c(0.5) * w))
            }
        };
        let mut dev: [Option<V>; NM] = [None; NM];
        seq!(K in 0..19 {
            if !is_conserved(K) {
                dev[K] = Some(match shear {
                    Some(w) if is_shear(K) => d[K] * (w * V::c(1.0 / NORM2[K] as f64)),
                    _ => d[K] * k.mrt[K],
                });
            }
        });
        if let Some(f) = force {
            let u = {
                let inv = V::c(1.0) / rho;
                [j[0] * inv, j[1] * inv, j[2] * inv]
            };
            let mf = guo_moments(&u, &f);
            seq!(K in 0..19 {
                if let (false, Some(s)) = (is_conserved(K), mf[K]) {
                    let keep = match shear_keep {
                        Some(kw) if is_shear(K) => kw * V::c(1.0 / NORM2[K] as f64),
                        _ => k.mrt_keep[K],
                    };
                    dev[K] = dev[K].map(|v| v - keep * s);
                }
            });
            // The momentum rows change by exactly F.
            for (a, row) in [3usize, 5, 7].into_iter().enumerate() {
                dev[row] = Some(f[a] * V::c(-1.0 / NORM2[row] as f64));
            }
        }
        let mut rest = None;
        seq!(K in 0..19 {
            if let Some(v) = dev[K] {
                rest = term(rest, M[K][0], v);
            }
        });
        if let Some(r) = rest {
            g[0] = g[0] - r;
        }
        seq!(P in 0..9 {
            let mut even = None;
            let mut odd = None;
            seq!(K in 0..19 {
                if let Some(v) = dev[K] {
                    if EVEN[K] {
                        even = term(even, M[K][2 * P + 1], v);
                    } else {
                        odd = term(odd, M[K][2 * P + 1], v);
                    }
                }
            });
            let e = even.unwrap_or(V::c(0.0));
            let o = odd.unwrap_or(V::c(0.0));
            g[2 * P + 1] = g[2 * P + 1] - (e + o);
            g[2 * P + 2] = g[2 * P + 2] - (e - o);
        });
    }
}

const _: () = {
    let mut k = 0;
    while k < SHEAR.len() {
        assert!(is_shear(SHEAR[k]) && !is_conserved(SHEAR[k]));
        k += 1;
    }
};
