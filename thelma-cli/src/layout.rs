//! Layout files: which rank (process of a cluster job) and which of its devices runs each
//! subdomain. A `[[subdomain]]` list, in nodes:
//!
//! ```toml
//! [[subdomain]]
//! origin = [0, 0, 0]
//! size = [256, 256, 128]
//! rank = 0
//! device = 0
//! ```
//!
//! Neighbours follow from positions. The subdomains must tile the case's domain; each is for now a
//! slab of whole x–y planes (the engine cuts along z), and every rank of the job holds at least
//! one. `thelma layout` writes a balanced one.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thelma_core::{partition, Domain, Layout, SlabSpec};

use crate::error::UsageError;

/// `thelma layout`: a balanced layout file for a cluster job.
#[derive(clap::Args, Debug)]
pub struct LayoutArgs {
    /// Lattice size: N for a cube, or NX,NY,NZ.
    #[arg(long, value_name = "N|NX,NY,NZ", value_parser = crate::cli::parse_size, allow_hyphen_values = true)]
    pub size: [usize; 3],
    /// Ranks (processes, one per host as a rule).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub ranks: usize,
    /// Devices per rank (GPUs of a host; CPU devices with --backend cpu).
    #[arg(long, value_name = "G", default_value_t = 1)]
    pub gpus: usize,
    /// Cut the domain into X × Y × Z subdomains, one per device (X·Y·Z = ranks × gpus), each
    /// exchanging across its faces and edges; default: slabs along z.
    #[arg(long, value_name = "X,Y,Z", value_parser = crate::cli::parse_size, conflicts_with = "model")]
    pub grid: Option<[usize; 3]>,
    /// Where to write it (never overwritten); standard output when left out.
    #[arg(conflicts_with = "model")]
    pub file: Option<PathBuf>,
    /// Write no layout: model the step of the cluster (--ranks hosts of --gpus GPUs) for the best
    /// 1D, 2D and 3D cuts of the domain instead, from the figures of the options below (no
    /// defaults: each is a measurement or a datasheet value the model states).
    #[arg(long)]
    pub model: bool,
    /// With --model: one GPU's MLUPS on its box (`thelma bench`).
    #[arg(
        long,
        value_name = "MLUPS",
        requires = "model",
        allow_negative_numbers = true
    )]
    pub gpu_mlups: Option<f64>,
    /// With --model: one GPU's stores to the peer GPUs of its host, all its faces together, in
    /// GB/s (`thelma comm-bench`'s link GB/s over peer memory).
    #[arg(
        long,
        value_name = "GB/S",
        requires = "model",
        allow_negative_numbers = true
    )]
    pub link_gbs: Option<f64>,
    /// With --model: one GPU's stores into page-locked host memory, in GB/s (`thelma
    /// comm-bench`'s link GB/s over zero-copy).
    #[arg(
        long,
        value_name = "GB/S",
        requires = "model",
        allow_negative_numbers = true
    )]
    pub host_gbs: Option<f64>,
    /// With --model: a host's network bandwidth in each direction, in GB/s (its adapters' line
    /// rate times the share MPI reaches).
    #[arg(
        long,
        value_name = "GB/S",
        requires = "model",
        allow_negative_numbers = true
    )]
    pub nic_gbs: Option<f64>,
    /// With --model: the fixed cost of a step's round of messages (the exchange and the stop
    /// collective), in µs.
    #[arg(
        long,
        value_name = "US",
        requires = "model",
        allow_negative_numbers = true
    )]
    pub latency_us: Option<f64>,
    /// With --model: the populations' storage (f32: 20 bytes per face node, f16: 10, f64: 40).
    /// Default f32.
    #[arg(long, value_enum, requires = "model")]
    pub precision: Option<crate::cli::PrecisionArg>,
}

/// `thelma layout --model`: the modelled step of the best cut of each kind, as a table.
pub fn model(args: &LayoutArgs) -> anyhow::Result<String> {
    use std::fmt::Write as _;
    use thelma_compute::comm_bench::model::{best_cut, bytes_per_node, ClusterSpec, CutKind};
    for (flag, v) in [("--ranks", args.ranks), ("--gpus", args.gpus)] {
        if v == 0 {
            return Err(UsageError::new(flag, "must be at least 1").into());
        }
    }
    let [nx, ny, nz] = args.size;
    let nodes = match nx.checked_mul(ny).and_then(|n| n.checked_mul(nz)) {
        Some(0) => {
            return Err(
                UsageError::new("--size", format!("{nx}x{ny}x{nz} nodes: not a domain")).into(),
            )
        }
        None => {
            return Err(UsageError::new("--size", format!("{nx}x{ny}x{nz} nodes: too many")).into())
        }
        Some(n) => n,
    };
    if args.ranks.checked_mul(args.gpus).is_none_or(|g| g > nodes) {
        return Err(UsageError::new(
            "--ranks",
            format!(
                "{} x {} GPUs: more than the {nx}x{ny}x{nz} domain's nodes",
                args.ranks, args.gpus
            ),
        )
        .into());
    }
    let figure = |flag: &'static str, v: Option<f64>, what: &str| match v {
        None => Err(UsageError::new(flag, format!("--model needs {what}"))),
        Some(x) if !(x.is_finite() && x > 0.0) => Err(UsageError::new(
            flag,
            format!("{x} must be a finite number > 0"),
        )),
        Some(x) => Ok(x),
    };
    let precision =
        thelma_core::Precision::from(args.precision.unwrap_or(crate::cli::PrecisionArg::F32));
    let spec = ClusterSpec {
        nodes: args.ranks,
        gpus: args.gpus,
        gpu_mlups: figure("--gpu-mlups", args.gpu_mlups, "one GPU's MLUPS")?,
        link_bps: figure(
            "--link-gbs",
            args.link_gbs,
            "the GB/s between two GPUs of a host",
        )? * 1e9,
        host_bps: figure("--host-gbs", args.host_gbs, "a GPU's GB/s to host memory")? * 1e9,
        nic_bps: figure("--nic-gbs", args.nic_gbs, "a host's network GB/s")? * 1e9,
        latency_s: figure("--latency-us", args.latency_us, "a round of messages' µs")? * 1e-6,
        value_bytes: precision.bytes(),
    };
    let rows: Vec<_> = CutKind::ALL
        .iter()
        .map(|&kind| (kind, best_cut(args.size, &spec, kind)))
        .collect();
    if rows.iter().all(|(_, r)| r.is_none()) {
        return Err(UsageError::new(
            "--ranks",
            format!(
                "no cut of {nx}x{ny}x{nz} nodes into {} x {} boxes leaves each at least one node thick",
                args.ranks, args.gpus
            ),
        )
        .into());
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "model: {nx}x{ny}x{nz} nodes on {} host(s) x {} GPU(s), {} ({} B per face node): one GPU \
         {:.0} MLUPS; peer faces {} GB/s; outboxes {} GB/s per GPU; network {} GB/s per host \
         each way; {} µs a round of messages",
        spec.nodes,
        spec.gpus,
        precision.name(),
        bytes_per_node(spec.value_bytes),
        spec.gpu_mlups,
        spec.link_bps / 1e9,
        spec.host_bps / 1e9,
        spec.nic_bps / 1e9,
        spec.latency_s * 1e6
    );
    let _ = writeln!(
        s,
        "{:<13} {:<7} {:<7} {:<16} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>16} {:>16}",
        "cut",
        "hosts",
        "GPUs",
        "box",
        "net MB",
        "kernel",
        "peer",
        "outbox",
        "network",
        "step",
        "MLUPS (eff.)",
        "overlapped"
    );
    let dims = |c: [usize; 3]| format!("{}x{}x{}", c[0], c[1], c[2]);
    for (kind, row) in rows {
        match row {
            None => {
                let _ = writeln!(
                    s,
                    "{:<13} (no such cut: the domain is too thin)",
                    kind.name()
                );
            }
            Some(r) => {
                let b = r.box_size;
                let us = |t: f64| format!("{:.0} µs", t * 1e6);
                let _ = writeln!(
                    s,
                    "{:<13} {:<7} {:<7} {:<16} {:>8.1} {:>8} {:>8} {:>8} {:>8} {:>8} {:>16} {:>16}",
                    kind.name(),
                    dims(r.node_cut),
                    dims(r.gpu_cut),
                    format!("{:.0}x{:.0}x{:.0}", b[0], b[1], b[2]),
                    r.host_bytes / 1e6,
                    us(r.kernel_s),
                    us(r.peer_s),
                    us(r.outbox_s),
                    us(r.network_s),
                    us(r.step_s),
                    format!("{:.0} ({:.1} %)", r.mlups, 100.0 * r.efficiency),
                    format!(
                        "{:.0} ({:.1} %)",
                        r.overlapped_mlups,
                        100.0 * r.overlapped_efficiency
                    ),
                );
            }
        }
    }
    let _ = writeln!(
        s,
        "\nnet MB: what the busiest host sends per step; peer and outbox: the busiest GPU's stores \
         during the kernel. step: the largest of kernel, peer and outbox, then the network's \
         round of messages (THELMA_OVERLAP=0); overlapped, as built: the boundary layers, which \
         make every store, beside the interior, the messages leaving once they are done. thelma \
         cuts along z (1D) for now."
    );
    Ok(s)
}

/// Writes the balanced layout `args` asks for.
pub fn write(args: &LayoutArgs) -> anyhow::Result<Option<PathBuf>> {
    for (flag, v) in [("--ranks", args.ranks), ("--gpus", args.gpus)] {
        if v == 0 {
            return Err(UsageError::new(flag, "must be at least 1").into());
        }
    }
    let domain = Domain::new(args.size, [false; 3]);
    let file = match args.grid {
        None => LayoutFile::balanced(domain, args.ranks, args.gpus)?,
        Some(g) => LayoutFile::grid(domain, g, args.ranks, args.gpus)?,
    };
    let text = file.to_toml(domain);
    match &args.file {
        None => {
            print!("{text}");
            Ok(None)
        }
        Some(path) => {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| UsageError::new("FILE", format!("{}: {e}", path.display())))?;
            f.write_all(text.as_bytes())?;
            Ok(Some(path.clone()))
        }
    }
}

/// A layout file as written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutFile {
    pub subdomain: Vec<Subdomain>,
}

/// One subdomain: its first node and its extent (nodes), the rank running it and the device on
/// that rank's host.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Subdomain {
    pub origin: [usize; 3],
    pub size: [usize; 3],
    pub rank: usize,
    pub device: usize,
}

fn bad(message: impl Into<String>) -> UsageError {
    UsageError::new("--layout", message)
}

impl LayoutFile {
    /// Reads and parses `path` (not yet checked against a domain).
    pub fn read(path: &Path) -> Result<LayoutFile, UsageError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
        toml::from_str(&text).map_err(|e| {
            let m = e.message().to_string();
            bad(format!("{}: {m}", path.display()))
        })
    }

    /// The runtime's layout of `domain`: the subdomains checked to tile it as a grid (cuts along
    /// z, and along x and y where they are made, each running through the whole domain), in
    /// subdomain order (x fastest, then y, then z).
    pub fn layout(&self, domain: Domain) -> Result<Layout, UsageError> {
        let [nx, ny, nz] = domain.size;
        if self.subdomain.is_empty() {
            return Err(bad("no [[subdomain]]"));
        }
        let name = |k: usize| {
            let d = &self.subdomain[k];
            format!(
                "subdomain {} (origin {:?}, size {:?})",
                k + 1,
                d.origin,
                d.size
            )
        };
        for (k, d) in self.subdomain.iter().enumerate() {
            if d.size.contains(&0) {
                return Err(bad(format!("{}: an empty size", name(k))));
            }
            if (0..3).any(|a| d.origin[a] + d.size[a] > domain.size[a]) {
                return Err(bad(format!(
                    "{} reaches beyond the domain of {nx}x{ny}x{nz} nodes",
                    name(k)
                )));
            }
        }
        // The grid: every subdomain's faces are cuts, and the cells between cuts are covered once.
        let cuts: [Vec<usize>; 3] = std::array::from_fn(|a| {
            let mut c: Vec<usize> = self
                .subdomain
                .iter()
                .flat_map(|d| [d.origin[a], d.origin[a] + d.size[a]])
                .chain([0, domain.size[a]])
                .collect();
            c.sort_unstable();
            c.dedup();
            c
        });
        let cell = |a: usize, v: usize| cuts[a].binary_search(&v).expect("a cut");
        let grid: [usize; 3] = std::array::from_fn(|a| cuts[a].len() - 1);
        let mut owner: Vec<Option<usize>> = vec![None; grid.iter().product()];
        let slabs_only = grid[0] == 1 && grid[1] == 1;
        for (k, d) in self.subdomain.iter().enumerate() {
            let lo: [usize; 3] = std::array::from_fn(|a| cell(a, d.origin[a]));
            let hi: [usize; 3] = std::array::from_fn(|a| cell(a, d.origin[a] + d.size[a]));
            for cz in lo[2]..hi[2] {
                for cy in lo[1]..hi[1] {
                    for cx in lo[0]..hi[0] {
                        let c = (cz * grid[1] + cy) * grid[0] + cx;
                        if owner[c].is_some() {
                            let at = [cuts[0][cx], cuts[1][cy], cuts[2][cz]];
                            return Err(bad(if slabs_only {
                                format!(
                                    "{} overlaps another subdomain at plane z {}",
                                    name(k),
                                    at[2]
                                )
                            } else {
                                format!("{} overlaps another subdomain at node {at:?}", name(k))
                            }));
                        }
                        owner[c] = Some(k);
                    }
                }
            }
        }
        if let Some(c) = owner.iter().position(Option::is_none) {
            let at = [c % grid[0], c / grid[0] % grid[1], c / (grid[0] * grid[1])];
            let range = |a: usize| format!("{}..{}", cuts[a][at[a]], cuts[a][at[a] + 1]);
            return Err(bad(if slabs_only {
                format!("planes z {} are in no subdomain", range(2))
            } else {
                format!(
                    "nodes x {}, y {}, z {} are in no subdomain",
                    range(0),
                    range(1),
                    range(2)
                )
            }));
        }
        if let Some(k) =
            (0..self.subdomain.len()).find(|&k| owner.iter().filter(|&&o| o == Some(k)).count() > 1)
        {
            return Err(bad(format!(
                "{} spans several cells of the grid its neighbours cut: subdomains must form a \
                 grid, each cut running through the whole domain",
                name(k)
            )));
        }
        let order: Vec<usize> = owner.into_iter().map(|o| o.expect("covered")).collect();
        let ranks: Vec<usize> = order.iter().map(|&k| self.subdomain[k].rank).collect();
        let top = ranks.iter().copied().max().unwrap_or(0);
        if let Some(r) = (0..=top).find(|r| !ranks.contains(r)) {
            return Err(bad(format!(
                "rank {r} holds no subdomain (ranks 0 to {top} are named)"
            )));
        }
        let ranges: [Vec<std::ops::Range<usize>>; 3] =
            std::array::from_fn(|a| cuts[a].windows(2).map(|w| w[0]..w[1]).collect());
        Ok(Layout {
            slabs: SlabSpec::cells(domain, &ranges),
            devices: order.iter().map(|&k| self.subdomain[k].device).collect(),
            ranks,
        })
    }

    /// A balanced layout of `domain` for `nodes` ranks with `gpus` devices each: one slab per
    /// device, in rank order along z, the planes split as evenly as they go.
    pub fn balanced(domain: Domain, nodes: usize, gpus: usize) -> Result<LayoutFile, UsageError> {
        let [nx, ny, nz] = domain.size;
        let ranges = partition(nz, nodes * gpus)
            .map_err(|e| UsageError::new("--size", format!("{nodes} x {gpus} devices: {e}")))?;
        Ok(LayoutFile {
            subdomain: ranges
                .into_iter()
                .enumerate()
                .map(|(s, z)| Subdomain {
                    origin: [0, 0, z.start],
                    size: [nx, ny, z.len()],
                    rank: s / gpus,
                    device: s % gpus,
                })
                .collect(),
        })
    }

    /// A layout of `domain` cut into `grid` subdomains along x, y and z, balanced, for `nodes`
    /// ranks with `gpus` devices each: subdomain s (x fastest, then y, then z) on rank s / gpus,
    /// device s % gpus.
    pub fn grid(
        domain: Domain,
        grid: [usize; 3],
        nodes: usize,
        gpus: usize,
    ) -> Result<LayoutFile, UsageError> {
        let count: usize = grid.iter().product();
        if count != nodes * gpus {
            return Err(UsageError::new(
                "--grid",
                format!(
                    "{}x{}x{} = {count} subdomains for {nodes} rank(s) of {gpus} device(s): one \
                     subdomain per device",
                    grid[0], grid[1], grid[2]
                ),
            ));
        }
        let cells =
            SlabSpec::grid(domain, grid).map_err(|e| UsageError::new("--grid", e.to_string()))?;
        Ok(LayoutFile {
            subdomain: cells
                .iter()
                .map(|c| Subdomain {
                    origin: c.origin(),
                    size: c.size(),
                    rank: c.index / gpus,
                    device: c.index % gpus,
                })
                .collect(),
        })
    }

    /// The file's text, headed by a comment saying what it is for.
    pub fn to_toml(&self, domain: Domain) -> String {
        let [nx, ny, nz] = domain.size;
        let ranks = self
            .subdomain
            .iter()
            .map(|d| d.rank)
            .max()
            .map_or(0, |r| r + 1);
        format!(
            "# thelma layout: {nx}x{ny}x{nz} nodes over {ranks} rank(s), {} subdomain(s).\n\
             # Run: mpirun -np {ranks} thelma run --layout FILE ...\n\n{}",
            self.subdomain.len(),
            toml::to_string(self).expect("a layout serialises")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(z: usize, nz: usize, rank: usize, device: usize) -> Subdomain {
        Subdomain {
            origin: [0, 0, z],
            size: [8, 6, nz],
            rank,
            device,
        }
    }

    #[test]
    fn a_balanced_layout_reads_back_as_the_same_slabs() {
        let d = Domain::new([8, 6, 30], [false, false, true]);
        let f = LayoutFile::balanced(d, 2, 3).unwrap();
        let back: LayoutFile = toml::from_str(&f.to_toml(d)).unwrap();
        assert_eq!(back, f);
        let l = back.layout(d).unwrap();
        assert_eq!(l.ranks, vec![0, 0, 0, 1, 1, 1]);
        assert_eq!(l.devices, vec![0, 1, 2, 0, 1, 2]);
        assert_eq!(l.slabs, SlabSpec::split(d, 6).unwrap());
    }

    #[test]
    fn subdomains_in_any_order_and_of_any_thickness_become_slabs_along_z() {
        let d = Domain::new([8, 6, 20], [false; 3]);
        let f = LayoutFile {
            subdomain: vec![sub(12, 8, 0, 1), sub(0, 5, 1, 0), sub(5, 7, 0, 0)],
        };
        let l = f.layout(d).unwrap();
        assert_eq!(
            l.slabs.iter().map(|s| s.z.clone()).collect::<Vec<_>>(),
            vec![0..5, 5..12, 12..20]
        );
        assert_eq!(l.ranks, vec![1, 0, 0]);
        assert_eq!(l.devices, vec![0, 0, 1]);
        assert!(l.slabs.iter().all(|s| s.count == 3));
    }

    #[test]
    fn subdomains_cut_along_x_y_and_z_become_a_grid_in_subdomain_order() {
        let d = Domain::new([8, 6, 20], [true, false, false]);
        let mut subs = Vec::new();
        // 2 x 1 x 2, listed in another order, with ranks by z.
        for (z, nz) in [(12, 8), (0, 12)] {
            for (x, nx) in [(3, 5), (0, 3)] {
                subs.push(Subdomain {
                    origin: [x, 0, z],
                    size: [nx, 6, nz],
                    rank: usize::from(z > 0),
                    device: usize::from(x > 0),
                });
            }
        }
        let l = LayoutFile { subdomain: subs }.layout(d).unwrap();
        let boxes: Vec<_> = l.slabs.iter().map(|s| (s.x.clone(), s.z.clone())).collect();
        assert_eq!(
            boxes,
            vec![(0..3, 0..12), (3..8, 0..12), (0..3, 12..20), (3..8, 12..20)]
        );
        assert_eq!(l.ranks, vec![0, 0, 1, 1]);
        assert_eq!(l.devices, vec![0, 1, 0, 1]);
        assert!(l.slabs.iter().all(|s| s.grid == [2, 1, 2] && s.count == 4));
        assert_eq!(l.slabs[3].at, [1, 0, 1]);
    }

    #[test]
    fn a_layout_that_does_not_tile_the_domain_is_refused_naming_the_option() {
        let d = Domain::new([8, 6, 20], [false; 3]);
        let refuse = |subs: Vec<Subdomain>| {
            LayoutFile { subdomain: subs }
                .layout(d)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            refuse(vec![sub(0, 5, 0, 0), sub(7, 13, 0, 0)]),
            "--layout: planes z 5..7 are in no subdomain"
        );
        assert_eq!(
            refuse(vec![sub(0, 15, 0, 0)]),
            "--layout: planes z 15..20 are in no subdomain"
        );
        assert!(refuse(vec![sub(0, 10, 0, 0), sub(8, 12, 1, 0)]).contains("overlaps"));
        assert!(refuse(vec![sub(0, 10, 0, 0), sub(10, 12, 1, 0)]).contains("beyond the domain"));
        let mut cut = sub(0, 20, 0, 0);
        cut.size[0] = 4;
        assert_eq!(
            refuse(vec![cut.clone()]),
            "--layout: nodes x 4..8, y 0..6, z 0..20 are in no subdomain"
        );
        // Cuts that do not run through the whole domain.
        let mut low = cut;
        low.size[2] = 10;
        let mut right = low.clone();
        right.origin[0] = 4;
        let top = sub(10, 10, 0, 0);
        assert!(refuse(vec![low.clone(), right.clone(), top]).contains("must form a grid"));
        assert!(refuse(vec![low.clone(), right.clone(), low, right]).contains("overlaps"));
        assert_eq!(
            refuse(vec![sub(0, 10, 0, 0), sub(10, 10, 2, 0)]),
            "--layout: rank 1 holds no subdomain (ranks 0 to 2 are named)"
        );
        assert_eq!(refuse(vec![]), "--layout: no [[subdomain]]");
        assert!(refuse(vec![sub(0, 0, 0, 0)]).contains("an empty size"));
    }
}
