//! A parametric propeller: a cylindrical hub along z with thin, twisted blades of constant chord and
//! pitch, as a triangle soup for STL files (the immersed bodies' benchmark). Each part is a closed
//! surface with outward normals; the blades meet the hub at its radius, so the parts touch without
//! sharing edges (fine for surface points, which is what it is made for).

use std::f64::consts::TAU;

/// The propeller's shape, in the units of the mesh.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Propeller {
    pub blades: usize,
    /// Tip radius.
    pub radius: f64,
    pub hub_radius: f64,
    /// Hub length along z (centred on z = 0).
    pub hub_length: f64,
    /// Blade width along its chord.
    pub chord: f64,
    pub thickness: f64,
    /// The axial advance per turn of the blades' helix: the chord at radius r is inclined by
    /// atan(pitch / (2π r)) to the plane of rotation.
    pub pitch: f64,
    /// Facets per unit length (about).
    pub resolution: f64,
}

impl Default for Propeller {
    fn default() -> Self {
        Self {
            blades: 3,
            radius: 20.0,
            hub_radius: 4.0,
            hub_length: 10.0,
            chord: 9.0,
            thickness: 1.5,
            pitch: 40.0,
            resolution: 1.0,
        }
    }
}

type Tri = [[f64; 3]; 3];

impl Propeller {
    /// The surface's triangles.
    pub fn triangles(&self) -> Vec<Tri> {
        let mut t = self.hub();
        for b in 0..self.blades {
            t.extend(self.blade(b as f64 * TAU / self.blades as f64));
        }
        t
    }

    fn segments(&self, length: f64) -> usize {
        ((length * self.resolution).ceil() as usize).max(1)
    }

    /// A closed cylinder along z.
    fn hub(&self) -> Vec<Tri> {
        let (r, h) = (self.hub_radius, self.hub_length / 2.0);
        let n = self.segments(TAU * r).max(8);
        let m = self.segments(self.hub_length);
        let at = |k: usize, z: f64| {
            let a = TAU * k as f64 / n as f64;
            [r * a.cos(), r * a.sin(), z]
        };
        let mut t = Vec::new();
        for k in 0..n {
            for j in 0..m {
                let (z0, z1) = (
                    -h + 2.0 * h * j as f64 / m as f64,
                    -h + 2.0 * h * (j + 1) as f64 / m as f64,
                );
                quad(&mut t, at(k, z0), at(k + 1, z0), at(k + 1, z1), at(k, z1));
            }
            t.push([[0.0, 0.0, h], at(k, h), at(k + 1, h)]);
            t.push([[0.0, 0.0, -h], at(k + 1, -h), at(k, -h)]);
        }
        t
    }

    /// One blade at angle `theta` about z: a twisted plate over radius × chord × thickness.
    fn blade(&self, theta: f64) -> Vec<Tri> {
        let (r0, r1) = (self.hub_radius, self.radius);
        let nr = self.segments(r1 - r0);
        let nc = self.segments(self.chord);
        let nt = self.segments(self.thickness);
        // The point at radius r, chord coordinate s ∈ [−c/2, c/2], thickness coordinate q.
        let point = |r: f64, s: f64, q: f64| {
            let phi = (self.pitch / (TAU * r)).atan();
            let (sp, cp) = phi.sin_cos();
            let (st, ct) = theta.sin_cos();
            // Radial, tangential and axial unit vectors of the blade's axis.
            let er = [ct, st, 0.0];
            let et = [-st, ct, 0.0];
            let chord = [cp * et[0], cp * et[1], sp];
            let normal = [-sp * et[0], -sp * et[1], cp];
            std::array::from_fn(|a| r * er[a] + s * chord[a] + q * normal[a])
        };
        let r = |i: usize| r0 + (r1 - r0) * i as f64 / nr as f64;
        let s = |j: usize| -self.chord / 2.0 + self.chord * j as f64 / nc as f64;
        let q = |k: usize| -self.thickness / 2.0 + self.thickness * k as f64 / nt as f64;
        let (h, w) = (self.thickness / 2.0, self.chord / 2.0);
        let mut t = Vec::new();
        // The box [r0, r1] × [−w, w] × [−h, h] in (r, s, q), faces wound outward.
        for i in 0..nr {
            for j in 0..nc {
                quad(
                    &mut t,
                    point(r(i), s(j), h),
                    point(r(i + 1), s(j), h),
                    point(r(i + 1), s(j + 1), h),
                    point(r(i), s(j + 1), h),
                );
                quad(
                    &mut t,
                    point(r(i), s(j), -h),
                    point(r(i), s(j + 1), -h),
                    point(r(i + 1), s(j + 1), -h),
                    point(r(i + 1), s(j), -h),
                );
            }
            for k in 0..nt {
                quad(
                    &mut t,
                    point(r(i), w, q(k)),
                    point(r(i), w, q(k + 1)),
                    point(r(i + 1), w, q(k + 1)),
                    point(r(i + 1), w, q(k)),
                );
                quad(
                    &mut t,
                    point(r(i), -w, q(k)),
                    point(r(i + 1), -w, q(k)),
                    point(r(i + 1), -w, q(k + 1)),
                    point(r(i), -w, q(k + 1)),
                );
            }
        }
        for j in 0..nc {
            for k in 0..nt {
                quad(
                    &mut t,
                    point(r1, s(j), q(k)),
                    point(r1, s(j + 1), q(k)),
                    point(r1, s(j + 1), q(k + 1)),
                    point(r1, s(j), q(k + 1)),
                );
                quad(
                    &mut t,
                    point(r0, s(j), q(k)),
                    point(r0, s(j), q(k + 1)),
                    point(r0, s(j + 1), q(k + 1)),
                    point(r0, s(j + 1), q(k)),
                );
            }
        }
        t
    }
}

/// Two triangles of the quadrilateral a b c d (counterclockwise seen from outside).
fn quad(t: &mut Vec<Tri>, a: [f64; 3], b: [f64; 3], c: [f64; 3], d: [f64; 3]) {
    t.push([a, b, c]);
    t.push([a, c, d]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::Mesh;
    use std::collections::HashMap;

    fn key(p: [f64; 3]) -> [i64; 3] {
        p.map(|c| (c * 1e6).round() as i64)
    }

    /// Every part is closed and consistently wound: each directed edge appears once and its
    /// reverse once; and its signed volume (divergence theorem) is positive (outward normals).
    #[test]
    fn the_parts_are_closed_and_wound_outwards() {
        let p = Propeller::default();
        let mut parts = vec![p.hub()];
        parts.extend((0..p.blades).map(|b| p.blade(b as f64 * TAU / p.blades as f64)));
        for (k, part) in parts.iter().enumerate() {
            let mut edges: HashMap<([i64; 3], [i64; 3]), i32> = HashMap::new();
            for t in part {
                for e in 0..3 {
                    *edges.entry((key(t[e]), key(t[(e + 1) % 3]))).or_default() += 1;
                }
            }
            let volume = Mesh {
                triangles: part.clone(),
            }
            .signed_volume();
            for (&(a, b), &n) in &edges {
                assert_eq!(n, 1, "part {k}: edge {a:?}→{b:?} appears {n} times");
                assert_eq!(
                    edges.get(&(b, a)),
                    Some(&1),
                    "part {k}: edge {a:?}→{b:?} is open"
                );
            }
            let want = if k == 0 {
                std::f64::consts::PI * p.hub_radius.powi(2) * p.hub_length
            } else {
                (p.radius - p.hub_radius) * p.chord * p.thickness
            };
            // Facets inscribe the hub's circle; the blade's twist keeps its volume.
            assert!(
                (volume - want).abs() < 0.03 * want,
                "part {k}: volume {volume}, about {want}"
            );
        }
    }

    #[test]
    fn the_blades_reach_the_tip_radius_and_twist_with_the_pitch() {
        let p = Propeller::default();
        let t = p.triangles();
        let reach = t
            .iter()
            .flatten()
            .map(|v| (v[0] * v[0] + v[1] * v[1]).sqrt())
            .fold(0.0, f64::max);
        // The tip's corners lie beyond the tip radius by the half chord and thickness.
        let corner = (p.radius.powi(2) + (p.chord / 2.0).powi(2)).sqrt();
        assert!(reach > p.radius && reach < corner + p.thickness, "{reach}");
        // The blades rise along z by the chord's inclination: more at the root than at the tip.
        let rise = |r: f64| p.chord * (p.pitch / (TAU * r)).atan().sin();
        assert!(rise(p.hub_radius) > 2.0 * rise(p.radius));
    }
}
