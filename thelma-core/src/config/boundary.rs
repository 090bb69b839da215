//! What closes each face of the box: `[[boundary]]` tables.

use serde::{Deserialize, Serialize};

/// A face of the box.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Face {
    #[serde(rename = "x-")]
    XMinus,
    #[serde(rename = "x+")]
    XPlus,
    #[serde(rename = "y-")]
    YMinus,
    #[serde(rename = "y+")]
    YPlus,
    #[serde(rename = "z-")]
    ZMinus,
    #[serde(rename = "z+")]
    ZPlus,
}

impl Face {
    pub const ALL: [Face; 6] = [
        Face::XMinus,
        Face::XPlus,
        Face::YMinus,
        Face::YPlus,
        Face::ZMinus,
        Face::ZPlus,
    ];
    /// The axis normal to the face (0, 1, 2).
    pub fn axis(self) -> usize {
        self as usize / 2
    }
    /// Whether the face is the upper one of its axis.
    pub fn upper(self) -> bool {
        self as usize % 2 == 1
    }
    /// The face's name in case files (`x-`).
    pub fn name(self) -> &'static str {
        ["x-", "x+", "y-", "y+", "z-", "z+"][self as usize]
    }
}

/// The rule that closes a face. Each kind has one home per layer: the flags it sets
/// (`thelma-geometry`), and the per-link rule the fused step applies in each module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BoundaryKind {
    /// A no-slip wall (halfway bounce-back), at rest or moving tangentially with `velocity`.
    #[default]
    Wall,
}

/// One `[[boundary]]` table: a face and what closes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundaryConfig {
    pub face: Face,
    #[serde(default)]
    pub kind: BoundaryKind,
    /// A wall's velocity, tangential to the face: lattice units, or m/s with `[units]`.
    #[serde(default)]
    pub velocity: [f64; 3],
}
