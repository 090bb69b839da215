//! Case configuration (serde data, split into domain, physics, numerics, run control, hardware and
//! output as lbmpy splits it) and the lattice parameters derived from it.
//!
//! A case is data: a TOML or JSON file, overridden by command-line flags, validated before anything
//! is allocated. Every validation error names the offending key and the flag that sets it.

mod body;
mod boundary;
mod error;
mod fields;
mod hardware;
mod inflow;
mod initial;
mod sampling;
mod thermal;
mod units;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use body::{BodyConfig, BodyMethod, RotationConfig, Scale, DEFAULT_RETRACTION};
pub use boundary::{
    BoundaryConfig, BoundaryKind, Face, FacePatch, PatchConfig, Profile, SpongeConfig,
};
use error::{bad, line_column};
pub use error::{CaseFileError, ConfigError, SyntaxError};
pub use fields::OutputField;
pub use hardware::{BackendName, DeviceSpec, DeviceSpecError, HardwareConfig};
pub use inflow::{InletSchedule, WALL_SLOTS};
pub use initial::{Expression, InitialConfig, InitialState};
pub use sampling::{Axis, ForcesConfig, LineConfig, ProbeConfig};
pub use thermal::{ThermalConfig, ABSOLUTE_ZERO_C};
pub use units::{PhysicalUnits, UnitScales};

use crate::numfmt::{num, num_exact, num_sig};
use crate::physics::{
    Collision, FlowModel, MrtRates, RigidMotion, SpongeLayer, Sponges, ThermalSetup,
    DEFAULT_TRT_MAGIC, MAX_SPEED,
};
pub use crate::real::Precision;

/// The geometry of a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CaseKind {
    /// Closed box with the lid at z = max moving in +x; non-periodic axes are walls.
    #[default]
    Cavity,
    /// A box whose non-periodic axes are all resting walls, with obstacles and no lid (`lid_speed` is
    /// not used, so the viscosity must be given). Its flow comes from the initial state (a restart);
    /// a body force is the natural later addition.
    Box,
}

/// A solid obstacle: in metres when the case has `[units]`, in node coordinates (node i's centre at
/// i) otherwise. With units, node i's centre is at (i + 0.5) dx, the domain [0, L] reaching the walls
/// half a spacing outside the lattice, so an obstacle keeps its physical size when the grid is
/// refined; [`CaseConfig::lattice_obstacles`] converts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "shape", rename_all = "lowercase", deny_unknown_fields)]
pub enum Obstacle {
    /// Nodes whose centre lies in `min ≤ x < max` on every axis.
    Box { min: [f64; 3], max: [f64; 3] },
    /// Nodes whose centre lies within `radius` of `centre`.
    Sphere { centre: [f64; 3], radius: f64 },
    /// Nodes whose centre lies within `radius` of the line through `centre` along `axis` (a
    /// direction, any length): a circular cylinder through the whole domain, such as the
    /// Schäfer–Turek cylinder spanning a channel.
    Cylinder {
        centre: [f64; 3],
        axis: [f64; 3],
        radius: f64,
    },
}

/// Domain size and periodicity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DomainConfig {
    /// Nodes along x, y, z.
    pub size: [usize; 3],
    /// Periodic axes; a non-periodic axis is closed by walls (mid-grid bounce-back).
    pub periodic: [bool; 3],
    pub case: CaseKind,
    pub obstacles: Vec<Obstacle>,
}

impl Default for DomainConfig {
    fn default() -> Self {
        Self {
            size: [48, 48, 48],
            periodic: [false; 3],
            case: CaseKind::Cavity,
            obstacles: Vec::new(),
        }
    }
}

/// Physical parameters, in lattice units.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PhysicsConfig {
    /// Reynolds number `U L / ν` with `L` the cavity edge in nodes. Ignored when `viscosity` is set.
    pub reynolds: f64,
    /// Kinematic viscosity in lattice units; when set, it fixes ν and Re follows from it.
    pub viscosity: Option<f64>,
    /// Lid speed `U` in lattice units (Mach = U √3).
    pub lid_speed: f64,
    /// A uniform body force: a force density in lattice units, or with `[units]` an acceleration in
    /// m/s² (gravity, a pressure gradient over the density), entering every operator by Guo's scheme.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub force: Option<[f64; 3]>,
}

impl Default for PhysicsConfig {
    fn default() -> Self {
        Self {
            reynolds: 1000.0,
            viscosity: None,
            lid_speed: 0.1,
            force: None,
        }
    }
}

/// Numerical method.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NumericsConfig {
    /// The collision operator, by its registered name (`bgk`, `trt`, `mrt`).
    pub collision: Collision,
    pub precision: Precision,
    pub mrt_rates: MrtRates,
    /// TRT's magic parameter Λ = (1/ω⁺ − ½)(1/ω⁻ − ½).
    pub trt_magic: f64,
    /// The Smagorinsky constant C_s of the eddy viscosity (large-eddy simulation), for every
    /// operator; absent: no subgrid model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smagorinsky: Option<f64>,
    /// The direct forcing's fixed-point iterations per step for immersed bodies.
    pub immersed_iterations: usize,
    /// How populations stream: between two lattices, or in place in one (written only when in
    /// place, so that case files and checkpoints of two lattices read as before).
    #[serde(skip_serializing_if = "Streaming::is_two_lattice")]
    pub streaming: Streaming,
}

/// How a step moves the populations in memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Streaming {
    /// The pull scheme between two lattices: each step reads one and writes the other.
    #[default]
    #[serde(rename = "two-lattice")]
    TwoLattice,
    /// The AA pattern (Bailey et al. 2009) in one lattice: steps alternate between one that pulls
    /// from the neighbours and stores each collided population where the neighbour's next step
    /// reads it, and one that reads and writes only its own node. Half the memory of two lattices.
    #[serde(rename = "in-place")]
    InPlace,
}

impl Streaming {
    pub const ALL: [Streaming; 2] = [Streaming::TwoLattice, Streaming::InPlace];

    pub fn name(self) -> &'static str {
        match self {
            Streaming::TwoLattice => "two-lattice",
            Streaming::InPlace => "in-place",
        }
    }

    pub fn is_two_lattice(&self) -> bool {
        *self == Streaming::TwoLattice
    }

    /// Lattices of populations held in memory.
    pub fn lattices(self) -> usize {
        match self {
            Streaming::TwoLattice => 2,
            Streaming::InPlace => 1,
        }
    }
}

/// Ota, Suzuki & Inamuro's (2012) count of the direct forcing's iterations.
pub const DEFAULT_IMMERSED_ITERATIONS: usize = 5;

impl Default for NumericsConfig {
    fn default() -> Self {
        Self {
            collision: Collision::default(),
            precision: Precision::default(),
            mrt_rates: MrtRates::default(),
            trt_magic: DEFAULT_TRT_MAGIC,
            smagorinsky: None,
            immersed_iterations: DEFAULT_IMMERSED_ITERATIONS,
            streaming: Streaming::default(),
        }
    }
}

/// When a run stops.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// A fixed number of steps; when absent the run goes until convergence (or `max_steps`).
    pub steps: Option<u64>,
    /// Converged when the relative L2 change of the velocity field over `check_every` steps, scaled to
    /// 1,000 steps, falls below this.
    pub tolerance: f64,
    /// Steps between convergence checks (and progress lines); 0 picks 10 L/U·... see `resolved_check_every`.
    pub check_every: u64,
    /// Upper bound on steps of a convergence run.
    pub max_steps: u64,
    /// Steps between the divergence watchdog's checks (non-finite populations, density bounds).
    pub watchdog_every: u64,
    /// The watchdog stops the run when a fluid node's density leaves `[min, max]`.
    pub density_bounds: [f64; 2],
    /// Steps between checkpoints (0: none). A checkpoint is written only after a healthy check.
    pub checkpoint_every: u64,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            steps: None,
            tolerance: 1e-4,
            check_every: 0,
            max_steps: 1_000_000,
            watchdog_every: DEFAULT_WATCHDOG_EVERY,
            density_bounds: DEFAULT_DENSITY_BOUNDS,
            checkpoint_every: 0,
        }
    }
}

/// A plane through the domain, normal to one axis: what the slice images show. A case file may
/// write it as the command line does (`slice = "y"`, `"z=10"`) or as a table whose axis is a name
/// or a number (`{axis = "y", index = 10}`, `{axis = 1}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SlicePlane {
    /// Normal axis: 0 = x, 1 = y, 2 = z.
    pub axis: usize,
    /// Node index along the normal axis; `None` is the middle plane (n / 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
}

impl Default for SlicePlane {
    /// The mid-plane y = ny/2: it holds the lid direction x and the height z.
    fn default() -> Self {
        Self {
            axis: 1,
            index: None,
        }
    }
}

impl<'de> Deserialize<'de> for SlicePlane {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Axis {
            Number(usize),
            Name(String),
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            axis: Axis,
            #[serde(default)]
            index: Option<usize>,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Table(Table),
        }
        let raw = Raw::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "slice: expected \"AXIS\" or \"AXIS=INDEX\" (axis x, y or z), or {axis = \"y\", index = N}",
            )
        })?;
        match raw {
            Raw::Text(t) => SlicePlane::parse(&t).map_err(serde::de::Error::custom),
            Raw::Table(t) => {
                let axis = match t.axis {
                    Axis::Number(a) => a,
                    Axis::Name(n) => {
                        SlicePlane::parse(&n)
                            .map_err(serde::de::Error::custom)?
                            .axis
                    }
                };
                Ok(SlicePlane {
                    axis,
                    index: t.index,
                })
            }
        }
    }
}

/// A slice plane that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SlicePlaneError {
    #[error("`{0}` is not AXIS or AXIS=INDEX (axis x, y or z)")]
    NotAPlane(String),
    #[error("`{0}`: the index must be a non-negative integer")]
    NotAnIndex(String),
}

impl SlicePlane {
    /// Parses `y`, `y=24` (axis, optionally `=index`).
    pub fn parse(s: &str) -> Result<Self, SlicePlaneError> {
        let (a, i) = match s.split_once('=') {
            Some((a, i)) => (a.trim(), Some(i.trim())),
            None => (s.trim(), None),
        };
        let axis = match a {
            "x" => 0,
            "y" => 1,
            "z" => 2,
            _ => return Err(SlicePlaneError::NotAPlane(s.to_string())),
        };
        let index = i
            .map(|i| i.parse::<usize>())
            .transpose()
            .map_err(|_| SlicePlaneError::NotAnIndex(s.to_string()))?;
        Ok(Self { axis, index })
    }

    /// The plane's node index along its axis in a domain of `size` nodes.
    pub fn resolved_index(&self, size: [usize; 3]) -> usize {
        self.index.unwrap_or(size[self.axis.min(2)] / 2)
    }
}

/// Outputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputConfig {
    pub dir: PathBuf,
    /// Steps between field outputs (VTK, slice images); 0 writes them only at the end.
    pub every: u64,
    /// VTK XML image data (`.vti`) of the arrays `fields` names.
    pub vtk: bool,
    /// The arrays of the VTK files, by name ([`OutputField`]), in the order written. Checked by
    /// [`CaseConfig::validate`], which names `output.fields` and the name it does not know.
    pub fields: Vec<String>,
    /// One `.vti` piece per slab (or subdomain of a layout's grid) and a `.pvti` index instead of
    /// one gathered file.
    pub vtk_pieces: bool,
    /// PNG images of the speed on `slice`, and the profile plot of lid-driven cavity runs.
    pub images: bool,
    pub slice: SlicePlane,
    /// Steps between probe samples (`probes.csv`), when the case has `[[probe]]`s.
    pub probe_every: u64,
    /// Time-averaged fields from this time on (steps, or seconds with `[units]`): mean velocity,
    /// pressure and temperature join the VTK files (`mean_velocity`, `mean_pressure`,
    /// `mean_temperature`) once sampled. Absent: no averages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub average_from: Option<f64>,
    /// Steps between the states the averages sample.
    pub average_every: u64,
}

impl Default for OutputConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("out"),
            every: 0,
            vtk: true,
            fields: OutputField::DEFAULT.map(|f| f.name().to_string()).into(),
            vtk_pieces: false,
            images: true,
            slice: SlicePlane::default(),
            probe_every: 100,
            average_from: None,
            average_every: 10,
        }
    }
}

impl OutputConfig {
    /// The arrays `fields` names; an error says which name is not one, or is listed twice.
    pub fn arrays(&self) -> Result<Vec<OutputField>, ConfigError> {
        let fields =
            fields::parse_list(&self.fields).map_err(|m| bad("output.fields", "--fields", m))?;
        if fields.is_empty() && self.vtk {
            return Err(bad(
                "output.fields",
                "--fields",
                format!(
                    "names no array; list some of {} (or write no VTK files: output.vtk = false, --no-vtk)",
                    OutputField::names()
                ),
            ));
        }
        Ok(fields)
    }
}

/// A whole case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct CaseConfig {
    pub domain: DomainConfig,
    pub physics: PhysicsConfig,
    pub numerics: NumericsConfig,
    pub run: RunConfig,
    pub hardware: HardwareConfig,
    pub output: OutputConfig,
    /// Physical scales (optional); when given they fix the Reynolds number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub units: Option<PhysicalUnits>,
    /// What closes each face of the box that is not periodic (`[[boundary]]` tables); a face not
    /// listed is a resting wall, and the cavity's lid is its z+ face.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub boundary: Vec<BoundaryConfig>,
    /// The initial state (`[initial]`); absent: at rest with ρ = 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial: Option<InitialConfig>,
    /// Forces on the obstacles (`[forces]`).
    pub forces: ForcesConfig,
    /// Points sampled into `probes.csv` (`[[probe]]` tables).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub probe: Vec<ProbeConfig>,
    /// Lines of nodes written into `lines.csv` when the run ends (`[[line]]` tables).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub line: Vec<LineConfig>,
    /// Solid bodies from STL files (`[[body]]` tables). Solids are numbered in one list: the
    /// obstacles of `domain.obstacles` first, then the bodies, each in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub body: Vec<BodyConfig>,
    /// The temperature lattice (`[thermal]`); absent: the flow alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thermal: Option<ThermalConfig>,
}

/// The smallest edge the lattice accepts along a periodic axis: the pull stencil needs two nodes.
pub const MIN_EDGE: usize = 2;

/// The smallest edge along a walled axis. With the walls half a spacing outside, an edge of n nodes
/// has n − 2 nodes that touch no wall; below 4 there is no such node on either side of the centre
/// plane, so the flow is all wall layer (every node bounces back), and the centreline profiles and
/// their comparison with the 3D reference describe nothing.
pub const MIN_WALLED_EDGE: usize = 4;

/// The most CPU threads a run or a benchmark may ask for: more than any machine's cores, fewer than
/// would exhaust the system's threads.
pub const MAX_THREADS: usize = 4096;

/// Body-force components at or above this (lattice units) are refused: within a few thousand steps
/// such a force drives a flow far outside the weakly compressible range.
pub const MAX_FORCE: f64 = 0.01;

/// Default steps between watchdog checks: a check reads the populations once, so it costs about a
/// step's memory traffic, 1% of the run at this interval.
pub const DEFAULT_WATCHDOG_EVERY: u64 = 100;

/// Default density bounds of the watchdog. A healthy weakly compressible flow stays within a few
/// tens of percent of ρ = 1 even at the highest accepted lid speed; a blow-up leaves this band within
/// a few steps of starting.
pub const DEFAULT_DENSITY_BOUNDS: [f64; 2] = [0.2, 5.0];

/// Parameters in lattice units derived from a validated case.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LatticeParams {
    /// Characteristic length `L` (the cavity edge along x, in nodes).
    pub length: f64,
    pub lid_speed: f64,
    pub reynolds: f64,
    pub viscosity: f64,
    pub tau: f64,
    pub omega: f64,
    pub mach: f64,
    /// The body force in lattice units (converted from m/s² when the case has physical units).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub force: Option<[f64; 3]>,
}

impl CaseConfig {
    /// Checks every value a run depends on and derives the lattice parameters.
    pub fn validate(&self) -> Result<LatticeParams, ConfigError> {
        let d = &self.domain;
        for (a, &n) in d.size.iter().enumerate() {
            let (least, what) = if d.periodic[a] {
                (MIN_EDGE, "a periodic edge")
            } else {
                (MIN_WALLED_EDGE, "a walled edge")
            };
            if n < least {
                return Err(bad(
                    "domain.size",
                    "--size",
                    format!(
                        "{} = {n} nodes along {}; {what} needs at least {least}",
                        ["nx", "ny", "nz"][a],
                        ["x", "y", "z"][a]
                    ),
                ));
            }
        }
        let nodes = d.size.iter().try_fold(1usize, |acc, &n| acc.checked_mul(n));
        match nodes {
            Some(n) if n <= (1usize << 40) => {}
            _ => {
                return Err(bad(
                    "domain.size",
                    "--size",
                    format!("{:?} is more than 2^40 nodes", d.size),
                ))
            }
        }
        for o in &d.obstacles {
            match o {
                Obstacle::Sphere { radius, centre } => {
                    if !(radius.is_finite() && *radius > 0.0)
                        || centre.iter().any(|c| !c.is_finite())
                    {
                        return Err(bad("domain.obstacles", "--config", format!("sphere obstacle {centre:?} r = {radius} needs a finite centre and radius > 0")));
                    }
                }
                Obstacle::Cylinder {
                    centre,
                    axis,
                    radius,
                } => {
                    let finite = centre.iter().chain(axis).all(|c| c.is_finite());
                    if !(finite && radius.is_finite() && *radius > 0.0 && axis != &[0.0; 3]) {
                        return Err(bad("domain.obstacles", "--config", format!("cylinder obstacle {centre:?} axis {axis:?} r = {radius} needs a finite centre, a non-zero axis and radius > 0")));
                    }
                }
                Obstacle::Box { min, max } => {
                    if min.iter().chain(max).any(|c| !c.is_finite())
                        || (0..3).any(|a| min[a] >= max[a])
                    {
                        return Err(bad("domain.obstacles", "--config", format!("box obstacle {min:?}..{max:?} is empty (need min < max on every axis)")));
                    }
                }
            }
        }
        self.validate_bodies()?;
        let p = &self.physics;
        if !p.lid_speed.is_finite() || p.lid_speed < 0.0 || p.lid_speed >= MAX_SPEED {
            return Err(bad(
                "physics.lid_speed",
                "--lid-speed",
                format!(
                    "{} is outside [0, {MAX_SPEED}) (lattice units; Mach = U√3)",
                    p.lid_speed
                ),
            ));
        }
        if d.case == CaseKind::Cavity && p.lid_speed == 0.0 {
            return Err(bad(
                "physics.lid_speed",
                "--lid-speed",
                "the cavity needs a lid speed > 0",
            ));
        }
        if d.case == CaseKind::Cavity && d.periodic[2] {
            return Err(bad(
                "domain.periodic",
                "--periodic",
                "the cavity's lid needs a walled z axis (z cannot be periodic)",
            ));
        }
        // With `[units]` the viscosity follows from them (and `lid_speed`, the lattice velocity
        // that `units.velocity` maps to).
        if d.case == CaseKind::Box && p.viscosity.is_none() && self.units.is_none() {
            return Err(bad(
                "physics.viscosity",
                "--viscosity",
                "a box has no lid to set a Reynolds number: give the viscosity (or [units])",
            ));
        }
        let length = d.size[0] as f64;
        let reynolds_in = match &self.units {
            Some(u) => {
                self.validate_units(u)?;
                u.reynolds()
            }
            None => p.reynolds,
        };
        let viscosity = match p.viscosity {
            Some(nu) => {
                let tau = 3.0 * nu + 0.5;
                if !nu.is_finite() || tau <= 0.5 {
                    return Err(bad(
                        "physics.viscosity",
                        "--viscosity",
                        format!(
                            "{} gives tau = {} <= 0.5; the viscosity must be > 0",
                            num_exact(nu),
                            num_exact(tau)
                        ),
                    ));
                }
                nu
            }
            None => {
                if !(reynolds_in.is_finite() && reynolds_in > 0.0) {
                    return Err(bad(
                        "physics.reynolds",
                        "--re",
                        format!("{} must be a finite number > 0", num_exact(p.reynolds)),
                    ));
                }
                if p.lid_speed == 0.0 {
                    return Err(bad(
                        "physics.viscosity",
                        "--viscosity",
                        "with no lid speed the viscosity must be given",
                    ));
                }
                p.lid_speed * length / reynolds_in
            }
        };
        let tau = 3.0 * viscosity + 0.5;
        if p.viscosity.is_some() && !tau.is_finite() {
            return Err(bad(
                "physics.viscosity",
                "--viscosity",
                format!(
                    "{} gives tau = {}: the viscosity must be finite",
                    num_exact(viscosity),
                    num_exact(tau)
                ),
            ));
        }
        if tau <= 0.5 || !tau.is_finite() {
            return Err(bad(
                "physics.reynolds",
                "--re",
                format!(
                    "Re = {} gives tau = {}, not above 0.5: lower Re or refine the grid",
                    num_exact(reynolds_in),
                    num_exact(tau)
                ),
            ));
        }
        // τ a hair above ½ in f64 may round to ½ in the run's precision (ω = 2), where the scheme is
        // unconditionally unstable: refuse it here rather than let the watchdog find out.
        let tau_stored = match self.numerics.precision.arithmetic() {
            Precision::F64 => tau,
            _ => tau as f32 as f64,
        };
        if tau_stored <= 0.5 {
            let (key, flag) = if p.viscosity.is_some() {
                ("physics.viscosity", "--viscosity")
            } else {
                ("physics.reynolds", "--re")
            };
            return Err(bad(
                key,
                flag,
                format!(
                    "nu = {} gives tau = {}, which is 0.5 in {}: raise the viscosity or use --precision f64",
                    num_exact(viscosity),
                    num_exact(tau),
                    self.numerics.precision.arithmetic().name()
                ),
            ));
        }
        let reynolds = if d.case == CaseKind::Cavity {
            p.lid_speed * length / viscosity
        } else {
            0.0
        };
        self.numerics
            .mrt_rates
            .validate()
            .map_err(|m| bad("numerics.mrt_rates", "--config", m.to_string()))?;
        let r = &self.run;
        if r.steps == Some(0) {
            return Err(bad("run.steps", "--steps", "must be at least 1"));
        }
        if !(r.tolerance.is_finite() && r.tolerance > 0.0) {
            return Err(bad(
                "run.tolerance",
                "--tolerance",
                format!("{} must be a finite number > 0", r.tolerance),
            ));
        }
        if r.max_steps == 0 {
            return Err(bad("run.max_steps", "--max-steps", "must be at least 1"));
        }
        if self.output.dir.as_os_str().is_empty() {
            return Err(bad("output.dir", "--output", "must name a folder"));
        }
        if self.thermal.is_some() && self.numerics.precision == Precision::F16c {
            // Measured on one H200: the ventilated room diverged in f16c (non-finite populations
            // by step 50,500 of 110,000; f16 and f32 ran it through) and stepped 21 % slower than
            // in f16.
            return Err(bad(
                "numerics.precision",
                "--precision",
                "f16c storage is not available with [thermal]: use f16 (or f32)",
            ));
        }
        if self.numerics.streaming == Streaming::InPlace {
            self.check_in_place()?;
        }
        let arrays = self.output.arrays()?;
        if self.thermal.is_none() && arrays.contains(&OutputField::Temperature) {
            return Err(bad(
                "output.fields",
                "--fields",
                "names temperature, which only a case with [thermal] has",
            ));
        }
        if self.output.slice.axis > 2 {
            return Err(bad(
                "output.slice",
                "--slice",
                format!("axis {} is not 0, 1 or 2 (x, y, z)", self.output.slice.axis),
            ));
        }
        let [ax, n] = [self.output.slice.axis, d.size[self.output.slice.axis]];
        if self.output.slice.resolved_index(d.size) >= n {
            return Err(bad(
                "output.slice",
                "--slice",
                format!(
                    "index {} is outside the {n} nodes along {}",
                    self.output.slice.resolved_index(d.size),
                    ["x", "y", "z"][ax]
                ),
            ));
        }
        if r.watchdog_every == 0 {
            return Err(bad(
                "run.watchdog_every",
                "--watchdog-every",
                "must be at least 1",
            ));
        }
        let [lo, hi] = r.density_bounds;
        if !(hi.is_finite() && (0.0..1.0).contains(&lo) && hi > 1.0) {
            return Err(bad(
                "run.density_bounds",
                "--density-bounds",
                format!("{lo},{hi} must be finite with 0 <= min < 1 < max"),
            ));
        }
        if self.hardware.threads > MAX_THREADS {
            return Err(bad(
                "hardware.threads",
                "--threads",
                format!(
                    "{} threads is not a plausible core count",
                    self.hardware.threads
                ),
            ));
        }
        self.validate_boundaries()?;
        self.validate_sampling()?;
        self.initial_state()?;
        let n = &self.numerics;
        if !(n.trt_magic.is_finite() && n.trt_magic > 0.0) {
            return Err(bad(
                "numerics.trt_magic",
                "--trt-magic",
                format!(
                    "{} must be a finite number > 0 (3/16 by default)",
                    n.trt_magic
                ),
            ));
        }
        if let Some(cs) = n.smagorinsky {
            if !(cs.is_finite() && (0.0..=1.0).contains(&cs)) {
                return Err(bad(
                    "numerics.smagorinsky",
                    "--smagorinsky",
                    format!("C_s = {cs} must lie in [0, 1] (0.1 to 0.2 is usual)"),
                ));
            }
        }
        let force = match p.force {
            None => None,
            Some(f) => {
                let to_lattice = match self.unit_scales() {
                    // An acceleration a in m/s² is a·dt²/dx in lattice units (per unit density).
                    Some(s) => s.dt * s.dt / s.dx,
                    None => 1.0,
                };
                let lat = f.map(|v| v * to_lattice);
                let unit = if self.units.is_some() { " m/s²" } else { "" };
                if f.iter().chain(&lat).any(|v| !v.is_finite()) {
                    return Err(bad(
                        "physics.force",
                        "--force",
                        format!("{f:?}{unit} must be finite"),
                    ));
                }
                if lat.iter().any(|v| v.abs() >= MAX_FORCE) {
                    return Err(bad(
                        "physics.force",
                        "--force",
                        format!(
                            "{f:?}{unit} is {lat:?} in lattice units; each component must stay below {MAX_FORCE} (the flow it drives would leave the low-Mach range)"
                        ),
                    ));
                }
                Some(lat)
            }
        };
        if let Some(t) = &self.thermal {
            // Convergence is judged on the velocity alone, which conduction or a stable
            // stratification leaves at rest while θ still moves.
            if self.run.steps.is_none() {
                return Err(bad(
                    "run.steps",
                    "--steps",
                    "a case with [thermal] runs a fixed number of steps so far: convergence is \
                     judged on the velocity alone, which may rest while the temperature moves",
                ));
            }
            t.setup(
                viscosity,
                self.unit_scales().as_ref(),
                &self.boundary,
                &self.boundary_patches(),
                d.periodic,
                self.numerics.smagorinsky.is_some(),
            )?;
        }
        Ok(LatticeParams {
            length,
            lid_speed: p.lid_speed,
            reynolds,
            viscosity,
            tau,
            omega: 1.0 / tau,
            mach: p.lid_speed * 3f64.sqrt(),
            force,
        })
    }

    fn validate_bodies(&self) -> Result<(), ConfigError> {
        for (k, b) in self.body.iter().enumerate() {
            let refuse = |key: &str, m: String| {
                Err(bad("body", "--config", format!("body[{k}].{key}: {m}")))
            };
            if b.stl.as_os_str().is_empty() {
                return refuse("stl", "is empty; give the path of an STL file".into());
            }
            let s = b.scale.factors();
            if s.iter().any(|c| !(c.is_finite() && *c > 0.0)) {
                return refuse("scale", format!("{s:?} must be finite and > 0"));
            }
            if b.rotate.iter().any(|c| !c.is_finite()) {
                return refuse("rotate", format!("{:?} must be finite (degrees)", b.rotate));
            }
            if b.translate.iter().any(|c| !c.is_finite()) {
                return refuse("translate", format!("{:?} must be finite", b.translate));
            }
            if b.method == BodyMethod::Voxel {
                for (key, given) in [
                    ("rotation", b.rotation.is_some()),
                    ("velocity", b.velocity.is_some()),
                    ("path", !b.path.is_empty()),
                    ("retraction", b.retraction.is_some()),
                ] {
                    if given {
                        return refuse(
                            key,
                            "only an immersed body moves; add method = \"immersed\"".into(),
                        );
                    }
                }
                continue;
            }
            if self.thermal.is_some() {
                return refuse(
                    "method",
                    "immersed bodies do not take a temperature lattice ([thermal]) yet".into(),
                );
            }
            if let Some(r) = &b.rotation {
                let norm = r.axis.iter().map(|c| c * c).sum::<f64>().sqrt();
                if !(norm.is_finite() && norm > 0.0) {
                    return refuse(
                        "rotation.axis",
                        format!("{:?} must be a finite, nonzero vector", r.axis),
                    );
                }
                if r.origin.iter().any(|c| !c.is_finite()) {
                    return refuse("rotation.origin", format!("{:?} must be finite", r.origin));
                }
                if !r.rate.is_finite() {
                    return refuse("rotation.rate", format!("{} must be finite", r.rate));
                }
            }
            if let Some(r) = b.retraction {
                if !(0.0..1.0).contains(&r) {
                    return refuse(
                        "retraction",
                        format!("{r} must be from 0 to below 1 (node spacings)"),
                    );
                }
            }
            if let Some(v) = b.velocity {
                if v.iter().any(|c| !c.is_finite()) {
                    return refuse("velocity", format!("{v:?} must be finite"));
                }
            }
            for (row, e) in b.path.iter().enumerate() {
                if e.iter().any(|c| !c.is_finite()) {
                    return refuse("path", format!("row {row} {e:?} must be finite"));
                }
                if row > 0 && e[0] <= b.path[row - 1][0] {
                    return refuse(
                        "path",
                        format!(
                            "times must increase: row {row} at {} follows {}",
                            e[0],
                            b.path[row - 1][0]
                        ),
                    );
                }
            }
        }
        let k = self.numerics.immersed_iterations;
        if !(1..=100).contains(&k) && self.body.iter().any(|b| b.method == BodyMethod::Immersed) {
            return Err(bad(
                "numerics.immersed_iterations",
                "--config",
                format!("{k} must be from 1 to 100"),
            ));
        }
        Ok(())
    }

    /// The prescribed motion of `[[body]]` `k` in lattice units (nodes and steps), from metres,
    /// m/s, rad/s and seconds with `[units]`; a body without motion keys stays at rest.
    pub fn body_motion(&self, k: usize) -> RigidMotion {
        let b = &self.body[k];
        let (dx, dt) = self.unit_scales().map_or((1.0, 1.0), |s| (s.dx, s.dt));
        let mut m = RigidMotion::at_rest();
        if let Some(r) = &b.rotation {
            let norm = r.axis.iter().map(|c| c * c).sum::<f64>().sqrt();
            m.axis = r.axis.map(|c| c / norm);
            m.origin = self.node_coordinates(r.origin);
            m.rate = r.rate * dt;
        }
        if let Some(v) = b.velocity {
            m.velocity = v.map(|c| c * dt / dx);
        }
        m.path = b
            .path
            .iter()
            .map(|e| (e[0] / dt, [e[1] / dx, e[2] / dx, e[3] / dx]))
            .collect();
        m
    }

    /// What in-place streaming does not step yet: its steps have the bounce-back of resting and
    /// moving walls, body forces and the eddy viscosity, and nothing else.
    fn check_in_place(&self) -> Result<(), ConfigError> {
        let without = if self.thermal.is_some() {
            Some("[thermal]".to_string())
        } else if self.has_immersed_bodies() {
            Some("immersed [[body]] tables".to_string())
        } else {
            self.boundary
                .iter()
                .find(|b| b.kind != BoundaryKind::Wall)
                .map(|b| format!("a `{}` boundary", b.kind.name()))
        };
        match without {
            Some(what) => Err(bad(
                "numerics.streaming",
                "--streaming",
                format!(
                    "in-place streaming is not available with {what} (walls, obstacles, STL bodies, forces and LES only): use two-lattice"
                ),
            )),
            None => Ok(()),
        }
    }

    /// Whether a `[[body]]` is immersed (moving, forced by the immersed boundary method).
    pub fn has_immersed_bodies(&self) -> bool {
        self.body.iter().any(|b| b.method == BodyMethod::Immersed)
    }

    /// Node coordinates (node i's centre at i) of a point of the case: with `[units]` the point is in
    /// metres and node i's centre at (i + 0.5) dx, so x_node = x / dx − 0.5; without, it is already
    /// in node coordinates.
    pub fn node_coordinates(&self, p: [f64; 3]) -> [f64; 3] {
        match self.unit_scales() {
            Some(s) => p.map(|c| c / s.dx - 0.5),
            None => p,
        }
    }

    /// A length of the case in nodes (metres with `[units]`).
    pub fn node_length(&self, l: f64) -> f64 {
        self.unit_scales().map_or(l, |s| l / s.dx)
    }

    /// The obstacles of `domain.obstacles` in node coordinates (converted from metres when the case
    /// has `[units]`).
    pub fn lattice_obstacles(&self) -> Vec<Obstacle> {
        let at = |p| self.node_coordinates(p);
        self.domain
            .obstacles
            .iter()
            .map(|o| match *o {
                Obstacle::Box { min, max } => Obstacle::Box {
                    min: at(min),
                    max: at(max),
                },
                Obstacle::Sphere { centre, radius } => Obstacle::Sphere {
                    centre: at(centre),
                    radius: self.node_length(radius),
                },
                Obstacle::Cylinder {
                    centre,
                    axis,
                    radius,
                } => Obstacle::Cylinder {
                    centre: at(centre),
                    axis,
                    radius: self.node_length(radius),
                },
            })
            .collect()
    }

    fn validate_boundaries(&self) -> Result<(), ConfigError> {
        let d = &self.domain;
        let mut seen = Vec::new();
        let mut patches = Vec::new();
        for b in &self.boundary {
            let face = b.face.name();
            let refuse = |m: String| Err(bad("boundary", "--config", format!("face {face}: {m}")));
            match self.face_patch(b) {
                Err(m) => return refuse(m),
                Ok(None) if seen.contains(&b.face) => return refuse("listed twice".into()),
                Ok(None) => seen.push(b.face),
                Ok(Some(p)) => {
                    if let Some(o) = patches.iter().find(|o: &&FacePatch| o.overlaps(&p)) {
                        return refuse(format!(
                            "patch {p:?} overlaps patch {o:?} (nodes {:?} to {:?} along axes {:?}); patches of a face must not share a node",
                            [p.lo[0].max(o.lo[0]), p.lo[1].max(o.lo[1])],
                            [p.hi[0].min(o.hi[0]), p.hi[1].min(o.hi[1])],
                            p.face.transverse().map(|a| ["x", "y", "z"][a]),
                        ));
                    }
                    if b.profile != Profile::Uniform {
                        return refuse(
                            "a patch's inlet is uniform (profile = \"parabolic\" spans a whole face)"
                                .into(),
                        );
                    }
                    patches.push(p);
                }
            }
            if d.periodic[b.face.axis()] {
                return refuse(format!(
                    "the {} axis is periodic, so it has no face",
                    ["x", "y", "z"][b.face.axis()]
                ));
            }
            if d.case == CaseKind::Cavity && b.face == Face::ZPlus {
                return refuse(
                    "is the cavity's lid (set by physics.lid_speed); use case = \"box\" to set every face".into(),
                );
            }
            let v = b.velocity;
            if v.iter().any(|c| !c.is_finite()) {
                return refuse(format!("velocity {v:?} must be finite"));
            }
            let moves = matches!(b.kind, BoundaryKind::Wall | BoundaryKind::Velocity);
            if !moves && v != [0.0; 3] {
                return refuse(format!(
                    "a {} face takes no velocity (only `wall` and `velocity` do)",
                    b.kind.name()
                ));
            }
            if b.kind == BoundaryKind::Wall && v[b.face.axis()] != 0.0 {
                return refuse(format!(
                    "a wall moves along its face only: velocity {v:?} has a normal component (an inflow is kind = \"velocity\")"
                ));
            }
            if b.kind != BoundaryKind::Pressure && (b.density.is_some() || b.pressure.is_some()) {
                return refuse(format!(
                    "a {} face takes no density or pressure (only `pressure` does)",
                    b.kind.name()
                ));
            }
            match self.boundary_density(b) {
                Err(m) => return refuse(m),
                Ok(Some(rho)) if !(rho.is_finite() && (0.5..=1.5).contains(&rho)) => {
                    let from = b
                        .pressure
                        .map(|p| format!("pressure {p} gives "))
                        .unwrap_or_default();
                    return refuse(format!(
                        "{from}density {rho} must lie in [0.5, 1.5] (relative to the reference 1; the scheme is weakly compressible)"
                    ));
                }
                Ok(_) => {}
            }
            if b.kind != BoundaryKind::Velocity
                && (b.profile != Profile::Uniform || b.amplitude.is_some())
            {
                return refuse(format!(
                    "a {} face takes no profile or amplitude (only `velocity` does)",
                    b.kind.name()
                ));
            }
            if b.profile == Profile::Parabolic && v[b.face.axis()] == 0.0 {
                return refuse(format!(
                    "a parabolic inlet needs a velocity through the face: {v:?} has no component along its normal"
                ));
            }
            if b.temperature.is_some() && self.thermal.is_none() {
                return refuse(
                    "`temperature` needs a [thermal] section (the temperature lattice)".into(),
                );
            }
            let why = match b.kind {
                BoundaryKind::Wall | BoundaryKind::Velocity => "",
                BoundaryKind::Pressure | BoundaryKind::Outflow => {
                    "the temperature leaves an outlet with zero gradient"
                }
                BoundaryKind::FreeSlip => "a free-slip wall is adiabatic",
            };
            if b.temperature.is_some() && !why.is_empty() {
                return refuse(format!(
                    "a {} face takes no `temperature` (only `wall` and `velocity` do: {why})",
                    b.kind.name()
                ));
            }
            if b.nusselt && (b.kind != BoundaryKind::Wall || b.temperature.is_none()) {
                return refuse(
                    "`nusselt` reports the heat of a wall held at a `temperature` (kind = \"wall\" with `temperature`)"
                        .into(),
                );
            }
            if let Some(sp) = &b.sponge {
                if let Err(m) = self.sponge_layer(b, sp) {
                    return refuse(m);
                }
            }
            if d.case == CaseKind::Cavity && b.kind != BoundaryKind::Wall {
                return refuse(format!(
                    "a {} face opens the cavity; use case = \"box\" for open flows",
                    b.kind.name()
                ));
            }
        }
        // Layers on opposite faces leave fluid between them.
        let layers = self.sponges().layers;
        for (k, a) in layers.iter().enumerate() {
            if let Some(b) = layers[k + 1..]
                .iter()
                .find(|b| b.face.axis() == a.face.axis())
            {
                if a.width + b.width >= a.extent {
                    return Err(bad(
                        "boundary",
                        "--config",
                        format!(
                            "faces {} and {}: their sponge layers of {} and {} planes cover all {} nodes between them; leave fluid between the layers",
                            a.face.name(),
                            b.face.name(),
                            a.width,
                            b.width,
                            a.extent
                        ),
                    ));
                }
            }
        }
        for face in Face::ALL {
            let open: Vec<(BoundaryKind, Option<f64>)> = self
                .boundary
                .iter()
                .filter(|b| b.face == face && b.kind.is_open())
                .map(|b| (b.kind, self.boundary_density(b).ok().flatten()))
                .collect();
            if let Some(&(k, rho)) = open.iter().find(|&&o| o != open[0]) {
                let (k0, rho0) = open[0];
                let what = if k == k0 {
                    format!(
                        "densities {} and {}",
                        rho0.unwrap_or(1.0),
                        rho.unwrap_or(1.0)
                    )
                } else {
                    format!("{} and {}", k0.name(), k.name())
                };
                return Err(bad(
                    "boundary",
                    "--config",
                    format!(
                        "face {}: its open parts must share one kind and density (here {what}); make the others walls or inlets",
                        face.name()
                    ),
                ));
            }
        }
        let schedule = self.inlet_schedule()?;
        // The amplitudes over the run (every step up to a million, evenly spaced beyond).
        let last = self.run.steps.unwrap_or(self.run.max_steps);
        let stride = (last / 1_000_000).max(1);
        for (slot, (face, u, _, _)) in self.moving_walls().into_iter().enumerate() {
            let mut worst = (1.0f64, 0u64);
            if !schedule.is_constant_one() {
                for t in (0..=last).step_by(stride as usize) {
                    let a = schedule.amplitude(slot, t);
                    if !a.is_finite() || a.abs() > worst.0.abs() || worst.0.is_nan() {
                        worst = (a, t);
                        if !a.is_finite() {
                            break;
                        }
                    }
                }
            }
            let (a, t) = worst;
            let peak = u.map(|c| c * a);
            if peak.iter().any(|c| !c.is_finite() || c.abs() >= MAX_SPEED) {
                let when = if a == 1.0 {
                    String::new()
                } else {
                    format!(" (amplitude {a} at step {t})")
                };
                return Err(bad(
                    "boundary",
                    "--config",
                    format!(
                        "face {}: velocity {peak:?}{when} in lattice units; each component must stay below {MAX_SPEED} (Mach = U√3)",
                        face.name()
                    ),
                ));
            }
        }
        Ok(())
    }

    fn validate_sampling(&self) -> Result<(), ConfigError> {
        let f = &self.forces;
        if f.every > 0 && self.domain.obstacles.is_empty() && self.body.is_empty() {
            return Err(bad(
                "forces.every",
                "--config",
                "forces are measured on obstacles and bodies, and the case has none",
            ));
        }
        match (f.area, f.velocity) {
            (None, None) => {}
            (Some(a), Some(u)) if a.is_finite() && a > 0.0 && u.is_finite() && u > 0.0 => {}
            (Some(_), Some(_)) => {
                return Err(bad(
                    "forces.area",
                    "--config",
                    format!(
                        "area {:?} and velocity {:?} must be finite numbers > 0",
                        f.area, f.velocity
                    ),
                ))
            }
            _ => {
                return Err(bad(
                    "forces.area",
                    "--config",
                    "the coefficients need both `area` and `velocity`",
                ))
            }
        }
        if let Some(from) = self.output.average_from {
            let unit = if self.units.is_some() { " s" } else { " steps" };
            if !(from.is_finite() && from >= 0.0) {
                return Err(bad(
                    "output.average_from",
                    "--config",
                    format!("{}{unit} must be a finite time ≥ 0", num_exact(from)),
                ));
            }
            if self.output.average_every == 0 {
                return Err(bad(
                    "output.average_every",
                    "--config",
                    "the averages need an interval > 0 between their samples",
                ));
            }
            let first = self.averaging().map_or(0, |a| a.from);
            if let Some(steps) = self.run.steps.filter(|&n| first > n) {
                return Err(bad(
                    "output.average_from",
                    "--config",
                    format!(
                        "{}{unit} is step {first}, after the run's last ({steps}): nothing would be averaged",
                        num_exact(from)
                    ),
                ));
            }
        }
        for f in self.output.arrays()? {
            if f.is_mean() && self.output.average_from.is_none() {
                return Err(bad(
                    "output.fields",
                    "--fields",
                    format!("`{f}` needs output.average_from (the time the averages start)"),
                ));
            }
            if f == OutputField::MeanTemperature && self.thermal.is_none() {
                return Err(bad(
                    "output.fields",
                    "--fields",
                    format!("`{f}` needs a [thermal] section (the temperature lattice)"),
                ));
            }
        }
        if !self.probe.is_empty() && self.output.probe_every == 0 {
            return Err(bad(
                "output.probe_every",
                "--config",
                "probes need a sampling interval > 0",
            ));
        }
        for (k, p) in self.probe.iter().enumerate() {
            if let Err(m) = self.probe_node(p) {
                return Err(bad("probe", "--config", format!("probe {k}: {m}")));
            }
        }
        let mut names: Vec<String> = Vec::new();
        for (k, p) in self.line.iter().enumerate() {
            let refuse = |m: String| Err(bad("line", "--config", format!("line {k}: {m}")));
            if let Err(m) = self.line_nodes(p) {
                return refuse(m);
            }
            let name = p.line_name(k);
            if name.is_empty() || name.chars().any(|c| c == ',' || c == '"' || c.is_control()) {
                return refuse(format!(
                    "name {name:?} must be non-empty, without commas, quotes or control characters (it names CSV rows)"
                ));
            }
            if names.contains(&name) {
                return refuse(format!("name {name:?} names another line too"));
            }
            names.push(name);
        }
        Ok(())
    }

    /// The nodes a `[[line]]` crosses its plane at (along [`LineConfig::across`]), the
    /// nearest to its `at` (nodes, or metres with `[units]`); `None` for a line of plane means;
    /// or why there are none.
    pub fn line_nodes(&self, p: &LineConfig) -> Result<Option<[usize; 2]>, String> {
        let unit = if self.units.is_some() { " m" } else { "" };
        let at = match (p.at, p.plane) {
            (None, true) => return Ok(None),
            (Some(_), true) => {
                return Err(
                    "`at` and `plane = true` exclude each other (plane means cover every line along the axis)"
                        .into(),
                )
            }
            (None, false) => {
                return Err(
                    "needs `at` (where the line crosses the plane of the other two axes) or `plane = true`"
                        .into(),
                )
            }
            (Some(at), false) => at,
        };
        let mut point = [0.0; 3];
        for (k, a) in p.across().into_iter().enumerate() {
            point[a] = at[k];
        }
        let q = self.node_coordinates(point);
        let mut node = [0; 2];
        for (k, a) in p.across().into_iter().enumerate() {
            let (q, n) = (q[a], self.domain.size[a]);
            if !(q.is_finite() && q > -0.5 && q < n as f64 - 0.5) {
                return Err(format!(
                    "at = {:?}{unit} (along {:?}) lies outside the domain along {}",
                    at,
                    p.across().map(|a| ["x", "y", "z"][a]),
                    ["x", "y", "z"][a]
                ));
            }
            node[k] = (q.round().max(0.0) as usize).min(n - 1);
        }
        Ok(Some(node))
    }

    /// The node nearest to a probe's point (in nodes, or metres with `[units]`), or why there is
    /// none.
    pub fn probe_node(&self, p: &ProbeConfig) -> Result<[usize; 3], String> {
        let unit = if self.units.is_some() { " m" } else { "" };
        let at = self.node_coordinates(p.at);
        let mut node = [0; 3];
        for (a, &q) in at.iter().enumerate() {
            let n = self.domain.size[a];
            if !(q.is_finite() && q > -0.5 && q < n as f64 - 0.5) {
                return Err(format!(
                    "at = {:?}{unit} lies outside the domain along {}",
                    p.at,
                    ["x", "y", "z"][a]
                ));
            }
            node[a] = (q.round().max(0.0) as usize).min(n - 1);
        }
        Ok(node)
    }

    /// The reference area and velocity of the force coefficients in lattice units (nodes², lattice
    /// velocity), when the case gives them.
    pub fn force_reference(&self) -> Option<(f64, f64)> {
        let (a, u) = (self.forces.area?, self.forces.velocity?);
        Some(match self.unit_scales() {
            Some(s) => (a / (s.dx * s.dx), u / s.velocity),
            None => (a, u),
        })
    }

    /// The amplitude of every wall-velocity slot over time (the order of [`Self::moving_walls`]).
    pub fn inlet_schedule(&self) -> Result<InletSchedule, ConfigError> {
        let mut slots: Vec<(&str, Option<&Expression>)> = Vec::new();
        if self.domain.case == CaseKind::Cavity {
            slots.push(("z+", None));
        }
        for b in self.moving_boundaries() {
            slots.push((b.face.name(), b.amplitude.as_ref()));
        }
        let seconds = self.unit_scales().map_or(1.0, |s| s.dt);
        InletSchedule::new(&slots, seconds)
    }

    /// The profile of every wall-velocity slot (the order of [`Self::moving_walls`]).
    pub fn wall_profiles(&self) -> Vec<Profile> {
        let mut p = Vec::new();
        if self.domain.case == CaseKind::Cavity {
            p.push(Profile::Uniform);
        }
        p.extend(self.moving_boundaries().map(|b| b.profile));
        p
    }

    /// The moving walls of the case, in lattice units: the cavity's lid on z+, every `[[boundary]]`
    /// wall with a non-zero velocity and every velocity inlet (converted from m/s with `[units]`),
    /// each with whether it is an inlet and the patch it covers (`None`: the whole face).
    pub fn moving_walls(&self) -> Vec<(Face, [f64; 3], bool, Option<FacePatch>)> {
        let mut walls = Vec::new();
        if self.domain.case == CaseKind::Cavity {
            walls.push((Face::ZPlus, [self.physics.lid_speed, 0.0, 0.0], false, None));
        }
        let scale = self.unit_scales().map_or(1.0, |s| 1.0 / s.velocity);
        for b in self.moving_boundaries() {
            let inlet = b.kind == BoundaryKind::Velocity;
            let patch = self.face_patch(b).ok().flatten();
            walls.push((b.face, b.velocity.map(|v| v * scale), inlet, patch));
        }
        walls
    }

    /// The patch of each `[[boundary]]` table (call after [`Self::validate`]).
    fn boundary_patches(&self) -> Vec<Option<FacePatch>> {
        self.boundary
            .iter()
            .map(|b| self.face_patch(b).ok().flatten())
            .collect()
    }

    /// The nodes a `[[boundary]]` table's `patch` holds, `None` for a table of the whole face; an
    /// error says why the patch cannot be placed.
    pub fn face_patch(&self, b: &BoundaryConfig) -> Result<Option<FacePatch>, String> {
        let Some(p) = b.patch else {
            return Ok(None);
        };
        let axes = b.face.transverse();
        let names = axes.map(|a| ["x", "y", "z"][a]);
        if p.min.iter().chain(&p.max).any(|c| !c.is_finite()) {
            return Err(format!(
                "patch corners {:?} and {:?} must be finite",
                p.min, p.max
            ));
        }
        if (0..2).any(|k| p.min[k] > p.max[k]) {
            return Err(format!(
                "patch min {:?} exceeds max {:?} (corners along {names:?})",
                p.min, p.max
            ));
        }
        let mut lo = [0; 2];
        let mut hi = [0; 2];
        for (k, &a) in axes.iter().enumerate() {
            let node = |c: f64| {
                let mut q = [0.0; 3];
                q[a] = c;
                self.node_coordinates(q)[a]
            };
            let n = self.domain.size[a] as f64;
            // The nodes whose centres lie within [min, max], clipped to the lattice.
            let (first, last) = (
                node(p.min[k]).ceil().max(0.0),
                node(p.max[k]).floor().min(n - 1.0),
            );
            if first > last {
                let unit = if self.units.is_some() { " m" } else { "" };
                return Err(format!(
                    "patch spans {}..{}{unit} along {}, which holds no node centre of the lattice's {} (check min and max, given along {names:?})",
                    p.min[k], p.max[k], names[k], self.domain.size[a]
                ));
            }
            (lo[k], hi[k]) = (first as usize, last as usize);
        }
        Ok(Some(FacePatch {
            face: b.face,
            lo,
            hi,
        }))
    }

    /// The sponge layers of the case's pressure outlets (call after [`Self::validate`]).
    pub fn sponges(&self) -> Sponges {
        Sponges {
            layers: self
                .boundary
                .iter()
                .filter_map(|b| self.sponge_layer(b, b.sponge.as_ref()?).ok())
                .collect(),
        }
    }

    /// The layer `sp` of face table `b` in lattice terms; an error says why it cannot be one.
    fn sponge_layer(&self, b: &BoundaryConfig, sp: &SpongeConfig) -> Result<SpongeLayer, String> {
        if b.kind != BoundaryKind::Pressure {
            return Err(format!(
                "kind = \"{}\" takes no sponge (only `pressure` does: the layer relaxes towards the outlet's density)",
                b.kind.name()
            ));
        }
        if b.patch.is_some() {
            return Err(
                "a sponge spans its whole face; a patch outlet takes none (make the outlet a whole face)"
                    .into(),
            );
        }
        let strength = sp.strength;
        if !(strength.is_finite() && strength > 0.0 && strength <= SpongeConfig::MAX_STRENGTH) {
            return Err(format!(
                "sponge.strength {strength} must lie in (0, {}] (the share of an outgoing wave removed per step next to the face; stronger layers were unstable beside walls)",
                SpongeConfig::MAX_STRENGTH
            ));
        }
        let extent = self.domain.size[b.face.axis()];
        let nodes = self.node_length(sp.width);
        let unit = if self.units.is_some() { " m" } else { "" };
        let width = nodes.round();
        let axis = ["x", "y", "z"][b.face.axis()];
        if !(nodes.is_finite() && width >= 2.0 && width <= (extent / 2) as f64) {
            return Err(format!(
                "sponge.width {}{unit} rounds to {} planes of nodes; it must be 2 to {} (half the {extent} nodes along {axis}), so that fluid remains beyond it",
                sp.width,
                num_sig(width, 3),
                extent / 2,
            ));
        }
        Ok(SpongeLayer {
            face: b.face,
            width: width as usize,
            strength,
            drho: self.boundary_density(b)?.unwrap_or(1.0) - 1.0,
            extent,
        })
    }

    /// The `[[boundary]]` faces that take a wall-velocity slot: inlets and moving walls.
    fn moving_boundaries(&self) -> impl Iterator<Item = &BoundaryConfig> {
        self.boundary.iter().filter(|b| {
            b.kind == BoundaryKind::Velocity
                || (b.kind == BoundaryKind::Wall && b.velocity != [0.0; 3])
        })
    }

    /// The open faces of the case (pressure outlets, outflows, free-slip walls) with their kind,
    /// for a pressure outlet its density, and the patch they cover (`None`: the whole face).
    pub fn open_faces(&self) -> Vec<(Face, BoundaryKind, f64, Option<FacePatch>)> {
        self.boundary
            .iter()
            .filter(|b| b.kind.is_open())
            .map(|b| {
                let rho = self.boundary_density(b).ok().flatten();
                let patch = self.face_patch(b).ok().flatten();
                (b.face, b.kind, rho.unwrap_or(1.0), patch)
            })
            .collect()
    }

    /// The patches of the case's faces that are resting walls (`[[boundary]]` tables of kind
    /// `wall` at rest with a `patch`): they close their part of a face whose own table is open.
    pub fn wall_patches(&self) -> Vec<FacePatch> {
        self.boundary
            .iter()
            .filter(|b| b.kind == BoundaryKind::Wall && b.velocity == [0.0; 3])
            .filter_map(|b| self.face_patch(b).ok().flatten())
            .collect()
    }

    /// A `[[boundary]]` face's density relative to the reference 1: its `density`, or the density
    /// whose pressure `(ρ − 1)/3` is its `pressure` (in lattice units; from Pa with `[units]`, one
    /// lattice pressure unit being `units.density (dx/dt)²`), or `None` where it gives neither. An
    /// error says why the two keys cannot be read.
    pub fn boundary_density(&self, b: &BoundaryConfig) -> Result<Option<f64>, String> {
        let Some(p) = b.pressure else {
            return Ok(b.density);
        };
        if b.density.is_some() {
            return Err("give `density` or `pressure`, not both (they set the same thing)".into());
        }
        let unit = match (self.units, self.unit_scales()) {
            (Some(PhysicalUnits { density: Some(rho), .. }), Some(s)) => rho * s.velocity * s.velocity,
            (Some(_), _) => {
                return Err(format!(
                    "pressure {p} is in Pa with [units], which then need `units.density` (kg/m³); or give the face's `density`"
                ))
            }
            (None, _) => 1.0,
        };
        if !p.is_finite() {
            return Err(format!("pressure {p} must be finite"));
        }
        Ok(Some(1.0 + 3.0 * p / unit))
    }

    /// The flow lattice's collision model of this case (call after [`Self::validate`]).
    pub fn flow_model(&self, lattice: &LatticeParams) -> FlowModel {
        FlowModel {
            collision: self.numerics.collision,
            omega: lattice.omega,
            mrt_rates: self.numerics.mrt_rates,
            trt_magic: self.numerics.trt_magic,
            smagorinsky: self.numerics.smagorinsky,
            force: lattice.force,
        }
    }

    /// The temperature lattice of this case, `None` without `[thermal]` (call after
    /// [`Self::validate`]): its model in lattice units, what closes each face in [`Face`] order
    /// (a wall with a `temperature` and every velocity inlet are held, outlets are zero-gradient,
    /// other faces adiabatic; a periodic axis's faces are adiabatic and never used) and the
    /// uniform θ = T − t0 it starts from; in 16-bit storage, the store scale its temperatures
    /// call for (`ThermalSetup::store_scale_for`).
    pub fn thermal_setup(&self, lattice: &LatticeParams) -> Option<ThermalSetup> {
        let t = self.thermal.as_ref()?;
        let setup = t.setup(
            lattice.viscosity,
            self.unit_scales().as_ref(),
            &self.boundary,
            &self.boundary_patches(),
            self.domain.periodic,
            self.numerics.smagorinsky.is_some(),
        );
        let mut setup = setup.expect("the case was validated");
        setup.store_scale = setup.store_scale_for(self.numerics.precision);
        Some(setup)
    }

    fn validate_units(&self, u: &PhysicalUnits) -> Result<(), ConfigError> {
        let checks = [
            (u.length, "units.length", "--phys-length", "m"),
            (u.velocity, "units.velocity", "--phys-velocity", "m/s"),
            (u.viscosity, "units.viscosity", "--phys-viscosity", "m²/s"),
        ];
        for (v, key, flag, unit) in checks {
            if !(v.is_finite() && v > 0.0) {
                return Err(bad(
                    key,
                    flag,
                    format!("{v} {unit} must be a finite number > 0"),
                ));
            }
        }
        if let Some(rho) = u.density {
            if !(rho.is_finite() && rho > 0.0) {
                return Err(bad(
                    "units.density",
                    "--config",
                    format!("{rho} kg/m³ must be a finite number > 0"),
                ));
            }
        }
        if self.physics.viscosity.is_some() {
            return Err(bad(
                "physics.viscosity",
                "--viscosity",
                "a lattice viscosity conflicts with physical units (which fix Re = U L / ν); give one or the other",
            ));
        }
        if self.physics.lid_speed == 0.0 {
            return Err(bad(
                "physics.lid_speed",
                "--lid-speed",
                "physical units need a lattice lid speed > 0 to fix the time step",
            ));
        }
        // Each input may be finite and the scales derived from them still overflow or underflow
        // (1e-300 m at 1e300 m/s: dt = 0); the writers and the time series cannot use such scales.
        if let Some(s) = self.unit_scales() {
            let ok = |v: f64| v.is_finite() && v > 0.0;
            let checks = [
                (
                    s.dx,
                    "units.length",
                    "--phys-length",
                    "the node spacing dx = L / nx",
                ),
                (
                    s.dt,
                    "units.velocity",
                    "--phys-velocity",
                    "the time step dt = U_lattice dx / U",
                ),
                (
                    s.velocity,
                    "units.velocity",
                    "--phys-velocity",
                    "the velocity unit dx / dt",
                ),
                (
                    s.viscosity,
                    "units.viscosity",
                    "--phys-viscosity",
                    "the viscosity unit dx² / dt",
                ),
            ];
            for (v, key, flag, what) in checks {
                if !ok(v) {
                    return Err(bad(
                        key,
                        flag,
                        format!(
                            "{what} is {}, not a finite number > 0: the physical units are out of range (L = {} m, U = {} m/s, ν = {} m²/s)",
                            num(v),
                            num_exact(u.length),
                            num_exact(u.velocity),
                            num_exact(u.viscosity)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The case's initial state (`[initial]`), `None` when it starts at rest with ρ = 1.
    pub fn initial_state(&self) -> Result<Option<InitialState>, ConfigError> {
        self.initial
            .as_ref()
            .map(|init| InitialState::new(init, self.domain.size, self.unit_scales().as_ref()))
            .transpose()
    }

    /// The conversion factors when the case has physical units (call after [`Self::validate`]).
    pub fn unit_scales(&self) -> Option<UnitScales> {
        let u = self.units.as_ref()?;
        let dx = u.length / self.domain.size[0] as f64;
        let dt = self.physics.lid_speed * dx / u.velocity;
        Some(UnitScales {
            dx,
            dt,
            velocity: dx / dt,
            viscosity: dx * dx / dt,
        })
    }

    /// Which states the time averages sample (`output.average_from` converted to the first step,
    /// rounded up, and `output.average_every`), `None` without averages.
    pub fn averaging(&self) -> Option<crate::Averaging> {
        let from = self.output.average_from?;
        // A time that is a whole number of steps but whose quotient rounds up stays that step.
        let steps = self
            .unit_scales()
            .map_or(from, |s| from / s.dt * (1.0 - 4.0 * f64::EPSILON));
        Some(crate::Averaging {
            from: steps.ceil().max(0.0) as u64,
            every: self.output.average_every,
        })
    }

    /// Steps between convergence checks: the configured value, or about one convective time `L/U`
    /// rounded to a multiple of 100 (at least 100).
    pub fn resolved_check_every(&self) -> u64 {
        if self.run.check_every > 0 {
            return self.run.check_every;
        }
        let l_over_u = if self.physics.lid_speed > 0.0 {
            self.domain.size[0] as f64 / self.physics.lid_speed
        } else {
            1000.0
        };
        ((l_over_u / 100.0).round() as u64).max(1) * 100
    }

    /// Parses a case file, TOML or JSON by extension; errors carry line and column.
    pub fn from_file(path: &Path) -> Result<Self, CaseFileError> {
        let shown = path.to_path_buf();
        let bytes = std::fs::read(path).map_err(|e| CaseFileError::Read {
            path: shown.clone(),
            message: e.to_string(),
        })?;
        let text = String::from_utf8(bytes).map_err(|e| {
            // Where the text stops being UTF-8, as a line and column of the valid part before it.
            let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            let valid = std::str::from_utf8(valid).unwrap_or_default();
            let (line, column) = line_column(valid, valid.len());
            CaseFileError::NotUtf8 {
                path: shown.clone(),
                line,
                column,
            }
        })?;
        let is_json = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        let mut case = Self::parse(&text, is_json)
            .map_err(|error| CaseFileError::Syntax { path: shown, error })?;
        // STL paths are relative to the case file, wherever the program runs.
        let folder = path.parent().unwrap_or(Path::new(""));
        for b in &mut case.body {
            if b.stl.is_relative() && !b.stl.as_os_str().is_empty() {
                b.stl = folder.join(&b.stl);
            }
        }
        Ok(case)
    }

    /// Parses case text (TOML, or JSON when `json`). The message is one line and gives the line and
    /// column (in characters) where the text went wrong.
    pub fn parse(text: &str, json: bool) -> Result<Self, SyntaxError> {
        if json {
            serde_json::from_str(text).map_err(|e| SyntaxError::json(&e))
        } else {
            toml::from_str(text).map_err(|e| SyntaxError::toml(text, &e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_case_derives_the_documented_parameters() {
        let c = CaseConfig::default();
        let p = c.validate().unwrap();
        assert_eq!(p.length, 48.0);
        assert!((p.viscosity - 0.1 * 48.0 / 1000.0).abs() < 1e-15);
        assert!((p.tau - (3.0 * 0.0048 + 0.5)).abs() < 1e-15);
        assert!((p.reynolds - 1000.0).abs() < 1e-9);
    }

    #[test]
    fn a_case_file_that_is_not_utf8_is_refused_with_its_position() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("case.toml");
        std::fs::write(&path, b"[domain]\nsize = [16, 16, \xff16]\n").unwrap();
        let e = CaseConfig::from_file(&path).unwrap_err().to_string();
        assert!(
            e.contains("line 2, column 17") && e.contains("not UTF-8"),
            "{e}"
        );
    }

    #[test]
    fn obstacles_are_in_metres_with_units_and_keep_their_size_when_refined() {
        let mut c = CaseConfig::default();
        c.domain.case = CaseKind::Box;
        c.physics.lid_speed = 0.1;
        c.units = Some(PhysicalUnits {
            length: 0.1,
            velocity: 0.01,
            viscosity: 1e-6,
            density: None,
        });
        c.domain.obstacles = vec![
            Obstacle::Sphere {
                centre: [0.05, 0.025, 0.0125],
                radius: 0.01,
            },
            Obstacle::Box {
                min: [0.0, 0.0, 0.0],
                max: [0.02, 0.1, 0.1],
            },
        ];
        for n in [40usize, 80] {
            c.domain.size = [n, n / 2, n / 4];
            c.validate().unwrap();
            let dx = 0.1 / n as f64;
            let o = c.lattice_obstacles();
            let Obstacle::Sphere { centre, radius } = o[0] else {
                panic!()
            };
            assert!((radius - 0.01 / dx).abs() < 1e-9, "{n}: {radius}");
            assert!((centre[0] - (0.05 / dx - 0.5)).abs() < 1e-9);
            // The box holds the nodes whose centres lie in its first 2 cm: n / 5 of them along x.
            let Obstacle::Box { min, max } = o[1] else {
                panic!()
            };
            let inside = (0..n)
                .filter(|&i| i as f64 >= min[0] && (i as f64) < max[0])
                .count();
            assert_eq!(inside, n / 5);
        }
        // Without units they stay node coordinates.
        c.units = None;
        assert_eq!(c.lattice_obstacles(), c.domain.obstacles);
    }

    #[test]
    fn inlet_profiles_and_amplitudes_are_checked() {
        let parse = |extra: &str| {
            let text = format!(
                "[domain]\ncase = \"box\"\nsize = [16, 8, 8]\n[physics]\nviscosity = 0.05\n\
                 [run]\nsteps = 400\n[[boundary]]\nface = \"x-\"\nkind = \"velocity\"\n\
                 velocity = [0.05, 0, 0]\n{extra}"
            );
            CaseConfig::parse(&text, false).unwrap().validate()
        };
        parse("profile = \"parabolic\"\namplitude = \"sin(PI * t / 800)^2\"\n").unwrap();
        parse("amplitude = 0.5\n").unwrap();
        for (extra, says) in [
            // Too fast at the run's steps: 0.05 · t / 20 reaches 1 by step 400.
            ("amplitude = \"t / 20\"\n", "amplitude"),
            ("amplitude = \"x * t\"\n", "uses `x`"),
            ("amplitude = \"sin(\"\n", "amplitude"),
            ("amplitude = \"1 / (t - 10)\"\n", "velocity"),
            (
                "[[boundary]]\nface = \"x+\"\nkind = \"pressure\"\nprofile = \"parabolic\"\n",
                "only `velocity`",
            ),
        ] {
            let e = parse(extra).unwrap_err();
            assert_eq!(e.key, "boundary", "{extra}: {e:?}");
            assert!(e.message.contains(says), "{extra}: {e:?}");
        }
        // The schedule: amplitudes per slot and step, 1 where none is given.
        let c = CaseConfig::parse(
            "[domain]\ncase = \"box\"\n[physics]\nviscosity = 0.05\n[[boundary]]\nface = \"z-\"\n\
             velocity = [0.01, 0, 0]\n[[boundary]]\nface = \"x-\"\nkind = \"velocity\"\n\
             velocity = [0.02, 0, 0]\namplitude = \"t / 100\"\n",
            false,
        )
        .unwrap();
        let s = c.inlet_schedule().unwrap();
        assert_eq!(s.amplitudes(50)[..3], [1.0, 0.5, 1.0]);
    }

    #[test]
    fn an_empty_output_folder_is_refused() {
        let mut c = CaseConfig::default();
        c.output.dir = PathBuf::new();
        let e = c.validate().unwrap_err();
        assert_eq!(e.flag, "--output", "{e:?}");
    }

    #[test]
    fn output_fields_are_checked_by_name_from_a_case_file() {
        let parse = |fields: &str| {
            CaseConfig::parse(&format!("[output]\nfields = {fields}\n"), false)
                .unwrap()
                .validate()
        };
        // The default is what the VTK files held before the list existed.
        assert_eq!(
            CaseConfig::default().output.arrays().unwrap(),
            OutputField::DEFAULT
        );
        parse(r#"["velocity", "vorticity", "q_criterion"]"#).unwrap();
        let e = parse(r#"["velocity", "vorticty"]"#).unwrap_err();
        assert_eq!((e.key, e.flag), ("output.fields", "--fields"));
        assert!(e.message.contains("`vorticty`"), "{e}");
        assert!(parse(r#"["speed", "speed"]"#).is_err());
        assert!(parse("[]").is_err());
        // Temperature only where a temperature lattice runs.
        let e = parse(r#"["velocity", "temperature"]"#).unwrap_err();
        assert_eq!(e.key, "output.fields");
        assert!(e.message.contains("[thermal]"), "{e}");
        // With no VTK files an empty list is no contradiction.
        let mut c = CaseConfig::default();
        c.output.vtk = false;
        c.output.fields.clear();
        c.validate().unwrap();
    }

    #[test]
    fn each_bad_value_names_its_flag() {
        type Mutation = Box<dyn Fn(&mut CaseConfig)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|c| c.domain.size = [0, 8, 8]), "--size"),
            (Box::new(|c| c.domain.size = [8, 1, 8]), "--size"),
            (Box::new(|c| c.physics.reynolds = 0.0), "--re"),
            (Box::new(|c| c.physics.reynolds = -3.0), "--re"),
            (Box::new(|c| c.physics.reynolds = f64::NAN), "--re"),
            (
                Box::new(|c| c.physics.viscosity = Some(-0.01)),
                "--viscosity",
            ),
            (Box::new(|c| c.physics.viscosity = Some(0.0)), "--viscosity"),
            (Box::new(|c| c.physics.lid_speed = 0.4), "--lid-speed"),
            (Box::new(|c| c.physics.lid_speed = 0.0), "--lid-speed"),
            (Box::new(|c| c.run.steps = Some(0)), "--steps"),
            (Box::new(|c| c.run.tolerance = 0.0), "--tolerance"),
            (Box::new(|c| c.run.max_steps = 0), "--max-steps"),
            (Box::new(|c| c.run.watchdog_every = 0), "--watchdog-every"),
            (
                Box::new(|c| c.run.density_bounds = [1.2, 2.0]),
                "--density-bounds",
            ),
            (
                Box::new(|c| c.run.density_bounds = [0.5, f64::INFINITY]),
                "--density-bounds",
            ),
            (
                Box::new(|c| c.run.density_bounds = [-1.0, 2.0]),
                "--density-bounds",
            ),
            // τ = 0.5 + 3e-9: above ½ in f64, exactly ½ in f32.
            (
                Box::new(|c| c.physics.viscosity = Some(1e-9)),
                "--viscosity",
            ),
            (Box::new(|c| c.physics.reynolds = 1e12), "--re"),
            (Box::new(|c| c.hardware.threads = 100_000), "--threads"),
            (Box::new(|c| c.domain.size = [1 << 14; 3]), "--size"),
            (
                Box::new(|c| {
                    c.domain.obstacles = vec![Obstacle::Box {
                        min: [2.0, 2.0, 2.0],
                        max: [2.0, 5.0, 5.0],
                    }]
                }),
                "--config",
            ),
            (
                Box::new(|c| {
                    c.domain.obstacles = vec![Obstacle::Sphere {
                        centre: [1.0, 1.0, f64::NAN],
                        radius: 2.0,
                    }]
                }),
                "--config",
            ),
        ];
        for (mutate, flag) in cases {
            let mut c = CaseConfig::default();
            mutate(&mut c);
            let e = c.validate().unwrap_err();
            assert_eq!(e.flag, flag, "{e}");
            assert!(e.to_string().starts_with(flag));
        }
    }

    /// `output.average_from` gives the first sampled step (seconds with `[units]`, rounded up);
    /// a time that is not one, no interval, a start after the run and mean arrays without
    /// averages are refused naming their key.
    #[test]
    fn averages_start_where_average_from_says_or_are_refused_naming_the_key() {
        let mut c = CaseConfig::default();
        c.run.steps = Some(1000);
        c.output.average_from = Some(250.0);
        c.output.average_every = 4;
        c.validate().unwrap();
        assert_eq!(
            c.averaging(),
            Some(crate::Averaging {
                from: 250,
                every: 4
            })
        );
        c.units = Some(PhysicalUnits {
            length: 0.1,
            velocity: 0.01,
            viscosity: 1e-6,
            density: None,
        });
        c.output.average_from = Some(0.5);
        // dt = U_lb dx / U = 0.1 · (0.1/48) / 0.01 s = 1/48 s: 0.5 s is step 24.
        c.domain.size = [48, 48, 48];
        c.validate().unwrap();
        assert_eq!(c.averaging().unwrap().from, 24);
        let refused = |c: &CaseConfig, key: &str, says: &str| {
            let e = c.validate().unwrap_err();
            assert_eq!(e.key, key, "{e}");
            assert!(e.message.contains(says), "{e}");
        };
        let mut d = CaseConfig::default();
        d.run.steps = Some(1000);
        for bad in [-1.0, f64::NAN] {
            d.output.average_from = Some(bad);
            refused(&d, "output.average_from", "must be a finite time ≥ 0");
        }
        d.output.average_from = Some(2000.0);
        refused(&d, "output.average_from", "after the run's last (1000)");
        d.output.average_from = Some(10.0);
        d.output.average_every = 0;
        refused(&d, "output.average_every", "interval > 0");
        let mut e = CaseConfig::default();
        e.output.fields = vec!["mean_velocity".into()];
        refused(
            &e,
            "output.fields",
            "`mean_velocity` needs output.average_from",
        );
    }

    #[test]
    fn device_specs_parse_counts_lists_and_reject_duplicates() {
        assert_eq!(DeviceSpec::parse("all").unwrap(), DeviceSpec::All);
        assert_eq!(DeviceSpec::parse("4").unwrap(), DeviceSpec::Count(4));
        assert_eq!(
            DeviceSpec::parse("2,0,1,3").unwrap(),
            DeviceSpec::List(vec![2, 0, 1, 3])
        );
        assert_eq!(DeviceSpec::parse("3,").unwrap(), DeviceSpec::List(vec![3]));
        assert!(DeviceSpec::parse("0").is_err());
        assert_eq!(
            DeviceSpec::parse("1,1").unwrap_err(),
            DeviceSpecError::Twice(1)
        );
        assert!(DeviceSpec::parse("a,b").is_err());
        assert_eq!(DeviceSpec::List(vec![2, 0]).resolve(4).unwrap(), vec![2, 0]);
        assert_eq!(
            DeviceSpec::List(vec![5]).resolve(4).unwrap_err(),
            DeviceSpecError::Missing {
                id: 5,
                available: 4
            }
        );
        assert!(DeviceSpec::Count(5).resolve(4).is_err());
        for s in ["all", "3", "2,0,1,3", "3,"] {
            let d = DeviceSpec::parse(s).unwrap();
            assert_eq!(DeviceSpec::parse(&d.to_string()).unwrap(), d);
        }
    }

    #[test]
    fn physical_units_fix_the_reynolds_number_and_the_scales() {
        // A 0.1 m water cavity (ν = 1e-6 m²/s) with a 0.01 m/s lid: Re = 1000.
        let mut c = CaseConfig::default();
        c.physics.reynolds = 5.0; // ignored once units are given
        c.units = Some(PhysicalUnits {
            length: 0.1,
            velocity: 0.01,
            viscosity: 1e-6,
            density: None,
        });
        let p = c.validate().unwrap();
        assert!((p.reynolds - 1000.0).abs() < 1e-9, "{}", p.reynolds);
        let s = c.unit_scales().unwrap();
        assert!((s.dx - 0.1 / 48.0).abs() < 1e-15);
        // dt = U_lb dx / U, and the lattice viscosity converts back to the physical one.
        assert!((s.dt - 0.1 * s.dx / 0.01).abs() < 1e-15);
        assert!((p.viscosity * s.viscosity - 1e-6).abs() < 1e-15);
        assert!((p.lid_speed * s.velocity - 0.01).abs() < 1e-15);

        c.units.as_mut().unwrap().viscosity = 0.0;
        assert_eq!(c.validate().unwrap_err().flag, "--phys-viscosity");
        c.units.as_mut().unwrap().viscosity = 1e-6;
        c.physics.viscosity = Some(0.01);
        assert_eq!(c.validate().unwrap_err().flag, "--viscosity");
        assert_eq!(CaseConfig::default().unit_scales(), None);
    }

    #[test]
    fn slice_planes_parse_and_are_checked_against_the_domain() {
        assert_eq!(SlicePlane::parse("y").unwrap(), SlicePlane::default());
        assert_eq!(
            SlicePlane::parse("z=3").unwrap(),
            SlicePlane {
                axis: 2,
                index: Some(3)
            }
        );
        assert!(SlicePlane::parse("w").is_err());
        assert!(SlicePlane::parse("x=-1").is_err());
        assert_eq!(SlicePlane::default().resolved_index([8, 10, 12]), 5);
        let mut c = CaseConfig::default();
        c.output.slice = SlicePlane::parse("x=48").unwrap();
        assert_eq!(c.validate().unwrap_err().flag, "--slice");
        c.output.slice = SlicePlane::parse("x=47").unwrap();
        assert!(c.validate().is_ok());
    }

    #[test]
    fn case_files_round_trip_and_report_positions() {
        let c = CaseConfig::default();
        let text = toml::to_string(&c).unwrap();
        assert_eq!(CaseConfig::parse(&text, false).unwrap(), c);
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(CaseConfig::parse(&json, true).unwrap(), c);
        let e = CaseConfig::parse("[physics]\nreynolds = \"many\"\n", false)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("line 2, column"), "{e}");
        let e = CaseConfig::parse("[physics]\nreynold = 5\n", false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("reynold"), "{e}");
        // Columns count characters, not bytes, and multi-byte text never splits a character.
        let text = "# ρ, ν, τ\n[physics]\nlid_speed = \"ü\"\n";
        assert_eq!(
            CaseConfig::parse(text, false).unwrap_err().at,
            Some((3, 13))
        );
        let e = CaseConfig::parse(text, false).unwrap_err().to_string();
        assert!(e.starts_with("line 3, column 13:"), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
        let e = CaseConfig::parse("{\"physics\": {\"reynolds\": \"many\"}}", true)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("line 1, column"), "{e}");
        assert!(!e.contains(" at line "), "position said twice: {e}");
    }

    #[test]
    fn degenerate_cases_are_refused_with_the_setting_named() {
        // 3 nodes between walls are all wall layer; a periodic axis of 2 is a quasi-2D flow.
        let mut c = CaseConfig::default();
        c.domain.size = [3, 8, 8];
        assert_eq!(c.validate().unwrap_err().flag, "--size");
        c.domain.size = [8, 2, 8];
        c.domain.periodic = [false, true, false];
        assert!(c.validate().is_ok());
        // τ = ∞ comes from the viscosity given, not from the Reynolds number.
        let mut c = CaseConfig::default();
        c.physics.viscosity = Some(1e308);
        assert_eq!(c.validate().unwrap_err().flag, "--viscosity");
        // Finite units whose derived time step underflows.
        let c = CaseConfig {
            units: Some(PhysicalUnits {
                length: 1e-300,
                velocity: 1e300,
                viscosity: 1.0,
                density: None,
            }),
            ..CaseConfig::default()
        };
        let e = c.validate().unwrap_err();
        assert_eq!(
            (e.key, e.flag),
            ("units.velocity", "--phys-velocity"),
            "{e}"
        );
    }

    #[test]
    fn devices_may_be_named_as_thelma_devices_lists_them() {
        assert_eq!(
            DeviceSpec::parse("cuda:0").unwrap(),
            DeviceSpec::List(vec![0])
        );
        assert_eq!(
            DeviceSpec::parse("cuda:2,CUDA:0").unwrap(),
            DeviceSpec::List(vec![2, 0])
        );
        assert!(DeviceSpec::parse("0")
            .unwrap_err()
            .to_string()
            .contains("`0,` or `cuda:0`"));
        assert!(DeviceSpec::parse("cuda:x").is_err());
    }

    #[test]
    fn slice_planes_in_case_files_take_the_command_line_form_too() {
        for (text, plane) in [
            ("slice = \"y\"", SlicePlane::default()),
            ("slice = \"z=10\"", SlicePlane::parse("z=10").unwrap()),
            ("slice = { axis = 1 }", SlicePlane::default()),
            (
                "slice = { axis = \"x\", index = 3 }",
                SlicePlane::parse("x=3").unwrap(),
            ),
        ] {
            let c = CaseConfig::parse(&format!("[output]\n{text}\n"), false).unwrap();
            assert_eq!(c.output.slice, plane, "{text}");
        }
        let e = CaseConfig::parse("[output]\nslice = \"w\"\n", false)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("line 2"), "{e}");
    }

    #[test]
    fn parse_errors_speak_of_numbers_not_rust_types() {
        let e = CaseConfig::parse("[run]\nsteps = -3\n", false)
            .unwrap_err()
            .to_string();
        assert!(!e.contains("u64") && e.contains("whole number"), "{e}");
        let e = CaseConfig::parse("[domain]\nsize = [8, -8, 8]\n", false)
            .unwrap_err()
            .to_string();
        assert!(!e.contains("usize"), "{e}");
    }

    #[test]
    fn the_precision_decides_whether_tau_is_above_one_half() {
        let mut c = CaseConfig::default();
        c.physics.viscosity = Some(1e-9);
        assert!(c.validate().is_err());
        c.numerics.precision = Precision::F64;
        let p = c.validate().unwrap();
        assert!(p.tau > 0.5);
    }

    #[test]
    fn f16_storage_collides_in_f32_and_f16c_is_refused_with_a_temperature_lattice() {
        let mut c = CaseConfig::default();
        c.numerics.precision = Precision::F16;
        assert!(c.validate().is_ok());
        // τ is checked in the arithmetic's precision, f32.
        c.physics.viscosity = Some(1e-9);
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("0.5 in f32"), "{e}");
        c.physics.viscosity = None;
        c.run.steps = Some(10);
        c.thermal = Some(ThermalConfig::default());
        // f16 stores the temperature lattice (whatever else the case may lack).
        if let Err(e) = c.validate() {
            assert!(!e.to_string().contains("--precision"), "{e}");
        }
        c.numerics.precision = Precision::F16c;
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("--precision") && e.contains("[thermal]") && !e.contains('\n'),
            "{e}"
        );
    }

    #[test]
    fn bodies_parse_with_defaults_and_their_paths_follow_the_case_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("case.toml");
        std::fs::write(
            &path,
            "[[body]]\nstl = \"parts/a.stl\"\n\n[[body]]\nstl = \"/abs/b.stl\"\nscale = [1.0, 2.0, 3.0]\nrotate = [0.0, 0.0, 90.0]\ntranslate = [1.0, 2.0, 3.0]\nname = \"b\"\n",
        )
        .unwrap();
        let c = CaseConfig::from_file(&path).unwrap();
        assert_eq!(c.body.len(), 2);
        assert_eq!(c.body[0].stl, dir.path().join("parts/a.stl"));
        assert_eq!(c.body[0].scale.factors(), [1.0; 3]);
        assert_eq!(c.body[0].rotate, [0.0; 3]);
        assert_eq!(c.body[1].stl, PathBuf::from("/abs/b.stl"));
        assert_eq!(c.body[1].scale.factors(), [1.0, 2.0, 3.0]);
        assert_eq!(c.body[1].name.as_deref(), Some("b"));
        let c = CaseConfig::parse("[[body]]\nstl = \"a.stl\"\nscale = 2\n", false).unwrap();
        assert_eq!(c.body[0].scale.factors(), [2.0; 3]);
        assert!(CaseConfig::parse("[[body]]\nstl = \"a.stl\"\ncolour = 1\n", false).is_err());
    }

    #[test]
    fn a_bad_body_value_is_refused_naming_its_key() {
        for (text, key) in [
            ("scale = -1.0", "body[0].scale"),
            ("scale = [1.0, 0.0, 1.0]", "body[0].scale"),
            ("rotate = [0.0, nan, 0.0]", "body[0].rotate"),
            ("translate = [inf, 0.0, 0.0]", "body[0].translate"),
        ] {
            let c =
                CaseConfig::parse(&format!("[[body]]\nstl = \"a.stl\"\n{text}\n"), false).unwrap();
            let e = c.validate().unwrap_err();
            assert!(e.message.starts_with(key), "{text}: {e}");
        }
    }

    /// With [units], obstacles are in metres: node i's centre at (i + 0.5) dx. A sphere keeps its
    /// physical size when the grid is refined, so its radius in nodes doubles with nx.
    #[test]
    fn obstacles_in_metres_keep_their_size_when_the_grid_is_refined() {
        let text = |n: usize| {
            format!(
                "[domain]\nsize = [{n}, {n}, {n}]\nobstacles = [{{ shape = \"sphere\", centre = [0.05, 0.05, 0.05], radius = 0.01 }}, {{ shape = \"box\", min = [0.0, 0.0, 0.0], max = [0.02, 0.1, 0.1] }}]\n[units]\nlength = 0.1\nvelocity = 0.01\nviscosity = 1e-6\n"
            )
        };
        let coarse = CaseConfig::parse(&text(20), false)
            .unwrap()
            .lattice_obstacles();
        let fine = CaseConfig::parse(&text(40), false)
            .unwrap()
            .lattice_obstacles();
        match (&coarse[0], &fine[0]) {
            (
                Obstacle::Sphere {
                    centre: c1,
                    radius: r1,
                },
                Obstacle::Sphere {
                    centre: c2,
                    radius: r2,
                },
            ) => {
                assert!((r1 - 2.0).abs() < 1e-12 && (r2 - 4.0).abs() < 1e-12);
                // The domain's centre: between nodes 9 and 10, and 19 and 20.
                assert!((c1[0] - 9.5).abs() < 1e-12 && (c2[0] - 19.5).abs() < 1e-12);
            }
            other => panic!("{other:?}"),
        }
        // The box [0, 2 cm) holds the nodes whose centre is in it: 4 of 20, 8 of 40.
        match &coarse[1] {
            Obstacle::Box { min, max } => {
                let n = (0..20)
                    .filter(|&i| (i as f64) >= min[0] && (i as f64) < max[0])
                    .count();
                assert_eq!(n, 4);
            }
            other => panic!("{other:?}"),
        }
        // Without units the numbers are node coordinates, unchanged.
        let mut c = CaseConfig::parse(&text(20), false).unwrap();
        c.units = None;
        assert_eq!(c.lattice_obstacles(), c.domain.obstacles);
    }

    #[test]
    fn the_examples_still_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                let c = CaseConfig::from_file(&p).unwrap_or_else(|e| panic!("{e}"));
                c.validate()
                    .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            }
        }
    }
}
