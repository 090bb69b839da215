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

/// CPU "devices" are virtual: a count, or a list of distinct ids naming them in slab order.
fn cpu_devices(case: &CaseConfig) -> Result<Vec<usize>> {
    use thelma_core::config::DeviceSpec;
    let ids = match &case.hardware.devices {
        DeviceSpec::All => vec![0],
        DeviceSpec::Count(n) => (0..*n).collect(),
        DeviceSpec::List(ids) => ids.clone(),
    };
    let planes = case.domain.size[2];
    if ids.len() > planes {
        bail!(UsageError::new(
            "--devices",
            format!(
                "{} devices for {planes} z-planes: each device needs at least one plane",
                ids.len()
            )
        ));
    }
    Ok(ids)
}
