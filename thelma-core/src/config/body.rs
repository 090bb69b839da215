//! Solid bodies read from STL files: `[[body]]` tables, placed by scale, rotation and translation.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A solid body given by an STL mesh (ASCII or binary). The mesh's own coordinates are scaled, then
/// rotated about x, then y, then z (degrees, about the mesh's origin), then translated; the result is
/// in metres when the case has `[units]`, in node coordinates (node i's centre at i) otherwise.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BodyConfig {
    /// The STL file; a relative path is taken from the case file's folder when the case is read
    /// from a file, and this field then holds the resolved path.
    pub stl: PathBuf,
    /// A factor for every axis, or one per axis.
    #[serde(default)]
    pub scale: Scale,
    /// Rotations about x, y and z, degrees, applied in that order.
    #[serde(default)]
    pub rotate: [f64; 3],
    #[serde(default)]
    pub translate: [f64; 3],
    /// A label for reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// How the body meets the flow: voxelised into solid nodes with bounce-back (`voxel`, fixed),
    /// or as surface points forced by the immersed boundary method (`immersed`, which may move).
    #[serde(default, skip_serializing_if = "BodyMethod::is_voxel")]
    pub method: BodyMethod,
    /// An immersed body's rotation at a constant rate about an axis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotation: Option<RotationConfig>,
    /// An immersed body's constant translation velocity (m/s with `[units]`, lattice units
    /// otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub velocity: Option<[f64; 3]>,
    /// An immersed body's displacement over time: rows `[t, dx, dy, dz]` (seconds and metres with
    /// `[units]`, steps and nodes otherwise), times increasing, linear between rows, held before
    /// the first and after the last; added to `velocity`'s.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path: Vec<[f64; 4]>,
    /// How far an immersed body's points are moved inward along the surface's normal, in node
    /// spacings (Breugem 2012: the kernel spreads the surface over about a spacing, so that a body
    /// acts as a larger one); absent: [`DEFAULT_RETRACTION`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retraction: Option<f64>,
}

/// Breugem's (2012) retraction of the points of an immersed body, node spacings.
pub const DEFAULT_RETRACTION: f64 = 0.3;

/// How a body meets the flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BodyMethod {
    #[default]
    Voxel,
    Immersed,
}

impl BodyMethod {
    fn is_voxel(&self) -> bool {
        *self == Self::Voxel
    }
}

/// A rotation at `rate` (rad/s with `[units]`, rad per step otherwise; positive counterclockwise
/// about `axis`) about the axis through `origin` (metres or nodes, as the mesh is placed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RotationConfig {
    pub axis: [f64; 3],
    pub origin: [f64; 3],
    pub rate: f64,
}

/// A body's scale: one number, or one per axis.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Scale {
    Uniform(f64),
    PerAxis([f64; 3]),
}

impl Default for Scale {
    fn default() -> Self {
        Self::Uniform(1.0)
    }
}

impl Scale {
    /// The factor along each axis.
    pub fn factors(self) -> [f64; 3] {
        match self {
            Self::Uniform(s) => [s; 3],
            Self::PerAxis(s) => s,
        }
    }
}
