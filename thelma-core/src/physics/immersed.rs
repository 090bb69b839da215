//! The immersed boundary method: bodies as Lagrangian surface points moving rigidly through the
//! lattice, held to their velocity by a force the flow receives through Guo's forcing term.
//!
//! **Direct forcing, iterated** (multi-direct forcing, Wang, Fan & Luo 2008; Ota, Suzuki & Inamuro
//! 2012). Before step `t`, at every node of the points' supports (the *band*), the velocity the
//! step would collide with without the bodies, `u* = (j + F/2)/ρ` of the pulled populations under
//! the uniform force. Then `K` times: interpolate `U(X_k) = Σ_x δ(x − X_k) u(x)`, add to each
//! point's force density `ΔF_k = 2 ρ(X_k) (U_d(X_k) − U(X_k))` (Guo's collision moves the velocity
//! by `F/(2ρ)`, so this force makes the point's velocity `U_d`), spread it
//! `Δf(x) = Σ_k δ(x − X_k) ΔF_k ΔV_k` and correct the band's velocity by `Δf/(2ρ)`. The nodes' total
//! `f(x)` is added to the uniform force in the step. Each iteration lets neighbouring points'
//! supports, which overlap, settle on one another's share; `K = 5` as in Ota et al.
//!
//! **The kernel** is Roma, Peskin & Berger's (1999) three-point regularised delta: it sums to one
//! and has a zero first moment for every offset, so spreading conserves the force and, about any
//! point, the torque (tested), and it touches 27 nodes per point where the four-point cosine kernel
//! touches 64.
//!
//! Everything here is in f64 on the host and depends only on the band's pulled populations, taken
//! in the domain's node order: a run on N slabs computes the same forces as on one, bit for bit.

use rayon::prelude::*;

use super::arith::Arith;
use super::collision::macroscopic;
use super::d3q19::Q;

/// The number of nodes of the kernel's support per axis.
pub const SUPPORT: usize = 3;

/// Roma, Peskin & Berger's three-point regularised delta function of a distance `r` (in lattice
/// spacings): nonzero for |r| < 3/2.
pub fn delta_roma(r: f64) -> f64 {
    let r = r.abs();
    if r <= 0.5 {
        delta_inner(r)
    } else if r < 1.5 {
        delta_outer(r)
    } else {
        0.0
    }
}

/// [`delta_roma`] for `0 ≤ r ≤ 1/2` (the branch the kernels print, with [`delta_outer`]).
#[inline(always)]
pub fn delta_inner<V: Arith>(r: V) -> V {
    (V::c(1.0) + (V::c(1.0) - V::c(3.0) * r * r).sqrt()) / V::c(3.0)
}

/// [`delta_roma`] for `1/2 < r < 3/2`, where `1 − 3 (1 − r)²` lies in `(1/4, 1]`.
#[inline(always)]
pub fn delta_outer<V: Arith>(r: V) -> V {
    let s = V::c(1.0) - r;
    (V::c(5.0) - V::c(3.0) * r - (V::c(1.0) - V::c(3.0) * s * s).sqrt()) / V::c(6.0)
}

/// The support of a point along one axis: its first node (the nearest node less one) and the
/// kernel's weight at each of the three nodes from it.
pub fn support_1d(x: f64) -> (i64, [f64; SUPPORT]) {
    let first = (x + 0.5).floor() as i64 - 1;
    let w = std::array::from_fn(|k| delta_roma((first + k as i64) as f64 - x));
    (first, w)
}

/// A prescribed rigid motion, in lattice units (node spacings and steps): a rotation at a constant
/// `rate` (radians per step) about the axis through `origin` along `axis`, and a translation of that
/// origin at `velocity` plus a piecewise-linear `path` of offsets (time, offset), held at its ends.
#[derive(Clone, Debug, PartialEq)]
pub struct RigidMotion {
    pub origin: [f64; 3],
    /// A unit vector (or zero with `rate` 0).
    pub axis: [f64; 3],
    pub rate: f64,
    pub velocity: [f64; 3],
    /// Times strictly increasing.
    pub path: Vec<(f64, [f64; 3])>,
}

impl RigidMotion {
    /// A body at rest.
    pub fn at_rest() -> Self {
        Self {
            origin: [0.0; 3],
            axis: [0.0, 0.0, 1.0],
            rate: 0.0,
            velocity: [0.0; 3],
            path: Vec::new(),
        }
    }

    /// The path's offset and velocity at time `t`.
    fn path_at(&self, t: f64) -> ([f64; 3], [f64; 3]) {
        let p = &self.path;
        match p.len() {
            0 => ([0.0; 3], [0.0; 3]),
            _ if t <= p[0].0 => (p[0].1, [0.0; 3]),
            n if t >= p[n - 1].0 => (p[n - 1].1, [0.0; 3]),
            _ => {
                let k = p.partition_point(|e| e.0 <= t) - 1;
                let ((t0, a), (t1, b)) = (p[k], p[k + 1]);
                let s = (t - t0) / (t1 - t0);
                (
                    std::array::from_fn(|i| a[i] + s * (b[i] - a[i])),
                    std::array::from_fn(|i| (b[i] - a[i]) / (t1 - t0)),
                )
            }
        }
    }

    /// The pose at time `t`.
    pub fn pose(&self, t: f64) -> Pose {
        let (offset, v_path) = self.path_at(t);
        let centre = std::array::from_fn(|i| self.origin[i] + self.velocity[i] * t + offset[i]);
        Pose {
            origin: self.origin,
            centre,
            rotation: axis_angle(self.axis, self.rate * t),
            omega: self.axis.map(|a| a * self.rate),
            velocity: std::array::from_fn(|i| self.velocity[i] + v_path[i]),
        }
    }

    /// The largest distance the centre moves from the origin over times `0..=t_end` (the path's
    /// vertices and the ends bound it: the motion is linear between them).
    pub fn reach(&self, t_end: f64) -> [[f64; 3]; 2] {
        let mut times = vec![0.0, t_end];
        times.extend(
            self.path
                .iter()
                .map(|e| e.0)
                .filter(|&s| s > 0.0 && s < t_end),
        );
        let mut b = [[f64::INFINITY; 3], [f64::NEG_INFINITY; 3]];
        for t in times {
            let c = self.pose(t).centre;
            for a in 0..3 {
                let d = c[a] - self.origin[a];
                b[0][a] = b[0][a].min(d);
                b[1][a] = b[1][a].max(d);
            }
        }
        b
    }
}

/// Where a rigid body is at one time: a point `p` of its reference placement is at
/// `centre + R (p − origin)` and moves at `velocity + ω × (x − centre)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pose {
    pub origin: [f64; 3],
    pub centre: [f64; 3],
    pub rotation: [[f64; 3]; 3],
    pub omega: [f64; 3],
    pub velocity: [f64; 3],
}

impl Pose {
    /// The position and velocity of the point placed at `p` at time 0.
    pub fn place(&self, p: [f64; 3]) -> ([f64; 3], [f64; 3]) {
        let d: [f64; 3] = std::array::from_fn(|i| p[i] - self.origin[i]);
        let r: [f64; 3] = std::array::from_fn(|i| {
            self.rotation[i][0] * d[0] + self.rotation[i][1] * d[1] + self.rotation[i][2] * d[2]
        });
        let x = std::array::from_fn(|i| self.centre[i] + r[i]);
        let w = cross(self.omega, r);
        (x, std::array::from_fn(|i| self.velocity[i] + w[i]))
    }
}

fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

/// Rodrigues' rotation by `angle` about the unit `axis`.
fn axis_angle(axis: [f64; 3], angle: f64) -> [[f64; 3]; 3] {
    let (s, c) = angle.sin_cos();
    let [x, y, z] = axis;
    let t = 1.0 - c;
    [
        [c + x * x * t, x * y * t - z * s, x * z * t + y * s],
        [y * x * t + z * s, c + y * y * t, y * z * t - x * s],
        [z * x * t - y * s, z * y * t + x * s, c + z * z * t],
    ]
}

/// One body of Lagrangian points: their positions at time 0 (node coordinates) and the surface
/// area each stands for (node spacings squared).
#[derive(Clone, Debug, PartialEq)]
pub struct LagrangianBody {
    pub name: String,
    pub points: Vec<[f64; 3]>,
    pub areas: Vec<f64>,
    pub motion: RigidMotion,
}

/// The force and torque the fluid exerts on one body (lattice units; the torque about the body's
/// centre of motion: where its motion's origin has moved).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BodyLoad {
    pub force: [f64; 3],
    pub torque: [f64; 3],
}

/// The bodies of a run and the lattice they move in.
#[derive(Clone, Debug, PartialEq)]
pub struct ImmersedBodies {
    pub bodies: Vec<LagrangianBody>,
    pub size: [usize; 3],
    pub periodic: [bool; 3],
    /// Fixed-point iterations of the direct forcing.
    pub iterations: usize,
}

/// Why the bodies cannot be placed at some step.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("immersed body `{body}` leaves the domain along {axis} at step {step} (its kernel needs the nodes within 1.5 spacings of each point inside the lattice)")]
pub struct LeavesDomain {
    pub body: String,
    pub axis: char,
    pub step: u64,
}

/// The points of every body at one step and the band of nodes their supports cover.
#[derive(Clone, Debug, PartialEq)]
pub struct ForcingPlan {
    pub step: u64,
    /// Positions (unwrapped: a periodic axis's coordinate may lie outside the lattice), desired
    /// velocities, areas and body of every point, bodies in order.
    pub x: Vec<[f64; 3]>,
    pub u: Vec<[f64; 3]>,
    pub area: Vec<f64>,
    pub body: Vec<usize>,
    /// Each body's centre at this step (the torque's reference).
    pub centres: Vec<[f64; 3]>,
    /// The band: the global node indices (`x + nx (y + ny z)`) the supports cover, ascending.
    pub band: Vec<u64>,
    /// Per point, the band slot and the kernel's weight of each of its 27 support nodes.
    pub links: Vec<[(u32, f64); SUPPORT * SUPPORT * SUPPORT]>,
}

/// What the direct forcing gives: the force density at every band node (in band order) and the
/// load on each body.
#[derive(Clone, Debug, PartialEq)]
pub struct ForcingSolution {
    pub node_force: Vec<[f64; 3]>,
    pub loads: Vec<BodyLoad>,
}

impl ImmersedBodies {
    /// Every point's count.
    pub fn points(&self) -> usize {
        self.bodies.iter().map(|b| b.points.len()).sum()
    }

    /// The points at step `step` (positions, velocities, areas, bodies, the bodies' centres),
    /// without the band: what the loads are summed over.
    pub fn place(&self, step: u64) -> ForcingPlan {
        let n = self.points();
        let mut plan = ForcingPlan {
            step,
            x: Vec::with_capacity(n),
            u: Vec::with_capacity(n),
            area: Vec::with_capacity(n),
            body: Vec::with_capacity(n),
            centres: Vec::with_capacity(self.bodies.len()),
            band: Vec::new(),
            links: Vec::with_capacity(n),
        };
        let t = step as f64;
        for (b, body) in self.bodies.iter().enumerate() {
            let pose = body.motion.pose(t);
            plan.centres.push(pose.centre);
            for (p, &a) in body.points.iter().zip(&body.areas) {
                let (x, u) = pose.place(*p);
                plan.x.push(x);
                plan.u.push(u);
                plan.area.push(a);
                plan.body.push(b);
            }
        }
        plan
    }

    /// The points at step `step` and the band of nodes their kernels reach.
    pub fn plan(&self, step: u64) -> Result<ForcingPlan, LeavesDomain> {
        let mut plan = self.place(step);
        // Each point's 27 support nodes, wrapped on periodic axes, and their weights (points in
        // parallel: each result depends on its point alone).
        let (nx, ny) = (self.size[0] as u64, self.size[1] as u64);
        let support = |k: usize, x: &[f64; 3]| -> Result<([u64; 27], [f64; 27]), LeavesDomain> {
            let mut idx = [[0u64; SUPPORT]; 3];
            let mut w = [[0.0; SUPPORT]; 3];
            for a in 0..3 {
                let (first, wa) = support_1d(x[a]);
                let len = self.size[a] as i64;
                for (s, slot) in idx[a].iter_mut().enumerate() {
                    let i = first + s as i64;
                    *slot = if self.periodic[a] {
                        i.rem_euclid(len) as u64
                    } else if (0..len).contains(&i) {
                        i as u64
                    } else {
                        return Err(LeavesDomain {
                            body: self.bodies[plan.body[k]].name.clone(),
                            axis: ['x', 'y', 'z'][a],
                            step,
                        });
                    };
                }
                w[a] = wa;
            }
            let nodes = std::array::from_fn(|s| {
                let (i, j, l) = (s % 3, s / 3 % 3, s / 9);
                idx[0][i] + nx * (idx[1][j] + ny * idx[2][l])
            });
            let weights = std::array::from_fn(|s| {
                let (i, j, l) = (s % 3, s / 3 % 3, s / 9);
                w[0][i] * w[1][j] * w[2][l]
            });
            Ok((nodes, weights))
        };
        // The first point out of the domain is reported, whatever the threads did.
        let supports: Vec<([u64; 27], [f64; 27])> = plan
            .x
            .par_iter()
            .enumerate()
            .map(|(k, x)| support(k, x))
            .collect::<Vec<_>>()
            .into_iter()
            .collect::<Result<_, _>>()?;
        let mut band: Vec<u64> = supports.iter().flat_map(|s| s.0).collect();
        band.par_sort_unstable();
        band.dedup();
        plan.links = supports
            .par_iter()
            .map(|(ns, ws)| {
                std::array::from_fn(|s| {
                    let slot = band.binary_search(&ns[s]).expect("in the band");
                    (slot as u32, ws[s])
                })
            })
            .collect();
        plan.band = band;
        Ok(plan)
    }

    /// The direct forcing of `plan` from the band's pulled populations (shifted, `Q` per node in
    /// band order) under the `uniform` force.
    pub fn solve(
        &self,
        plan: &ForcingPlan,
        pulled: &[f64],
        uniform: Option<[f64; 3]>,
    ) -> ForcingSolution {
        let nb = plan.band.len();
        assert_eq!(pulled.len(), nb * Q, "Q pulled populations per band node");
        let (rho, mut u): (Vec<f64>, Vec<[f64; 3]>) = pulled
            .par_chunks_exact(Q)
            .map(|g| {
                let m = macroscopic(g.try_into().expect("Q values"), uniform);
                (m.rho, m.u)
            })
            .unzip();
        let np = plan.x.len();
        // Which points reach each band node, with their weights, points ascending: each node sums
        // its spread in point order, so that the nodes can be summed in parallel and the sums do
        // not depend on how they are shared out.
        let mut start = vec![0u32; nb + 1];
        for links in &plan.links {
            for &(s, _) in links {
                start[s as usize + 1] += 1;
            }
        }
        for s in 0..nb {
            start[s + 1] += start[s];
        }
        let mut fill = start.clone();
        let mut reach = vec![(0u32, 0.0f64); start[nb] as usize];
        for (k, links) in plan.links.iter().enumerate() {
            for &(s, w) in links {
                let at = &mut fill[s as usize];
                reach[*at as usize] = (k as u32, w);
                *at += 1;
            }
        }
        let mut force = vec![[0.0; 3]; np];
        let mut spread = vec![[0.0; 3]; np];
        let mut node_force = vec![[0.0; 3]; nb];
        for _ in 0..self.iterations {
            // Interpolate to each point and correct its force.
            force
                .par_iter_mut()
                .zip(&mut spread)
                .enumerate()
                .for_each(|(k, (fk, sk))| {
                    let (mut uk, mut rk) = ([0.0; 3], 0.0);
                    for &(s, w) in &plan.links[k] {
                        let s = s as usize;
                        for a in 0..3 {
                            uk[a] += w * u[s][a];
                        }
                        rk += w * rho[s];
                    }
                    for a in 0..3 {
                        let df = 2.0 * rk * (plan.u[k][a] - uk[a]);
                        fk[a] += df;
                        sk[a] = df * plan.area[k];
                    }
                });
            // Spread onto the band and move its velocity.
            node_force
                .par_iter_mut()
                .zip(&mut u)
                .enumerate()
                .for_each(|(s, (nf, us))| {
                    let mut delta = [0.0; 3];
                    for &(k, w) in &reach[start[s] as usize..start[s + 1] as usize] {
                        for a in 0..3 {
                            delta[a] += w * spread[k as usize][a];
                        }
                    }
                    for a in 0..3 {
                        nf[a] += delta[a];
                        us[a] += delta[a] / (2.0 * rho[s]);
                    }
                });
        }
        let loads = plan.loads(&force);
        ForcingSolution { node_force, loads }
    }

    /// Each body's largest distance from its motion's origin to one of its points: how far its
    /// surface reaches from the centre whatever the rotation.
    pub fn radii(&self) -> Vec<f64> {
        self.bodies
            .iter()
            .map(|b| {
                b.points
                    .iter()
                    .map(|p| {
                        let d: [f64; 3] = std::array::from_fn(|a| p[a] - b.motion.origin[a]);
                        (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt()
                    })
                    .fold(0.0, f64::max)
            })
            .collect()
    }

    /// Whether every point's kernel stays inside the lattice along its walled axes at each step of
    /// `steps` ([`Self::plan`]'s test, for the modules that force the bodies themselves): the
    /// first step and body that leave. A body whose sphere of `radii` (from [`Self::radii`]) about
    /// its centre stays a kernel's reach inside passes at once; only the others' points are placed.
    pub fn check_steps(
        &self,
        radii: &[f64],
        steps: std::ops::Range<u64>,
    ) -> Result<(), LeavesDomain> {
        for step in steps {
            let t = step as f64;
            for (b, body) in self.bodies.iter().enumerate() {
                let pose = body.motion.pose(t);
                let inside = |x: f64, a: usize| {
                    let first = (x + 0.5).floor() as i64 - 1;
                    first >= 0 && first + SUPPORT as i64 <= self.size[a] as i64
                };
                let walled = |a: usize| !self.periodic[a];
                let r = radii[b] + 1e-9;
                if (0..3).all(|a| {
                    !walled(a) || (inside(pose.centre[a] - r, a) && inside(pose.centre[a] + r, a))
                }) {
                    continue;
                }
                for p in &body.points {
                    let (x, _) = pose.place(*p);
                    if let Some(a) = (0..3).find(|&a| walled(a) && !inside(x[a], a)) {
                        return Err(LeavesDomain {
                            body: body.name.clone(),
                            axis: ['x', 'y', 'z'][a],
                            step,
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

impl ForcingPlan {
    /// The load on each body of point forces `force` (the force density each point applied to
    /// the fluid, summed over the iterations; the fluid pushes back with its negative), in point
    /// order.
    pub fn loads(&self, force: &[[f64; 3]]) -> Vec<BodyLoad> {
        let mut loads = vec![BodyLoad::default(); self.centres.len()];
        for (k, fk) in force.iter().enumerate() {
            let l = &mut loads[self.body[k]];
            let f: [f64; 3] = std::array::from_fn(|a| -fk[a] * self.area[k]);
            let c = self.centres[self.body[k]];
            let r: [f64; 3] = std::array::from_fn(|a| self.x[k][a] - c[a]);
            let t = cross(r, f);
            for a in 0..3 {
                l.force[a] += f[a];
                l.torque[a] += t[a];
            }
        }
        loads
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_sums_to_one_with_no_first_moment_at_every_offset() {
        for k in 0..=100 {
            let x = 7.0 + k as f64 / 100.0;
            let (first, w) = support_1d(x);
            let sum: f64 = w.iter().sum();
            let moment: f64 = (0..3)
                .map(|s| (first + s as i64) as f64 - x)
                .zip(w)
                .map(|(r, w)| r * w)
                .sum();
            let square: f64 = w.iter().map(|w| w * w).sum();
            assert!((sum - 1.0).abs() < 1e-14, "sum {sum} at {x}");
            assert!(moment.abs() < 1e-14, "first moment {moment} at {x}");
            // Roma et al.'s third condition: Σ φ² = 1/2 for every offset.
            assert!((square - 0.5).abs() < 1e-14, "Σφ² {square} at {x}");
            assert!(w.iter().all(|&w| w >= 0.0));
        }
        assert_eq!(delta_roma(1.5), 0.0);
        assert_eq!(delta_roma(-2.0), 0.0);
    }

    fn cloud(n: usize, motion: RigidMotion) -> ImmersedBodies {
        // A ring of points in the plane z = 8.3 around (8.2, 8.1), one per unit of arc.
        let points: Vec<[f64; 3]> = (0..n)
            .map(|k| {
                let a = k as f64 * std::f64::consts::TAU / n as f64;
                [
                    8.2 + 3.0 * a.cos(),
                    8.1 + 3.0 * a.sin(),
                    8.3 + 0.2 * (3.0 * a).sin(),
                ]
            })
            .collect();
        ImmersedBodies {
            bodies: vec![LagrangianBody {
                name: "ring".into(),
                areas: vec![0.9; n],
                points,
                motion,
            }],
            size: [16, 16, 16],
            periodic: [false, true, false],
            iterations: 5,
        }
    }

    /// Populations of a node at rest but for a small velocity varying across the band.
    fn pulled(plan: &ForcingPlan) -> Vec<f64> {
        plan.band
            .iter()
            .flat_map(|&i| {
                let x = (i % 16) as f64;
                let u = [0.01 * (x / 16.0), -0.005, 0.002 * ((i / 256) as f64 / 16.0)];
                super::super::collision::equilibrium(0.001 * x, u)
            })
            .collect()
    }

    #[test]
    fn spreading_conserves_the_force_and_the_torque() {
        let motion = RigidMotion {
            origin: [8.2, 8.1, 8.3],
            axis: [0.0, 0.0, 1.0],
            rate: 0.004,
            velocity: [0.001, 0.0, 0.0],
            path: vec![],
        };
        let set = cloud(19, motion);
        let plan = set.plan(10).unwrap();
        let sol = set.solve(&plan, &pulled(&plan), Some([1e-5, 0.0, 0.0]));
        let (nx, ny) = (16u64, 16u64);
        let c = plan.centres[0];
        // The band nodes' unwrapped positions: nearest to the points they serve.
        let mut pos = vec![[0.0; 3]; plan.band.len()];
        for (k, links) in plan.links.iter().enumerate() {
            for &(s, _) in links {
                let i = plan.band[s as usize];
                let g = [
                    (i % nx) as f64,
                    (i / nx % ny) as f64,
                    (i / (nx * ny)) as f64,
                ];
                pos[s as usize] =
                    std::array::from_fn(|a| g[a] + 16.0 * ((plan.x[k][a] - g[a]) / 16.0).round());
            }
        }
        let (mut f, mut t) = ([0.0; 3], [0.0; 3]);
        for (s, nf) in sol.node_force.iter().enumerate() {
            let r: [f64; 3] = std::array::from_fn(|a| pos[s][a] - c[a]);
            let m = cross(r, *nf);
            for a in 0..3 {
                f[a] += nf[a];
                t[a] += m[a];
            }
        }
        let load = sol.loads[0];
        let scale = load.force.iter().map(|v| v.abs()).fold(0.0, f64::max);
        assert!(scale > 1e-4, "the body is forced: {load:?}");
        for a in 0..3 {
            assert!(
                (f[a] + load.force[a]).abs() < 1e-13 * scale.max(1.0),
                "force {a}: {f:?} vs {load:?}"
            );
            assert!(
                (t[a] + load.torque[a]).abs() < 1e-12 * scale.max(1.0),
                "torque {a}: {t:?} vs {load:?}"
            );
        }
    }

    /// The largest difference between each point's velocity and the velocity its band nodes
    /// collide with under their forces, interpolated to it.
    fn slip(set: &ImmersedBodies, plan: &ForcingPlan, g: &[f64]) -> f64 {
        let sol = set.solve(plan, g, None);
        let mut worst: f64 = 0.0;
        for k in 0..plan.x.len() {
            let mut uk = [0.0; 3];
            for &(s, w) in &plan.links[k] {
                let s = s as usize;
                let gs: &[f64; Q] = g[s * Q..(s + 1) * Q].try_into().unwrap();
                let m = macroscopic(gs, Some(sol.node_force[s]));
                for a in 0..3 {
                    uk[a] += w * m.u[a];
                }
            }
            for a in 0..3 {
                worst = worst.max((uk[a] - plan.u[k][a]).abs());
            }
        }
        worst
    }

    #[test]
    fn the_iterations_bring_a_surface_to_its_velocity() {
        // A flat 8 × 8 sheet of points one spacing apart, moving through fluid nearly at rest.
        let points: Vec<[f64; 3]> = (0..64)
            .map(|k| [4.3 + (k % 8) as f64, 4.1 + (k / 8) as f64, 8.4])
            .collect();
        let mut motion = RigidMotion::at_rest();
        motion.velocity = [0.02, 0.0, 0.0];
        let mut set = ImmersedBodies {
            bodies: vec![LagrangianBody {
                name: "sheet".into(),
                areas: vec![1.0; 64],
                points,
                motion,
            }],
            size: [16, 16, 16],
            periodic: [false; 3],
            iterations: 1,
        };
        let plan = set.plan(0).unwrap();
        let g = pulled(&plan);
        let slips: Vec<f64> = [1, 5, 20]
            .map(|k| {
                set.iterations = k;
                slip(&set, &plan, &g)
            })
            .into();
        // Overlapping supports share each correction, so the slip shrinks with every iteration;
        // slowest at the sheet's edges and corners, which have fewer neighbours (0.0125, 0.0046
        // and 0.0007 of the 0.02).
        assert!(slips[0] < 0.7 * 0.02, "{slips:?}");
        assert!(slips[1] < 0.4 * slips[0], "{slips:?}");
        assert!(slips[2] < 0.2 * slips[1], "{slips:?}");
    }

    #[test]
    fn the_steps_check_finds_the_first_step_the_plan_refuses() {
        // A turning ring drifting along the walled x axis; once about its centre (its bounding
        // sphere passes most steps at once) and once about the lattice's origin (the sphere never
        // fits: every step places the points).
        for origin in [[8.2, 8.1, 8.3], [0.0; 3]] {
            let motion = RigidMotion {
                origin,
                axis: [0.0, 0.0, 1.0],
                rate: 0.05,
                velocity: [0.03, 0.0, 0.0],
                path: Vec::new(),
            };
            let set = cloud(12, motion);
            let first = (0..400u64)
                .find(|&t| set.plan(t).is_err())
                .expect("it leaves");
            let want = set.plan(first).unwrap_err();
            let radii = set.radii();
            assert!(set.check_steps(&radii, 0..first).is_ok());
            assert_eq!(set.check_steps(&radii, 0..400).unwrap_err(), want);
            assert_eq!(set.check_steps(&radii, first..first + 1).unwrap_err(), want);
        }
    }

    #[test]
    fn a_point_whose_kernel_leaves_a_walled_axis_is_refused() {
        let mut motion = RigidMotion::at_rest();
        motion.velocity = [0.0, 0.0, 0.1];
        let set = cloud(8, motion);
        assert!(set.plan(0).is_ok());
        let e = set.plan(60).unwrap_err();
        assert_eq!(e.axis, 'z');
        // Periodic y wraps instead.
        let mut motion = RigidMotion::at_rest();
        motion.velocity = [0.0, 0.1, 0.0];
        assert!(cloud(8, motion).plan(60).is_ok());
    }

    #[test]
    fn poses_follow_the_rotation_and_the_path() {
        let m = RigidMotion {
            origin: [1.0, 2.0, 3.0],
            axis: [0.0, 0.0, 1.0],
            rate: std::f64::consts::FRAC_PI_2 / 10.0,
            velocity: [0.0; 3],
            path: vec![
                (0.0, [0.0; 3]),
                (10.0, [5.0, 0.0, 0.0]),
                (20.0, [5.0, 5.0, 0.0]),
            ],
        };
        let p = m.pose(10.0);
        let (x, u) = p.place([2.0, 2.0, 3.0]);
        let want = [6.0, 3.0, 3.0];
        for a in 0..3 {
            assert!((x[a] - want[a]).abs() < 1e-12, "{x:?}");
        }
        // At t = 10 the path turns: the velocity is the next segment's, ω × r along −x.
        let p15 = m.pose(15.0);
        assert!((p15.centre[1] - 4.5).abs() < 1e-12);
        let want = [-m.rate, 0.5, 0.0];
        for a in 0..3 {
            assert!((u[a] - want[a]).abs() < 1e-12, "{u:?}");
        }
        assert_eq!(m.reach(20.0), [[0.0; 3], [5.0, 5.0, 0.0]]);
        assert_eq!(m.pose(99.0).velocity, [0.0; 3]);
    }
}
