//! The run summary (what ran, how fast, how it compares) as text and JSON, and the progress line a
//! run prints as it goes.

use std::path::Path;

use serde::Serialize;

use thelma_core::{num, num_sig, CaseConfig, LatticeParams, UnitScales};

use crate::nusselt::WallNusselt;
use crate::reference::Comparison;

/// One device's share of a run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DeviceSummary {
    pub device: usize,
    pub describe: String,
    pub binding: String,
    /// Global nodes owned along x and y (the whole axis but where the partition cuts it) and z.
    pub x: [usize; 2],
    pub y: [usize; 2],
    pub z: [usize; 2],
    pub nodes: usize,
    /// Seconds in compute (step and synchronisation).
    pub compute_s: f64,
    /// Seconds waiting at the step barrier.
    pub wait_s: f64,
    /// Mean compute time of one step, ms.
    pub step_ms: f64,
    /// Million lattice-node updates per second of compute time.
    pub mlups: f64,
    /// Bytes crossing this device's interfaces per step (both directions, both faces).
    pub exchange_bytes_per_step: usize,
    /// The transports of the channels this slab reads from below and from above (`null` where it
    /// has no neighbour): `zero-copy`, `device` or `peer`. (Across x and y sides, where the
    /// partition cuts them, the CPU module's channels are host memory.)
    pub transports: [Option<String>; 2],
}

/// Why a run stopped.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The velocity's change per 1,000 steps fell below the tolerance.
    Converged,
    /// The velocity's change between two checks fell to the rounding of 16-bit storage
    /// ([`thelma_core::Precision::resolution`]) before it reached the tolerance: the state is as
    /// steady as the storage can hold it.
    Resolution,
    /// A fixed-length run reached its `--steps`.
    Steps,
    /// A run to convergence reached `--max-steps` first.
    MaxSteps,
    /// Ctrl-C, SIGTERM or SIGHUP: stopped after the current step, outputs written.
    Interrupted,
    /// The watchdog found the state unhealthy; the last healthy one was written.
    Diverged,
}

impl StopReason {
    /// What happened, in words.
    pub fn describe(self) -> &'static str {
        match self {
            StopReason::Converged => {
                "converged (the change per 1,000 steps fell below the tolerance)"
            }
            StopReason::Resolution => {
                "converged to the storage's resolution (the change between checks fell to its rounding)"
            }
            StopReason::Steps => "reached its --steps",
            StopReason::MaxSteps => "hit --max-steps before converging",
            StopReason::Interrupted => "interrupted (Ctrl-C or a termination signal)",
            StopReason::Diverged => "diverged (see the error; the last healthy state was written)",
        }
    }
}

/// Everything a run reports.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RunSummary {
    /// The program's version, for reproducing the run.
    pub version: String,
    pub case: CaseConfig,
    pub lattice: LatticeParams,
    pub backend: String,
    pub steps: u64,
    pub converged: bool,
    /// Why the run stopped.
    pub stop_reason: StopReason,
    /// Last relative change of the velocity field per 1,000 steps.
    pub last_change: Option<f64>,
    pub wall_s: f64,
    /// Aggregate million lattice-node updates per second (all devices, wall time of the stepping).
    pub mlups: f64,
    /// Share of device time spent computing rather than waiting at the step barrier (1 = no wait).
    /// Not the parallel efficiency against one device, which `thelma bench` measures.
    pub compute_share: f64,
    pub devices: Vec<DeviceSummary>,
    /// Total fluid mass at the start and at the end.
    pub mass: [f64; 2],
    /// Whether mass may enter or leave (inlets, outlets): the drift then measures no error.
    #[serde(default)]
    pub open: bool,
    pub validation: Option<Comparison>,
    /// Physical scales and the real-time figure of merit, when the case gives physical units.
    pub units: Option<UnitsReport>,
    pub timings: Timings,
    /// Files written, relative to the output folder, in the order written.
    pub outputs: Vec<String>,
    /// The mean force on each obstacle over the second half of the run's samples.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub forces: Vec<ForceMean>,
    /// The Nusselt number of each face `[thermal] nusselt` names, at the run's last state.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nusselt: Vec<WallNusselt>,
    /// What the live view changed during the run, each at the step from which it held.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steering: Vec<Steering>,
}

/// One change made from the live view (`thelma run --live`), at the step boundary it took effect.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Steering {
    /// The first step run after the change.
    pub step: u64,
    #[serde(flatten)]
    pub action: SteerAction,
}

/// What a steering change did.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(tag = "action", rename_all = "lowercase")]
pub enum SteerAction {
    Pause,
    /// Resumed by a viewer, or by the run itself after `unattended_s` seconds paused with no
    /// viewer connected.
    Resume {
        #[serde(skip_serializing_if = "Option::is_none")]
        unattended_s: Option<f64>,
    },
    Stop,
    /// The picture now shows `field` on the plane `axis = index`.
    View {
        field: String,
        axis: String,
        index: usize,
    },
    /// The walls of wall-velocity slot `slot` (the lid, a moving wall, an inlet) now move at
    /// `speed` along their direction, in `unit`.
    Wall {
        slot: usize,
        label: String,
        speed: f64,
        unit: String,
    },
    /// The face or patch of held-temperature slot `slot` (a wall's or an inlet's) now holds
    /// `value`, in `unit`.
    Temperature {
        slot: usize,
        label: String,
        value: f64,
        unit: String,
    },
    /// Field outputs written now.
    Write,
    /// A checkpoint saved now.
    Checkpoint,
}

/// The time-mean force on one obstacle (`forces.csv`'s columns averaged over the second half of the
/// samples: a steady value, or the mean of a periodic one over several periods).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ForceMean {
    /// The solid's index: `domain.obstacles` in order, then `[[body]]`s.
    pub body: usize,
    /// Samples averaged, and the steps they span.
    pub samples: usize,
    pub from_step: u64,
    pub to_step: u64,
    /// Lattice units (ρ₀ = 1, dx = dt = 1).
    pub force: [f64; 3],
    /// An immersed body's mean torque about its centre of motion (lattice units).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torque: Option<[f64; 3]>,
    /// Drag and lift coefficients, when `[forces]` gives a reference area and velocity.
    pub coefficients: Option<[f64; 2]>,
}

/// Where the wall-clock time of a run went, s.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Timings {
    /// Validation, geometry, device start-up and the first gather.
    pub setup_s: f64,
    /// Stepping (the MLUPS figure's denominator).
    pub stepping_s: f64,
    /// Gathering fields for checks and outputs, and writing the outputs.
    pub output_s: f64,
    /// Everything, start to summary.
    pub total_s: f64,
}

/// Lattice-to-physical conversion of a run and the real-time ratio.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct UnitsReport {
    pub scales: UnitScales,
    /// Simulated physical time, s (`steps × dt`).
    pub physical_time_s: f64,
    /// Simulated physical time per second of stepping wall time (> 1: faster than real time).
    pub realtime_ratio: f64,
}

impl UnitsReport {
    pub fn new(scales: UnitScales, steps: u64, stepping_s: f64) -> Self {
        let physical_time_s = steps as f64 * scales.dt;
        Self {
            scales,
            physical_time_s,
            realtime_ratio: physical_time_s / stepping_s.max(1e-12),
        }
    }
}

impl RunSummary {
    /// A human-readable summary, a few lines.
    pub fn text(&self) -> String {
        let mut s = String::new();
        s += &format!(
            "stopped: {}\nsteps {}{}, {:.2} s, {:.1} MLUPS on {} {} device(s)\n",
            self.stop_reason.describe(),
            self.steps,
            if self.converged { " (converged)" } else { "" },
            self.wall_s,
            self.mlups,
            self.devices.len(),
            self.backend,
        );
        s += &format!(
            "  {:.1}% of device time computing (the rest waits at the step barrier)\n",
            100.0 * self.compute_share
        );
        // A device's figures on one line, what it is and where it runs on the next: a GPU's name
        // and its cores would take the first past the width.
        let boxes = self.devices.iter().any(|d| d.x[0] > 0 || d.y[0] > 0);
        for d in &self.devices {
            if boxes {
                s += &format!(
                    "  device {:>2} x {}..{} y {}..{}\n",
                    d.device, d.x[0], d.x[1], d.y[0], d.y[1]
                );
            }
            s += &format!(
                "  device {:>2} z {:>4}..{:<4} {:>8.1} MLUPS  compute {:>7.2} s ({:.3} ms/step)  wait {:>6.2} s\n",
                d.device, d.z[0], d.z[1], d.mlups, d.compute_s, d.step_ms, d.wait_s
            );
            s += &format!(
                "    exchange {} B/step, {}, [{}]\n",
                d.exchange_bytes_per_step, d.describe, d.binding
            );
        }
        let change = (self.mass[1] - self.mass[0]) / self.mass[0];
        s += &if self.open {
            format!(
                "mass {} -> {} ({:+}; open faces let it in and out)\n",
                num_sig(self.mass[0], 10),
                num_sig(self.mass[1], 10),
                num_sig(change, 3)
            )
        } else {
            format!(
                "mass {} -> {} (relative drift {})\n",
                num_sig(self.mass[0], 10),
                num_sig(self.mass[1], 10),
                num_sig(change, 3)
            )
        };
        if !self.nusselt.is_empty() {
            let faces: Vec<String> = self
                .nusselt
                .iter()
                .map(|n| format!("{} {}", n.label(), num_sig(n.nusselt, 4)))
                .collect();
            s += &format!("Nusselt (heat into the fluid): {}\n", faces.join(", "));
        }
        if let Some(u) = &self.units {
            s += &format!(
                "simulated {} of physical time in {}: {} x real time\n  dt = {}, dx = {} m\n",
                seconds(u.physical_time_s),
                seconds(self.timings.stepping_s),
                num_sig(u.realtime_ratio, 4),
                seconds(u.scales.dt),
                num(u.scales.dx)
            );
        }
        s += &format!(
            "time: setup {:.2} s, stepping {:.2} s, outputs {:.2} s, total {:.2} s\n",
            self.timings.setup_s,
            self.timings.stepping_s,
            self.timings.output_s,
            self.timings.total_s
        );
        if let Some(v) = &self.validation {
            // The reference is a steady flow: against a run that has not reached one, the errors
            // measure how far it still has to go, and say so.
            s += if self.converged {
                "against the reference (Albensoeder & Kuhlmann 2005):\n"
            } else {
                "NOT CONVERGED: the errors below are of a transient state, not of the method\n\
                 against the reference (Albensoeder & Kuhlmann 2005):\n"
            };
            for p in &v.profiles {
                s += &format!(
                    "  {}: L2 error {:.4}, max error {:.4} over {} reference points\n",
                    p.profile, p.l2, p.max, p.points
                );
            }
            for e in &v.extrema {
                s += &format!(
                    "  {}: {:+.4} at {:.4} (reference {:+.4} at {:.4})\n",
                    e.name, e.value, e.coordinate, e.reference_value, e.reference_coordinate
                );
            }
        }
        wrap(&s)
    }

    /// The summary as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        // Serialising plain structs of numbers and strings cannot fail; non-finite numbers become null.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// Writes [`Self::to_json`] to `path`, atomically.
    pub fn write_json(&self, path: &Path) -> std::io::Result<()> {
        crate::output::write_bytes_atomic(path, self.to_json().as_bytes())
    }
}

/// Columns (characters, not bytes) a printed line keeps within: a terminal of 100 columns, or a
/// log read beside code, shows it whole.
pub const LINE_WIDTH: usize = 100;

/// `text` with every line longer than [`LINE_WIDTH`] broken at spaces, each continuation indented
/// two spaces more than the line it continues; a word longer than a line stays whole. Lines that
/// fit are left as they are, so that the padding of table rows survives.
pub fn wrap(text: &str) -> String {
    text.split('\n')
        .map(wrap_line)
        .collect::<Vec<_>>()
        .join("\n")
}

fn wrap_line(line: &str) -> String {
    if line.chars().count() <= LINE_WIDTH {
        return line.to_string();
    }
    let body = line.trim_start_matches(' ');
    let indent = line.len() - body.len();
    let next = " ".repeat(indent + 2);
    let (mut out, mut current) = (String::new(), " ".repeat(indent));
    let (mut width, mut empty) = (indent, true);
    for word in body.split(' ').filter(|w| !w.is_empty()) {
        let w = word.chars().count();
        if !empty && width + 1 + w > LINE_WIDTH {
            out += &current;
            out.push('\n');
            (current, width, empty) = (next.clone(), next.len(), true);
        }
        if !empty {
            current.push(' ');
            width += 1;
        }
        current += word;
        width += w;
        empty = false;
    }
    out + &current
}

/// `h:mm:ss` (or `m:ss` under an hour) of a duration in seconds; `--:--` when unknown.
pub fn clock(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "--:--".into();
    }
    let t = seconds.round() as u64;
    let (h, m, s) = (t / 3600, (t / 60) % 60, t % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// A duration in seconds with up to three significant digits: `12 s`, `0.5 s`, `1.25e-05 s`.
pub fn seconds(t: f64) -> String {
    format!("{} s", num_sig(t, 3))
}

/// One progress report of a run: the plain line printed when the output is not a terminal, and
/// the shorter message shown beside the progress bar when it is.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgressLine {
    pub step: u64,
    /// The last step of a fixed-length run; `None` for a run to convergence.
    pub target: Option<u64>,
    /// Nodes of the domain (to turn MLUPS into steps per second).
    pub nodes: usize,
    /// Aggregate MLUPS so far.
    pub mlups: f64,
    /// Wall time since the stepping began, s.
    pub elapsed_s: f64,
    /// Relative change of the velocity per 1,000 steps (convergence runs).
    pub change: Option<f64>,
    /// A run to convergence: the tolerance, and the previous change with the steps since it, from
    /// which the ETA extrapolates the change's (roughly exponential) decay.
    pub convergence: Option<Convergence>,
    /// Physical time per step, s, when the case has physical units.
    pub dt: Option<f64>,
}

/// What the ETA of a run to convergence is estimated from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Convergence {
    pub tolerance: f64,
    /// The change at the previous check.
    pub previous: f64,
    /// Steps from the previous check to this one.
    pub interval: u64,
}

impl ProgressLine {
    /// Seconds left at the current rate: for a fixed-length run, the remaining steps; for a run to
    /// convergence, the steps until the change, decaying as it did over the last interval, falls
    /// below the tolerance (none while it does not decay).
    pub fn eta_s(&self) -> Option<f64> {
        let steps_per_s = self.mlups * 1e6 / self.nodes.max(1) as f64;
        if steps_per_s <= 0.0 || !steps_per_s.is_finite() {
            return None;
        }
        if let Some(target) = self.target {
            return Some(target.saturating_sub(self.step) as f64 / steps_per_s);
        }
        let (c, conv) = (self.change?, self.convergence?);
        if c <= conv.tolerance {
            return Some(0.0);
        }
        let rate = (conv.previous / c).ln() / conv.interval.max(1) as f64;
        (rate > 0.0 && rate.is_finite()).then(|| (c / conv.tolerance).ln() / rate / steps_per_s)
    }

    /// The message beside the bar: rate, convergence and simulated time.
    pub fn message(&self) -> String {
        let mut s = format!("{:.1} MLUPS", self.mlups);
        if let Some(c) = self.change {
            s += &format!(", change/1000 steps {}", num_sig(c, 3));
        }
        if let Some(dt) = self.dt {
            let t = self.step as f64 * dt;
            s += &format!(", t = {}", seconds(t));
            // Simulated time per wall second, from the rate (the steps before a resume ran
            // earlier).
            let steps_per_s = self.mlups * 1e6 / self.nodes.max(1) as f64;
            if steps_per_s > 0.0 && steps_per_s.is_finite() {
                s += &format!(" ({} x real time)", num_sig(steps_per_s * dt, 3));
            }
        }
        s
    }

    /// The whole line: step (of target, with the share done), rate, elapsed time, ETA, change.
    pub fn line(&self) -> String {
        let mut s = format!("step {}", self.step);
        if let Some(t) = self.target {
            s += &format!("/{t} ({:.0}%)", 100.0 * self.step as f64 / t.max(1) as f64);
        }
        s += &format!(": {}, elapsed {}", self.message(), clock(self.elapsed_s));
        match (self.eta_s(), self.target) {
            (Some(eta), Some(_)) => s += &format!(", ETA {}", clock(eta)),
            (Some(eta), None) => s += &format!(", ETA ~{} (convergence)", clock(eta)),
            (None, _) => {}
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_read_as_minutes_or_hours() {
        assert_eq!(clock(0.4), "0:00");
        assert_eq!(clock(65.0), "1:05");
        assert_eq!(clock(3723.0), "1:02:03");
        assert_eq!(clock(f64::NAN), "--:--");
        assert_eq!(seconds(12.0), "12 s");
        assert_eq!(seconds(0.5004), "0.5 s");
        assert_eq!(seconds(160.4), "160 s");
        assert_eq!(seconds(1.25e-5), "1.25e-05 s");
    }

    #[test]
    fn progress_lines_give_share_rate_elapsed_and_eta() {
        // 1e6 nodes at 10 MLUPS: 10 steps/s, so 750 steps left take 75 s.
        let p = ProgressLine {
            step: 250,
            target: Some(1000),
            nodes: 1_000_000,
            mlups: 10.0,
            elapsed_s: 25.0,
            change: None,
            convergence: None,
            dt: None,
        };
        assert_eq!(p.eta_s(), Some(75.0));
        assert_eq!(
            p.line(),
            "step 250/1000 (25%): 10.0 MLUPS, elapsed 0:25, ETA 1:15"
        );
        let c = ProgressLine {
            target: None,
            change: Some(3.25e-3),
            dt: Some(2e-3),
            ..p
        };
        assert_eq!(c.eta_s(), None);
        assert_eq!(
            c.line(),
            "step 250: 10.0 MLUPS, change/1000 steps 3.25e-03, t = 0.5 s (0.02 x real time), elapsed 0:25"
        );
        let stalled = ProgressLine { mlups: 0.0, ..p };
        assert_eq!(stalled.eta_s(), None);
    }

    #[test]
    fn a_convergence_eta_extrapolates_the_decay_of_the_change() {
        // The change halved over the last 100 steps; from 8e-4 to 1e-4 it needs 3 more halvings,
        // 300 steps, 30 s at 10 steps/s.
        let mut p = ProgressLine {
            step: 1000,
            target: None,
            nodes: 1_000_000,
            mlups: 10.0,
            elapsed_s: 100.0,
            change: Some(8e-4),
            convergence: Some(Convergence {
                tolerance: 1e-4,
                previous: 1.6e-3,
                interval: 100,
            }),
            dt: None,
        };
        assert!((p.eta_s().unwrap() - 30.0).abs() < 1e-9, "{:?}", p.eta_s());
        assert!(
            p.line().ends_with(", ETA ~0:30 (convergence)"),
            "{}",
            p.line()
        );
        // A change that grows gives no estimate.
        p.convergence.as_mut().unwrap().previous = 4e-4;
        assert_eq!(p.eta_s(), None);
        assert!(!p.line().contains("ETA"));
    }

    #[test]
    fn the_json_report_holds_configuration_devices_timings_and_units() {
        let case = CaseConfig {
            units: Some(thelma_core::PhysicalUnits {
                length: 0.1,
                velocity: 0.01,
                viscosity: 1e-6,
                density: None,
            }),
            ..CaseConfig::default()
        };
        let lattice = case.validate().unwrap();
        let scales = case.unit_scales().unwrap();
        let summary = RunSummary {
            version: "0.1.0".into(),
            case: case.clone(),
            lattice,
            backend: "cpu".into(),
            steps: 1000,
            converged: false,
            stop_reason: StopReason::Steps,
            last_change: None,
            wall_s: 4.0,
            mlups: 27.6,
            compute_share: 0.95,
            devices: vec![DeviceSummary {
                device: 0,
                describe: "CPU".into(),
                binding: "cores 0-1".into(),
                x: [0, 48],
                y: [0, 48],
                z: [0, 48],
                nodes: 48 * 48 * 48,
                compute_s: 3.9,
                wait_s: 0.1,
                step_ms: 3.9,
                mlups: 28.0,
                exchange_bytes_per_step: 0,
                transports: [None, None],
            }],
            mass: [1.0, 1.0],
            open: false,
            validation: None,
            units: Some(UnitsReport::new(scales, 1000, 4.0)),
            timings: Timings {
                setup_s: 0.5,
                stepping_s: 4.0,
                output_s: 0.25,
                total_s: 4.75,
            },
            outputs: vec!["fields_00001000.vti".into()],
            forces: Vec::new(),
            nusselt: Vec::new(),
            steering: Vec::new(),
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("summary.json");
        summary.write_json(&path).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["case"]["domain"]["size"], serde_json::json!([48, 48, 48]));
        assert_eq!(v["devices"][0]["binding"], "cores 0-1");
        assert_eq!(v["version"], "0.1.0");
        assert_eq!(v["timings"]["output_s"], 0.25);
        assert_eq!(v["outputs"][0], "fields_00001000.vti");
        // 1000 steps of dt = 0.1 (0.1/48) / 0.01 s in 4 s of stepping.
        let dt = 0.1 * (0.1 / 48.0) / 0.01;
        let ratio = v["units"]["realtime_ratio"].as_f64().unwrap();
        assert!((ratio - 1000.0 * dt / 4.0).abs() < 1e-12, "{ratio}");
        assert!((v["lattice"]["reynolds"].as_f64().unwrap() - 1000.0).abs() < 1e-9);
        let text = summary.text();
        assert!(text.contains("x real time"), "{text}");
        assert!(text.contains("outputs 0.25 s"), "{text}");
        assert_eq!(v["stop_reason"], "steps");
        assert!(text.starts_with("stopped: reached its --steps\n"), "{text}");
        assert!(
            text.lines().all(|l| l.chars().count() <= LINE_WIDTH),
            "{text}"
        );
    }

    #[test]
    fn long_lines_wrap_at_spaces_and_table_rows_keep_their_padding() {
        let row = format!("{:<4} {:>10} {:>10}", "mrt", 1.5, 2.5);
        assert_eq!(wrap(&row), row);
        let prose = format!("  warning: {} ends here", "wordy ".repeat(30).trim_end());
        let wrapped = wrap(&format!("{prose}\nnext\n"));
        let lines: Vec<&str> = wrapped.lines().collect();
        assert!(lines.len() > 2, "{wrapped}");
        assert!(
            lines.iter().all(|l| l.chars().count() <= LINE_WIDTH),
            "{wrapped}"
        );
        assert!(lines[0].starts_with("  warning: wordy"), "{wrapped}");
        let continued = &lines[1..lines.len() - 1];
        assert!(
            continued
                .iter()
                .all(|l| l.starts_with("    ") && !l.starts_with("     ")),
            "{wrapped}"
        );
        assert_eq!(lines[lines.len() - 1], "next", "{wrapped}");
        assert!(wrapped.ends_with("next\n"));
        // The words, and nothing else, survive in order.
        let words = |t: &str| t.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(words(&wrapped), words(&format!("{prose} next")));
        // Columns are characters: 99 two-byte letters fit, a word longer than the width stays whole.
        let wide = "é".repeat(99);
        assert_eq!(wrap(&wide), wide);
        let long = format!("a {} b", "x".repeat(120));
        assert_eq!(wrap(&long), format!("a\n  {}\n  b", "x".repeat(120)));
    }
}
