//! VTK XML image data (`.vti`) of the macroscopic fields, with the arrays as raw binary appended
//! data: one file for the whole domain, or one piece per slab or subdomain with a `.pvti` index,
//! and a `.pvd` collection that ParaView opens as one time series.
//!
//! Every lattice node is written as a cell of an image whose points lie on the cell corners. With
//! mid-grid walls a node sits at `(k + ½) dx`, so the image spans exactly the box `[0, n dx]` and the
//! pieces of neighbouring slabs or subdomains meet without overlapping planes. ParaView's "Cell Data to Point Data"
//! filter gives point data when a filter needs it (streamlines, contours).
//!
//! Which arrays a file holds is a list of [`OutputField`]s. Each array with a unit carries it as
//! VTK's `UNITS_LABEL` information key (`m/s`, `Pa`, `1/s`, `1/s^2`, or `lattice units`), which
//! VTK's readers attach to the array.
//!
//! Raw appended data rather than base64 inline (what the `vtkio` crate writes): it is a third smaller
//! and several times faster to write (`PERFORMANCE.md`), and the writer is this file.

use std::io::{self, Write};
use std::path::Path;

use thelma_core::{Fields, OutputField};

use crate::gradient::{q_criterion, vorticity, Lattice};
use crate::output::write_atomic;

/// How lattice values map to the values written: node spacing, velocity and pressure units (1, 1
/// and 1 for lattice units; `dx` in m, `dx/dt` in m/s with physical units, and `ρ₀ (dx/dt)²` in Pa
/// when they give a density). Velocity derivatives scale by `velocity / spacing` (1/s).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scales {
    pub spacing: f64,
    pub velocity: f64,
    pub pressure: f64,
    /// Whether `spacing` and `velocity` give SI units (m, m/s), which the unit labels then say.
    pub si: bool,
    /// Whether `pressure` gives pascals.
    pub pressure_si: bool,
    /// The reference temperature T₀ that θ is written above.
    pub t0: f64,
}

impl Default for Scales {
    fn default() -> Self {
        Self {
            spacing: 1.0,
            velocity: 1.0,
            pressure: 1.0,
            si: false,
            pressure_si: false,
            t0: 0.0,
        }
    }
}

/// Floating-point type of the arrays written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Scalar {
    #[default]
    F32,
    F64,
}

impl Scalar {
    fn vtk_name(self) -> &'static str {
        match self {
            Scalar::F32 => "Float32",
            Scalar::F64 => "Float64",
        }
    }
    fn bytes(self) -> usize {
        match self {
            Scalar::F32 => 4,
            Scalar::F64 => 8,
        }
    }
}

/// What a VTK file holds and how its values are written.
#[derive(Clone, Debug, PartialEq)]
pub struct VtkOptions {
    /// The arrays, in the order written.
    pub arrays: Vec<OutputField>,
    pub scales: Scales,
    pub scalar: Scalar,
    /// The periodic axes, across which the velocity derivatives wrap.
    pub periodic: [bool; 3],
}

impl Default for VtkOptions {
    fn default() -> Self {
        Self {
            arrays: OutputField::DEFAULT.into(),
            scales: Scales::default(),
            scalar: Scalar::F32,
            periodic: [false; 3],
        }
    }
}

impl VtkOptions {
    fn data_type(&self, f: OutputField) -> &'static str {
        match f {
            OutputField::Solid => "UInt8",
            _ => self.scalar.vtk_name(),
        }
    }

    fn width(&self, f: OutputField) -> usize {
        match f {
            OutputField::Solid => 1,
            _ => self.scalar.bytes(),
        }
    }

    /// The unit label of array `f`, if it has a unit.
    fn unit(&self, f: OutputField) -> Option<&'static str> {
        let (si, pa) = (self.scales.si, self.scales.pressure_si);
        let label = |physical: bool, unit| Some(if physical { unit } else { "lattice units" });
        match f {
            OutputField::Density | OutputField::Solid => None,
            OutputField::Velocity | OutputField::Speed | OutputField::MeanVelocity => {
                label(si, "m/s")
            }
            OutputField::Pressure | OutputField::MeanPressure => label(pa, "Pa"),
            OutputField::Vorticity => label(si, "1/s"),
            OutputField::QCriterion => label(si, "1/s^2"),
            OutputField::Temperature | OutputField::MeanTemperature => {
                Some("the case's temperature unit")
            }
        }
    }

    /// The `Scalars="…" Vectors="…"` attributes: the first scalar and vector arrays, which ParaView
    /// colours by at first.
    fn active(&self) -> String {
        let first = |vector: bool| {
            self.arrays
                .iter()
                .find(|f| (f.components() == 3) == vector && **f != OutputField::Solid)
        };
        let mut s = String::new();
        if let Some(f) = first(false) {
            s += &format!(r#" Scalars="{f}""#);
        }
        if let Some(f) = first(true) {
            s += &format!(r#" Vectors="{f}""#);
        }
        s
    }
}

/// The line(s) declaring an array: `<tag attrs/>`, or with its unit as VTK's `UNITS_LABEL`
/// information key inside (read by both the `.vti` and the `.pvti` readers).
fn declaration(indent: &str, tag: &str, attrs: &str, unit: Option<&str>) -> String {
    match unit {
        None => format!("{indent}<{tag} {attrs}/>\n"),
        Some(unit) => format!(
            "{indent}<{tag} {attrs}>\n{indent}  <InformationKey name=\"UNITS_LABEL\" location=\"vtkDataArray\">{unit}</InformationKey>\n{indent}</{tag}>\n"
        ),
    }
}

/// The cell extent of a box of `size` nodes from node `origin`.
fn extent(size: [usize; 3], origin: [usize; 3]) -> String {
    let [x, y, z] = origin;
    format!(
        "{x} {} {y} {} {z} {}",
        x + size[0],
        y + size[1],
        z + size[2]
    )
}

/// Writes part `k` of `slabs` (the whole domain: slabs in z order or the boxes of a partition that
/// cuts x and y too; one part for a gathered file) as a `.vti` file, atomically. The other parts
/// are read only for the velocity derivatives next to the part's edges, so a piece holds the
/// values the gathered file holds for its nodes. Values at solid
/// nodes are written as 0; the `solid` array (1 = solid) masks them.
pub fn write_vti(path: &Path, slabs: &[Fields], k: usize, opts: &VtkOptions) -> io::Result<()> {
    write_atomic(path, |w| write_vti_to(w, slabs, k, opts))
}

/// [`write_vti`] into any writer.
pub fn write_vti_to(
    w: &mut dyn Write,
    slabs: &[Fields],
    k: usize,
    opts: &VtkOptions,
) -> io::Result<()> {
    let lattice = Lattice::new(slabs, opts.periodic);
    let slab = &slabs[k];
    let n = slab.rho.len();
    let scales = opts.scales;
    let sp = scales.spacing;
    writeln!(w, r#"<?xml version="1.0"?>"#)?;
    writeln!(
        w,
        r#"<VTKFile type="ImageData" version="1.0" byte_order="LittleEndian" header_type="UInt64">"#
    )?;
    writeln!(
        w,
        r#"  <ImageData WholeExtent="{}" Origin="0 0 0" Spacing="{sp:e} {sp:e} {sp:e}">"#,
        extent(lattice.size(), [0; 3])
    )?;
    let origin = [slab.xy0[0], slab.xy0[1], slab.z0];
    writeln!(w, r#"    <Piece Extent="{}">"#, extent(slab.size, origin))?;
    writeln!(w, r#"      <CellData{}>"#, opts.active())?;
    let mut offset = 0usize;
    for &f in &opts.arrays {
        let (name, comps) = (f.name(), f.components());
        let attrs = format!(
            r#"type="{}" Name="{name}" NumberOfComponents="{comps}" format="appended" offset="{offset}""#,
            opts.data_type(f)
        );
        w.write_all(declaration("        ", "DataArray", &attrs, opts.unit(f)).as_bytes())?;
        offset += 8 + n * comps * opts.width(f);
    }
    writeln!(w, "      </CellData>")?;
    writeln!(w, "    </Piece>")?;
    writeln!(w, "  </ImageData>")?;
    write!(w, "  <AppendedData encoding=\"raw\">\n   _")?;
    for &f in &opts.arrays {
        write_array(w, f, &lattice, k, opts)?;
    }
    write!(w, "\n  </AppendedData>\n</VTKFile>\n")?;
    Ok(())
}

/// The appended block of array `f` of slab `k`.
fn write_array(
    w: &mut dyn Write,
    f: OutputField,
    lattice: &Lattice,
    k: usize,
    opts: &VtkOptions,
) -> io::Result<()> {
    let slab = lattice.slab(k);
    let n = slab.rho.len();
    let scalar = opts.scalar;
    let scales = opts.scales;
    // A velocity derivative in lattice units is per step; with units, per second.
    let rate = scales.velocity / scales.spacing;
    match f {
        OutputField::Solid => {
            w.write_all(&(n as u64).to_le_bytes())?;
            let mask: Vec<u8> = slab.solid.iter().map(|&s| u8::from(s)).collect();
            w.write_all(&mask)
        }
        OutputField::Vorticity => {
            let omega = lattice
                .gradients(k)
                .flat_map(|g| vorticity(&g).map(|c| c * rate));
            write_block(w, scalar, 3 * n, omega)
        }
        OutputField::QCriterion => {
            let q = lattice.gradients(k).zip(&slab.solid).map(|(g, &solid)| {
                if solid {
                    0.0
                } else {
                    q_criterion(&g) * rate * rate
                }
            });
            write_block(w, scalar, n, q)
        }
        OutputField::MeanVelocity | OutputField::MeanPressure | OutputField::MeanTemperature => {
            let mean = slab
                .mean
                .as_deref()
                .ok_or_else(|| io::Error::other(format!("{f}: the slab has no averages")))?;
            let plain = match f {
                OutputField::MeanVelocity => OutputField::Velocity,
                OutputField::MeanPressure => OutputField::Pressure,
                _ => OutputField::Temperature,
            };
            write_point_array(w, plain, mean, opts)
        }
        _ => write_point_array(w, f, slab, opts),
    }
}

/// The appended block of array `f` of `slab`, one of the arrays of each node's own values.
fn write_point_array(
    w: &mut dyn Write,
    f: OutputField,
    slab: &Fields,
    opts: &VtkOptions,
) -> io::Result<()> {
    let n = slab.rho.len();
    let fluid = |p: usize| !slab.solid[p];
    let scalar = opts.scalar;
    let scales = opts.scales;
    let v = scales.velocity;
    match f {
        OutputField::Density => {
            let density = (0..n).map(|p| if fluid(p) { slab.rho[p] } else { 0.0 });
            write_block(w, scalar, n, density)
        }
        OutputField::Velocity => {
            let velocity = (0..n).flat_map(|p| {
                let s = if fluid(p) { v } else { 0.0 };
                [slab.ux[p] * s, slab.uy[p] * s, slab.uz[p] * s]
            });
            write_block(w, scalar, 3 * n, velocity)
        }
        OutputField::Speed => {
            let speed = (0..n).map(|p| {
                if fluid(p) {
                    v * (slab.ux[p].powi(2) + slab.uy[p].powi(2) + slab.uz[p].powi(2)).sqrt()
                } else {
                    0.0
                }
            });
            write_block(w, scalar, n, speed)
        }
        OutputField::Pressure => {
            let pressure = (0..n).map(|p| {
                if fluid(p) {
                    (slab.rho[p] - 1.0) / 3.0 * scales.pressure
                } else {
                    0.0
                }
            });
            write_block(w, scalar, n, pressure)
        }
        OutputField::Temperature => {
            let t = (0..n).map(|p| {
                if fluid(p) {
                    scales.t0 + slab.temperature.get(p).copied().unwrap_or(0.0)
                } else {
                    0.0
                }
            });
            write_block(w, scalar, n, t)
        }
        _ => Err(io::Error::other(format!(
            "{f} is not an array of the nodes' own values"
        ))),
    }
}

/// One appended block: its byte count (UInt64) and `count` values, converted in chunks so that a
/// large field never needs a second full-size copy.
fn write_block(
    w: &mut dyn Write,
    scalar: Scalar,
    count: usize,
    values: impl Iterator<Item = f64>,
) -> io::Result<()> {
    w.write_all(&((count * scalar.bytes()) as u64).to_le_bytes())?;
    let mut buf = Vec::with_capacity(1 << 16);
    for x in values {
        match scalar {
            Scalar::F32 => buf.extend_from_slice(&(x as f32).to_le_bytes()),
            Scalar::F64 => buf.extend_from_slice(&x.to_le_bytes()),
        }
        if buf.len() >= (1 << 16) {
            w.write_all(&buf)?;
            buf.clear();
        }
    }
    w.write_all(&buf)
}

/// One piece of a parallel image: the box of a slab or subdomain (its nodes and its first node)
/// and its `.vti` file (relative to the index).
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    pub size: [usize; 3],
    pub origin: [usize; 3],
    pub source: String,
}

/// Writes the `.pvti` index of `pieces`, which together cover a domain of `whole` nodes and hold
/// the arrays of `opts`.
pub fn write_pvti(
    path: &Path,
    whole: [usize; 3],
    pieces: &[Piece],
    opts: &VtkOptions,
) -> io::Result<()> {
    let sp = opts.scales.spacing;
    let mut s = String::new();
    s += "<?xml version=\"1.0\"?>\n";
    s += "<VTKFile type=\"PImageData\" version=\"1.0\" byte_order=\"LittleEndian\" header_type=\"UInt64\">\n";
    s += &format!(
        "  <PImageData WholeExtent=\"{}\" GhostLevel=\"0\" Origin=\"0 0 0\" Spacing=\"{sp:e} {sp:e} {sp:e}\">\n",
        extent(whole, [0; 3])
    );
    s += &format!("    <PCellData{}>\n", opts.active());
    for &f in &opts.arrays {
        let attrs = format!(
            r#"type="{}" Name="{}" NumberOfComponents="{}""#,
            opts.data_type(f),
            f.name(),
            f.components()
        );
        s += &declaration("      ", "PDataArray", &attrs, opts.unit(f));
    }
    s += "    </PCellData>\n";
    for p in pieces {
        s += &format!(
            "    <Piece Extent=\"{}\" Source=\"{}\"/>\n",
            extent(p.size, p.origin),
            xml_escape(&p.source)
        );
    }
    s += "  </PImageData>\n</VTKFile>\n";
    crate::output::write_bytes_atomic(path, s.as_bytes())
}

/// Writes a `.pvd` collection: one data set per (time, file relative to the collection).
pub fn write_pvd(path: &Path, entries: &[(f64, String)]) -> io::Result<()> {
    let mut s = String::new();
    s += "<?xml version=\"1.0\"?>\n";
    s += "<VTKFile type=\"Collection\" version=\"1.0\" byte_order=\"LittleEndian\">\n  <Collection>\n";
    for (t, file) in entries {
        s += &format!(
            "    <DataSet timestep=\"{t:e}\" group=\"\" part=\"0\" file=\"{}\"/>\n",
            xml_escape(file)
        );
    }
    s += "  </Collection>\n</VTKFile>\n";
    crate::output::write_bytes_atomic(path, s.as_bytes())
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    //! The files are read back with a parser that shares nothing with the writer: quick-xml for the
    //! header and a hand decoding of the appended block as the VTK file format document describes it.

    use super::*;
    use quick_xml::events::Event;
    use quick_xml::reader::Reader;
    use std::collections::HashMap;

    #[derive(Debug)]
    struct Array {
        kind: String,
        comps: usize,
        values: Vec<f64>,
        /// The `UNITS_LABEL` information key, if any.
        unit: Option<String>,
    }

    #[derive(Debug)]
    struct Image {
        whole: Vec<usize>,
        extent: Vec<usize>,
        spacing: Vec<f64>,
        arrays: HashMap<String, Array>,
        /// Array names in the order declared.
        order: Vec<String>,
    }

    fn attrs(e: &quick_xml::events::BytesStart) -> HashMap<String, String> {
        e.attributes()
            .map(|a| {
                let a = a.unwrap();
                (
                    String::from_utf8(a.key.as_ref().to_vec()).unwrap(),
                    a.unescape_value().unwrap().into_owned(),
                )
            })
            .collect()
    }

    fn nums<T: std::str::FromStr>(s: &str) -> Vec<T>
    where
        T::Err: std::fmt::Debug,
    {
        s.split_whitespace().map(|x| x.parse().unwrap()).collect()
    }

    fn read_vti(bytes: &[u8]) -> Image {
        // The header is XML up to the appended block; the block starts after the first `_` there.
        let start = bytes
            .windows(13)
            .position(|w| w == b"<AppendedData")
            .expect("an AppendedData element");
        let mut header = bytes[..start].to_vec();
        header.extend_from_slice(b"</VTKFile>");
        let mut r = Reader::from_reader(header.as_slice());
        let mut buf = Vec::new();
        let mut whole = Vec::new();
        let mut extent = Vec::new();
        let mut spacing = Vec::new();
        let mut decl: Vec<(String, String, usize, usize)> = Vec::new();
        let mut units = HashMap::new();
        let mut in_unit = false;
        loop {
            match r.read_event_into(&mut buf).unwrap() {
                Event::Eof => break,
                Event::Text(t) if in_unit => {
                    let (name, _, _, _) = decl.last().unwrap();
                    units.insert(name.clone(), t.unescape().unwrap().trim().to_string());
                }
                Event::End(e) if e.name().as_ref() == b"InformationKey" => in_unit = false,
                Event::Start(e) | Event::Empty(e) => {
                    let a = attrs(&e);
                    match e.name().as_ref() {
                        b"VTKFile" => {
                            assert_eq!(a["type"], "ImageData");
                            assert_eq!(a["byte_order"], "LittleEndian");
                            assert_eq!(a["header_type"], "UInt64");
                        }
                        b"ImageData" => {
                            whole = nums(&a["WholeExtent"]);
                            spacing = nums(&a["Spacing"]);
                        }
                        b"Piece" => extent = nums(&a["Extent"]),
                        b"InformationKey" => {
                            assert_eq!(a["name"], "UNITS_LABEL");
                            assert_eq!(a["location"], "vtkDataArray");
                            in_unit = true;
                        }
                        b"DataArray" => {
                            assert_eq!(a["format"], "appended");
                            decl.push((
                                a["Name"].clone(),
                                a["type"].clone(),
                                a["NumberOfComponents"].parse::<usize>().unwrap(),
                                a["offset"].parse::<usize>().unwrap(),
                            ))
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
            buf.clear();
        }
        let data_start = start + bytes[start..].iter().position(|&b| b == b'_').unwrap() + 1;
        let data = &bytes[data_start..];
        let mut arrays = HashMap::new();
        let order = decl.iter().map(|d| d.0.clone()).collect();
        for (name, kind, comps, offset) in decl {
            let len = u64::from_le_bytes(data[offset..offset + 8].try_into().unwrap()) as usize;
            let raw = &data[offset + 8..offset + 8 + len];
            let values: Vec<f64> = match kind.as_str() {
                "Float32" => raw
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
                    .collect(),
                "Float64" => raw
                    .chunks_exact(8)
                    .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                    .collect(),
                "UInt8" => raw.iter().map(|&b| b as f64).collect(),
                other => panic!("unexpected type {other}"),
            };
            arrays.insert(
                name.clone(),
                Array {
                    kind,
                    comps,
                    values,
                    unit: units.get(&name).cloned(),
                },
            );
        }
        // The file closes properly after the block.
        assert!(bytes.ends_with(b"</AppendedData>\n</VTKFile>\n"));
        Image {
            whole,
            extent,
            spacing,
            arrays,
            order,
        }
    }

    fn sample(size: [usize; 3], z0: usize) -> Fields {
        let mut f = Fields::zeros(size, z0);
        for z in 0..size[2] {
            for y in 0..size[1] {
                for x in 0..size[0] {
                    let p = f.idx(x, y, z);
                    let gz = (z + z0) as f64;
                    f.rho[p] = 1.0 + 0.001 * (x as f64 - y as f64 + 0.5 * gz);
                    f.ux[p] = 0.01 * x as f64;
                    f.uy[p] = -0.02 * y as f64;
                    f.uz[p] = 0.003 * gz;
                    f.solid[p] = x == 1 && y == 2;
                }
            }
        }
        f
    }

    fn check(img: &Image, f: &Fields, scales: Scales, tol: f64) {
        let n = f.rho.len();
        assert_eq!(img.arrays["density"].values.len(), n);
        assert_eq!(img.arrays["velocity"].comps, 3);
        assert_eq!(img.arrays["velocity"].values.len(), 3 * n);
        assert_eq!(img.arrays["solid"].kind, "UInt8");
        for p in 0..n {
            let solid = f.solid[p];
            assert_eq!(img.arrays["solid"].values[p], f64::from(u8::from(solid)));
            let (rho, u) = if solid {
                (0.0, [0.0; 3])
            } else {
                (
                    f.rho[p],
                    [
                        f.ux[p] * scales.velocity,
                        f.uy[p] * scales.velocity,
                        f.uz[p] * scales.velocity,
                    ],
                )
            };
            assert!((img.arrays["density"].values[p] - rho).abs() <= tol * rho.abs().max(1.0));
            for c in 0..3 {
                let got = img.arrays["velocity"].values[3 * p + c];
                assert!(
                    (got - u[c]).abs() <= tol * u[c].abs().max(1e-3),
                    "{got} {u:?}"
                );
            }
            let speed = (u[0] * u[0] + u[1] * u[1] + u[2] * u[2]).sqrt();
            assert!((img.arrays["speed"].values[p] - speed).abs() <= tol * speed.max(1e-3));
            let pressure = if solid {
                0.0
            } else {
                (f.rho[p] - 1.0) / 3.0 * scales.pressure
            };
            let got = img.arrays["pressure"].values[p];
            assert!(
                (got - pressure).abs() <= tol * pressure.abs().max(1e-3),
                "{got} {pressure}"
            );
        }
    }

    #[test]
    fn a_vti_reads_back_with_the_same_values_in_f32_and_f64() {
        let dir = tempfile::tempdir().unwrap();
        let f = sample([5, 4, 3], 0);
        let scales = Scales {
            spacing: 0.25,
            velocity: 2.0,
            pressure: 3.5,
            si: true,
            pressure_si: true,
            t0: 0.0,
        };
        for (scalar, tol) in [(Scalar::F32, 1e-6), (Scalar::F64, 0.0)] {
            let path = dir.path().join("f.vti");
            let opts = VtkOptions {
                scales,
                scalar,
                ..VtkOptions::default()
            };
            write_vti(&path, std::slice::from_ref(&f), 0, &opts).unwrap();
            let img = read_vti(&std::fs::read(&path).unwrap());
            assert_eq!(img.whole, vec![0, 5, 0, 4, 0, 3]);
            assert_eq!(img.extent, vec![0, 5, 0, 4, 0, 3]);
            assert_eq!(img.spacing, vec![0.25; 3]);
            assert_eq!(
                img.arrays["density"].kind,
                if scalar == Scalar::F32 {
                    "Float32"
                } else {
                    "Float64"
                }
            );
            check(&img, &f, scales, tol);
            assert_eq!(
                img.order,
                ["density", "velocity", "speed", "pressure", "solid"]
            );
            let unit = |name: &str| img.arrays[name].unit.as_deref();
            assert_eq!(unit("velocity"), Some("m/s"));
            assert_eq!(unit("speed"), Some("m/s"));
            assert_eq!(unit("pressure"), Some("Pa"));
            assert_eq!((unit("density"), unit("solid")), (None, None));
        }
    }

    /// A case with a temperature lattice writes T = t0 + θ on fluid nodes (0 on solid ones).
    #[test]
    fn the_temperature_array_is_the_reference_plus_theta() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = sample([5, 4, 3], 0);
        f.temperature = (0..f.rho.len()).map(|p| 0.01 * p as f64 - 0.2).collect();
        let opts = VtkOptions {
            arrays: vec![OutputField::Temperature, OutputField::Solid],
            scales: Scales {
                t0: 20.0,
                ..Scales::default()
            },
            scalar: Scalar::F64,
            ..VtkOptions::default()
        };
        let path = dir.path().join("t.vti");
        write_vti(&path, std::slice::from_ref(&f), 0, &opts).unwrap();
        let img = read_vti(&std::fs::read(&path).unwrap());
        assert_eq!(img.order, ["temperature", "solid"]);
        for p in 0..f.rho.len() {
            let want = if f.solid[p] {
                0.0
            } else {
                20.0 + f.temperature[p]
            };
            assert_eq!(img.arrays["temperature"].values[p], want, "node {p}");
        }
    }

    #[test]
    fn pieces_and_their_index_cover_the_domain_and_match_the_slabs() {
        let dir = tempfile::tempdir().unwrap();
        let slabs = [sample([4, 3, 2], 0), sample([4, 3, 3], 2)];
        let mut pieces = Vec::new();
        let opts = VtkOptions::default();
        for (k, s) in slabs.iter().enumerate() {
            let name = format!("f_p{k}.vti");
            write_vti(&dir.path().join(&name), &slabs, k, &opts).unwrap();
            pieces.push(Piece {
                size: s.size,
                origin: [0, 0, s.z0],
                source: name,
            });
        }
        write_pvti(&dir.path().join("f.pvti"), [4, 3, 5], &pieces, &opts).unwrap();
        let text = std::fs::read_to_string(dir.path().join("f.pvti")).unwrap();
        let mut r = Reader::from_str(&text);
        let mut sources = Vec::new();
        let mut arrays = Vec::new();
        loop {
            match r.read_event().unwrap() {
                Event::Eof => break,
                Event::Start(e) | Event::Empty(e) => {
                    let a = attrs(&e);
                    match e.name().as_ref() {
                        b"PImageData" => assert_eq!(a["WholeExtent"], "0 4 0 3 0 5"),
                        b"PDataArray" => arrays.push(a["Name"].clone()),
                        b"Piece" => sources.push((a["Extent"].clone(), a["Source"].clone())),
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        assert_eq!(
            arrays,
            ["density", "velocity", "speed", "pressure", "solid"]
        );
        // The index repeats the pieces' units (velocity, speed, pressure), which VTK's parallel
        // reader takes from it.
        assert_eq!(text.matches(r#"name="UNITS_LABEL""#).count(), 3, "{text}");
        assert_eq!(sources.len(), 2);
        let mut covered = 0;
        for ((ext, src), slab) in sources.iter().zip(&slabs) {
            let img = read_vti(&std::fs::read(dir.path().join(src)).unwrap());
            let e: Vec<usize> = nums(ext);
            assert_eq!(img.extent, e);
            assert_eq!(e[4], covered, "pieces leave a gap or overlap");
            covered = e[5];
            check(&img, slab, Scales::default(), 1e-6);
        }
        assert_eq!(covered, 5);
    }

    /// A solid-body rotation about z with angular velocity Ω (lattice units), a binary fraction so
    /// that every difference is exact.
    fn rotation(size: [usize; 3], z0: usize, w: f64) -> Fields {
        let mut f = Fields::zeros(size, z0);
        for z in 0..size[2] {
            for y in 0..size[1] {
                for x in 0..size[0] {
                    let p = f.idx(x, y, z);
                    f.rho[p] = 1.0;
                    f.ux[p] = -w * (y as f64 - 2.0);
                    f.uy[p] = w * (x as f64 - 2.0);
                    f.solid[p] = x == 2 && y == 2 && z + z0 == 2;
                }
            }
        }
        f
    }

    #[test]
    fn the_fields_named_are_the_arrays_written_with_derivatives_in_their_units() {
        let dir = tempfile::tempdir().unwrap();
        let w = 0.125;
        let f = rotation([6, 5, 4], 0, w);
        let arrays = vec![
            OutputField::Velocity,
            OutputField::Vorticity,
            OutputField::QCriterion,
        ];
        // dx = 0.5 m, dx/dt = 2 m/s: dt = 0.25 s, so a lattice rate is 4 per second.
        let si = Scales {
            spacing: 0.5,
            velocity: 2.0,
            pressure: 1.0,
            si: true,
            pressure_si: false,
            t0: 0.0,
        };
        for (scales, rate, units) in [
            (Scales::default(), 1.0, ["lattice units"; 3]),
            (si, 4.0, ["m/s", "1/s", "1/s^2"]),
        ] {
            let path = dir.path().join("f.vti");
            let opts = VtkOptions {
                arrays: arrays.clone(),
                scales,
                scalar: Scalar::F64,
                periodic: [false; 3],
            };
            write_vti(&path, std::slice::from_ref(&f), 0, &opts).unwrap();
            let img = read_vti(&std::fs::read(&path).unwrap());
            assert_eq!(img.order, ["velocity", "vorticity", "q_criterion"]);
            assert_eq!(img.arrays.len(), 3);
            for (name, unit) in img.order.iter().zip(units) {
                assert_eq!(img.arrays[name].unit.as_deref(), Some(unit), "{name}");
            }
            let omega = &img.arrays["vorticity"];
            let q = &img.arrays["q_criterion"];
            assert_eq!((omega.comps, omega.values.len()), (3, 3 * f.rho.len()));
            for p in 0..f.rho.len() {
                let (want_omega, want_q) = if f.solid[p] {
                    (0.0, 0.0)
                } else {
                    (2.0 * w * rate, w * w * rate * rate)
                };
                assert_eq!(omega.values[3 * p..3 * p + 3], [0.0, 0.0, want_omega]);
                assert_eq!(q.values[p], want_q);
            }
        }
        // The header says which arrays ParaView shows first, and names no array it does not hold.
        let text =
            String::from_utf8_lossy(&std::fs::read(dir.path().join("f.vti")).unwrap()).into_owned();
        assert!(text.contains(r#"<CellData Scalars="q_criterion" Vectors="velocity">"#));
    }

    /// Pieces read their neighbours' planes for the z-derivatives at their edges: every array of
    /// every piece equals the gathered file's values for its nodes, bit for bit, walled or periodic.
    #[test]
    fn pieces_hold_the_gathered_file_s_values_bit_for_bit() {
        let dir = tempfile::tempdir().unwrap();
        // A flow with curl and obstacles scattered through every slab.
        let slab = |z0: usize, nz: usize| {
            let mut f = sample([5, 4, nz], z0);
            for z in 0..nz {
                for y in 0..4 {
                    for x in 0..5 {
                        let p = f.idx(x, y, z);
                        let [x, y, gz] = [x as f64, y as f64, (z + z0) as f64];
                        f.ux[p] = 0.02 * (0.7 * gz + 0.3 * y).sin();
                        f.uy[p] = 0.01 * (0.5 * x * gz).cos();
                        f.uz[p] = 0.03 * (x - y + 0.4 * gz).sin();
                        f.solid[p] = ((x + 2.0 * y + 3.0 * gz) as usize).is_multiple_of(7);
                    }
                }
            }
            // Averages unlike the state, so that the mean arrays are told apart.
            let mut mean = f.clone();
            mean.ux.iter_mut().for_each(|u| *u *= 0.5);
            mean.rho.iter_mut().for_each(|r| *r += 1e-3);
            f.mean = Some(Box::new(mean));
            f
        };
        let whole = slab(0, 9);
        let slabs = [slab(0, 2), slab(2, 1), slab(3, 4), slab(7, 2)];
        for periodic in [[false; 3], [false, true, true]] {
            let opts = VtkOptions {
                arrays: OutputField::ALL.into(),
                periodic,
                ..VtkOptions::default()
            };
            let path = dir.path().join("whole.vti");
            write_vti(&path, std::slice::from_ref(&whole), 0, &opts).unwrap();
            let gathered = read_vti(&std::fs::read(&path).unwrap());
            let mut seen: HashMap<String, Vec<u64>> = HashMap::new();
            for k in 0..slabs.len() {
                let path = dir.path().join(format!("piece_{k}.vti"));
                write_vti(&path, &slabs, k, &opts).unwrap();
                let piece = read_vti(&std::fs::read(&path).unwrap());
                assert_eq!(piece.order, gathered.order);
                for (name, a) in piece.arrays {
                    let bits = a.values.iter().map(|v| v.to_bits());
                    seen.entry(name).or_default().extend(bits);
                }
            }
            for (name, a) in &gathered.arrays {
                let bits: Vec<u64> = a.values.iter().map(|v| v.to_bits()).collect();
                assert_eq!(seen[name], bits, "{name} {periodic:?}");
            }
            // The derivatives are not trivially zero.
            assert!(gathered.arrays["vorticity"]
                .values
                .iter()
                .any(|&v| v != 0.0));
        }
    }

    #[test]
    fn a_pvd_lists_each_output_with_its_time() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fields.pvd");
        write_pvd(&p, &[(0.0, "a.vti".into()), (12.5, "b&c.vti".into())]).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let mut r = Reader::from_str(&text);
        let mut sets = Vec::new();
        loop {
            match r.read_event().unwrap() {
                Event::Eof => break,
                Event::Empty(e) if e.name().as_ref() == b"DataSet" => {
                    let a = attrs(&e);
                    sets.push((a["timestep"].parse::<f64>().unwrap(), a["file"].clone()));
                }
                _ => {}
            }
        }
        assert_eq!(sets, vec![(0.0, "a.vti".into()), (12.5, "b&c.vti".into())]);
    }
}
