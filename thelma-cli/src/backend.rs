//! Choosing the compute module for a run: `cpu`, `cuda`, or `auto` (CUDA when a driver and a GPU
//! exist, the CPU module otherwise, said in the run's first line).

use std::sync::Arc;

use anyhow::{bail, Result};
use thelma_compute::cpu::CpuFactory;
use thelma_compute::cuda::{self, CudaFactory};
use thelma_compute::ModelParams;
use thelma_core::compute::{slab_bytes, ModuleFactory};
use thelma_core::config::{Backend, CaseConfig, DeviceSpec};
use thelma_core::domain::{Domain, SlabSpec};

use crate::app::UsageError;

/// The factory serving a run, the devices in slab order, and what was decided (for the user).
pub struct Selection {
    pub factory: Arc<dyn ModuleFactory>,
    pub devices: Vec<usize>,
    pub note: String,
}

/// Picks the backend and resolves the device list.
pub fn select(case: &CaseConfig, params: ModelParams) -> Result<Selection> {
    let hw = &case.hardware;
    let cuda_count = match hw.backend {
        Backend::Cpu => None,
        Backend::Cuda => match cuda::device_count() {
            Ok(n) => Some(n),
            Err(e) => bail!(UsageError::new("--backend", format!("cuda: {e}"))),
        },
        Backend::Auto => cuda::device_count().ok(),
    };
    if let Some(count) = cuda_count {
        let devices = cuda_devices(case, count)?;
        let factory = CudaFactory::new(params)
            .map_err(|e| UsageError::new("--backend", format!("cuda: {e}")))?;
        check_memory(case, &factory, &devices)?;
        let note = format!(
            "backend {}cuda ({count} GPU{} present)",
            if hw.backend == Backend::Auto {
                "auto: "
            } else {
                ""
            },
            if count == 1 { "" } else { "s" }
        );
        return Ok(Selection {
            factory: Arc::new(factory),
            devices,
            note,
        });
    }
    let note = if hw.backend == Backend::Auto {
        let why = cuda::device_count()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        format!("backend auto: {why}; using the CPU module")
    } else {
        "backend cpu".to_string()
    };
    let devices = cpu_devices(case)?;
    let factory = Arc::new(CpuFactory::new(params, devices.len(), hw.threads));
    Ok(Selection {
        factory,
        devices,
        note,
    })
}

/// GPU ordinals in slab order, checked against the GPUs present and the planes to share.
pub fn cuda_devices(case: &CaseConfig, available: usize) -> Result<Vec<usize>> {
    let ids = case
        .hardware
        .devices
        .resolve(available)
        .map_err(|e| UsageError::new("--devices", e))?;
    check_planes(case, ids.len())?;
    Ok(ids)
}

/// Refuses, before anything is allocated, a lattice whose slabs do not fit in their GPUs' free memory.
fn check_memory(case: &CaseConfig, factory: &dyn ModuleFactory, devices: &[usize]) -> Result<()> {
    let domain = Domain::new(case.domain.size, case.domain.periodic);
    let slabs = SlabSpec::split(domain, devices.len())
        .map_err(|e| UsageError::new("--devices", e.to_string()))?;
    for (slab, &d) in slabs.iter().zip(devices) {
        let need = slab_bytes(slab, case.numerics.precision);
        if let Some(m) = factory.device_memory(d) {
            if need > m.free {
                bail!(UsageError::new(
                    "--size",
                    format!(
                        "slab {} needs {:.1} GiB on cuda:{d}, {:.1} GiB free (largest cube per GPU: {}³)",
                        slab.index,
                        need as f64 / (1u64 << 30) as f64,
                        m.free as f64 / (1u64 << 30) as f64,
                        crate::devices::largest_cube(m.free, case.numerics.precision)
                    )
                ));
            }
        }
    }
    Ok(())
}

fn check_planes(case: &CaseConfig, devices: usize) -> Result<()> {
    let planes = case.domain.size[2];
    if devices > planes {
        bail!(UsageError::new(
            "--devices",
            format!(
                "{devices} devices for {planes} z-planes: each device needs at least one plane"
            )
        ));
    }
    Ok(())
}

/// CPU "devices" are virtual: a count, or a list of distinct ids naming them in slab order.
fn cpu_devices(case: &CaseConfig) -> Result<Vec<usize>> {
    let ids = match &case.hardware.devices {
        DeviceSpec::All => vec![0],
        DeviceSpec::Count(n) => (0..*n).collect(),
        DeviceSpec::List(ids) => ids.clone(),
    };
    check_planes(case, ids.len())?;
    Ok(ids)
}
