//! Velocity derivatives on the lattice: the gradient ∇u at every fluid node by finite differences,
//! and from it the vorticity ω = ∇ × u and the Q-criterion.
//!
//! The derivative along an axis is the second-order central difference where both neighbours on
//! that axis are fluid nodes of the box (across a periodic face, the neighbour is the wrapped
//! node). Where one neighbour is solid or outside the box, it is the second-order one-sided
//! difference over the next two nodes on the other side, `(−3u₀ + 4u₁ − u₂)/2`; where only one
//! node is fluid on that side, the first-order difference `u₁ − u₀`; with no fluid neighbour on
//! the axis, 0. Solid nodes get 0. The wall's own velocity half a spacing away is not used:
//! the differences see fluid nodes only, so they need no boundary data and every rule above is
//! exact for a linear field.
//!
//! The domain may be held in slabs (one per device): a node reads its neighbours from whichever slab
//! holds them, so a slab's derivatives equal those of the gathered domain bit for bit, the same
//! operations on the same values.

use thelma_core::Fields;

/// The whole domain as the slabs that hold it, in z order.
pub struct Lattice<'a> {
    slabs: &'a [Fields],
    size: [usize; 3],
    periodic: [bool; 3],
    /// For each global z-plane: its slab and the offset of the plane in the slab's arrays.
    planes: Vec<(usize, usize)>,
}

impl<'a> Lattice<'a> {
    /// The domain of `slabs`, which must follow each other along z from plane 0, with the same
    /// x–y size; `periodic` says which axes wrap.
    pub fn new(slabs: &'a [Fields], periodic: [bool; 3]) -> Self {
        let [nx, ny] = slabs.first().map_or([0, 0], |s| [s.size[0], s.size[1]]);
        let mut planes = Vec::new();
        for (k, s) in slabs.iter().enumerate() {
            assert!(
                s.z0 == planes.len() && s.size[..2] == [nx, ny],
                "slabs do not tile the domain along z"
            );
            planes.extend((0..s.size[2]).map(|z| (k, z * nx * ny)));
        }
        Self {
            slabs,
            size: [nx, ny, planes.len()],
            periodic,
            planes,
        }
    }

    /// Nodes along x, y, z.
    pub fn size(&self) -> [usize; 3] {
        self.size
    }

    /// Slab `k`.
    pub fn slab(&self, k: usize) -> &'a Fields {
        &self.slabs[k]
    }

    /// The velocity of node `at` moved by `k` nodes along `axis`, when that node is a fluid node of
    /// the box (wrapped across periodic faces).
    fn fluid(&self, at: [usize; 3], axis: usize, k: isize) -> Option<[f64; 3]> {
        let n = self.size[axis] as isize;
        let mut c = at[axis] as isize + k;
        if !(0..n).contains(&c) {
            if !self.periodic[axis] {
                return None;
            }
            c = c.rem_euclid(n);
        }
        let mut p = at;
        p[axis] = c as usize;
        let (slab, base) = self.planes[p[2]];
        let s = &self.slabs[slab];
        let i = base + p[1] * self.size[0] + p[0];
        (!s.solid[i]).then(|| [s.ux[i], s.uy[i], s.uz[i]])
    }

    /// ∂u/∂x_axis at the fluid node `at` whose velocity is `u0`, by the rule the module describes.
    fn derivative(&self, at: [usize; 3], u0: [f64; 3], axis: usize) -> [f64; 3] {
        use std::array::from_fn;
        let step = |k| self.fluid(at, axis, k);
        match (step(1), step(-1)) {
            (Some(p), Some(m)) => from_fn(|c| 0.5 * (p[c] - m[c])),
            (Some(p), None) => match step(2) {
                Some(p2) => from_fn(|c| 0.5 * (4.0 * p[c] - 3.0 * u0[c] - p2[c])),
                None => from_fn(|c| p[c] - u0[c]),
            },
            (None, Some(m)) => match step(-2) {
                Some(m2) => from_fn(|c| 0.5 * (3.0 * u0[c] - 4.0 * m[c] + m2[c])),
                None => from_fn(|c| u0[c] - m[c]),
            },
            (None, None) => [0.0; 3],
        }
    }

    /// ∇u at node `at` (global coordinates) in lattice units: `g[i][j] = ∂u_i/∂x_j`; zero at a
    /// solid node.
    pub fn gradient(&self, at: [usize; 3]) -> [[f64; 3]; 3] {
        let (slab, base) = self.planes[at[2]];
        let s = &self.slabs[slab];
        let i = base + at[1] * self.size[0] + at[0];
        if s.solid[i] {
            return [[0.0; 3]; 3];
        }
        let u0 = [s.ux[i], s.uy[i], s.uz[i]];
        let d = [0, 1, 2].map(|axis| self.derivative(at, u0, axis));
        [0, 1, 2].map(|i| [d[0][i], d[1][i], d[2][i]])
    }

    /// ∇u at every node of slab `k`, in the slab's node order.
    pub fn gradients(&self, k: usize) -> impl Iterator<Item = [[f64; 3]; 3]> + '_ {
        let s = &self.slabs[k];
        let [nx, ny, nz] = s.size;
        let z0 = s.z0;
        (0..nz).flat_map(move |z| {
            (0..ny).flat_map(move |y| (0..nx).map(move |x| self.gradient([x, y, z0 + z])))
        })
    }
}

/// ω = ∇ × u of a gradient `g[i][j] = ∂u_i/∂x_j`.
pub fn vorticity(g: &[[f64; 3]; 3]) -> [f64; 3] {
    [g[2][1] - g[1][2], g[0][2] - g[2][0], g[1][0] - g[0][1]]
}

/// Q = ½(‖Ω‖² − ‖S‖²) of a gradient `g`, Ω and S its antisymmetric and symmetric parts. Since
/// Ω_ij² − S_ij² = −g_ij g_ji, this is −½ Σ g_ij g_ji (= −½ tr g²), summed without forming Ω and S.
pub fn q_criterion(g: &[[f64; 3]; 3]) -> f64 {
    let mut sum = 0.0;
    for (i, row) in g.iter().enumerate() {
        for (j, &gij) in row.iter().enumerate() {
            sum += gij * g[j][i];
        }
    }
    -0.5 * sum
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A domain of `size` nodes with the velocity `u(x, y, z)` and the solid nodes `solid`, cut
    /// into slabs of the given thicknesses.
    fn domain(
        size: [usize; 3],
        cuts: &[usize],
        u: impl Fn(f64, f64, f64) -> [f64; 3],
        solid: impl Fn(usize, usize, usize) -> bool,
    ) -> Vec<Fields> {
        let mut z0 = 0;
        cuts.iter()
            .map(|&nz| {
                let mut f = Fields::zeros([size[0], size[1], nz], z0);
                for z in 0..nz {
                    for y in 0..size[1] {
                        for x in 0..size[0] {
                            let p = f.idx(x, y, z);
                            let v = u(x as f64, y as f64, (z + z0) as f64);
                            [f.ux[p], f.uy[p], f.uz[p]] = v;
                            f.solid[p] = solid(x, y, z + z0);
                            f.rho[p] = 1.0;
                        }
                    }
                }
                z0 += nz;
                f
            })
            .collect()
    }

    fn every_node(size: [usize; 3]) -> impl Iterator<Item = [usize; 3]> {
        (0..size[2])
            .flat_map(move |z| (0..size[1]).flat_map(move |y| (0..size[0]).map(move |x| [x, y, z])))
    }

    /// Linear fields have exact central and one-sided differences, so every fluid node, at the faces
    /// and beside obstacles too, gets the exact value (the velocities are binary fractions).
    #[test]
    fn linear_fields_give_their_exact_vorticity_and_q() {
        let size = [7, 6, 9];
        // A block of solid nodes: beside it the differences are one-sided, of second order where
        // two fluid nodes follow and of first order between the block and a face (x = 1, y = 1).
        let solid = |x: usize, y: usize, z: usize| {
            (2..4).contains(&x) && (2..4).contains(&y) && (3..5).contains(&z)
        };
        let w = 0.125; // Ω
        let a = 0.0625;
        let gamma = 0.25;
        type Field = Box<dyn Fn(f64, f64, f64) -> [f64; 3]>;
        // (velocity, vorticity, Q)
        let cases: [(Field, [f64; 3], f64); 4] = [
            // Solid-body rotation about z: u = Ω × r about (3, 2.5, ·).
            (
                Box::new(move |x, y, _| [-w * (y - 2.5), w * (x - 3.0), 0.0]),
                [0.0, 0.0, 2.0 * w],
                w * w,
            ),
            // About x, so that the z-derivatives cross the slab edges.
            (
                Box::new(move |_, y, z| [0.0, -w * (z - 4.0), w * (y - 2.0)]),
                [2.0 * w, 0.0, 0.0],
                w * w,
            ),
            // Pure strain.
            (
                Box::new(move |x, y, _| [a * x, -a * y, 0.0]),
                [0.0; 3],
                -a * a,
            ),
            // Simple shear: the vorticity and the strain balance.
            (
                Box::new(move |_, y, _| [gamma * y, 0.0, 0.0]),
                [0.0, 0.0, -gamma],
                0.0,
            ),
        ];
        for (u, omega, q) in cases {
            for cuts in [&[9][..], &[3, 1, 5], &[1, 1, 1, 6]] {
                let slabs = domain(size, cuts, &u, solid);
                let lat = Lattice::new(&slabs, [false; 3]);
                for at in every_node(size) {
                    let g = lat.gradient(at);
                    if solid(at[0], at[1], at[2]) {
                        assert_eq!(g, [[0.0; 3]; 3]);
                        continue;
                    }
                    assert_eq!(vorticity(&g), omega, "{at:?} {cuts:?}");
                    assert_eq!(q_criterion(&g), q, "{at:?} {cuts:?}");
                }
            }
        }
    }

    /// A sine across a periodic axis: the central difference wraps, and its error is the known
    /// second-order one, sin(k)/k against 1.
    #[test]
    fn periodic_axes_wrap_and_the_central_difference_is_second_order() {
        let n = 16;
        let k = 2.0 * std::f64::consts::PI / n as f64;
        let slabs = domain(
            [4, 3, n],
            &[5, 11],
            |_, _, z| [(k * z).sin(), 0.0, 0.0],
            |_, _, _| false,
        );
        let lat = Lattice::new(&slabs, [false, false, true]);
        for z in 0..n {
            let g = lat.gradient([1, 1, z]);
            let want = k.sin() * (k * z as f64).cos();
            assert!((g[0][2] - want).abs() < 1e-15, "{z}: {} {want}", g[0][2]);
        }
        // Without the wrap the end planes fall back to one-sided differences.
        let open = Lattice::new(&slabs, [false; 3]);
        let g = open.gradient([1, 1, 0]);
        let (u1, u2) = ((k).sin(), (2.0 * k).sin());
        assert_eq!(g[0][2], 0.5 * (4.0 * u1 - 3.0 * 0.0 - u2));
    }

    #[test]
    fn slabs_give_the_gathered_domain_s_gradients_bit_for_bit() {
        let size = [5, 4, 10];
        let u = |x: f64, y: f64, z: f64| {
            [
                (0.3 * x + 0.7 * z).sin() * 0.01,
                (0.2 * y * z).cos() * 0.02,
                (x * y * 0.1 + z).sin() * 0.03,
            ]
        };
        let solid = |x: usize, y: usize, z: usize| (x + 2 * y + 3 * z).is_multiple_of(7);
        for periodic in [[false; 3], [true, false, true]] {
            let whole = domain(size, &[10], u, solid);
            let whole = Lattice::new(&whole, periodic);
            let want: Vec<_> = whole.gradients(0).collect();
            for cuts in [&[2, 3, 5][..], &[1, 8, 1], &[4, 6]] {
                let slabs = domain(size, cuts, u, solid);
                let lat = Lattice::new(&slabs, periodic);
                let got: Vec<_> = (0..slabs.len()).flat_map(|k| lat.gradients(k)).collect();
                let bits = |v: &[[[f64; 3]; 3]]| {
                    v.iter()
                        .flat_map(|g| g.iter().flatten().map(|x| x.to_bits()))
                        .collect::<Vec<_>>()
                };
                assert_eq!(bits(&got), bits(&want), "{cuts:?} {periodic:?}");
            }
        }
    }
}
