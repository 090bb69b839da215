//! Sponge layers: the absorbing zone in front of a pressure outlet. After its collision, every node
//! of a layer is relaxed towards a target state, `g_i ← g_i − σ (g_eq_i(ρ, u) − g_eq_i(ρ_w, u_t))`
//! (the absorbing term of Xu & Sagaut 2013, J. Comput. Phys. 245, "Analysis of the absorbing layers
//! for the weakly-compressible lattice Boltzmann methods"), with a rate σ that grows smoothly from 0
//! at the layer's inner edge to its strength next to the face. A pressure outlet holds its density,
//! so it reflects a sound wave whole (anti-bounce-back inverts it); in the layer the wave dies out
//! before it gets there.
//!
//! **The target is the node less its outgoing sound wave.** Xu & Sagaut relax towards a known far
//! field (ρ_∞, u_∞); an outlet has none (a channel's profile is the flow's own). Taken locally
//! one-dimensional along the outward normal `n`, as characteristic boundary conditions take it
//! (Poinsot & Lele 1992), a wave leaving through the face carries the density excess `ρ − ρ_w` with
//! the momentum `c_s (ρ − ρ_w) n`, so the target is `ρ_w` with the momentum `j − c_s (ρ − ρ_w) n`:
//! a purely outgoing wave is damped by `1 − σ` per step and an incoming one is left as it is.
//! Relaxing the density alone (the node's own velocity kept) turns part of every outgoing pulse
//! into an incoming one: measured, a 16-plane layer of it sent back 33–59 % of a pulse (strengths
//! 0.1 to 1), where this one sends back 1.2 % at strength 0.5 (`PERFORMANCE.md`). The mean flow is
//! untouched where its density is the outlet's; where a steady flow needs a pressure drop through the layer (a channel), the layer takes up part
//! of it, and the flow upstream of it moved by 0.24 % of the inlet's speed (tested).
//!
//! The term is written once over [`Arith`], after whatever operator collided the node, so it
//! composes with every operator and option; it holds no state (restarts and partitions are
//! untouched) and costs arithmetic only in the layer's nodes.

use super::arith::Arith;
use super::collision::{density_momentum, equilibrium_pairs, Macroscopic};
use super::d3q19::Q;
use super::symbolic::{self, Recording, Sym};
use crate::Face;

/// The sponge layer of one pressure face: `width` planes of nodes from the face inwards.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpongeLayer {
    pub face: Face,
    /// Planes of nodes in the layer, counted from the face.
    pub width: usize,
    /// σ next to the face (depth 0); it falls as the square of the distance to the layer's inner
    /// edge ([`sponge_rate`]).
    pub strength: f64,
    /// The outlet's `δρ_w = ρ_w − 1`, which the layer relaxes towards.
    pub drho: f64,
    /// Nodes of the domain along the face's axis.
    pub extent: usize,
}

impl SpongeLayer {
    /// The depth of the node at global position `p` in the layer (0 next to the face), or `None`
    /// outside it.
    #[inline]
    pub fn depth(&self, p: [usize; 3]) -> Option<usize> {
        let q = p[self.face.axis()];
        let d = if self.face.upper() {
            self.extent.checked_sub(q + 1)?
        } else {
            q
        };
        (d < self.width).then_some(d)
    }

    /// The face's outward normal.
    pub fn normal(&self) -> [i32; 3] {
        let mut n = [0; 3];
        n[self.face.axis()] = if self.face.upper() { 1 } else { -1 };
        n
    }

    /// Whether a node with coordinate `lo..hi` along the face's axis can lie in the layer.
    #[inline]
    fn spans(&self, lo: usize, hi: usize) -> bool {
        if self.face.upper() {
            hi + self.width > self.extent
        } else {
            lo < self.width
        }
    }
}

/// What a layer does at one node: its rate there, the outlet's `δρ_w` and the face's outward
/// normal.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Absorption<V> {
    pub sigma: V,
    pub drho_w: V,
    pub normal: [V; 3],
}

/// The sponge layers of a case (none without one).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sponges {
    pub layers: Vec<SpongeLayer>,
}

impl Sponges {
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The absorption of the node at global position `p` in the run's arithmetic: that of the
    /// layer whose rate is largest there (the first of equal ones), or `None` outside every layer.
    /// The kernels print the same choice (`thelma_compute::cuda::prelude`).
    #[inline]
    pub fn at<V: Arith + PartialOrd>(&self, p: [usize; 3]) -> Option<Absorption<V>> {
        let mut best: Option<Absorption<V>> = None;
        for l in &self.layers {
            if let Some(d) = l.depth(p) {
                let sigma = sponge_rate(V::c(d as f64), V::c(l.width as f64), V::c(l.strength));
                if best.is_none_or(|b| sigma > b.sigma) {
                    best = Some(Absorption {
                        sigma,
                        drho_w: V::c(l.drho),
                        normal: l.normal().map(|c| V::c(c as f64)),
                    });
                }
            }
        }
        best
    }

    /// Whether a node of the rows `x` in `x0..x1` at (y, z) (global) can lie in a layer: a quick
    /// test before [`Self::at`] per node.
    #[inline]
    pub fn touches(&self, x0: usize, x1: usize, y: usize, z: usize) -> bool {
        self.layers.iter().any(|l| match l.face.axis() {
            0 => l.spans(x0, x1),
            1 => l.spans(y, y + 1),
            _ => l.spans(z, z + 1),
        })
    }
}

/// The absorption rate at depth `d` of a layer of `width` planes and `strength` σ_max:
/// `σ = σ_max ((width − d) / width)²`, σ_max next to the face, small at the inner edge. A smooth
/// rise reflects less at the layer's own start than a step does.
#[inline(always)]
pub fn sponge_rate<V: Arith>(d: V, width: V, strength: V) -> V {
    let s = (width - d) / width;
    strength * (s * s)
}

/// Relaxes a node's post-collision populations by `a.sigma` towards the outlet's density
/// `ρ_w = 1 + a.drho_w` with the momentum `j − c_s (ρ − ρ_w) n` (`n = a.normal`): `g_i ← g_i −
/// σ (g_eq_i(ρ, j/ρ) − g_eq_i(ρ_w, (j − c_s (ρ − ρ_w) n)/ρ_w))`. The density moves by `−σ (ρ − ρ_w)`
/// and the momentum by `−σ c_s (ρ − ρ_w) n`: a sound wave leaving through the face loses the share
/// σ of its amplitude and keeps its shape.
#[inline(always)]
pub fn absorb<V: Arith>(g: &mut [V; Q], a: &Absorption<V>) {
    let (drho, j) = density_momentum(g);
    let rho = V::c(1.0) + drho;
    let inv = V::c(1.0) / rho;
    let excess = V::c(1.0 / 3f64.sqrt()) * (drho - a.drho_w);
    let rho_w = V::c(1.0) + a.drho_w;
    let inv_w = V::c(1.0) / rho_w;
    let now = equilibrium_pairs(&Macroscopic {
        drho,
        rho,
        u: j.map(|c| c * inv),
    });
    let target = equilibrium_pairs(&Macroscopic {
        drho: a.drho_w,
        rho: rho_w,
        u: std::array::from_fn(|k| (j[k] - excess * a.normal[k]) * inv_w),
    });
    let s = a.sigma;
    g[0] = g[0] - s * (now.rest - target.rest);
    for p in 0..9 {
        let even = now.even[p] - target.even[p];
        let odd = now.odd[p] - target.odd[p];
        g[2 * p + 1] = g[2 * p + 1] - s * (even + odd);
        g[2 * p + 2] = g[2 * p + 2] - s * (even - odd);
    }
}

/// [`absorb`] recorded on symbols, as the kernels' `thelma_absorb(g, sigma, drho_w, n)` takes its
/// inputs (`g[i]`, `sigma`, `drho_w`, `n[k]`): what the prelude prints and the tests replay.
pub fn absorb_recording() -> ([Sym; Q], Recording) {
    symbolic::record(|| {
        let mut g: [Sym; Q] = std::array::from_fn(|i| Sym::input(format!("g[{i}]")));
        let a = Absorption {
            sigma: Sym::input("sigma"),
            drho_w: Sym::input("drho_w"),
            normal: std::array::from_fn(|k| Sym::input(format!("n[{k}]"))),
        };
        absorb(&mut g, &a);
        g
    })
}
