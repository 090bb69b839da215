//! The model parameters every compute module receives, independent of the device.

use std::sync::Arc;

use thelma_core::physics::{FlowModel, Sponges, ThermalSetup};
use thelma_core::{CaseConfig, InitialState, InletSchedule, LatticeParams, Precision, Streaming};
use thelma_geometry::Geometry;

/// What a compute module needs to know about the model, shared by all slabs of a run.
#[derive(Clone, Debug)]
pub struct ModelParams {
    pub geometry: Arc<Geometry>,
    /// The flow lattice's collision: operator, rates, eddy viscosity, body force.
    pub model: FlowModel,
    pub precision: Precision,
    /// Two lattices, or one streamed in place.
    pub streaming: Streaming,
    /// The initial state, when the case gives one (otherwise every node starts at rest, ρ = 1).
    pub initial: Option<Arc<InitialState>>,
    /// The amplitude of each wall-velocity slot over time (velocity inlets' `amplitude`).
    pub inlets: Arc<InletSchedule>,
    /// The temperature lattice coupled to the flow, when the case has one.
    pub thermal: Option<ThermalSetup>,
    /// Whether the held temperatures may change between steps (a run served live, whose page
    /// steers them): the CUDA module then reads them from constant memory instead of compiling them
    /// into its kernels, which costs the held links a little (PERFORMANCE.md). `false` from
    /// [`ModelParams::new`].
    pub steered_temperatures: bool,
    /// The sponge layers of the case's pressure outlets (empty without one).
    pub sponges: Sponges,
    /// Whether the case has immersed bodies (a module compiles their kernels only then).
    pub immersed: bool,
    /// Whether the slabs step overlapped in a cluster job ([`ComputeModule::step_overlapped`]):
    /// the CUDA module then compiles step kernels that run a part of the planes (its plain ones,
    /// without, are faster in 16-bit storage: PERFORMANCE.md) and runs the faces beside the
    /// interior. `false` from [`ModelParams::new`]; a module without it steps whole steps there.
    ///
    /// [`ComputeModule::step_overlapped`]: thelma_core::ComputeModule::step_overlapped
    pub overlapped_steps: bool,
}

impl ModelParams {
    /// The parameters of a case that [`CaseConfig::validate`] accepted (`lattice` is what it
    /// returned).
    pub fn new(case: &CaseConfig, lattice: &LatticeParams, geometry: Arc<Geometry>) -> Self {
        Self {
            geometry,
            model: case.flow_model(lattice),
            precision: case.numerics.precision,
            streaming: case.numerics.streaming,
            initial: case
                .initial_state()
                .expect("the case was validated")
                .map(Arc::new),
            inlets: Arc::new(case.inlet_schedule().expect("the case was validated")),
            thermal: case.thermal_setup(lattice),
            steered_temperatures: false,
            sponges: case.sponges(),
            immersed: case.has_immersed_bodies(),
            overlapped_steps: false,
        }
    }
}

/// Refuses a temperature lattice whose store scale does not keep its populations within what
/// `precision` stores: in 16 bits the scale must be a power of two with the setup's reach below
/// `ThermalSetup::held_bound`, `2 / scale` (`ThermalSetup::store_scale_for` puts it below
/// `1 / (4 scale)`); stored as computed, 1.
pub(crate) fn check_store_scale(
    setup: &ThermalSetup,
    precision: Precision,
) -> Result<(), thelma_core::ComputeError> {
    let s = setup.store_scale;
    let power_of_two = s.is_finite() && s > 0.0 && s.log2().fract() == 0.0;
    let fits = if precision.is_16_bit() {
        power_of_two && setup.reach() < setup.held_bound(precision)
    } else {
        s == 1.0
    };
    if fits {
        Ok(())
    } else {
        Err(thelma_core::ComputeError::Invalid(format!(
            "the temperature lattice's store scale {s} does not hold its reach |θ| {} in {} storage",
            setup.reach(),
            precision.name()
        )))
    }
}

/// Refuses a held θ table (`ThermalSetup::held_table`'s layout) with an entry of |θ| at or beyond
/// what `precision` stores under the setup's store scale (`ThermalSetup::held_bound`).
pub(crate) fn check_held(
    setup: &ThermalSetup,
    table: &[f64],
    precision: Precision,
) -> Result<(), thelma_core::ComputeError> {
    let bound = setup.held_bound(precision);
    let inside = |t: f64| t.abs().partial_cmp(&bound) == Some(std::cmp::Ordering::Less);
    match table.iter().find(|t| !inside(**t)) {
        Some(t) => Err(thelma_core::ComputeError::Invalid(format!(
            "held θ {t} is beyond what {} storage holds under this case's scale (|θ| < {bound})",
            precision.name()
        ))),
        None => Ok(()),
    }
}
