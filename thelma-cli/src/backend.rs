//! Choosing the compute module for a run: `cpu`, `cuda`, or `auto` (CUDA when a device exists).

use std::sync::Arc;

use anyhow::{bail, Result};
use thelma_compute::cpu::CpuFactory;
use thelma_compute::ModelParams;
use thelma_core::compute::ModuleFactory;
use thelma_core::config::{Backend, CaseConfig};

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
    match hw.backend {
        Backend::Cuda => bail!(UsageError::new(
            "--backend",
            "cuda: the CUDA module is not part of this build yet"
        )),
        Backend::Auto | Backend::Cpu => {
            let note = if hw.backend == Backend::Auto {
                "backend auto: no CUDA device found, using the CPU module".to_string()
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
    }
}

/// CPU "devices" are virtual: a count, or the ids `0..N` in the slab order wanted. The list's
/// duplicates and its length against the z-planes are checked, for every backend, by `preflight`.
fn cpu_devices(case: &CaseConfig) -> Result<Vec<usize>> {
    use thelma_core::config::DeviceSpec;
    let count = match &case.hardware.devices {
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
    let ids = match &case.hardware.devices {
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
