//! The voxeliser: which lattice nodes lie inside a triangle mesh, by ray parity along each axis and a
//! majority vote of the three, so that a mesh with a few holes, duplicated or flipped triangles still
//! gives its solid.
//!
//! For one ray axis, every row of nodes (a line parallel to the axis through node centres) is a ray;
//! the triangles are binned by the rows their projected bounding box covers, each row intersects its
//! own triangles, and the nodes between the first and second crossing, the third and fourth, and so
//! on are inside. A ray through a shared edge or vertex must cross exactly one of the triangles
//! there: the projected point-in-triangle test uses symbolic perturbation (the ray is moved by
//! (ε, ε²) in its plane), with each edge's orientation computed from its endpoints in a canonical
//! order, so two triangles sharing an edge evaluate it bit for bit with opposite signs. On a closed
//! mesh the three axes then agree on every node; where the mesh is broken, a hole or a stray
//! triangle spoils only the rows that pass through it, along one axis, and the vote of the other two
//! restores those nodes. Rows run in parallel (rayon).

use rayon::prelude::*;

use crate::mesh::Mesh;

/// Solid nodes over a box of the lattice (node `lo + (i, j, k)`), one bit each.
#[derive(Clone, PartialEq)]
pub struct Voxels {
    lo: [usize; 3],
    size: [usize; 3],
    bits: Vec<u64>,
    count: usize,
}

impl Voxels {
    /// Voxelises `mesh` (in node coordinates: node i's centre is at i) on a lattice of `lattice`
    /// nodes. `None` when no node centre of the lattice lies within the mesh's bounding box.
    pub fn of(mesh: &Mesh, lattice: [usize; 3]) -> Option<Self> {
        let b = mesh.bounds();
        let mut lo = [0usize; 3];
        let mut size = [0usize; 3];
        for a in 0..3 {
            let first = b[0][a].ceil().max(0.0);
            let last = b[1][a].floor().min(lattice[a] as f64 - 1.0);
            // Also `None` for NaN bounds.
            if first.partial_cmp(&last).is_none_or(|o| o.is_gt()) {
                return None;
            }
            lo[a] = first as usize;
            size[a] = (last - first) as usize + 1;
        }
        let votes = [0, 1, 2].map(|a| rows(mesh, a, lo, size));
        let n = size[0] * size[1] * size[2];
        let mut bits = vec![0u64; n.div_ceil(64)];
        // 64 nodes per word, so the words are independent and fill in parallel.
        bits.par_iter_mut().enumerate().for_each(|(w, word)| {
            for bit in 0..64 {
                let idx = w * 64 + bit;
                if idx >= n {
                    break;
                }
                let p = [
                    idx % size[0],
                    (idx / size[0]) % size[1],
                    idx / (size[0] * size[1]),
                ];
                let inside = (0..3).filter(|&a| votes[a].inside(p)).count();
                if inside >= 2 {
                    *word |= 1 << bit;
                }
            }
        });
        let count = bits.iter().map(|w| w.count_ones() as usize).sum();
        Some(Self {
            lo,
            size,
            bits,
            count,
        })
    }

    /// Whether node `p` of the lattice is solid.
    pub fn contains(&self, p: [usize; 3]) -> bool {
        if (0..3).any(|a| p[a] < self.lo[a] || p[a] >= self.lo[a] + self.size[a]) {
            return false;
        }
        let idx = (p[0] - self.lo[0])
            + self.size[0] * ((p[1] - self.lo[1]) + self.size[1] * (p[2] - self.lo[2]));
        self.bits[idx / 64] >> (idx % 64) & 1 == 1
    }

    /// The box of nodes the voxels cover, `lo..hi` per axis (solids lie only inside it).
    pub fn node_box(&self) -> ([usize; 3], [usize; 3]) {
        let hi = [0, 1, 2].map(|a| self.lo[a] + self.size[a]);
        (self.lo, hi)
    }

    /// The number of solid nodes.
    pub fn count(&self) -> usize {
        self.count
    }
}

impl std::fmt::Debug for Voxels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (lo, hi) = self.node_box();
        write!(f, "Voxels({} solid nodes in {lo:?}..{hi:?})", self.count)
    }
}

/// The filled intervals of every row along one ray axis.
struct Rows {
    axis: usize,
    /// The two other axes, (b, c).
    others: [usize; 2],
    size: [usize; 3],
    /// Per row (b + nb · c), the half-open intervals of box-local positions along the axis.
    fill: Vec<Vec<(u32, u32)>>,
}

impl Rows {
    fn inside(&self, p: [usize; 3]) -> bool {
        let [b, c] = self.others;
        let row = &self.fill[p[b] + self.size[b] * p[c]];
        let x = p[self.axis] as u32;
        row.iter().any(|&(s, e)| s <= x && x < e)
    }
}

/// Ray parity along `axis` over the box `lo`, `size`.
fn rows(mesh: &Mesh, axis: usize, lo: [usize; 3], size: [usize; 3]) -> Rows {
    let others = [(axis + 1) % 3, (axis + 2) % 3];
    let [b, c] = others;
    let (nb, nc) = (size[b], size[c]);
    // The rows (box-local) a triangle's projection may cover.
    let span = |t: &[[f64; 3]; 3], a: usize| -> Option<(usize, usize)> {
        let min = t.iter().map(|v| v[a]).fold(f64::INFINITY, f64::min) - lo[a] as f64;
        let max = t.iter().map(|v| v[a]).fold(f64::NEG_INFINITY, f64::max) - lo[a] as f64;
        let first = min.ceil().max(0.0);
        let last = max.floor().min(size[a] as f64 - 1.0);
        (first <= last).then_some((first as usize, last as usize))
    };
    // Bin the triangles by row (counting sort: counts, offsets, then the entries).
    let mut start = vec![0u32; nb * nc + 1];
    let spans: Vec<Option<[(usize, usize); 2]>> = mesh
        .triangles
        .par_iter()
        .map(|t| Some([span(t, b)?, span(t, c)?]))
        .collect();
    for s in spans.iter().flatten() {
        for k in s[1].0..=s[1].1 {
            for j in s[0].0..=s[0].1 {
                start[j + nb * k + 1] += 1;
            }
        }
    }
    for r in 0..nb * nc {
        start[r + 1] += start[r];
    }
    let mut next = start.clone();
    let mut entries = vec![0u32; start[nb * nc] as usize];
    for (t, s) in spans.iter().enumerate() {
        if let Some(s) = s {
            for k in s[1].0..=s[1].1 {
                for j in s[0].0..=s[0].1 {
                    let r = j + nb * k;
                    entries[next[r] as usize] = t as u32;
                    next[r] += 1;
                }
            }
        }
    }
    let fill = (0..nb * nc)
        .into_par_iter()
        .map(|r| {
            let p = [(r % nb + lo[b]) as f64, (r / nb + lo[c]) as f64];
            let mut hits: Vec<f64> = entries[start[r] as usize..start[r + 1] as usize]
                .iter()
                .filter_map(|&t| crossing(&mesh.triangles[t as usize], axis, others, p))
                .collect();
            hits.sort_by(f64::total_cmp);
            // Pairs of crossings bound the inside; an odd one out (a broken mesh) is dropped.
            let local = |x: f64| (x - lo[axis] as f64).ceil().clamp(0.0, size[axis] as f64) as u32;
            hits.chunks_exact(2)
                .map(|h| (local(h[0]), local(h[1])))
                .filter(|(s, e)| s < e)
                .collect()
        })
        .collect();
    Rows {
        axis,
        others,
        size,
        fill,
    }
}

/// Where the ray through `p` (coordinates along the two other axes) crosses the triangle, along
/// `axis`; `None` when it misses (ties decided by symbolic perturbation).
fn crossing(t: &[[f64; 3]; 3], axis: usize, [b, c]: [usize; 2], p: [f64; 2]) -> Option<f64> {
    let q = t.map(|v| [v[b], v[c]]);
    let area = orient(q[0], q[1], q[2]);
    if area == 0.0 {
        // Seen edge-on: the perturbed ray misses it.
        return None;
    }
    let mut w = [0.0; 3];
    for i in 0..3 {
        let (u, v) = (q[(i + 1) % 3], q[(i + 2) % 3]);
        let e = edge(u, v, p);
        if e.1 != (area > 0.0) {
            return None;
        }
        w[i] = e.0;
    }
    let sum = w[0] + w[1] + w[2];
    if sum == 0.0 {
        return None;
    }
    Some((w[0] * t[0][axis] + w[1] * t[1][axis] + w[2] * t[2][axis]) / sum)
}

/// Twice the signed area of (u, v, p).
fn orient(u: [f64; 2], v: [f64; 2], p: [f64; 2]) -> f64 {
    (v[0] - u[0]) * (p[1] - u[1]) - (v[1] - u[1]) * (p[0] - u[0])
}

/// The orientation of p against the edge u → v, and whether p (perturbed by (ε, ε²)) lies on its
/// left. The value is computed with the endpoints in lexicographic order and negated when they
/// were swapped, so the two triangles sharing an edge see exactly opposite values.
fn edge(u: [f64; 2], v: [f64; 2], p: [f64; 2]) -> (f64, bool) {
    let swapped = (v[0], v[1]) < (u[0], u[1]);
    let (s, e) = if swapped { (v, u) } else { (u, v) };
    let mut o = orient(s, e, p);
    let mut left = if o != 0.0 {
        o > 0.0
    } else {
        // d/dε of orient at p + (ε, ε²): −(e_y − s_y) ε + (e_x − s_x) ε².
        let dy = e[1] - s[1];
        if dy != 0.0 {
            dy < 0.0
        } else {
            e[0] - s[0] > 0.0
        }
    };
    if swapped {
        o = -o;
        left = !left;
    }
    (o, left)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::shapes;

    fn placed(t: Vec<[[f64; 3]; 3]>, rotate: [f64; 3], centre: [f64; 3]) -> Mesh {
        Mesh { triangles: t }.placed([1.0; 3], rotate, centre)
    }

    fn assert_volume(v: &Voxels, want: f64, what: &str) {
        let got = v.count() as f64;
        let err = (got - want).abs() / want;
        assert!(
            err < 0.02,
            "{what}: {got} nodes, analytic {want:.1} ({:.2}%)",
            100.0 * err
        );
    }

    #[test]
    fn a_cube_and_a_sphere_have_their_analytic_volume_at_any_orientation() {
        let lattice = [48, 48, 48];
        // A centre off the node lattice, so that no face runs through a row of node centres.
        let centre = [23.3, 24.1, 23.7];
        for rot in [[0.0; 3], [30.0, 20.0, 10.0]] {
            let cube = Voxels::of(&placed(shapes::cube(20.0), rot, centre), lattice).unwrap();
            assert_volume(&cube, 8000.0, &format!("cube {rot:?}"));
            let sphere = shapes::sphere(12.0, 4);
            let v = Voxels::of(&placed(sphere, rot, centre), lattice).unwrap();
            // The inscribed polyhedron of 5120 faces has 0.2% less volume than the sphere.
            assert_volume(
                &v,
                4.0 / 3.0 * std::f64::consts::PI * 1728.0,
                &format!("sphere {rot:?}"),
            );
        }
    }

    #[test]
    fn rays_through_edges_and_vertices_count_once() {
        // Faces, edges and vertices on node centres: the cube spans [4, 12] on every axis, so each
        // row along an axis runs through vertices and edges of the faces' triangles.
        let m = placed(shapes::cube(8.0), [0.0; 3], [8.0; 3]);
        let v = Voxels::of(&m, [16, 16, 16]).unwrap();
        // The half-open rule takes nodes 4..12 along the ray, and the perturbation one side of
        // each boundary row: 8 nodes per axis.
        assert_eq!(v.count(), 8 * 8 * 8);
        assert!(v.contains([4, 4, 4]) && v.contains([11, 11, 11]));
        assert!(!v.contains([12, 8, 8]) && !v.contains([3, 8, 8]));
    }

    #[test]
    fn a_broken_sphere_still_has_its_volume_by_majority_vote() {
        let mut t = shapes::sphere(12.0, 3);
        // Holes: remove a few scattered triangles. Duplicates and flips: add a few twice.
        for k in [5, 100, 333, 700, 1111] {
            t.remove(k);
        }
        for k in [17, 250, 900] {
            let d = t[k];
            t.push(d);
            t.push([d[0], d[2], d[1]]);
        }
        let v = Voxels::of(&placed(t, [10.0, 0.0, 0.0], [20.3, 20.1, 19.7]), [40; 3]).unwrap();
        assert_volume(
            &v,
            4.0 / 3.0 * std::f64::consts::PI * 1728.0,
            "broken sphere",
        );
    }

    #[test]
    fn a_mesh_outside_the_lattice_has_no_voxels_and_a_clipped_one_is_cut() {
        let m = placed(shapes::cube(4.0), [0.0; 3], [-10.0, 5.0, 5.0]);
        assert!(Voxels::of(&m, [16; 3]).is_none());
        let m = placed(shapes::cube(4.0), [0.0; 3], [0.2, 5.2, 5.2]);
        let v = Voxels::of(&m, [16; 3]).unwrap();
        assert_eq!(v.node_box().0, [0, 4, 4]);
        assert_eq!(v.count(), 3 * 4 * 4);
    }

    /// The figure in PERFORMANCE.md: a sphere of 1.3 million triangles (an icosahedron subdivided
    /// 8 times) of radius 250 nodes, voxelised into a 512³ lattice.
    #[test]
    #[ignore = "timing, run by hand"]
    fn time_a_million_triangles_into_512_cubed() {
        let t = shapes::sphere(250.0, 8);
        let m = placed(t, [10.0, 20.0, 30.0], [255.3, 255.6, 255.1]);
        let n = m.triangles.len();
        let start = std::time::Instant::now();
        let v = Voxels::of(&m, [512; 3]).unwrap();
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{n} triangles into 512^3: {secs:.2} s on {} threads, {} solid nodes",
            rayon::current_num_threads(),
            v.count()
        );
        assert_volume(
            &v,
            4.0 / 3.0 * std::f64::consts::PI * 250f64.powi(3),
            "big sphere",
        );
    }
}
