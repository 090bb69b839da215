//! The live view's picture: one plane of the running flow ([`PlaneFields`]) as a field chosen by
//! name, colour-mapped into a small PNG of one pixel per node, with the range and the colours of
//! its colour bar, for a browser to scale up and label.

use serde::{Deserialize, Serialize};
use thelma_core::{plane_axes, PlaneFields};

use crate::vtk::Scales;

/// Axis names, indexed by axis.
const AXES: [&str; 3] = ["x", "y", "z"];

/// A field the live view can draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LiveField {
    /// |u|.
    Speed,
    Ux,
    Uy,
    Uz,
    /// p − p₀ = c_s² (ρ − 1), in the run's pressure unit.
    Pressure,
    /// T (θ + T₀), where the case has a temperature lattice.
    Temperature,
    /// The vorticity's component normal to the plane, from the plane's own velocity: what a
    /// plane can show without its neighbours.
    Vorticity,
}

impl LiveField {
    pub const ALL: [LiveField; 7] = [
        LiveField::Speed,
        LiveField::Ux,
        LiveField::Uy,
        LiveField::Uz,
        LiveField::Pressure,
        LiveField::Temperature,
        LiveField::Vorticity,
    ];

    /// The name the page and the case use.
    pub fn name(self) -> &'static str {
        match self {
            LiveField::Speed => "speed",
            LiveField::Ux => "ux",
            LiveField::Uy => "uy",
            LiveField::Uz => "uz",
            LiveField::Pressure => "pressure",
            LiveField::Temperature => "temperature",
            LiveField::Vorticity => "vorticity",
        }
    }

    pub fn parse(name: &str) -> Option<LiveField> {
        LiveField::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The quantity's label on a plane normal to `axis`.
    pub fn label(self, axis: usize) -> String {
        match self {
            LiveField::Speed => "|u|".into(),
            LiveField::Ux => "u_x".into(),
            LiveField::Uy => "u_y".into(),
            LiveField::Uz => "u_z".into(),
            LiveField::Pressure => "p − p₀".into(),
            LiveField::Temperature => "T".into(),
            LiveField::Vorticity => format!("ω_{}", AXES[axis.min(2)]),
        }
    }

    /// The unit under `scales`.
    pub fn unit(self, scales: &Scales) -> &'static str {
        match (self, scales.si) {
            (LiveField::Temperature, _) => {
                if scales.si {
                    "°C"
                } else {
                    "lattice"
                }
            }
            (LiveField::Pressure, _) if scales.pressure_si => "Pa",
            (LiveField::Vorticity, true) => "1/s",
            (LiveField::Pressure | LiveField::Vorticity, _) => "lattice",
            (_, true) => "m/s",
            (_, false) => "lattice",
        }
    }

    /// Whether values are signed around zero (a diverging colour map, symmetric range).
    fn signed(self) -> bool {
        !matches!(self, LiveField::Speed | LiveField::Temperature)
    }
}

/// A drawn plane: a PNG of `width × height` pixels, row 0 at the top (the highest coordinate of
/// the vertical axis), the range its colours span and the colour bar's colours from `min` to
/// `max`.
#[derive(Clone, Debug, PartialEq)]
pub struct Picture {
    pub width: usize,
    pub height: usize,
    /// The horizontal and vertical axes' names.
    pub h: &'static str,
    pub v: &'static str,
    pub min: f64,
    pub max: f64,
    pub label: String,
    pub unit: &'static str,
    /// `#rrggbb`, evenly spaced from `min` to `max`.
    pub colors: Vec<String>,
    pub png: Vec<u8>,
}

/// The colour of solid nodes.
const SOLID: [u8; 3] = [128, 128, 128];
/// Stops of the colour bar.
const STOPS: usize = 16;

/// The values of `field` on `plane`, node by node (solid nodes `None`), in the units of `scales`;
/// `None` when the plane lacks the field (a temperature without a temperature lattice).
pub fn field_values(plane: &PlaneFields, field: LiveField, scales: &Scales) -> Option<Vec<f64>> {
    let n = plane.rho.len();
    let vel = |v: &[f32]| -> Vec<f64> { v.iter().map(|&x| x as f64 * scales.velocity).collect() };
    let values = match field {
        LiveField::Speed => (0..n)
            .map(|k| {
                let [x, y, z] = [plane.ux[k], plane.uy[k], plane.uz[k]].map(|v| v as f64);
                (x * x + y * y + z * z).sqrt() * scales.velocity
            })
            .collect(),
        LiveField::Ux => vel(&plane.ux),
        LiveField::Uy => vel(&plane.uy),
        LiveField::Uz => vel(&plane.uz),
        LiveField::Pressure => plane
            .rho
            .iter()
            .map(|&r| (r as f64 - 1.0) / 3.0 * scales.pressure)
            .collect(),
        LiveField::Temperature => {
            if plane.temperature.len() != n {
                return None;
            }
            plane
                .temperature
                .iter()
                .map(|&t| t as f64 + scales.t0)
                .collect()
        }
        LiveField::Vorticity => normal_vorticity(plane, scales),
    };
    Some(values)
}

/// The vorticity's component normal to the plane, `∂u_b/∂a − ∂u_a/∂b` for a plane of axes (a, b)
/// in right-handed order, by central differences between fluid nodes (one-sided beside a wall or
/// the plane's edge, zero where a node has no fluid neighbour along an axis).
fn normal_vorticity(plane: &PlaneFields, scales: &Scales) -> Vec<f64> {
    let [w, h] = plane.size;
    let [a, b] = plane_axes(plane.axis);
    let comp = |axis: usize| match axis {
        0 => &plane.ux,
        1 => &plane.uy,
        _ => &plane.uz,
    };
    let (ua, ub) = (comp(a), comp(b));
    let fluid = |i: usize, j: usize| !plane.solid[j * w + i];
    // The derivative of `u` along the plane's first (`along_a`) or second axis at (i, j).
    let diff = |u: &[f32], i: usize, j: usize, along_a: bool| -> f64 {
        let (len, at) = if along_a { (w, i) } else { (h, j) };
        let node = |k: usize| if along_a { (k, j) } else { (i, k) };
        let ok = |k: usize| {
            let (x, y) = node(k);
            fluid(x, y)
        };
        let val = |k: usize| {
            let (x, y) = node(k);
            u[y * w + x] as f64
        };
        let lo = at > 0 && ok(at - 1);
        let hi = at + 1 < len && ok(at + 1);
        match (lo, hi) {
            (true, true) => (val(at + 1) - val(at - 1)) / 2.0,
            (false, true) => val(at + 1) - val(at),
            (true, false) => val(at) - val(at - 1),
            (false, false) => 0.0,
        }
    };
    // (a, b) is right-handed about the normal for x (y, z) and z (x, y); for y, (x, z) is not.
    let sign = if plane.axis == 1 { -1.0 } else { 1.0 };
    let per_second = scales.velocity / scales.spacing;
    (0..w * h)
        .map(|k| {
            let (i, j) = (k % w, k / w);
            if !fluid(i, j) {
                return 0.0;
            }
            sign * (diff(ub, i, j, true) - diff(ua, i, j, false)) * per_second
        })
        .collect()
}

/// Draws `field` on `plane`: `None` when the plane is empty or lacks the field.
pub fn picture(plane: &PlaneFields, field: LiveField, scales: &Scales) -> Option<Picture> {
    let [w, h] = plane.size;
    if w == 0 || h == 0 || plane.rho.len() != w * h {
        return None;
    }
    let values = field_values(plane, field, scales)?;
    let fluid = || {
        values
            .iter()
            .zip(&plane.solid)
            .filter(|(v, s)| !**s && v.is_finite())
            .map(|(v, _)| *v)
    };
    let (mut lo, mut hi) = fluid().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() {
        (lo, hi) = (0.0, 0.0);
    }
    if field.signed() {
        let m = lo.abs().max(hi.abs());
        (lo, hi) = (-m, m);
    } else if field == LiveField::Speed {
        lo = 0.0;
    }
    let span = hi - lo;
    let colour = |t: f64| -> [u8; 3] {
        let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
        let c = match field {
            LiveField::Speed => colorous::VIRIDIS.eval_continuous(t),
            LiveField::Temperature => colorous::INFERNO.eval_continuous(t),
            // Blue below zero, red above.
            _ => colorous::RED_BLUE.eval_continuous(1.0 - t),
        };
        [c.r, c.g, c.b]
    };
    let mut rgb = Vec::with_capacity(3 * w * h);
    for row in (0..h).rev() {
        for i in 0..w {
            let k = row * w + i;
            let px = if plane.solid[k] {
                SOLID
            } else if span > 0.0 {
                colour((values[k] - lo) / span)
            } else {
                colour(if field.signed() { 0.5 } else { 0.0 })
            };
            rgb.extend_from_slice(&px);
        }
    }
    let [ha, va] = plane_axes(plane.axis);
    Some(Picture {
        width: w,
        height: h,
        h: AXES[ha],
        v: AXES[va],
        min: lo,
        max: hi,
        label: field.label(plane.axis),
        unit: field.unit(scales),
        colors: (0..STOPS)
            .map(|s| {
                let [r, g, b] = colour(s as f64 / (STOPS - 1) as f64);
                format!("#{r:02x}{g:02x}{b:02x}")
            })
            .collect(),
        png: encode_png(&rgb, w, h),
    })
}

/// An RGB image as PNG, compressed for speed (a frame every fraction of a second).
fn encode_png(rgb: &[u8], w: usize, h: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w as u32, h as u32);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Fast);
    // Writing into memory fails only on a broken invariant (sizes are the image's own).
    let mut writer = enc.write_header().expect("a PNG header in memory");
    writer
        .write_image_data(rgb)
        .expect("an image of its own size");
    writer.finish().expect("a PNG in memory");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plane normal to z of `w × h` nodes with u = (−y, x, 0)·ω/2 about its centre: rigid
    /// rotation at rate ω/2, whose vorticity ω_z is ω everywhere.
    fn rotating(w: usize, h: usize, omega: f64) -> PlaneFields {
        let mut p = PlaneFields::empty(2);
        p.size = [w, h];
        for j in 0..h {
            for i in 0..w {
                let (x, y) = (i as f64 - w as f64 / 2.0, j as f64 - h as f64 / 2.0);
                p.rho.push(1.0 + 0.003 * i as f32);
                p.ux.push((-y * omega / 2.0) as f32);
                p.uy.push((x * omega / 2.0) as f32);
                p.uz.push(0.0);
                p.solid.push(false);
            }
        }
        p
    }

    #[test]
    fn vorticity_of_rigid_rotation_is_its_rate_and_signs_follow_the_axes() {
        let p = rotating(12, 9, 0.01);
        let w = field_values(&p, LiveField::Vorticity, &Scales::default()).unwrap();
        for v in &w {
            assert!((v - 0.01).abs() < 1e-7, "{v}");
        }
        // Rigid rotation about +y at ω/2 seen on a y-plane (axes x, z): u = (z, 0, −x)·ω/2, whose
        // right-handed ω_y is +ω.
        let mut q = rotating(12, 9, 0.01);
        q.axis = 1;
        q.ux = (0..108)
            .map(|k| ((k / 12) as f64 - 4.5) as f32 * 0.005)
            .collect();
        q.uy = vec![0.0; 108];
        q.uz = (0..108)
            .map(|k| -((k % 12) as f64 - 6.0) as f32 * 0.005)
            .collect();
        let w = field_values(&q, LiveField::Vorticity, &Scales::default()).unwrap();
        for v in &w {
            assert!((v - 0.01).abs() < 1e-7, "{v}");
        }
    }

    #[test]
    fn picture_is_a_png_of_the_plane_top_row_first_with_a_range_and_colours() {
        let mut p = rotating(10, 6, 0.02);
        p.solid[0] = true;
        let s = Scales {
            velocity: 2.0,
            pressure: 3.0,
            si: true,
            pressure_si: true,
            ..Scales::default()
        };
        let pic = picture(&p, LiveField::Ux, &s).unwrap();
        assert_eq!((pic.width, pic.height, pic.h, pic.v), (10, 6, "x", "y"));
        assert_eq!((pic.unit, pic.label.as_str()), ("m/s", "u_x"));
        // Signed: a symmetric range, the largest |u_x| in m/s.
        let top = 3.0 * 0.01 * 2.0;
        assert!((pic.max - top).abs() < 1e-6 && (pic.min + pic.max).abs() < 1e-12);
        assert_eq!(pic.colors.len(), STOPS);
        let d = png::Decoder::new(std::io::Cursor::new(&pic.png));
        let mut r = d.read_info().unwrap();
        let mut buf = vec![0; r.output_buffer_size()];
        let info = r.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (10, 6));
        // The solid node (x 0, y 0) is the bottom-left pixel; the top-left pixel (y 5) has
        // u_x = −(5 − 3)·0.01 < 0: blue.
        let px = |row: usize, col: usize| &buf[3 * (row * 10 + col)..3 * (row * 10 + col) + 3];
        assert_eq!(px(5, 0), &SOLID);
        let tl = px(0, 0);
        assert!(tl[2] > tl[0], "{tl:?}");
        // Pressure in Pa, temperature absent without a temperature lattice.
        let pr = picture(&p, LiveField::Pressure, &s).unwrap();
        assert_eq!(pr.unit, "Pa");
        assert!((pr.max - 0.027 / 3.0 * 3.0).abs() < 1e-6, "{}", pr.max);
        assert!(picture(&p, LiveField::Temperature, &s).is_none());
        assert!(picture(&PlaneFields::empty(2), LiveField::Speed, &s).is_none());
    }
}
