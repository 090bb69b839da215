//! Binding worker threads near their device with hwloc (through `hwlocality`): a GPU's worker to the
//! cores and NUMA memory closest to the GPU's PCI bus id, CPU devices to an even share of the cores.
//!
//! Binding is an optimisation, never a requirement: every failure comes back as a message for one
//! warning and the run goes on unbound.

use hwlocality::cpu::binding::CpuBindingFlags;
use hwlocality::cpu::cpuset::CpuSet;
use hwlocality::memory::binding::{MemoryBindingFlags, MemoryBindingPolicy};
use hwlocality::memory::nodeset::NodeSet;
use hwlocality::object::types::ObjectType;
use hwlocality::topology::builder::TypeFilter;
use hwlocality::Topology;

use crate::compute::Placement;

/// Where a thread ended up.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Binding {
    /// CPU set in hwloc's list syntax (`0-7`), or empty when unbound.
    pub cpus: String,
    /// NUMA nodes of the memory binding, or empty.
    pub numa: String,
}

impl std::fmt::Display for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.cpus.is_empty() {
            return write!(f, "unbound");
        }
        write!(f, "cpus {}", self.cpus)?;
        if !self.numa.is_empty() {
            write!(f, ", numa {}", self.numa)?;
        }
        Ok(())
    }
}

/// Why a thread could not be bound, or a device's locality not found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum AffinityError {
    #[error("hwloc: cannot load the topology: {0}")]
    Topology(String),
    #[error("hwloc: bad PCI bus id {0}: {1}")]
    BadBusId(String, String),
    #[error("hwloc does not see PCI device {0}")]
    NoDevice(String),
    #[error("hwloc: PCI device {0} has no CPU-side ancestor")]
    NoAncestor(String),
    #[error("hwloc: cannot bind to cpus {0}: {1}")]
    Bind(String, String),
    #[error("hwloc found no cores")]
    NoCores,
}

/// Binds the calling thread (and so the threads it spawns later, which inherit it) as `placement`
/// asks. Returns the binding, or why it could not be made.
pub fn bind_current_thread(placement: &Placement) -> Result<Binding, AffinityError> {
    let (cpus, nodes, topology) = match placement {
        Placement::Anywhere => {
            return Ok(Binding {
                cpus: String::new(),
                numa: String::new(),
            })
        }
        Placement::Gpu { pci_bus_id } => {
            let topology = load_topology(true)?;
            let (cpus, nodes) = {
                let dev = topology
                    .pci_device_by_bus_id_string(pci_bus_id)
                    .map_err(|e| AffinityError::BadBusId(pci_bus_id.to_string(), e.to_string()))?
                    .ok_or_else(|| AffinityError::NoDevice(pci_bus_id.to_string()))?;
                let near = dev
                    .first_non_io_ancestor()
                    .ok_or_else(|| AffinityError::NoAncestor(pci_bus_id.to_string()))?;
                let cpus: CpuSet = near
                    .cpuset()
                    .map(|c| c.clone_target())
                    .unwrap_or_else(|| topology.cpuset().clone_target());
                let nodes: NodeSet = near
                    .nodeset()
                    .map(|n| n.clone_target())
                    .unwrap_or_else(|| topology.nodeset().clone_target());
                (cpus, nodes)
            };
            (cpus, nodes, topology)
        }
        Placement::Cores { share, of } => {
            let topology = load_topology(false)?;
            let (cpus, nodes) = core_share(&topology, *share, *of)?;
            (cpus, nodes, topology)
        }
    };
    topology
        .bind_cpu(&cpus, CpuBindingFlags::THREAD)
        .map_err(|e| AffinityError::Bind(list_of(&cpus.to_string()), e.to_string()))?;
    // Memory binding is best effort: a single-node machine or a container may refuse it.
    let numa = match topology.bind_memory(
        &nodes,
        MemoryBindingPolicy::Bind,
        MemoryBindingFlags::THREAD,
    ) {
        Ok(()) => list_of(&nodes.to_string()),
        Err(_) => String::new(),
    };
    Ok(Binding {
        cpus: list_of(&cpus.to_string()),
        numa,
    })
}

/// hwlocality displays sets as `CpuSet(0-3,8)`; keep the list inside.
fn list_of(display: &str) -> String {
    match (display.find('('), display.rfind(')')) {
        (Some(a), Some(b)) if a < b => display[a + 1..b].to_string(),
        _ => display.to_string(),
    }
}

/// The cores and NUMA nodes nearest the PCI device `pci_bus_id` (what a GPU's worker is bound to),
/// without binding anything; for `thelma devices`.
pub fn pci_locality(pci_bus_id: &str) -> Result<Binding, AffinityError> {
    let topology = load_topology(true)?;
    let dev = topology
        .pci_device_by_bus_id_string(pci_bus_id)
        .map_err(|e| AffinityError::BadBusId(pci_bus_id.to_string(), e.to_string()))?
        .ok_or_else(|| AffinityError::NoDevice(pci_bus_id.to_string()))?;
    let near = dev
        .first_non_io_ancestor()
        .ok_or_else(|| AffinityError::NoAncestor(pci_bus_id.to_string()))?;
    Ok(Binding {
        cpus: near
            .cpuset()
            .map(|c| list_of(&c.to_string()))
            .unwrap_or_default(),
        numa: near
            .nodeset()
            .map(|n| list_of(&n.to_string()))
            .unwrap_or_default(),
    })
}

/// The cores of share `share` out of `of` equal contiguous shares (at least one core each; shares
/// wrap around when there are more shares than cores).
fn core_share(
    topology: &Topology,
    share: usize,
    of: usize,
) -> Result<(CpuSet, NodeSet), AffinityError> {
    let mut cores: Vec<_> = topology.objects_with_type(ObjectType::Core).collect();
    if cores.is_empty() {
        cores = topology.objects_with_type(ObjectType::PU).collect();
    }
    if cores.is_empty() || of == 0 {
        return Err(AffinityError::NoCores);
    }
    let n = cores.len();
    // A share past the last (a device id larger than the count, from a caller that did not check
    // its list) wraps around rather than indexing past the cores: binding must never panic.
    let share = share % of;
    let range = if of <= n {
        (share * n / of)..((share + 1) * n / of)
    } else {
        let c = share % n;
        c..c + 1
    };
    let mut cpus = CpuSet::new();
    let mut nodes = NodeSet::new();
    for core in &cores[range] {
        if let Some(c) = core.cpuset() {
            cpus |= c.clone_target();
        }
        if let Some(m) = core.nodeset() {
            nodes |= m.clone_target();
        }
    }
    Ok((cpus, nodes))
}

/// hwloc's topology: with the important I/O objects (PCI devices, to find a GPU's cores) or
/// without any.
fn load_topology(io: bool) -> Result<Topology, AffinityError> {
    // The linker takes a member of an archive only for a symbol still missing when it reads that
    // archive, and it reads this crate's before hwloc's. The stubs' code unit may hold nothing the
    // program calls (how code is split into units is the compiler's choice): a reference from code
    // every topology passes through makes the linker take them on that pass.
    std::hint::black_box(udev::addresses());
    let topology = if io {
        Topology::builder()
            .with_io_type_filter(TypeFilter::KeepImportant)
            .map_err(|e| AffinityError::Topology(e.to_string()))?
            .build()
    } else {
        Topology::new()
    };
    topology.map_err(|e| AffinityError::Topology(e.to_string()))
}

/// The five libudev functions the static hwloc calls, each answering "nothing" (a null pointer),
/// so that the binary needs no libudev at run time (ARCHITECTURE.md, "Measured choices").
///
/// hwloc asks for a udev context once per topology (`udev_new`); given none, it never calls the
/// other four, and reads the block-device properties it would have asked udev for (vendor, model,
/// serial) from udev's database files under /run/udev/data itself. Nothing thelma asks hwloc for
/// (cores, NUMA nodes, PCI devices, binding) goes through udev.
mod udev {
    use std::ffi::{c_char, c_void};
    use std::ptr::null_mut;

    /// SAFETY (of every stub): none dereferences its arguments or keeps them; each returns null,
    /// which hwloc checks for ("no udev", "no device", "no property").
    #[unsafe(no_mangle)]
    extern "C" fn udev_new() -> *mut c_void {
        null_mut()
    }

    #[unsafe(no_mangle)]
    extern "C" fn udev_unref(_udev: *mut c_void) -> *mut c_void {
        null_mut()
    }

    #[unsafe(no_mangle)]
    extern "C" fn udev_device_new_from_subsystem_sysname(
        _udev: *mut c_void,
        _subsystem: *const c_char,
        _sysname: *const c_char,
    ) -> *mut c_void {
        null_mut()
    }

    #[unsafe(no_mangle)]
    extern "C" fn udev_device_get_property_value(
        _device: *mut c_void,
        _key: *const c_char,
    ) -> *const c_char {
        std::ptr::null()
    }

    #[unsafe(no_mangle)]
    extern "C" fn udev_device_unref(_device: *mut c_void) -> *mut c_void {
        null_mut()
    }

    /// Their addresses, for [`super::load_topology`] to refer to.
    pub(super) fn addresses() -> [*const (); 5] {
        [
            udev_new as *const (),
            udev_unref as *const (),
            udev_device_new_from_subsystem_sysname as *const (),
            udev_device_get_property_value as *const (),
            udev_device_unref as *const (),
        ]
    }
}

/// Number of cores (not hardware threads) hwloc sees, or the OS's parallelism when it cannot tell.
pub fn core_count() -> usize {
    load_topology(false)
        .ok()
        .map(|t| t.objects_with_type(ObjectType::Core).count())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_shares_cover_the_machine_without_overlap() {
        let Ok(topology) = Topology::new() else {
            return;
        };
        let all = topology.objects_with_type(ObjectType::Core).count();
        if all == 0 {
            return;
        }
        let of = all.min(2);
        let (a, _) = core_share(&topology, 0, of).unwrap();
        let (b, _) = core_share(&topology, of - 1, of).unwrap();
        assert!(a.weight().unwrap_or(0) >= 1);
        if of == 2 {
            assert!(!a.intersects(&b), "{a} and {b} overlap");
        }
    }

    #[test]
    fn a_share_past_the_last_wraps_instead_of_panicking() {
        let Ok(topology) = Topology::new() else {
            return;
        };
        if topology.objects_with_type(ObjectType::Core).count() == 0 {
            return;
        }
        let (a, _) = core_share(&topology, 5, 1).unwrap();
        let (b, _) = core_share(&topology, 0, 1).unwrap();
        assert_eq!(a, b);
        assert!(core_share(&topology, 100_000, 3).is_ok());
    }

    #[test]
    fn set_lists_lose_their_type_wrapper() {
        assert_eq!(list_of("CpuSet(0-3,8)"), "0-3,8");
        assert_eq!(list_of("0-1"), "0-1");
    }

    #[test]
    fn a_gpu_that_hwloc_cannot_find_is_an_error_not_a_binding() {
        // Bus 0xff, device 0x1f of domain 0xffff exists on no machine; a malformed id neither.
        for id in ["ffff:ff:1f.7", "not-a-bus-id"] {
            let r = std::thread::spawn(move || {
                bind_current_thread(&Placement::Gpu {
                    pci_bus_id: id.to_string(),
                })
            })
            .join()
            .expect("binding never panics");
            let e = r.expect_err(id).to_string();
            assert!(e.starts_with("hwloc"), "{id}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    /// hwloc is linked statically, so its libpciaccess plugin cannot load (the plugin looks for
    /// hwloc's symbols in a shared library that is not there): the PCI devices, a GPU's among them,
    /// must come from hwloc's own reader of sysfs, and with their cores.
    #[test]
    fn the_pci_devices_sysfs_lists_are_found_with_their_cores() {
        // Storage, network, display and accelerator devices: what hwloc keeps as "important".
        let important = ["0x01", "0x02", "0x03", "0x12"];
        let Ok(dir) = std::fs::read_dir("/sys/bus/pci/devices") else {
            return;
        };
        let ids: Vec<String> = dir
            .filter_map(|e| e.ok())
            .filter(|e| {
                std::fs::read_to_string(e.path().join("class"))
                    .is_ok_and(|c| important.iter().any(|p| c.starts_with(p)))
            })
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        for id in ids {
            let near = pci_locality(&id).unwrap_or_else(|e| panic!("{id}: {e}"));
            assert!(!near.cpus.is_empty(), "{id}: {near}");
        }
    }

    #[test]
    fn anywhere_binds_nothing() {
        let b = bind_current_thread(&Placement::Anywhere).unwrap();
        assert_eq!(b.to_string(), "unbound");
    }
}
