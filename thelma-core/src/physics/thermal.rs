//! The temperature lattice: an advection–diffusion equation for θ = T − T₀ on D3Q7, relaxed with its
//! own rates towards an equilibrium linear in the flow's velocity, and the Boussinesq force it puts
//! back into the flow. Written once over [`Arith`], like the flow's operators, so that the CPU
//! module runs these functions on its lanes and the kernels run what they print.
//!
//! D3Q7 rather than D3Q6: the rest population is a free weight (`c_s² = (1 − w₀)/3`, here
//! `w₀ = 1/4`, `c_s² = 1/4`) at the cost of one population a node (8 bytes in f32, read and
//! written). The collision is TRT (Ginzburg 2005): the odd rate ω⁻ sets the diffusivity,
//! `α = c_s² (1/ω⁻ − ½)`, and the even rate follows from the magic parameter
//! `Λ = (1/ω⁺ − ½)(1/ω⁻ − ½)`, 1/4 by default. Air at the Reynolds numbers of a ventilated room
//! puts 1/ω⁻ within 10⁻³ of ½; BGK (ω⁺ = ω⁻, Λ = (1/ω − ½)² ≈ 10⁻⁷) then barely damps the even
//! modes and moves the walls' effective position with α, where a fixed Λ keeps both.
//!
//! θ is stored as it is: the rest state θ = 0 is all zeros, as the flow's shifted populations are,
//! and f32 keeps its mantissa for the deviations from T₀.

use super::arith::Arith;
use super::collision::{macroscopic, Macroscopic};
use super::d3q19::Q;
use super::stencil::D3Q7;
use crate::{FacePatch, Precision, Stored};

/// Populations of the temperature lattice (D3Q7: rest, then ±x, ±y, ±z as D3Q19's directions 0–6).
pub const QT: usize = 7;

/// `1 / c_s²` of D3Q7.
const INV_CS2: f64 = 4.0;

/// The default magic parameter of the thermal TRT: the most stable choice for advection–diffusion.
pub const DEFAULT_THERMAL_MAGIC: f64 = 0.25;

/// Everything the temperature lattice's step depends on, in `f64` as configured (lattice units).
#[derive(Clone, Debug, PartialEq)]
pub struct ThermalModel {
    /// ω⁻ = 1/τ⁻, with τ⁻ = α/c_s² + ½ = 4α + ½ for the lattice diffusivity α.
    pub omega: f64,
    /// TRT's Λ = (τ⁺ − ½)(τ⁻ − ½); `(τ⁻ − ½)²` makes the collision BGK.
    pub magic: f64,
    /// The Boussinesq force density per unit θ, `−β g` (ρ₀ = 1): the flow feels `θ · buoyancy`.
    pub buoyancy: [f64; 3],
    /// The turbulent Prandtl number `Pr_t = ν_t / α_t` under the flow's Smagorinsky model: each
    /// node's diffusivity is then `α + ν_t / Pr_t`. `None`: α alone (no eddy viscosity).
    pub turbulent_prandtl: Option<f64>,
}

impl ThermalModel {
    /// The model of lattice diffusivity `alpha`, expansion coefficient `beta` (per unit θ) and
    /// gravity `g` (lattice units), with the default Λ.
    pub fn new(alpha: f64, beta: f64, g: [f64; 3]) -> Self {
        Self {
            omega: 1.0 / (INV_CS2 * alpha + 0.5),
            magic: DEFAULT_THERMAL_MAGIC,
            buoyancy: g.map(|ga| -beta * ga),
            turbulent_prandtl: None,
        }
    }

    /// The lattice diffusivity `α = (τ⁻ − ½) c_s²`.
    pub fn diffusivity(&self) -> f64 {
        (1.0 / self.omega - 0.5) / INV_CS2
    }

    /// The even rate ω⁺ from Λ and ω⁻.
    pub fn omega_plus(&self) -> f64 {
        1.0 / (0.5 + self.magic / (1.0 / self.omega - 0.5))
    }
}

/// Entries of the held θ table before the patches': one per face of the box.
pub const HELD_FACES: usize = 6;

/// What closes a face of the box for the temperature lattice (a periodic axis's faces are never
/// asked).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ThermalFace {
    /// No heat crosses it: bounce-back of the entering population.
    Adiabatic,
    /// Held at θ (lattice units, T − T₀) half a spacing outside the last node: anti-bounce-back
    /// with [`dirichlet_term`]. Walls with a temperature and velocity inlets.
    Held(f64),
    /// Zero gradient: the entering population is the node's own, `h_i(x) = h̃_i(x)`. Outlets.
    Outflow,
}

/// A case's temperature lattice: its model, what closes each face (in `Face` order: x−, x+, y−,
/// y+, z−, z+) outside its patches, the patches closed otherwise, and the uniform θ it starts
/// from. Bodies and obstacles are adiabatic.
#[derive(Clone, Debug, PartialEq)]
pub struct ThermalSetup {
    pub model: ThermalModel,
    pub faces: [ThermalFace; 6],
    /// Parts of faces with their own rule (an inlet in a wall), first match wins.
    pub patches: Vec<(FacePatch, ThermalFace)>,
    pub initial: f64,
    /// The power of two the populations are multiplied by before they are stored, and divided by
    /// after they are loaded ([`load_thermal`], [`store_thermal`]): 1 where they are stored as
    /// computed (f32, f64), [`store_scale_of`] of the case's reach in 16 bits, whose formats
    /// hold values below 1–2. Fixed for a run from the case's temperatures, so that a
    /// checkpoint's stored populations read back as they were written whatever was steered since.
    pub store_scale: f64,
}

/// The power of two a temperature lattice whose |θ| stays within `reach` scales its populations by
/// in 16-bit storage: `2^-(⌊log₂ reach⌋ + 3)`, which puts `reach` in [1/8, 1/4). The formats
/// hold values below 2 ([`ScaledHalf`](crate::ScaledHalf) and [`Half12`](crate::Half12), made for
/// the flow's shifted populations in (−1/3, 1)); a population is at most about half its node's θ
/// (the rest one w₀ θ = θ/4, an anti-bounce-back one −h + 2 w θ_w), so every |θ| below `2 / scale`,
/// 8 to 16 times the reach, stays under 1 once scaled: the room left for held temperatures a
/// live view steers ([`ThermalSetup::held_bound`]). 1 where `reach` is 0 (θ stays 0) or not
/// finite. The relative rounding of a stored population is the format's whatever the scale (it is
/// a power of two): 2⁻¹¹ of the value, where the flow's shifted populations round to 2⁻¹¹ of their
/// deviation from rest.
pub fn store_scale_of(reach: f64) -> f64 {
    if !(reach.is_finite() && reach > 0.0) {
        return 1.0;
    }
    2f64.powi(-(reach.log2().floor() as i32 + 3))
}

/// A thermal population as stored: `S::store(h · scale)` ([`ThermalSetup::store_scale`]).
#[inline(always)]
pub fn store_thermal<S: Stored>(h: S::Arith, scale: S::Arith) -> S {
    S::store(h * scale)
}

/// A stored thermal population as collided: `load(x) · inv`, `inv = 1 / scale` (exact: a power of
/// two).
#[inline(always)]
pub fn load_thermal<S: Stored>(x: S, inv: S::Arith) -> S::Arith {
    x.load() * inv
}

impl ThermalSetup {
    /// The largest |θ| the setup holds: its initial θ and every held face's and patch's. With no
    /// source of heat, θ stays within what the faces and the start hold.
    pub fn reach(&self) -> f64 {
        let rules = self.faces.iter().chain(self.patches.iter().map(|(_, r)| r));
        rules
            .filter_map(|f| match f {
                ThermalFace::Held(t) => Some(t.abs()),
                _ => None,
            })
            .fold(self.initial.abs(), f64::max)
    }

    /// The store scale a run in `precision` keeps: [`store_scale_of`] the reach in 16 bits, 1
    /// otherwise.
    pub fn store_scale_for(&self, precision: Precision) -> f64 {
        if precision.is_16_bit() {
            store_scale_of(self.reach())
        } else {
            1.0
        }
    }

    /// The largest |θ| a held face may be set to in `precision` (open bound): in 16 bits,
    /// `2 / store_scale` (see [`store_scale_of`]), below which the stored populations stay in their
    /// format's range; infinite otherwise.
    pub fn held_bound(&self, precision: Precision) -> f64 {
        if precision.is_16_bit() {
            2.0 / self.store_scale
        } else {
            f64::INFINITY
        }
    }

    /// The spread of the θ its held faces and patches hold (highest minus lowest), the reference
    /// difference of Nusselt numbers; `None` without two different held values.
    pub fn held_spread(&self) -> Option<f64> {
        let rules = self.faces.iter().chain(self.patches.iter().map(|(_, r)| r));
        let held = rules.filter_map(|f| match f {
            ThermalFace::Held(t) => Some(*t),
            _ => None,
        });
        let (lo, hi) = held.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), t| {
            (lo.min(t), hi.max(t))
        });
        (hi > lo).then_some(hi - lo)
    }

    /// The held θ table: one entry per face (`Face` order), then one per patch, each the θ its
    /// rule holds (0 where it holds none). The GPU kernels have its terms as literals, or, in a run
    /// whose temperatures are steered (served live), read them from constant memory at these
    /// indices, so that the live view can change a held temperature between steps.
    pub fn held_table(&self) -> Vec<f64> {
        let theta = |f: &ThermalFace| match f {
            ThermalFace::Held(t) => *t,
            _ => 0.0,
        };
        let patches = self.patches.iter().map(|(_, r)| r);
        self.faces.iter().chain(patches).map(theta).collect()
    }

    /// Holds each held face and patch at its entry of `table` (laid out as
    /// [`held_table`](Self::held_table)); entries of rules that hold nothing are ignored. `false`,
    /// and nothing changed, when `table` is not of that length.
    pub fn set_held(&mut self, table: &[f64]) -> bool {
        if table.len() != HELD_FACES + self.patches.len() {
            return false;
        }
        let patches = self.patches.iter_mut().map(|(_, r)| r);
        for (rule, &t) in self.faces.iter_mut().chain(patches).zip(table) {
            if let ThermalFace::Held(theta) = rule {
                *theta = t;
            }
        }
        true
    }

    /// What closes face `face` (its index in `Face` order) where the link from the node at global
    /// position `p` crosses it.
    pub fn face_at(&self, face: usize, p: [usize; 3]) -> ThermalFace {
        self.patches
            .iter()
            .find(|(patch, _)| patch.face as usize == face && patch.holds(p))
            .map_or(self.faces[face], |&(_, rule)| rule)
    }
}

/// The run constants of the temperature lattice in the lane type (named symbols when printed).
#[derive(Clone, Copy, Debug)]
pub struct ThermalCoefficients<V> {
    /// ω⁻, of the odd parts (the diffusivity).
    pub omega: V,
    /// ω⁺, of the rest population and the even parts.
    pub omega_plus: V,
    pub buoyancy: [V; 3],
    /// Under the flow's eddy viscosity: `(τ⁻₀, 1/(c_s² Pr_t), Λ)`, from which a node's rates follow
    /// its `ν_t` (`τ⁻ = τ⁻₀ + ν_t / (c_s² Pr_t)`, ω⁺ from Λ); `None` without.
    pub turbulent: Option<(V, V, V)>,
}

impl<V: Copy> ThermalCoefficients<V> {
    /// The constants of `model`, each made a lane value by `lift(name, value)`.
    pub fn new(model: &ThermalModel, mut lift: impl FnMut(&str, f64) -> V) -> Self {
        Self {
            omega: lift("omega_t", model.omega),
            omega_plus: lift("omega_t_plus", model.omega_plus()),
            buoyancy: [
                lift("buoyancy_x", model.buoyancy[0]),
                lift("buoyancy_y", model.buoyancy[1]),
                lift("buoyancy_z", model.buoyancy[2]),
            ],
            turbulent: model.turbulent_prandtl.map(|pr| {
                (
                    lift("tau_t", 1.0 / model.omega),
                    lift("eddy_t", INV_CS2 / pr),
                    lift("magic_t", model.magic),
                )
            }),
        }
    }

    /// The same constants in another lane type.
    #[inline(always)]
    pub fn map<U: Copy>(&self, f: impl Fn(V) -> U) -> ThermalCoefficients<U> {
        ThermalCoefficients {
            omega: f(self.omega),
            omega_plus: f(self.omega_plus),
            buoyancy: self.buoyancy.map(&f),
            turbulent: self.turbulent.map(|(a, b, c)| (f(a), f(b), f(c))),
        }
    }
}

/// θ of a node's thermal populations, summed rest first, then by opposite pairs.
#[inline(always)]
pub fn temperature<V: Arith>(h: &[V; QT]) -> V {
    h[0] + (h[1] + h[2]) + (h[3] + h[4]) + (h[5] + h[6])
}

/// The Boussinesq force density at θ: `θ · (−β g)`.
#[inline(always)]
pub fn buoyancy_force<V: Arith>(theta: V, k: &ThermalCoefficients<V>) -> [V; 3] {
    k.buoyancy.map(|b| theta * b)
}

/// The force the flow collides with at a node of temperature θ: the case's uniform body force (zero
/// without one) plus the buoyancy at θ.
#[inline(always)]
pub fn coupled_force<V: Arith>(theta: V, uniform: [V; 3], k: &ThermalCoefficients<V>) -> [V; 3] {
    let b = buoyancy_force(theta, k);
    [uniform[0] + b[0], uniform[1] + b[1], uniform[2] + b[2]]
}

/// The velocity that advects θ at a node: the flow's own at this step, `(j + F/2)/ρ` of its pulled
/// (pre-collision) populations under the node's force, as its collision computes it.
#[inline(always)]
pub fn advecting_velocity<V: Arith>(g: &[V; Q], force: Option<[V; 3]>) -> [V; 3] {
    let Macroscopic { u, .. } = macroscopic(g, force);
    u
}

/// The equilibrium of D3Q7 at `(θ, u)`, `h_i^eq = w_i θ (1 + c_i·u / c_s²)`: the rest value and, per
/// axis, the part even in `c` (`w θ`) and the odd part (`w θ u_a / c_s²`), so that direction `2a+1`
/// has `even + odd` and `2a+2` `even − odd`.
#[inline(always)]
pub fn thermal_equilibrium<V: Arith>(theta: V, u: [V; 3]) -> (V, V, [V; 3]) {
    let rest = V::c(D3Q7.w[0]) * theta;
    let even = V::c(D3Q7.w[1]) * theta;
    let odd = u.map(|ua| even * (V::c(INV_CS2) * ua));
    (rest, even, odd)
}

/// The seven equilibrium populations at `(θ, u)`, in direction order (what a node starts from).
#[inline(always)]
pub fn thermal_equilibrium_populations<V: Arith>(theta: V, u: [V; 3]) -> [V; QT] {
    let (rest, even, odd) = thermal_equilibrium(theta, u);
    [
        rest,
        even + odd[0],
        even - odd[0],
        even + odd[1],
        even - odd[1],
        even + odd[2],
        even - odd[2],
    ]
}

/// Relaxes a node's thermal populations towards the equilibrium at their own θ and the velocity
/// `u` (TRT): each opposite pair's even part `(h_i + h_ī)/2` with ω⁺ (the rest population too), its
/// odd part `(h_i − h_ī)/2` with ω⁻. θ is conserved to rounding. With the flow's eddy viscosity
/// `nu_t` at the node (and a turbulent Prandtl number in `k`) the diffusivity is `α + ν_t/Pr_t`:
/// `τ⁻ = τ⁻₀ + ν_t/(c_s² Pr_t)`, and ω⁺ keeps Λ.
#[inline(always)]
pub fn collide_thermal<V: Arith>(
    h: &mut [V; QT],
    u: [V; 3],
    k: &ThermalCoefficients<V>,
    nu_t: Option<V>,
) {
    let (wp, wm) = match (k.turbulent, nu_t) {
        (Some((tau0, eddy, magic)), Some(nt)) => {
            let tau = tau0 + eddy * nt;
            let wp = V::c(1.0) / (V::c(0.5) + magic / (tau - V::c(0.5)));
            (wp, V::c(1.0) / tau)
        }
        _ => (k.omega_plus, k.omega),
    };
    let theta = temperature(h);
    let (rest, even, odd) = thermal_equilibrium(theta, u);
    let half = V::c(0.5);
    h[0] = h[0] + wp * (rest - h[0]);
    for a in 0..3 {
        let (p, m) = (2 * a + 1, 2 * a + 2);
        let de = wp * (even - half * (h[p] + h[m]));
        let dodd = wm * (odd[a] - half * (h[p] - h[m]));
        h[p] = h[p] + (de + dodd);
        h[m] = h[m] + (de - dodd);
    }
}

/// The anti-bounce-back term of a link entering from a wall (or an inlet) held at `theta_w`:
/// `h_i = −h̃_ī + 2 w_i θ_w`, twice the even part of the equilibrium (Ginzburg 2005). It holds θ =
/// θ_w half a spacing outside the last node exactly for a linear profile at rest and to second
/// order in diffusive scaling; where fluid crosses the boundary (an inlet) the wall value is off by
/// about `4Λ⁺ ∂_n(θ u_n)`, Λ⁺ = τ⁺ − ½.
#[inline(always)]
pub fn dirichlet_term<V: Arith>(theta_w: V) -> V {
    V::c(2.0 * D3Q7.w[1]) * theta_w
}

#[cfg(test)]
mod tests {
    //! The model on its own, before any module runs it: conservation and fixed points of the
    //! collision, its printed form bit for bit, and two analytic solutions on a line (a Gaussian
    //! hill carried and spread by a uniform stream, at second order; conduction between two
    //! walls, exact) stepped by a reference pull written from the definition.

    use super::*;
    use crate::physics::symbolic::{self, Sym};

    fn coeff(alpha: f64) -> ThermalCoefficients<f64> {
        ThermalCoefficients::new(&ThermalModel::new(alpha, 0.0, [0.0; 3]), |_, x| x)
    }

    #[test]
    fn the_rate_gives_the_diffusivity_and_gravity_the_buoyancy() {
        let m = ThermalModel::new(0.02, 3e-3, [0.0, 0.0, -1e-4]);
        assert!((m.diffusivity() - 0.02).abs() < 1e-15);
        assert!((1.0 / m.omega - 0.58).abs() < 1e-14);
        // Λ = 1/4: τ⁺ − ½ = 0.25 / 0.08.
        assert!((1.0 / m.omega_plus() - 3.625).abs() < 1e-13);
        // Warm fluid rises: the force is along −g.
        let close = |a: [f64; 3], b: [f64; 3]| (0..3).all(|i| (a[i] - b[i]).abs() < 1e-20);
        assert!(close(m.buoyancy, [0.0, 0.0, 3e-7]), "{:?}", m.buoyancy);
        let k = ThermalCoefficients::new(&m, |_, x| x);
        assert!(close(buoyancy_force(2.0, &k), [0.0, 0.0, 6e-7]));
    }

    #[test]
    fn collision_conserves_theta_and_keeps_its_equilibrium() {
        let k = coeff(0.013);
        let mut h = [0.31, -0.02, 0.05, 0.11, 0.07, -0.04, 0.09];
        let before = temperature(&h);
        collide_thermal(&mut h, [0.03, -0.05, 0.02], &k, None);
        assert!((temperature(&h) - before).abs() < 1e-15);
        // The equilibrium at its own θ and u is a fixed point; rest at θ = 0 is exactly zero.
        let u = [0.04, 0.01, -0.03];
        let eq = thermal_equilibrium_populations(1.7, u);
        let mut h = eq;
        collide_thermal(&mut h, u, &k, None);
        for i in 0..QT {
            assert!((h[i] - eq[i]).abs() < 1e-15, "direction {i}");
        }
        let mut zero = [0.0f32; QT];
        collide_thermal(&mut zero, [0.02; 3], &k.map(|v| v as f32), None);
        assert_eq!(zero, [0.0; QT]);
        // The flux of θ in the equilibrium is θ u.
        let flux: f64 = (0..QT).map(|i| eq[i] * D3Q7.c[i][0] as f64).sum();
        assert!((flux - 1.7 * u[0]).abs() < 1e-15);
    }

    /// Under the flow's Smagorinsky model the eddy viscosity is the one BGK's collision relaxes
    /// with (`ν_t = (1/ω − τ₀)/3`, ω read back from a collided population), and the thermal
    /// collision's flux then relaxes with `1/(τ⁻₀ + ν_t/(c_s² Pr_t))`, its even part keeping Λ.
    #[test]
    fn the_eddy_viscosity_sets_the_turbulent_diffusivity() {
        use crate::physics::{
            eddy_viscosity, equilibrium, Bgk, Coefficients, Collision, CollisionOperator, FlowModel,
        };
        let mut flow = FlowModel::plain(Collision::BGK, 1.6);
        flow.smagorinsky = Some(0.3);
        let kf = Coefficients::new(&flow, |_, x| x);
        // A sheared state: equilibrium plus a non-equilibrium part with a stress.
        let mut g = equilibrium(0.01, [0.03, -0.01, 0.02]);
        for (i, v) in g.iter_mut().enumerate() {
            *v += 1e-3 * ((i as f64) * 0.7).sin();
        }
        let nu_t = eddy_viscosity(&g, &kf, None).unwrap();
        assert!(nu_t > 1e-5, "ν_t = {nu_t}");
        let feq = {
            let m = macroscopic(&g, None);
            equilibrium(m.rho - 1.0, m.u)
        };
        let mut after = g;
        Bgk::collide(&mut after, &kf, None);
        let omega = (g[7] - after[7]) / (g[7] - feq[7]);
        let tau0 = 1.0 / 1.6;
        assert!(
            (nu_t - (1.0 / omega - tau0) / 3.0).abs() < 1e-12,
            "{nu_t} vs ω {omega}"
        );
        let plain = FlowModel::plain(Collision::BGK, 1.6);
        assert_eq!(
            eddy_viscosity(&g, &Coefficients::new(&plain, |_, x| x), None),
            None
        );

        let mut model = ThermalModel::new(0.013, 0.0, [0.0; 3]);
        model.turbulent_prandtl = Some(0.85);
        let k = ThermalCoefficients::new(&model, |_, x| x);
        let h0 = [0.31, -0.02, 0.05, 0.11, 0.07, -0.04, 0.09];
        let u = [0.03, -0.05, 0.02];
        let theta = temperature(&h0);
        let mut h = h0;
        collide_thermal(&mut h, u, &k, Some(nu_t));
        let tau = 1.0 / model.omega + 4.0 * nu_t / 0.85;
        let wm = 1.0 / tau;
        let wp = 1.0 / (0.5 + 0.25 / (tau - 0.5));
        for a in 0..3 {
            let (p, m) = (2 * a + 1, 2 * a + 2);
            let flux = |h: &[f64; QT]| h[p] - h[m];
            // Odd part: (h_p − h_m)/2 relaxes towards w θ u_a / c_s² = θ u_a / 2 with ω⁻.
            let odd0 = 0.5 * flux(&h0);
            let odd1 = 0.5 * flux(&h);
            let target = 0.125 * theta * u[a] * 4.0;
            assert!(
                (odd1 - (odd0 + wm * (target - odd0))).abs() < 1e-15,
                "axis {a}"
            );
            let even0 = 0.5 * (h0[p] + h0[m]);
            let even1 = 0.5 * (h[p] + h[m]);
            assert!((even1 - (even0 + wp * (0.125 * theta - even0))).abs() < 1e-15);
        }
        // Without ν_t (or without Pr_t) the constant rates.
        let (mut a, mut b) = (h0, h0);
        collide_thermal(&mut a, u, &k, None);
        collide_thermal(&mut b, u, &coeff(0.013), Some(nu_t));
        let mut c = h0;
        collide_thermal(&mut c, u, &coeff(0.013), None);
        assert_eq!(a, c);
        assert_eq!(b, c);
    }

    /// Each pair's odd part (the flux of θ, on every axis) relaxes with ω⁻ towards θu and its even
    /// part with ω⁺; with Λ = (τ⁻ − ½)² the collision is BGK written out.
    #[test]
    fn the_flux_relaxes_with_the_odd_rate_on_every_axis_and_bgk_is_a_special_case() {
        let model = ThermalModel::new(0.013, 0.0, [0.0; 3]);
        let k = ThermalCoefficients::new(&model, |_, x| x);
        let h0 = [0.31, -0.02, 0.05, 0.11, 0.07, -0.04, 0.09];
        let u = [0.03, -0.05, 0.02];
        let theta = temperature(&h0);
        let flux =
            |h: &[f64; QT], a: usize| -> f64 { (0..QT).map(|i| h[i] * D3Q7.c[i][a] as f64).sum() };
        let mut h = h0;
        collide_thermal(&mut h, u, &k, None);
        for a in 0..3 {
            let want = flux(&h0, a) + model.omega * (theta * u[a] - flux(&h0, a));
            assert!((flux(&h, a) - want).abs() < 1e-15, "axis {a}");
            // The even part of the pair: towards w θ with ω⁺.
            let (p, m) = (2 * a + 1, 2 * a + 2);
            let even = |h: &[f64; QT]| 0.5 * (h[p] + h[m]);
            let want = even(&h0) + model.omega_plus() * (theta / 8.0 - even(&h0));
            assert!((even(&h) - want).abs() < 1e-15, "axis {a}");
        }
        let tau = 1.0 / model.omega;
        let bgk = ThermalModel {
            magic: (tau - 0.5) * (tau - 0.5),
            ..model.clone()
        };
        assert!((bgk.omega_plus() - bgk.omega).abs() < 1e-14);
        let mut h = h0;
        collide_thermal(&mut h, u, &ThermalCoefficients::new(&bgk, |_, x| x), None);
        let eq = thermal_equilibrium_populations(theta, u);
        for i in 0..QT {
            let want = h0[i] + model.omega * (eq[i] - h0[i]);
            assert!((h[i] - want).abs() < 1e-15, "direction {i}");
        }
    }

    /// The velocity that advects θ is the flow's Guo velocity `(j + F/2)/ρ`: for a node at rest
    /// with a force, half the force over the density.
    #[test]
    fn the_advecting_velocity_takes_half_the_force() {
        let g: [f64; Q] = crate::physics::equilibrium(0.02, [0.01, 0.0, -0.02]);
        let f = [2e-4, -4e-4, 6e-4];
        let plain = advecting_velocity(&g, None);
        let u = advecting_velocity(&g, Some(f));
        for a in 0..3 {
            assert!(
                (u[a] - plain[a] - 0.5 * f[a] / 1.02).abs() < 1e-15,
                "axis {a}"
            );
        }
        assert!((plain[0] - 0.01).abs() < 1e-15 && (plain[2] + 0.02).abs() < 1e-15);
    }

    /// Carried by a uniform stream, a hill spreads with the scheme's effective diffusivity
    /// `α (1 − u²/c_s²)` (the linear equilibrium's second-order error, −(τ⁻ − ½) u²), which at
    /// u = 0.1 is 4 % below α: the growth of the hill's variance measures it, whatever Λ.
    #[test]
    fn a_stream_lowers_the_diffusivity_by_u_squared_over_cs2() {
        let (n, alpha, u, sigma0) = (256, 0.05, 0.1, 8.0);
        let x0 = n as f64 / 3.0;
        let variance = |h: &[[f64; QT]], t: f64| {
            let (mut m0, mut m1, mut m2) = (0.0, 0.0, 0.0);
            for (x, hx) in h.iter().enumerate() {
                let mut d = x as f64 - x0 - u * t;
                d -= n as f64 * (d / n as f64).round();
                let th = temperature(hx);
                m0 += th;
                m1 += th * d;
                m2 += th * d * d;
            }
            m2 / m0 - (m1 / m0).powi(2)
        };
        let mut h = equilibrium_line(
            |x| (-(x - x0).powi(2) / (2.0 * sigma0 * sigma0)).exp(),
            n,
            u,
        );
        let (t1, t2) = (500, 2500);
        line(&mut h, t1, u, alpha, Ends::Periodic);
        let v1 = variance(&h, t1 as f64);
        line(&mut h, t2 - t1, u, alpha, Ends::Periodic);
        let v2 = variance(&h, t2 as f64);
        let measured = (v2 - v1) / (2.0 * (t2 - t1) as f64);
        let want = alpha * (1.0 - u * u / D3Q7.cs2);
        eprintln!("effective diffusivity {measured} (α = {alpha}, expected {want})");
        assert!((measured / want - 1.0).abs() < 2e-3, "{measured} vs {want}");
    }

    #[test]
    fn the_printed_collision_equals_the_direct_call_bit_for_bit() {
        let model = ThermalModel::new(0.0071, 2e-3, [0.0, -3e-5, 0.0]);
        let (out, rec) = symbolic::record(|| {
            let k = ThermalCoefficients::new(&model, Sym::param);
            let mut h: [Sym; QT] = std::array::from_fn(|i| Sym::input(format!("h[{i}]")));
            let u: [Sym; 3] = std::array::from_fn(|a| Sym::input(format!("u[{a}]")));
            collide_thermal(&mut h, u, &k, None);
            let f = buoyancy_force(temperature(&h), &k);
            let mut out = h.to_vec();
            out.extend(f);
            out.push(dirichlet_term(Sym::input("theta_w")));
            out
        });
        let h0 = [0.021, -0.003, 0.0071, 0.0049, -0.0012, 0.0083, 0.0002];
        let u0 = [0.031, -0.012, 0.044];
        let value = |s: &str| -> f64 {
            let i: usize = s[2..s.len() - 1].parse().unwrap_or(0);
            match &s[..1] {
                "h" => h0[i],
                "u" => u0[i],
                _ => 0.37,
            }
        };
        fn direct<T: crate::Real + Arith<Scalar = T>>(
            model: &ThermalModel,
            h0: [T; QT],
            u0: [T; 3],
            theta_w: T,
        ) -> Vec<T> {
            let k = ThermalCoefficients::new(model, |_, x| T::of(x));
            let mut h = h0;
            collide_thermal(&mut h, u0, &k, None);
            let f = buoyancy_force(temperature(&h), &k);
            let mut out = h.to_vec();
            out.extend(f);
            out.push(dirichlet_term(theta_w));
            out
        }
        let sym = rec.eval::<f64>(&out, value);
        let want = direct(&model, h0, u0, 0.37);
        assert_eq!(
            sym.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        let sym = rec.eval::<f32>(&out, |s| value(s) as f32);
        let want = direct(&model, h0.map(|v| v as f32), u0.map(|v| v as f32), 0.37f32);
        assert_eq!(
            sym.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }

    /// What a link of the line does at its ends.
    #[derive(Clone, Copy)]
    enum Ends {
        Periodic,
        /// Walls half a spacing outside the first and last node, held at these θ.
        Held(f64, f64),
    }

    /// `steps` steps of a line of `n` nodes along x (uniform in y and z, so the ±y and ±z
    /// populations of a node stream into itself) advected by a uniform `u`: the pull, then the
    /// collision, node by node, as the definition reads.
    fn line<T: crate::Real + Arith<Scalar = T>>(
        h: &mut [[T; QT]],
        steps: usize,
        u: f64,
        alpha: f64,
        ends: Ends,
    ) {
        let k = ThermalCoefficients::new(&ThermalModel::new(alpha, 0.0, [0.0; 3]), |_, x| T::of(x));
        let n = h.len();
        let u = [T::of(u), T::zero(), T::zero()];
        for _ in 0..steps {
            let prev = h.to_vec();
            for x in 0..n {
                let mut p = prev[x];
                // +x (1) comes from x − 1, −x (2) from x + 1.
                p[1] = match (x, ends) {
                    (0, Ends::Periodic) => prev[n - 1][1],
                    (0, Ends::Held(lo, _)) => -prev[0][2] + dirichlet_term(T::of(lo)),
                    _ => prev[x - 1][1],
                };
                p[2] = match (x + 1 == n, ends) {
                    (true, Ends::Periodic) => prev[0][2],
                    (true, Ends::Held(_, hi)) => -prev[n - 1][1] + dirichlet_term(T::of(hi)),
                    _ => prev[x + 1][2],
                };
                collide_thermal(&mut p, u, &k, None);
                h[x] = p;
            }
        }
    }

    fn equilibrium_line(theta: impl Fn(f64) -> f64, n: usize, u: f64) -> Vec<[f64; QT]> {
        (0..n)
            .map(|x| thermal_equilibrium_populations(theta(x as f64), [u, 0.0, 0.0]))
            .collect()
    }

    /// A Gaussian hill of width σ₀ carried by u and spread by α: `θ = σ₀/σ exp(−(x − x₀ − ut)²/2σ²)`
    /// with `σ² = σ₀² + 2αt`. Refined diffusively (n, σ₀ ∝ N; u ∝ 1/N; t ∝ N²; α fixed), the error
    /// falls by four with each doubling: the scheme is second order in space and time.
    #[test]
    fn a_gaussian_hill_is_carried_and_spread_at_second_order() {
        let alpha = 0.05;
        let mut errors = Vec::new();
        for level in [1usize, 2, 4] {
            let n = 64 * level;
            let sigma0 = 4.0 * level as f64;
            let u = 0.08 / level as f64;
            let steps = 400 * level * level;
            let x0 = n as f64 / 3.0;
            let mut h = equilibrium_line(
                |x| (-(x - x0).powi(2) / (2.0 * sigma0 * sigma0)).exp(),
                n,
                u,
            );
            line(&mut h, steps, u, alpha, Ends::Periodic);
            let t = steps as f64;
            // The scheme's own diffusivity along the stream (see the test below); its u² share
            // vanishes under diffusive refinement, so the order is second with α alone too.
            let s2 = sigma0 * sigma0 + 2.0 * alpha * (1.0 - u * u / D3Q7.cs2) * t;
            let (mut diff, mut norm) = (0.0, 0.0);
            for (x, hx) in h.iter().enumerate() {
                // The nearest periodic image of the moved centre.
                let mut d = x as f64 - x0 - u * t;
                d -= n as f64 * (d / n as f64).round();
                let exact = sigma0 / s2.sqrt() * (-d * d / (2.0 * s2)).exp();
                diff += (temperature(hx) - exact).powi(2);
                norm += exact * exact;
            }
            errors.push((diff / norm).sqrt());
        }
        let orders: Vec<f64> = errors.windows(2).map(|e| (e[0] / e[1]).log2()).collect();
        eprintln!("Gaussian hill: errors {errors:?}, orders {orders:?}");
        // With Λ = 1/4: 1.6 %, 0.39 %, 0.096 % of the hill's norm (orders 2.02 and 2.01); the
        // coarsest hill is four nodes wide.
        assert!(errors[0] < 2e-2, "{errors:?}");
        for o in orders {
            assert!(o > 1.8, "order {o} ({errors:?})");
        }
        // In f32 the coarsest level keeps its error: θ's rounding stays far below the scheme's.
        let (n, sigma0, u, steps) = (64, 4.0, 0.08, 400);
        let x0 = n as f64 / 3.0;
        let h64 = equilibrium_line(
            |x| (-(x - x0).powi(2) / (2.0 * sigma0 * sigma0)).exp(),
            n,
            u,
        );
        let mut h32: Vec<[f32; QT]> = h64.iter().map(|h| h.map(|v| v as f32)).collect();
        let mut h64 = h64;
        line(&mut h64, steps, u, alpha, Ends::Periodic);
        line(&mut h32, steps, u, alpha, Ends::Periodic);
        let worst = h64
            .iter()
            .zip(&h32)
            .map(|(a, b)| (temperature(a) - temperature(b) as f64).abs())
            .fold(0.0, f64::max);
        assert!(worst < 1e-5, "f32 departs from f64 by {worst}");
    }

    /// Conduction between walls at θ = 1 and θ = 0 half a spacing outside the line: the steady
    /// state is the straight line through the walls, `θ(x) = 1 − (x + ½)/n`, to rounding, at any
    /// diffusivity (the anti-bounce-back holds the wall value exactly for a linear profile).
    #[test]
    fn conduction_between_two_walls_is_linear_to_rounding() {
        for alpha in [0.01, 1.0 / 6.0, 0.4] {
            let n = 8;
            let mut h = vec![[0.0; QT]; n];
            line(&mut h, 40_000, 0.0, alpha, Ends::Held(1.0, 0.0));
            for (x, hx) in h.iter().enumerate() {
                let exact = 1.0 - (x as f64 + 0.5) / n as f64;
                let got = temperature(hx);
                assert!(
                    (got - exact).abs() < 1e-12,
                    "α = {alpha}, x = {x}: {got} vs {exact}"
                );
            }
        }
    }
}
