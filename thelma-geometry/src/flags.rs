//! `NodeFlags`, the per-node bit field, and its palette-compressed form for compute modules.

use thelma_core::physics::d3q19::{C, Q, W};
use thelma_core::Face;

/// Per-node bit field. Every kernel mirrors these bits through the generated prelude.
///
/// | bits   | meaning |
/// |--------|---------|
/// | 0      | `SOLID`: the node is inside an obstacle; it is never updated and never read by a fluid node |
/// | 1–18   | `BOUNCE_i` (bit `i`): `x − c_i` is solid, so `f_i(x)` comes back from `f̃_ī(x)` instead of being pulled |
/// | 19–24  | `OPEN_f` (bit `19 + f`, faces in `Face::ALL` order): a link of this node crosses open face `f` (a pressure outlet, an outflow or a free-slip wall); the palette's [`LinkRule`]s say how |
/// | 25–31  | reserved (thermal walls) |
/// | 32     | reserved |
/// | 33–50  | `MOVING_i` (bit `32 + i`): the solid at `x − c_i` moves; add `6 w_i ρ_w (c_i · u_w)` |
/// | 51–55  | reserved |
/// | 56–59  | wall-velocity slot of the moving wall(s) this node touches (index into the geometry's table) |
/// | 60–63  | reserved |
///
/// Direction 0 (rest) never bounces, which is why bit 0 can carry the node kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeFlags(pub u64);

impl NodeFlags {
    /// A fluid node with no wall neighbour.
    pub const FLUID: NodeFlags = NodeFlags(0);
    /// Bit of the node kind.
    pub const SOLID_BIT: u64 = 1;
    /// Shift of the moving-wall mask.
    pub const MOVING_SHIFT: u32 = 32;
    /// Shift and width of the wall-velocity slot.
    pub const SLOT_SHIFT: u32 = 56;
    pub const SLOT_BITS: u32 = 4;
    /// Mask of the bounce-back bits (1–18).
    pub const BOUNCE_MASK: u64 = ((1u64 << Q) - 1) & !1;
    /// Shift of the open-face bits (six, one per face).
    pub const OPEN_SHIFT: u32 = 19;

    pub fn solid() -> Self {
        NodeFlags(Self::SOLID_BIT)
    }
    pub fn is_solid(self) -> bool {
        self.0 & Self::SOLID_BIT != 0
    }
    /// Whether direction `i` bounces back at this node.
    pub fn bounces(self, i: usize) -> bool {
        i > 0 && self.0 >> i & 1 != 0
    }
    /// Whether the wall that direction `i` bounces from moves.
    pub fn moving(self, i: usize) -> bool {
        i > 0 && self.0 >> (Self::MOVING_SHIFT + i as u32) & 1 != 0
    }
    /// The bounce-back directions as a 32-bit mask (bit `i` for direction `i`).
    pub fn bounce_mask(self) -> u32 {
        (self.0 & Self::BOUNCE_MASK) as u32
    }
    /// The moving-wall directions as a 32-bit mask (bit `i` for direction `i`).
    pub fn moving_mask(self) -> u32 {
        ((self.0 >> Self::MOVING_SHIFT) & Self::BOUNCE_MASK) as u32
    }
    /// The wall-velocity slot.
    pub fn slot(self) -> usize {
        ((self.0 >> Self::SLOT_SHIFT) & ((1 << Self::SLOT_BITS) - 1)) as usize
    }
    /// The open faces some link of this node crosses, as a 6-bit mask (bit `f` for `Face::ALL[f]`).
    pub fn open_faces(self) -> u32 {
        ((self.0 >> Self::OPEN_SHIFT) & 0x3f) as u32
    }
    pub fn with_open(self, face: Face) -> Self {
        NodeFlags(self.0 | 1 << (Self::OPEN_SHIFT + face as u32))
    }
    pub fn with_bounce(self, i: usize) -> Self {
        debug_assert!(i > 0 && i < Q);
        NodeFlags(self.0 | 1 << i)
    }
    pub fn with_moving(self, i: usize, slot: usize) -> Self {
        debug_assert!(i > 0 && i < Q && slot < 1 << Self::SLOT_BITS);
        NodeFlags(
            self.0
                | 1 << i
                | 1 << (Self::MOVING_SHIFT + i as u32)
                | (slot as u64) << Self::SLOT_SHIFT,
        )
    }
}

/// Largest number of distinct flag values one slab may hold (a palette index is at most two bytes).
pub const MAX_PALETTE: usize = 1 << 16;

/// Largest palette whose index fits one byte: the kernels read one byte per node up to this many
/// entries (every box, cavity and channel), two beyond it (bodies with many differently shaped
/// surface nodes, such as an STL mesh or a large sphere).
pub const BYTE_PALETTE: usize = 256;

/// How direction `i` of a node gets its population at the start of a step: `f_i(x)` in the terms of
/// the post-collision populations `f̃` of the previous step (shifted, `g = f − w`, as stored).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LinkRule {
    /// `g_i(x) = g̃_i(x − c_i)`: the plain pull.
    Pull,
    /// `g_i(x) = g̃_ī(x) + term_i`: halfway bounce-back from a wall, `term_i = 6 w_i (c_i · u_w)` for a
    /// wall moving at `u_w` (or an inlet), 0 at rest.
    Bounce,
    /// `g_i(x) = −g̃_ī(x) + 2 e_i(δρ_w, u)`, `e_i` the part of the shifted equilibrium even in `c_i`
    /// and `u` the node's velocity: anti-bounce-back to the density `1 + δρ_w` of a pressure outlet.
    AntiBounce { drho: f64 },
    /// `g_i(x) = g̃_j(x + offset)`: a population pulled from beside the node (a zero-gradient
    /// outflow: `j = i`, `offset = −c_i − n`; a free-slip wall: `j` the mirror image of `i`).
    Shift { dir: usize, offset: [i32; 3] },
    /// `g_i(x) = g̃_ī(x) + ρ(x) term_i`: a velocity inlet, Ladd's bounce-back with the wall's density
    /// taken as the node's own (so that the inflow's momentum, not only its volume, is imposed).
    Inlet,
}

impl LinkRule {
    /// Bits of [`Self::code`]: the kind (0 pull, 1 bounce, 2 anti-bounce, 3 shift, 4 inlet) in
    /// bits 0–2, the source direction in bits 3–7 and each offset component plus one in bits 8–9,
    /// 10–11, 12–13.
    pub const KIND_BITS: u32 = 3;
    /// Bits of the source direction, after the kind.
    pub const DIR_BITS: u32 = 5;
    /// Where the offset's components start (two bits each, x first).
    pub const OFFSET_SHIFT: u32 = Self::KIND_BITS + Self::DIR_BITS;
    /// The rule as one word for the kernels (their decoding is printed into the prelude).
    pub fn code(self) -> u32 {
        match self {
            LinkRule::Pull => 0,
            LinkRule::Bounce => 1,
            LinkRule::AntiBounce { .. } => 2,
            LinkRule::Shift { dir, offset } => {
                let o = |v: i32| (v + 1) as u32;
                let s = Self::OFFSET_SHIFT;
                3 | (dir as u32) << Self::KIND_BITS
                    | o(offset[0]) << s
                    | o(offset[1]) << (s + 2)
                    | o(offset[2]) << (s + 4)
            }
            LinkRule::Inlet => 4,
        }
    }

    /// Whether the modules apply the rule after bounce-back, as an open link.
    pub fn is_open(self) -> bool {
        matches!(
            self,
            LinkRule::AntiBounce { .. } | LinkRule::Shift { .. } | LinkRule::Inlet
        )
    }
}

/// The distinct [`NodeFlags`] values of a slab, with the per-value constants a kernel needs.
///
/// Storing a palette index per node instead of the 8-byte bit field keeps the geometry's share of the
/// memory traffic at 1 byte per node (the 153 B/node roofline of DESIGN §2) while the palette has at
/// most [`BYTE_PALETTE`] entries, and at 2 bytes (154 B/node) up to [`MAX_PALETTE`]; the palette
/// itself is small and stays in cache.
#[derive(Clone, Debug, PartialEq)]
pub struct FlagPalette {
    /// Distinct values; entry 0 is always [`NodeFlags::FLUID`].
    pub flags: Vec<NodeFlags>,
    /// Per entry, per direction: the moving-wall term `6 w_i (c_i · u_w)` (ρ_w = 1), zero where the
    /// direction does not touch a moving wall; for an anti-bounce-back link, the outlet's `δρ_w`.
    pub moving_term: Vec<[f64; Q]>,
    /// Per entry, per direction: how the population arrives.
    pub links: Vec<[LinkRule; Q]>,
    /// Per entry with velocity-inlet links, the inlet's word: its wall-velocity slot in the low
    /// [`NodeFlags::SLOT_BITS`] bits (whose amplitude scales the links each step), then the axes
    /// across which its velocity follows a parabola (bit `SLOT_BITS + a` for axis `a`); 0 otherwise.
    pub inlet: Vec<u32>,
}

impl FlagPalette {
    /// Every entry's per-direction terms with the walls of each slot moving at `walls` (the
    /// geometry's wall-velocity table, lattice units): [`FlagPalette::moving_term`] as the geometry
    /// builds it, so that a module that moves its walls mid-run holds what a run started at those
    /// velocities holds. `None` when `walls` lacks a slot some entry moves with.
    pub fn terms(&self, walls: &[[f64; 3]]) -> Option<Vec<[f64; Q]>> {
        let slots = self
            .flags
            .iter()
            .filter(|f| f.moving_mask() != 0)
            .map(|f| f.slot() + 1)
            .max()
            .unwrap_or(0);
        (walls.len() >= slots).then(|| terms(&self.flags, &self.links, walls))
    }
}

/// The terms of palette entries `flags` with links `links`: the moving-wall term of each moving
/// bounce-back link, the outlet's `δρ_w` on each anti-bounce-back link, zero elsewhere.
pub(crate) fn terms(
    flags: &[NodeFlags],
    links: &[[LinkRule; Q]],
    walls: &[[f64; 3]],
) -> Vec<[f64; Q]> {
    flags
        .iter()
        .zip(links)
        .map(|(&f, rules)| {
            let mut term = moving_term(f, walls);
            for (t, r) in term.iter_mut().zip(rules) {
                if let LinkRule::AntiBounce { drho } = *r {
                    *t = drho;
                }
            }
            term
        })
        .collect()
}

/// The geometry of one slab: a palette index per node, `[z][y][x]`, and the palette.
#[derive(Clone, Debug, PartialEq)]
pub struct SlabFlags {
    pub size: [usize; 3],
    pub index: Vec<u16>,
    pub palette: FlagPalette,
}

impl SlabFlags {
    /// The index as one byte per node, when the palette is small enough for it
    /// ([`BYTE_PALETTE`] entries).
    pub fn byte_index(&self) -> Option<Vec<u8>> {
        (self.palette.flags.len() <= BYTE_PALETTE)
            .then(|| self.index.iter().map(|&k| k as u8).collect())
    }

    /// The bit field of local node (x, y, z).
    pub fn get(&self, x: usize, y: usize, z: usize) -> NodeFlags {
        let i = (z * self.size[1] + y) * self.size[0] + x;
        self.palette.flags[self.index[i] as usize]
    }
}

/// Builds the moving-wall terms of one flag value from the wall-velocity table.
pub(crate) fn moving_term(flags: NodeFlags, walls: &[[f64; 3]]) -> [f64; Q] {
    let mut t = [0.0; Q];
    if flags.moving_mask() == 0 {
        return t;
    }
    let u = walls[flags.slot()];
    for (i, ti) in t.iter_mut().enumerate() {
        if flags.moving(i) {
            let cu = C[i][0] as f64 * u[0] + C[i][1] as f64 * u[1] + C[i][2] as f64 * u[2];
            *ti = 6.0 * W[i] * cu;
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn flag_bits_do_not_interfere(bounce in prop::collection::vec(1usize..19, 0..6), moving in prop::collection::vec(1usize..19, 0..4), slot in 0usize..16) {
            let mut f = NodeFlags::FLUID;
            for &i in &bounce { f = f.with_bounce(i); }
            for &i in &moving { f = f.with_moving(i, slot); }
            prop_assert!(!f.is_solid());
            for i in 0..Q {
                prop_assert_eq!(f.bounces(i), bounce.contains(&i) || moving.contains(&i));
                prop_assert_eq!(f.moving(i), moving.contains(&i));
            }
            if !moving.is_empty() { prop_assert_eq!(f.slot(), slot); }
            prop_assert_eq!(f.bounce_mask() & 1, 0);
            prop_assert_eq!(f.moving_mask() & !f.bounce_mask(), 0);
        }
    }
}
