//! Forces on the obstacles and probes, sampled every few steps into `forces.csv` and `probes.csv`;
//! lines, the profiles along lines of nodes written into `lines.csv` from the final fields.
//!
//! Both come from one primitive of the compute modules, the populations of chosen nodes
//! ([`Runtime::read_nodes`]); the forces (momentum exchange, `physics::momentum_exchange`) and the
//! probes' density and velocity (`physics::stored_macroscopic`) are computed here, on the host, once for
//! every module. Each force is summed over its links in the domain's node order, slab after slab,
//! so that it does not depend on the partition.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use thelma_core::physics::d3q19::Q;
use thelma_core::physics::{
    coupled_force, momentum_exchange, stored_macroscopic, temperature, ThermalCoefficients, QT,
};
use thelma_core::{BodyMethod, CaseConfig, Fields, Runtime, SlabSpec};
use thelma_geometry::{BodyLinks, Geometry};
use thelma_results::{line_plot, write_bytes_atomic, ForceMean, Mark, Series, XAxis};

use crate::error::UsageError;

/// A CSV written row by row (flushed after each, so that a run stopped or diverged keeps its rows).
struct Csv {
    file: BufWriter<File>,
}

impl Csv {
    /// Creates `path` with `header`, or appends to it when continuing a run that wrote it.
    fn open(path: &Path, header: &str, append: bool) -> Result<Self> {
        let exists = append && path.exists();
        let file = OpenOptions::new()
            .create(true)
            .append(exists)
            .write(true)
            .truncate(!exists)
            .open(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        let mut csv = Self {
            file: BufWriter::new(file),
        };
        if !exists {
            csv.row(header)?;
        }
        Ok(csv)
    }

    fn row(&mut self, line: &str) -> Result<()> {
        writeln!(self.file, "{line}")?;
        self.file.flush()?;
        Ok(())
    }
}

/// The node of each probe; refuses a probe in an obstacle (before anything is written: the run
/// calls it with the geometry's other checks).
pub fn probe_nodes(case: &CaseConfig, geometry: &Geometry) -> Result<Vec<[usize; 3]>> {
    case.probe
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let [x, y, z] = case
                .probe_node(p)
                .map_err(|m| UsageError::new("--config", format!("probe {k}: {m}")))?;
            if geometry.in_obstacle(x, y, z) {
                return Err(UsageError::new(
                    "--config",
                    format!("probe {k}: node ({x}, {y}, {z}) lies in an obstacle"),
                )
                .into());
            }
            Ok([x, y, z])
        })
        .collect()
}

/// Factors from lattice units to what the CSVs hold, and the suffixes of their columns: velocity
/// (m/s with `[units]`), pressure and force (Pa and N with `units.density`), each 1 otherwise.
struct CsvUnits {
    to_velocity: f64,
    to_pressure: f64,
    to_force: f64,
    u_unit: &'static str,
    p_unit: &'static str,
    f_unit: &'static str,
}

impl CsvUnits {
    fn of(case: &CaseConfig) -> Self {
        let scales = case.unit_scales();
        let density = case.units.as_ref().and_then(|u| u.density);
        let (to_pressure, to_force, p_unit, f_unit) = match (scales, density) {
            (Some(s), Some(rho)) => (
                rho * s.velocity * s.velocity,
                rho * s.dx * s.dx * s.velocity * s.velocity,
                "_Pa",
                "_N",
            ),
            _ => (1.0, 1.0, "", ""),
        };
        Self {
            to_velocity: scales.map_or(1.0, |s| s.velocity),
            to_pressure,
            to_force,
            u_unit: if scales.is_some() { "_m_s" } else { "" },
            p_unit,
            f_unit,
        }
    }
}

/// Writes `lines.csv` in the case's output folder: one row per fluid node of each
/// `[[line]]` line of `fields` (solid nodes are left out), or per plane holding fluid for a line of
/// plane means (the means over the plane's fluid nodes), its position along the line (the node
/// index, or the centre in metres with `[units]`), p − p₀, u and, with a temperature lattice,
/// T = t0 + θ, each in the case's units as `probes.csv` has them; with `mean` (the time averages)
/// the same of the averages after them. Returns the file's name, or `None` without lines.
pub fn write_lines(
    case: &CaseConfig,
    fields: &Fields,
    mean: Option<&Fields>,
) -> Result<Option<String>> {
    if case.line.is_empty() {
        return Ok(None);
    }
    let u = CsvUnits::of(case);
    let thermal = case.thermal.as_ref().map(|t| t.t0);
    let dx = case.unit_scales().map(|s| s.dx);
    let (p_unit, u_unit) = (u.p_unit, u.u_unit);
    let quantities = |prefix: &str| {
        let mut h =
            format!(",{prefix}p{p_unit},{prefix}ux{u_unit},{prefix}uy{u_unit},{prefix}uz{u_unit}");
        if thermal.is_some() {
            h += &format!(",{prefix}T");
        }
        h
    };
    let mut text = format!(
        "line,{}{}{}\n",
        if dx.is_some() {
            "position_m"
        } else {
            "position"
        },
        quantities(""),
        if mean.is_some() {
            quantities("mean_")
        } else {
            String::new()
        }
    );
    // The quantities at one node, or their means over several (a plane's fluid nodes).
    let values = |f: &Fields, nodes: &[usize]| {
        let mean = |a: &[f64]| nodes.iter().map(|&i| a[i]).sum::<f64>() / nodes.len() as f64;
        let mut v = format!(
            ",{:e},{:e},{:e},{:e}",
            (mean(&f.rho) - 1.0) / 3.0 * u.to_pressure,
            mean(&f.ux) * u.to_velocity,
            mean(&f.uy) * u.to_velocity,
            mean(&f.uz) * u.to_velocity
        );
        if let Some(t0) = thermal {
            v += &format!(",{:e}", t0 + mean(&f.temperature));
        }
        v
    };
    for (k, p) in case.line.iter().enumerate() {
        let across = case.line_nodes(p).expect("the case was validated");
        let name = p.line_name(k);
        let axis = p.axis.index();
        let [a0, a1] = p.across();
        for q in 0..fields.size[axis] {
            // The line's node on this plane, or every fluid node of the plane for plane means.
            let mut nodes = Vec::new();
            let (r0, r1) = match across {
                Some([n0, n1]) => (n0..n0 + 1, n1..n1 + 1),
                None => (0..fields.size[a0], 0..fields.size[a1]),
            };
            for j0 in r0 {
                for j1 in r1.clone() {
                    let mut node = [0; 3];
                    node[axis] = q;
                    node[a0] = j0;
                    node[a1] = j1;
                    let i = fields.idx(node[0], node[1], node[2]);
                    if !fields.solid[i] {
                        nodes.push(i);
                    }
                }
            }
            if nodes.is_empty() {
                continue;
            }
            let at = dx.map_or(q as f64, |dx| (q as f64 + 0.5) * dx);
            text += &format!("{name},{at:e}{}", values(fields, &nodes));
            if let Some(m) = mean {
                text += &values(m, &nodes);
            }
            text.push('\n');
        }
    }
    let name = "lines.csv";
    write_bytes_atomic(&case.output.dir.join(name), text.as_bytes())
        .with_context(|| format!("cannot write {name}"))?;
    Ok(Some(name.to_string()))
}

/// One sample of the forces: its step, the force on every solid (solid order) and the torque on
/// every immersed body (`[[body]]` order).
struct ForceSample {
    step: u64,
    force: Vec<[f64; 3]>,
    torque: Vec<[f64; 3]>,
}

/// What a run samples, and what it has sampled.
pub struct Samples {
    forces_every: u64,
    probe_every: u64,
    /// Per slab, the nodes read: the force links' nodes, then the slab's probes.
    lists: Vec<Arc<Vec<u32>>>,
    /// Per slab, the links into obstacles, in the order of the first part of `lists`.
    links: Vec<Vec<BodyLinks>>,
    /// Per probe: its slab and its place in that slab's list.
    probes: Vec<(usize, usize)>,
    bodies: usize,
    /// The solid numbers of the immersed bodies, in `[[body]]` order: their forces and torques
    /// are the immersed boundary method's, from the runtime.
    immersed: Vec<usize>,
    /// The coefficients' axes and scale `2 / (U² A)` (lattice units).
    coefficients: Option<(usize, usize, f64)>,
    /// The model's body force (the probes' velocity is the collision's `(j + F/2)/ρ`, from the
    /// stored momentum `j + F`: `physics::stored_macroscopic`).
    force: Option<[f64; 3]>,
    /// Seconds per step with `[units]`.
    dt: Option<f64>,
    /// With a temperature lattice, its reference temperature `t0`: the probes then report
    /// `T = t0 + θ`, in the case's own temperature unit.
    t0: Option<f64>,
    /// With a temperature lattice, its constants: a probe's velocity is then the one its node
    /// collided with under the buoyancy at its θ besides the uniform force.
    thermal_k: Option<ThermalCoefficients<f64>>,
    /// Factors from lattice units to what the CSVs hold: velocity (m/s with `[units]`), pressure
    /// and force (Pa and N with `units.density`), each 1 otherwise.
    to_velocity: f64,
    to_pressure: f64,
    to_force: f64,
    /// Torque: N·m with `units.density`, 1 otherwise.
    to_torque: f64,
    forces_csv: Option<Csv>,
    probes_csv: Option<Csv>,
    /// Every force sample of this run.
    history: Vec<ForceSample>,
    /// Each probe's name and speed at the last sample (what the live view plots).
    names: Vec<String>,
    speeds: Vec<f64>,
    dir: PathBuf,
    /// Files written, relative to the output folder.
    pub written: Vec<String>,
}

impl Samples {
    /// The sampling `case` asks for over the slabs `slabs`; its CSVs are created in the output
    /// folder (appended to when `resume`). Probes in an obstacle are refused here, where the
    /// geometry is known.
    pub fn new(
        case: &CaseConfig,
        geometry: &Geometry,
        slabs: &[SlabSpec],
        resume: bool,
    ) -> Result<Self> {
        let lattice = case.validate()?;
        let forces_every = case.forces.every;
        let probe_every = if case.probe.is_empty() {
            0
        } else {
            case.output.probe_every
        };
        let links: Vec<Vec<BodyLinks>> = if forces_every > 0 {
            slabs
                .iter()
                .map(|s| geometry.body_links_in([s.x.clone(), s.y.clone(), s.z.clone()]))
                .collect::<Result<_, _>>()
                .map_err(|e| UsageError::new("--config", e.to_string()))?
        } else {
            slabs.iter().map(|_| Vec::new()).collect()
        };
        let mut lists: Vec<Vec<u32>> = links
            .iter()
            .map(|l| l.iter().map(|b| b.node).collect())
            .collect();
        let mut probes = Vec::new();
        let mut names = Vec::new();
        for (k, [x, y, z]) in probe_nodes(case, geometry)?.into_iter().enumerate() {
            let p = &case.probe[k];
            let s = slabs
                .iter()
                .position(|s| s.x.contains(&x) && s.y.contains(&y) && s.z.contains(&z))
                .expect("the subdomains cover the domain");
            let [x0, y0, z0] = slabs[s].origin();
            let local = ((z - z0) * slabs[s].ny() + y - y0) * slabs[s].nx() + x - x0;
            probes.push((s, lists[s].len()));
            lists[s].push(local as u32);
            names.push(p.name.clone().unwrap_or_else(|| format!("probe{k}")));
        }
        // Obstacles, then STL bodies: the geometry's solid_owner numbering.
        let bodies = case.domain.obstacles.len() + case.body.len();
        let immersed: Vec<usize> = (0..case.body.len())
            .filter(|&b| case.body[b].method == BodyMethod::Immersed)
            .map(|b| case.domain.obstacles.len() + b)
            .collect();
        let coefficients = case.force_reference().map(|(a, u)| {
            (
                case.forces.drag.index(),
                case.forces.lift.index(),
                2.0 / (u * u * a),
            )
        });
        let dir = case.output.dir.clone();
        let time = if case.units.is_some() {
            "time_s"
        } else {
            "time"
        };
        let CsvUnits {
            to_velocity,
            to_pressure,
            to_force,
            u_unit,
            p_unit,
            f_unit,
        } = CsvUnits::of(case);
        let forces_csv = if forces_every > 0 {
            // Columns named after a [[body]]'s `name`, `body<k>` otherwise.
            let names: Vec<String> = (0..bodies)
                .map(|k| {
                    k.checked_sub(case.domain.obstacles.len())
                        .and_then(|b| case.body[b].name.clone())
                        .unwrap_or_else(|| format!("body{k}"))
                })
                .collect();
            let mut h = format!("step,{time}");
            let t_unit = if f_unit.is_empty() { "" } else { "_Nm" };
            for (k, b) in names.iter().enumerate() {
                h += &format!(",{b}_fx{f_unit},{b}_fy{f_unit},{b}_fz{f_unit}");
                if coefficients.is_some() {
                    h += &format!(",{b}_cd,{b}_cl");
                }
                if immersed.contains(&k) {
                    h += &format!(",{b}_tx{t_unit},{b}_ty{t_unit},{b}_tz{t_unit}");
                }
            }
            Some(Csv::open(&dir.join("forces.csv"), &h, resume)?)
        } else {
            None
        };
        let probes_csv = if probe_every > 0 {
            let mut h = format!("step,{time}");
            for n in &names {
                h += &format!(",{n}_p{p_unit},{n}_ux{u_unit},{n}_uy{u_unit},{n}_uz{u_unit}");
                if case.thermal.is_some() {
                    h += &format!(",{n}_T");
                }
            }
            Some(Csv::open(&dir.join("probes.csv"), &h, resume)?)
        } else {
            None
        };
        let mut written = Vec::new();
        if forces_csv.is_some() {
            written.push("forces.csv".to_string());
        }
        if probes_csv.is_some() {
            written.push("probes.csv".to_string());
        }
        Ok(Self {
            forces_every,
            probe_every,
            lists: lists.into_iter().map(Arc::new).collect(),
            links,
            probes,
            bodies,
            immersed,
            coefficients,
            force: case.flow_model(&lattice).force,
            thermal_k: case
                .thermal_setup(&lattice)
                .map(|t| ThermalCoefficients::new(&t.model, |_, x| x)),
            dt: case.unit_scales().map(|s| s.dt),
            t0: case.thermal.as_ref().map(|t| t.t0),
            to_velocity,
            to_pressure,
            to_force,
            // N·m where forces are in N (`units.density` given).
            to_torque: match (
                case.unit_scales(),
                case.units.as_ref().and_then(|u| u.density),
            ) {
                (Some(s), Some(_)) => to_force * s.dx,
                _ => 1.0,
            },
            forces_csv,
            probes_csv,
            history: Vec::new(),
            names: case
                .probe
                .iter()
                .enumerate()
                .map(|(k, p)| p.name.clone().unwrap_or_else(|| format!("probe{k}")))
                .collect(),
            speeds: Vec::new(),
            dir,
            written,
        })
    }

    fn at(every: u64, step: u64) -> bool {
        every > 0 && step.is_multiple_of(every)
    }

    /// The longest run from `step` that does not pass a sample.
    pub fn clamp_chunk(&self, step: u64, chunk: u64) -> u64 {
        [self.forces_every, self.probe_every]
            .into_iter()
            .filter(|&k| k > 0)
            .fold(chunk, |c, k| c.min((step / k + 1) * k - step))
    }

    /// Each probe's name and speed at the last sample (in the CSV's unit); empty before one.
    pub fn probe_speeds(&self) -> Vec<(String, f64)> {
        self.names
            .iter()
            .cloned()
            .zip(self.speeds.iter().copied())
            .collect()
    }

    /// Samples what is due at the runtime's current step.
    pub fn sample(&mut self, rt: &mut Runtime) -> Result<()> {
        let step = rt.step();
        let forces = Self::at(self.forces_every, step);
        let probes = Self::at(self.probe_every, step);
        if !forces && !probes {
            return Ok(());
        }
        let values = rt.read_nodes(&self.lists)?;
        let time = self.dt.map_or(step as f64, |dt| step as f64 * dt);
        // Per node the flow's Q populations, then the temperature lattice's QT when there is one.
        let stride = Q + if self.t0.is_some() { QT } else { 0 };
        let node =
            |s: usize, k: usize| -> [f64; Q] { std::array::from_fn(|i| values[s][k * stride + i]) };
        if forces {
            let mut per = vec![[0.0; 3]; self.bodies];
            for (s, links) in self.links.iter().enumerate() {
                for (k, l) in links.iter().enumerate() {
                    let f = momentum_exchange(&node(s, k), l.links);
                    for a in 0..3 {
                        per[l.body][a] += f[a];
                    }
                }
            }
            // The immersed bodies' loads of the step that made this state (none before the first).
            let mut torques = vec![[0.0; 3]; self.immersed.len()];
            if let Some((_, loads)) = rt.immersed_loads()? {
                for (j, &b) in self.immersed.iter().enumerate() {
                    per[b] = loads[j].force;
                    torques[j] = loads[j].torque;
                }
            }
            let mut row = format!("{step},{time}");
            for (b, f) in per.iter().enumerate() {
                let k = self.to_force;
                row += &format!(",{:e},{:e},{:e}", f[0] * k, f[1] * k, f[2] * k);
                if let Some((d, l, scale)) = self.coefficients {
                    row += &format!(",{:e},{:e}", f[d] * scale, f[l] * scale);
                }
                if let Some(j) = self.immersed.iter().position(|&i| i == b) {
                    let (t, k) = (torques[j], self.to_torque);
                    row += &format!(",{:e},{:e},{:e}", t[0] * k, t[1] * k, t[2] * k);
                }
            }
            if let Some(csv) = &mut self.forces_csv {
                csv.row(&row)?;
            }
            self.history.push(ForceSample {
                step,
                force: per,
                torque: torques,
            });
        }
        if probes {
            self.speeds.clear();
            let mut row = format!("{step},{time}");
            for &(s, k) in &self.probes {
                let at = k * stride + Q;
                let theta = self.thermal_k.as_ref().map(|tk| {
                    let h: [f64; QT] = std::array::from_fn(|i| values[s][at + i]);
                    let theta = temperature(&h);
                    (
                        theta,
                        coupled_force(theta, self.force.unwrap_or([0.0; 3]), tk),
                    )
                });
                let m = stored_macroscopic(&node(s, k), theta.map_or(self.force, |t| Some(t.1)));
                let p = m.drho / 3.0 * self.to_pressure;
                let u = m.u.map(|v| v * self.to_velocity);
                self.speeds
                    .push((u[0] * u[0] + u[1] * u[1] + u[2] * u[2]).sqrt());
                row += &format!(",{p:e},{:e},{:e},{:e}", u[0], u[1], u[2]);
                if let (Some(t0), Some((theta, _))) = (self.t0, theta) {
                    row += &format!(",{:e}", t0 + theta);
                }
            }
            if let Some(csv) = &mut self.probes_csv {
                csv.row(&row)?;
            }
        }
        Ok(())
    }

    /// The mean force on each obstacle over the second half of this run's samples, and a plot of
    /// the coefficients (or the forces) over time, `forces.png`.
    pub fn finish(&mut self) -> Result<Vec<ForceMean>> {
        if self.history.is_empty() {
            return Ok(Vec::new());
        }
        let half = &self.history[self.history.len() / 2..];
        let means: Vec<ForceMean> = (0..self.bodies)
            .map(|b| {
                let mut force = [0.0; 3];
                let j = self.immersed.iter().position(|&i| i == b);
                let mut torque = j.map(|_| [0.0; 3]);
                for h in half {
                    for a in 0..3 {
                        force[a] += h.force[b][a] / half.len() as f64;
                        if let (Some(m), Some(j)) = (&mut torque, j) {
                            m[a] += h.torque[j][a] / half.len() as f64;
                        }
                    }
                }
                ForceMean {
                    body: b,
                    samples: half.len(),
                    from_step: half[0].step,
                    to_step: half[half.len() - 1].step,
                    force,
                    torque,
                    coefficients: self
                        .coefficients
                        .map(|(d, l, scale)| [force[d] * scale, force[l] * scale]),
                }
            })
            .collect();
        let x = |step: u64| self.dt.map_or(step as f64, |dt| step as f64 * dt);
        let mut series = Vec::new();
        for b in 0..self.bodies {
            let value = |f: &[f64; 3], which: usize| match self.coefficients {
                Some((d, l, scale)) => f[[d, l][which]] * scale,
                None => f[which],
            };
            let names = match self.coefficients {
                Some(_) => ["C_D", "C_L"],
                None => ["F_x", "F_y"],
            };
            for (which, name) in names.iter().enumerate() {
                series.push(Series {
                    label: format!("body {b} {name}"),
                    points: self
                        .history
                        .iter()
                        .map(|h| (x(h.step), value(&h.force[b], which)))
                        .collect(),
                    mark: Mark::Line,
                });
            }
        }
        let (what, unit) = match self.coefficients {
            Some(_) => ("Force coefficients", "coefficient"),
            None => ("Forces (lattice units)", "force"),
        };
        let x_label = if self.dt.is_some() { "time, s" } else { "step" };
        line_plot(
            &self.dir.join("forces.png"),
            (900, 560),
            what,
            x_label,
            unit,
            XAxis::Real,
            &series,
        )
        .context("cannot write forces.png")?;
        self.written.push("forces.png".to_string());
        Ok(means)
    }
}
