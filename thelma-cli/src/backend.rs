//! Choosing the compute module for a run through `thelma-compute`'s registry: a module by name, or
//! `auto` (the first registered module that finds a device, said in the run's first line).

use std::sync::Arc;

use anyhow::Result;
use thelma_compute::{BackendError, Choice, ModelParams, Tuning};
use thelma_core::{BackendName, CaseConfig, DeviceSpec, ModuleFactory};

use crate::error::UsageError;

/// The factory serving a run, the devices in slab order, and what was decided (for the user).
pub struct Selection {
    pub factory: Arc<dyn ModuleFactory>,
    pub devices: Vec<usize>,
    /// Whether the modules keep their lattices in host memory (the host's memory is then checked).
    pub host: bool,
    pub note: String,
}

/// Picks the backend the case names and resolves its device list.
pub fn select(case: &CaseConfig, params: ModelParams) -> Result<Selection> {
    let hw = &case.hardware;
    let choice = choose(&hw.backend)?;
    let devices = resolve(&choice, &hw.devices)?;
    let tuning = Tuning {
        threads: hw.threads,
        ..Tuning::default()
    };
    let factory = choice
        .factory(params, devices.len(), &tuning)
        .map_err(|e| UsageError::new("--backend", e.to_string()))?;
    Ok(Selection {
        factory,
        devices,
        host: choice.backend.host,
        note: choice.note,
    })
}

/// The registry's choice for `name`; a name that is unknown, or whose devices are missing, is bad
/// input of `--backend`.
pub fn choose(name: &BackendName) -> Result<Choice> {
    thelma_compute::choose(name).map_err(|e| {
        let e = match e {
            // `hardware.backend` in a case file reaches here unchecked by the argument parser.
            e @ BackendError::Unknown { .. } => e.to_string(),
            BackendError::Unavailable { name, reason } => format!("{name}: {reason}"),
        };
        UsageError::new("--backend", e).into()
    })
}

/// The devices `spec` names on the chosen backend, in slab order. Duplicates and the planes per
/// device are checked, for every backend, by `preflight`.
pub fn resolve(choice: &Choice, spec: &DeviceSpec) -> Result<Vec<usize>> {
    Ok(choice
        .resolve(spec)
        .map_err(|e| UsageError::new("--devices", e.to_string()))?)
}
