//! The files a run writes from its fields: VTK image data (gathered, or one piece per slab), slice
//! images, the `.pvd` time series, and for the lid-driven cavity the centreline profiles (CSV) and
//! their plot against the reference data. The run loop asks [`Outputs`] when a field output is due.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use thelma_core::Runtime;
use thelma_core::{CaseConfig, CaseKind, LatticeParams, OutputConfig, OutputField, Precision};
use thelma_core::{Fields, MeanSums};
use thelma_results::profile_plot;
use thelma_results::seconds;
use thelma_results::vtk::{self, Piece, Scalar, Scales, VtkOptions};
use thelma_results::{cavity_centrelines, write_csv, Profile};
use thelma_results::{compare, Comparison, Reference};
use thelma_results::{write_slice_png, Slice, SliceStyle};

/// Whether `case` is a lid-driven cavity, the flow whose centreline profiles are written: the
/// cavity case with walls across the lid's direction x (a spanwise-periodic y is still a cavity).
/// Periodic along x, the lid drags the fluid round the box without a recirculation to profile: a
/// shear-driven channel (`examples/channel-sphere.toml`).
pub fn is_lid_driven_cavity(case: &CaseConfig) -> bool {
    case.domain.case == CaseKind::Cavity && !case.domain.periodic[0]
}

/// The outputs of one run and what they have written so far.
pub struct Outputs {
    cfg: OutputConfig,
    whole: [usize; 3],
    vtk: VtkOptions,
    /// Physical time per step, when the case has physical units.
    dt: Option<f64>,
    /// (time, file) of every field output, for the `.pvd` series.
    series: Vec<(f64, String)>,
    last: Option<u64>,
    /// Files written, relative to the output folder.
    pub written: Vec<String>,
    /// Wall time spent gathering and writing.
    pub time: Duration,
}

/// How `case`'s lattice values map to the values it writes and shows: SI with `[units]` (pascals
/// where they give a density), θ above the case's T₀.
pub fn scales(case: &CaseConfig) -> Scales {
    let density = case.units.as_ref().and_then(|p| p.density);
    Scales {
        t0: case.thermal.as_ref().map_or(0.0, |t| t.t0),
        ..case.unit_scales().map_or(Scales::default(), |u| Scales {
            spacing: u.dx,
            velocity: u.velocity,
            pressure: density.map_or(1.0, |rho| rho * u.velocity * u.velocity),
            si: true,
            pressure_si: density.is_some(),
            t0: 0.0,
        })
    }
}

impl Outputs {
    pub fn new(case: &CaseConfig) -> Self {
        let units = case.unit_scales();
        Self {
            cfg: case.output.clone(),
            whole: case.domain.size,
            vtk: VtkOptions {
                // The case was validated before the run, its field names with it.
                arrays: {
                    let mut a = case
                        .output
                        .arrays()
                        .unwrap_or_else(|_| OutputField::DEFAULT.into());
                    // A case with a temperature lattice writes it with the default arrays.
                    let default = a == OutputField::DEFAULT;
                    if case.thermal.is_some() && default {
                        a.push(OutputField::Temperature);
                    }
                    // Averages join the arrays unless the list names some already.
                    if case.output.average_from.is_some() && !a.iter().any(|f| f.is_mean()) {
                        a.extend([OutputField::MeanVelocity, OutputField::MeanPressure]);
                        if case.thermal.is_some() {
                            a.push(OutputField::MeanTemperature);
                        }
                    }
                    a
                },
                scales: scales(case),
                scalar: match case.numerics.precision.arithmetic() {
                    Precision::F64 => Scalar::F64,
                    _ => Scalar::F32,
                },
                periodic: case.domain.periodic,
            },
            dt: units.map(|u| u.dt),
            series: Vec::new(),
            last: None,
            written: Vec::new(),
            time: Duration::ZERO,
        }
    }

    /// Continues the `.pvd` series of a resumed run: the field outputs already in the folder up to
    /// step `upto` (named `fields_<step>.vti` or `.pvti`) stay in it.
    pub fn resume_series(&mut self, upto: u64) {
        let Ok(entries) = std::fs::read_dir(&self.cfg.dir) else {
            return;
        };
        let mut found: Vec<(u64, String)> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|name| {
                let stem = name
                    .strip_suffix(".pvti")
                    .or_else(|| name.strip_suffix(".vti"))?;
                let step: u64 = stem.strip_prefix("fields_")?.parse().ok()?;
                (step <= upto).then_some((step, name))
            })
            .collect();
        found.sort();
        self.series = found
            .into_iter()
            .map(|(step, name)| (self.dt.map_or(step as f64, |dt| step as f64 * dt), name))
            .collect();
    }

    /// `chunk` shortened so that stepping stops on the next output step.
    pub fn clamp_chunk(&self, step: u64, chunk: u64) -> u64 {
        match self.cfg.every {
            0 => chunk,
            every => chunk.min((step / every + 1) * every - step),
        }
    }

    /// Whether a periodic field output falls on `step`.
    pub fn due(&self, step: u64) -> bool {
        self.cfg.every > 0 && step.is_multiple_of(self.cfg.every) && self.last != Some(step)
    }

    fn fields_wanted(&self) -> bool {
        self.cfg.vtk || self.cfg.images
    }

    /// Gathers the fields from `rt` (per slab with `vtk_pieces`) and writes the field outputs.
    pub fn write(&mut self, rt: &mut Runtime) -> Result<()> {
        // Asked twice at one step (a live view's button): one output.
        if !self.fields_wanted() || self.last == Some(rt.step()) {
            return Ok(());
        }
        let t0 = Instant::now();
        let mut slabs = if self.cfg.vtk_pieces {
            rt.slab_fields()?
        } else {
            vec![rt.fields()?]
        };
        if self.cfg.average_from.is_some() {
            let sums = rt.slab_mean_sums()?;
            let sums = if self.cfg.vtk_pieces {
                sums
            } else {
                vec![MeanSums::concat(sums)]
            };
            for (f, m) in slabs.iter_mut().zip(sums) {
                f.mean = m.mean().map(Box::new);
            }
        }
        self.time += t0.elapsed();
        self.write_slabs(rt.step(), &slabs)
    }

    /// The field outputs at the end of a run: the gathered `fields`, unless the last periodic output
    /// was at this step already (pieces are read from `rt` again).
    pub fn finish(&mut self, rt: &mut Runtime, fields: &Fields) -> Result<()> {
        if self.last == Some(rt.step()) || !self.fields_wanted() {
            return Ok(());
        }
        if self.cfg.vtk_pieces || (self.cfg.average_from.is_some() && fields.mean.is_none()) {
            self.write(rt)
        } else {
            self.write_slabs(rt.step(), std::slice::from_ref(fields))
        }
    }

    /// Writes the VTK file(s) and the slice image of `slabs` (the slabs in z order, or the
    /// subdomains of a grid in any order, or the whole domain gathered) at `step`.
    pub fn write_slabs(&mut self, step: u64, slabs: &[Fields]) -> Result<()> {
        let t0 = Instant::now();
        let dir = self.cfg.dir.clone();
        // Before the averages' first sample their arrays are left out.
        let full = self.vtk.clone();
        if slabs.iter().any(|s| s.mean.is_none()) {
            self.vtk.arrays.retain(|f| !f.is_mean());
        }
        let r = self.write_slabs_with(step, slabs, t0, &dir);
        self.vtk = full;
        r
    }

    fn write_slabs_with(
        &mut self,
        step: u64,
        slabs: &[Fields],
        t0: Instant,
        dir: &std::path::Path,
    ) -> Result<()> {
        let time = self.dt.map_or(step as f64, |dt| step as f64 * dt);
        if self.cfg.vtk {
            let stem = format!("fields_{step:08}");
            let file = if !self.cfg.vtk_pieces && slabs.len() == 1 {
                let name = format!("{stem}.vti");
                vtk::write_vti(&dir.join(&name), slabs, 0, &self.vtk)
                    .with_context(|| format!("cannot write {name}"))?;
                self.written.push(name.clone());
                name
            } else {
                let mut pieces = Vec::new();
                // Each piece reads its neighbours' planes for the derivatives at its edges.
                for (k, s) in slabs.iter().enumerate() {
                    let name = format!("{stem}_{k}.vti");
                    vtk::write_vti(&dir.join(&name), slabs, k, &self.vtk)
                        .with_context(|| format!("cannot write {name}"))?;
                    self.written.push(name.clone());
                    pieces.push(Piece {
                        size: s.size,
                        origin: [s.xy0[0], s.xy0[1], s.z0],
                        source: name,
                    });
                }
                let name = format!("{stem}.pvti");
                vtk::write_pvti(&dir.join(&name), self.whole, &pieces, &self.vtk)
                    .with_context(|| format!("cannot write {name}"))?;
                self.written.push(name.clone());
                name
            };
            self.series.push((time, file));
            vtk::write_pvd(&dir.join("fields.pvd"), &self.series)
                .context("cannot write fields.pvd")?;
            if !self.written.iter().any(|w| w == "fields.pvd") {
                self.written.push("fields.pvd".into());
            }
        }
        if self.cfg.images {
            let slice = Slice::cut(slabs, self.cfg.slice);
            let when = match self.dt {
                Some(dt) => format!("step {step}, t = {}", seconds(step as f64 * dt)),
                None => format!("step {step}"),
            };
            let physical = self.dt.is_some();
            let style = SliceStyle {
                title: format!("|u| on {}, {when}", slice.plane_name()),
                spacing: self.vtk.scales.spacing,
                length_unit: if physical { "m" } else { "lattice units" }.into(),
                velocity: self.vtk.scales.velocity,
                velocity_unit: if physical { "m/s" } else { "lattice units" }.into(),
            };
            let name = format!("slice_{step:08}.png");
            write_slice_png(&dir.join(&name), &slice, &style)
                .with_context(|| format!("cannot write {name}"))?;
            self.written.push(name);
        }
        self.last = Some(step);
        self.time += t0.elapsed();
        Ok(())
    }

    /// For the lid-driven cavity ([`is_lid_driven_cavity`]): the centreline profiles
    /// (`profiles.csv`), their plot (`profiles.png`, with the reference points when the case is the
    /// one the data describes) and the comparison. Other cases get none of them.
    pub fn profiles(
        &mut self,
        case: &CaseConfig,
        lattice: &LatticeParams,
        fields: &Fields,
        reference: bool,
    ) -> Result<(Option<[Profile; 2]>, Option<Comparison>)> {
        if !is_lid_driven_cavity(case) {
            return Ok((None, None));
        }
        let t0 = Instant::now();
        let dir: &Path = &self.cfg.dir;
        let p = cavity_centrelines(fields, lattice.lid_speed);
        write_csv(&dir.join("profiles.csv"), &p).context("cannot write profiles.csv")?;
        self.written.push("profiles.csv".into());
        let data = Reference::cavity_re1000();
        let v = reference.then(|| compare(&p, &data));
        if self.cfg.images {
            let [nx, ny, nz] = case.domain.size;
            let title = format!(
                "Centreline profiles, Re = {:.0}, {nx}x{ny}x{nz}",
                lattice.reynolds
            );
            let r = reference.then_some(("Albensoeder & Kuhlmann 2005", &data));
            profile_plot(&dir.join("profiles.png"), &title, &p, r)
                .context("cannot write profiles.png")?;
            self.written.push("profiles.png".into());
        }
        self.time += t0.elapsed();
        Ok((Some(p), v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_stop_on_output_steps() {
        let mut case = CaseConfig::default();
        case.output.every = 250;
        let o = Outputs::new(&case);
        assert_eq!(o.clamp_chunk(0, 1000), 250);
        assert_eq!(o.clamp_chunk(240, 100), 10);
        assert_eq!(o.clamp_chunk(250, 100), 100);
        assert!(o.due(500) && !o.due(499));
        case.output.every = 0;
        let o = Outputs::new(&case);
        assert_eq!(o.clamp_chunk(240, 100), 100);
        assert!(!o.due(0) && !o.due(500));
    }

    #[test]
    fn profiles_are_for_the_lid_driven_cavity_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut cavity = CaseConfig::default();
        cavity.domain.size = [8, 8, 8];
        cavity.output.dir = dir.path().to_path_buf();
        let mut spanwise = cavity.clone();
        spanwise.domain.periodic = [false, true, false];
        let mut channel = cavity.clone();
        channel.domain.periodic = [true, true, false];
        let mut closed = cavity.clone();
        closed.domain.case = CaseKind::Box;
        closed.physics.viscosity = Some(0.05);
        let fields = Fields::zeros([8, 8, 8], 0);
        for (case, written) in [
            (&cavity, true),
            (&spanwise, true),
            (&channel, false),
            (&closed, false),
        ] {
            for f in ["profiles.csv", "profiles.png"] {
                let _ = std::fs::remove_file(dir.path().join(f));
            }
            let lattice = case.validate().unwrap();
            let mut o = Outputs::new(case);
            let (p, _) = o.profiles(case, &lattice, &fields, false).unwrap();
            assert_eq!(p.is_some(), written, "{:?}", case.domain);
            for f in ["profiles.csv", "profiles.png"] {
                assert_eq!(
                    dir.path().join(f).exists(),
                    written,
                    "{f} {:?}",
                    case.domain
                );
            }
        }
    }

    #[test]
    fn a_resumed_series_keeps_the_outputs_up_to_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        for f in [
            "fields_00000100.vti",
            "fields_00000200.pvti",
            "fields_00000200_0.vti",
            "fields_00000300.vti",
            "notes.txt",
        ] {
            std::fs::write(dir.path().join(f), "").unwrap();
        }
        let mut case = CaseConfig::default();
        case.output.dir = dir.path().to_path_buf();
        let mut o = Outputs::new(&case);
        o.resume_series(200);
        assert_eq!(
            o.series,
            vec![
                (100.0, "fields_00000100.vti".to_string()),
                (200.0, "fields_00000200.pvti".to_string())
            ]
        );
    }
}
