//! Stencils as values: the velocity sets a lattice can use, each with its weights, opposites and the
//! populations that cross a slab's faces. Sizes, interfaces, memory estimates, checkpoints and the
//! kernel prelude are derived from a [`Stencil`], not from global constants.

use super::d3q19 as lattice;
use super::error::PhysicsError;

/// Lattice speeds at or above this are refused wherever a case sets one (a lid, a wall, an initial
/// state): Mach = U√3 ≥ 0.69 is far outside the weakly compressible range the scheme models.
pub const MAX_SPEED: f64 = 0.4;

/// A velocity set `DdQq`: the discrete velocities in the one order every module and kernel uses.
///
/// Invariants (checked by [`Stencil::check`], and by the tests for every stencil here): direction 0
/// is the rest velocity; every odd `i` has its opposite at `i + 1`; the weights sum to 1 and their
/// second moment is `cs2 · δ`; `up` lists every direction with `c_z = +1` and `down[k]` is the
/// opposite of `up[k]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stencil {
    /// `D3Q19`, `D3Q7`.
    pub name: &'static str,
    pub c: &'static [[i32; 3]],
    pub w: &'static [f64],
    pub opp: &'static [usize],
    /// Directions with `c_z = +1`, in interface slot order: what crosses a slab's top face.
    pub up: &'static [usize],
    /// Directions with `c_z = −1`, `down[k] = opp[up[k]]`: what crosses a slab's bottom face.
    pub down: &'static [usize],
    /// The squared lattice speed of sound.
    pub cs2: f64,
}

impl Stencil {
    /// Number of discrete velocities.
    pub const fn q(&self) -> usize {
        self.c.len()
    }
    /// Populations that cross one face of a slab in one direction.
    pub const fn crossing(&self) -> usize {
        self.up.len()
    }
    /// Direction `i`'s slot among the crossing populations of its face, if it crosses one.
    pub fn crossing_slot(&self, i: usize) -> Option<usize> {
        self.up
            .iter()
            .position(|&u| u == i)
            .or_else(|| self.down.iter().position(|&d| d == i))
    }
    /// Checks the invariants listed on the type.
    pub fn check(&self) -> Result<(), PhysicsError> {
        let bad = |what: String| PhysicsError::Stencil {
            stencil: self.name,
            what,
        };
        let q = self.q();
        if self.w.len() != q || self.opp.len() != q || self.c[0] != [0, 0, 0] {
            return Err(bad("table sizes or rest velocity".into()));
        }
        for i in 1..q {
            let o = if i % 2 == 1 { i + 1 } else { i - 1 };
            if self.opp[i] != o || (0..3).any(|a| self.c[o][a] != -self.c[i][a]) {
                return Err(bad(format!("direction {i}'s opposite is not next to it")));
            }
        }
        let sum: f64 = self.w.iter().sum();
        if (sum - 1.0).abs() > 1e-14 {
            return Err(bad(format!("weights sum to {sum}")));
        }
        for a in 0..3 {
            for b in 0..3 {
                let m: f64 = (0..q)
                    .map(|i| self.w[i] * (self.c[i][a] * self.c[i][b]) as f64)
                    .sum();
                let want = if a == b { self.cs2 } else { 0.0 };
                if (m - want).abs() > 1e-14 {
                    return Err(bad(format!("second moment {a}{b} = {m}")));
                }
            }
        }
        for i in 0..q {
            if self.up.contains(&i) != (self.c[i][2] == 1)
                || self.down.contains(&i) != (self.c[i][2] == -1)
            {
                return Err(bad(format!("crossing sets at direction {i}")));
            }
        }
        if self.up.len() != self.down.len()
            || self
                .up
                .iter()
                .zip(self.down)
                .any(|(&u, &d)| self.opp[u] != d)
        {
            return Err(bad("down[k] must be the opposite of up[k]".into()));
        }
        Ok(())
    }
}

/// The flow lattice: 19 velocities (rest, 6 faces, 12 edges).
pub const D3Q19: Stencil = Stencil {
    name: "D3Q19",
    c: &lattice::C,
    w: &lattice::W,
    opp: &lattice::OPP,
    up: &lattice::UP,
    down: &lattice::DOWN,
    cs2: lattice::CS2,
};

const D3Q7_C: [[i32; 3]; 7] = [
    [0, 0, 0],
    [1, 0, 0],
    [-1, 0, 0],
    [0, 1, 0],
    [0, -1, 0],
    [0, 0, 1],
    [0, 0, -1],
];
const D3Q7_W: [f64; 7] = [
    1.0 / 4.0,
    1.0 / 8.0,
    1.0 / 8.0,
    1.0 / 8.0,
    1.0 / 8.0,
    1.0 / 8.0,
    1.0 / 8.0,
];

/// A scalar (advection–diffusion) lattice: rest and the 6 faces, `cs² = 1/4` (rest weight 1/4).
pub const D3Q7: Stencil = Stencil {
    name: "D3Q7",
    c: &D3Q7_C,
    w: &D3Q7_W,
    opp: &[0, 2, 1, 4, 3, 6, 5],
    up: &[5],
    down: &[6],
    cs2: 0.25,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stencil_keeps_its_invariants() {
        for s in [D3Q19, D3Q7] {
            s.check().unwrap();
        }
        assert_eq!((D3Q19.q(), D3Q19.crossing()), (19, 5));
        assert_eq!((D3Q7.q(), D3Q7.crossing()), (7, 1));
        assert_eq!(D3Q19.crossing_slot(lattice::DOWN[3]), Some(3));
        assert_eq!(D3Q19.crossing_slot(1), None);
    }

    #[test]
    fn a_broken_table_is_caught() {
        let mut s = D3Q7;
        s.w = &[0.25, 0.125, 0.125, 0.125, 0.125, 0.125, 0.12];
        assert!(s.check().is_err());
        let mut s = D3Q7;
        s.down = &[5];
        assert!(s.check().is_err());
    }
}
