//! Boundary rules whose arithmetic is physics, written once over [`Arith`] for every module (the
//! CUDA prelude prints them as it prints the collision). Which population a link reads is streaming
//! and lives with each module's pull; what it adds is here.

use super::arith::Arith;
use super::collision::{density_momentum, equilibrium_pairs, macroscopic, Macroscopic};
use super::d3q19::{C, OPP, Q};

/// The anti-bounce-back terms of a pressure outlet at density `1 + drho_w`, per opposite pair: a link
/// `i` of pair `p` leaving through the outlet gets `g_i = −g̃_ī + terms[p]`, with `terms[p] = 2 e_p`
/// and `e_p` the part of the shifted equilibrium at `(drho_w, u)` even in `c` (Ginzburg 2008; in
/// unshifted form `f_i = −f̃_ī + 2 w_i ρ_w (1 + 9/2 (c_i·u)² − 3/2 u²)`). `u` is the velocity of the
/// node's own post-collision populations `g`, which is second-order accurate for the density and
/// first-order for the velocity at the outlet plane half a spacing away.
#[inline(always)]
pub fn pressure_terms<V: Arith>(g: &[V; Q], drho_w: V) -> [V; 9] {
    let u = macroscopic(g, None).u;
    let e = equilibrium_pairs(&Macroscopic {
        drho: drho_w,
        rho: V::c(1.0) + drho_w,
        u,
    });
    e.even.map(|v| V::c(2.0) * v)
}

/// The density `1 + Σ g` of a node's populations: what a velocity inlet's bounce-back term is scaled
/// by (`g_i = g̃_ī + ρ · 6 w_i (c_i · u_in)`, Ladd's rule with the wall density taken at the node), so
/// that the inlet imposes the momentum `ρ u_in` it is given rather than `u_in` at unit density.
#[inline(always)]
pub fn node_density<V: Arith>(g: &[V; Q]) -> V {
    V::c(1.0) + density_momentum(g).0
}

/// The Poiseuille profile across one axis of an inlet: `4 s (n − s) / n²` with `s = q + ½` the
/// distance of node `q` from the wall half a spacing below the lattice and `n` the number of nodes
/// between the two walls, so 1 midway and 0 at the walls. A parabolic inlet multiplies its velocity
/// by this factor for each wall-bounded axis across the face, at the node's own coordinate.
#[inline(always)]
pub fn parabola<V: Arith>(q: V, n: V) -> V {
    let s = q + V::c(0.5);
    V::c(4.0) * s * (n - s) / (n * n)
}

/// The momentum a fluid node gives a resting body in one step, by momentum exchange (Ladd 1994):
/// for each direction `i` in `links` (bit `i`: `x − c_i` lies in the body, so the population
/// `f̃_ī` leaving towards it comes back as `f_i = f̃_ī`), `c_ī f̃_ī − c_i f_i = 2 c_ī f̃_ī`. From
/// the shifted post-collision populations `g̃` as stored: the weights' share, `2 c_ī w_ī`, sums to
/// zero over a closed surface (it is the reference pressure's), so the force is that of `p − p₀`.
pub fn momentum_exchange(g: &[f64; Q], links: u32) -> [f64; 3] {
    let mut f = [0.0; 3];
    let mut m = links;
    while m != 0 {
        let i = m.trailing_zeros() as usize;
        m &= m - 1;
        let o = OPP[i];
        for (a, fa) in f.iter_mut().enumerate() {
            *fa += 2.0 * C[o][a] as f64 * g[o];
        }
    }
    f
}
