//! thelma-geometry: the per-node bit field ([`NodeFlags`]), boundary conditions and geometry builders
//! (the closed cavity with a moving lid, periodic axes, box and sphere obstacles, bodies voxelised
//! from STL meshes), cut into slabs.
//!
//! Walls use mid-grid (halfway) bounce-back: every node of the `nx × ny × nz` lattice is a fluid node
//! unless an obstacle covers it, and walls sit half a spacing outside the lattice on each
//! non-periodic axis. Nothing here knows about devices; compute modules read [`SlabFlags`].

mod flags;
mod geometry;
mod mesh;
mod propeller;
mod surface;
mod voxel;

pub use flags::{FlagPalette, LinkRule, NodeFlags, SlabFlags, BYTE_PALETTE, MAX_PALETTE};
pub use geometry::{
    immersed_bodies, BodyLinks, Geometry, GeometryError, OpenKind, Wall, MAX_IMMERSED_SPEED,
};
pub use mesh::{Mesh, MeshError};
pub use propeller::Propeller;
pub use surface::SurfacePoints;
pub use voxel::Voxels;
