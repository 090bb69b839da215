//! `thelma run --live`: a page served while the run goes on, showing one plane of a chosen field,
//! the run's figures and its probes, and taking steering commands (pause, view, wall speeds,
//! outputs and checkpoints now, stop) that the run loop applies at step boundaries.
//!
//! The server runs on its own thread with its own tokio runtime; the run loop never waits for it.
//! The loop hands it the raw plane (`watch`: only the latest is kept) and its figures; a task
//! renders the picture off the loop's thread, and each viewer's task sends the latest picture when
//! its socket is ready, so a slow viewer skips frames instead of queuing them. Commands come back
//! through a bounded channel the loop drains between runs of steps, checked twice: by the server
//! against the case (a refusal goes back to the sender only) and by the loop before it acts.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use base64::Engine;
use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use serde::Deserialize;
use serde_json::{json, Value};
use thelma_core::physics::{ThermalFace, HELD_FACES, MAX_SPEED};
use thelma_core::{CaseConfig, PlaneFields, Runtime, ABSOLUTE_ZERO_C};
use thelma_results::vtk::Scales;
use thelma_results::{picture, LiveField, SteerAction, Steering};
use tokio::sync::{broadcast, watch};

use crate::checkpoint::Steered;
use crate::error::UsageError;

/// The page, shipped inside the binary.
const PAGE: &str = include_str!("page.html");
/// The default address: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8088";
/// How long a paused run waits with no viewer before it resumes, by default.
pub const DEFAULT_UNATTENDED: Duration = Duration::from_secs(60);
/// The largest message a viewer may send; commands are a few dozen bytes.
const MAX_MESSAGE: usize = 4096;
/// Commands waiting for the run loop; more are refused (a viewer flooding the socket).
const QUEUE: usize = 64;
const AXES: [&str; 3] = ["x", "y", "z"];

/// How the live view is served and refreshed (`--live`, `--live-remote`, `--live-every`,
/// `--live-ms`).
#[derive(Clone, Debug)]
pub struct LiveOptions {
    pub addr: SocketAddr,
    /// Whether an address other than loopback was allowed (`--live-remote`): every request then
    /// carries the access token.
    pub remote: bool,
    /// Steps between pictures at least.
    pub every: u64,
    /// Time between pictures at least.
    pub interval: Duration,
    /// How long a paused run waits with no viewer connected before it resumes by itself
    /// (`--live-idle`): a dropped tunnel never holds the run.
    pub unattended: Duration,
}

impl LiveOptions {
    /// Reads the options; a bad address, or one beyond loopback without `remote`, is bad input.
    pub fn new(addr: &str, remote: bool, every: u64, ms: u64) -> Result<Self, UsageError> {
        let addr: SocketAddr = addr.parse().map_err(|_| {
            UsageError::new(
                "--live",
                format!("`{addr}` is not an address and port such as {DEFAULT_ADDR} or [::1]:8088"),
            )
        })?;
        if !addr.ip().is_loopback() && !remote {
            return Err(UsageError::new(
                "--live",
                format!(
                    "{addr} is reachable from other machines; add --live-remote to serve there (with an access token)"
                ),
            ));
        }
        if every == 0 {
            return Err(UsageError::new("--live-every", "must be at least 1 step"));
        }
        Ok(Self {
            addr,
            remote,
            every,
            interval: Duration::from_millis(ms),
            unattended: DEFAULT_UNATTENDED,
        })
    }
}

/// A command from a viewer, as the page sends it.
///
/// Variants without values are written with braces: serde refuses unknown keys only in a
/// variant with fields' braces, and a command with stray keys is refused, not guessed at.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "cmd", rename_all = "lowercase", deny_unknown_fields)]
pub enum Steer {
    Pause {},
    Resume {},
    Stop {},
    View {
        field: String,
        axis: String,
        index: usize,
    },
    Wall {
        slot: usize,
        speed: f64,
    },
    Temperature {
        slot: usize,
        value: f64,
    },
    Write {},
    Checkpoint {},
}

/// What the run loop must do itself after a command the live view applied or passed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    Nothing,
    /// Write the field outputs now.
    Write,
    /// Save a checkpoint now.
    Checkpoint,
    /// Stop after the next step, as Ctrl-C does.
    Stop,
}

/// A wall-velocity slot as the page shows it.
#[derive(Clone, Debug)]
struct Wall {
    label: String,
    /// Its direction (unit vector) in the case, lattice units.
    direction: [f64; 3],
}

/// A held temperature (a wall's or an inlet's) as the page shows it.
#[derive(Clone, Debug)]
struct Held {
    label: String,
    /// Its entry in the held θ table (`ThermalSetup::held_table`).
    entry: usize,
}

/// What the server knows of the case to check commands, and the page's first message.
#[derive(Clone, Debug)]
struct Limits {
    size: [usize; 3],
    fields: Vec<LiveField>,
    walls: Vec<Wall>,
    /// Case units per lattice velocity.
    velocity: f64,
    unit: &'static str,
    temperatures: Vec<Held>,
    /// The case's reference temperature: a held θ is `T − t0`.
    t0: f64,
    /// The largest |T − t0| a held temperature may take, where buoyancy acts or the storage is
    /// 16-bit.
    theta_max: Option<f64>,
    /// Whether temperatures are °C or K (`[units]`): none below absolute zero.
    si: bool,
    temperature_unit: &'static str,
}

impl Limits {
    fn max_speed(&self) -> f64 {
        MAX_SPEED * self.velocity
    }

    /// The temperatures a held face or patch may be steered to: `(lo, hi)`, both open.
    fn temperature_range(&self) -> (f64, f64) {
        let reach = self.theta_max.unwrap_or(f64::INFINITY);
        let lo = self.t0 - reach;
        let lo = if self.si { lo.max(ABSOLUTE_ZERO_C) } else { lo };
        (lo, self.t0 + reach)
    }

    /// Checks a command against the case: `Err` is the refusal's message.
    fn check(&self, s: &Steer) -> Result<(), String> {
        match s {
            Steer::View { field, axis, index } => {
                let f = LiveField::parse(field)
                    .filter(|f| self.fields.contains(f))
                    .ok_or_else(|| {
                        format!(
                            "field `{field}`: expected one of {}",
                            self.fields
                                .iter()
                                .map(|f| f.name())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    })?;
                let _ = f;
                let a = AXES
                    .iter()
                    .position(|n| n == axis)
                    .ok_or_else(|| format!("axis `{axis}`: expected x, y or z"))?;
                if *index >= self.size[a] {
                    return Err(format!(
                        "index {index}: the domain has {} planes along {axis}",
                        self.size[a]
                    ));
                }
                Ok(())
            }
            Steer::Wall { slot, speed } => {
                let w = self.walls.get(*slot).ok_or_else(|| {
                    format!(
                        "wall {slot}: the case has {} moving walls",
                        self.walls.len()
                    )
                })?;
                if w.direction == [0.0; 3] {
                    return Err(format!(
                        "{} rests in the case: it has no direction to move in",
                        w.label
                    ));
                }
                let max = self.max_speed();
                if !speed.is_finite() || *speed < 0.0 || *speed >= max {
                    return Err(format!(
                        "{} speed {speed}: outside [0, {}) {} (Mach = U√3 in lattice units)",
                        w.label,
                        thelma_core::num(max),
                        self.unit
                    ));
                }
                Ok(())
            }
            Steer::Temperature { slot, value } => {
                let h = self.temperatures.get(*slot).ok_or_else(|| {
                    format!(
                        "temperature {slot}: the case holds {} temperatures",
                        self.temperatures.len()
                    )
                })?;
                let (lo, hi) = self.temperature_range();
                if !value.is_finite() || *value <= lo || *value >= hi {
                    let why = if self.theta_max.is_some() {
                        "the buoyant speed √(|g β (T − t0)| H) under the Mach limit, and in 16-bit \
                         storage what the stored populations hold"
                    } else {
                        "finite"
                    };
                    return Err(format!(
                        "{} temperature {value}: outside ({}, {}) {} ({why})",
                        h.label,
                        thelma_core::num(lo),
                        thelma_core::num(hi),
                        self.temperature_unit
                    ));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// The held temperatures of `case` the page can steer, in the held θ table's order; the largest
/// |T − t0| one may take: the buoyant free-fall speed `√(|g β θ| H)` over the domain's extent `H`
/// along gravity stays under the Mach limit the walls obey, and in 16-bit storage |θ| stays below
/// `ThermalSetup::held_bound` (`None` with neither); and the held θ table itself (empty without a
/// temperature lattice).
fn held_temperatures(case: &CaseConfig) -> (Vec<Held>, Option<f64>, Vec<f64>) {
    let Some(setup) = case.validate().ok().and_then(|l| case.thermal_setup(&l)) else {
        return (Vec::new(), None, Vec::new());
    };
    let periodic = case.domain.periodic;
    let kind = |b: &thelma_core::BoundaryConfig| {
        if b.kind == thelma_core::BoundaryKind::Velocity {
            "inlet"
        } else {
            "wall"
        }
    };
    // Each entry's boundary table: the faces' (a table without a patch), then the patches' in the
    // order the setup lists them (tables with a patch, on walled axes).
    let mut labels: Vec<Option<String>> = (0..HELD_FACES).map(|_| None).collect();
    for b in case.boundary.iter().filter(|b| !periodic[b.face.axis()]) {
        if b.patch.is_none() {
            labels[b.face as usize] = Some(format!("{} ({})", kind(b), b.face.name()));
        } else {
            labels.push(Some(format!("{} patch ({})", kind(b), b.face.name())));
        }
    }
    let rules = setup
        .faces
        .iter()
        .chain(setup.patches.iter().map(|(_, r)| r));
    let held = rules
        .zip(labels)
        .enumerate()
        .filter(|(_, (rule, _))| matches!(rule, ThermalFace::Held(_)))
        .map(|(entry, (_, label))| Held {
            label: label.unwrap_or_else(|| format!("face {entry}")),
            entry,
        })
        .collect();
    // The force per unit θ, −β g: its size |β g| and its direction, gravity's.
    let b = setup.model.buoyancy;
    let bn = b.iter().map(|v| v * v).sum::<f64>().sqrt();
    let extent: f64 = (0..3)
        .map(|a| (b[a] / bn).abs() * case.domain.size[a] as f64)
        .sum();
    let scale = bn * extent;
    let buoyant = (scale.is_finite() && scale > 0.0).then(|| MAX_SPEED * MAX_SPEED / scale);
    // In 16-bit storage, also what the stored populations hold under the case's scale.
    let stored = Some(setup.held_bound(case.numerics.precision)).filter(|b| b.is_finite());
    let theta_max = match (buoyant, stored) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    (held, theta_max, setup.held_table())
}

/// The plane the picture shows.
#[derive(Clone, Copy, Debug, PartialEq)]
struct View {
    field: LiveField,
    axis: usize,
    index: usize,
}

/// A plane handed to the renderer.
struct Raw {
    step: u64,
    view: View,
    plane: PlaneFields,
}

/// The run's figures a status message carries.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    pub step: u64,
    pub target: u64,
    pub mlups: f64,
    pub change: Option<f64>,
    /// Seconds per step with `[units]`.
    pub dt: Option<f64>,
    /// Each probe's name and latest speed (case units).
    pub probes: Vec<(String, f64)>,
}

/// What the server's tasks share.
struct Shared {
    hello: parking_lot::Mutex<Arc<String>>,
    raw: watch::Sender<Option<Arc<Raw>>>,
    frame: watch::Sender<Option<Arc<String>>>,
    png: parking_lot::Mutex<Option<Arc<Vec<u8>>>>,
    status: watch::Sender<Option<Arc<String>>>,
    events: broadcast::Sender<Arc<String>>,
    viewers: AtomicUsize,
    token: Option<String>,
    limits: Limits,
    scales: Scales,
    commands: Sender<Steer>,
}

/// The live view of one run: the server's thread and the run loop's side of it.
pub struct LiveServer {
    shared: Arc<Shared>,
    commands: Receiver<Steer>,
    addr: SocketAddr,
    opts: LiveOptions,
    stop_server: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    view: View,
    /// The walls' velocities now, lattice units (the geometry's table).
    walls: Vec<[f64; 3]>,
    /// The held θ table now (lattice units, `ThermalSetup::held_table`), empty without a
    /// temperature lattice.
    held: Vec<f64>,
    paused: bool,
    /// Since when a paused run has had no viewer.
    alone_since: Option<Instant>,
    /// The step and time of the last picture.
    last: Option<(u64, Instant)>,
    /// The step and time of the last status, for the real-time ratio.
    last_status: Option<(u64, Instant)>,
    target: u64,
    probes: Vec<String>,
    case_name: String,
    /// Every change applied, for `summary.json`.
    pub log: Vec<Steering>,
}

/// A random token of 128 bits, in hex.
fn token() -> Result<String, UsageError> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| {
        UsageError::new(
            "--live-remote",
            format!("no random source for the access token: {e}"),
        )
    })?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

impl LiveServer {
    /// Binds `opts.addr` (a port in use or not allowed is bad input) and serves `case`'s live view,
    /// titled `name`, from a thread of its own until dropped.
    pub fn start(opts: &LiveOptions, case: &CaseConfig, name: &str) -> Result<Self, UsageError> {
        let listener = TcpListener::bind(opts.addr).map_err(|e| {
            UsageError::new("--live", format!("cannot serve on {}: {e}", opts.addr))
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| UsageError::new("--live", format!("{}: {e}", opts.addr)))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| UsageError::new("--live", format!("{addr}: {e}")))?;
        let token = if opts.remote { Some(token()?) } else { None };
        let scales = crate::outputs::scales(case);
        let mut fields: Vec<LiveField> = LiveField::ALL.to_vec();
        if case.thermal.is_none() {
            fields.retain(|f| *f != LiveField::Temperature);
        }
        let velocity = case.unit_scales().map_or(1.0, |u| u.velocity);
        let moving = case.moving_walls();
        let walls: Vec<Wall> = moving
            .iter()
            .map(|(face, u, inlet, patch)| {
                let speed = u.iter().map(|v| v * v).sum::<f64>().sqrt();
                let kind = if *inlet {
                    "inlet"
                } else if case.domain.case == thelma_core::CaseKind::Cavity
                    && *face == thelma_core::Face::ZPlus
                    && patch.is_none()
                {
                    "lid"
                } else {
                    "wall"
                };
                Wall {
                    label: format!("{kind} ({})", face.name()),
                    direction: if speed > 0.0 {
                        u.map(|v| v / speed)
                    } else {
                        [0.0; 3]
                    },
                }
            })
            .collect();
        let (temperatures, theta_max, held) = held_temperatures(case);
        let limits = Limits {
            size: case.domain.size,
            fields,
            walls,
            velocity,
            unit: if case.unit_scales().is_some() {
                "m/s"
            } else {
                "lattice"
            },
            temperatures,
            t0: case.thermal.as_ref().map_or(0.0, |t| t.t0),
            theta_max,
            si: scales.si,
            temperature_unit: LiveField::Temperature.unit(&scales),
        };
        let (tx, rx) = bounded(QUEUE);
        let shared = Arc::new(Shared {
            hello: parking_lot::Mutex::new(Arc::new(String::new())),
            raw: watch::channel(None).0,
            frame: watch::channel(None).0,
            png: parking_lot::Mutex::new(None),
            status: watch::channel(None).0,
            events: broadcast::channel(64).0,
            viewers: AtomicUsize::new(0),
            token,
            limits,
            scales,
            commands: tx,
        });
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("thelma-live".into())
                .spawn(move || serve(listener, shared, stop_rx))
                .map_err(|e| UsageError::new("--live", format!("cannot start the server: {e}")))?
        };
        let [_, ny, _] = case.domain.size;
        let view = View {
            field: LiveField::Speed,
            axis: 1,
            index: ny / 2,
        };
        let probes = case
            .probe
            .iter()
            .enumerate()
            .map(|(k, p)| p.name.clone().unwrap_or_else(|| format!("probe{k}")))
            .collect();
        let case_name = name.to_string();
        let mut s = Self {
            shared,
            commands: rx,
            addr,
            opts: opts.clone(),
            stop_server: Some(stop_tx),
            thread: Some(thread),
            view,
            walls: moving.iter().map(|w| w.1).collect(),
            held,
            paused: false,
            alone_since: None,
            last: None,
            last_status: None,
            target: case.run.steps.unwrap_or(case.run.max_steps),
            probes,
            case_name,
            log: Vec::new(),
        };
        s.hello();
        Ok(s)
    }

    /// The page's address (with the access token where one is needed).
    pub fn url(&self) -> String {
        let host = match self.addr {
            SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
            a => a.to_string(),
        };
        match &self.shared.token {
            Some(t) => format!("http://{host}/?token={t}"),
            None => format!("http://{host}/"),
        }
    }

    /// The walls' velocities now (lattice units): what a checkpoint keeps when they were steered.
    pub fn walls(&self) -> &[[f64; 3]] {
        &self.walls
    }

    /// The held θ table now (lattice units): what a checkpoint keeps when a temperature was
    /// steered.
    pub fn held(&self) -> &[f64] {
        &self.held
    }

    /// Starts from what a resumed run's checkpoint had steered.
    pub fn resume(&mut self, steered: &Steered) {
        if let Some(w) = steered
            .walls
            .as_ref()
            .filter(|w| w.len() == self.walls.len())
        {
            self.walls.clone_from(w);
        }
        if let Some(h) = steered.held.as_ref().filter(|h| h.len() == self.held.len()) {
            self.held.clone_from(h);
        }
        self.hello();
    }

    pub fn paused(&self) -> bool {
        self.paused
    }

    /// Viewers connected now.
    pub fn viewers(&self) -> usize {
        self.shared.viewers.load(Ordering::Relaxed)
    }

    /// The page's first message, made again whenever what it shows changes.
    fn hello(&mut self) {
        let l = &self.shared.limits;
        let msg = json!({
            "type": "hello",
            "case": self.case_name,
            "size": l.size,
            "fields": l.fields.iter().map(|f| json!({
                "name": f.name(),
                "label": f.label(self.view.axis),
                "unit": f.unit(&self.shared.scales),
            })).collect::<Vec<_>>(),
            "walls": l.walls.iter().zip(&self.walls).enumerate().map(|(slot, (w, u))| json!({
                "slot": slot,
                "label": w.label,
                "speed": speed(u) * l.velocity,
                "max": l.max_speed(),
                "unit": l.unit,
            })).collect::<Vec<_>>(),
            "temperatures": l.temperatures.iter().enumerate().map(|(slot, h)| {
                let (lo, hi) = l.temperature_range();
                json!({
                    "slot": slot,
                    "label": h.label,
                    "value": self.held.get(h.entry).map(|t| t + l.t0),
                    "min": lo.is_finite().then_some(lo),
                    "max": hi.is_finite().then_some(hi),
                    "unit": l.temperature_unit,
                })
            }).collect::<Vec<_>>(),
            "view": self.view_json(),
            "paused": self.paused,
            "target": self.target,
            "probes": self.probes,
        });
        *self.shared.hello.lock() = Arc::new(msg.to_string());
    }

    fn view_json(&self) -> Value {
        json!({
            "field": self.view.field.name(),
            "axis": AXES[self.view.axis],
            "index": self.view.index,
        })
    }

    /// The longest run from `step` that does not pass the next picture, at `steps_per_s`: its
    /// steps and its time both due (one alone would cut the run into single steps while the other
    /// waits).
    pub fn clamp_chunk(&self, step: u64, chunk: u64, steps_per_s: f64) -> u64 {
        let next = match self.last {
            None => step,
            Some((s, t)) => {
                let left = self.opts.interval.saturating_sub(t.elapsed()).as_secs_f64();
                let by_time = (left * steps_per_s).ceil();
                let by_time = if by_time.is_finite() {
                    by_time as u64
                } else {
                    0
                };
                (s + self.opts.every).max(step + by_time)
            }
        };
        chunk.min(next.saturating_sub(step).max(1))
    }

    /// Hands the server the run's figures and, when one is due (and someone watches), the
    /// picture's plane; `force` makes one now (a new view).
    pub fn publish(&mut self, rt: &mut Runtime, f: &Figures, force: bool) -> anyhow::Result<()> {
        let now = Instant::now();
        let due = force
            || self.last.is_none_or(|(s, t)| {
                f.step >= s + self.opts.every && now - t >= self.opts.interval
            });
        if !due {
            return Ok(());
        }
        if self.shared.viewers.load(Ordering::Relaxed) > 0 {
            let plane = rt.plane(self.view.axis, self.view.index)?;
            self.shared.raw.send_replace(Some(Arc::new(Raw {
                step: f.step,
                view: self.view,
                plane,
            })));
        }
        self.last = Some((f.step, now));
        // The real-time ratio over the time since the last status.
        let realtime = match (f.dt, self.last_status) {
            (Some(dt), Some((s, t))) if f.step > s && now > t => {
                Some((f.step - s) as f64 * dt / (now - t).as_secs_f64())
            }
            _ => None,
        };
        self.last_status = Some((f.step, now));
        let status = json!({
            "type": "status",
            "step": f.step,
            "target": f.target,
            "mlups": f.mlups,
            "realtime": realtime,
            "time_s": f.dt.map(|dt| f.step as f64 * dt),
            "change": f.change,
            "paused": self.paused,
            "probes": f.probes.iter().map(|(n, s)| json!({"name": n, "speed": s})).collect::<Vec<_>>(),
        });
        self.shared
            .status
            .send_replace(Some(Arc::new(status.to_string())));
        Ok(())
    }

    /// Makes planes before the first step, one through every slab or subdomain (each sizes its
    /// buffer for its largest plane on any axis), so that the buffers every picture reuses are
    /// allocated (on a full device, the run fails now, not at a viewer's first picture).
    pub fn prepare(&mut self, rt: &mut Runtime) -> anyhow::Result<()> {
        use anyhow::Context as _;
        let axis = self.view.axis;
        let mut starts: Vec<usize> = rt.devices().iter().map(|d| d.slab.origin()[axis]).collect();
        starts.sort_unstable();
        starts.dedup();
        for index in starts {
            rt.plane(axis, index)
                .context("the live view's picture buffers")?;
        }
        Ok(())
    }

    /// Resumes a run paused with no viewer connected for the options' `unattended` time: the
    /// change's record, which [`Self::done`] logs like a viewer's.
    pub fn resume_unattended(&mut self, step: u64) -> Option<Steering> {
        if !self.paused || self.viewers() > 0 {
            self.alone_since = None;
            return None;
        }
        let since = *self.alone_since.get_or_insert_with(Instant::now);
        if since.elapsed() < self.opts.unattended {
            return None;
        }
        self.paused = false;
        self.alone_since = None;
        Some(Steering {
            step,
            action: SteerAction::Resume {
                unattended_s: Some(self.opts.unattended.as_secs_f64()),
            },
        })
    }

    /// The commands waiting; while paused, waits up to 100 ms for one.
    pub fn poll(&mut self) -> Vec<Steer> {
        let mut got: Vec<Steer> = self.commands.try_iter().collect();
        if got.is_empty() && self.paused {
            if let Ok(c) = self.commands.recv_timeout(Duration::from_millis(100)) {
                got.push(c);
            }
        }
        got
    }

    /// Applies `cmd` at step `step` (the next to run): pause, resume and the view here, the walls
    /// on the runtime; what only the run loop can do comes back as [`Due`], with the change's
    /// record, which [`Self::done`] logs and acknowledges once the loop has acted. A command the
    /// case does not allow is refused again here (`None`).
    pub fn apply(
        &mut self,
        cmd: Steer,
        rt: &mut Runtime,
        step: u64,
    ) -> anyhow::Result<Option<(Due, Steering)>> {
        if let Err(m) = self.shared.limits.check(&cmd) {
            self.event(json!({"type": "refused", "message": m}));
            return Ok(None);
        }
        let l = &self.shared.limits;
        let (action, due) = match cmd {
            Steer::Pause {} => {
                self.paused = true;
                (SteerAction::Pause, Due::Nothing)
            }
            Steer::Resume {} => {
                self.paused = false;
                (SteerAction::Resume { unattended_s: None }, Due::Nothing)
            }
            Steer::Stop {} => {
                self.paused = false;
                (SteerAction::Stop, Due::Stop)
            }
            Steer::Write {} => (SteerAction::Write, Due::Write),
            Steer::Checkpoint {} => (SteerAction::Checkpoint, Due::Checkpoint),
            Steer::View { field, axis, index } => {
                let axis = AXES.iter().position(|a| *a == axis).expect("checked");
                self.view = View {
                    field: LiveField::parse(&field).expect("checked"),
                    axis,
                    index,
                };
                (
                    SteerAction::View {
                        field,
                        axis: AXES[axis].into(),
                        index,
                    },
                    Due::Nothing,
                )
            }
            Steer::Wall { slot, speed } => {
                let w = &l.walls[slot];
                let lattice = speed / l.velocity;
                let mut walls = self.walls.clone();
                walls[slot] = w.direction.map(|d| d * lattice);
                rt.set_wall_velocities(&walls)?;
                self.walls = walls;
                (
                    SteerAction::Wall {
                        slot,
                        label: w.label.clone(),
                        speed,
                        unit: l.unit.into(),
                    },
                    Due::Nothing,
                )
            }
            Steer::Temperature { slot, value } => {
                let h = &l.temperatures[slot];
                let mut held = self.held.clone();
                held[h.entry] = value - l.t0;
                rt.set_held_temperatures(&held)?;
                self.held = held;
                (
                    SteerAction::Temperature {
                        slot,
                        label: h.label.clone(),
                        value,
                        unit: l.temperature_unit.into(),
                    },
                    Due::Nothing,
                )
            }
        };
        Ok(Some((due, Steering { step, action })))
    }

    /// Logs a change the run has made and tells every viewer.
    pub fn done(&mut self, record: Steering) {
        let mut ack = serde_json::to_value(&record).expect("a record serialises");
        ack["cmd"] = ack["action"].clone();
        ack["type"] = json!("ack");
        ack["detail"] = json!(detail(&record.action));
        self.event(ack);
        self.log.push(record);
        self.hello();
    }

    /// Tells every viewer that a command could not be carried out.
    pub fn refuse(&self, message: &str) {
        self.event(json!({"type": "refused", "message": message}));
    }

    fn event(&self, v: Value) {
        // No viewer: nobody to tell.
        let _ = self.shared.events.send(Arc::new(v.to_string()));
    }

    /// Tells the viewers the run ended at `step` for `reason`, and gives them a moment to hear it.
    pub fn end(&mut self, step: u64, reason: &str) {
        self.event(json!({"type": "end", "step": step, "reason": reason}));
        if self.shared.viewers.load(Ordering::Relaxed) > 0 {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl LiveServer {
    /// Tells the viewers the run failed with `message`, at the step of the last picture.
    pub fn end_failed(&mut self, message: &str) {
        self.end(self.last.map_or(0, |l| l.0), message);
    }
}

impl Drop for LiveServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop_server.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn speed(u: &[f64; 3]) -> f64 {
    u.iter().map(|v| v * v).sum::<f64>().sqrt()
}

/// The log line of a change.
fn detail(a: &SteerAction) -> Option<String> {
    match a {
        SteerAction::View { field, axis, index } => Some(format!("{field} on {axis} = {index}")),
        SteerAction::Resume {
            unattended_s: Some(s),
        } => Some(format!(
            "by itself, paused {} s with no viewer",
            thelma_core::num(*s)
        )),
        SteerAction::Wall {
            label, speed, unit, ..
        } => Some(format!("{label} speed {} {unit}", thelma_core::num(*speed))),
        SteerAction::Temperature {
            label, value, unit, ..
        } => Some(format!(
            "{label} temperature {} {unit}",
            thelma_core::num(*value)
        )),
        _ => None,
    }
}

/// Lowers the calling thread (and the threads it starts later, which inherit it) to the lowest
/// scheduling priority: where the solver's threads fill every core (the CPU module), the server
/// and its drawing take the time they leave, not the time of a step. Best effort.
pub fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: `gettid` has no preconditions; `setpriority` on the calling thread's id only changes
    // that thread's nice value, and a failure (refused by the system) leaves it as it was.
    unsafe {
        let tid = libc::gettid();
        let _ = libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19);
    }
}

/// The server's thread: a runtime of its own, the renderer and the routes, until `stop`.
fn serve(listener: TcpListener, shared: Arc<Shared>, stop: tokio::sync::oneshot::Receiver<()>) {
    lower_priority();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("live view: cannot start its runtime: {e}");
            return;
        }
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("live view: {e}");
                return;
            }
        };
        tokio::spawn(render(shared.clone()));
        let app = Router::new()
            .route("/", get(page))
            .route("/ws", get(socket))
            .route("/frame.png", get(frame_png))
            .layer(axum::middleware::from_fn_with_state(shared.clone(), guard))
            .with_state(shared);
        // On stop the server is dropped, not drained: a connection that never finishes its request
        // must not keep the run from exiting.
        tokio::select! {
            _ = axum::serve(listener, app) => {}
            _ = stop => {}
        }
    });
    // Viewers' sockets may still be open: the runtime drops them without waiting.
    rt.shutdown_timeout(Duration::from_millis(100));
}

/// Turns each plane the loop hands over into the picture message, off the loop's thread.
async fn render(shared: Arc<Shared>) {
    let mut raw = shared.raw.subscribe();
    while raw.changed().await.is_ok() {
        let Some(r) = raw.borrow_and_update().clone() else {
            continue;
        };
        let s = shared.clone();
        let made = tokio::task::spawn_blocking(move || {
            let pic = picture(&r.plane, r.view.field, &s.scales)?;
            let msg = json!({
                "type": "frame",
                "step": r.step,
                "field": r.view.field.name(),
                "label": pic.label,
                "unit": pic.unit,
                "axis": AXES[r.view.axis],
                "index": r.view.index,
                "h": pic.h,
                "v": pic.v,
                "width": pic.width,
                "height": pic.height,
                "min": pic.min,
                "max": pic.max,
                "colors": pic.colors,
                "png": base64::engine::general_purpose::STANDARD.encode(&pic.png),
            });
            Some((msg.to_string(), pic.png))
        })
        .await;
        if let Ok(Some((msg, png))) = made {
            *shared.png.lock() = Some(Arc::new(png));
            shared.frame.send_replace(Some(Arc::new(msg)));
        }
    }
}

#[derive(Deserialize)]
struct Access {
    token: Option<String>,
}

/// Whether a request may pass: its `Host` an address or `localhost` (a page of another site,
/// resolved to this machine by a rebound name, is refused), a browser's socket from this page's
/// own origin (another site's script cannot drive the run), and with the run's token where the
/// view was served beyond loopback.
fn allowed(shared: &Shared, q: &Access, headers: &HeaderMap) -> bool {
    let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let host = text(header::HOST);
    if let Some(h) = host {
        let name = match h.rsplit_once(':') {
            Some((n, port)) if port.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => h,
        };
        let name = name.trim_start_matches('[').trim_end_matches(']');
        if name != "localhost" && name.parse::<std::net::IpAddr>().is_err() {
            return false;
        }
    }
    if let Some(origin) = text(header::ORIGIN) {
        if host.is_none_or(|h| origin != format!("http://{h}") && origin != format!("https://{h}"))
        {
            return false;
        }
    }
    match &shared.token {
        None => true,
        Some(t) => q.token.as_deref().is_some_and(|g| {
            // Compared in constant time: the token is the only secret.
            g.len() == t.len() && g.bytes().zip(t.bytes()).fold(0, |a, (x, y)| a | (x ^ y)) == 0
        }),
    }
}

/// The one gate in front of every route (and of paths that are none): a request that is not
/// [`allowed`] learns nothing, not even what the route expects.
async fn guard(
    State(s): State<Arc<Shared>>,
    Query(q): Query<Access>,
    headers: HeaderMap,
    request: Request,
    next: Next,
) -> Response {
    if !allowed(&s, &q, &headers) {
        return (
            StatusCode::FORBIDDEN,
            "this live view needs its access token\n",
        )
            .into_response();
    }
    next.run(request).await
}

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        PAGE,
    )
        .into_response()
}

async fn frame_png(State(s): State<Arc<Shared>>) -> Response {
    let png = s.png.lock().clone();
    match png {
        Some(p) => (
            [
                (header::CONTENT_TYPE, "image/png"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            p.to_vec(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no picture yet\n").into_response(),
    }
}

async fn socket(State(s): State<Arc<Shared>>, ws: WebSocketUpgrade) -> Response {
    ws.max_message_size(MAX_MESSAGE)
        .max_frame_size(MAX_MESSAGE)
        .on_upgrade(move |socket| session(socket, s))
}

/// Counts a viewer while its session lasts.
struct Viewer<'a>(&'a AtomicUsize);

impl Drop for Viewer<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One viewer: the first message, then the latest picture and status whenever the socket is
/// ready for them, the events as they come (a lagging viewer skips some), and its commands.
async fn session(mut socket: WebSocket, s: Arc<Shared>) {
    s.viewers.fetch_add(1, Ordering::Relaxed);
    let _viewer = Viewer(&s.viewers);
    let mut frames = s.frame.subscribe();
    let mut status = s.status.subscribe();
    let mut events = s.events.subscribe();
    let hello = s.hello.lock().clone();
    if socket.send(Message::text(hello.as_str())).await.is_err() {
        return;
    }
    // What this viewer has not seen yet.
    frames.mark_changed();
    status.mark_changed();
    loop {
        let out: Option<Arc<String>> = tokio::select! {
            m = socket.recv() => match m {
                Some(Ok(Message::Text(t))) => refusal(&s, t.as_str()),
                Some(Ok(Message::Binary(_))) => Some(refused("binary messages are not commands")),
                Some(Ok(_)) => None,
                // Closed, or a protocol error (an oversized message among them).
                Some(Err(_)) | None => return,
            },
            r = frames.changed() => match r {
                Ok(()) => frames.borrow_and_update().clone(),
                Err(_) => return,
            },
            r = status.changed() => match r {
                Ok(()) => status.borrow_and_update().clone(),
                Err(_) => return,
            },
            e = events.recv() => match e {
                Ok(e) => Some(e),
                Err(broadcast::error::RecvError::Lagged(_)) => None,
                Err(broadcast::error::RecvError::Closed) => return,
            },
        };
        if let Some(m) = out {
            if socket.send(Message::text(m.as_str())).await.is_err() {
                return;
            }
        }
    }
}

fn refused(message: &str) -> Arc<String> {
    Arc::new(json!({"type": "refused", "message": message}).to_string())
}

/// Passes a viewer's command to the run loop, or says why not (to that viewer only).
fn refusal(s: &Shared, text: &str) -> Option<Arc<String>> {
    let cmd: Steer = match serde_json::from_str(text) {
        Ok(c) => c,
        Err(e) => return Some(refused(&format!("not a command: {e}"))),
    };
    if let Err(m) = s.limits.check(&cmd) {
        return Some(refused(&m));
    }
    match s.commands.try_send(cmd) {
        Ok(()) => None,
        Err(TrySendError::Full(_)) => Some(refused("too many commands waiting; try again")),
        Err(TrySendError::Disconnected(_)) => Some(refused("the run has ended")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            size: [8, 6, 4],
            fields: vec![LiveField::Speed, LiveField::Ux],
            walls: vec![Wall {
                label: "lid (z+)".into(),
                direction: [1.0, 0.0, 0.0],
            }],
            velocity: 2.0,
            unit: "m/s",
            temperatures: vec![Held {
                label: "inlet patch (x-)".into(),
                entry: 6,
            }],
            t0: 20.0,
            theta_max: Some(30.0),
            si: true,
            temperature_unit: "°C",
        }
    }

    #[test]
    fn temperatures_stay_within_the_buoyant_limit_and_above_absolute_zero() {
        let mut l = limits();
        let p = |s: &str| serde_json::from_str::<Steer>(s);
        assert_eq!(
            p(r#"{"cmd":"temperature","slot":0,"value":25.5}"#).unwrap(),
            Steer::Temperature {
                slot: 0,
                value: 25.5
            }
        );
        assert!(p(r#"{"cmd":"temperature","slot":0}"#).is_err());
        assert!(p(r#"{"cmd":"temperature","slot":0,"value":"hot"}"#).is_err());
        let t = |slot, value| Steer::Temperature { slot, value };
        // t0 ± 30 (open): 20 ± 30 °C.
        for ok in [-9.9, 0.0, 20.0, 49.9] {
            assert!(l.check(&t(0, ok)).is_ok(), "{ok}");
        }
        for bad in [-10.0, 50.0, f64::NAN, f64::NEG_INFINITY] {
            let e = l.check(&t(0, bad)).unwrap_err();
            assert!(e.contains("inlet patch (x-)") && e.contains("°C"), "{e}");
        }
        assert!(l
            .check(&t(1, 20.0))
            .unwrap_err()
            .contains("holds 1 temperatures"));
        // Without buoyancy only absolute zero bounds it (with [units]).
        l.theta_max = None;
        assert!(l.check(&t(0, 1e6)).is_ok());
        assert!(l.check(&t(0, -273.2)).is_err());
        l.si = false;
        assert!(l.check(&t(0, -1e6)).is_ok());
    }

    /// The ventilated room holds its six walls and its inlet (not its outlet), in the held table's
    /// order, and its buoyant limit is Mach's over |β g| and the room's height.
    #[test]
    fn the_rooms_held_temperatures_are_its_walls_and_its_inlet() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/ventilated-room.toml");
        let case = CaseConfig::from_file(&path).unwrap();
        let (held, theta_max, _) = held_temperatures(&case);
        let labels: Vec<(&str, usize)> = held.iter().map(|h| (&*h.label, h.entry)).collect();
        assert_eq!(
            labels,
            [
                ("wall (x-)", 0),
                ("wall (x+)", 1),
                ("wall (y-)", 2),
                ("wall (y+)", 3),
                ("wall (z-)", 4),
                ("wall (z+)", 5),
                ("inlet patch (x-)", 6),
            ]
        );
        let lattice = case.validate().unwrap();
        let setup = case.thermal_setup(&lattice).unwrap();
        let table = setup.held_table();
        assert_eq!(table.len(), 8);
        assert_eq!(
            (table[0], table[6], table[7]),
            (15.0 - 18.5, 22.0 - 18.5, 0.0)
        );
        let b = setup.model.buoyancy;
        let expect = MAX_SPEED * MAX_SPEED / (b[1].abs() * 86.0);
        let got = theta_max.unwrap();
        assert!((got / expect - 1.0).abs() < 1e-12, "{got} {expect}");
        // About 48 K either side of t0 for this room.
        assert!((40.0..60.0).contains(&got), "{got}");
        // In 16 bits, what the stored populations hold bounds it first: the room's reach, 3.5 K,
        // is scaled by 1/16, which holds up to 32 K.
        let mut half = case.clone();
        half.numerics.precision = thelma_core::Precision::F16;
        assert_eq!(held_temperatures(&half).1, Some(32.0));
    }

    #[test]
    fn commands_parse_strictly_and_are_checked_against_the_case() {
        let l = limits();
        let p = |s: &str| serde_json::from_str::<Steer>(s);
        assert_eq!(p(r#"{"cmd":"pause"}"#).unwrap(), Steer::Pause {});
        for bad in [
            r#"{"cmd":"pause","x":1}"#,
            r#"{"cmd":"fly"}"#,
            r#"{"cmd":"wall","slot":0}"#,
            r#"{"cmd":"wall","slot":-1,"speed":0.1}"#,
            r#"{"cmd":"view","field":"speed","axis":"y","index":1e99}"#,
            "garbage",
            "",
        ] {
            assert!(p(bad).is_err(), "{bad}");
        }
        let view = |f: &str, a: &str, i| Steer::View {
            field: f.into(),
            axis: a.into(),
            index: i,
        };
        assert!(l.check(&view("ux", "x", 7)).is_ok());
        assert!(l
            .check(&view("ux", "x", 8))
            .unwrap_err()
            .contains("8 planes"));
        assert!(l.check(&view("uz", "x", 0)).unwrap_err().contains("uz"));
        assert!(l.check(&view("ux", "w", 0)).is_err());
        let wall = |slot, speed| Steer::Wall { slot, speed };
        // Speeds in the case's unit (2 m/s per lattice unit here), below Mach's limit.
        assert!(l.check(&wall(0, 0.0)).is_ok());
        assert!(l.check(&wall(0, 0.5)).is_ok());
        assert!(l.check(&wall(0, 2.0 * MAX_SPEED)).is_err());
        for s in [-0.1, f64::NAN, f64::INFINITY] {
            assert!(l.check(&wall(0, s)).is_err(), "{s}");
        }
        assert!(l
            .check(&wall(1, 0.1))
            .unwrap_err()
            .contains("1 moving walls"));
    }

    #[test]
    fn addresses_beyond_loopback_need_the_remote_flag_and_bad_ones_are_named() {
        assert!(LiveOptions::new("127.0.0.1:0", false, 1, 100).is_ok());
        assert!(LiveOptions::new("[::1]:0", false, 1, 100).is_ok());
        let e = LiveOptions::new("0.0.0.0:8088", false, 1, 100).unwrap_err();
        assert!(e.to_string().contains("--live-remote"), "{e}");
        assert!(LiveOptions::new("0.0.0.0:8088", true, 1, 100).is_ok());
        let e = LiveOptions::new("localhost:99999", false, 1, 100).unwrap_err();
        assert!(e.to_string().contains("--live"), "{e}");
        assert!(LiveOptions::new("127.0.0.1:0", false, 0, 100).is_err());
    }

    #[test]
    fn the_token_is_compared_whole() {
        let (tx, _rx) = bounded(1);
        let s = Shared {
            hello: parking_lot::Mutex::new(Arc::new(String::new())),
            raw: watch::channel(None).0,
            frame: watch::channel(None).0,
            png: parking_lot::Mutex::new(None),
            status: watch::channel(None).0,
            events: broadcast::channel(1).0,
            viewers: AtomicUsize::new(0),
            token: Some("abcd".into()),
            limits: limits(),
            scales: Scales::default(),
            commands: tx,
        };
        let q = |t: Option<&str>| Access {
            token: t.map(String::from),
        };
        let none = HeaderMap::new();
        assert!(allowed(&s, &q(Some("abcd")), &none));
        for t in [None, Some(""), Some("abc"), Some("abcde"), Some("abce")] {
            assert!(!allowed(&s, &q(t), &none), "{t:?}");
        }
        // A name other than localhost (a rebound one) and another site's page are refused.
        let with = |pairs: &[(header::HeaderName, &str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(k.clone(), v.parse().unwrap());
            }
            h
        };
        let ok = Some("abcd");
        for host in [
            "127.0.0.1:8088",
            "localhost:8088",
            "[::1]:8088",
            "10.0.0.5:9000",
        ] {
            let h = with(&[
                (header::HOST, host),
                (header::ORIGIN, &format!("http://{host}")),
            ]);
            assert!(allowed(&s, &q(ok), &h), "{host}");
        }
        let rebound = with(&[(header::HOST, "evil.example:8088")]);
        assert!(!allowed(&s, &q(ok), &rebound));
        let foreign = with(&[
            (header::HOST, "127.0.0.1:8088"),
            (header::ORIGIN, "http://evil.example"),
        ]);
        assert!(!allowed(&s, &q(ok), &foreign));
        assert!(token().unwrap().len() == 32);
    }
}
