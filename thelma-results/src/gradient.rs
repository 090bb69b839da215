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
//! The domain may be held in parts (one per device: slabs along z, or the boxes of a partition
//! that cuts x and y too): a node reads its neighbours from whichever part holds them, so a part's
//! derivatives equal those of the gathered domain bit for bit, the same operations on the same
//! values.

use thelma_core::{Fields, SubdomainOf};

/// The whole domain as the parts that hold it: slabs in z order, or boxes tiling it in any order.
pub struct Lattice<'a> {
    parts: &'a [Fields],
    periodic: [bool; 3],
    /// The part holding each node.
    index: SubdomainOf,
}

impl<'a> Lattice<'a> {
    /// The domain of `parts`, which must tile a box from the origin (each node in one part);
    /// `periodic` says which axes wrap.
    pub fn new(parts: &'a [Fields], periodic: [bool; 3]) -> Self {
        let boxes: Vec<_> = parts
            .iter()
            .map(|p| ([p.xy0[0], p.xy0[1], p.z0], p.size))
            .collect();
        let index = SubdomainOf::new(&boxes).unwrap_or_else(|e| panic!("{e}"));
        Self {
            parts,
            periodic,
            index,
        }
    }

    /// Nodes along x, y, z.
    pub fn size(&self) -> [usize; 3] {
        self.index.size()
    }

    /// Part `k`.
    pub fn slab(&self, k: usize) -> &'a Fields {
        &self.parts[k]
    }

    /// The part holding node `p` (global coordinates) and the node's index in its arrays.
    fn locate(&self, p: [usize; 3]) -> (&'a Fields, usize) {
        let s = &self.parts[self.index.of(p)];
        (s, s.idx(p[0] - s.xy0[0], p[1] - s.xy0[1], p[2] - s.z0))
    }

    /// The velocity of node `at` moved by `k` nodes along `axis`, when that node is a fluid node of
    /// the box (wrapped across periodic faces).
    fn fluid(&self, at: [usize; 3], axis: usize, k: isize) -> Option<[f64; 3]> {
        let n = self.index.size()[axis] as isize;
        let mut c = at[axis] as isize + k;
        if !(0..n).contains(&c) {
            if !self.periodic[axis] {
                return None;
            }
            c = c.rem_euclid(n);
        }
        let mut p = at;
        p[axis] = c as usize;
        let (s, i) = self.locate(p);
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
        let (s, i) = self.locate(at);
        if s.solid[i] {
            return [[0.0; 3]; 3];
        }
        let u0 = [s.ux[i], s.uy[i], s.uz[i]];
        let d = [0, 1, 2].map(|axis| self.derivative(at, u0, axis));
        [0, 1, 2].map(|i| [d[0][i], d[1][i], d[2][i]])
    }

    /// ∇u at every node of part `k`, in the part's node order.
    pub fn gradients(&self, k: usize) -> impl Iterator<Item = [[f64; 3]; 3]> + '_ {
        let s = &self.parts[k];
        let [nx, ny, nz] = s.size;
        let ([x0, y0], z0) = (s.xy0, s.z0);
        (0..nz).flat_map(move |z| {
            (0..ny).flat_map(move |y| (0..nx).map(move |x| self.gradient([x0 + x, y0 + y, z0 + z])))
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

    /// The boxes of `whole` cut at the given thicknesses along x, y and z, listed z-major in
    /// reverse so that no order is assumed.
    fn boxes(whole: &Fields, cuts: [&[usize]; 3]) -> Vec<Fields> {
        let starts = |c: &[usize]| {
            c.iter()
                .scan(0, |at, &n| {
                    *at += n;
                    Some((*at - n, n))
                })
                .collect::<Vec<_>>()
        };
        let mut parts = Vec::new();
        for &(z0, nz) in &starts(cuts[2]) {
            for &(y0, ny) in &starts(cuts[1]) {
                for &(x0, nx) in &starts(cuts[0]) {
                    let mut f = Fields::zeros([nx, ny, nz], z0);
                    f.xy0 = [x0, y0];
                    for z in 0..nz {
                        for y in 0..ny {
                            for x in 0..nx {
                                let (p, q) = (f.idx(x, y, z), whole.idx(x0 + x, y0 + y, z0 + z));
                                [f.ux[p], f.uy[p], f.uz[p]] =
                                    [whole.ux[q], whole.uy[q], whole.uz[q]];
                                f.solid[p] = whole.solid[q];
                            }
                        }
                    }
                    parts.push(f);
                }
            }
        }
        parts.reverse();
        parts
    }

    /// The boxes of a partition that cuts x and y as well give each of their nodes the gradient
    /// the gathered domain gives it, bit for bit, periodic axes wrapping across the boxes.
    #[test]
    fn boxes_give_the_gathered_domain_s_gradients_bit_for_bit() {
        let size = [7, 6, 5];
        let u = |x: f64, y: f64, z: f64| {
            [
                (0.3 * x + 0.7 * z).sin() * 0.01,
                (0.2 * y * z + x).cos() * 0.02,
                (x * y * 0.1 + z).sin() * 0.03,
            ]
        };
        let solid = |x: usize, y: usize, z: usize| (2 * x + y + 3 * z).is_multiple_of(5);
        for periodic in [[false; 3], [true, true, false], [false, true, true]] {
            let whole = domain(size, &[size[2]], u, solid);
            let lat = Lattice::new(&whole, periodic);
            for cuts in [
                [&[3, 4][..], &[6][..], &[5][..]],
                [&[1, 5, 1], &[2, 4], &[2, 3]],
                [&[7], &[1, 1, 4], &[1, 1, 3]],
            ] {
                let parts = boxes(&whole[0], cuts);
                let cut = Lattice::new(&parts, periodic);
                assert_eq!(cut.size(), size);
                for (k, part) in parts.iter().enumerate() {
                    let [x0, y0] = part.xy0;
                    for (i, g) in cut.gradients(k).enumerate() {
                        let [nx, ny] = [part.size[0], part.size[1]];
                        let at = [x0 + i % nx, y0 + i / nx % ny, part.z0 + i / (nx * ny)];
                        let want = lat.gradient(at);
                        assert!(
                            g.iter()
                                .flatten()
                                .map(|x| x.to_bits())
                                .eq(want.iter().flatten().map(|x| x.to_bits())),
                            "{at:?} {cuts:?} {periodic:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "parts do not tile the domain")]
    fn parts_with_a_gap_between_them_are_refused() {
        let whole = domain([8, 2, 2], &[2], |_, _, _| [0.0; 3], |_, _, _| false);
        let mut parts = boxes(&whole[0], [&[3, 2, 3], &[2], &[2]]);
        // x 0..3 and 5..8 left: nothing holds x 3..5.
        parts.remove(1);
        let _ = Lattice::new(&parts, [false; 3]);
    }

    #[test]
    #[should_panic(expected = "parts do not tile the domain")]
    fn parts_with_a_hole_are_refused() {
        let whole = domain([4, 4, 2], &[2], |_, _, _| [0.0; 3], |_, _, _| false);
        let mut parts = boxes(&whole[0], [&[2, 2], &[2, 2], &[2]]);
        parts.remove(1);
        let _ = Lattice::new(&parts, [false; 3]);
    }
}
