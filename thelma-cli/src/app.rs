//! One run of a case: validate, build the geometry, start the runtime, step with progress, watchdog
//! and convergence checks, then gather fields and write the results.

use std::fmt;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use thelma_compute::ModelParams;
use thelma_core::compute::{interface_bytes_per_step, Fields};
use thelma_core::config::{CaseConfig, CaseKind, LatticeParams};
use thelma_core::domain::Domain;
use thelma_core::runtime::{DeviceInfo, Runtime};
use thelma_geometry::Geometry;
use thelma_results::convergence::relative_change;
use thelma_results::profiles::Profile;
use thelma_results::report::{DeviceSummary, RunSummary, Timings, UnitsReport};

use crate::backend;
use crate::outputs::Outputs;

/// A bad input: the program exits with status 2 and this one line.
#[derive(Debug)]
pub struct UsageError {
    pub flag: String,
    pub message: String,
}

impl UsageError {
    pub fn new(flag: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            flag: flag.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.flag, self.message)
    }
}
impl std::error::Error for UsageError {}

/// The run diverged: the step and the first bad node.
#[derive(Debug)]
pub struct Diverged {
    pub step: u64,
    pub node: [usize; 3],
}

impl fmt::Display for Diverged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the run diverged: non-finite populations at node ({}, {}, {}) by step {}; lower the Reynolds number or the lid speed, or refine the grid",
            self.node[0], self.node[1], self.node[2], self.step
        )
    }
}
impl std::error::Error for Diverged {}

/// What a run tells its observer as it goes.
pub enum Event<'a> {
    Started {
        lattice: &'a LatticeParams,
        note: &'a str,
        devices: &'a [DeviceInfo],
        nodes: usize,
    },
    Progress {
        step: u64,
        target: u64,
        mlups: f64,
        change: Option<f64>,
    },
}

/// The outcome of a run: its summary and final fields.
pub struct Outcome {
    pub summary: RunSummary,
    pub fields: Fields,
    pub profiles: Option<[Profile; 2]>,
}

/// Whether the case is the one the reference data describes: the cubic cavity at Re = 1000.
pub fn matches_reference(case: &CaseConfig, lattice: &LatticeParams) -> bool {
    let [nx, ny, nz] = case.domain.size;
    case.domain.case == CaseKind::Cavity
        && nx == ny
        && ny == nz
        && case.domain.obstacles.is_empty()
        && (lattice.reynolds - 1000.0).abs() < 1e-6 * 1000.0
}

/// Runs `case`, reporting to `observer`; `stop` ends it early (after the current step) and still
/// writes the outputs.
pub fn run_case(
    case: &CaseConfig,
    stop: Arc<AtomicBool>,
    observer: &mut dyn FnMut(Event),
) -> Result<Outcome> {
    let started = Instant::now();
    let lattice = case
        .validate()
        .map_err(|e| UsageError::new(e.flag, e.message))?;
    prepare_output(&case.output.dir)?;
    let geometry = Arc::new(
        Geometry::from_case(case).map_err(|e| UsageError::new("--config", e.to_string()))?,
    );
    let params = ModelParams::new(case, &lattice, geometry);
    let sel = backend::select(case, params)?;
    let domain = Domain::new(case.domain.size, case.domain.periodic);
    let mut rt = Runtime::start(sel.factory, domain, &sel.devices, stop)?;
    observer(Event::Started {
        lattice: &lattice,
        note: &sel.note,
        devices: rt.devices(),
        nodes: domain.nodes(),
    });

    let check = case.resolved_check_every();
    let target = case.run.steps.unwrap_or(case.run.max_steps);
    let convergence = case.run.steps.is_none();
    let mut prev = rt.fields()?;
    let mass0 = prev.mass();
    let mut stepping = Duration::ZERO;
    let mut compute = vec![Duration::ZERO; rt.devices().len()];
    let mut wait = vec![Duration::ZERO; rt.devices().len()];
    let mut converged = false;
    let mut last_change = None;
    let mut outputs = Outputs::new(case);
    let setup = started.elapsed();
    while rt.step() < target {
        let chunk = outputs.clamp_chunk(rt.step(), check.min(target - rt.step()));
        let st = rt.run(chunk)?;
        stepping += st.wall;
        for (k, w) in st.workers.iter().enumerate() {
            compute[k] += w.compute;
            wait[k] += w.wait;
        }
        let mlups =
            domain.nodes() as f64 * rt.step() as f64 / stepping.as_secs_f64().max(1e-12) / 1e6;
        let mut change = None;
        if convergence {
            let now = rt.fields()?;
            watchdog(&now, rt.step())?;
            if st.steps > 0 {
                change = Some(relative_change(&prev, &now) * 1000.0 / st.steps as f64);
            }
            prev = now;
        } else {
            for h in rt.health()? {
                if let Some(node) = h.non_finite {
                    return Err(Diverged {
                        step: rt.step(),
                        node,
                    }
                    .into());
                }
            }
        }
        last_change = change.or(last_change);
        if outputs.due(rt.step()) {
            outputs.write(&mut rt)?;
        }
        observer(Event::Progress {
            step: rt.step(),
            target,
            mlups,
            change,
        });
        if st.stopped {
            break;
        }
        if change.is_some_and(|c| c < case.run.tolerance) {
            converged = true;
            break;
        }
    }

    let fields = if convergence { prev } else { rt.fields()? };
    watchdog(&fields, rt.step())?;
    let mass1 = fields.mass();
    outputs.finish(&mut rt, &fields)?;
    let (profiles, validation) =
        outputs.profiles(case, &lattice, &fields, matches_reference(case, &lattice))?;
    let devices: Vec<DeviceSummary> = rt
        .devices()
        .iter()
        .enumerate()
        .map(|(k, d)| {
            let c = compute[k].as_secs_f64();
            DeviceSummary {
                device: d.device,
                describe: d.describe.clone(),
                binding: match &d.binding {
                    Ok(b) => b.to_string(),
                    Err(e) => format!("unbound: {e}"),
                },
                z: [d.slab.z.start, d.slab.z.end],
                nodes: d.slab.nodes(),
                compute_s: c,
                wait_s: wait[k].as_secs_f64(),
                mlups: d.slab.nodes() as f64 * rt.step() as f64 / c.max(1e-12) / 1e6,
                exchange_bytes_per_step: (usize::from(d.slab.has_below())
                    + usize::from(d.slab.has_above()))
                    * interface_bytes_per_step(&d.slab, case.numerics.precision),
            }
        })
        .collect();
    let busy: f64 = compute.iter().map(|d| d.as_secs_f64()).sum();
    let idle: f64 = wait.iter().map(|d| d.as_secs_f64()).sum();
    let summary = RunSummary {
        version: env!("CARGO_PKG_VERSION").to_string(),
        case: case.clone(),
        lattice,
        backend: rt.backend().to_string(),
        steps: rt.step(),
        converged,
        last_change,
        wall_s: stepping.as_secs_f64(),
        mlups: domain.nodes() as f64 * rt.step() as f64 / stepping.as_secs_f64().max(1e-12) / 1e6,
        parallel_efficiency: if busy + idle > 0.0 {
            busy / (busy + idle)
        } else {
            1.0
        },
        devices,
        mass: [mass0, mass1],
        validation,
        units: case
            .unit_scales()
            .map(|u| UnitsReport::new(u, rt.step(), stepping.as_secs_f64())),
        timings: Timings {
            setup_s: setup.as_secs_f64(),
            stepping_s: stepping.as_secs_f64(),
            output_s: outputs.time.as_secs_f64(),
            total_s: started.elapsed().as_secs_f64(),
        },
        outputs: outputs
            .written
            .iter()
            .cloned()
            .chain(["summary.json".to_string()])
            .collect(),
    };
    rt.shutdown();
    summary
        .write_json(&case.output.dir.join("summary.json"))
        .map_err(|e| anyhow::anyhow!("cannot write summary.json: {e}"))?;
    Ok(Outcome {
        summary,
        fields,
        profiles,
    })
}

fn watchdog(f: &Fields, step: u64) -> Result<(), Diverged> {
    let [nx, ny, _] = f.size;
    for p in 0..f.rho.len() {
        let finite = f.rho[p].is_finite()
            && f.ux[p].is_finite()
            && f.uy[p].is_finite()
            && f.uz[p].is_finite();
        if !f.solid[p] && !finite {
            return Err(Diverged {
                step,
                node: [p % nx, (p / nx) % ny, f.z0 + p / (nx * ny)],
            });
        }
    }
    Ok(())
}

fn prepare_output(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| {
        UsageError::new("--output", format!("cannot create {}: {e}", dir.display()))
    })?;
    let probe = dir.join(".thelma-write-test");
    std::fs::write(&probe, b"").map_err(|e| {
        UsageError::new(
            "--output",
            format!("{} is not writable: {e}", dir.display()),
        )
    })?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}
