//! The run summary: what ran, how fast, and how it compares, as text and JSON.

use serde::Serialize;

use thelma_core::config::{CaseConfig, LatticeParams};

use crate::reference::Comparison;

/// One device's share of a run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DeviceSummary {
    pub device: usize,
    pub describe: String,
    pub binding: String,
    /// Global z-planes owned.
    pub z: [usize; 2],
    pub nodes: usize,
    /// Seconds in compute (step and synchronisation).
    pub compute_s: f64,
    /// Seconds waiting at the step barrier.
    pub wait_s: f64,
    /// Million lattice-node updates per second of compute time.
    pub mlups: f64,
    /// Bytes crossing this device's interfaces per step (both directions, both faces).
    pub exchange_bytes_per_step: usize,
}

/// Everything a run reports.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RunSummary {
    pub case: CaseConfig,
    pub lattice: LatticeParams,
    pub backend: String,
    pub steps: u64,
    pub converged: bool,
    /// Last relative change of the velocity field per 1,000 steps.
    pub last_change: Option<f64>,
    pub wall_s: f64,
    /// Aggregate million lattice-node updates per second (all devices, wall time of the stepping).
    pub mlups: f64,
    /// Share of device time spent computing rather than waiting at the barrier (1 = no loss).
    pub parallel_efficiency: f64,
    pub devices: Vec<DeviceSummary>,
    /// Total fluid mass at the start and at the end.
    pub mass: [f64; 2],
    pub validation: Option<Comparison>,
}

impl RunSummary {
    /// A human-readable summary, a few lines.
    pub fn text(&self) -> String {
        let mut s = String::new();
        s += &format!(
            "steps {}{}, {:.2} s, {:.1} MLUPS on {} {} device(s), parallel efficiency {:.1}%\n",
            self.steps,
            if self.converged { " (converged)" } else { "" },
            self.wall_s,
            self.mlups,
            self.devices.len(),
            self.backend,
            100.0 * self.parallel_efficiency
        );
        for d in &self.devices {
            s += &format!(
                "  device {:>2} z {:>4}..{:<4} {:>8.1} MLUPS  compute {:>7.2} s  wait {:>6.2} s  exchange {} B/step  [{}] {}\n",
                d.device, d.z[0], d.z[1], d.mlups, d.compute_s, d.wait_s, d.exchange_bytes_per_step, d.binding, d.describe
            );
        }
        s += &format!(
            "mass {:.9e} -> {:.9e} (relative drift {:.2e})\n",
            self.mass[0],
            self.mass[1],
            (self.mass[1] - self.mass[0]) / self.mass[0]
        );
        if let Some(v) = &self.validation {
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
        s
    }
}
