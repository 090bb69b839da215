//! `thelma devices`: every GPU the CUDA driver sees (name, memory, compute capability, PCI bus id,
//! nearest cores and NUMA nodes, the largest cubic domain that fits) and the peer-access matrix.

use std::fmt::Write as _;

use thelma_compute::cuda;
use thelma_core::physics::D3Q19;
use thelma_core::slab_bytes;
use thelma_core::{Domain, SlabSpec};
use thelma_core::{Precision, Streaming};

/// The largest edge `s` such that one slab of `s³` nodes in `precision`, streamed as `streaming`
/// says, fits in `free` bytes (leaving 5 % for the context and kernels).
pub fn largest_cube(free: u64, precision: Precision, streaming: Streaming) -> usize {
    largest_cube_of(free, precision, streaming, false)
}

/// [`largest_cube`] for the flow alone, or with a temperature lattice (`thermal`).
pub fn largest_cube_of(
    free: u64,
    precision: Precision,
    streaming: Streaming,
    thermal: bool,
) -> usize {
    let budget = free - free / 20;
    let fits = |s: usize| {
        let slab = SlabSpec::whole(Domain::new([s; 3], [false; 3]));
        let t = if thermal {
            thelma_core::thermal_slab_bytes(&slab, precision, false)
        } else {
            0
        };
        slab_bytes(&slab, &D3Q19, precision, streaming) + t <= budget
    };
    let (mut lo, mut hi) = (0usize, 8192usize);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// The report `thelma devices` prints; a machine without a driver or GPU gets one line saying so.
pub fn report() -> String {
    let count = match cuda::device_count() {
        Ok(n) => n,
        Err(e) => {
            return format!(
                "no CUDA devices: {e}\nruns use the CPU module (--backend cpu, the default `auto` falls back to it): {} cores\n",
                thelma_core::core_count()
            )
        }
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{count} CUDA device{}",
        if count == 1 { "" } else { "s" }
    );
    for d in 0..count {
        match cuda::gpu_info(d) {
            Ok(g) => {
                let mem = cuda::memory(d).ok();
                let near = match thelma_core::pci_locality(&g.pci_bus_id) {
                    Ok(b) if !b.cpus.is_empty() => b.to_string(),
                    Ok(_) => "unknown".into(),
                    Err(e) => format!("unknown ({e})"),
                };
                let _ = writeln!(
                    out,
                    "cuda:{d}  {}  {:.1} GiB{}  sm_{}{}  {} SMs  pci {}  near {}",
                    g.name,
                    g.total_bytes as f64 / (1u64 << 30) as f64,
                    mem.map(|m| format!(" ({:.1} GiB free)", m.free as f64 / (1u64 << 30) as f64))
                        .unwrap_or_default(),
                    g.compute_capability.0,
                    g.compute_capability.1,
                    g.multiprocessors,
                    g.pci_bus_id,
                    near
                );
                if let Some(m) = mem {
                    for (streaming, what) in [
                        (Streaming::TwoLattice, "two lattices"),
                        (Streaming::InPlace, "one lattice (--streaming in-place)"),
                    ] {
                        let cube = |p| largest_cube(m.free, p, streaming);
                        let _ = writeln!(
                            out,
                            "        largest cube per GPU, {what}: {}³ in f16, {}³ in f32, {}³ in f64",
                            cube(Precision::F16),
                            cube(Precision::F32),
                            cube(Precision::F64)
                        );
                    }
                }
            }
            Err(e) => {
                let _ = writeln!(out, "cuda:{d}  error: {e}");
            }
        }
    }
    if count > 1 {
        let _ = writeln!(out, "peer access (row can access column):");
        let mut head = String::from("       ");
        for b in 0..count {
            let _ = write!(head, "{b:>4}");
        }
        let _ = writeln!(out, "{head}");
        for a in 0..count {
            let mut row = format!("cuda:{a:<2}");
            for b in 0..count {
                let v = if a == b {
                    "-".to_string()
                } else {
                    match cuda::can_access_peer(a, b) {
                        Ok(true) => "1".into(),
                        Ok(false) => "0".into(),
                        Err(_) => "?".into(),
                    }
                };
                let _ = write!(row, "{v:>4}");
            }
            let _ = writeln!(out, "{row}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_cube_fits_and_one_more_plane_each_way_does_not() {
        let free = 140u64 << 30;
        let two = Streaming::TwoLattice;
        let s = largest_cube(free, Precision::F32, two);
        // 2·19·4 + 1 = 153 bytes per node: about 950³ nodes in 140 GiB.
        assert!((900..1000).contains(&s), "{s}");
        let bytes = |s: usize| {
            slab_bytes(
                &SlabSpec::whole(Domain::new([s; 3], [false; 3])),
                &D3Q19,
                Precision::F32,
                two,
            )
        };
        assert!(bytes(s) <= free - free / 20);
        assert!(bytes(s + 1) > free - free / 20);
        assert!(largest_cube(free, Precision::F64, two) < s);
        // 2·19·2 + 3·4 + 1 = 89 bytes per node against 165 (the previous velocity stays in f32):
        // (165/89)^⅓ = 1.23 times the edge.
        let h = largest_cube(free, Precision::F16, two);
        assert!(h * 100 > s * 122 && h * 100 < s * 124, "{h} vs {s}");
        // One lattice in place: 19·4 + 3·4 + 1 = 89 bytes per node, the same (165/89)^⅓; in f16
        // 19·2 + 12 + 1 = 51, (165/51)^⅓ = 1.479 times the edge.
        let one = Streaming::InPlace;
        let p = largest_cube(free, Precision::F32, one);
        assert!(p * 100 > s * 122 && p * 100 < s * 124, "{p} vs {s}");
        let ph = largest_cube(free, Precision::F16, one);
        assert!(ph * 1000 > s * 1472 && ph * 1000 < s * 1486, "{ph} vs {s}");
        // The temperature lattice's two lattices of 7 populations, and nothing per node besides
        // (the fused step keeps its coupling in registers): 165 + 2·7·4 = 221 bytes per node in
        // f32, (165/221)^⅓ = 0.907 times the edge; in f16 89 + 2·7·2 = 117, (165/117)^⅓ = 1.121.
        let t = largest_cube_of(free, Precision::F32, two, true);
        assert!(t * 1000 > s * 901 && t * 1000 < s * 913, "{t} vs {s}");
        let th = largest_cube_of(free, Precision::F16, two, true);
        assert!(th * 1000 > s * 1115 && th * 1000 < s * 1127, "{th} vs {s}");
    }
}
