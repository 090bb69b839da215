//! Centreline profiles of the lid-driven cavity and their CSV form.
//!
//! Frame (as in the reference data): unit cube, lid at z = 1 moving in +x with speed U, velocities
//! normalised by U. With mid-grid bounce-back the walls lie half a spacing outside the outer nodes, so
//! node k of n sits at coordinate (k + ½)/n and the profiles end on the wall values at 0 and 1.

use std::io::Write;
use std::path::Path;

use thelma_core::Fields;

/// A profile: a velocity component along a line, as (coordinate, value) pairs sorted by coordinate.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// Name in the reference file's vocabulary (`u_vs_z`, `w_vs_x`).
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl Profile {
    /// Linear interpolation at coordinate `c` (clamped to the ends).
    pub fn at(&self, c: f64) -> f64 {
        let p = &self.points;
        if c <= p[0].0 {
            return p[0].1;
        }
        for w in p.windows(2) {
            if c <= w[1].0 {
                let s = (c - w[0].0) / (w[1].0 - w[0].0);
                return w[0].1 + s * (w[1].1 - w[0].1);
            }
        }
        p[p.len() - 1].1
    }

    /// The smallest and largest sample, refined by a parabola through the extreme node and its
    /// neighbours: (coordinate, value).
    pub fn extrema(&self) -> ((f64, f64), (f64, f64)) {
        let refine = |k: usize| -> (f64, f64) {
            let p = &self.points;
            if k == 0 || k + 1 >= p.len() {
                return p[k];
            }
            let (x0, y0) = p[k - 1];
            let (x1, y1) = p[k];
            let (x2, y2) = p[k + 1];
            // Vertex of the parabola through three points.
            let d = (x0 - x1) * (x0 - x2) * (x1 - x2);
            let a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / d;
            let b = (x2 * x2 * (y0 - y1) + x1 * x1 * (y2 - y0) + x0 * x0 * (y1 - y2)) / d;
            let c =
                (x1 * x2 * (x1 - x2) * y0 + x2 * x0 * (x2 - x0) * y1 + x0 * x1 * (x0 - x1) * y2)
                    / d;
            if a == 0.0 {
                return p[k];
            }
            let xv = -b / (2.0 * a);
            if xv < x0 || xv > x2 {
                return p[k];
            }
            (xv, c - b * b / (4.0 * a))
        };
        let kmin = (0..self.points.len())
            .min_by(|&a, &b| self.points[a].1.total_cmp(&self.points[b].1))
            .unwrap_or(0);
        let kmax = (0..self.points.len())
            .max_by(|&a, &b| self.points[a].1.total_cmp(&self.points[b].1))
            .unwrap_or(0);
        (refine(kmin), refine(kmax))
    }
}

/// Value of a component at fractional node position (x, y) in plane z, bilinear in x and y.
fn bilinear(f: &Fields, comp: &[f64], x: f64, y: f64, z: usize) -> f64 {
    let [nx, ny, _] = f.size;
    let x0 = (x.floor().max(0.0) as usize).min(nx - 1);
    let y0 = (y.floor().max(0.0) as usize).min(ny - 1);
    let x1 = (x0 + 1).min(nx - 1);
    let y1 = (y0 + 1).min(ny - 1);
    let sx = (x - x0 as f64).clamp(0.0, 1.0);
    let sy = (y - y0 as f64).clamp(0.0, 1.0);
    let v = |xx, yy| comp[f.idx(xx, yy, z)];
    (1.0 - sy) * ((1.0 - sx) * v(x0, y0) + sx * v(x1, y0))
        + sy * ((1.0 - sx) * v(x0, y1) + sx * v(x1, y1))
}

/// The two centreline profiles of the cavity: u/U along z at x = y = ½, and w/U along x at y = z = ½.
pub fn cavity_centrelines(f: &Fields, lid_speed: f64) -> [Profile; 2] {
    let [nx, ny, nz] = f.size;
    // Fractional node index of the unit coordinate ½ along an axis of n nodes: (½·n − ½).
    let mid = |n: usize| 0.5 * n as f64 - 0.5;
    let mut u = vec![(0.0, 0.0)];
    for z in 0..nz {
        let v = bilinear(f, &f.ux, mid(nx), mid(ny), z) / lid_speed;
        u.push(((z as f64 + 0.5) / nz as f64, v));
    }
    u.push((1.0, 1.0));
    // w along x at y = z = ½: interpolate in y within the two planes around z = ½, then in z.
    let zm = mid(nz);
    let z0 = zm.floor() as usize;
    let z1 = (z0 + 1).min(nz - 1);
    let sz = zm - z0 as f64;
    let mut w = vec![(0.0, 0.0)];
    for x in 0..nx {
        let a = bilinear(f, &f.uz, x as f64, mid(ny), z0);
        let b = bilinear(f, &f.uz, x as f64, mid(ny), z1);
        w.push((
            (x as f64 + 0.5) / nx as f64,
            ((1.0 - sz) * a + sz * b) / lid_speed,
        ));
    }
    w.push((1.0, 0.0));
    [
        Profile {
            name: "u_vs_z".into(),
            points: u,
        },
        Profile {
            name: "w_vs_x".into(),
            points: w,
        },
    ]
}

/// Writes profiles as CSV (`profile,coordinate,value`), the reference file's own format.
pub fn write_csv(path: &Path, profiles: &[Profile]) -> std::io::Result<()> {
    let mut out = Vec::new();
    writeln!(
        out,
        "# Centreline profiles, unit cube, velocities normalised by the lid speed"
    )?;
    writeln!(out, "profile,coordinate,value")?;
    for p in profiles {
        for (c, v) in &p.points {
            writeln!(out, "{},{c:.6},{v:.8}", p.name)?;
        }
    }
    crate::output::write_bytes_atomic(path, &out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn centrelines_interpolate_a_linear_field_exactly() {
        // Both components linear in all three unit coordinates (x + ½)/n: bilinear and linear
        // interpolation are exact, so every sample must equal the field at its centreline point,
        // which also checks where the centre ½ falls between nodes on the other axes.
        let (nx, ny, nz) = (6, 4, 5);
        let (a, b, c) = (0.3, -0.2, 0.5);
        let lin = |xc: f64, yc: f64, zc: f64| 0.1 * (a * xc + b * yc + c * zc);
        let mut f = Fields::zeros([nx, ny, nz], 0);
        for z in 0..nz {
            for y in 0..ny {
                for x in 0..nx {
                    let p = f.idx(x, y, z);
                    let (xc, yc, zc) = (
                        (x as f64 + 0.5) / nx as f64,
                        (y as f64 + 0.5) / ny as f64,
                        (z as f64 + 0.5) / nz as f64,
                    );
                    f.ux[p] = lin(xc, yc, zc);
                    f.uz[p] = lin(zc, xc, yc);
                }
            }
        }
        let [u, w] = cavity_centrelines(&f, 0.1);
        for &(zc, v) in &u.points[1..u.points.len() - 1] {
            let want = lin(0.5, 0.5, zc) / 0.1;
            assert!((v - want).abs() < 1e-12, "u at z {zc}: {v} vs {want}");
        }
        for &(xc, v) in &w.points[1..w.points.len() - 1] {
            let want = lin(0.5, xc, 0.5) / 0.1;
            assert!((v - want).abs() < 1e-12, "w at x {xc}: {v} vs {want}");
        }
    }

    #[test]
    fn extrema_find_the_vertex_of_a_parabola() {
        let pts: Vec<(f64, f64)> = (0..11)
            .map(|k| {
                let x = k as f64 / 10.0;
                (x, (x - 0.33) * (x - 0.33) - 0.2)
            })
            .collect();
        let p = Profile {
            name: "t".into(),
            points: pts,
        };
        let ((xmin, vmin), _) = p.extrema();
        assert!((xmin - 0.33).abs() < 1e-12);
        assert!((vmin + 0.2).abs() < 1e-12);
    }
}
