//! Forces on the obstacles (`[forces]`) and probes (`[[probe]]`): what is sampled every few steps
//! into `forces.csv` and `probes.csv`; and lines (`[[line]]`), the profiles along lines of nodes
//! written into `lines.csv` when a run ends.

use serde::{Deserialize, Serialize};

/// An axis of the domain, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Axis {
    X,
    Y,
    Z,
}

impl Axis {
    pub fn index(self) -> usize {
        self as usize
    }
}

/// `[forces]`: the momentum-exchange force on every obstacle, every `every` steps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ForcesConfig {
    /// Steps between samples (`forces.csv`); 0: no forces.
    pub every: u64,
    /// Reference area `A` of the coefficients `C = 2 F / (ρ₀ U² A)`: nodes², or m² with `[units]`.
    /// Without `area` and `velocity` only forces are written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub area: Option<f64>,
    /// Reference velocity `U`: lattice units, or m/s with `[units]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub velocity: Option<f64>,
    /// The axis of the drag coefficient.
    pub drag: Axis,
    /// The axis of the lift coefficient.
    pub lift: Axis,
}

impl Default for ForcesConfig {
    fn default() -> Self {
        Self {
            every: 0,
            area: None,
            velocity: None,
            drag: Axis::X,
            lift: Axis::Y,
        }
    }
}

/// One `[[probe]]`: a point whose density and velocity are sampled every `output.probe_every` steps
/// into `probes.csv`, at the nearest node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeConfig {
    /// Node coordinates, or metres from the box's corner with `[units]` (node `i`'s centre at
    /// `(i + ½) dx`).
    pub at: [f64; 3],
    /// A name for the CSV's columns (default `probe<k>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// One `[[line]]`: the line of nodes along `axis` through `at`, whose velocity, pressure (and
/// temperature) are written into `lines.csv` when the run ends, with their time averages when
/// the run takes them (`output.average_from`); or, with `plane = true`, the means over the planes
/// across `axis`: the profile of a flow homogeneous along the other two axes (a turbulent channel's
/// mean velocity).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineConfig {
    /// The axis the line runs along.
    pub axis: Axis,
    /// Where it crosses the plane of the other two axes, in their order (x, z for a line along y):
    /// node coordinates, or metres from the box's corner with `[units]`; the nearest nodes.
    /// Not given with `plane = true`, and needed otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<[f64; 2]>,
    /// Each point of the line is the mean over the fluid nodes of its plane across `axis`
    /// (a plane without fluid is left out).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plane: bool,
    /// A name for the CSV's rows (default `line<k>`); no comma, quote or control character.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl LineConfig {
    /// The line's name in `lines.csv`: its `name`, or `line<k>` for the k-th line.
    pub fn line_name(&self, k: usize) -> String {
        self.name.clone().unwrap_or_else(|| format!("line{k}"))
    }

    /// The two axes across the line, in increasing order.
    pub fn across(&self) -> [usize; 2] {
        match self.axis {
            Axis::X => [1, 2],
            Axis::Y => [0, 2],
            Axis::Z => [0, 1],
        }
    }
}
