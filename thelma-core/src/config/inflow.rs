//! Inlet velocities over time: each velocity inlet's `amplitude`, the factor on its `velocity` at
//! every step, evaluated on the host and handed to the modules per step (so a restart at step `t`
//! sees the same factors as the run it continues).

use exmex::prelude::*;

use super::error::{bad, ConfigError};
use super::initial::Expression;

/// Most wall-velocity slots a geometry has (`thelma_geometry::NodeFlags::SLOT_BITS` = 4 bits).
pub const WALL_SLOTS: usize = 16;

/// A parsed amplitude.
#[derive(Clone, Debug)]
enum Amplitude {
    Constant(f64),
    /// An expression whose only variable is `t`.
    Expression(Box<FlatEx<f64>>),
}

impl Amplitude {
    fn parse(e: &Expression, face: &str) -> Result<Self, ConfigError> {
        let text = match e {
            Expression::Number(v) => return Ok(Amplitude::Constant(*v)),
            Expression::Text(t) => t,
        };
        let refuse = |m: String| {
            bad(
                "boundary",
                "--config",
                format!("face {face}: amplitude {m}"),
            )
        };
        let flat = FlatEx::<f64>::parse(text).map_err(|e| refuse(format!("`{text}`: {e}")))?;
        if let Some(v) = flat.var_names().iter().find(|v| *v != "t") {
            return Err(refuse(format!(
                "`{text}` uses `{v}`; an amplitude is a function of `t` only"
            )));
        }
        Ok(Amplitude::Expression(Box::new(flat)))
    }

    fn at(&self, t: f64) -> f64 {
        match self {
            Amplitude::Constant(v) => *v,
            Amplitude::Expression(f) if f.var_names().is_empty() => f.eval(&[]).unwrap_or(f64::NAN),
            Amplitude::Expression(f) => f.eval(&[t]).unwrap_or(f64::NAN),
        }
    }
}

/// The amplitude of every wall-velocity slot (1 for walls and for inlets without one), in the
/// slots' order ([`CaseConfig::moving_walls`](super::CaseConfig::moving_walls)).
#[derive(Clone, Debug)]
pub struct InletSchedule {
    slots: Vec<Amplitude>,
    /// Seconds per step with `[units]` (then `t` is in seconds), otherwise 1 (`t` in steps).
    seconds_per_step: f64,
}

impl InletSchedule {
    /// Parses the amplitude of each slot: `(face name, amplitude)` in slot order.
    pub(super) fn new(
        slots: &[(&str, Option<&Expression>)],
        seconds_per_step: f64,
    ) -> Result<Self, ConfigError> {
        let slots = slots
            .iter()
            .map(|(face, a)| a.map_or(Ok(Amplitude::Constant(1.0)), |e| Amplitude::parse(e, face)))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            slots,
            seconds_per_step,
        })
    }

    /// Every amplitude 1 at all times.
    pub fn constant_one() -> Self {
        Self {
            slots: Vec::new(),
            seconds_per_step: 1.0,
        }
    }

    /// Whether every slot's amplitude is the constant 1 (the modules may then skip it).
    pub fn is_constant_one(&self) -> bool {
        self.slots
            .iter()
            .all(|a| matches!(a, Amplitude::Constant(v) if *v == 1.0))
    }

    /// The amplitude of slot `slot` at step `step`.
    pub fn amplitude(&self, slot: usize, step: u64) -> f64 {
        self.slots
            .get(slot)
            .map_or(1.0, |a| a.at(step as f64 * self.seconds_per_step))
    }

    /// Every slot's amplitude at step `step` (1 beyond the geometry's slots).
    pub fn amplitudes(&self, step: u64) -> [f64; WALL_SLOTS] {
        std::array::from_fn(|s| self.amplitude(s, step))
    }
}
