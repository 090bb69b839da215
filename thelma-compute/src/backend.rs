//! The registry of compute modules. thelma-core names none of them: a case asks for one by name
//! (`hardware.backend`, `--backend`), and [`BACKENDS`] says which exist, in the order `auto` tries
//! them, how each finds its devices and how each builds the factory of a run.
//!
//! Adding a backend: a module implementing `ComputeModule` and `ModuleFactory`, and one entry here.
//! The command line, case files, `thelma bench` and the tests find it through this list.

use std::fmt;
use std::sync::Arc;

use thelma_core::{
    BackendName, ComputeError, DeviceSpec, DeviceSpecError, ModuleFactory, TransportChoice,
};

use crate::cpu::CpuFactory;
use crate::cuda::{self, CudaFactory, LaunchShape};
use crate::params::ModelParams;

/// What the devices of a backend are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Devices {
    /// Hardware found on this machine, `count` of them, named by their ordinals.
    Physical { count: usize },
    /// Virtual devices sharing the host (the CPU module: each is a pool of threads): any count up
    /// to `max`, named `0..N` in the slab order wanted.
    Virtual { max: usize },
}

/// Settings a backend may use to shape its modules; each backend reads the ones that apply to it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tuning {
    /// Worker threads in all, shared by the devices (0: one per core). Host backends.
    pub threads: usize,
    /// Launch shape of the step kernel. GPU backends.
    pub launch: LaunchShape,
    /// The transport of the channels between slabs (`--transport`); each backend refuses what
    /// its devices cannot do when the runtime plans the channels.
    pub transport: TransportChoice,
}

/// How a backend builds the factory of a run on a number of devices.
type Build = fn(ModelParams, usize, &Tuning) -> Result<Arc<dyn ModuleFactory>, ComputeError>;

/// One compute module as the registry knows it.
pub struct Backend {
    /// The name in case files, on the command line and in reports.
    pub name: &'static str,
    /// One line for help texts.
    pub summary: &'static str,
    /// Whether its devices are the host's own cores and memory (sizes and memory checks differ).
    pub host: bool,
    probe: fn() -> Result<Devices, String>,
    build: Build,
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// Every backend, in the order `auto` tries them: the first one that finds a device serves.
pub const BACKENDS: &[Backend] = &[
    Backend {
        name: "cuda",
        summary: "NVIDIA GPUs through the CUDA driver, kernels compiled at run time by NVRTC",
        host: false,
        probe: || {
            cuda::device_count()
                .map(|count| Devices::Physical { count })
                .map_err(|e| e.to_string())
        },
        build: |params, _devices, tuning| {
            let factory = CudaFactory::new(params)
                .map_err(|e| ComputeError::Device(e.to_string()))?
                .with_shape(tuning.launch)
                .with_transport(tuning.transport);
            Ok(Arc::new(factory))
        },
    },
    Backend {
        name: "cpu",
        summary: "the threaded CPU module, the reference the GPU modules are tested against",
        host: true,
        probe: || {
            Ok(Devices::Virtual {
                max: MAX_CPU_DEVICES,
            })
        },
        build: |params, devices, tuning| {
            Ok(Arc::new(
                CpuFactory::new(params, devices, tuning.threads).with_transport(tuning.transport),
            ))
        },
    },
];

/// The most CPU devices a run may ask for: each one is a pool of threads sharing the cores.
pub const MAX_CPU_DEVICES: usize = 1024;

/// Why a backend cannot serve.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    #[error("`{name}` is not a backend ({})", names())]
    Unknown { name: String },
    #[error("{name}: {reason}")]
    Unavailable { name: &'static str, reason: String },
}

/// Why a device list does not fit the backend.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    #[error(transparent)]
    Spec(#[from] DeviceSpecError),
    #[error("{asked} CPU devices: at most {max} (each is a thread pool)")]
    TooManyVirtual { asked: usize, max: usize },
    #[error("CPU device {id} does not exist: a list of {count} CPU devices names 0..{} in slab order", count - 1)]
    NotInOrder { id: usize, count: usize },
}

/// `auto` and every registered name, for messages and help.
pub fn names() -> String {
    let mut all = vec![BackendName::AUTO];
    all.extend(BACKENDS.iter().map(|b| b.name));
    all.join(", ")
}

/// Looks a name up without probing (for argument parsers): the registry's spelling, or `auto`.
pub fn parse_name(name: &str) -> Result<BackendName, BackendError> {
    let name = name.trim();
    if BackendName::new(name).is_auto() {
        return Ok(BackendName::default());
    }
    BACKENDS
        .iter()
        .find(|b| b.name.eq_ignore_ascii_case(name))
        .map(|b| BackendName::new(b.name))
        .ok_or_else(|| BackendError::Unknown { name: name.into() })
}

/// A backend that found its devices, and what was decided (for the run's first line).
#[derive(Debug)]
pub struct Choice {
    pub backend: &'static Backend,
    pub devices: Devices,
    /// `backend cuda (1 GPU present)`, `backend auto: no CUDA driver found …; using the CPU module`.
    pub note: String,
}

/// The backend `name` asks for, probed: by name, or the first that finds a device for `auto`.
pub fn choose(name: &BackendName) -> Result<Choice, BackendError> {
    if !name.is_auto() {
        let backend = BACKENDS
            .iter()
            .find(|b| b.name.eq_ignore_ascii_case(name.as_str()))
            .ok_or_else(|| BackendError::Unknown {
                name: name.to_string(),
            })?;
        let devices = (backend.probe)().map_err(|reason| BackendError::Unavailable {
            name: backend.name,
            reason,
        })?;
        return Ok(Choice {
            backend,
            devices,
            note: format!("backend {}{}", backend.name, present(devices)),
        });
    }
    let mut skipped = Vec::new();
    for backend in BACKENDS {
        match (backend.probe)() {
            Ok(devices) => {
                let note = if skipped.is_empty() {
                    format!("backend auto: {}{}", backend.name, present(devices))
                } else {
                    format!(
                        "backend auto: {}; using the {} module",
                        skipped.join("; "),
                        backend.name
                    )
                };
                return Ok(Choice {
                    backend,
                    devices,
                    note,
                });
            }
            Err(reason) => skipped.push(format!("{}: {reason}", backend.name)),
        }
    }
    Err(BackendError::Unavailable {
        name: "auto",
        reason: skipped.join("; "),
    })
}

fn present(devices: Devices) -> String {
    match devices {
        Devices::Physical { count } => {
            format!(
                " ({count} device{} present)",
                if count == 1 { "" } else { "s" }
            )
        }
        Devices::Virtual { .. } => String::new(),
    }
}

impl Choice {
    /// The device ids `spec` names, in slab order. `all` is every physical device, or one virtual
    /// device. Duplicates and the planes per device are the caller's to check (for every backend).
    pub fn resolve(&self, spec: &DeviceSpec) -> Result<Vec<usize>, DeviceError> {
        match self.devices {
            Devices::Physical { count } => Ok(spec.resolve(count)?),
            Devices::Virtual { max } => {
                let asked = match spec {
                    DeviceSpec::All => 1,
                    DeviceSpec::Count(n) => *n,
                    DeviceSpec::List(ids) => ids.len(),
                };
                // Checked before the list is made: a count of 10^18 must not become a vector.
                if asked > max {
                    return Err(DeviceError::TooManyVirtual { asked, max });
                }
                let ids = match spec {
                    DeviceSpec::List(ids) => ids.clone(),
                    _ => (0..asked).collect(),
                };
                match ids.iter().find(|&&i| i >= ids.len()) {
                    Some(&id) => Err(DeviceError::NotInOrder {
                        id,
                        count: ids.len(),
                    }),
                    None => Ok(ids),
                }
            }
        }
    }

    /// The factory of a run on `devices` devices.
    pub fn factory(
        &self,
        params: ModelParams,
        devices: usize,
        tuning: &Tuning,
    ) -> Result<Arc<dyn ModuleFactory>, ComputeError> {
        (self.backend.build)(params, devices, tuning)
    }
}
