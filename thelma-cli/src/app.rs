//! One run of a case: validate, build the geometry, start the runtime, step with progress, watchdog
//! and convergence checks, then gather fields and write the results.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use thelma_compute::ModelParams;
use thelma_core::physics::{ThermalFace, D3Q19};
use thelma_core::{BoundaryKind, CaseConfig, CaseKind, LatticeParams};
use thelma_core::{ComputeError, Fields, SIDE_COUNT};
use thelma_core::{DeviceInfo, Runtime, RuntimeError};
use thelma_core::{Domain, Face, FacePatch, SlabSpec};
use thelma_geometry::{immersed_bodies, Geometry};
use thelma_results::Comparison;
use thelma_results::{wall_nusselt, Profile, WallNusselt};
use thelma_results::{
    DeviceSummary, RunSummary, SteerAction, Steering, StopReason, Timings, UnitsReport,
};

use crate::checkpoint::Steered;
use crate::cluster::Job;
use crate::live::{self, Due, LiveServer};
use crate::outputs::Outputs;
use crate::samples::{self, Samples};
use crate::{backend, checkpoint, preflight, watchdog};

pub use crate::error::UsageError;

pub use crate::watchdog::Diverged;

/// What a run tells its observer as it goes.
pub enum Event<'a> {
    Started {
        lattice: &'a LatticeParams,
        note: &'a str,
        devices: &'a [DeviceInfo],
        nodes: usize,
        /// Whether the messages between ranks travel while the interiors are updated.
        overlapped: bool,
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
        && case.domain.periodic == [false; 3]
        && nx == ny
        && ny == nz
        && case.domain.obstacles.is_empty()
        && case.body.is_empty()
        && (lattice.reynolds - 1000.0).abs() < 1e-6 * 1000.0
}

/// Runs `case`, reporting to `observer`; `stop` ends it early (after the current step) and still
/// writes the outputs.
pub fn run_case(
    case: &CaseConfig,
    stop: Arc<AtomicBool>,
    observer: &mut dyn FnMut(Event),
) -> Result<Outcome> {
    run_case_from(case, None, stop, observer)
}

/// [`run_case`], continuing from the checkpoint at `resume` (a file, or a folder holding
/// `checkpoint.thelma`) when given. `case` must keep the checkpoint's domain, physics and numerics
/// (`RunArgs::into_case` sees to that).
pub fn run_case_from(
    case: &CaseConfig,
    resume: Option<&Path>,
    stop: Arc<AtomicBool>,
    observer: &mut dyn FnMut(Event),
) -> Result<Outcome> {
    run_case_in(case, resume, stop, observer, None)
}

/// What every process of a run prepares alike: the checked case, its geometry and immersed
/// bodies, and the backend's selection with the layout of the slabs.
struct Prepared {
    lattice: LatticeParams,
    geometry: Arc<Geometry>,
    immersed: thelma_core::physics::ImmersedBodies,
    uniform_force: Option<[f64; 3]>,
    sel: backend::Selection,
}

/// `live`: the run is served live (its held temperatures may be steered); `resume`: the checkpoint
/// it continues from, whose steered held temperatures the run holds from its first step.
fn prepare(
    case: &CaseConfig,
    job: Option<&Job>,
    live: bool,
    resume: Option<&Path>,
) -> Result<Prepared> {
    let lattice = case
        .validate()
        .map_err(|e| UsageError::new(e.flag, e.message))?;
    let geometry = Arc::new(
        Geometry::from_case(case).map_err(|e| UsageError::new("--config", e.to_string()))?,
    );
    if !geometry.has_fluid() {
        // Nothing would move and the mass drift would be 0/0.
        return Err(UsageError::new(
            "--config",
            "domain.obstacles: the obstacles and bodies cover every node; there is no fluid to simulate",
        )
        .into());
    }
    samples::probe_nodes(case, &geometry)?;
    let immersed = immersed_bodies(case).map_err(|e| UsageError::new("--config", e.to_string()))?;
    let mut params = ModelParams {
        steered_temperatures: live,
        overlapped_steps: job.is_some_and(|j| j.cluster().size() > 1)
            && thelma_core::overlap_wanted(),
        ..ModelParams::new(case, &lattice, geometry.clone())
    };
    // Held temperatures a resumed run's checkpoint kept (a live view steered them) are the run's
    // from its first step: the modules are made with them (the CUDA module compiles them into its
    // kernels unless the run is served live again).
    if let (Some(path), Some(setup)) = (resume, params.thermal.as_mut()) {
        let header = checkpoint::read_header(path)
            .map_err(|e| UsageError::new("--resume", format!("{e:#}")))?;
        if let Some(held) = header.held.filter(|h| !setup.set_held(h)) {
            return Err(UsageError::new(
                "--resume",
                format!(
                    "the checkpoint holds {} held temperatures, the case's temperature lattice {}",
                    held.len(),
                    setup.held_table().len()
                ),
            )
            .into());
        }
    }
    let uniform_force = params.model.force;
    let sel = backend::select(case, params, job)?;
    preflight::check_grid(case, &sel.layout, sel.factory.backend())?;
    preflight::check(case, &*sel.factory, &sel.layout, sel.rank, sel.host)?;
    preflight::check_immersed(case, &immersed, &*sel.factory, &sel.devices, sel.host)?;
    Ok(Prepared {
        lattice,
        geometry,
        immersed,
        uniform_force,
        sel,
    })
}

/// Serves, as rank r > 0 of the cluster job `job`, this rank's slabs of `case` for rank 0's run
/// ([`run_case_in`]), until rank 0 shuts them down.
/// `live` and `resume` are the run's (rank 0's), which every rank is started with.
pub fn serve_rank(
    case: &CaseConfig,
    job: &Job,
    stop: Arc<AtomicBool>,
    live: bool,
    resume: Option<&Path>,
) -> Result<()> {
    let p = prepare(case, Some(job), live, resume)?;
    Runtime::serve(p.sel.factory, &p.sel.layout, job.cluster(), stop)?;
    Ok(())
}

/// [`run_case_from`] as rank 0 of the cluster job `job` when given: the coordinator of every
/// slab, the other ranks serving theirs ([`serve_rank`]).
pub fn run_case_in(
    case: &CaseConfig,
    resume: Option<&Path>,
    stop: Arc<AtomicBool>,
    observer: &mut dyn FnMut(Event),
    job: Option<&Job>,
) -> Result<Outcome> {
    run_case_live(case, resume, stop, observer, job, None)
}

/// [`run_case_in`], served live by `live` when given: it shows the run and steers it between runs
/// of steps (`thelma run --live`).
pub fn run_case_live(
    case: &CaseConfig,
    resume: Option<&Path>,
    stop: Arc<AtomicBool>,
    observer: &mut dyn FnMut(Event),
    job: Option<&Job>,
    mut live: Option<&mut LiveServer>,
) -> Result<Outcome> {
    let started = Instant::now();
    let Prepared {
        lattice,
        geometry,
        immersed,
        uniform_force,
        sel,
    } = prepare(case, job, live.is_some(), resume)?;
    let resumed = match resume {
        Some(path) => Some(load_resume(case, path)?),
        None => None,
    };
    // Created only once everything else is known to be right, so refused input leaves no folder;
    // a folder this run created is removed again if the devices then refuse the geometry.
    let mut out_dir = OutputDir::prepare(&case.output.dir)?;
    let domain = Domain::new(case.domain.size, case.domain.periodic);
    let started_rt = match job {
        Some(job) => Runtime::start_cluster(sel.factory, &sel.layout, job.cluster(), stop),
        None => Runtime::start_layout(sel.factory, &sel.layout, stop),
    };
    let mut rt = started_rt.map_err(|e| match e {
        // A geometry the devices cannot represent is the case's fault, not the device's.
        RuntimeError::Device {
            error: ComputeError::Geometry(m),
            ..
        } => anyhow::Error::from(UsageError::new("--config", m)),
        e => e.into(),
    })?;
    if job.is_some() && (case.run.checkpoint_every > 0 || live.is_some()) {
        check_shared(&mut rt, &case.output.dir)?;
    }
    out_dir.keep();
    rt.set_averaging(case.averaging());
    rt.set_immersed(immersed, uniform_force)?;
    // The last state known to be healthy on disk: the checkpoint resumed from, then each one saved.
    let mut saved: Option<(u64, PathBuf)> = None;
    // What the live view (of this run or of the one resumed) steered: every checkpoint keeps it,
    // with the scale the temperature lattice is stored under.
    let mut steered = Steered::default();
    let store_scale = case.thermal_setup(&lattice).map(|s| s.store_scale);
    if let Some((ck, path)) = resumed {
        ck.restore(&mut rt)?;
        saved = Some((ck.header.step, path));
        steered = ck.header.steered();
    }
    if let Some(live) = live.as_deref_mut() {
        if steered.any() {
            live.resume(&steered);
        }
        live.prepare(&mut rt)?;
    }
    let dt = case.unit_scales().map(|u| u.dt);
    // Steps per second of the last run of steps: the live view's pictures are timed by it.
    let mut rate = 0.0;
    observer(Event::Started {
        lattice: &lattice,
        note: &sel.note,
        devices: rt.devices(),
        nodes: domain.nodes(),
        overlapped: rt.overlaps(),
    });

    let check = case.resolved_check_every();
    let guard = case.run.watchdog_every;
    let bounds = case.run.density_bounds;
    let every_checkpoint = case.run.checkpoint_every;
    let target = case.run.steps.unwrap_or(case.run.max_steps);
    let convergence = case.run.steps.is_none();
    let step0 = rt.step();
    // The run's outputs (their time series included) also receive the last healthy state on divergence.
    let mut outputs = Outputs::new(case);
    if resume.is_some() {
        outputs.resume_series(step0);
    }
    let slabs: Vec<SlabSpec> = rt.devices().iter().map(|d| d.slab.clone()).collect();
    let mut samples = Samples::new(case, &geometry, &slabs, resume.is_some())?;
    if resume.is_none() {
        samples.sample(&mut rt)?;
    }
    // The starting state, judged by the fields and held in memory: what a diverged run writes when
    // no checkpoint is newer. Later states are judged on the devices (`watchdog::inspect`), and
    // their fields are gathered only for outputs and at the end.
    let prev = rt.fields()?;
    let prev_step = step0;
    let mut tally = Tally {
        case,
        lattice,
        domain,
        started,
        setup: started.elapsed(),
        step0,
        stepping: Duration::ZERO,
        compute: vec![Duration::ZERO; rt.devices().len()],
        wait: vec![Duration::ZERO; rt.devices().len()],
        mass0: prev.mass(),
        last_change: None,
        steering: Vec::new(),
    };
    if let Some(f) = watchdog::judge_fields(&prev, bounds) {
        // A resumed state that is already unhealthy: there is no healthy state to write.
        return Err(diverged(
            f,
            step0,
            &tally,
            &mut rt,
            &mut outputs,
            None,
            &None,
        ));
    }
    // The convergence measure runs on the devices (`Runtime::velocity_change`): this first call
    // records the starting velocity, each check then compares with the one before.
    let mut measured = step0;
    if convergence {
        rt.velocity_change()?;
    }
    let mut converged = false;
    let mut at_resolution = false;
    let mut interrupted = false;
    // Stopped from the live view's page: one more step, then as Ctrl-C (outputs, checkpoint), but
    // without the Ctrl-C flag, so that a Ctrl-C after it still gets its graceful stop first.
    let mut page_stop = false;
    while rt.step() < target {
        // Run to the next step at which something is due: a check, the watchdog, a checkpoint, an
        // output.
        let chunk = [check, guard, every_checkpoint]
            .into_iter()
            .filter(|&k| k > 0)
            .map(|k| k - rt.step() % k)
            .fold(target - rt.step(), u64::min);
        let chunk = outputs.clamp_chunk(rt.step(), chunk);
        let chunk = samples.clamp_chunk(rt.step(), chunk);
        let chunk = live
            .as_deref()
            .map_or(chunk, |l| l.clamp_chunk(rt.step(), chunk, rate));
        let chunk = if page_stop { 1 } else { chunk };
        let mut st = rt.run(chunk)?;
        st.stopped |= page_stop;
        rate = chunk as f64 / st.wall.as_secs_f64().max(1e-9);
        tally.stepping += st.wall;
        for (k, w) in st.workers.iter().enumerate() {
            tally.compute[k] += w.compute;
            tally.wait[k] += w.wait;
        }
        interrupted = st.stopped;
        let step = rt.step();
        let at = |k: u64| k > 0 && step % k == 0;
        let mlups = tally.mlups(step);
        let progress = at(check) || step >= target || st.stopped;
        let mut change = None;
        let mut raw_change = None;
        let mut finding = None;
        if at(guard) || at(every_checkpoint) || progress {
            finding = watchdog::inspect(&mut rt, bounds)?;
        }
        if convergence && progress && finding.is_none() {
            let sums = rt.velocity_change()?;
            if step > measured {
                change = sums.map(|s| s.relative() * 1000.0 / (step - measured) as f64);
                // The storage's resolution is judged over whole check intervals only (a check at
                // an interruption, a resume or the last step may follow the previous one closely).
                if step - measured >= check && !st.stopped {
                    raw_change = sums.map(|s| s.relative());
                }
            }
            measured = step;
        }
        if let Some(f) = finding {
            let held = Some((prev_step, &prev));
            return Err(diverged(
                f,
                step,
                &tally,
                &mut rt,
                &mut outputs,
                held,
                &saved,
            ));
        }
        converged = change.is_some_and(|c| c < case.run.tolerance);
        // 16-bit storage stops where its rounding hides any further change.
        let floor = case.numerics.precision.resolution();
        at_resolution = !converged && raw_change.zip(floor).is_some_and(|(c, f)| c < f);
        converged |= at_resolution;
        // A checkpoint is taken only of a state that has just passed the watchdog: every N steps, and
        // at the end (done, converged or stopped) so that a run can be extended or continued.
        let end = step >= target || st.stopped || converged;
        if every_checkpoint > 0
            && (at(every_checkpoint) || end)
            && saved.as_ref().is_none_or(|s| s.0 != step)
        {
            checkpoint::save(&case.output.dir, case, &mut rt, &steered, store_scale)?;
            saved = Some((step, case.output.dir.join(checkpoint::FILE_NAME)));
        }
        tally.last_change = change.or(tally.last_change);
        samples.sample(&mut rt)?;
        if outputs.due(step) {
            outputs.write(&mut rt)?;
        }
        if progress {
            observer(Event::Progress {
                step,
                target,
                mlups,
                change,
            });
        }
        if let Some(live) = live.as_deref_mut() {
            let figures = live::Figures {
                step,
                target,
                mlups,
                change: tally.last_change,
                dt,
                probes: samples.probe_speeds(),
            };
            let done = st.stopped || converged || step >= target;
            if steer(
                live,
                &figures,
                done,
                SteerContext {
                    case,
                    bounds,
                    rt: &mut rt,
                    outputs: &mut outputs,
                    saved: &mut saved,
                    steered: &mut steered,
                    store_scale,
                },
            )? {
                page_stop = true;
            }
            tally.steering.clone_from(&live.log);
        }
        if st.stopped || converged {
            break;
        }
    }

    let mut fields = rt.fields()?;
    if let Some(f) = watchdog::judge_fields(&fields, bounds) {
        let (step, held) = (rt.step(), Some((prev_step, &prev)));
        return Err(diverged(
            f,
            step,
            &tally,
            &mut rt,
            &mut outputs,
            held,
            &saved,
        ));
    }
    let mass1 = fields.mass();
    // The time averages, gathered once for the last field output and the [[line]] profiles.
    if case.output.average_from.is_some() {
        fields.mean = rt.mean_sums()?.mean().map(Box::new);
    }
    outputs.finish(&mut rt, &fields)?;
    if let Some(name) = samples::write_lines(case, &fields, fields.mean.as_deref())? {
        samples.written.push(name);
    }
    // A lid steered away from the case's speed no longer runs the reference's flow.
    let reference = matches_reference(case, &lattice) && !steered.any();
    let (profiles, validation) = outputs.profiles(case, &lattice, &fields, reference)?;
    let stop_reason = if at_resolution {
        StopReason::Resolution
    } else if converged {
        StopReason::Converged
    } else if interrupted && rt.step() < target {
        StopReason::Interrupted
    } else if convergence {
        StopReason::MaxSteps
    } else {
        StopReason::Steps
    };
    let mut summary = tally.summary(&rt, stop_reason, mass1, validation, &outputs);
    summary.forces = samples.finish()?;
    summary.nusselt = nusselt_walls(case, &lattice, &fields, steered.held.as_deref());
    if let Some(live) = live {
        summary.steering = live.log.clone();
        live.end(rt.step(), stop_reason.describe());
    }
    let last = summary.outputs.len() - 1;
    summary
        .outputs
        .splice(last..last, samples.written.iter().cloned());
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

/// What steering may touch in the run loop.
struct SteerContext<'a> {
    case: &'a CaseConfig,
    bounds: [f64; 2],
    rt: &'a mut Runtime,
    outputs: &'a mut Outputs,
    saved: &'a mut Option<(u64, PathBuf)>,
    steered: &'a mut Steered,
    /// The temperature lattice's store scale, which every checkpoint records.
    store_scale: Option<f64>,
}

/// Bytes crossing a subdomain's channels per step, both ways: each side with a neighbour carries
/// its crossing populations (and the temperature lattice's across faces).
fn exchange_bytes(slab: &SlabSpec, case: &CaseConfig) -> usize {
    let bytes = case.numerics.precision.bytes();
    (0..SIDE_COUNT)
        .filter(|&s| slab.neighbour(s).is_some())
        .map(|s| {
            // The temperature lattice's crossing population across every face (none across an
            // edge): one value per face node.
            let thermal = if case.thermal.is_some() && s < 6 {
                slab.side_nodes(s)
            } else {
                0
            };
            2 * (slab.side_values(&D3Q19, s) + thermal) * bytes
        })
        .sum()
}

/// Between two runs of steps: hands the live view its picture and figures, then applies the
/// viewers' commands, waiting while paused (Ctrl-C still ends a pause). `true` when a viewer
/// stopped the run. `done`: the run ends here anyway, so it does not wait in a pause.
fn steer(
    live: &mut LiveServer,
    figures: &live::Figures,
    done: bool,
    cx: SteerContext,
) -> Result<bool> {
    live.publish(cx.rt, figures, false)?;
    let step = cx.rt.step();
    let mut stop = false;
    loop {
        for cmd in live.poll() {
            let Some((due, record)) = live.apply(cmd, cx.rt, step)? else {
                continue;
            };
            match due {
                Due::Write => cx.outputs.write(cx.rt)?,
                Due::Checkpoint => {
                    // Only a state that passes the watchdog replaces the last healthy one.
                    if let Some((node, _)) = watchdog::inspect(cx.rt, cx.bounds)? {
                        live.refuse(&format!(
                            "no checkpoint written: the state fails the watchdog at node {node:?}"
                        ));
                        continue;
                    }
                    checkpoint::save(
                        &cx.case.output.dir,
                        cx.case,
                        cx.rt,
                        cx.steered,
                        cx.store_scale,
                    )?;
                    *cx.saved = Some((step, cx.case.output.dir.join(checkpoint::FILE_NAME)));
                }
                Due::Stop => stop = true,
                Due::Nothing => {}
            }
            match record.action {
                SteerAction::Wall { .. } => cx.steered.walls = Some(live.walls().to_vec()),
                SteerAction::Temperature { .. } => cx.steered.held = Some(live.held().to_vec()),
                _ => {}
            }
            // Acknowledged first; then a new view's picture, and after a pause or a resume the
            // figures again (their `paused` is what a viewer keeps: one sent before the change
            // may reach it after the acknowledgement).
            let again = matches!(
                record.action,
                SteerAction::View { .. } | SteerAction::Pause | SteerAction::Resume { .. }
            );
            live.done(record);
            if again {
                live.publish(cx.rt, figures, true)?;
            }
        }
        // Nobody left to resume it (a closed tab, a dropped tunnel): it resumes by itself.
        if let Some(record) = live.resume_unattended(step) {
            live.done(record);
            live.publish(cx.rt, figures, true)?;
        }
        if !live.paused() || stop || done || cx.rt.stop_flag().load(Ordering::SeqCst) {
            return Ok(stop);
        }
    }
}

/// The Nusselt number of each face `[thermal] nusselt` names and of each `[[boundary]]` wall with
/// `nusselt = true` (a whole face or a patch), from the fields' θ: the box's extent normal to the
/// face as the length, the spread of the held faces' and patches' θ as the difference. A face
/// averages over its held nodes, each with the θ its own rule (the face's or a patch's) holds:
/// `held`, where the live view steered them.
fn nusselt_walls(
    case: &CaseConfig,
    lattice: &LatticeParams,
    f: &Fields,
    held: Option<&[f64]>,
) -> Vec<WallNusselt> {
    let (Some(t), Some(mut setup)) = (&case.thermal, case.thermal_setup(lattice)) else {
        return Vec::new();
    };
    if let Some(h) = held {
        setup.set_held(h);
    }
    let Some(delta) = setup.held_spread() else {
        return Vec::new();
    };
    let held = |face: Face, p: [usize; 3]| match setup.face_at(face as usize, p) {
        ThermalFace::Held(theta) => Some(theta),
        _ => None,
    };
    let faces = t.nusselt.iter().map(|&face| (face, None));
    let walls = case
        .boundary
        .iter()
        .filter(|b| b.nusselt)
        .map(|b| (b.face, case.face_patch(b).expect("the case was validated")));
    faces
        .chain(walls)
        .filter_map(|(face, patch): (Face, Option<FacePatch>)| {
            let length = case.domain.size[face.axis()] as f64;
            let wall = |p: [usize; 3]| {
                if patch.is_some_and(|q| !q.holds(p)) {
                    return None;
                }
                held(face, p)
            };
            wall_nusselt(f, face, wall, length, delta).map(|nusselt| WallNusselt {
                face,
                patch: patch.map(|q| [q.lo, q.hi]),
                nusselt,
            })
        })
        .collect()
}

/// What the run loop has measured so far: the summary is made of it when the run ends, and when it
/// diverges.
struct Tally<'a> {
    case: &'a CaseConfig,
    lattice: LatticeParams,
    domain: Domain,
    started: Instant,
    setup: Duration,
    step0: u64,
    stepping: Duration,
    compute: Vec<Duration>,
    wait: Vec<Duration>,
    mass0: f64,
    last_change: Option<f64>,
    /// What the live view changed so far, for a summary written when the run diverges.
    steering: Vec<Steering>,
}

impl Tally<'_> {
    /// Aggregate MLUPS of the stepping up to `step`.
    fn mlups(&self, step: u64) -> f64 {
        self.domain.nodes() as f64 * (step - self.step0) as f64
            / self.stepping.as_secs_f64().max(1e-12)
            / 1e6
    }

    fn summary(
        &self,
        rt: &Runtime,
        stop_reason: StopReason,
        mass1: f64,
        validation: Option<Comparison>,
        outputs: &Outputs,
    ) -> RunSummary {
        let (case, steps) = (self.case, rt.step().saturating_sub(self.step0));
        let devices: Vec<DeviceSummary> = rt
            .devices()
            .iter()
            .enumerate()
            .map(|(k, d)| {
                let c = self.compute[k].as_secs_f64();
                DeviceSummary {
                    device: d.device,
                    describe: d.describe.clone(),
                    binding: match &d.binding {
                        Ok(b) => b.to_string(),
                        Err(e) => format!("unbound: {e}"),
                    },
                    x: [d.slab.x.start, d.slab.x.end],
                    y: [d.slab.y.start, d.slab.y.end],
                    z: [d.slab.z.start, d.slab.z.end],
                    nodes: d.slab.nodes(),
                    compute_s: c,
                    wait_s: self.wait[k].as_secs_f64(),
                    step_ms: 1e3 * c / steps.max(1) as f64,
                    mlups: d.slab.nodes() as f64 * steps as f64 / c.max(1e-12) / 1e6,
                    exchange_bytes_per_step: exchange_bytes(&d.slab, case),
                    transports: [d.transports[0], d.transports[1]]
                        .map(|t| t.map(|t| t.name().to_string())),
                }
            })
            .collect();
        let busy: f64 = self.compute.iter().map(|d| d.as_secs_f64()).sum();
        let idle: f64 = self.wait.iter().map(|d| d.as_secs_f64()).sum();
        let stepping = self.stepping.as_secs_f64();
        RunSummary {
            version: env!("CARGO_PKG_VERSION").to_string(),
            case: case.clone(),
            lattice: self.lattice,
            backend: rt.backend().to_string(),
            steps: rt.step(),
            converged: matches!(stop_reason, StopReason::Converged | StopReason::Resolution),
            stop_reason,
            last_change: self.last_change,
            wall_s: stepping,
            mlups: self.mlups(rt.step().max(self.step0)),
            compute_share: if busy + idle > 0.0 {
                busy / (busy + idle)
            } else {
                1.0
            },
            devices,
            mass: [self.mass0, mass1],
            open: case.boundary.iter().any(|b| {
                matches!(
                    b.kind,
                    BoundaryKind::Velocity | BoundaryKind::Pressure | BoundaryKind::Outflow
                )
            }),
            validation,
            units: case
                .unit_scales()
                .map(|u| UnitsReport::new(u, rt.step(), stepping)),
            timings: Timings {
                setup_s: self.setup.as_secs_f64(),
                stepping_s: stepping,
                output_s: outputs.time.as_secs_f64(),
                total_s: self.started.elapsed().as_secs_f64(),
            },
            outputs: outputs
                .written
                .iter()
                .cloned()
                .chain(["summary.json".to_string()])
                .collect(),
            forces: Vec::new(),
            nusselt: Vec::new(),
            steering: self.steering.clone(),
        }
    }
}

/// Loads the checkpoint to resume from; a missing, foreign or damaged one is bad input.
fn load_resume(case: &CaseConfig, path: &Path) -> Result<(checkpoint::Checkpoint, PathBuf)> {
    let ck = checkpoint::load(path).map_err(|e| UsageError::new("--resume", format!("{e:#}")))?;
    let h = &ck.header;
    h.check_lattices(case)
        .map_err(|e| UsageError::new("--resume", format!("{e:#}")))?;
    if h.size != case.domain.size || h.precision != case.numerics.precision {
        return Err(UsageError::new(
            "--resume",
            format!(
                "the checkpoint holds a {:?} {} lattice, the case is {:?} {}",
                h.size,
                h.precision.name(),
                case.domain.size,
                case.numerics.precision.name()
            ),
        )
        .into());
    }
    h.check_store_scale(case)
        .map_err(|e| UsageError::new("--resume", format!("{e:#}")))?;
    let (flag, target) = match case.run.steps {
        Some(n) => ("--steps", n),
        None => ("--max-steps", case.run.max_steps),
    };
    if target < h.step {
        return Err(UsageError::new(
            flag,
            format!(
                "{target} is before the checkpoint's step {}: steps count from the start of the simulation",
                h.step
            ),
        )
        .into());
    }
    Ok((ck, checkpoint::resolve(path)))
}

/// Ends a diverged run: writes the newest healthy state it knows (`held`, the starting fields kept in
/// memory, or the last checkpoint when that is newer, reloaded into the devices)
/// with the usual writers, and returns the error that says where and when the run went wrong.
fn diverged(
    (node, reason): ([usize; 3], watchdog::Reason),
    step: u64,
    tally: &Tally,
    rt: &mut Runtime,
    outputs: &mut Outputs,
    held: Option<(u64, &Fields)>,
    saved: &Option<(u64, PathBuf)>,
) -> anyhow::Error {
    let case = tally.case;
    let reloaded = match saved {
        Some((s, path)) if held.is_none_or(|h| *s > h.0) => {
            let mut reload = || -> Result<Fields> {
                checkpoint::load(path)?.restore(rt)?;
                Ok(rt.fields()?)
            };
            reload().ok().map(|f| (*s, f))
        }
        _ => None,
    };
    let good = reloaded.as_ref().map(|(s, f)| (*s, f)).or(held);
    // The healthy state is in the outputs when its fields were written, or when it is the checkpoint.
    let last_good = good.and_then(|(s, f)| {
        let out = &mut *outputs;
        let before = out.written.len();
        let fields_written =
            out.write_slabs(s, std::slice::from_ref(f)).is_ok() && out.written.len() > before;
        // The case was validated before the run started; the parameters are derived again here.
        let profiles_written = case.validate().is_ok_and(|lattice| {
            matches!(out.profiles(case, &lattice, f, false), Ok((Some(_), _)))
        });
        if fields_written || profiles_written || reloaded.is_some() {
            Some(s)
        } else {
            None
        }
    });
    let mass1 = good.map_or(f64::NAN, |(_, f)| f.mass());
    let d = Diverged {
        step,
        node,
        reason,
        last_good,
        outputs: case.output.dir.clone(),
    };
    // The report of a diverged run, too: how far it got and how fast, and why it stopped. Best
    // effort: the error itself is what must come out.
    let mut summary = tally.summary(rt, StopReason::Diverged, mass1, None, outputs);
    summary.steps = step;
    let _ = summary.write_json(&case.output.dir.join("summary.json"));
    d.into()
}

/// The output folder of a run, locked against a second run writing into it (an advisory lock on
/// `.thelma.lock`, which holds the holder's pid; the system releases it when the process ends, however
/// it ends, so a lock is never left stale). A folder this run created is removed again when the value
/// is dropped before [`OutputDir::keep`], so input refused late leaves no folder behind either.
pub struct OutputDir {
    _lock: std::fs::File,
    created: Option<PathBuf>,
}

/// The lock file's name in the output folder.
pub const LOCK_FILE: &str = ".thelma.lock";

/// Refuses a cluster job whose output folder some rank cannot write into at the path rank 0 has
/// it, before any step: every rank writes its own blocks of each checkpoint there.
fn check_shared(rt: &mut Runtime, dir: &Path) -> Result<()> {
    // Named per run, as the temporary files that a later run removes are.
    let name = format!(".thelma-shared-{}.tmp", std::process::id());
    let probe = std::path::absolute(dir.join(name))
        .and_then(|p| std::fs::write(&p, b"").map(|()| p))
        .map_err(|e| {
            UsageError::new(
                "--output",
                format!("{} is not writable: {e}", dir.display()),
            )
        })?;
    let reached = rt.reach(&probe);
    let _ = std::fs::remove_file(&probe);
    for (s, why) in reached?.into_iter().enumerate() {
        if let Some(why) = why {
            return Err(UsageError::new(
                "--output",
                format!(
                    "{} is not reachable from rank {} ({why}): every rank writes its own blocks \
                     of each checkpoint, so the output folder must be on a file system all \
                     ranks share",
                    dir.display(),
                    rt.devices()[s].rank
                ),
            )
            .into());
        }
    }
    Ok(())
}

impl OutputDir {
    /// Creates `dir` if needed, checks that it can be written, takes its lock and removes the
    /// temporary files of atomic writes that an earlier run left when it was killed.
    pub fn prepare(dir: &Path) -> Result<Self> {
        // The outermost folder that does not exist yet is the one to remove on refusal.
        let created = dir
            .ancestors()
            .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
            .last()
            .map(Path::to_path_buf);
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
        let guard = OutputDir {
            _lock: lock(dir)?,
            created,
        };
        remove_temporaries(dir);
        Ok(guard)
    }

    /// The run has started: the folder stays, whatever happens next.
    pub fn keep(&mut self) {
        self.created = None;
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        if let Some(dir) = self.created.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Takes the advisory lock of `dir`, or says which process holds it.
fn lock(dir: &Path) -> Result<std::fs::File> {
    use std::io::{Read, Seek, Write};
    let path = dir.join(LOCK_FILE);
    let cannot = |e: std::io::Error| {
        UsageError::new("--output", format!("cannot lock {}: {e}", path.display()))
    };
    // Never truncated before it is locked: the holder's pid must stay readable to the refused.
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(cannot)?;
    match f.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut text = String::new();
            let _ = f.read_to_string(&mut text);
            let holder = match text.trim() {
                "" => String::new(),
                pid => format!(" (pid {pid})"),
            };
            return Err(UsageError::new(
                "--output",
                format!(
                    "{} is in use by another thelma run{holder}; wait for it to end or choose another folder",
                    dir.display()
                ),
            )
            .into());
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(cannot(e).into()),
    }
    // The pid is for people reading the refusal; the lock itself is what excludes.
    let _ = f
        .set_len(0)
        .and_then(|_| f.rewind())
        .and_then(|_| writeln!(f, "{}", std::process::id()));
    Ok(f)
}

/// Removes the temporary files (`.thelma-*.tmp`) that atomic writes leave when the process is killed
/// in the middle of one. Only for a folder this process holds the lock of, or is about to exit from.
pub fn remove_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if (name.starts_with(".thelma-") && name.ends_with(".tmp")) || name == ".thelma-write-test"
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}
