//! Choosing the compute module for a run: `cpu`, `cuda`, or `auto` (CUDA when a driver and a GPU
//! exist, the CPU module otherwise, said in the run's first line).

use std::sync::Arc;

use anyhow::{bail, Result};
use thelma_compute::cpu::CpuFactory;
use thelma_compute::cuda::{self, CudaFactory};
use thelma_compute::ModelParams;
use thelma_core::compute::ModuleFactory;
use thelma_core::config::{Backend, CaseConfig, DeviceSpec};

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
    // Duplicates and the z-planes per device are checked for every backend by `preflight`.
    Ok(ids)
}

/// CPU "devices" are virtual: a count, or the ids `0..N` in the slab order wanted. The list's
/// duplicates and its length against the z-planes are checked, for every backend, by `preflight`.
fn cpu_devices(case: &CaseConfig) -> Result<Vec<usize>> {
    cpu_device_ids(&case.hardware.devices)
}

/// The CPU devices `spec` names (`all` is one), checked as [`cpu_devices`] says; for `run` and
/// `bench` alike.
pub fn cpu_device_ids(spec: &DeviceSpec) -> Result<Vec<usize>> {
    let count = match spec {
        DeviceSpec::All => 1,
        DeviceSpec::Count(n) => *n,
        DeviceSpec::List(ids) => ids.len(),
    };
    // Checked before the list is made: a count of 10^18 must not become a vector.
    if count > MAX_CPU_DEVICES {
        bail!(UsageError::new(
            "--devices",
            format!("{count} CPU devices: at most {MAX_CPU_DEVICES} (each is a thread pool)")
        ));
    }
    let ids = match spec {
        DeviceSpec::List(ids) => ids.clone(),
        _ => (0..count).collect(),
    };
    if let Some(bad) = ids.iter().find(|&&i| i >= ids.len()) {
        bail!(UsageError::new(
            "--devices",
            format!(
                "CPU device {bad} does not exist: a list of {} CPU devices names 0..{} in slab order",
                ids.len(),
                ids.len() - 1
            )
        ));
    }
    Ok(ids)
}

/// The most CPU devices a run may ask for: each one is a pool of threads sharing the cores.
const MAX_CPU_DEVICES: usize = 1024;
