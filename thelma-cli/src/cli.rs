//! Command-line arguments of `thelma run` and their translation into a case. Kept in the library so
//! that tests can parse arguments exactly as the binary does.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use thelma_core::physics::Collision;
use thelma_core::{
    BackendName, CaseConfig, DeviceSpec, PhysicalUnits, Precision, SlicePlane, Streaming,
    TransportChoice,
};

use crate::error::UsageError;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum PrecisionArg {
    /// 32-bit populations (the default).
    F32,
    /// 64-bit populations.
    F64,
    /// 16-bit populations (IEEE half of the shifted population scaled by 2^15), collided in f32.
    F16,
    /// 16-bit populations with a 12-bit significand (1 sign, 4 exponent, 11 fraction bits of the
    /// shifted population), collided in f32: twice f16's precision over the populations' range.
    F16c,
}

impl From<PrecisionArg> for Precision {
    fn from(p: PrecisionArg) -> Precision {
        match p {
            PrecisionArg::F32 => Precision::F32,
            PrecisionArg::F64 => Precision::F64,
            PrecisionArg::F16 => Precision::F16,
            PrecisionArg::F16c => Precision::F16c,
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum StreamingArg {
    /// The pull between two lattices (the default).
    TwoLattice,
    /// One lattice, streamed in place (the AA pattern).
    InPlace,
}

impl From<StreamingArg> for Streaming {
    fn from(s: StreamingArg) -> Streaming {
        match s {
            StreamingArg::TwoLattice => Streaming::TwoLattice,
            StreamingArg::InPlace => Streaming::InPlace,
        }
    }
}

/// Parses `--backend` against `thelma-compute`'s registry, whose names the help lists.
#[derive(Clone, Copy, Debug, Default)]
pub struct BackendParser;

impl clap::builder::TypedValueParser for BackendParser {
    type Value = BackendName;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<BackendName, clap::Error> {
        let text = clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)?;
        thelma_compute::parse_backend(&text).map_err(|e| {
            let mut err = clap::Error::new(clap::error::ErrorKind::ValueValidation).with_cmd(cmd);
            if let Some(arg) = arg {
                err.insert(
                    clap::error::ContextKind::InvalidArg,
                    clap::error::ContextValue::String(arg.to_string()),
                );
            }
            err.insert(
                clap::error::ContextKind::InvalidValue,
                clap::error::ContextValue::String(text.clone()),
            );
            err.insert(
                clap::error::ContextKind::Custom,
                clap::error::ContextValue::String(e.to_string()),
            );
            err
        })
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        let auto = clap::builder::PossibleValue::new(BackendName::AUTO)
            .help("the first registered module that finds a device");
        Some(Box::new(
            std::iter::once(auto).chain(
                thelma_compute::BACKENDS
                    .iter()
                    .map(|b| clap::builder::PossibleValue::new(b.name).help(b.summary)),
            ),
        ))
    }
}

// Options taking numbers accept a leading minus sign (lists and names: any leading hyphen) so that
// `--steps -3` or `--devices -1` is refused by the option's own parser, naming the option, instead of
// as a stray argument.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Case file (TOML, or JSON by extension); the flags below override it.
    #[arg(long, value_name = "FILE", conflicts_with = "resume")]
    pub config: Option<PathBuf>,
    /// Continue from a checkpoint: a folder holding `checkpoint.thelma` (an earlier run's output
    /// folder) or the file. The case is the checkpoint's and the outputs go to the checkpoint's folder;
    /// flags may change how long and where it runs, not its domain, physics or numerics.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// Lattice size: N for a cube, or NX,NY,NZ. Default 48.
    #[arg(long, value_name = "N|NX,NY,NZ", value_parser = parse_size, allow_hyphen_values = true)]
    pub size: Option<[usize; 3]>,
    /// Reynolds number U·L/ν, L the edge along x in nodes. Default 1000.
    #[arg(long, value_name = "RE", allow_negative_numbers = true)]
    pub re: Option<f64>,
    /// Kinematic viscosity in lattice units; overrides --re (τ = 3ν + ½ must exceed ½).
    #[arg(long, value_name = "NU", allow_negative_numbers = true)]
    pub viscosity: Option<f64>,
    /// Lid speed in lattice units, in (0, 0.4). Default 0.1.
    #[arg(long, value_name = "U", allow_negative_numbers = true)]
    pub lid_speed: Option<f64>,
    /// Run exactly this many steps instead of running to convergence.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub steps: Option<u64>,
    /// Convergence threshold: relative L2 change of the velocity per 1,000 steps. Default 1e-4.
    #[arg(long, value_name = "TOL", allow_negative_numbers = true)]
    pub tolerance: Option<f64>,
    /// Steps between progress lines and convergence checks. Default: about L/U.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub check_every: Option<u64>,
    /// Most steps a convergence run may take. Default 1,000,000.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_steps: Option<u64>,
    /// Steps between divergence checks (NaN/Inf populations, density out of bounds). Default 100.
    #[arg(long, value_name = "K", allow_negative_numbers = true)]
    pub watchdog_every: Option<u64>,
    /// The watchdog stops the run when a density leaves [MIN, MAX]. Default 0.2,5.
    #[arg(long, value_name = "MIN,MAX", value_parser = parse_bounds, allow_hyphen_values = true)]
    pub density_bounds: Option<[f64; 2]>,
    /// Write a checkpoint (`checkpoint.thelma` in the output folder) every N steps and at the end;
    /// 0: none. Default 0.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub checkpoint_every: Option<u64>,
    /// Collision operator: bgk, trt or mrt. Default mrt.
    #[arg(long, value_name = "NAME", value_parser = Collision::parse)]
    pub collision: Option<Collision>,
    /// TRT's magic parameter Λ = (1/ω⁺ − ½)(1/ω⁻ − ½). Default 3/16.
    #[arg(long, value_name = "LAMBDA", allow_negative_numbers = true)]
    pub trt_magic: Option<f64>,
    /// Smagorinsky eddy viscosity (LES) with constant C_s, for any operator (0.1–0.2 is usual).
    #[arg(long, value_name = "C", allow_negative_numbers = true)]
    pub smagorinsky: Option<f64>,
    /// Uniform body force FX,FY,FZ: lattice units, or m/s² with physical units.
    #[arg(long, value_name = "FX,FY,FZ", value_parser = parse_vector, allow_negative_numbers = true)]
    pub force: Option<[f64; 3]>,
    /// Number format of the stored populations. Default f32.
    #[arg(long, value_enum)]
    pub precision: Option<PrecisionArg>,
    /// How populations stream: two-lattice (the pull between two lattices) or in-place (one
    /// lattice, half the lattice memory; walls, obstacles, forces and LES). Default two-lattice.
    #[arg(long, value_enum)]
    pub streaming: Option<StreamingArg>,
    /// Compute module: auto picks CUDA when a GPU is present, the CPU otherwise. Default auto.
    #[arg(long, value_name = "NAME", value_parser = BackendParser)]
    pub backend: Option<BackendName>,
    /// Devices in slab order: `all`, a count N, or ids `2,0,1,3` (one id alone: `3,`). With
    /// --backend cpu, N CPU devices share the cores. Under mpirun, ranks sharing a host deal its
    /// GPUs: the k-th takes N of them from kN (`all`: an even share), or, where the host has too
    /// few for that, all share the first N; a list is every rank's.
    #[arg(long, value_name = "SPEC", value_parser = DeviceSpec::parse, allow_hyphen_values = true)]
    pub devices: Option<DeviceSpec>,
    /// CPU backend: threads in all (0: one per core).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub threads: Option<usize>,
    /// How populations cross between slabs: auto (device memory between slabs of one GPU, peer
    /// memory between GPUs with peer access, zero-copy otherwise), zero-copy (mapped host memory),
    /// device or peer. Default auto.
    #[arg(long, value_name = "NAME", value_parser = TransportChoice::parse)]
    pub transport: Option<TransportChoice>,
    /// A layout file: which rank (`mpirun -np N thelma run ...`) and device runs each subdomain
    /// (`thelma layout` writes one). Default: an even split, one slab per device on every rank.
    #[arg(long, value_name = "FILE")]
    pub layout: Option<PathBuf>,
    /// Periodic axes, e.g. `x,y` (walls elsewhere; the cavity's z stays walled).
    #[arg(long, value_name = "AXES", value_parser = parse_axes, allow_hyphen_values = true)]
    pub periodic: Option<[bool; 3]>,
    /// Output folder (created if missing). Default `out`.
    #[arg(long, short, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Print only the final summary.
    #[arg(long, short)]
    pub quiet: bool,
    #[command(flatten)]
    pub outputs: OutputArgs,
    #[command(flatten)]
    pub live: LiveArgs,
}

/// The live view's options of `thelma run`.
#[derive(Args, Debug, Default, Clone)]
pub struct LiveArgs {
    /// Serve a live view while the run goes on, at ADDR (default 127.0.0.1:8088; port 0 picks a
    /// free one): a plane of a chosen field, the run's figures and probes, pause, wall speeds,
    /// outputs and checkpoints on demand, stop.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = crate::live::DEFAULT_ADDR)]
    pub live: Option<String>,
    /// Allow --live on an address other machines can reach; every request must then carry the
    /// access token printed when the run starts.
    #[arg(long)]
    pub live_remote: bool,
    /// Steps between live pictures, at least. Default 10.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub live_every: Option<u64>,
    /// Milliseconds between live pictures, at least (whichever of the two is later). Default 100.
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    pub live_ms: Option<u64>,
    /// Seconds a paused run waits with no viewer connected before it resumes by itself (logged
    /// like a viewer's resume). Default 60.
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub live_idle: Option<u64>,
}

impl LiveArgs {
    /// The live view's options, when `--live` is given.
    pub fn options(&self) -> Result<Option<crate::live::LiveOptions>, UsageError> {
        if self.live.is_none() {
            let given = [
                (self.live_remote, "--live-remote"),
                (self.live_every.is_some(), "--live-every"),
                (self.live_ms.is_some(), "--live-ms"),
                (self.live_idle.is_some(), "--live-idle"),
            ];
            if let Some((_, flag)) = given.into_iter().find(|g| g.0) {
                return Err(UsageError::new(
                    flag,
                    "applies to the live view: add --live",
                ));
            }
        }
        self.live
            .as_deref()
            .map(|a| {
                let mut o = crate::live::LiveOptions::new(
                    a,
                    self.live_remote,
                    self.live_every.unwrap_or(10),
                    self.live_ms.unwrap_or(100),
                )?;
                if let Some(s) = self.live_idle {
                    o.unattended = std::time::Duration::from_secs(s);
                }
                Ok(o)
            })
            .transpose()
    }
}

/// Output and physical-unit options of `thelma run`.
#[derive(Args, Debug, Default)]
pub struct OutputArgs {
    /// Steps between field outputs (VTK, slice images); 0: only at the end. Default 0.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub output_every: Option<u64>,
    /// Write one .vti piece per slab (or subdomain of a --layout grid) and a .pvti index instead of
    /// gathering the whole domain.
    #[arg(long)]
    pub vtk_pieces: bool,
    /// Write no VTK files.
    #[arg(long)]
    pub no_vtk: bool,
    /// Arrays of the VTK files, in order: density, velocity, speed, pressure (p − p0), solid,
    /// vorticity, q_criterion. Default density,velocity,speed,pressure,solid.
    #[arg(
        long,
        value_name = "NAMES",
        value_delimiter = ',',
        allow_hyphen_values = true
    )]
    pub fields: Option<Vec<String>>,
    /// Write no images (slices, profile plot).
    #[arg(long)]
    pub no_images: bool,
    /// Plane of the slice images: AXIS or AXIS=INDEX (default y, the mid-plane).
    #[arg(long, value_name = "AXIS[=INDEX]", value_parser = SlicePlane::parse, allow_hyphen_values = true)]
    pub slice: Option<SlicePlane>,
    /// Physical edge of the domain along x, m (with --phys-velocity and --phys-viscosity: Re = U L/ν).
    #[arg(long, value_name = "M", allow_hyphen_values = true)]
    pub phys_length: Option<f64>,
    /// Physical lid velocity, m/s.
    #[arg(long, value_name = "M/S", allow_hyphen_values = true)]
    pub phys_velocity: Option<f64>,
    /// Physical kinematic viscosity, m²/s.
    #[arg(long, value_name = "M2/S", allow_hyphen_values = true)]
    pub phys_viscosity: Option<f64>,
}

impl OutputArgs {
    /// Applies these options over the case file's.
    fn apply(self, c: &mut CaseConfig, re_given: bool) -> Result<(), UsageError> {
        if let Some(n) = self.output_every {
            c.output.every = n;
        }
        c.output.vtk_pieces |= self.vtk_pieces;
        if self.no_vtk {
            c.output.vtk = false;
        }
        if let Some(f) = self.fields {
            c.output.fields = f;
        }
        if self.no_images {
            c.output.images = false;
        }
        if let Some(s) = self.slice {
            c.output.slice = s;
        }
        let given = [self.phys_length, self.phys_velocity, self.phys_viscosity];
        if given.iter().any(Option::is_some) {
            let base = c.units.unwrap_or(PhysicalUnits {
                length: f64::NAN,
                velocity: f64::NAN,
                viscosity: f64::NAN,
                density: None,
            });
            let u = PhysicalUnits {
                length: self.phys_length.unwrap_or(base.length),
                velocity: self.phys_velocity.unwrap_or(base.velocity),
                viscosity: self.phys_viscosity.unwrap_or(base.viscosity),
                density: base.density,
            };
            for (v, flag) in [
                (u.length, "--phys-length"),
                (u.velocity, "--phys-velocity"),
                (u.viscosity, "--phys-viscosity"),
            ] {
                if v.is_nan() {
                    return Err(UsageError::new(
                        flag,
                        "missing: physical units need --phys-length, --phys-velocity and --phys-viscosity (or a [units] table in the case file)",
                    ));
                }
            }
            c.units = Some(u);
        }
        if re_given && c.units.is_some() {
            return Err(UsageError::new(
                "--re",
                "the Reynolds number follows from the physical units (U L / ν); drop --re or the units",
            ));
        }
        Ok(())
    }
}

pub fn parse_size(s: &str) -> Result<[usize; 3], String> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    let nums: Result<Vec<usize>, _> = parts.iter().map(|p| p.parse::<usize>()).collect();
    match nums
        .map_err(|_| format!("`{s}` is not N or NX,NY,NZ (non-negative integers)"))?
        .as_slice()
    {
        [n] => Ok([*n; 3]),
        [x, y, z] => Ok([*x, *y, *z]),
        _ => Err(format!("`{s}` is not N or NX,NY,NZ")),
    }
}

pub fn parse_vector(s: &str) -> Result<[f64; 3], String> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    let nums: Result<Vec<f64>, _> = parts.iter().map(|p| p.parse::<f64>()).collect();
    match nums.ok().as_deref() {
        Some(&[x, y, z]) => Ok([x, y, z]),
        _ => Err(format!("`{s}` is not X,Y,Z (three numbers)")),
    }
}

pub fn parse_bounds(s: &str) -> Result<[f64; 2], String> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    match parts.as_slice() {
        [lo, hi] => match (lo.parse::<f64>(), hi.parse::<f64>()) {
            (Ok(lo), Ok(hi)) => Ok([lo, hi]),
            _ => Err(format!("`{s}` is not MIN,MAX (two numbers)")),
        },
        _ => Err(format!("`{s}` is not MIN,MAX")),
    }
}

pub fn parse_axes(s: &str) -> Result<[bool; 3], String> {
    let mut p = [false; 3];
    for a in s.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        match a {
            "x" => p[0] = true,
            "y" => p[1] = true,
            "z" => p[2] = true,
            "none" => {}
            _ => return Err(format!("`{a}` is not an axis (x, y, z)")),
        }
    }
    Ok(p)
}

impl RunArgs {
    /// The case these arguments describe (the case file, if any, overridden by the flags), and whether
    /// output is quiet. Errors are [`UsageError`]s naming the option.
    ///
    /// With `--resume`, the case is the checkpoint's, and flags that would change its domain, physics
    /// or numerics are refused.
    pub fn into_case(self) -> anyhow::Result<(CaseConfig, bool)> {
        let given = self.flags_given();
        let file = self.config.clone();
        let (case, quiet) = self.merge()?;
        // Checked here, where it is known whether a value came from a flag or from the case file:
        // a bad value in the file is named by its key and line, not by a flag the user never typed.
        if let Err(e) = case.validate() {
            return Err(match &file {
                Some(path) if !given.contains(&e.flag) => {
                    let at = std::fs::read_to_string(path)
                        .ok()
                        .and_then(|text| key_line(&text, e.key, is_json(path)))
                        .map(|l| format!(" line {l}"))
                        .unwrap_or_default();
                    UsageError::new(format!("{}{at}: {}", path.display(), e.key), e.message)
                }
                _ => UsageError::new(e.flag, e.message),
            }
            .into());
        }
        Ok((case, quiet))
    }

    /// The flags given on the command line that set a case value, as validation names them.
    fn flags_given(&self) -> Vec<&'static str> {
        let o = &self.outputs;
        [
            (self.size.is_some(), "--size"),
            (self.re.is_some(), "--re"),
            (self.viscosity.is_some(), "--viscosity"),
            (self.lid_speed.is_some(), "--lid-speed"),
            (self.steps.is_some(), "--steps"),
            (self.tolerance.is_some(), "--tolerance"),
            (self.check_every.is_some(), "--check-every"),
            (self.max_steps.is_some(), "--max-steps"),
            (self.watchdog_every.is_some(), "--watchdog-every"),
            (self.density_bounds.is_some(), "--density-bounds"),
            (self.checkpoint_every.is_some(), "--checkpoint-every"),
            (self.threads.is_some(), "--threads"),
            (self.periodic.is_some(), "--periodic"),
            (self.output.is_some(), "--output"),
            (self.devices.is_some(), "--devices"),
            (o.slice.is_some(), "--slice"),
            (o.output_every.is_some(), "--output-every"),
            (o.fields.is_some(), "--fields"),
            (o.phys_length.is_some(), "--phys-length"),
            (o.phys_velocity.is_some(), "--phys-velocity"),
            (o.phys_viscosity.is_some(), "--phys-viscosity"),
        ]
        .into_iter()
        .filter_map(|(g, f)| g.then_some(f))
        .collect()
    }

    /// The case file (or checkpoint) overridden by the flags, not yet validated.
    fn merge(mut self) -> anyhow::Result<(CaseConfig, bool)> {
        let resumed = match &self.resume {
            Some(path) => Some(
                crate::checkpoint::read_header(path)
                    .map_err(|e| UsageError::new("--resume", format!("{e:#}")))?
                    .case,
            ),
            None => None,
        };
        let mut c = match (&self.config, &resumed) {
            (_, Some(case)) => {
                // A resumed run writes where its checkpoint is, wherever it is started from.
                let mut case = case.clone();
                let file =
                    crate::checkpoint::resolve(self.resume.as_deref().unwrap_or(".".as_ref()));
                if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
                    case.output.dir = dir.to_path_buf();
                }
                case
            }
            (Some(path), None) => CaseConfig::from_file(path)
                .map_err(|e| UsageError::new("--config", format!("{e:#}")))?,
            (None, None) => CaseConfig::default(),
        };
        if let Some(s) = self.size {
            c.domain.size = s;
        }
        if let Some(re) = self.re {
            c.physics.reynolds = re;
            c.physics.viscosity = None;
        }
        if self.viscosity.is_some() {
            c.physics.viscosity = self.viscosity;
        }
        if let Some(u) = self.lid_speed {
            c.physics.lid_speed = u;
        }
        if self.steps.is_some() {
            c.run.steps = self.steps;
        }
        if let Some(t) = self.tolerance {
            c.run.tolerance = t;
        }
        if let Some(k) = self.check_every {
            c.run.check_every = k;
        }
        if let Some(m) = self.max_steps {
            c.run.max_steps = m;
        }
        if let Some(k) = self.watchdog_every {
            c.run.watchdog_every = k;
        }
        if let Some(b) = self.density_bounds {
            c.run.density_bounds = b;
        }
        if let Some(k) = self.checkpoint_every {
            c.run.checkpoint_every = k;
        }
        if let Some(k) = self.collision {
            c.numerics.collision = k;
        }
        if let Some(l) = self.trt_magic {
            c.numerics.trt_magic = l;
        }
        if self.smagorinsky.is_some() {
            c.numerics.smagorinsky = self.smagorinsky;
        }
        if self.force.is_some() {
            c.physics.force = self.force;
        }
        if let Some(p) = self.precision {
            c.numerics.precision = p.into();
        }
        if let Some(s) = self.streaming {
            c.numerics.streaming = s.into();
        }
        if let Some(b) = self.backend {
            c.hardware.backend = b;
        }
        if let Some(d) = self.devices {
            c.hardware.devices = d;
        }
        if let Some(t) = self.threads {
            c.hardware.threads = t;
        }
        if let Some(t) = self.transport {
            c.hardware.transport = t;
        }
        if let Some(l) = self.layout {
            c.hardware.layout = Some(l);
        }
        if let Some(p) = self.periodic {
            // A periodic z under the cavity's lid is refused by `CaseConfig::validate`.
            c.domain.periodic = p;
        }
        if let Some(o) = self.output {
            c.output.dir = o;
        }
        std::mem::take(&mut self.outputs).apply(&mut c, self.re.is_some())?;
        if let Some(saved) = &resumed {
            unchanged_on_resume(saved, &c)?;
        }
        Ok((c, self.quiet))
    }
}

fn is_json(path: &std::path::Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
}

/// The line (from 1) of case text where the dotted `key` (`physics.reynolds`) is set: in TOML the
/// `name =` line under its `[table]` (or a dotted `table.name =` line), in JSON the `"name"` after
/// `"table"`. `None` when it cannot be found (the value was derived, or written in an unusual way).
pub fn key_line(text: &str, key: &str, json: bool) -> Option<usize> {
    let (table, name) = key.split_once('.')?;
    if json {
        let t = text.find(&format!("\"{table}\""))?;
        let n = t + text[t..].find(&format!("\"{name}\""))?;
        return Some(text[..n].matches('\n').count() + 1);
    }
    let sets = |line: &str, name: &str| {
        line.strip_prefix(name)
            .is_some_and(|rest| rest.trim_start().starts_with('='))
    };
    let mut current = "";
    for (k, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(h) = line.strip_prefix('[') {
            current = h
                .trim_start_matches('[')
                .split(']')
                .next()
                .unwrap_or("")
                .trim();
            continue;
        }
        if (current == table && sets(line, name))
            || (current.is_empty() && sets(line, key))
            || (current.is_empty() && line.starts_with(table) && line.contains(name))
        {
            return Some(k + 1);
        }
    }
    None
}

/// A resumed run continues the same simulation: the flag of the first setting that differs from the
/// checkpoint's case is refused.
fn unchanged_on_resume(saved: &CaseConfig, now: &CaseConfig) -> Result<(), UsageError> {
    let (a, b) = (saved, now);
    let differs = [
        (a.domain.size != b.domain.size, "--size"),
        (a.domain.periodic != b.domain.periodic, "--periodic"),
        (a.physics.reynolds != b.physics.reynolds, "--re"),
        (a.physics.viscosity != b.physics.viscosity, "--viscosity"),
        (a.physics.lid_speed != b.physics.lid_speed, "--lid-speed"),
        (a.numerics.collision != b.numerics.collision, "--collision"),
        (a.numerics.trt_magic != b.numerics.trt_magic, "--trt-magic"),
        (
            a.numerics.smagorinsky != b.numerics.smagorinsky,
            "--smagorinsky",
        ),
        (a.physics.force != b.physics.force, "--force"),
        (a.numerics.precision != b.numerics.precision, "--precision"),
        (a.units != b.units, "--phys-velocity"),
    ];
    let refuse = |flag: &str| {
        UsageError::new(
            flag,
            "cannot change on --resume: the checkpoint's case fixes the domain, physics and numerics",
        )
    };
    if let Some((_, flag)) = differs.iter().find(|(d, _)| *d) {
        return Err(refuse(flag));
    }
    // No flag sets the temperature lattice, so its message names the section, not a flag.
    if a.thermal != b.thermal {
        return Err(UsageError::new(
            "--config",
            "[thermal] cannot change on --resume: the checkpoint's case fixes the temperature lattice",
        ));
    }
    // Whatever else the flags touched, the relaxation rate the run derives must be the checkpoint's.
    if let (Ok(pa), Ok(pb)) = (a.validate(), b.validate()) {
        if pa.omega.to_bits() != pb.omega.to_bits() {
            return Err(refuse("--re"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No flag sets `[thermal]`, so a change of it (which only a caller handing its own case can
    /// make) is refused naming the section, on one line.
    #[test]
    fn a_resume_refuses_a_change_of_the_temperature_lattice() {
        let flow = CaseConfig::default();
        let heated = CaseConfig {
            thermal: Some(thelma_core::ThermalConfig {
                prandtl: Some(0.71),
                ..Default::default()
            }),
            ..flow.clone()
        };
        assert!(unchanged_on_resume(&heated, &heated).is_ok());
        for (saved, now) in [(&flow, &heated), (&heated, &flow)] {
            let e = unchanged_on_resume(saved, now).unwrap_err().to_string();
            assert!(e.starts_with("--config: [thermal] cannot change"), "{e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }
}
