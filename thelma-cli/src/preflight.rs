//! Checks made after the backend is chosen and before anything is allocated: the device list against
//! the lattice, and the memory each device (and the host) will need against what is free.

use anyhow::Result;
use thelma_core::physics::D3Q19;
use thelma_core::physics::{ImmersedBodies, QT};
use thelma_core::{slab_bytes, thermal_slab_bytes, ModuleFactory};
use thelma_core::{BodyMethod, CaseConfig, Streaming};
use thelma_core::{Domain, Layout, SlabSpec};

use crate::error::UsageError;

/// Bytes the host holds per node of the whole domain besides any lattice: gathered fields (ρ, u in
/// f64, a solid flag), twice (the newest healthy state is kept while the next one is read).
const FIELD_BYTES_PER_NODE: u64 = 2 * (4 * 8 + 1);

/// Checks the devices of rank `rank`'s slabs of `layout` (every slab outside a cluster job) for
/// `case` served by `factory`; `host_lattices` says whether the devices keep their lattices in
/// host memory (the CPU module), which the rank's slabs then share.
pub fn check(
    case: &CaseConfig,
    factory: &dyn ModuleFactory,
    layout: &Layout,
    rank: usize,
    host_lattices: bool,
) -> Result<()> {
    let domain = layout.domain();
    let local = layout.local(rank);
    let slabs: Vec<SlabSpec> = local.iter().map(|&s| layout.slabs[s].clone()).collect();
    let devices: Vec<usize> = local.iter().map(|&s| layout.devices[s]).collect();
    let precision = case.numerics.precision;
    let size = fmt_size(case.domain.size);
    let thermal = case.thermal.is_some();
    // The flow's lattices and, with [thermal], the temperature's; with time averages their sums
    // (f64 per field and node: ρ, u, and θ with [thermal]).
    let fields = 4 + u64::from(thermal);
    let averages = case.output.average_from.is_some();
    let lattice_bytes = |slab: &SlabSpec| {
        slab_bytes(slab, &D3Q19, precision, case.numerics.streaming)
            + if thermal {
                thermal_slab_bytes(slab, precision, host_lattices)
            } else {
                0
            }
            + if averages {
                8 * fields * slab.nodes() as u64
            } else {
                0
            }
    };
    for (slab, &device) in slabs.iter().zip(&devices) {
        let need = lattice_bytes(slab);
        if let Some(mem) = factory.device_memory(device) {
            if need > mem.free {
                return Err(UsageError::new(
                    "--size",
                    format!(
                        "{size} needs {} on device {device} (slab z {}..{}), {} free: use more devices or a smaller lattice (largest cube per device: {}³)",
                        gib(need),
                        slab.z.start,
                        slab.z.end,
                        gib(mem.free),
                        crate::devices::largest_cube_of(
                            mem.free,
                            precision,
                            case.numerics.streaming,
                            thermal
                        )
                    ),
                )
                .into());
            }
        }
    }
    // Rank 0 gathers the whole domain's fields.
    let nodes = if rank == 0 { domain.nodes() as u64 } else { 0 };
    // θ in f64 beside the gathered fields, twice.
    let temperature = if thermal { 2 * 8 } else { 0 };
    let mut host = (FIELD_BYTES_PER_NODE + temperature) * nodes;
    if case.run.checkpoint_every > 0 {
        // Each of this rank's slabs reads back its populations (and sums) for its block of a
        // checkpoint, all at once.
        let q = D3Q19.q() + if thermal { QT } else { 0 };
        let own: u64 = slabs.iter().map(|s| s.nodes() as u64).sum();
        let sums = if averages { 8 * fields } else { 0 };
        host += (q as u64 * precision.bytes() as u64 + sums) * own;
    }
    if host_lattices {
        host += slabs.iter().map(lattice_bytes).sum::<u64>();
    }
    if let Some(avail) = available_host_memory() {
        if host > avail {
            return Err(UsageError::new(
                "--size",
                format!(
                    "{size} needs {} of host memory, {} available",
                    gib(host),
                    gib(avail)
                ),
            )
            .into());
        }
    }
    Ok(())
}

/// Refuses what a partition that cuts x or y (a layout file's grid) does not run yet: a backend
/// other than the CPU and CUDA modules, immersed bodies on the CUDA module and in-place
/// streaming. Slabs of whole planes run everything.
pub fn check_grid(case: &CaseConfig, layout: &Layout, backend: &str) -> Result<()> {
    if !layout.slabs.iter().any(SlabSpec::cuts_x_or_y) {
        return Ok(());
    }
    let refuse = |m: String| Err(UsageError::new("--layout", m).into());
    if backend != "cpu" && backend != "cuda" {
        return refuse(format!(
            "the layout cuts x or y, which the {backend} module does not run (it runs slabs of \
             whole x-y planes): use --backend cpu or cuda"
        ));
    }
    let missing = if backend == "cuda" && case.body.iter().any(|b| b.method == BodyMethod::Immersed)
    {
        "immersed bodies on the cuda module (--backend cpu runs them)"
    } else if case.numerics.streaming == Streaming::InPlace {
        "in-place streaming"
    } else {
        return Ok(());
    };
    refuse(format!(
        "the layout cuts x or y, and {missing} cannot run on such a partition yet"
    ))
}

/// Whether the immersed bodies' forcing fits beside the lattices: on the one device of a run that
/// forces them there ([`thelma_compute::cuda::immersed_device_bytes`]), and on the host, where the
/// coordinator's plan keeps about 512 bytes per point (positions, velocities, the 27 links).
pub fn check_immersed(
    case: &CaseConfig,
    bodies: &ImmersedBodies,
    factory: &dyn ModuleFactory,
    devices: &[usize],
    host_lattices: bool,
) -> Result<()> {
    let points = bodies.points();
    if points == 0 {
        return Ok(());
    }
    let nodes = case.domain.size.iter().product::<usize>();
    let refuse = |need: u64, free: u64, on: String| {
        UsageError::new(
            "--config",
            format!(
                "the immersed bodies' {points} surface points need {} of {on} memory beside the lattices, {} free: fewer or coarser bodies, or a smaller lattice",
                gib(need),
                gib(free)
            ),
        )
    };
    if let ([device], false) = (devices, host_lattices) {
        if let Some(mem) = factory.device_memory(*device) {
            let lattices = slab_bytes(
                &SlabSpec::split(Domain::new(case.domain.size, case.domain.periodic), 1)
                    .map_err(|e| UsageError::new("--devices", e.to_string()))?[0],
                &D3Q19,
                case.numerics.precision,
                case.numerics.streaming,
            );
            let need = thelma_compute::cuda::immersed_device_bytes(points, nodes);
            if lattices + need > mem.free {
                return Err(refuse(
                    need,
                    mem.free.saturating_sub(lattices),
                    format!("device {device}"),
                )
                .into());
            }
        }
    }
    if let Some(avail) = available_host_memory() {
        let need = 512 * points as u64;
        if need > avail {
            return Err(refuse(need, avail, "host".into()).into());
        }
    }
    Ok(())
}

/// Every device once, and no more devices than z-planes.
/// Refuses a device list with no device, a device twice, or more devices than z-planes.
pub fn check_devices(case: &CaseConfig, devices: &[usize]) -> Result<()> {
    if devices.is_empty() {
        return Err(UsageError::new("--devices", "no device to run on").into());
    }
    for (k, d) in devices.iter().enumerate() {
        if devices[..k].contains(d) {
            return Err(UsageError::new("--devices", format!("device {d} is listed twice")).into());
        }
    }
    let planes = case.domain.size[2];
    if devices.len() > planes {
        return Err(UsageError::new(
            "--devices",
            format!(
                "{} devices for {planes} z-planes: each device needs at least one plane",
                devices.len()
            ),
        )
        .into());
    }
    Ok(())
}

/// `MemAvailable` from /proc/meminfo: what the kernel can hand out without swapping. `None` where
/// the system does not say (the check is then skipped).
pub fn available_host_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo(&text)
}

fn parse_meminfo(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn fmt_size(s: [usize; 3]) -> String {
    format!("{}x{}x{}", s[0], s[1], s[2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use thelma_core::{ComputeError, ComputeModule, MemoryInfo, Placement};

    /// A backend whose devices report 1 GiB free and that must never be asked for a module.
    struct Small;
    impl ModuleFactory for Small {
        fn backend(&self) -> &'static str {
            "small"
        }
        fn placement(&self, _: usize, _: &SlabSpec) -> Placement {
            Placement::Anywhere
        }
        fn create(&self, _: usize, _: &SlabSpec) -> Result<Box<dyn ComputeModule>, ComputeError> {
            unreachable!("preflight allocates nothing")
        }
        fn device_memory(&self, _: usize) -> Option<MemoryInfo> {
            Some(MemoryInfo {
                free: 1 << 30,
                total: 2 << 30,
            })
        }
    }

    fn case(size: usize) -> CaseConfig {
        let mut c = CaseConfig::default();
        c.domain.size = [size; 3];
        c.run.steps = Some(10);
        c
    }

    fn layout(c: &CaseConfig, devices: &[usize]) -> Layout {
        Layout::single(Domain::new(c.domain.size, c.domain.periodic), devices).unwrap()
    }

    #[test]
    fn device_memory_bounds_the_slab() {
        // 256³ f32 is about 2.4 GiB: too much for one 1 GiB device, fine on four.
        let c = case(256);
        let e = check(&c, &Small, &layout(&c, &[0]), 0, false).unwrap_err();
        let u = e.downcast_ref::<UsageError>().expect("a usage error");
        assert_eq!(u.flag, "--size");
        assert!(
            u.message.contains("device 0") && u.message.contains("1.0 GiB free"),
            "{u}"
        );
        check(&c, &Small, &layout(&c, &[0, 1, 2, 3]), 0, false).unwrap();
        // A rank checks its own slabs: rank 1 of two, with one 1 GiB device for half of 256³.
        let l = Layout::spread(Domain::new(c.domain.size, [false; 3]), 2, &[0]).unwrap();
        let e = check(&c, &Small, &l, 1, false).unwrap_err();
        assert!(e.to_string().contains("slab z 128..256"), "{e}");
    }

    #[test]
    fn grids_run_on_the_cpu_and_cuda_modules_and_refuse_what_they_cannot_run() {
        let c = case(8);
        let slabs = SlabSpec::grid(Domain::new(c.domain.size, [false; 3]), [2, 2, 1]).unwrap();
        let grid = Layout {
            devices: vec![0; slabs.len()],
            ranks: vec![0; slabs.len()],
            slabs,
        };
        let refused = |c: &CaseConfig, l: &Layout, backend: &str| {
            let e = check_grid(c, l, backend).unwrap_err();
            let u = e.downcast_ref::<UsageError>().expect("a usage error");
            assert_eq!(u.flag, "--layout");
            u.message.clone()
        };
        check_grid(&c, &grid, "cpu").unwrap();
        check_grid(&c, &grid, "cuda").unwrap();
        assert!(refused(&c, &grid, "small").contains("use --backend cpu or cuda"));
        let mut thermal = c.clone();
        thermal.thermal = Some(Default::default());
        check_grid(&thermal, &grid, "cpu").unwrap();
        check_grid(&thermal, &grid, "cuda").unwrap();
        let mut in_place = c.clone();
        in_place.numerics.streaming = Streaming::InPlace;
        assert!(refused(&in_place, &grid, "cuda").contains("in-place streaming"));
        // Immersed bodies run on the CPU module's grids, not yet on the CUDA module's.
        let mut immersed = c.clone();
        immersed.body =
            CaseConfig::parse("[[body]]\nstl = \"b.stl\"\nmethod = \"immersed\"\n", false)
                .unwrap()
                .body;
        check_grid(&immersed, &grid, "cpu").unwrap();
        assert!(refused(&immersed, &grid, "cuda").contains("immersed bodies on the cuda module"));
        // Slabs of whole planes run everything.
        check_grid(&in_place, &layout(&c, &[0, 0]), "cuda").unwrap();
    }

    #[test]
    fn device_lists_are_checked() {
        for (devices, what) in [
            (&[1usize, 1][..], "listed twice"),
            (&[][..], "no device"),
            (&[0, 1, 2, 3, 4][..], "z-planes"),
        ] {
            let e = check_devices(&case(4), devices).unwrap_err();
            let u = e.downcast_ref::<UsageError>().expect("a usage error");
            assert_eq!(u.flag, "--devices");
            assert!(u.message.contains(what), "{u}");
        }
    }

    #[test]
    fn meminfo_is_read_in_kib() {
        let text =
            "MemTotal:       16000000 kB\nMemFree:         1000 kB\nMemAvailable:    2048 kB\n";
        assert_eq!(parse_meminfo(text), Some(2 << 20));
        assert_eq!(parse_meminfo("MemTotal: 5 kB\n"), None);
    }
}
