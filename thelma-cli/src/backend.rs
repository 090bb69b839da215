//! Choosing the compute module for a run through `thelma-compute`'s registry: a module by name, or
//! `auto` (the first registered module that finds a device, said in the run's first line).

use std::sync::Arc;

use anyhow::Result;
use thelma_compute::{BackendError, Choice, ModelParams, Tuning};
use thelma_core::{
    plan_transports, BackendName, CaseConfig, DeviceSpec, Domain, ModuleFactory, SlabSpec,
};

use crate::error::UsageError;

/// The factory serving a run, the devices in slab order, and what was decided (for the user).
pub struct Selection {
    pub factory: Arc<dyn ModuleFactory>,
    pub devices: Vec<usize>,
    /// Whether the modules keep their lattices in host memory (the host's memory is then checked).
    pub host: bool,
    pub note: String,
}

/// Refuses, before anything is allocated or written, a transport that cannot join two of the
/// run's slabs (`--transport device` across GPUs, `peer` without peer access, a GPU transport on
/// the CPU). A device list the partition refuses is left to `preflight`, which names it.
pub fn check_transport(
    factory: &dyn ModuleFactory,
    case: &CaseConfig,
    devices: &[usize],
) -> Result<()> {
    let domain = Domain::new(case.domain.size, case.domain.periodic);
    let Ok(slabs) = SlabSpec::split(domain, devices.len()) else {
        return Ok(());
    };
    plan_transports(&slabs, devices, |r, w| factory.transport(r, w)).map_err(|e| {
        UsageError::new(
            "--transport",
            format!("{} cannot serve this run: {}", e.asked, e.why),
        )
    })?;
    Ok(())
}

/// Picks the backend the case names and resolves its device list.
pub fn select(case: &CaseConfig, params: ModelParams) -> Result<Selection> {
    let hw = &case.hardware;
    let choice = choose(&hw.backend)?;
    let devices = resolve(&choice, &hw.devices)?;
    let tuning = Tuning {
        threads: hw.threads,
        transport: hw.transport,
        ..Tuning::default()
    };
    let factory = choice
        .factory(params, devices.len(), &tuning)
        .map_err(|e| UsageError::new("--backend", e.to_string()))?;
    check_transport(factory.as_ref(), case, &devices)?;
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
