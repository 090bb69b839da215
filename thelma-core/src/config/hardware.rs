//! Where a case runs: the compute module by name, the devices in slab order, the CPU threads.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::transport::TransportChoice;

/// The compute module a case asks for, by the name under which `thelma-compute` registers it
/// (`cpu`, `cuda`), or `auto`: the first registered module that finds a device. The name is checked
/// against that registry when the run starts; thelma-core knows no module by name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BackendName(pub String);

impl BackendName {
    /// The name that lets the registry choose.
    pub const AUTO: &'static str = "auto";

    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
    pub fn is_auto(&self) -> bool {
        self.0.eq_ignore_ascii_case(Self::AUTO)
    }
}

impl Default for BackendName {
    fn default() -> Self {
        Self(Self::AUTO.to_string())
    }
}

impl fmt::Display for BackendName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which devices serve the run, in slab order (the first device owns the lowest z planes).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    /// Every GPU (CUDA) or one device (CPU).
    #[default]
    All,
    /// The first `n` devices: `--devices 3`. For the CPU backend, `n` devices sharing the cores.
    Count(usize),
    /// Explicit ids in slab order: `--devices 2,0,1,3` (one id alone: `--devices 3,`).
    List(Vec<usize>),
}

impl DeviceSpec {
    /// Parses `all`, `N` or a comma-separated list of ids; an id may be written as `thelma
    /// devices` lists it (`cuda:1`), so that `cuda:0` alone is GPU 0, not a count.
    pub fn parse(s: &str) -> Result<Self, DeviceSpecError> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("all") {
            return Ok(DeviceSpec::All);
        }
        let named = |p: &str| p.get(..5).is_some_and(|h| h.eq_ignore_ascii_case("cuda:"));
        if !s.contains(',') && !named(s) {
            let n: usize = s
                .parse()
                .map_err(|_| DeviceSpecError::NotASpec(s.to_string()))?;
            if n == 0 {
                return Err(DeviceSpecError::ZeroCount);
            }
            return Ok(DeviceSpec::Count(n));
        }
        let mut ids = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let digits = if named(part) { &part[5..] } else { part };
            let id: usize = digits
                .parse()
                .map_err(|_| DeviceSpecError::NotAnId(part.to_string()))?;
            if ids.contains(&id) {
                return Err(DeviceSpecError::Twice(id));
            }
            ids.push(id);
        }
        if ids.is_empty() {
            return Err(DeviceSpecError::Empty);
        }
        Ok(DeviceSpec::List(ids))
    }

    /// The ids in slab order, given how many devices exist (`available`).
    pub fn resolve(&self, available: usize) -> Result<Vec<usize>, DeviceSpecError> {
        match self {
            DeviceSpec::All => Ok((0..available.max(1)).collect()),
            &DeviceSpec::Count(asked) if asked > available => {
                Err(DeviceSpecError::TooMany { asked, available })
            }
            DeviceSpec::Count(n) => Ok((0..*n).collect()),
            DeviceSpec::List(ids) => match ids.iter().find(|&&i| i >= available) {
                Some(&id) => Err(DeviceSpecError::Missing { id, available }),
                None => Ok(ids.clone()),
            },
        }
    }
}

/// A device list that cannot be read, or names devices that are not there.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeviceSpecError {
    #[error("expected `all`, a count or a list of ids like `2,0,1,3`, got `{0}`")]
    NotASpec(String),
    #[error("0 devices: a bare number is a count; for device 0 alone write `0,` or `cuda:0`")]
    ZeroCount,
    #[error("`{0}` is not a device id")]
    NotAnId(String),
    #[error("device {0} is listed twice")]
    Twice(usize),
    #[error("the device list is empty")]
    Empty,
    #[error("{asked} devices asked for, {available} available")]
    TooMany { asked: usize, available: usize },
    #[error("device {id} does not exist ({available} available: 0..{})", available.saturating_sub(1))]
    Missing { id: usize, available: usize },
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::All => write!(f, "all"),
            DeviceSpec::Count(n) => write!(f, "{n}"),
            DeviceSpec::List(ids) => {
                let s: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
                if ids.len() == 1 {
                    write!(f, "{},", s[0])
                } else {
                    write!(f, "{}", s.join(","))
                }
            }
        }
    }
}

impl Serialize for DeviceSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for DeviceSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Count(usize),
            List(Vec<usize>),
        }
        match Raw::deserialize(d)? {
            Raw::Text(s) => DeviceSpec::parse(&s).map_err(serde::de::Error::custom),
            Raw::Count(n) => DeviceSpec::parse(&n.to_string()).map_err(serde::de::Error::custom),
            Raw::List(ids) => {
                let s: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
                DeviceSpec::parse(&format!("{},", s.join(","))).map_err(serde::de::Error::custom)
            }
        }
    }
}

/// Where and on what the run executes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct HardwareConfig {
    /// A module's registry name or `auto`.
    pub backend: BackendName,
    pub devices: DeviceSpec,
    /// CPU backend: worker threads in all (0: every core).
    pub threads: usize,
    /// How the populations crossing an interface travel between slabs: `auto`, `zero-copy`,
    /// `device` or `peer` (`thelma_core::Transport`).
    pub transport: TransportChoice,
    /// A layout file (`[[subdomain]]` list): which rank of a cluster job and which of its devices
    /// runs each slab, instead of an even split over `devices`.
    pub layout: Option<std::path::PathBuf>,
}
