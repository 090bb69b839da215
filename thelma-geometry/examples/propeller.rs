//! Writes the parametric propeller of the immersed bodies' benchmark as a binary STL:
//!
//!     cargo run --release -p thelma-geometry --example propeller -- examples/propeller.stl
//!
//! Three blades of tip radius 20, a hub of radius 4 and length 10 (node units, so a case places it
//! with scale 1), pitch 40, chord 9, thickness 1.5 (`Propeller::default()`).

use thelma_geometry::Propeller;

fn main() -> std::io::Result<()> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "propeller.stl".into());
    let triangles: Vec<stl_io::Triangle> = Propeller::default()
        .triangles()
        .into_iter()
        .map(|t| {
            let v = t.map(|p| p.map(|c| c as f32));
            let (a, b) = (sub(v[1], v[0]), sub(v[2], v[0]));
            let n = [
                a[1] * b[2] - a[2] * b[1],
                a[2] * b[0] - a[0] * b[2],
                a[0] * b[1] - a[1] * b[0],
            ];
            let len = (n[0] * n[0] + n[1] * n[1] + n[2] * n[2])
                .sqrt()
                .max(f32::MIN_POSITIVE);
            stl_io::Triangle {
                normal: stl_io::Normal::new(n.map(|c| c / len)),
                vertices: v.map(stl_io::Vertex::new),
            }
        })
        .collect();
    let mut file = std::fs::File::create(&path)?;
    stl_io::write_stl(&mut file, triangles.iter())?;
    println!("{path}: {} triangles", triangles.len());
    Ok(())
}

fn sub(a: [f32; 3], b: [f32; 3]) -> [f32; 3] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}
