//! Triangle meshes read from STL files (ASCII or binary) and placed by scaling, rotation and
//! translation, before the voxeliser turns them into solid nodes.

use std::io::Cursor;
use std::path::{Path, PathBuf};

/// Why an STL file gives no usable mesh.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MeshError {
    #[error("cannot read STL file {}: {message}", path.display())]
    Read { path: PathBuf, message: String },
    #[error("{} is not an STL file (ASCII or binary): {message}", path.display())]
    NotStl { path: PathBuf, message: String },
    #[error("{} has no triangles", path.display())]
    Empty { path: PathBuf },
    #[error("{} has a vertex that is not a finite number (triangle {triangle})", path.display())]
    NonFinite { path: PathBuf, triangle: usize },
}

/// A triangle soup: no connectivity is needed, since the voxeliser counts ray crossings only.
#[derive(Clone, Debug, PartialEq)]
pub struct Mesh {
    pub triangles: Vec<[[f64; 3]; 3]>,
}

impl Mesh {
    /// Reads an ASCII or binary STL file.
    pub fn load(path: &Path) -> Result<Self, MeshError> {
        let bytes = std::fs::read(path).map_err(|e| MeshError::Read {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Self::from_bytes(&bytes).map_err(|e| e.at(path))
    }

    /// Parses the bytes of an STL file; the path in the error is empty.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, MeshError> {
        let not_stl = |message: String| MeshError::NotStl {
            path: PathBuf::new(),
            message,
        };
        // A binary file's length is fixed by its triangle count; anything else must be ASCII. The
        // reader would otherwise take any file of 84 bytes or more for a binary one.
        let binary_length = bytes.len() >= 84 && {
            let n = u32::from_le_bytes([bytes[80], bytes[81], bytes[82], bytes[83]]) as usize;
            bytes.len() == 84 + 50 * n
        };
        let ascii = bytes.trim_ascii_start().starts_with(b"solid");
        if !binary_length && !ascii {
            return Err(not_stl(format!(
                "{} bytes, neither `solid ...` text nor a binary file's 84 + 50 n bytes",
                bytes.len()
            )));
        }
        let mut reader = Cursor::new(bytes);
        let triangles: Vec<[[f64; 3]; 3]> = stl_io::create_stl_reader(&mut reader)
            .and_then(|it| {
                it.map(|t| t.map(|t| t.vertices.map(|v| v.0.map(f64::from))))
                    .collect()
            })
            .map_err(|e| not_stl(e.to_string()))?;
        if triangles.is_empty() {
            return Err(MeshError::Empty {
                path: PathBuf::new(),
            });
        }
        if let Some(t) = triangles
            .iter()
            .position(|t| t.iter().flatten().any(|c| !c.is_finite()))
        {
            return Err(MeshError::NonFinite {
                path: PathBuf::new(),
                triangle: t,
            });
        }
        Ok(Self { triangles })
    }

    /// Scales by `scale` per axis, rotates by `rotate` degrees about x, then y, then z (about the
    /// origin of the mesh's own coordinates), then translates by `translate`: the order a case
    /// file's `[[body]]` gives.
    pub fn placed(mut self, scale: [f64; 3], rotate_deg: [f64; 3], translate: [f64; 3]) -> Self {
        let r = rotation(rotate_deg);
        for t in &mut self.triangles {
            for v in t.iter_mut() {
                let s = [v[0] * scale[0], v[1] * scale[1], v[2] * scale[2]];
                for a in 0..3 {
                    v[a] = r[a][0] * s[0] + r[a][1] * s[1] + r[a][2] * s[2] + translate[a];
                }
            }
        }
        self
    }

    /// Maps every vertex through `f` (a change of units).
    pub fn mapped(mut self, f: impl Fn([f64; 3]) -> [f64; 3]) -> Self {
        for t in &mut self.triangles {
            for v in t.iter_mut() {
                *v = f(*v);
            }
        }
        self
    }

    /// The axis-aligned bounding box, `[min, max]`.
    pub fn bounds(&self) -> [[f64; 3]; 2] {
        let mut b = [[f64::INFINITY; 3], [f64::NEG_INFINITY; 3]];
        for v in self.triangles.iter().flatten() {
            for a in 0..3 {
                b[0][a] = b[0][a].min(v[a]);
                b[1][a] = b[1][a].max(v[a]);
            }
        }
        b
    }

    /// The volume the triangles enclose, signed by their winding: positive where they are wound
    /// outward (the normal (b − a) × (c − a) pointing out of the body), negative where inward. A
    /// closed mesh gives the same value about any point; it is taken about the bounding box's
    /// centre, so that an open sheet's is that of the cone from there.
    pub fn signed_volume(&self) -> f64 {
        let [lo, hi] = self.bounds();
        let o: [f64; 3] = std::array::from_fn(|a| 0.5 * (lo[a] + hi[a]));
        let six: f64 = self
            .triangles
            .iter()
            .map(|t| {
                let [a, b, c] = t.map(|v| std::array::from_fn::<f64, 3, _>(|k| v[k] - o[k]));
                let bc = cross(b, c);
                a[0] * bc[0] + a[1] * bc[1] + a[2] * bc[2]
            })
            .sum();
        six / 6.0
    }
}

/// The cross product a × b.
pub(crate) fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

impl MeshError {
    fn at(self, p: &Path) -> Self {
        let path = p.to_path_buf();
        match self {
            Self::Read { message, .. } => Self::Read { path, message },
            Self::NotStl { message, .. } => Self::NotStl { path, message },
            Self::Empty { .. } => Self::Empty { path },
            Self::NonFinite { triangle, .. } => Self::NonFinite { path, triangle },
        }
    }
}

/// The rotation matrix of x, then y, then z rotations (degrees): R = Rz · Ry · Rx.
fn rotation(deg: [f64; 3]) -> [[f64; 3]; 3] {
    let [(sx, cx), (sy, cy), (sz, cz)] = deg.map(|d| d.to_radians().sin_cos());
    let rx = [[1.0, 0.0, 0.0], [0.0, cx, -sx], [0.0, sx, cx]];
    let ry = [[cy, 0.0, sy], [0.0, 1.0, 0.0], [-sy, 0.0, cy]];
    let rz = [[cz, -sz, 0.0], [sz, cz, 0.0], [0.0, 0.0, 1.0]];
    mul(rz, mul(ry, rx))
}

fn mul(a: [[f64; 3]; 3], b: [[f64; 3]; 3]) -> [[f64; 3]; 3] {
    let mut m = [[0.0; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            m[i][j] = (0..3).map(|k| a[i][k] * b[k][j]).sum();
        }
    }
    m
}

/// Test meshes: a cube and a subdivided icosahedron, with outward-facing triangles, and their
/// ASCII and binary STL text.
#[cfg(test)]
pub(crate) mod shapes {
    pub fn cube(side: f64) -> Vec<[[f64; 3]; 3]> {
        let h = side / 2.0;
        let mut t = Vec::new();
        for a in 0..3 {
            for s in [-1.0, 1.0] {
                let (b, c) = ((a + 1) % 3, (a + 2) % 3);
                let p = |u: f64, v: f64| {
                    let mut q = [0.0; 3];
                    q[a] = s * h;
                    q[b] = u * h;
                    q[c] = v * h;
                    q
                };
                let (p00, p10, p11, p01) = (p(-1., -1.), p(1., -1.), p(1., 1.), p(-1., 1.));
                if s > 0.0 {
                    t.push([p00, p10, p11]);
                    t.push([p00, p11, p01]);
                } else {
                    t.push([p00, p11, p10]);
                    t.push([p00, p01, p11]);
                }
            }
        }
        t
    }

    /// An icosahedron subdivided `levels` times, projected onto the sphere of radius `r`.
    pub fn sphere(r: f64, levels: usize) -> Vec<[[f64; 3]; 3]> {
        let g = (1.0 + 5f64.sqrt()) / 2.0;
        let v = [
            [-1., g, 0.],
            [1., g, 0.],
            [-1., -g, 0.],
            [1., -g, 0.],
            [0., -1., g],
            [0., 1., g],
            [0., -1., -g],
            [0., 1., -g],
            [g, 0., -1.],
            [g, 0., 1.],
            [-g, 0., -1.],
            [-g, 0., 1.],
        ];
        let f = [
            [0, 11, 5],
            [0, 5, 1],
            [0, 1, 7],
            [0, 7, 10],
            [0, 10, 11],
            [1, 5, 9],
            [5, 11, 4],
            [11, 10, 2],
            [10, 7, 6],
            [7, 1, 8],
            [3, 9, 4],
            [3, 4, 2],
            [3, 2, 6],
            [3, 6, 8],
            [3, 8, 9],
            [4, 9, 5],
            [2, 4, 11],
            [6, 2, 10],
            [8, 6, 7],
            [9, 8, 1],
        ];
        let unit = |p: [f64; 3]| {
            let n = (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt();
            p.map(|c| c / n)
        };
        let mut t: Vec<[[f64; 3]; 3]> = f.iter().map(|f| f.map(|i| unit(v[i]))).collect();
        for _ in 0..levels {
            let mid = |a: [f64; 3], b: [f64; 3]| unit([0, 1, 2].map(|k| (a[k] + b[k]) / 2.0));
            t = t
                .iter()
                .flat_map(|&[a, b, c]| {
                    let (ab, bc, ca) = (mid(a, b), mid(b, c), mid(c, a));
                    [[a, ab, ca], [b, bc, ab], [c, ca, bc], [ab, bc, ca]]
                })
                .collect();
        }
        t.iter().map(|t| t.map(|p| p.map(|c| c * r))).collect()
    }

    pub fn ascii(t: &[[[f64; 3]; 3]]) -> String {
        let mut s = String::from("solid test\n");
        for tri in t {
            s += "  facet normal 0 0 0\n    outer loop\n";
            for v in tri {
                s += &format!("      vertex {} {} {}\n", v[0], v[1], v[2]);
            }
            s += "    endloop\n  endfacet\n";
        }
        s + "endsolid test\n"
    }

    pub fn binary(t: &[[[f64; 3]; 3]]) -> Vec<u8> {
        let mut b = vec![0u8; 80];
        b.extend((t.len() as u32).to_le_bytes());
        for tri in t {
            b.extend([0f32; 3].iter().flat_map(|c| c.to_le_bytes()));
            for v in tri {
                b.extend(v.iter().flat_map(|&c| (c as f32).to_le_bytes()));
            }
            b.extend([0u8; 2]);
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_and_binary_files_read_the_same_triangles() {
        let dir = tempfile::tempdir().unwrap();
        let cube = shapes::cube(2.0);
        let a = dir.path().join("a.stl");
        let b = dir.path().join("b.stl");
        std::fs::write(&a, shapes::ascii(&cube)).unwrap();
        std::fs::write(&b, shapes::binary(&cube)).unwrap();
        let ma = Mesh::load(&a).unwrap();
        let mb = Mesh::load(&b).unwrap();
        assert_eq!(ma.triangles, cube);
        assert_eq!(mb.triangles, cube);
    }

    #[test]
    fn bad_files_are_typed_errors_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.stl");
        assert!(matches!(Mesh::load(&p), Err(MeshError::Read { .. })));
        std::fs::write(&p, b"").unwrap();
        assert!(matches!(Mesh::load(&p), Err(MeshError::NotStl { .. })));
        std::fs::write(&p, "solid empty\nendsolid empty\n").unwrap();
        assert!(matches!(Mesh::load(&p), Err(MeshError::Empty { .. })));
        std::fs::write(&p, shapes::binary(&[])).unwrap();
        assert!(matches!(Mesh::load(&p), Err(MeshError::Empty { .. })));
        std::fs::write(&p, "[domain]\nsize = [1, 2, 3]\n".repeat(20)).unwrap();
        let e = Mesh::load(&p).unwrap_err();
        assert!(matches!(e, MeshError::NotStl { .. }), "{e:?}");
        assert!(e.to_string().contains("x.stl"), "{e}");
        let nan = [[[f64::NAN, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]];
        std::fs::write(&p, shapes::binary(&nan)).unwrap();
        assert!(matches!(
            Mesh::load(&p),
            Err(MeshError::NonFinite { triangle: 0, .. })
        ));
    }

    #[test]
    fn placement_scales_then_rotates_then_translates() {
        let m = Mesh {
            triangles: vec![[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]],
        };
        let p = m.placed([2.0, 3.0, 4.0], [0.0, 0.0, 90.0], [10.0, 0.0, 0.0]);
        let want = [[10.0, 2.0, 0.0], [7.0, 0.0, 0.0], [10.0, 0.0, 4.0]];
        for (v, w) in p.triangles[0].iter().zip(want) {
            for a in 0..3 {
                assert!((v[a] - w[a]).abs() < 1e-12, "{v:?} vs {w:?}");
            }
        }
        // x first, then y: (0, 1, 0) → x 90° → (0, 0, 1) → y 90° → (1, 0, 0).
        let m = Mesh {
            triangles: vec![[[0.0, 1.0, 0.0]; 3]],
        };
        let v = m.placed([1.0; 3], [90.0, 90.0, 0.0], [0.0; 3]).triangles[0][0];
        assert!((v[0] - 1.0).abs() < 1e-12 && v[1].abs() < 1e-12 && v[2].abs() < 1e-12);
    }
}
