//! The divergence watchdog: every few steps a cheap look at the populations (the modules' `health`:
//! the first non-finite node, the density range), and on trouble the step, the node and why.

use std::fmt;
use std::path::PathBuf;

use thelma_core::{num, Fields, Health};
use thelma_core::{Runtime, RuntimeError};

/// Why the watchdog stopped a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reason {
    /// A population (hence ρ or u) is NaN or infinite.
    NonFinite,
    /// The density left the configured band.
    Density { rho: f64, bounds: [f64; 2] },
}

/// The run diverged: the step, the first bad node, why, and which healthy state the outputs hold.
#[derive(Debug)]
pub struct Diverged {
    pub step: u64,
    pub node: [usize; 3],
    pub reason: Reason,
    /// The step of the healthy state written to `outputs`, if it could be written.
    pub last_good: Option<u64>,
    pub outputs: PathBuf,
}

impl fmt::Display for Diverged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [x, y, z] = self.node;
        write!(f, "the run diverged by step {}: ", self.step)?;
        match self.reason {
            Reason::NonFinite => write!(f, "non-finite populations at node ({x}, {y}, {z})")?,
            Reason::Density { rho, bounds } => write!(
                f,
                "density {} at node ({x}, {y}, {z}) outside [{}, {}]",
                num(rho),
                num(bounds[0]),
                num(bounds[1])
            )?,
        }
        if let Some(s) = self.last_good {
            write!(
                f,
                "; {} holds the last healthy state (step {s})",
                self.outputs.display()
            )?;
        }
        write!(
            f,
            "; lower the Reynolds number or the lid speed, or refine the grid"
        )
    }
}
impl std::error::Error for Diverged {}

/// Trouble found: the node (when known) and why.
pub type Finding = (Option<[usize; 3]>, Reason);

/// What the slabs' health reports say, in slab order: the first non-finite node, or else a density
/// outside `bounds` (its node is not known from the reports).
pub fn judge(health: &[Health], bounds: [f64; 2]) -> Option<Finding> {
    if let Some(node) = health.iter().find_map(|h| h.non_finite) {
        return Some((Some(node), Reason::NonFinite));
    }
    // A slab without fluid nodes reports an empty range (min > max): nothing to judge there.
    for h in health.iter().filter(|h| h.rho_min <= h.rho_max) {
        for rho in [h.rho_min, h.rho_max] {
            if rho < bounds[0] || rho > bounds[1] {
                return Some((None, Reason::Density { rho, bounds }));
            }
        }
    }
    None
}

/// The first fluid node of `f` whose values are not finite or whose density is outside `bounds`.
pub fn judge_fields(f: &Fields, bounds: [f64; 2]) -> Option<([usize; 3], Reason)> {
    let [nx, ny, _] = f.size;
    let at = |p: usize| [p % nx, (p / nx) % ny, f.z0 + p / (nx * ny)];
    let mut density = None;
    for p in 0..f.rho.len() {
        if f.solid[p] {
            continue;
        }
        let rho = f.rho[p];
        if !(rho.is_finite() && f.ux[p].is_finite() && f.uy[p].is_finite() && f.uz[p].is_finite()) {
            return Some((at(p), Reason::NonFinite));
        }
        if density.is_none() && (rho < bounds[0] || rho > bounds[1]) {
            density = Some((at(p), Reason::Density { rho, bounds }));
        }
    }
    density
}

/// Checks the runtime's current state. Where the health reports show a density out of bounds without
/// its node, the fields are read once to find it (only on trouble, so the common path stays cheap).
pub fn inspect(
    rt: &mut Runtime,
    bounds: [f64; 2],
) -> Result<Option<([usize; 3], Reason)>, RuntimeError> {
    match judge(&rt.health()?, bounds) {
        None => Ok(None),
        Some((Some(node), reason)) => Ok(Some((node, reason))),
        // The fields locate the node; should they disagree with the reports (a state that changed
        // in between cannot, as nothing steps), trust the fields rather than invent a node.
        Some((None, _)) => Ok(judge_fields(&rt.fields()?, bounds)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn findings_name_the_node_and_the_reason() {
        let ok = Health {
            non_finite: None,
            rho_min: 0.98,
            rho_max: 1.02,
        };
        let nan = Health {
            non_finite: Some([3, 4, 9]),
            ..ok
        };
        let dense = Health { rho_max: 7.5, ..ok };
        // An all-solid slab reports an empty range and is not a divergence.
        let empty = Health {
            non_finite: None,
            rho_min: f64::INFINITY,
            rho_max: f64::NEG_INFINITY,
        };
        assert_eq!(judge(&[ok, empty], [0.2, 5.0]), None);
        let b = [0.2, 5.0];
        assert_eq!(judge(&[ok, ok], b), None);
        assert_eq!(
            judge(&[dense, nan], b),
            Some((Some([3, 4, 9]), Reason::NonFinite))
        );
        assert_eq!(
            judge(&[ok, dense], b),
            Some((
                None,
                Reason::Density {
                    rho: 7.5,
                    bounds: b
                }
            ))
        );

        let mut f = Fields::zeros([4, 3, 2], 10);
        f.rho.fill(1.0);
        assert_eq!(judge_fields(&f, b), None);
        let p = f.idx(1, 2, 1);
        f.rho[p] = 0.1;
        assert_eq!(
            judge_fields(&f, b),
            Some((
                [1, 2, 11],
                Reason::Density {
                    rho: 0.1,
                    bounds: b
                }
            ))
        );
        // A non-finite node wins over an earlier density excursion; solid nodes never count.
        let q = f.idx(3, 2, 1);
        f.uy[q] = f64::NAN;
        assert_eq!(judge_fields(&f, b), Some(([3, 2, 11], Reason::NonFinite)));
        f.solid[q] = true;
        f.solid[p] = true;
        assert_eq!(judge_fields(&f, b), None);
    }

    #[test]
    fn the_message_is_one_line_with_step_node_and_last_good_state() {
        let d = Diverged {
            step: 1200,
            node: [5, 6, 7],
            reason: Reason::NonFinite,
            last_good: Some(1100),
            outputs: PathBuf::from("out"),
        };
        let m = d.to_string();
        assert!(m.contains("step 1200") && m.contains("(5, 6, 7)") && m.contains("step 1100"));
        assert_eq!(m.lines().count(), 1);
    }
}
