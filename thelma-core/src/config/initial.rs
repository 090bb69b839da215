//! Initial states from the case file's `[initial]` expressions, evaluated node by node in lattice
//! units (the modules start every node at the equilibrium of the state found here).

use exmex::prelude::*;
use serde::{Deserialize, Serialize};

use super::error::{bad, ConfigError};
use super::units::UnitScales;
use crate::physics::MAX_SPEED;

/// A number, or an expression of the node position (`x`, `y`, `z`) and the domain size (`nx`, `ny`,
/// `nz`), with `sin`, `cos`, `exp`, `sqrt`, `PI`, … (the `exmex` grammar).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Expression {
    Number(f64),
    Text(String),
}

/// The initial state at every node, whose populations start at its equilibrium. Without `[units]`
/// positions are node indices and velocities lattice units; with `[units]` positions are metres from
/// the box's corner (node centres at (i + ½)·dx) and velocities m/s. The density is relative to the
/// reference (1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InitialConfig {
    pub density: Expression,
    pub velocity: [Expression; 3],
}

impl Default for InitialConfig {
    fn default() -> Self {
        Self {
            density: Expression::Number(1.0),
            velocity: [
                Expression::Number(0.0),
                Expression::Number(0.0),
                Expression::Number(0.0),
            ],
        }
    }
}

/// The variables an expression may use, in the order they are looked up.
const VARIABLES: [&str; 6] = ["x", "y", "z", "nx", "ny", "nz"];

/// One parsed expression and where each of its variables comes from, or a plain number.
#[derive(Clone, Debug)]
enum Compiled {
    Number(f64),
    Expression {
        flat: Box<FlatEx<f64>>,
        /// For each of the expression's variables (exmex sorts them by name), its index in
        /// [`VARIABLES`].
        slots: Vec<usize>,
    },
}

impl Compiled {
    fn new(e: &Expression, key: &'static str) -> Result<Self, ConfigError> {
        let text = match e {
            Expression::Number(v) => return Ok(Compiled::Number(*v)),
            Expression::Text(t) => t,
        };
        // `bad` escapes a line break in the text (or in the parser's echo of it).
        let flat = FlatEx::<f64>::parse(text).map_err(|err| {
            bad(
                key,
                "--config",
                format!("`{text}` is not an expression: {err}"),
            )
        })?;
        let slots = flat
            .var_names()
            .iter()
            .map(|v| {
                VARIABLES.iter().position(|w| w == v).ok_or_else(|| {
                    bad(
                        key,
                        "--config",
                        format!(
                            "`{text}` uses `{v}`; an initial state may use {}",
                            VARIABLES.join(", ")
                        ),
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Compiled::Expression {
            flat: Box::new(flat),
            slots,
        })
    }

    fn eval(&self, vars: &[f64; 6]) -> f64 {
        match self {
            Compiled::Number(v) => *v,
            Compiled::Expression { flat, slots } => {
                let args: Vec<f64> = slots.iter().map(|&k| vars[k]).collect();
                flat.eval(&args).unwrap_or(f64::NAN)
            }
        }
    }
}

/// A case's initial state, ready to be evaluated at any node.
#[derive(Clone, Debug)]
pub struct InitialState {
    density: Compiled,
    velocity: [Compiled; 3],
    size: [usize; 3],
    /// With physical units: metres per node spacing and lattice velocity per m/s.
    units: Option<(f64, f64)>,
}

impl InitialState {
    /// The state `init` describes on a domain of `size` nodes (`units`: the case's scales, when it
    /// has them). Refuses expressions that do not parse, use unknown variables, or give a
    /// non-finite, non-positive density or a velocity beyond the lattice's range at a corner or the
    /// centre of the domain (every node is checked when a module fills its slab).
    pub fn new(
        init: &InitialConfig,
        size: [usize; 3],
        units: Option<&UnitScales>,
    ) -> Result<Self, ConfigError> {
        let s = Self {
            density: Compiled::new(&init.density, "initial.density")?,
            velocity: [
                Compiled::new(&init.velocity[0], "initial.velocity")?,
                Compiled::new(&init.velocity[1], "initial.velocity")?,
                Compiled::new(&init.velocity[2], "initial.velocity")?,
            ],
            size,
            units: units.map(|u| (u.dx, 1.0 / u.velocity)),
        };
        let [nx, ny, nz] = size;
        for x in [0, nx / 2, nx - 1] {
            for y in [0, ny / 2, ny - 1] {
                for z in [0, nz / 2, nz - 1] {
                    s.check(x, y, z)?;
                }
            }
        }
        Ok(s)
    }

    /// `δρ = ρ − 1` and the velocity (lattice units) at node (x, y, z) of the whole domain.
    pub fn at(&self, x: usize, y: usize, z: usize) -> (f64, [f64; 3]) {
        let [nx, ny, nz] = self.size.map(|n| n as f64);
        let p = [x, y, z].map(|v| v as f64);
        let (pos, ext, to_lattice) = match self.units {
            None => (p, [nx, ny, nz], 1.0),
            Some((dx, per_mps)) => (
                p.map(|v| (v + 0.5) * dx),
                [nx * dx, ny * dx, nz * dx],
                per_mps,
            ),
        };
        let vars = [pos[0], pos[1], pos[2], ext[0], ext[1], ext[2]];
        let rho = self.density.eval(&vars);
        let u = self.velocity.each_ref().map(|e| e.eval(&vars) * to_lattice);
        (rho - 1.0, u)
    }

    /// The state at a node, or why it cannot start a run.
    pub fn check(&self, x: usize, y: usize, z: usize) -> Result<(f64, [f64; 3]), ConfigError> {
        let (drho, u) = self.at(x, y, z);
        let refuse = |message: String| bad("initial", "--config", message);
        if !(drho.is_finite() && drho > -1.0) {
            return Err(refuse(format!(
                "the density at node ({x}, {y}, {z}) is {}, not a finite number > 0",
                drho + 1.0
            )));
        }
        if u.iter().any(|c| !c.is_finite() || c.abs() >= MAX_SPEED) {
            return Err(refuse(format!(
                "the velocity at node ({x}, {y}, {z}) is {u:?} in lattice units; each component must be finite and below {MAX_SPEED}"
            )));
        }
        Ok((drho, u))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CaseConfig, PhysicalUnits};

    fn case(init: InitialConfig) -> CaseConfig {
        let mut c = CaseConfig::default();
        c.domain.size = [8, 6, 4];
        c.initial = Some(init);
        c
    }

    /// A line break in an expression (as a mutated case file had: the parser echoes the text)
    /// stays escaped in the refusal's one line.
    #[test]
    fn a_broken_expression_is_refused_in_one_line() {
        let init = InitialConfig {
            density: Expression::Text("1 + (z - 0-o=\ny * nz)".into()),
            ..InitialConfig::default()
        };
        let e = case(init).initial_state().expect_err("not an expression");
        assert_eq!(e.key, "initial.density");
        assert!(!e.message.contains('\n'), "{}", e.message);
        assert!(e.message.contains("is not an expression"), "{}", e.message);
    }

    #[test]
    fn expressions_are_evaluated_at_nodes_in_lattice_units() {
        let init = InitialConfig {
            density: Expression::Text("1 + 0.01*z/nz".into()),
            velocity: [
                Expression::Text("0.05*sin(2*PI*x/nx)".into()),
                Expression::Number(0.01),
                Expression::Text("0.001*y".into()),
            ],
        };
        let s = case(init).initial_state().unwrap().unwrap();
        let (drho, u) = s.at(2, 3, 2);
        assert!((drho - 0.005).abs() < 1e-15);
        assert!((u[0] - 0.05).abs() < 1e-15, "{u:?}");
        assert_eq!(u[1], 0.01);
        assert!((u[2] - 0.003).abs() < 1e-15);
    }

    #[test]
    fn with_units_positions_are_metres_and_velocities_metres_per_second() {
        let mut c = case(InitialConfig {
            density: Expression::Number(1.0),
            velocity: [
                Expression::Text("x".into()),
                Expression::Number(0.0),
                Expression::Number(0.0),
            ],
        });
        c.units = Some(PhysicalUnits {
            length: 0.8,
            velocity: 1.0,
            viscosity: 1e-3,
            density: None,
        });
        let s = c.initial_state().unwrap().unwrap();
        let sc = c.unit_scales().unwrap();
        // Node 3's centre lies at 3.5 dx = 0.35 m; u = 0.35 m/s.
        let (_, u) = s.at(3, 0, 0);
        assert!((u[0] - 0.35 / sc.velocity).abs() < 1e-15);
    }

    #[test]
    fn bad_expressions_are_refused_with_their_key() {
        let bad = |init: InitialConfig| case(init).initial_state().unwrap_err();
        let e = bad(InitialConfig {
            density: Expression::Text("1 + q".into()),
            ..InitialConfig::default()
        });
        assert_eq!(e.key, "initial.density");
        assert!(e.message.contains("`q`"), "{}", e.message);
        let e = bad(InitialConfig {
            velocity: [
                Expression::Text("sin(".into()),
                Expression::Number(0.0),
                Expression::Number(0.0),
            ],
            ..InitialConfig::default()
        });
        assert_eq!(e.key, "initial.velocity");
        let e = bad(InitialConfig {
            density: Expression::Text("1 - x".into()),
            ..InitialConfig::default()
        });
        assert!(e.message.contains("density"), "{}", e.message);
        let e = bad(InitialConfig {
            velocity: [
                Expression::Number(0.5),
                Expression::Number(0.0),
                Expression::Number(0.0),
            ],
            ..InitialConfig::default()
        });
        assert!(e.message.contains("velocity"), "{}", e.message);
    }
}
