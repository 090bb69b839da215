//! Geometry descriptions and their evaluation into per-node flags, one slab at a time, so that each
//! worker builds only its own slab (in parallel, without a whole-domain array on the host).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use thelma_core::physics::d3q19::{C, Q};
use thelma_core::physics::{ImmersedBodies, LagrangianBody};
use thelma_core::Domain;
use thelma_core::{
    BodyMethod, BoundaryKind, CaseConfig, Face, FacePatch, Obstacle, Profile, DEFAULT_RETRACTION,
};

use crate::flags::{terms, FlagPalette, LinkRule, NodeFlags, SlabFlags, MAX_PALETTE};
use crate::mesh::{Mesh, MeshError};
use crate::surface::SurfacePoints;
use crate::voxel::Voxels;

/// What lies at a position that is not fluid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wall {
    /// A wall at rest.
    Resting,
    /// A wall moving with the velocity of this slot of [`Geometry::wall_velocities`].
    Moving(usize),
    /// An open face (its kind in [`Geometry::open_kind`]).
    Open(Face),
}

/// How an open face lets the flow through.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OpenKind {
    /// A pressure outlet at density `1 + drho` (anti-bounce-back).
    Pressure { drho: f64 },
    /// A zero-gradient outflow.
    Outflow,
    /// A free-slip wall (specular reflection).
    FreeSlip,
}

/// Why a geometry cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GeometryError {
    #[error("slab z {0:?} has more than {MAX_PALETTE} distinct node-flag values; simplify the obstacles or use more slabs")]
    PaletteFull(Range<usize>),
    #[error("node ({0}, {1}, {2}) touches two moving walls or inlets (faces, or patches less than two nodes apart), which one node cannot represent")]
    TwoMovingWalls(usize, usize, usize),
    #[error("face {0} moves or is open, but its axis is periodic")]
    PeriodicWall(&'static str),
    #[error("a node touches two pressure outlets of different density (faces meeting at an edge must share it)")]
    TwoPressures,
    #[error("face {0} has open parts of two kinds ({1:?} and {2:?}); one face opens one way")]
    TwoOpenKinds(&'static str, OpenKind, OpenKind),
    #[error("more than {0} moving walls")]
    TooManyWalls(usize),
    #[error("obstacle {0} lies entirely outside the domain")]
    ObstacleOutside(usize),
    #[error("body[{index}].stl: {error}")]
    Stl { index: usize, error: MeshError },
    #[error("body[{0}] lies entirely outside the domain: no node centre is inside its mesh (check its scale, translate and the [units])")]
    BodyOutside(usize),
    #[error("body[{index}]: the immersed body leaves the domain along {axis}: its points reach {axis} = {reach:.2} nodes by step {step}, and its kernel needs them within 0.5 to {limit:.1} (nodes) on a walled axis")]
    ImmersedOutside {
        index: usize,
        axis: char,
        reach: f64,
        step: u64,
        limit: f64,
    },
    #[error("body[{0}]: the immersed body has no surface points (its triangles have no area)")]
    ImmersedEmpty(usize),
    #[error("body[{index}]: the immersed body's points move at {speed:.3} (lattice units) by step {step}; keep them below {max}")]
    ImmersedTooFast {
        index: usize,
        speed: f64,
        step: u64,
        max: f64,
    },
}

/// The mesh of `[[body]]` `k`, placed, in node coordinates.
fn placed_mesh(case: &CaseConfig, k: usize) -> Result<Mesh, GeometryError> {
    let b = &case.body[k];
    Ok(Mesh::load(&b.stl)
        .map_err(|error| GeometryError::Stl { index: k, error })?
        .placed(b.scale.factors(), b.rotate, b.translate)
        .mapped(|p| case.node_coordinates(p)))
}

/// The fastest a point of an immersed body may move, lattice units (a Mach number of 0.35).
pub const MAX_IMMERSED_SPEED: f64 = 0.2;

/// A body's Lagrangian points (one per node spacing squared) with normals out of the body: a mesh
/// wound inward, as many STL files are (its signed volume negative), has its normals reversed, so
/// that the retraction moves the points into the body rather than out into the fluid. On an open
/// sheet, which has no inside, the sign only decides which side the points move to.
fn outward_surface(mesh: &Mesh) -> SurfacePoints {
    let mut surface = SurfacePoints::from_mesh(mesh, 1.0);
    if mesh.signed_volume() < 0.0 {
        for n in &mut surface.normals {
            *n = n.map(|v| -v);
        }
    }
    surface
}

/// The immersed bodies of a case (`method = "immersed"`, in `[[body]]` order): each mesh placed and
/// sampled by [`SurfacePoints`] at one point per node spacing squared, with its motion. Refused
/// when a body's points would leave the domain along a walled axis, or move faster than
/// [`MAX_IMMERSED_SPEED`], within the run's steps (`case.run.steps`, else `max_steps`): the path's
/// vertices, the ends and the rotation's whole circle bound where a point can be.
pub fn immersed_bodies(case: &CaseConfig) -> Result<ImmersedBodies, GeometryError> {
    let d = &case.domain;
    let t_end = case.run.steps.unwrap_or(case.run.max_steps) as f64;
    let mut bodies = Vec::new();
    for (k, b) in case.body.iter().enumerate() {
        if b.method != BodyMethod::Immersed {
            continue;
        }
        let mesh = placed_mesh(case, k)?;
        let surface = outward_surface(&mesh);
        if surface.is_empty() {
            return Err(GeometryError::ImmersedEmpty(k));
        }
        let mut motion = case.body_motion(k);
        if b.rotation.is_none() {
            // The torque's reference: the surface's centroid, moving with the body.
            let area = surface.area();
            motion.origin = std::array::from_fn(|a| {
                surface
                    .positions
                    .iter()
                    .zip(&surface.areas)
                    .map(|(p, w)| p[a] * w)
                    .sum::<f64>()
                    / area
            });
        }
        // Each point moved inward along its normal (none where the normals of a sheet's two sides
        // cancel).
        let retraction = b.retraction.unwrap_or(DEFAULT_RETRACTION);
        let points: Vec<[f64; 3]> = surface
            .positions
            .iter()
            .zip(&surface.normals)
            .map(|(p, n)| std::array::from_fn(|a| p[a] - retraction * n[a]))
            .collect();
        // Each point's circle about the rotation's axis (a point when the body does not turn):
        // its centre on the axis and its radius; of the points the forcing uses.
        let circles: Vec<([f64; 3], f64)> = points
            .iter()
            .map(|p| {
                let r: [f64; 3] = std::array::from_fn(|a| p[a] - motion.origin[a]);
                let along: f64 = (0..3).map(|a| r[a] * motion.axis[a]).sum();
                let c: [f64; 3] =
                    std::array::from_fn(|a| motion.origin[a] + along * motion.axis[a]);
                let radius = (0..3).map(|a| (p[a] - c[a]).powi(2)).sum::<f64>().sqrt();
                if motion.rate == 0.0 {
                    (*p, 0.0)
                } else {
                    (c, radius)
                }
            })
            .collect();
        let radius = circles.iter().map(|c| c.1).fold(0.0, f64::max);
        let reach = motion.reach(t_end);
        let mut lo = [f64::INFINITY; 3];
        let mut hi = [f64::NEG_INFINITY; 3];
        for (c, r) in &circles {
            for a in 0..3 {
                lo[a] = lo[a].min(c[a] - r + reach[0][a]);
                hi[a] = hi[a].max(c[a] + r + reach[1][a]);
            }
        }
        for a in 0..3 {
            let limit = d.size[a] as f64 - 1.5;
            if d.periodic[a] {
                continue;
            }
            let axis = ['x', 'y', 'z'][a];
            let (bad, at) = if lo[a] < 0.5 {
                (true, lo[a])
            } else {
                (hi[a] >= limit, hi[a])
            };
            if bad {
                return Err(GeometryError::ImmersedOutside {
                    index: k,
                    axis,
                    reach: at,
                    step: t_end as u64,
                    limit,
                });
            }
        }
        let v = motion.velocity.iter().map(|c| c * c).sum::<f64>().sqrt();
        let path_speed = motion
            .path
            .windows(2)
            .map(|w| {
                let dt = w[1].0 - w[0].0;
                (0..3)
                    .map(|a| ((w[1].1[a] - w[0].1[a]) / dt).powi(2))
                    .sum::<f64>()
                    .sqrt()
            })
            .fold(0.0, f64::max);
        let speed = v + path_speed + motion.rate.abs() * radius;
        if speed >= MAX_IMMERSED_SPEED {
            return Err(GeometryError::ImmersedTooFast {
                index: k,
                speed,
                step: t_end as u64,
                max: MAX_IMMERSED_SPEED,
            });
        }
        bodies.push(LagrangianBody {
            name: b
                .name
                .clone()
                .unwrap_or_else(|| format!("body{}", d.obstacles.len() + k)),
            points,
            areas: surface.areas,
            motion,
        });
    }
    Ok(ImmersedBodies {
        bodies,
        size: d.size,
        periodic: d.periodic,
        iterations: case.numerics.immersed_iterations,
    })
}

/// What closes a face, or a patch of one.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Closure {
    Resting,
    /// A wall (or an inlet) moving with the velocity of this slot.
    Moving(usize),
    /// Open, by the face's [`OpenKind`].
    Open,
}

/// A solid of the geometry: an analytic shape, or a body voxelised from a mesh (shared, so that
/// cloning a geometry for each worker stays cheap).
#[derive(Clone, Debug, PartialEq)]
enum Solid {
    Shape(Obstacle),
    Body(Arc<Voxels>),
    /// An immersed body's place in the numbering: it covers no node.
    Immersed,
}

/// A geometry: the domain, the walls closing its non-periodic faces (at rest or moving) and its
/// obstacles.
#[derive(Clone, Debug, PartialEq)]
pub struct Geometry {
    pub domain: Domain,
    /// Velocity of each wall slot.
    pub wall_velocities: Vec<[f64; 3]>,
    /// What closes each face ([`Face::ALL`] order) outside its patches.
    ///
    /// A wall moves only over the lattice's own span: a position beyond several faces (an edge or a
    /// corner of the box) is a resting wall. Each point of a moving wall is then crossed by links in
    /// ± pairs, so no mass flows through the wall; were the edge line to move too, the one link
    /// crossing it would carry a moving-wall term alone, a source of U·h/6 at the upstream edge and a
    /// sink at the downstream one, a first-order error (it held the Re = 1000 cavity to first-order
    /// convergence). Mass is still conserved: the nodes at the two ends of each row get equal and
    /// opposite terms.
    faces: [Closure; 6],
    /// Patches of faces closed otherwise than the rest of their face, first match wins (the case
    /// refuses overlapping ones).
    patches: Vec<(FacePatch, Closure)>,
    /// How the open parts of each face ([`Face::ALL`] order) let the flow through: one kind per
    /// face, whether it opens whole or in patches.
    open: [Option<OpenKind>; 6],
    /// Per wall slot: whether it is a velocity inlet (its links use the node's density).
    inlet: Vec<bool>,
    /// Per wall slot: the axes (bit `a` for axis `a`) across which an inlet's velocity follows a
    /// parabola (`thelma_core::physics::parabola`); 0 for a uniform inlet and for walls.
    profile_axes: Vec<u32>,
    /// Obstacles and bodies in the order they were added: the owner indices of [`Self::solid_owner`].
    solids: Vec<Solid>,
}

impl Geometry {
    /// A box of resting walls on every non-periodic axis, no obstacles.
    pub fn closed_box(domain: Domain) -> Self {
        Self {
            domain,
            wall_velocities: Vec::new(),
            faces: [Closure::Resting; 6],
            patches: Vec::new(),
            open: [None; 6],
            inlet: Vec::new(),
            profile_axes: Vec::new(),
            solids: Vec::new(),
        }
    }

    /// The lid-driven cavity: walls on every non-periodic axis, the top wall (z = max) moving in +x
    /// with `lid_speed`.
    pub fn cavity(domain: Domain, lid_speed: f64) -> Self {
        Self::closed_box(domain)
            .with_moving_wall(Face::ZPlus, [lid_speed, 0.0, 0.0])
            .expect("the lid needs a walled z axis")
    }

    /// Closes `face`, or only `patch` of it, with `c`.
    fn close(
        mut self,
        face: Face,
        patch: Option<FacePatch>,
        c: Closure,
    ) -> Result<Self, GeometryError> {
        if self.domain.periodic[face.axis()] {
            return Err(GeometryError::PeriodicWall(face.name()));
        }
        match patch {
            None => self.faces[face as usize] = c,
            Some(p) => {
                debug_assert_eq!(p.face, face);
                self.patches.push((p, c));
            }
        }
        Ok(self)
    }

    /// A new wall-velocity slot for `velocity`.
    fn slot(&mut self, velocity: [f64; 3], inlet: bool) -> Result<usize, GeometryError> {
        let slots = 1 << NodeFlags::SLOT_BITS;
        if self.wall_velocities.len() == slots {
            return Err(GeometryError::TooManyWalls(slots));
        }
        self.wall_velocities.push(velocity);
        self.inlet.push(inlet);
        self.profile_axes.push(0);
        Ok(self.wall_velocities.len() - 1)
    }

    /// Makes `face` a wall moving with `velocity` (tangential to the face).
    pub fn with_moving_wall(self, face: Face, velocity: [f64; 3]) -> Result<Self, GeometryError> {
        self.with_moving_part(face, None, velocity, false)
    }

    /// Makes `face` (or `patch` of it) a wall moving with `velocity`, or with `inlet` a velocity
    /// inlet.
    pub fn with_moving_part(
        mut self,
        face: Face,
        patch: Option<FacePatch>,
        velocity: [f64; 3],
        inlet: bool,
    ) -> Result<Self, GeometryError> {
        if self.domain.periodic[face.axis()] {
            return Err(GeometryError::PeriodicWall(face.name()));
        }
        let s = self.slot(velocity, inlet)?;
        self.close(face, patch, Closure::Moving(s))
    }

    /// Makes `face` a velocity inlet: a wall moving with `velocity` (any direction), whose
    /// bounce-back term takes the node's density.
    pub fn with_inlet(self, face: Face, velocity: [f64; 3]) -> Result<Self, GeometryError> {
        self.with_moving_part(face, None, velocity, true)
    }

    /// Makes `patch` of its face a resting wall (in a face that is otherwise open).
    pub fn with_wall_patch(self, patch: FacePatch) -> Result<Self, GeometryError> {
        self.close(patch.face, Some(patch), Closure::Resting)
    }

    /// Makes `face` a velocity inlet with Poiseuille's profile: `velocity` at the peak, times
    /// [`parabola`](thelma_core::physics::parabola) across each walled (non-periodic) axis of the
    /// face.
    pub fn with_parabolic_inlet(
        self,
        face: Face,
        velocity: [f64; 3],
    ) -> Result<Self, GeometryError> {
        let mut g = self.with_inlet(face, velocity)?;
        let axes = (0..3)
            .filter(|&a| a != face.axis() && !g.domain.periodic[a])
            .fold(0, |m, a| m | 1 << a);
        *g.profile_axes.last_mut().expect("a slot was added") = axes;
        Ok(g)
    }

    /// Opens `face`: a pressure outlet, an outflow or a free-slip wall.
    pub fn with_open_face(self, face: Face, kind: OpenKind) -> Result<Self, GeometryError> {
        self.with_open_part(face, None, kind)
    }

    /// Opens `face`, or only `patch` of it. All open parts of a face open the same way.
    pub fn with_open_part(
        mut self,
        face: Face,
        patch: Option<FacePatch>,
        kind: OpenKind,
    ) -> Result<Self, GeometryError> {
        match self.open[face as usize] {
            Some(k) if k != kind => return Err(GeometryError::TwoOpenKinds(face.name(), k, kind)),
            _ => self.open[face as usize] = Some(kind),
        }
        self.close(face, patch, Closure::Open)
    }

    /// The kind of an open face, `None` for a wall.
    pub fn open_kind(&self, face: Face) -> Option<OpenKind> {
        self.open[face as usize]
    }

    /// Adds a solid obstacle.
    pub fn with_obstacle(mut self, o: Obstacle) -> Self {
        self.solids.push(Solid::Shape(o));
        self
    }

    /// Adds a solid body voxelised from a mesh. Unlike the analytic obstacles, a body does not wrap
    /// around periodic axes: the part of its mesh beyond the lattice is cut off.
    pub fn with_body(mut self, v: Arc<Voxels>) -> Self {
        self.solids.push(Solid::Body(v));
        self
    }

    /// The geometry a case describes.
    pub fn from_case(case: &CaseConfig) -> Result<Self, GeometryError> {
        let d = &case.domain;
        let domain = Domain::new(d.size, d.periodic);
        let mut g = Self::closed_box(domain);
        let profiles = case.wall_profiles();
        for ((face, u, inlet, patch), profile) in case.moving_walls().into_iter().zip(profiles) {
            g = if inlet && profile == Profile::Parabolic {
                g.with_parabolic_inlet(face, u)?
            } else {
                g.with_moving_part(face, patch, u, inlet)?
            };
        }
        for (face, kind, rho, patch) in case.open_faces() {
            let kind = match kind {
                BoundaryKind::Pressure => OpenKind::Pressure { drho: rho - 1.0 },
                BoundaryKind::Outflow => OpenKind::Outflow,
                _ => OpenKind::FreeSlip,
            };
            g = g.with_open_part(face, patch, kind)?;
        }
        for patch in case.wall_patches() {
            g = g.with_wall_patch(patch)?;
        }
        for (k, o) in case.lattice_obstacles().into_iter().enumerate() {
            g = g.with_obstacle(o);
            if !g.obstacle_touches_domain(k) {
                return Err(GeometryError::ObstacleOutside(k));
            }
        }
        for (k, b) in case.body.iter().enumerate() {
            if b.method == BodyMethod::Immersed {
                // Forced through the flow by the runtime ([`immersed_bodies`]), not a solid.
                g.solids.push(Solid::Immersed);
                continue;
            }
            let mesh = placed_mesh(case, k)?;
            match Voxels::of(&mesh, d.size) {
                Some(v) if v.count() > 0 => g = g.with_body(Arc::new(v)),
                _ => return Err(GeometryError::BodyOutside(k)),
            }
        }
        Ok(g)
    }

    fn obstacle_touches_domain(&self, k: usize) -> bool {
        let [nx, ny, nz] = self.domain.size;
        match &self.solids[k] {
            Solid::Shape(Obstacle::Box { min, max }) => (0..3).all(|a| {
                // Some whole node i in [0, n) with min ≤ i < max.
                let first = min[a].max(0.0).ceil();
                first < max[a] && first <= ([nx, ny, nz][a] - 1) as f64
            }),
            Solid::Shape(Obstacle::Sphere { centre, radius }) => (0..3).all(|a| {
                centre[a] + radius >= 0.0 && centre[a] - radius <= ([nx, ny, nz][a] - 1) as f64
            }),
            Solid::Shape(Obstacle::Cylinder {
                centre,
                axis,
                radius,
            }) => {
                // The axis passes within `radius` of the box of node centres.
                let hi = [nx, ny, nz].map(|n| (n - 1) as f64);
                let mid = hi.map(|h| h / 2.0);
                let half = (hi.iter().map(|h| h * h).sum::<f64>()).sqrt() / 2.0;
                line_distance2(mid, *centre, *axis).sqrt() <= half + radius
            }
            Solid::Body(v) => v.count() > 0,
            Solid::Immersed => true,
        }
    }

    /// Whether the obstacles cover node (x, y, z) of the lattice.
    ///
    /// On a periodic axis an obstacle wraps around: the node counts with its periodic images (a box
    /// reaching past the edge, the minimum-image distance for a sphere).
    pub fn in_obstacle(&self, x: usize, y: usize, z: usize) -> bool {
        self.solid_owner(x, y, z).is_some()
    }

    /// The solid that covers node (x, y, z) of the lattice: the index of the first solid (in the
    /// order they were added) that covers it, `None` for a fluid node. Forces on bodies are summed
    /// per owner. For a geometry built by [`Self::from_case`] the indices form one list: the case's
    /// `domain.obstacles` in order, then its `[[body]]` entries in order.
    pub fn solid_owner(&self, x: usize, y: usize, z: usize) -> Option<usize> {
        let p = [x as i64, y as i64, z as i64];
        let images = |a: usize| -> &'static [i64] {
            if self.domain.periodic[a] {
                &[-1, 0, 1]
            } else {
                &[0]
            }
        };
        let n = |a: usize| self.domain.size[a] as i64;
        self.solids.iter().position(|o| match o {
            Solid::Shape(Obstacle::Box { min, max }) => (0..3).all(|a| {
                images(a).iter().any(|k| {
                    let q = (p[a] + k * n(a)) as f64;
                    q >= min[a] && q < max[a]
                })
            }),
            Solid::Body(v) => v.contains([x, y, z]),
            Solid::Immersed => false,
            Solid::Shape(Obstacle::Sphere { centre, radius }) => {
                let d2: f64 = (0..3)
                    .map(|a| {
                        images(a)
                            .iter()
                            .map(|k| ((p[a] + k * n(a)) as f64 - centre[a]).powi(2))
                            .fold(f64::INFINITY, f64::min)
                    })
                    .sum();
                d2 <= radius * radius
            }
            Solid::Shape(Obstacle::Cylinder {
                centre,
                axis,
                radius,
            }) => {
                // The nearest periodic image of the node.
                let mut d2 = f64::INFINITY;
                for kx in images(0) {
                    for ky in images(1) {
                        for kz in images(2) {
                            let q = [
                                (p[0] + kx * n(0)) as f64,
                                (p[1] + ky * n(1)) as f64,
                                (p[2] + kz * n(2)) as f64,
                            ];
                            d2 = d2.min(line_distance2(q, *centre, *axis));
                        }
                    }
                }
                d2 <= radius * radius
            }
        })
    }

    /// Whether any node of the lattice is fluid: obstacles may cover it all, and such a case has
    /// nothing to simulate (its mass is 0, its drift 0/0). Stops at the first fluid node, which in
    /// any sensible case is one of the first looked at.
    pub fn has_fluid(&self) -> bool {
        let [nx, ny, nz] = self.domain.size;
        let covers_all = self.solids.iter().any(|o| match o {
            Solid::Shape(Obstacle::Box { min, max }) => {
                (0..3).all(|a| min[a] <= 0.0 && max[a] > (self.domain.size[a] - 1) as f64)
            }
            Solid::Body(v) => v.count() == self.domain.size.iter().product::<usize>(),
            Solid::Shape(Obstacle::Sphere { .. } | Obstacle::Cylinder { .. }) | Solid::Immersed => {
                false
            }
        });
        !covers_all && (0..nz).any(|z| (0..ny).any(|y| (0..nx).any(|x| !self.in_obstacle(x, y, z))))
    }

    /// What is at position `p` (possibly one node outside the lattice): `None` for fluid.
    pub fn wall_at(&self, p: [i64; 3]) -> Option<Wall> {
        let size = self.domain.size;
        let mut q = [0usize; 3];
        let mut beyond = Vec::new();
        for a in 0..3 {
            let n = size[a] as i64;
            let v = if self.domain.periodic[a] {
                p[a].rem_euclid(n)
            } else {
                p[a]
            };
            if v < 0 || v >= n {
                beyond.push(Face::ALL[2 * a + usize::from(v >= n)]);
            } else {
                q[a] = v as usize;
            }
        }
        match beyond.as_slice() {
            [] => {}
            [face] => {
                let c = self
                    .patches
                    .iter()
                    .find(|(p, _)| p.face == *face && p.holds(q))
                    .map_or(self.faces[*face as usize], |&(_, c)| c);
                return Some(match c {
                    Closure::Resting => Wall::Resting,
                    Closure::Moving(s) => Wall::Moving(s),
                    Closure::Open => Wall::Open(*face),
                });
            }
            // An edge or a corner of the box: at rest (see `moving`).
            _ => return Some(Wall::Resting),
        }
        self.in_obstacle(q[0], q[1], q[2]).then_some(Wall::Resting)
    }

    /// The bit field of node (x, y, z).
    pub fn node_flags(&self, x: usize, y: usize, z: usize) -> Result<NodeFlags, GeometryError> {
        // Fast path for the bulk: no wall within one node along any axis and no obstacle's bounding
        // box (grown by one node) around the node.
        let p = [x as i64, y as i64, z as i64];
        let inner = (0..3).all(|a| {
            self.domain.periodic[a] || (p[a] >= 1 && p[a] + 1 < self.domain.size[a] as i64)
        });
        if inner && !self.solids.iter().any(|o| near_bounds(o, p, &self.domain)) {
            return Ok(NodeFlags::FLUID);
        }
        if self.in_obstacle(x, y, z) {
            return Ok(NodeFlags::solid());
        }
        let mut f = NodeFlags::FLUID;
        let mut slot = None;
        for (i, c) in C.iter().enumerate().take(Q).skip(1) {
            let src = [
                x as i64 - c[0] as i64,
                y as i64 - c[1] as i64,
                z as i64 - c[2] as i64,
            ];
            match self.wall_at(src) {
                None => {}
                Some(Wall::Resting) => f = f.with_bounce(i),
                Some(Wall::Open(face)) => {
                    // Outflow and free slip pull from beside the node, x − c_i − n: where an
                    // obstacle stands there, the link falls back to a resting wall.
                    let n = outward(face);
                    let beside = [src[0] - n[0], src[1] - n[1], src[2] - n[2]];
                    let shifts =
                        !matches!(self.open[face as usize], Some(OpenKind::Pressure { .. }));
                    if shifts && self.wall_at(beside).is_some() {
                        f = f.with_bounce(i);
                    } else {
                        f = f.with_open(face);
                    }
                }
                Some(Wall::Moving(s)) => {
                    if slot.is_some_and(|t| t != s) {
                        return Err(GeometryError::TwoMovingWalls(x, y, z));
                    }
                    slot = Some(s);
                    f = f.with_moving(i, s);
                }
            }
        }
        Ok(f)
    }

    /// The flags of the planes `z` of the lattice, palette-compressed.
    pub fn slab(&self, z: Range<usize>) -> Result<SlabFlags, GeometryError> {
        let [nx, ny, _] = self.domain.size;
        self.part([0..nx, 0..ny, z])
    }

    /// The flags of the box of nodes `r` (global ranges along x, y and z), as [`Self::slab`]'s.
    pub fn part(&self, r: [Range<usize>; 3]) -> Result<SlabFlags, GeometryError> {
        let [xs, ys, z] = r;
        let (nx, ny) = (xs.len(), ys.len());
        let mut lookup: HashMap<NodeFlags, u16> = HashMap::new();
        let mut flags = vec![NodeFlags::FLUID];
        lookup.insert(NodeFlags::FLUID, 0);
        let mut index = Vec::with_capacity(nx * ny * z.len());
        for zz in z.clone() {
            for y in ys.clone() {
                for x in xs.clone() {
                    let f = self.node_flags(x, y, zz)?;
                    let k = match lookup.get(&f) {
                        Some(&k) => k,
                        None => {
                            if flags.len() == MAX_PALETTE {
                                return Err(GeometryError::PaletteFull(z.clone()));
                            }
                            let k = flags.len() as u16;
                            flags.push(f);
                            lookup.insert(f, k);
                            k
                        }
                    };
                    index.push(k);
                }
            }
        }
        let links: Vec<[LinkRule; Q]> = flags.iter().map(|&f| self.links(f)).collect();
        let inlet: Vec<u32> = flags
            .iter()
            .zip(&links)
            .map(|(f, l)| {
                if l.contains(&LinkRule::Inlet) {
                    let slot = f.slot();
                    slot as u32 | self.profile_axes[slot] << NodeFlags::SLOT_BITS
                } else {
                    0
                }
            })
            .collect();
        // The modules evaluate an outlet's terms once per node: one density per node.
        for rules in &links {
            let mut first = None;
            for r in rules {
                if let LinkRule::AntiBounce { drho } = *r {
                    if first.is_some_and(|d| d != drho) {
                        return Err(GeometryError::TwoPressures);
                    }
                    first = Some(drho);
                }
            }
        }
        let moving_term = terms(&flags, &links, &self.wall_velocities);
        Ok(SlabFlags {
            size: [nx, ny, z.len()],
            index,
            palette: FlagPalette {
                flags,
                moving_term,
                links,
                inlet,
            },
        })
    }

    /// The links of the slab `z` (planes of the lattice) that end in an obstacle, for forces on
    /// bodies: per fluid node beside one (slab-local index, ascending), per obstacle it touches (the
    /// [`Self::solid_owner`] index), the directions `i` whose `x − c_i` lies in it.
    pub fn body_links(&self, z: Range<usize>) -> Result<Vec<BodyLinks>, GeometryError> {
        let [nx, ny, _] = self.domain.size;
        self.body_links_in([0..nx, 0..ny, z])
    }

    /// [`Self::body_links`] of the box of nodes `r` (global ranges along x, y and z), indexed in
    /// the box.
    pub fn body_links_in(&self, r: [Range<usize>; 3]) -> Result<Vec<BodyLinks>, GeometryError> {
        let [nx, ny, nz] = self.domain.size;
        let [xs, ys, z] = r;
        let (bx, by) = (xs.len(), ys.len());
        let mut out = Vec::new();
        for (zl, zz) in z.enumerate() {
            for (yl, y) in ys.clone().enumerate() {
                for (xl, x) in xs.clone().enumerate() {
                    let f = self.node_flags(x, y, zz)?;
                    if f.is_solid() || f.bounce_mask() == 0 {
                        continue;
                    }
                    let mut per: Vec<(usize, u32)> = Vec::new();
                    let mut m = f.bounce_mask();
                    while m != 0 {
                        let i = m.trailing_zeros() as usize;
                        m &= m - 1;
                        let src = [
                            x as i64 - C[i][0] as i64,
                            y as i64 - C[i][1] as i64,
                            zz as i64 - C[i][2] as i64,
                        ];
                        let mut q = [0usize; 3];
                        let inside = (0..3).all(|a| {
                            let n = [nx, ny, nz][a] as i64;
                            let v = if self.domain.periodic[a] {
                                src[a].rem_euclid(n)
                            } else {
                                src[a]
                            };
                            q[a] = v.max(0) as usize;
                            (0..n).contains(&v)
                        });
                        if let Some(b) =
                            inside.then(|| self.solid_owner(q[0], q[1], q[2])).flatten()
                        {
                            match per.iter_mut().find(|(o, _)| *o == b) {
                                Some((_, dirs)) => *dirs |= 1 << i,
                                None => per.push((b, 1 << i)),
                            }
                        }
                    }
                    let node = ((zl * by + yl) * bx + xl) as u32;
                    out.extend(per.into_iter().map(|(body, links)| BodyLinks {
                        node,
                        body,
                        links,
                    }));
                }
            }
        }
        Ok(out)
    }

    /// The rule of each direction of a node with flags `f`: bounce-back where its bits say so,
    /// otherwise the rule of the one open face the link crosses, otherwise the pull.
    pub fn links(&self, f: NodeFlags) -> [LinkRule; Q] {
        std::array::from_fn(|i| {
            if f.is_solid() || i == 0 {
                return LinkRule::Pull;
            }
            if f.moving(i) && self.inlet[f.slot()] {
                return LinkRule::Inlet;
            }
            if f.bounces(i) {
                return LinkRule::Bounce;
            }
            let open = f.open_faces();
            for face in Face::ALL {
                let n = outward(face);
                let crosses = (0..3).map(|a| C[i][a] * n[a] as i32).sum::<i32>() == -1;
                if open & (1 << face as u32) == 0 || !crosses {
                    continue;
                }
                let offset = [0, 1, 2].map(|a| -C[i][a] - n[a] as i32);
                return match self.open[face as usize].expect("an open face") {
                    OpenKind::Pressure { drho } => LinkRule::AntiBounce { drho },
                    OpenKind::Outflow => LinkRule::Shift { dir: i, offset },
                    OpenKind::FreeSlip => {
                        let mut m = C[i];
                        m[face.axis()] = -m[face.axis()];
                        let dir = C.iter().position(|c| *c == m).expect("D3Q19 is symmetric");
                        LinkRule::Shift { dir, offset }
                    }
                };
            }
            LinkRule::Pull
        })
    }
}

/// The squared distance of point `p` from the line through `c` along `axis`.
fn line_distance2(p: [f64; 3], c: [f64; 3], axis: [f64; 3]) -> f64 {
    let d = [p[0] - c[0], p[1] - c[1], p[2] - c[2]];
    let a2 = axis.iter().map(|v| v * v).sum::<f64>();
    let along = (d[0] * axis[0] + d[1] * axis[1] + d[2] * axis[2]) / a2;
    (0..3).map(|k| (d[k] - along * axis[k]).powi(2)).sum()
}

/// A fluid node's links into one obstacle ([`Geometry::body_links`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyLinks {
    /// Slab-local node index, `(z · ny + y) · nx + x`.
    pub node: u32,
    /// The obstacle ([`Geometry::solid_owner`]'s index).
    pub body: usize,
    /// Bit `i`: `x − c_i` lies in the obstacle.
    pub links: u32,
}

/// The outward unit normal of a face of the box.
fn outward(face: Face) -> [i64; 3] {
    let mut n = [0; 3];
    n[face.axis()] = if face.upper() { 1 } else { -1 };
    n
}

/// Whether node `p` lies within one node of the obstacle's bounding box, counting the periodic images
/// of `p` on periodic axes: a cheap filter in front of the exact test.
fn near_bounds(o: &Solid, p: [i64; 3], domain: &Domain) -> bool {
    let (lo, hi): ([f64; 3], [f64; 3]) = match o {
        // Nodes min ≤ i < max: within [min, max].
        Solid::Shape(Obstacle::Box { min, max }) => (*min, *max),
        Solid::Immersed => return false,
        Solid::Body(v) => {
            let (lo, hi) = v.node_box();
            (lo.map(|c| c as f64), hi.map(|c| c as f64 - 1.0))
        }
        Solid::Shape(Obstacle::Sphere { centre, radius }) => (
            [centre[0] - radius, centre[1] - radius, centre[2] - radius],
            [centre[0] + radius, centre[1] + radius, centre[2] + radius],
        ),
        // Bounded only across an axis the cylinder's axis does not run along.
        Solid::Shape(Obstacle::Cylinder {
            centre,
            axis,
            radius,
        }) => {
            let along = |a: usize| axis[a] != 0.0;
            (
                std::array::from_fn(|a| {
                    if along(a) {
                        f64::NEG_INFINITY
                    } else {
                        centre[a] - radius
                    }
                }),
                std::array::from_fn(|a| {
                    if along(a) {
                        f64::INFINITY
                    } else {
                        centre[a] + radius
                    }
                }),
            )
        }
    };
    (0..3).all(|a| {
        let n = domain.size[a] as i64;
        let images: &[i64] = if domain.periodic[a] {
            &[-1, 0, 1]
        } else {
            &[0]
        };
        images.iter().any(|k| {
            let q = (p[a] + k * n) as f64;
            q >= lo[a] - 1.0 && q <= hi[a] + 1.0
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cylinder_covers_its_cross_section_along_its_axis_whatever_the_axis() {
        let domain = Domain::new([40, 40, 6], [false, false, true]);
        let r: f64 = 12.3;
        let g = Geometry::closed_box(domain).with_obstacle(Obstacle::Cylinder {
            centre: [19.6, 20.2, 100.0],
            axis: [0.0, 0.0, 2.0],
            radius: r,
        });
        let area = |z: usize| {
            (0..40)
                .flat_map(|y| (0..40).map(move |x| (x, y)))
                .filter(|&(x, y)| g.in_obstacle(x, y, z))
                .count() as f64
        };
        let exact = std::f64::consts::PI * r * r;
        for z in 0..6 {
            assert!(
                (area(z) / exact - 1.0).abs() < 0.02,
                "z {z}: {} of {exact}",
                area(z)
            );
        }
        // Along a diagonal of the x-y plane: nodes within r of the line x = y.
        let g = Geometry::closed_box(domain).with_obstacle(Obstacle::Cylinder {
            centre: [0.0, 0.0, 3.0],
            axis: [1.0, 1.0, 0.0],
            radius: 2.0,
        });
        assert!(g.in_obstacle(30, 30, 3) && g.in_obstacle(31, 30, 4));
        assert!(!g.in_obstacle(33, 30, 3) && !g.in_obstacle(30, 30, 0));
        assert_eq!(g.node_flags(30, 30, 3).unwrap(), NodeFlags::solid());
        assert!(g.node_flags(33, 30, 3).unwrap().bounce_mask() != 0);
    }

    #[test]
    fn a_domain_covered_by_obstacles_has_no_fluid() {
        let domain = Domain::new([6, 5, 4], [false; 3]);
        let all = Obstacle::Box {
            min: [-1.0, -1.0, -1.0],
            max: [10.0, 10.0, 10.0],
        };
        assert!(!Geometry::closed_box(domain).with_obstacle(all).has_fluid());
        // Two boxes that together cover everything, which the fast path does not see.
        let halves = [
            Obstacle::Box {
                min: [0.0, 0.0, 0.0],
                max: [3.0, 5.0, 4.0],
            },
            Obstacle::Box {
                min: [3.0, 0.0, 0.0],
                max: [6.0, 5.0, 4.0],
            },
        ];
        let g = halves.iter().fold(Geometry::closed_box(domain), |g, o| {
            g.with_obstacle(o.clone())
        });
        assert!(!g.has_fluid());
        let g = Geometry::closed_box(domain).with_obstacle(halves[0].clone());
        assert!(g.has_fluid());
        assert!(Geometry::cavity(domain, 0.1).has_fluid());
    }
    use thelma_core::physics::d3q19::W;

    #[test]
    fn cavity_walls_bounce_and_only_the_lid_moves() {
        let g = Geometry::cavity(Domain::new([4, 5, 6], [false; 3]), 0.1);
        let s = g.slab(0..6).unwrap();
        // An interior node bounces nothing.
        assert_eq!(s.get(1, 2, 3), NodeFlags::FLUID);
        // Bottom face: the directions with c_z = +1 pull from z = −1, a resting wall.
        let f = s.get(1, 2, 0);
        for i in 1..Q {
            assert_eq!(f.bounces(i), C[i][2] == 1, "dir {i}");
            assert!(!f.moving(i));
        }
        // Under the lid: c_z = −1 directions pull from z = nz, the lid, except across its edges.
        for x in 0..4 {
            let f = s.get(x, 2, 5);
            for i in 1..Q {
                let xs = x as i64 - C[i][0] as i64;
                let on_lid = C[i][2] == -1 && (0..4).contains(&xs);
                assert_eq!(f.moving(i), on_lid, "x {x} dir {i}");
                // Every c_z = −1 link still bounces back, moving or not.
                assert!(C[i][2] != -1 || f.bounces(i), "x {x} dir {i}");
            }
        }
        // The corner node (0, 0, top) bounces every direction with c_x = +1, c_y = +1 or c_z = −1:
        // 5 + 5 + 5 minus the three directions counted twice, (1,1,0), (1,0,−1) and (0,1,−1).
        let f = s.get(0, 0, 5);
        let n = (1..Q).filter(|&i| f.bounces(i)).count();
        assert_eq!(n, 12);
    }

    #[test]
    fn lid_terms_cancel_along_every_row_and_only_the_edges_carry_a_net_term() {
        let g = Geometry::cavity(Domain::new([6, 6, 6], [false; 3]), 0.1);
        let s = g.slab(0..6).unwrap();
        let term = |x: usize, y: usize| {
            let f = s.get(x, y, 5);
            let k = s.palette.flags.iter().position(|&p| p == f).unwrap();
            s.palette.moving_term[k]
        };
        for y in 0..6 {
            let row: f64 = (0..6).map(|x| term(x, y).iter().sum::<f64>()).sum();
            assert!(row.abs() < 1e-15, "row y {y}: net mass injection {row}");
            for x in 1..5 {
                let t = term(x, y);
                assert!(t.iter().sum::<f64>().abs() < 1e-15, "({x},{y})");
                let i = 13; // (+1, 0, −1): the term is 6 w_i U
                assert!((t[i] - 6.0 * W[i] * 0.1).abs() < 1e-15);
                // (−1, 0, −1) carries the opposite term.
                assert_eq!(t[12], -t[i]);
            }
            // At x = 0 the link (+1, 0, −1) crosses the lid's edge line, which is at rest.
            assert_eq!(term(0, y)[13], 0.0);
            assert_eq!(term(5, y)[12], 0.0);
        }
    }

    /// A wall moving along any face, in any tangential direction, moves over the lattice's span only:
    /// exactly the links that cross that face alone (not an edge) carry its term, and along every
    /// line of nodes in the direction of motion the terms cancel (no net mass).
    #[test]
    fn a_wall_moving_on_any_face_moves_over_its_span_and_injects_no_mass() {
        let size = [5usize, 6, 7];
        for face in Face::ALL {
            for t in (0..3).filter(|&t| t != face.axis()) {
                let mut u = [0.0; 3];
                u[t] = 0.05;
                let g = Geometry::closed_box(Domain::new(size, [false; 3]))
                    .with_moving_wall(face, u)
                    .unwrap();
                let s = g.slab(0..size[2]).unwrap();
                let a = face.axis();
                let mut line_sums = std::collections::HashMap::new();
                let mut touched = 0;
                for z in 0..size[2] {
                    for y in 0..size[1] {
                        for x in 0..size[0] {
                            let f = s.get(x, y, z);
                            let k = s.palette.flags.iter().position(|&p| p == f).unwrap();
                            let total: f64 = s.palette.moving_term[k].iter().sum();
                            let mut key = [x, y, z];
                            key[t] = 0;
                            *line_sums.entry(key).or_insert(0.0) += total;
                            let p = [x as i64, y as i64, z as i64];
                            for i in 1..Q {
                                let src: Vec<i64> = (0..3).map(|b| p[b] - C[i][b] as i64).collect();
                                let out = |b: usize| src[b] < 0 || src[b] >= size[b] as i64;
                                let beyond_face = if face.upper() {
                                    src[a] >= size[a] as i64
                                } else {
                                    src[a] < 0
                                };
                                let only = beyond_face && (0..3).filter(|&b| out(b)).count() == 1;
                                assert_eq!(f.moving(i), only, "{face:?} ({x},{y},{z}) dir {i}");
                                touched += usize::from(f.moving(i));
                            }
                        }
                    }
                }
                assert!(touched > 0);
                for (key, sum) in line_sums {
                    assert!(
                        sum.abs() < 1e-15,
                        "{face:?} u{t}: line {key:?} injects {sum}"
                    );
                }
            }
        }
        // A periodic axis has no face to move.
        let periodic = Geometry::closed_box(Domain::new(size, [true, false, false]));
        assert_eq!(
            periodic.with_moving_wall(Face::XPlus, [0.0, 0.1, 0.0]),
            Err(GeometryError::PeriodicWall("x+"))
        );
    }

    #[test]
    fn the_bulk_fast_path_agrees_with_the_exact_rule_across_periodic_boundaries() {
        let g = Geometry::cavity(Domain::new([12, 10, 9], [true, true, false]), 0.05)
            .with_obstacle(Obstacle::Sphere {
                centre: [0.5, 5.0, 4.0],
                radius: 2.2,
            })
            .with_obstacle(Obstacle::Box {
                min: [5.0, 9.0, 2.0],
                max: [8.0, 10.0, 5.0],
            });
        let exact = Geometry {
            solids: Vec::new(),
            ..g.clone()
        };
        for z in 0..9 {
            for y in 0..10 {
                for x in 0..12 {
                    // The exact rule, written out: a direction bounces iff its source is a wall.
                    let mut want = if g.in_obstacle(x, y, z) {
                        NodeFlags::solid()
                    } else {
                        NodeFlags::FLUID
                    };
                    if !want.is_solid() {
                        for i in 1..Q {
                            let src = [
                                x as i64 - C[i][0] as i64,
                                y as i64 - C[i][1] as i64,
                                z as i64 - C[i][2] as i64,
                            ];
                            let wall = exact.wall_at(src).or_else(|| {
                                let q = [
                                    src[0].rem_euclid(12) as usize,
                                    src[1].rem_euclid(10) as usize,
                                    src[2] as usize,
                                ];
                                g.in_obstacle(q[0], q[1], q[2]).then_some(Wall::Resting)
                            });
                            match wall {
                                None => {}
                                Some(Wall::Resting) => want = want.with_bounce(i),
                                Some(Wall::Moving(s)) => want = want.with_moving(i, s),
                                Some(Wall::Open(_)) => unreachable!("no open face here"),
                            }
                        }
                    }
                    assert_eq!(g.node_flags(x, y, z).unwrap(), want, "node ({x}, {y}, {z})");
                }
            }
        }
    }

    #[test]
    fn obstacles_wrap_across_periodic_boundaries() {
        let count = |centre: [f64; 3], periodic: [bool; 3]| {
            let g = Geometry::closed_box(Domain::new([16, 16, 16], periodic)).with_obstacle(
                Obstacle::Sphere {
                    centre,
                    radius: 3.5,
                },
            );
            let s = g.slab(0..16).unwrap();
            (0..16 * 16 * 16)
                .filter(|&p| s.get(p % 16, (p / 16) % 16, p / 256).is_solid())
                .count()
        };
        let whole = count([8.0, 8.0, 8.0], [true; 3]);
        assert!(whole > 100);
        // Centred on a corner of a periodic box, the sphere is still whole.
        assert_eq!(count([0.0, 0.0, 0.0], [true; 3]), whole);
        // With walls it is cut to an eighth and change.
        assert!(count([0.0, 0.0, 0.0], [false; 3]) < whole / 4);
    }

    #[test]
    fn periodic_axes_have_no_walls() {
        let g = Geometry::closed_box(Domain::new([4, 4, 4], [true, true, true]));
        let s = g.slab(0..4).unwrap();
        assert_eq!(s.palette.flags, vec![NodeFlags::FLUID]);
    }

    #[test]
    fn obstacles_are_solid_and_their_neighbours_bounce() {
        let g = Geometry::closed_box(Domain::new([10, 10, 10], [true, true, true]))
            .with_obstacle(Obstacle::Sphere {
                centre: [5.0, 5.0, 5.0],
                radius: 2.0,
            })
            .with_obstacle(Obstacle::Box {
                min: [0.0, 0.0, 0.0],
                max: [2.0, 2.0, 2.0],
            });
        let s = g.slab(0..10).unwrap();
        assert!(s.get(5, 5, 5).is_solid());
        assert!(s.get(0, 1, 1).is_solid());
        assert!(!s.get(8, 8, 8).is_solid());
        // (5, 5, 8) lies above the sphere's top node (5, 5, 7): direction +z pulls from it.
        let f = s.get(5, 5, 8);
        assert!(f.bounces(5));
        assert!(!f.bounces(6));
        // Consistency: every bounce direction of every fluid node points at a solid.
        for z in 0..10 {
            for y in 0..10 {
                for x in 0..10 {
                    let f = s.get(x, y, z);
                    if f.is_solid() {
                        continue;
                    }
                    for i in 1..Q {
                        let src = [
                            (x as i64 - C[i][0] as i64).rem_euclid(10),
                            (y as i64 - C[i][1] as i64).rem_euclid(10),
                            (z as i64 - C[i][2] as i64).rem_euclid(10),
                        ];
                        assert_eq!(
                            f.bounces(i),
                            s.get(src[0] as usize, src[1] as usize, src[2] as usize)
                                .is_solid()
                        );
                    }
                }
            }
        }
    }

    /// An inward-wound mesh (every triangle's winding reversed) gives the points, areas and normals
    /// of the outward-wound one: its signed volume is the sphere's, negated, and its normals are
    /// turned back out of the body.
    #[test]
    fn an_inward_wound_mesh_gets_outward_normals() {
        let centre = [20.3, 18.7, 21.1];
        let r = 6.0;
        let outward = Mesh {
            triangles: crate::mesh::shapes::sphere(r, 3)
                .into_iter()
                .map(|t| t.map(|v| std::array::from_fn(|a| v[a] + centre[a])))
                .collect(),
        };
        let inward = Mesh {
            triangles: outward
                .triangles
                .iter()
                .map(|&[a, b, c]| [a, c, b])
                .collect(),
        };
        let v = 4.0 / 3.0 * std::f64::consts::PI * r.powi(3);
        assert!(
            (outward.signed_volume() / v - 1.0).abs() < 0.02,
            "{}",
            outward.signed_volume()
        );
        assert!((inward.signed_volume() + outward.signed_volume()).abs() < 1e-9 * v);
        let (o, i) = (outward_surface(&outward), outward_surface(&inward));
        assert_eq!(o.len(), i.len());
        assert!(o.len() > 300);
        for k in 0..o.len() {
            let d: f64 = (0..3)
                .map(|a| (o.positions[k][a] - i.positions[k][a]).abs())
                .sum();
            assert!(
                d < 1e-12 && (o.areas[k] - i.areas[k]).abs() < 1e-12,
                "point {k}"
            );
            let along: f64 = (0..3)
                .map(|a| o.normals[k][a] * (o.positions[k][a] - centre[a]))
                .sum();
            let same: f64 = (0..3).map(|a| o.normals[k][a] * i.normals[k][a]).sum();
            assert!(
                along > 0.9 * r && same > 1.0 - 1e-12,
                "point {k}: {along} {same}"
            );
        }
    }

    /// The rules of open faces: anti-bounce-back, the outflow's and the free slip's pulls from
    /// beside the node, and resting bounce-back wherever a link crosses two faces or an obstacle
    /// stands where a pull would read.
    #[test]
    fn open_faces_give_each_link_its_rule() {
        let domain = Domain::new([6, 5, 4], [false, false, true]);
        let g = Geometry::closed_box(domain)
            .with_moving_wall(Face::XMinus, [0.05, 0.0, 0.0])
            .unwrap()
            .with_open_face(Face::XPlus, OpenKind::Outflow)
            .unwrap()
            .with_open_face(Face::YPlus, OpenKind::FreeSlip)
            .unwrap();
        let dir = |c: [i32; 3]| C.iter().position(|&d| d == c).unwrap();
        let rules = |x, y, z| g.links(g.node_flags(x, y, z).unwrap());
        // On the outflow, away from the y faces: each population entering through x+ is the one
        // the node's inner neighbour receives, pulled from the node's own plane.
        let r = rules(5, 2, 1);
        for c in [[-1, 0, 0], [-1, 1, 0], [-1, -1, 0], [-1, 0, 1], [-1, 0, -1]] {
            let i = dir(c);
            assert_eq!(
                r[i],
                LinkRule::Shift {
                    dir: i,
                    offset: [0, -c[1], -c[2]]
                },
                "{c:?}"
            );
        }
        assert_eq!(r[dir([1, 0, 0])], LinkRule::Pull);
        // On the free-slip wall: the mirror image, from the neighbour along the wall.
        let r = rules(2, 4, 1);
        assert_eq!(
            r[dir([1, -1, 0])],
            LinkRule::Shift {
                dir: dir([1, 1, 0]),
                offset: [-1, 0, 0]
            }
        );
        assert_eq!(
            r[dir([0, -1, 0])],
            LinkRule::Shift {
                dir: dir([0, 1, 0]),
                offset: [0, 0, 0]
            }
        );
        // The inlet is a moving wall; the x+/y+ edge is a resting wall.
        assert_eq!(rules(0, 2, 1)[dir([1, 0, 0])], LinkRule::Bounce);
        assert_eq!(rules(5, 4, 1)[dir([-1, -1, 0])], LinkRule::Bounce);
        assert_eq!(
            rules(5, 4, 1)[dir([-1, 0, 0])],
            LinkRule::Shift {
                dir: dir([-1, 0, 0]),
                offset: [0, 0, 0]
            }
        );
        // An obstacle beside the outflow: the link whose pull would read it bounces back instead.
        let blocked = g.clone().with_obstacle(Obstacle::Box {
            min: [5.0, 3.0, 0.0],
            max: [6.0, 4.0, 4.0],
        });
        let r = blocked.links(blocked.node_flags(5, 2, 1).unwrap());
        assert_eq!(r[dir([-1, -1, 0])], LinkRule::Bounce);
        // A pressure outlet's links carry its density in the palette.
        let p = Geometry::closed_box(domain)
            .with_open_face(Face::XPlus, OpenKind::Pressure { drho: 0.02 })
            .unwrap();
        let s = p.slab(0..4).unwrap();
        let k = s.index[(5 + 2) * 6 + 5] as usize; // node (5, 2, 1)
        let i = dir([-1, 0, 0]);
        assert_eq!(s.palette.links[k][i], LinkRule::AntiBounce { drho: 0.02 });
        assert_eq!(s.palette.moving_term[k][i], 0.02);
    }

    /// A patch closes its rectangle of a face, the rest keeps the face's closure: links leaving
    /// its nodes through the face take its rule, links leaving the nodes beside it bounce back from
    /// the wall, and a node whose links reach both takes each one's.
    #[test]
    fn a_patch_closes_only_its_rectangle_of_a_face() {
        let domain = Domain::new([6, 7, 8], [false; 3]);
        let inlet = FacePatch {
            face: Face::XMinus,
            lo: [2, 3],
            hi: [4, 5],
        };
        let vent = FacePatch {
            face: Face::XPlus,
            lo: [0, 0],
            hi: [6, 3],
        };
        let g = Geometry::closed_box(domain)
            .with_moving_part(Face::XMinus, Some(inlet), [0.05, 0.0, 0.0], true)
            .unwrap()
            .with_open_part(Face::XPlus, Some(vent), OpenKind::Outflow)
            .unwrap();
        let dir = |c: [i32; 3]| C.iter().position(|&d| d == c).unwrap();
        let rules = |x, y, z| g.links(g.node_flags(x, y, z).unwrap());
        let east = dir([1, 0, 0]);
        assert_eq!(rules(0, 3, 4)[east], LinkRule::Inlet);
        assert_eq!(rules(0, 1, 4)[east], LinkRule::Bounce);
        assert_eq!(rules(0, 3, 6)[east], LinkRule::Bounce);
        // On the patch's rim: the diagonal from inside it is the inlet's, the one from beside a wall.
        let r = rules(0, 4, 6);
        assert_eq!(r[dir([1, 0, 1])], LinkRule::Inlet);
        assert_eq!(r[dir([1, 0, -1])], LinkRule::Bounce);
        let west = dir([-1, 0, 0]);
        assert!(matches!(rules(5, 3, 3)[west], LinkRule::Shift { .. }));
        assert_eq!(rules(5, 3, 4)[west], LinkRule::Bounce);
        // A second open kind on a face is refused.
        let e = g
            .clone()
            .with_open_part(Face::XPlus, None, OpenKind::FreeSlip)
            .unwrap_err();
        assert!(matches!(e, GeometryError::TwoOpenKinds("x+", ..)), "{e:?}");
    }

    /// A case's solids are numbered in one list, obstacles first, then `[[body]]` entries; a body
    /// in metres (with `[units]`) lands on the nodes whose centres it covers; one outside the
    /// domain is refused naming its index.
    #[test]
    fn case_bodies_follow_the_obstacles_and_convert_from_metres() {
        let dir = tempfile::tempdir().unwrap();
        let stl = dir.path().join("cube.stl");
        std::fs::write(
            &stl,
            crate::mesh::shapes::ascii(&crate::mesh::shapes::cube(1.0)),
        )
        .unwrap();
        let text = |translate: &str| {
            format!(
                "[domain]\nsize = [20, 10, 10]\nobstacles = [{{ shape = \"sphere\", centre = [3.0, 5.0, 5.0], radius = 1.5 }}]\n\n[[body]]\nstl = {:?}\nscale = 4.0\ntranslate = {translate}\n",
                stl.to_str().unwrap()
            )
        };
        let case = CaseConfig::parse(&text("[12.0, 4.5, 4.5]"), false).unwrap();
        let g = Geometry::from_case(&case).unwrap();
        assert_eq!(g.solid_owner(3, 5, 5), Some(0));
        assert_eq!(g.solid_owner(12, 4, 4), Some(1));
        let body = (0..2000)
            .filter(|i| g.solid_owner(i % 20, (i / 20) % 10, i / 200) == Some(1))
            .count();
        // A cube of 4 nodes' side: nodes 10..14 along x, 3..7 along y and z (the half-open rule).
        assert_eq!(body, 64);
        assert_eq!(g.solid_owner(14, 4, 4), None);
        let far = CaseConfig::parse(&text("[50.0, 4.5, 4.5]"), false).unwrap();
        assert_eq!(
            Geometry::from_case(&far),
            Err(GeometryError::BodyOutside(0))
        );
        // In metres: dx = 1 cm, so a 4 cm cube about (12.5, 5, 5) cm covers nodes 10..14, 3..7.
        let mut metres = CaseConfig::parse(&text("[0.125, 0.05, 0.05]"), false).unwrap();
        metres.body[0].scale = thelma_core::Scale::Uniform(0.04);
        metres.domain.obstacles.clear();
        metres.units = Some(thelma_core::PhysicalUnits {
            length: 0.2,
            velocity: 0.1,
            viscosity: 1e-6,
            density: None,
        });
        let g = Geometry::from_case(&metres).unwrap();
        let solid: Vec<[usize; 3]> = (0..2000)
            .map(|i| [i % 20, (i / 20) % 10, i / 200])
            .filter(|p| g.solid_owner(p[0], p[1], p[2]) == Some(0))
            .collect();
        assert_eq!(solid.len(), 64);
        assert!(solid
            .iter()
            .all(|p| (10..14).contains(&p[0]) && (3..7).contains(&p[1])));
    }
}
