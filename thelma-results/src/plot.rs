//! PNG line plots (validation profiles, benchmark scaling) drawn with plotters, with an embedded
//! DejaVu Sans font so that plots render identically on machines without fonts installed.

use std::path::Path;
use std::sync::Once;

use plotters::coord::ranged1d::{
    AsRangedCoord, DefaultFormatting, KeyPointHint, Ranged, ValueFormatter,
};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

static FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");

pub(crate) fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The embedded font is a valid TrueType file; registration cannot fail for it.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// How a series is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// A line through the points.
    Line,
    /// A marker at each point (reference data).
    Points,
    /// A line through the points with a marker at each (few measured points).
    LineAndPoints,
}

/// What the x values are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XAxis {
    /// Real numbers: plotters chooses the ticks.
    Real,
    /// Counts (devices, say): ticks and labels at whole numbers only.
    Count,
}

/// A real axis ticked at given values only (bold lines and labels, no light grid), labelled
/// through the mesh's formatter: what plotters' own `WithKeyPoints` does, but drawable, since that
/// one keeps the f64 axis's formatting, which the mesh cannot use on it.
struct TickedAxis {
    inner: RangedCoordf64,
    ticks: Vec<f64>,
}

impl Ranged for TickedAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }
}

/// Whole-number ticks within `lo..=hi`, at most about ten: every count, or every 2nd, 5th, 10th,
/// 20th, … one.
fn count_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (first, last) = (lo.ceil(), hi.floor());
    if !(first.is_finite() && last.is_finite()) || first > last {
        return Vec::new();
    }
    let span = last - first;
    let mut step = 1.0;
    for k in 0.. {
        let candidate = [1.0, 2.0, 5.0][k % 3] * 10f64.powi((k / 3) as i32);
        step = candidate;
        if span / candidate <= 10.0 {
            break;
        }
    }
    let start = (first / step).ceil() * step;
    let n = ((last - start) / step).floor() as usize;
    (0..=n).map(|i| start + i as f64 * step).collect()
}

/// One named series of (x, y) points.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub mark: Mark,
}

/// Range of `v` with a 5 % margin (a unit range around a constant, `0..1` for no points). A range
/// that is not finite is an error: plotters would search forever for tick marks in it.
fn padded(v: impl Iterator<Item = f64>) -> Result<(f64, f64), DrawError> {
    let (lo, hi) = v.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    if lo == f64::INFINITY && hi == f64::NEG_INFINITY {
        return Ok((0.0, 1.0));
    }
    // A spread below the values' precision counts as a constant, padded in proportion to it.
    let scale = lo.abs().max(hi.abs());
    let pad = if hi - lo > scale * 1e-9 {
        0.05 * (hi - lo)
    } else {
        0.5 * scale.max(1.0)
    };
    let (a, b) = (lo - pad, hi + pad);
    check_range(a, b)?;
    Ok((a, b))
}

/// Why a plot or an image could not be drawn or written.
#[derive(Debug, thiserror::Error)]
pub enum DrawError {
    #[error("{what}: {message}")]
    Draw { what: &'static str, message: String },
    #[error("plot: cannot draw an axis from {} to {} (not a finite, usable range)", thelma_core::num_exact(*.lo), thelma_core::num_exact(*.hi))]
    Range { lo: f64, hi: f64 },
    #[error("png: {0}")]
    Png(#[from] png::EncodingError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl DrawError {
    pub(crate) fn draw(what: &'static str, e: &dyn std::fmt::Display) -> Self {
        DrawError::Draw {
            what,
            message: e.to_string(),
        }
    }
}

/// Refuses an axis range plotters cannot lay ticks on: not finite, empty, or narrower than about a
/// million representable steps of its own ends (its tick search then never ends).
pub(crate) fn check_range(lo: f64, hi: f64) -> Result<(), DrawError> {
    let span = hi - lo;
    let scale = lo.abs().max(hi.abs());
    if !(lo.is_finite() && hi.is_finite() && span.is_finite() && span > 0.0)
        || span < scale * 1e-9
        || span < f64::MIN_POSITIVE * 1e6
    {
        return Err(DrawError::Range { lo, hi });
    }
    Ok(())
}

/// Draws `series` into a PNG of `size` pixels at `path` (written atomically), with x values of the
/// kind `x_axis` says.
pub fn line_plot(
    path: &Path,
    size: (u32, u32),
    title: &str,
    x_label: &str,
    y_label: &str,
    x_axis: XAxis,
    series: &[Series],
) -> Result<(), DrawError> {
    // Throughputs rise with the device count, so the upper left is where the plot is empty.
    let layout = Layout {
        colour: &|k| Palette99::pick(k).to_rgba(),
        legend: SeriesLabelPosition::UpperLeft,
        x_axis,
    };
    draw_lines(path, size, [title, x_label, y_label], series, &layout)
}

/// The choices [`line_plot`] makes for its callers: each series' colour, the legend's place and
/// the kind of x axis.
struct Layout<'a> {
    colour: &'a dyn Fn(usize) -> RGBAColor,
    legend: SeriesLabelPosition,
    x_axis: XAxis,
}

fn draw_lines(
    path: &Path,
    size: (u32, u32),
    texts: [&str; 3],
    series: &[Series],
    layout: &Layout,
) -> Result<(), DrawError> {
    let (xr, yr) = (
        padded(series.iter().flat_map(|s| s.points.iter().map(|p| p.0)))?,
        padded(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)))?,
    );
    match layout.x_axis {
        XAxis::Real => draw_on(path, size, texts, series, layout, xr.0..xr.1, yr, None),
        XAxis::Count => {
            // Markers at the first and last count stay clear of the frame.
            let (lo, hi) = (xr.0.min(xr.0.ceil() - 0.3), xr.1.max(xr.1.floor() + 0.3));
            let x = TickedAxis {
                inner: (lo..hi).into(),
                ticks: count_ticks(lo, hi),
            };
            let label = |x: &f64| format!("{x:.0}");
            draw_on(path, size, texts, series, layout, x, yr, Some(&label))
        }
    }
}

/// Draws on an x axis `x` (plain, or with the ticks chosen here), its labels formatted by
/// `x_format` where given.
#[allow(clippy::too_many_arguments)]
fn draw_on<X>(
    path: &Path,
    size: (u32, u32),
    [title, x_label, y_label]: [&str; 3],
    series: &[Series],
    layout: &Layout,
    x: X,
    yr: (f64, f64),
    x_format: Option<&dyn Fn(&f64) -> String>,
) -> Result<(), DrawError>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    register_font();
    let mut pixels = vec![0u8; size.0 as usize * size.1 as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| DrawError::draw("plot", &e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x, yr.0..yr.1)
            .map_err(|e| DrawError::draw("plot", &e))?;
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(x_label)
            .y_desc(y_label)
            .label_style(("sans-serif", 14));
        if let Some(f) = x_format {
            mesh.x_label_formatter(f);
        }
        mesh.draw().map_err(|e| DrawError::draw("plot", &e))?;
        for (k, s) in series.iter().enumerate() {
            let colour = (layout.colour)(k);
            match s.mark {
                Mark::Line => chart
                    .draw_series(LineSeries::new(
                        s.points.iter().copied(),
                        colour.stroke_width(2),
                    ))
                    .map_err(|e| DrawError::draw("plot", &e))?
                    .label(s.label.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                    }),
                Mark::Points => chart
                    .draw_series(s.points.iter().map(|&p| Circle::new(p, 4, colour.filled())))
                    .map_err(|e| DrawError::draw("plot", &e))?
                    .label(s.label.clone())
                    .legend(move |(x, y)| Circle::new((x + 10, y), 4, colour.filled())),
                Mark::LineAndPoints => {
                    chart
                        .draw_series(s.points.iter().map(|&p| Circle::new(p, 5, colour.filled())))
                        .map_err(|e| DrawError::draw("plot", &e))?;
                    chart
                        .draw_series(LineSeries::new(
                            s.points.iter().copied(),
                            colour.stroke_width(2),
                        ))
                        .map_err(|e| DrawError::draw("plot", &e))?
                        .label(s.label.clone())
                        .legend(move |(x, y)| {
                            EmptyElement::at((x + 10, y))
                                + PathElement::new(vec![(-10, 0), (10, 0)], colour.stroke_width(2))
                                + Circle::new((0, 0), 4, colour.filled())
                        })
                }
            };
        }
        chart
            .configure_series_labels()
            .position(layout.legend.clone())
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(|e| DrawError::draw("plot", &e))?;
        root.present().map_err(|e| DrawError::draw("plot", &e))?;
    }
    write_png_rgb(path, size, &pixels)
}

/// The cavity's centreline profiles (u/U along z, w/U along x) as lines, with the reference data as
/// points when there is one: the validation plot.
pub fn profile_plot(
    path: &Path,
    title: &str,
    simulated: &[crate::profiles::Profile],
    reference: Option<(&str, &crate::reference::Reference)>,
) -> Result<(), DrawError> {
    fn describe(name: &str) -> &str {
        match name {
            "u_vs_z" => "u/U along z (x = y = 1/2)",
            "w_vs_x" => "w/U along x (y = z = 1/2)",
            other => other,
        }
    }
    // A profile and its reference share a colour (blue, orange: distinguishable by colour-blind
    // readers); the legend sits top centre, where the cavity's profiles leave the plot empty.
    const COLOURS: [RGBColor; 2] = [RGBColor(31, 119, 180), RGBColor(230, 110, 0)];
    let mut series = Vec::new();
    let mut colour_of = Vec::new();
    for (k, p) in simulated.iter().enumerate() {
        let colour = COLOURS[k % 2].to_rgba();
        series.push(Series {
            label: format!("{}, simulated", describe(&p.name)),
            points: p.points.clone(),
            mark: Mark::Line,
        });
        colour_of.push(colour);
        if let Some((source, r)) = reference {
            if let Some(rp) = r.profiles.iter().find(|q| q.name == p.name) {
                series.push(Series {
                    label: format!("{}, {source}", describe(&p.name)),
                    points: rp.points.clone(),
                    mark: Mark::Points,
                });
                colour_of.push(colour);
            }
        }
    }
    let layout = Layout {
        colour: &|k| colour_of[k],
        legend: SeriesLabelPosition::UpperMiddle,
        x_axis: XAxis::Real,
    };
    draw_lines(
        path,
        (760, 560),
        [title, "coordinate / L", "velocity / U"],
        &series,
        &layout,
    )
}

/// Writes 8-bit RGB pixels as a PNG, atomically.
pub fn write_png_rgb(path: &Path, size: (u32, u32), rgb: &[u8]) -> Result<(), DrawError> {
    let mut bytes = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut bytes, size.0, size.1);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        // Plots are mostly flat colour: the strongest compression with per-row filters makes them
        // several times smaller for a few milliseconds more.
        enc.set_compression(png::Compression::Best);
        enc.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
        let mut w = enc.write_header()?;
        w.write_image_data(rgb)?;
    }
    crate::output::write_bytes_atomic(path, &bytes)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_axes_are_ticked_at_whole_numbers_only() {
        assert_eq!(count_ticks(1.9, 4.1), [2.0, 3.0, 4.0]);
        assert_eq!(count_ticks(0.9, 2.1), [1.0, 2.0]);
        // One device: the padded range around 1.
        assert_eq!(count_ticks(0.5, 1.5), [1.0]);
        for (lo, hi) in [(0.95, 64.05), (1.0, 1e6), (-3.2, 17.7), (7.9, 8.1)] {
            let t = count_ticks(lo, hi);
            assert!(!t.is_empty() && t.len() <= 11, "{lo}..{hi}: {t:?}");
            assert!(
                t.iter().all(|x| x.fract() == 0.0 && (lo..=hi).contains(x)),
                "{t:?}"
            );
        }
        assert!(count_ticks(0.2, 0.8).is_empty());
        assert!(count_ticks(f64::NAN, 1.0).is_empty());
    }

    /// Counted x values (devices) with a marker at each measurement: the markers add colour a
    /// plain line lacks.
    #[test]
    fn a_count_plot_marks_every_point() {
        let dir = tempfile::tempdir().unwrap();
        let coloured = |mark: Mark, axis: XAxis| {
            let p = dir.path().join("count.png");
            let s = [Series {
                label: "zero-copy linear".into(),
                points: vec![(2.0, 40.0), (3.0, 70.0), (4.0, 95.0)],
                mark,
            }];
            line_plot(&p, (400, 300), "t", "devices", "GB/s", axis, &s).unwrap();
            let decoder = png::Decoder::new(std::fs::File::open(&p).unwrap());
            let mut reader = decoder.read_info().unwrap();
            let mut buf = vec![0; reader.output_buffer_size()];
            reader.next_frame(&mut buf).unwrap();
            buf.chunks(3)
                .filter(|p| !(p[0] == p[1] && p[1] == p[2]))
                .count()
        };
        let line = coloured(Mark::Line, XAxis::Count);
        let marked = coloured(Mark::LineAndPoints, XAxis::Count);
        assert!(
            marked > line + 3 * 20,
            "{marked} coloured pixels against {line}"
        );
        assert!(coloured(Mark::LineAndPoints, XAxis::Real) > 0);
    }

    #[test]
    fn a_plot_is_a_png_with_the_requested_size_and_drawn_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("plot.png");
        let s = vec![
            Series {
                label: "sim".into(),
                points: (0..50)
                    .map(|k| (k as f64 / 49.0, (k as f64 / 8.0).sin()))
                    .collect(),
                mark: Mark::Line,
            },
            Series {
                label: "ref".into(),
                points: vec![(0.2, 0.5), (0.6, -0.4)],
                mark: Mark::Points,
            },
        ];
        line_plot(&p, (400, 300), "test", "x", "y", XAxis::Real, &s).unwrap();
        // Ranges plotters cannot lay ticks on are refused; constants of any size are drawn.
        for bad in [f64::INFINITY, f64::NAN] {
            let pts = vec![(0.0, 1.0), (1.0, bad)];
            let s = [Series {
                label: "bad".into(),
                points: pts,
                mark: Mark::Line,
            }];
            if bad.is_nan() {
                // NaN points are skipped by the range (and by the drawing).
                line_plot(&p, (400, 300), "t", "x", "y", XAxis::Real, &s).unwrap();
            } else {
                assert!(line_plot(&p, (400, 300), "t", "x", "y", XAxis::Real, &s).is_err());
            }
        }
        let wide = [Series {
            label: "wide".into(),
            points: vec![(0.0, -1e308), (1.0, 1e308)],
            mark: Mark::Line,
        }];
        assert!(line_plot(&p, (400, 300), "t", "x", "y", XAxis::Real, &wide).is_err());
        let flat = [Series {
            label: "flat".into(),
            points: vec![(0.0, 1e20), (1.0, 1e20)],
            mark: Mark::Line,
        }];
        line_plot(&p, (400, 300), "t", "x", "y", XAxis::Real, &flat).unwrap();
        let decoder = png::Decoder::new(std::fs::File::open(&p).unwrap());
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (400, 300));
        // Not blank: some pixels are neither white nor grey (the coloured series).
        let coloured = buf
            .chunks(3)
            .filter(|p| !(p[0] == p[1] && p[1] == p[2]))
            .count();
        assert!(coloured > 100, "only {coloured} coloured pixels");
    }
}
