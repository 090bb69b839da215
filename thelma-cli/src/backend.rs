//! Choosing the compute module for a run through `thelma-compute`'s registry: a module by name, or
//! `auto` (the first registered module that finds a device, said in the run's first line).

use std::sync::Arc;

use anyhow::Result;
use thelma_compute::{BackendError, Choice, ModelParams, Tuning};
use thelma_core::{
    plan_transports, BackendName, CaseConfig, DeviceSpec, Domain, Layout, ModuleFactory,
};

use crate::cluster::Job;
use crate::error::UsageError;
use crate::layout::LayoutFile;

/// The factory serving a run, this process's devices in slab order, the layout of every slab, and
/// what was decided (for the user).
pub struct Selection {
    pub factory: Arc<dyn ModuleFactory>,
    pub devices: Vec<usize>,
    pub layout: Layout,
    /// This process's rank (0 outside a cluster job).
    pub rank: usize,
    /// Whether the modules keep their lattices in host memory (the host's memory is then checked).
    pub host: bool,
    pub note: String,
}

/// Refuses, before anything is allocated or written, a transport that cannot join two of the
/// slabs of rank `rank` (0 outside a cluster job) (`--transport device` across GPUs, `peer` without peer access, a GPU transport on
/// the CPU). A device list the partition refuses is left to `preflight`, which names it.
pub fn check_transport(factory: &dyn ModuleFactory, layout: &Layout, rank: usize) -> Result<()> {
    plan_transports(
        &layout.slabs,
        &layout.devices,
        &layout.ranks,
        rank,
        |r, w| factory.transport(r, w),
    )
    .map_err(|e| {
        UsageError::new(
            "--transport",
            format!("{} cannot serve this run: {}", e.asked, e.why),
        )
    })?;
    Ok(())
}

/// Picks the backend the case names and lays the domain out: the layout file's slabs, or an
/// even split over the device list (on each rank of a cluster job `job`); this process's
/// devices are those of its slabs.
pub fn select(case: &CaseConfig, params: ModelParams, job: Option<&Job>) -> Result<Selection> {
    let hw = &case.hardware;
    let choice = choose(&hw.backend)?;
    let domain = Domain::new(case.domain.size, case.domain.periodic);
    let (ranks, rank) = job.map_or((1, 0), |j| (j.size(), j.rank()));
    let layout = match &hw.layout {
        Some(file) => LayoutFile::read(file)?.layout(domain)?,
        None => {
            let devices = resolve(&choice, &hw.devices)?;
            crate::preflight::check_devices(case, &devices)?;
            Layout::spread(domain, ranks, &devices)
                .map_err(|e| UsageError::new("--devices", e.to_string()))?
        }
    };
    if layout.rank_count() != ranks {
        let named = layout.rank_count();
        return Err(UsageError::new(
            "--layout",
            format!(
                "the layout names {named} rank(s), and {ranks} process(es) run (mpirun -np {named})"
            ),
        )
        .into());
    }
    let devices: Vec<usize> = layout
        .local(rank)
        .iter()
        .map(|&s| layout.devices[s])
        .collect();
    if let Some(d) = devices
        .iter()
        .enumerate()
        .find_map(|(k, d)| devices[..k].contains(d).then_some(d))
    {
        return Err(UsageError::new(
            "--layout",
            format!("rank {rank} runs two subdomains on device {d}: one per device"),
        )
        .into());
    }
    if hw.layout.is_some() && !choice.backend.host {
        // The ids must name GPUs of this host.
        let known = resolve(&choice, &DeviceSpec::All)?;
        if let Some(d) = devices.iter().find(|d| !known.contains(d)) {
            return Err(UsageError::new(
                "--layout",
                format!(
                    "device {d} of rank {rank}: the {} backend has devices {known:?}",
                    choice.backend.name
                ),
            )
            .into());
        }
    }
    let tuning = Tuning {
        threads: hw.threads,
        transport: hw.transport,
        ..Tuning::default()
    };
    let factory = choice
        .factory(params, devices.len(), &tuning)
        .map_err(|e| UsageError::new("--backend", e.to_string()))?;
    check_transport(factory.as_ref(), &layout, rank)?;
    Ok(Selection {
        factory,
        devices,
        layout,
        rank,
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
