//! What closes each face of the box: `[[boundary]]` tables.

use serde::{Deserialize, Serialize};

use super::initial::Expression;

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
    /// The two axes along the face, in increasing order (y, z on an x face).
    pub fn transverse(self) -> [usize; 2] {
        match self.axis() {
            0 => [1, 2],
            1 => [0, 2],
            _ => [0, 1],
        }
    }
}

/// A rectangle of lattice positions on a face: along each of the face's
/// [`transverse`](Face::transverse) axes, the positions `lo..=hi`. A link that leaves the box
/// through the face takes the patch's rule where the position it comes from (`x − c_i`, one
/// spacing beyond the face) lies in the rectangle, so along a patch's rim a node's diagonal links
/// may take the patch's rule and the face's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FacePatch {
    pub face: Face,
    pub lo: [usize; 2],
    pub hi: [usize; 2],
}

impl FacePatch {
    /// Whether the patch holds position `p` (global lattice coordinates; its coordinate along the
    /// face's normal is not looked at).
    pub fn holds(&self, p: [usize; 3]) -> bool {
        let [a, b] = self.face.transverse();
        (self.lo[0]..=self.hi[0]).contains(&p[a]) && (self.lo[1]..=self.hi[1]).contains(&p[b])
    }
    /// Whether the two patches share a position.
    pub fn overlaps(&self, o: &FacePatch) -> bool {
        self.face == o.face && (0..2).all(|k| self.lo[k] <= o.hi[k] && o.lo[k] <= self.hi[k])
    }
}

/// The part of a face a `[[boundary]]` table closes when it is not the whole face: a rectangle
/// given by two corners in the face's two [`transverse`](Face::transverse) axes (y and z on `x±`,
/// x and z on `y±`, x and y on `z±`), in node coordinates, or metres from the box's corner with
/// `[units]`. It holds the nodes whose centres lie within the rectangle, edges included.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchConfig {
    pub min: [f64; 2],
    pub max: [f64; 2],
}

/// The rule that closes a face. Each kind has one home per layer: its keys and checks here, the
/// per-link rule it gives the nodes beside the face (`thelma-geometry`'s palette), and that rule in
/// the fused step of each module. Positions beyond two faces (the box's edges and corners) are
/// resting walls whatever the faces are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BoundaryKind {
    /// A no-slip wall (halfway bounce-back), at rest or moving tangentially with `velocity`.
    #[default]
    Wall,
    /// A velocity inlet: halfway bounce-back with the wall moving at `velocity`, normal component
    /// included (Ladd's velocity bounce-back), which imposes `velocity` half a spacing outside the
    /// last layer.
    Velocity,
    /// A pressure outlet: anti-bounce-back to the density `density` (Ginzburg's pressure rule),
    /// with the velocity of the node itself.
    Pressure,
    /// A zero-gradient outflow: each population entering through the face is the one its inner
    /// neighbour receives.
    Outflow,
    /// A free-slip (symmetry) wall: specular reflection, no normal velocity and no shear.
    FreeSlip,
}

impl BoundaryKind {
    /// Whether the kind opens the face (the flow's links cross it by a rule of the face rather than
    /// bounce back): pressure outlets, outflows and free-slip walls.
    pub fn is_open(self) -> bool {
        matches!(
            self,
            BoundaryKind::Pressure | BoundaryKind::Outflow | BoundaryKind::FreeSlip
        )
    }
    /// The kind's name in case files.
    pub fn name(self) -> &'static str {
        match self {
            BoundaryKind::Wall => "wall",
            BoundaryKind::Velocity => "velocity",
            BoundaryKind::Pressure => "pressure",
            BoundaryKind::Outflow => "outflow",
            BoundaryKind::FreeSlip => "free-slip",
        }
    }
}

/// One `[[boundary]]` table: a face and what closes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundaryConfig {
    pub face: Face,
    #[serde(default)]
    pub kind: BoundaryKind,
    /// A wall's velocity (tangential to the face) or an inlet's: lattice units, or m/s with
    /// `[units]`.
    #[serde(default)]
    pub velocity: [f64; 3],
    /// A pressure outlet's density, relative to the reference (1); default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub density: Option<f64>,
    /// A pressure outlet's pressure `p − p0` instead of its density: Pa with `[units]` (which then
    /// need `units.density`), lattice units (`(ρ − 1)/3`) without them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pressure: Option<f64>,
    /// How an inlet's velocity varies across the face.
    #[serde(default)]
    pub profile: Profile,
    /// An inlet's velocity over time: `velocity` times this factor, a number or an expression of `t`
    /// (steps, or seconds with `[units]`) such as `"sin(PI * t / 2000)^2"`; 1 by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amplitude: Option<Expression>,
    /// With `[thermal]`: a wall's temperature, at which it is held (absent: adiabatic), or the
    /// temperature an inlet's flow brings in (absent: `thermal.t0`). Outlets (`pressure`,
    /// `outflow`) let the temperature leave with zero gradient and free-slip walls are adiabatic,
    /// so they take none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Only a rectangle of the face instead of all of it (an inlet or a vent in a wall); the rest
    /// of the face keeps the table without a patch (a resting wall where there is none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<PatchConfig>,
    /// A pressure outlet's sponge layer: the planes in front of the face where each node is
    /// relaxed towards the outlet's density with its outgoing sound wave's momentum removed, so
    /// that sound waves are absorbed instead of reflected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sponge: Option<SpongeConfig>,
    /// With `[thermal]`: report the Nusselt number of this wall held at its `temperature`, the
    /// whole face or its patch (the heat it passes into the fluid, `summary.json`'s `nusselt`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nusselt: bool,
}

/// `sponge = { width = …, strength = … }` of a pressure outlet (`thelma_core::physics::Sponges`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpongeConfig {
    /// The layer's depth from the face: nodes, or metres with `[units]` (rounded to whole planes).
    pub width: f64,
    /// The rate σ next to the face, in (0, [`Self::MAX_STRENGTH`]]; it falls as the square of the
    /// distance to the layer's inner edge.
    #[serde(default = "SpongeConfig::default_strength")]
    pub strength: f64,
}

impl SpongeConfig {
    /// σ next to the face by default. Over layers of 8 to 32 planes the reflection falls as the
    /// strength grows (`PERFORMANCE.md`), but in a walled channel layers diverged from 0.85 (Re 9)
    /// and from 0.7 (Re 180) where 0.5 held; 0.5 to 0.7 was not measured, so 0.5 is the limit.
    pub const DEFAULT_STRENGTH: f64 = 0.5;
    /// The largest strength accepted.
    pub const MAX_STRENGTH: f64 = 0.5;

    fn default_strength() -> f64 {
        Self::DEFAULT_STRENGTH
    }
}

impl BoundaryConfig {
    /// `face` closed by `kind`, at rest, with every optional key at its default.
    pub fn new(face: Face, kind: BoundaryKind) -> Self {
        Self {
            face,
            kind,
            velocity: [0.0; 3],
            density: None,
            pressure: None,
            profile: Profile::Uniform,
            amplitude: None,
            temperature: None,
            patch: None,
            sponge: None,
            nusselt: false,
        }
    }
}

/// How an inlet's velocity varies across its face.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// The same velocity at every node.
    #[default]
    Uniform,
    /// Poiseuille's: `velocity` is the peak, reached midway between the walls; across each
    /// transverse axis that is walled (not periodic), the factor
    /// [`parabola`](crate::physics::parabola) of the node's position, 0 at the walls.
    Parabolic,
}
