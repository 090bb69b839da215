//! PNG images of a plane through the domain: the speed |u| colour-mapped with viridis (perceptually
//! uniform and readable in grey and by colour-blind readers), solid nodes in grey, with axes, a title
//! and a labelled colour bar.

use std::path::Path;

use plotters::prelude::*;
use thelma_core::{num, num_sig, Fields, SlicePlane};

use crate::plot::{register_font, write_png_rgb, DrawError};

/// Axis names, indexed by axis.
const AXES: [&str; 3] = ["x", "y", "z"];

/// The speed on one plane: `width × height` values, row-major, row 0 at the lowest coordinate of the
/// vertical axis.
#[derive(Clone, Debug, PartialEq)]
pub struct Slice {
    /// The in-plane axes: horizontal, vertical (x before y before z).
    pub axes: [usize; 2],
    /// The normal axis and the plane's node index along it.
    pub normal: usize,
    pub index: usize,
    pub width: usize,
    pub height: usize,
    /// |u| in lattice units (0 at solid nodes).
    pub speed: Vec<f64>,
    pub solid: Vec<bool>,
}

impl Slice {
    /// Cuts `plane` out of the parts of the domain (slabs in z order, or the boxes of a partition
    /// that cuts x and y too, in any order; one part holding the whole domain works too).
    pub fn cut(slabs: &[Fields], plane: SlicePlane) -> Self {
        let lo = |s: &Fields| [s.xy0[0], s.xy0[1], s.z0];
        let size: [usize; 3] = std::array::from_fn(|a| {
            slabs
                .iter()
                .map(|s| lo(s)[a] + s.size[a])
                .max()
                .unwrap_or(0)
        });
        let normal = plane.axis.min(2);
        let index = plane
            .resolved_index(size)
            .min(size[normal].saturating_sub(1));
        let axes = match normal {
            0 => [1, 2],
            1 => [0, 2],
            _ => [0, 1],
        };
        let (width, height) = (size[axes[0]], size[axes[1]]);
        let mut speed = vec![0.0; width * height];
        let mut solid = vec![false; width * height];
        for s in slabs {
            let [x0, y0, z0] = lo(s);
            for z in 0..s.size[2] {
                let gz = z0 + z;
                if normal == 2 && gz != index {
                    continue;
                }
                for y in 0..s.size[1] {
                    let gy = y0 + y;
                    if normal == 1 && gy != index {
                        continue;
                    }
                    for x in 0..s.size[0] {
                        let gx = x0 + x;
                        if normal == 0 && gx != index {
                            continue;
                        }
                        let g = [gx, gy, gz];
                        let q = g[axes[1]] * width + g[axes[0]];
                        let p = s.idx(x, y, z);
                        solid[q] = s.solid[p];
                        speed[q] = if s.solid[p] {
                            0.0
                        } else {
                            (s.ux[p].powi(2) + s.uy[p].powi(2) + s.uz[p].powi(2)).sqrt()
                        };
                    }
                }
            }
        }
        Self {
            axes,
            normal,
            index,
            width,
            height,
            speed,
            solid,
        }
    }

    /// The largest speed over fluid nodes (0 when all are solid or at rest).
    pub fn max(&self) -> f64 {
        self.speed
            .iter()
            .zip(&self.solid)
            .filter(|(v, s)| !**s && v.is_finite())
            .map(|(v, _)| *v)
            .fold(0.0, f64::max)
    }

    /// A caption naming the plane, e.g. `plane y = 24`.
    pub fn plane_name(&self) -> String {
        format!("plane {} = {}", AXES[self.normal], self.index)
    }
}

/// The viridis colour of `t` in [0, 1] (clamped; NaN maps to the low end).
pub fn viridis(t: f64) -> RGBColor {
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
    let c = colorous::VIRIDIS.eval_continuous(t);
    RGBColor(c.r, c.g, c.b)
}

/// The colour of solid nodes.
pub const SOLID: RGBColor = RGBColor(128, 128, 128);

/// How the image is labelled: title, the colour bar's quantity and unit, the spacing and unit of the
/// axes, and the factor from lattice to displayed velocity.
#[derive(Clone, Debug, PartialEq)]
pub struct SliceStyle {
    pub title: String,
    pub spacing: f64,
    pub length_unit: String,
    pub velocity: f64,
    pub velocity_unit: String,
}

/// Draws `slice` as a PNG at `path` (written atomically): the map, longest side about 560 pixels,
/// with its axes, and a colour bar from 0 to the largest speed.
pub fn write_slice_png(path: &Path, slice: &Slice, style: &SliceStyle) -> Result<(), DrawError> {
    register_font();
    let (w, h) = (slice.width.max(1), slice.height.max(1));
    let cell = (560 / w.max(h)).max(1) as u32;
    let (map_w, map_h) = (cell * w as u32, cell * h as u32);
    // Margins around the map for the caption, tick labels and axis titles; the colour bar on the right.
    let (left, right, top, bottom, bar) = (75u32, 20u32, 50u32, 55u32, 130u32);
    let size = (
        10 + left + map_w + right + bar,
        (top + map_h + bottom).max(260),
    );
    let vmax = slice.max() * style.velocity;
    let scale = if vmax > 0.0 { 1.0 / vmax } else { 0.0 };
    let err = |e: &dyn std::fmt::Display| DrawError::draw("slice image", e);
    // Scales out of range (units whose dt underflowed, say) would give axes plotters never finishes
    // laying ticks on: refuse them instead.
    if !(style.velocity.is_finite() && style.velocity > 0.0 && vmax.is_finite()) {
        return Err(err(&format!(
            "a velocity scale of {} gives a colour bar up to {}",
            num(style.velocity),
            num(vmax)
        )));
    }
    let (lx, ly) = (w as f64 * style.spacing, h as f64 * style.spacing);
    for (lo, hi) in [
        (0.0, lx),
        (0.0, ly),
        (0.0, if vmax > 0.0 { vmax } else { 1.0 }),
    ] {
        crate::plot::check_range(lo, hi).map_err(|e| err(&e))?;
    }
    let mut pixels = vec![0u8; size.0 as usize * size.1 as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let (map_area, bar_area) = root.split_horizontally(10 + left + map_w + right);
        let mut chart = ChartBuilder::on(&map_area)
            .caption(&style.title, ("sans-serif", 18))
            .margin_right(right)
            .margin_left(10)
            .margin_top(8)
            .x_label_area_size(bottom - 8)
            .y_label_area_size(left)
            .build_cartesian_2d(0.0..lx, 0.0..ly)
            .map_err(|e| err(&e))?;
        let unit = if style.length_unit.is_empty() {
            String::new()
        } else {
            format!(" ({})", style.length_unit)
        };
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc(format!("{}{unit}", AXES[slice.axes[0]]))
            .y_desc(format!("{}{unit}", AXES[slice.axes[1]]))
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(|e| err(&e))?;
        let d = style.spacing;
        chart
            .draw_series((0..h).flat_map(|j| {
                (0..w).map(move |i| {
                    let q = j * w + i;
                    let colour = if slice.solid[q] {
                        SOLID
                    } else {
                        viridis(slice.speed[q] * style.velocity * scale)
                    };
                    Rectangle::new(
                        [
                            (i as f64 * d, j as f64 * d),
                            ((i + 1) as f64 * d, (j + 1) as f64 * d),
                        ],
                        colour.filled(),
                    )
                })
            }))
            .map_err(|e| err(&e))?;

        // The colour bar: 256 bands from 0 to the largest speed, ticks on its right.
        let top_v = if vmax > 0.0 { vmax } else { 1.0 };
        let mut cb = ChartBuilder::on(&bar_area)
            .margin_top(top)
            .margin_bottom(bottom)
            .margin_right(10)
            .y_label_area_size(0)
            .right_y_label_area_size(75)
            .caption(
                format!(
                    "|u|{}",
                    if style.velocity_unit.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", style.velocity_unit)
                    }
                ),
                ("sans-serif", 14),
            )
            .build_cartesian_2d(0.0..1.0, 0.0..top_v)
            .map_err(|e| err(&e))?
            .set_secondary_coord(0.0..1.0, 0.0..top_v);
        cb.draw_series((0..256).map(|k| {
            let (a, b) = (k as f64 / 256.0, (k + 1) as f64 / 256.0);
            Rectangle::new(
                [(0.0, a * top_v), (1.0, b * top_v)],
                viridis((a + b) / 2.0).filled(),
            )
        }))
        .map_err(|e| err(&e))?;
        cb.configure_secondary_axes()
            .label_style(("sans-serif", 13))
            .y_labels(6)
            .y_label_formatter(&|v| tick(*v, top_v))
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    write_png_rgb(path, size, &pixels)
}

/// A colour-bar tick: plain decimals with two significant digits of the bar's top in the usual
/// range, scientific notation outside it (on every tick of the bar, so that they read alike).
fn tick(v: f64, top: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if (1e-3..1e4).contains(&top) {
        let decimals = (1 - top.log10().floor() as i32).max(0) as usize;
        format!("{v:.decimals$}")
    } else {
        num_sig(v, 3).scientific().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(size: [usize; 3], z0: usize) -> Fields {
        let mut f = Fields::zeros(size, z0);
        for z in 0..size[2] {
            for y in 0..size[1] {
                for x in 0..size[0] {
                    let p = f.idx(x, y, z);
                    // A code of the global position: 100 z + 10 y + x.
                    f.ux[p] = (100 * (z + z0) + 10 * y + x) as f64;
                }
            }
        }
        f
    }

    #[test]
    fn a_cut_through_slabs_equals_the_cut_through_the_whole_domain() {
        let slabs = [field([4, 3, 2], 0), field([4, 3, 3], 2)];
        let whole = Fields::concat(slabs.to_vec());
        for (axis, index) in [(0, 2), (1, 1), (2, 3), (2, 0)] {
            let plane = SlicePlane {
                axis,
                index: Some(index),
            };
            let a = Slice::cut(&slabs, plane);
            let b = Slice::cut(std::slice::from_ref(&whole), plane);
            assert_eq!(a, b);
            // Every value belongs to the plane, at its in-plane position.
            for j in 0..a.height {
                for i in 0..a.width {
                    let mut g = [0usize; 3];
                    g[a.axes[0]] = i;
                    g[a.axes[1]] = j;
                    g[axis] = index;
                    let code = (100 * g[2] + 10 * g[1] + g[0]) as f64;
                    assert_eq!(a.speed[j * a.width + i], code);
                }
            }
        }
        let mid = Slice::cut(&slabs, SlicePlane::default());
        assert_eq!((mid.normal, mid.index, mid.width, mid.height), (1, 1, 4, 5));
    }

    /// The boxes of a partition that cuts x and y, given in any order, cut as the whole domain.
    #[test]
    fn a_cut_through_boxes_equals_the_cut_through_the_whole_domain() {
        let boxed = |size: [usize; 3], origin: [usize; 3]| {
            let mut f = Fields::zeros(size, origin[2]);
            f.xy0 = [origin[0], origin[1]];
            for z in 0..size[2] {
                for y in 0..size[1] {
                    for x in 0..size[0] {
                        let p = f.idx(x, y, z);
                        let g = [origin[0] + x, origin[1] + y, origin[2] + z];
                        f.ux[p] = (100 * g[2] + 10 * g[1] + g[0]) as f64;
                    }
                }
            }
            f
        };
        let whole = boxed([5, 4, 3], [0; 3]);
        let parts = &[
            boxed([2, 1, 3], [0, 0, 0]),
            boxed([3, 4, 2], [2, 0, 0]),
            boxed([2, 3, 3], [0, 1, 0]),
            boxed([3, 4, 1], [2, 0, 2]),
        ];
        for (axis, index) in [(0, 1), (0, 3), (1, 0), (1, 2), (2, 0), (2, 2)] {
            let plane = SlicePlane {
                axis,
                index: Some(index),
            };
            assert_eq!(
                Slice::cut(parts, plane),
                Slice::cut(std::slice::from_ref(&whole), plane),
                "{axis} {index}"
            );
        }
    }

    #[test]
    fn scales_out_of_range_are_an_error_not_an_endless_plot() {
        let f = field([4, 3, 2], 0);
        let slice = Slice::cut(std::slice::from_ref(&f), SlicePlane::default());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("slice.png");
        for (spacing, velocity) in [
            (f64::INFINITY, 1.0),
            (1.0, f64::INFINITY),
            (1.0, f64::NAN),
            (0.0, 1.0),
            (1.0, 1e308),
        ] {
            let style = SliceStyle {
                title: "t".into(),
                spacing,
                length_unit: "m".into(),
                velocity,
                velocity_unit: "m/s".into(),
            };
            let e = write_slice_png(&path, &slice, &style).unwrap_err();
            assert!(e.to_string().contains("slice image"), "{e}");
        }
        assert!(!path.exists());
    }

    #[test]
    fn ticks_are_plain_in_the_usual_range() {
        assert_eq!(tick(0.0, 0.07), "0");
        assert_eq!(tick(0.06, 0.07), "0.060");
        assert_eq!(tick(1.5, 2.0), "1.5");
        assert_eq!(tick(150.0, 200.0), "150");
        assert_eq!(tick(2e-5, 3e-5), "2.0e-05");
        assert_eq!(tick(2.5e6, 3e6), "2.5e+06");
    }

    fn decode(path: &Path) -> (u32, u32, Vec<u8>) {
        let decoder = png::Decoder::new(std::fs::File::open(path).unwrap());
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!(info.color_type, png::ColorType::Rgb);
        (info.width, info.height, buf)
    }

    #[test]
    fn the_image_maps_slow_to_dark_and_fast_to_bright_with_solids_grey() {
        // Left half at rest, right half at speed 0.1, a solid block in the middle of the left half.
        let (nx, ny, nz) = (20, 3, 10);
        let mut f = Fields::zeros([nx, ny, nz], 0);
        for z in 0..nz {
            for y in 0..ny {
                for x in 0..nx {
                    let p = f.idx(x, y, z);
                    if x >= nx / 2 {
                        f.uz[p] = 0.1;
                    }
                    f.solid[p] = (3..6).contains(&x) && (3..6).contains(&z);
                }
            }
        }
        let slice = Slice::cut(std::slice::from_ref(&f), SlicePlane::default());
        assert!((slice.max() - 0.1).abs() < 1e-15);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("slice.png");
        let style = SliceStyle {
            title: "test".into(),
            spacing: 1.0,
            length_unit: String::new(),
            velocity: 1.0,
            velocity_unit: String::new(),
        };
        write_slice_png(&path, &slice, &style).unwrap();
        let (w, h, px) = decode(&path);
        assert!(w > 560 && h >= 260, "{w}x{h}");
        let at = |c: RGBColor| -> Vec<u32> {
            (0..(w * h))
                .filter(|&k| {
                    let k = 3 * k as usize;
                    px[k] == c.0 && px[k + 1] == c.1 && px[k + 2] == c.2
                })
                .map(|k| k % w)
                .collect()
        };
        let mean = |v: &[u32]| v.iter().map(|&x| x as f64).sum::<f64>() / v.len().max(1) as f64;
        // The map ends where the colour bar's area begins.
        let map_right = w - 130;
        let dark: Vec<u32> = at(viridis(0.0))
            .into_iter()
            .filter(|&x| x < map_right)
            .collect();
        let bright: Vec<u32> = at(viridis(1.0))
            .into_iter()
            .filter(|&x| x < map_right)
            .collect();
        let grey = at(SOLID);
        assert!(
            dark.len() > 5000 && bright.len() > 5000,
            "{} {}",
            dark.len(),
            bright.len()
        );
        assert!(mean(&dark) < mean(&bright));
        assert!(grey.len() > 1000 && mean(&grey) < mean(&dark));
        // The colour bar holds the middle of the map in its own column.
        let mid: Vec<u32> = at(viridis(128.0 / 256.0 + 0.5 / 256.0));
        assert!(mid.iter().any(|&x| x >= map_right), "no colour bar");
    }
}
