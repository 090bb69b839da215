//! Benchmark of the VTK output format: the raw-appended `.vti` writer of `thelma_results::vtk`
//! against the same arrays written base64-encoded inline (the form the `vtkio` crate writes), for a
//! cube of N³ nodes: seconds and megabytes of each, written to disk and flushed.
//!
//! `cargo run --release -p thelma-results --example vtk_bench -- [N] [REPEATS]` (default 128, 3).

use std::time::Instant;

use base64::Engine;
use thelma_core::Fields;
use thelma_results::vtk::{write_vti, VtkOptions};
use thelma_results::write_atomic;

/// A smooth field with a few solid nodes, so that no array compresses or encodes specially.
fn field(n: usize) -> Fields {
    let mut f = Fields::zeros([n; 3], 0);
    for z in 0..n {
        for y in 0..n {
            for x in 0..n {
                let p = f.idx(x, y, z);
                let (a, b, c) = (
                    x as f64 / n as f64,
                    y as f64 / n as f64,
                    z as f64 / n as f64,
                );
                f.rho[p] = 1.0 + 0.01 * (a - b);
                f.ux[p] = 0.1 * (6.0 * c).sin();
                f.uy[p] = 0.05 * (5.0 * a).cos();
                f.uz[p] = 0.02 * b * c;
                f.solid[p] = (x + y + z) % 97 == 0;
            }
        }
    }
    f
}

/// The same file with every array inline as base64 of (UInt64 byte count + data).
fn write_base64_inline(path: &std::path::Path, f: &Fields) -> std::io::Result<()> {
    let n = f.rho.len();
    let e = base64::engine::general_purpose::STANDARD;
    let block = |bytes: Vec<u8>| -> String {
        let mut b = (bytes.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(&bytes);
        e.encode(b)
    };
    let f32s = |v: &mut dyn Iterator<Item = f64>| -> Vec<u8> {
        v.flat_map(|x| (x as f32).to_le_bytes()).collect()
    };
    write_atomic(path, |w| {
        let [nx, ny, nz] = f.size;
        writeln!(w, r#"<?xml version="1.0"?>"#)?;
        writeln!(
            w,
            r#"<VTKFile type="ImageData" version="1.0" byte_order="LittleEndian" header_type="UInt64">"#
        )?;
        writeln!(
            w,
            r#"<ImageData WholeExtent="0 {nx} 0 {ny} 0 {nz}" Origin="0 0 0" Spacing="1 1 1"><Piece Extent="0 {nx} 0 {ny} 0 {nz}"><CellData>"#
        )?;
        let arrays: [(&str, usize, Vec<u8>); 5] = [
            ("density", 1, f32s(&mut f.rho.iter().copied())),
            (
                "velocity",
                3,
                f32s(&mut (0..n).flat_map(|p| [f.ux[p], f.uy[p], f.uz[p]])),
            ),
            (
                "speed",
                1,
                f32s(
                    &mut (0..n)
                        .map(|p| (f.ux[p].powi(2) + f.uy[p].powi(2) + f.uz[p].powi(2)).sqrt()),
                ),
            ),
            (
                "pressure",
                1,
                f32s(&mut f.rho.iter().map(|r| (r - 1.0) / 3.0)),
            ),
            ("solid", 1, f.solid.iter().map(|&s| u8::from(s)).collect()),
        ];
        for (name, comps, bytes) in arrays {
            let kind = if name == "solid" { "UInt8" } else { "Float32" };
            writeln!(
                w,
                r#"<DataArray type="{kind}" Name="{name}" NumberOfComponents="{comps}" format="binary">"#
            )?;
            w.write_all(block(bytes).as_bytes())?;
            writeln!(w, "\n</DataArray>")?;
        }
        writeln!(w, "</CellData></Piece></ImageData></VTKFile>")
    })
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(128);
    let repeats: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(3);
    let f = field(n);
    let dir = tempfile::tempdir()?;
    let (raw, b64) = (dir.path().join("raw.vti"), dir.path().join("b64.vti"));
    let mut best = [f64::INFINITY; 2];
    for _ in 0..repeats {
        let t = Instant::now();
        write_vti(&raw, std::slice::from_ref(&f), 0, &VtkOptions::default())?;
        best[0] = best[0].min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        write_base64_inline(&b64, &f)?;
        best[1] = best[1].min(t.elapsed().as_secs_f64());
    }
    let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len() as f64 / 1e6);
    let (sr, sb) = (size(&raw)?, size(&b64)?);
    println!("{n}^3 nodes, 5 arrays (f32 density, velocity, speed, pressure; u8 mask), best of {repeats}:");
    println!(
        "  raw appended   {:8.3} s  {:8.1} MB  {:7.1} MB/s",
        best[0],
        sr,
        sr / best[0]
    );
    println!(
        "  base64 inline  {:8.3} s  {:8.1} MB  {:7.1} MB/s",
        best[1],
        sb,
        sb / best[1]
    );
    println!(
        "  base64 / raw:  {:.2}x the time, {:.2}x the size",
        best[1] / best[0],
        sb / sr
    );
    Ok(())
}
