//! Lagrangian surface points for the immersed boundary method: a triangle mesh (in node coordinates)
//! turned into about one point per `spacing`² of surface, each carrying the area it stands for.
//!
//! The method has two steps, so that the result depends on the surface and not on how it was
//! triangulated. (1) Every triangle is split into m² congruent sub-triangles (the m × m barycentric
//! grid that repeated midpoint subdivision gives), m = max(1, ⌈longest edge / (spacing / 2)⌉), and each
//! sub-triangle gives one fine sample at its centroid with area A / m². Centroids are interior, so a
//! shared edge gives no duplicates; the areas partition the triangle's area exactly; and no part of the
//! surface is farther than about spacing / 4 from a sample, whatever the triangle's size. Triangles of
//! zero area (or with a vertex that is not finite) give nothing. (2) The fine samples are merged per
//! cubic bin of side `spacing` (bin ⌊p / spacing⌋ per axis): each bin gives one point at the
//! area-weighted mean of its samples, carrying their summed area. A coarse mesh of big triangles and a
//! mesh of a million tiny ones thus both give one point per bin the surface crosses, and the total
//! area is the mesh's up to rounding.
//!
//! Each point also carries a unit normal: the area-weighted sum of the unit normals of the triangles
//! whose fine samples were merged into it, normalised. A triangle's normal comes from its vertex
//! winding, (b − a) × (c − a) normalised, so it points outward on an outward-wound closed mesh; the
//! immersed boundary method retracts the points inward along it, off the surface into the body
//! (`immersed_bodies` reverses the normals of a mesh wound inward, found by its signed volume).
//! Where the sum cancels (its length below 1e-12 of the summed area, e.g. both sides of a
//! zero-thickness sheet in one bin) the normal is zero. A mesh whose triangles are wound
//! inconsistently gives meaningless normals wherever the two windings mix in a bin.
//!
//! A surface crosses between 1 (aligned with an axis) and √3 (along a cube diagonal) bins per
//! `spacing`² of area, 1.5 on average over orientations; bins it only clips at a corner may hold no
//! fine sample and then give no point, or a point of small area, so a sphere gets about 1.3 points
//! per `spacing`². On a curved surface the merged point lies slightly inside (by at most the sagitta
//! of a patch as wide as the bin's diagonal, 3 spacing² / (8 r) for radius r).
//!
//! The result is deterministic whatever the number of threads. Parallel tasks take runs of
//! consecutive triangles, cut by fine sample count and so by the mesh alone; each task sums its own
//! samples per bin, and the tasks' sums, kept in task order, are summed again per bin. Both sorts by
//! bin are stable, so every bin adds the same numbers in the same order on every run. Points come
//! out in lexicographic bin order (x, then y, then z).

use rayon::prelude::*;

use crate::mesh::{cross, Mesh};

/// Lagrangian points sampling a surface: each point stands for the patch of surface `area` around it,
/// whose outward unit normal (from the triangles' winding) is `normal`, or zero where it cancels.
#[derive(Clone, Debug, PartialEq)]
pub struct SurfacePoints {
    pub positions: Vec<[f64; 3]>,
    pub areas: Vec<f64>,
    pub normals: Vec<[f64; 3]>,
}

/// Samples of one bin: the area-weighted sums of their positions and of their triangles' unit
/// normals, and their area.
#[derive(Clone, Copy)]
struct Part {
    bin: [i64; 3],
    moment: [f64; 3],
    normal: [f64; 3],
    area: f64,
}

/// Fine samples per parallel task: enough to amortise the task and to merge neighbouring
/// triangles' samples before the global sort, few enough to balance the threads and stay in cache.
const TASK: usize = 16 * 1024;

impl SurfacePoints {
    /// Samples `mesh` with about one point per `spacing`² of area (spacing in node units, > 0).
    ///
    /// Panics if `spacing` is not a positive finite number: a caller's broken invariant.
    pub fn from_mesh(mesh: &Mesh, spacing: f64) -> Self {
        assert!(
            spacing.is_finite() && spacing > 0.0,
            "surface point spacing must be positive and finite, got {spacing}"
        );
        let triangles = &mesh.triangles;
        // Tasks are runs of consecutive triangles cut by their fine sample count, so that a few big
        // triangles spread over the threads as well as a million small ones. The cuts depend on the
        // mesh only, never on the thread count.
        let counts: Vec<usize> = triangles
            .par_iter()
            .map(|t| Split::of(t, spacing).map_or(0, |s| s.m * s.m))
            .collect();
        let mut cuts = vec![0];
        let mut load = 0;
        for (i, n) in counts.iter().enumerate() {
            if load >= TASK {
                cuts.push(i);
                load = 0;
            }
            load += n;
        }
        cuts.push(triangles.len());
        let chunks: Vec<Vec<Part>> = cuts
            .par_windows(2)
            .map(|w| {
                let mut fine = Vec::with_capacity(TASK);
                for t in &triangles[w[0]..w[1]] {
                    if let Some(s) = Split::of(t, spacing) {
                        s.sample(spacing, &mut fine);
                    }
                }
                merged(fine)
            })
            .collect();
        let parts = chunks.concat();
        let bins = merged(parts);
        let mut points = Self {
            positions: Vec::with_capacity(bins.len()),
            areas: Vec::with_capacity(bins.len()),
            normals: Vec::with_capacity(bins.len()),
        };
        for b in bins.iter().filter(|b| b.area > 0.0) {
            points.positions.push(b.moment.map(|m| m / b.area));
            points.areas.push(b.area);
            let n = norm(b.normal);
            points.normals.push(if n >= 1e-12 * b.area {
                b.normal.map(|c| c / n)
            } else {
                [0.0; 3]
            });
        }
        points
    }

    pub fn len(&self) -> usize {
        self.positions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// Total area.
    pub fn area(&self) -> f64 {
        self.areas.iter().sum()
    }
}

/// A triangle ready to subdivide: a corner, the two edges from it, its unit normal, its area and its
/// m.
struct Split {
    p0: [f64; 3],
    e1: [f64; 3],
    e2: [f64; 3],
    normal: [f64; 3],
    area: f64,
    m: usize,
}

impl Split {
    /// `None` for a triangle of zero area, or with a vertex that is not finite.
    fn of(t: &[[f64; 3]; 3], spacing: f64) -> Option<Self> {
        let [p0, p1, p2] = *t;
        let e1 = [0, 1, 2].map(|a| p1[a] - p0[a]);
        let e2 = [0, 1, 2].map(|a| p2[a] - p0[a]);
        let e3 = [0, 1, 2].map(|a| p2[a] - p1[a]);
        let cross = cross(e1, e2);
        let twice = norm(cross);
        let area = 0.5 * twice;
        // Also false for NaN.
        if !(area > 0.0 && area.is_finite()) {
            return None;
        }
        let normal = cross.map(|c| c / twice);
        let longest = norm(e1).max(norm(e2)).max(norm(e3));
        let m = ((longest / (spacing / 2.0)).ceil() as usize).max(1);
        Some(Self {
            p0,
            e1,
            e2,
            normal,
            area,
            m,
        })
    }

    /// Appends the m² sub-triangles' centroids. Sub-triangle (i, j) has corners at barycentric
    /// (i, j) / m, (i + 1, j) / m, (i, j + 1) / m; the inverted one beside it (i + 1, j) / m,
    /// (i, j + 1) / m, (i + 1, j + 1) / m.
    fn sample(&self, spacing: f64, out: &mut Vec<Part>) {
        let Self {
            p0,
            e1,
            e2,
            normal,
            area,
            m,
        } = *self;
        let a = area / (m * m) as f64;
        let normal = normal.map(|c| c * a);
        let at = |u: f64, v: f64| {
            let p = [0, 1, 2].map(|k| p0[k] + u * e1[k] + v * e2[k]);
            Part {
                bin: p.map(|c| (c / spacing).floor() as i64),
                moment: p.map(|c| c * a),
                normal,
                area: a,
            }
        };
        let m3 = 3.0 * m as f64;
        for j in 0..m {
            for i in 0..m - j {
                out.push(at((3 * i + 1) as f64 / m3, (3 * j + 1) as f64 / m3));
                if i + j + 2 <= m {
                    out.push(at((3 * i + 2) as f64 / m3, (3 * j + 2) as f64 / m3));
                }
            }
        }
    }
}

/// Sums `parts` per bin, in bin order. The sort is stable, so each bin sums its parts in the order
/// given: the result depends on that order only.
fn merged(mut parts: Vec<Part>) -> Vec<Part> {
    parts.par_sort_by_key(|p| p.bin);
    parts
        .chunk_by(|a, b| a.bin == b.bin)
        .map(|run| {
            let (moment, normal, area) = sum(run);
            Part {
                bin: run[0].bin,
                moment,
                normal,
                area,
            }
        })
        .collect()
}

fn sum(run: &[Part]) -> ([f64; 3], [f64; 3], f64) {
    run.iter().fold(([0.0; 3], [0.0; 3], 0.0), |(m, n, a), p| {
        (
            [0, 1, 2].map(|k| m[k] + p.moment[k]),
            [0, 1, 2].map(|k| n[k] + p.normal[k]),
            a + p.area,
        )
    })
}

fn norm(v: [f64; 3]) -> f64 {
    (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::mesh::shapes;

    fn mesh(triangles: Vec<[[f64; 3]; 3]>, shift: [f64; 3]) -> Mesh {
        Mesh { triangles }.placed([1.0; 3], [0.0; 3], shift)
    }

    fn triangle_area(t: &[[f64; 3]; 3]) -> f64 {
        let e1 = [0, 1, 2].map(|a| t[1][a] - t[0][a]);
        let e2 = [0, 1, 2].map(|a| t[2][a] - t[0][a]);
        0.5 * norm(cross(e1, e2))
    }

    fn dist(a: [f64; 3], b: [f64; 3]) -> f64 {
        norm([a[0] - b[0], a[1] - b[1], a[2] - b[2]])
    }

    #[test]
    fn total_area_is_the_mesh_area() {
        let meshes = [
            mesh(shapes::sphere(10.0, 4), [20.0; 3]),
            mesh(shapes::cube(8.0), [10.3, 9.7, 10.1]),
            mesh(shapes::sphere(3.0, 1), [-5.0, 2.0, 0.5]),
        ];
        for m in &meshes {
            let want: f64 = m.triangles.iter().map(triangle_area).sum();
            for spacing in [0.7, 1.0, 2.5] {
                let got = SurfacePoints::from_mesh(m, spacing).area();
                assert!(
                    (got - want).abs() <= 1e-12 * want,
                    "spacing {spacing}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn sphere_gives_one_point_per_bin_on_the_surface() {
        let (r, c) = (10.0, [20.0; 3]);
        let m = mesh(shapes::sphere(r, 4), c);
        let area: f64 = m.triangles.iter().map(triangle_area).sum();
        let spacing = 1.0;
        let p = SurfacePoints::from_mesh(&m, spacing);
        let ratio = p.len() as f64 / (area / (spacing * spacing));
        assert!(
            (0.6..=1.6).contains(&ratio),
            "{} points, ratio {ratio}",
            p.len()
        );
        // The facets and the samples lie inside the ball, and so do their means. A facet (edge about
        // 0.65) sags at most 0.01 below the sphere, a bin's patch (no wider than √3) at most
        // 3 / (8 r) ≈ 0.04: 0.05 holds with room.
        for q in &p.positions {
            let d = dist(*q, c);
            assert!((r - 0.05..=r + 1e-9).contains(&d), "{q:?} at {d}");
        }
        let bins: HashSet<[i64; 3]> = p
            .positions
            .iter()
            .map(|q| q.map(|x| (x / spacing).floor() as i64))
            .collect();
        assert_eq!(bins.len(), p.len(), "two points share a bin");
        assert!(p.areas.iter().all(|&a| a > 0.0));
    }

    #[test]
    fn big_triangles_of_a_cube_are_covered_on_every_face() {
        // 12 triangles of edge 8 and 11.3: each is subdivided into hundreds of fine samples.
        let side = 8.0;
        let shift = [10.3, 9.7, 10.1];
        let m = mesh(shapes::cube(side), shift);
        for spacing in [1.0, 2.0] {
            let p = SurfacePoints::from_mesh(&m, spacing);
            let ratio = p.len() as f64 / (6.0 * side * side / (spacing * spacing));
            assert!((0.9..=1.6).contains(&ratio), "ratio {ratio}");
            // A 0.1 grid over every face, independent of the sampler.
            let mut worst: f64 = 0.0;
            let k = (side / 0.1) as usize;
            for a in 0..3 {
                for s in [-0.5, 0.5] {
                    for i in 0..=k {
                        for j in 0..=k {
                            let mut q = [0.0; 3];
                            q[a] = s * side;
                            q[(a + 1) % 3] = -0.5 * side + i as f64 * side / k as f64;
                            q[(a + 2) % 3] = -0.5 * side + j as f64 * side / k as f64;
                            let q = [0, 1, 2].map(|b| q[b] + shift[b]);
                            let near = p
                                .positions
                                .iter()
                                .map(|&x| dist(x, q))
                                .fold(f64::INFINITY, f64::min);
                            worst = worst.max(near);
                        }
                    }
                }
            }
            assert!(
                worst <= spacing * 3f64.sqrt(),
                "spacing {spacing}: a surface point is {worst} from the nearest sample"
            );
        }
    }

    #[test]
    fn degenerate_triangles_are_ignored() {
        let good = [[0.2, 0.3, 0.1], [3.1, 0.4, 0.2], [0.5, 2.9, 1.3]];
        let degenerate = vec![
            [[1.0, 1.0, 1.0]; 3],
            [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [2.0, 2.0, 2.0]],
            [[0.0, 0.0, 0.0], [5.0, 0.0, 0.0], [5.0, 0.0, 0.0]],
            [[f64::NAN, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]],
            [[f64::INFINITY, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]],
        ];
        let alone = SurfacePoints::from_mesh(
            &Mesh {
                triangles: vec![good],
            },
            1.0,
        );
        let mut triangles = degenerate.clone();
        triangles.insert(2, good);
        let mixed = SurfacePoints::from_mesh(&Mesh { triangles }, 1.0);
        assert_eq!(mixed, alone);
        assert!(!alone.is_empty());
        assert!((alone.area() - triangle_area(&good)).abs() < 1e-12);
        let none = SurfacePoints::from_mesh(
            &Mesh {
                triangles: degenerate,
            },
            1.0,
        );
        assert!(none.is_empty() && none.area() == 0.0);
    }

    #[test]
    fn sphere_normals_point_outward() {
        let c = [20.0; 3];
        let m = mesh(shapes::sphere(10.0, 4), c);
        let p = SurfacePoints::from_mesh(&m, 1.0);
        assert_eq!(p.normals.len(), p.len());
        for (q, n) in p.positions.iter().zip(&p.normals) {
            assert!((norm(*n) - 1.0).abs() < 1e-12, "{n:?} at {q:?}");
            let r = [0, 1, 2].map(|k| q[k] - c[k]);
            let dot = (0..3).map(|k| n[k] * r[k]).sum::<f64>() / norm(r);
            assert!(dot > 0.99, "{n:?} at {q:?}: dot {dot}");
        }
    }

    #[test]
    fn cube_face_interiors_have_the_face_normal() {
        let side = 8.0;
        let h = side / 2.0;
        let shift = [10.3, 9.7, 10.1];
        let m = mesh(shapes::cube(side), shift);
        for spacing in [1.0, 2.0] {
            let p = SurfacePoints::from_mesh(&m, spacing);
            let mut per_face = [[0usize; 2]; 3];
            for (q, n) in p.positions.iter().zip(&p.normals) {
                let d = [0, 1, 2].map(|k| q[k] - shift[k]);
                for a in 0..3 {
                    let (b, c) = ((a + 1) % 3, (a + 2) % 3);
                    let inside = d[b].abs() < h - spacing && d[c].abs() < h - spacing;
                    if !inside || (d[a].abs() - h).abs() > 1e-9 {
                        continue;
                    }
                    let s = d[a].signum();
                    let mut want = [0.0; 3];
                    want[a] = s;
                    assert!(
                        (0..3).all(|k| (n[k] - want[k]).abs() <= 1e-12),
                        "spacing {spacing}: {n:?} at {q:?}, want {want:?}"
                    );
                    per_face[a][usize::from(s > 0.0)] += 1;
                }
            }
            // Every face has (side / spacing - 2)² bins or so well inside it.
            let least = ((side / spacing - 3.0) as usize).pow(2);
            assert!(
                per_face.iter().flatten().all(|&k| k >= least),
                "spacing {spacing}: {per_face:?}"
            );
        }
    }

    #[test]
    fn a_triangle_and_its_reverse_give_zero_normals() {
        let t = [[0.13, 0.27, 0.55], [6.41, 0.83, 1.37], [1.19, 5.77, 3.61]];
        let back = [t[0], t[2], t[1]];
        let p = SurfacePoints::from_mesh(
            &Mesh {
                triangles: vec![t, back],
            },
            1.0,
        );
        assert!(p.len() > 10, "{} points", p.len());
        assert!((p.area() - 2.0 * triangle_area(&t)).abs() < 1e-12);
        assert!(p.normals.iter().all(|n| *n == [0.0; 3]), "{:?}", p.normals);
        // Either side alone has a unit normal everywhere.
        let one = SurfacePoints::from_mesh(&Mesh { triangles: vec![t] }, 1.0);
        assert_eq!(one.positions.len(), p.len());
        assert!(one.normals.iter().all(|n| (norm(*n) - 1.0).abs() < 1e-12));
    }

    #[test]
    fn result_is_deterministic_on_any_thread_count() {
        // 5 120 triangles: five parallel chunks.
        let m = mesh(shapes::sphere(10.0, 4), [20.3, 19.6, 20.1]);
        let a = SurfacePoints::from_mesh(&m, 1.0);
        let b = SurfacePoints::from_mesh(&m, 1.0);
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(|| SurfacePoints::from_mesh(&m, 1.0));
        assert_eq!(a, b);
        assert_eq!(a, one);
    }
}
