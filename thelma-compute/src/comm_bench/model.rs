//! The communication model of TheLMA (Obrecht et al. 2011, §6), for a cubic domain of edge ℓ cut
//! into `i` slabs along one axis.
//!
//! Definitions used throughout:
//! - `D`, bytes per interface node and direction: the 5 populations that cross a face, `5 × 4 = 20`
//!   bytes in single precision (40 in double).
//! - One step moves `2 · n_if · ℓ² · D` bytes, `n_if` interfaces (`i − 1` in a chain, `i` in a ring),
//!   each crossed in both directions.
//! - `T`, the aggregate exchange throughput of all links together (bytes/s), as the benchmark
//!   measures it with `i` devices.
//! - Communication-bound performance: the step cannot take less than the exchange, so
//!   `P = T · ℓ³ / (2 · n_if · ℓ² · D) = T · ℓ / (2 (i − 1) D)` nodes per second in a chain.
//! - Throughput needed for 100 % parallel efficiency (the paper's Tables 1–2): with perfect scaling a
//!   step on `i` devices takes `t₁ / i`, `t₁` the single-device kernel time per step of the whole
//!   domain (`t₁ = ℓ³ / P₁`, `P₁` its node updates per second); the exchange must fit in it:
//!   `T_req = 2 · n_if · ℓ² · D · i / t₁`.

use super::graph::Topology;

/// Populations crossing one interface per node and direction in D3Q19.
pub const CROSSING_POPULATIONS: usize = 5;

/// `D`: bytes per interface node and direction for populations of `value_bytes` bytes.
pub fn bytes_per_node(value_bytes: usize) -> f64 {
    (CROSSING_POPULATIONS * value_bytes) as f64
}

/// Bytes exchanged per step by `devices` slabs of an ℓ³ domain (`edge` = ℓ), both directions of
/// every interface.
pub fn bytes_per_step(edge: usize, devices: usize, topology: Topology, d: f64) -> f64 {
    let e = edge as f64;
    2.0 * topology.interfaces(devices) as f64 * e * e * d
}

/// Single-device kernel time per step (seconds) of an ℓ³ domain run at `mlups`.
pub fn kernel_time_from_mlups(edge: usize, mlups: f64) -> f64 {
    (edge as f64).powi(3) / (mlups * 1e6)
}

/// Single-device performance (MLUPS) of an ℓ³ domain whose step takes `seconds`.
pub fn mlups_from_kernel_time(edge: usize, seconds: f64) -> f64 {
    (edge as f64).powi(3) / seconds / 1e6
}

/// Aggregate throughput (bytes/s) the exchange needs for 100 % efficiency on `devices` devices,
/// given the single-device kernel time per step `single_step_s` of the whole domain.
pub fn required_throughput(
    edge: usize,
    devices: usize,
    topology: Topology,
    d: f64,
    single_step_s: f64,
) -> f64 {
    bytes_per_step(edge, devices, topology, d) * devices as f64 / single_step_s
}

/// The communication-bound performance (MLUPS) at aggregate throughput `throughput` (bytes/s);
/// `None` where no interface is crossed (one device in a chain).
pub fn comm_bound_mlups(
    throughput: f64,
    edge: usize,
    devices: usize,
    topology: Topology,
    d: f64,
) -> Option<f64> {
    let bytes = bytes_per_step(edge, devices, topology, d);
    (bytes > 0.0).then(|| throughput * (edge as f64).powi(3) / bytes / 1e6)
}

/// One row of the model table: what `devices` devices need and what the measured throughput allows.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ModelRow {
    pub devices: usize,
    pub topology: Topology,
    /// Domain edge ℓ.
    pub edge: usize,
    /// Bytes exchanged per step.
    pub bytes_per_step: f64,
    /// Aggregate throughput needed for 100 % efficiency (GB/s), when a kernel time is known.
    pub required_gbs: Option<f64>,
    /// Aggregate throughput measured by the benchmark (GB/s).
    pub measured_gbs: f64,
    /// Communication-bound performance at the measured throughput (MLUPS).
    pub comm_bound_mlups: Option<f64>,
    /// Perfect scaling of the single-device performance, `i · P₁` (MLUPS), when known.
    pub ideal_mlups: Option<f64>,
    /// `min(ideal, communication bound)`: the model's estimate of the solver's performance.
    pub predicted_mlups: Option<f64>,
}

/// The model row for `devices` devices at measured aggregate throughput `measured` (bytes/s), with
/// the single-device kernel time per step when known.
pub fn row(
    edge: usize,
    devices: usize,
    topology: Topology,
    d: f64,
    measured: f64,
    single_step_s: Option<f64>,
) -> ModelRow {
    let bound = comm_bound_mlups(measured, edge, devices, topology, d);
    let ideal = single_step_s.map(|t| devices as f64 * mlups_from_kernel_time(edge, t));
    let predicted = match (ideal, bound) {
        (Some(i), Some(b)) => Some(i.min(b)),
        (Some(i), None) => Some(i),
        _ => None,
    };
    ModelRow {
        devices,
        topology,
        edge,
        bytes_per_step: bytes_per_step(edge, devices, topology, d),
        required_gbs: single_step_s
            .map(|t| required_throughput(edge, devices, topology, d, t) / 1e9),
        measured_gbs: measured / 1e9,
        comm_bound_mlups: bound,
        ideal_mlups: ideal,
        predicted_mlups: predicted,
    }
}

/// A host cluster for the model of 3D partitions: `nodes` hosts of `gpus` GPUs each, one box of
/// the domain per GPU.
///
/// The step of a GPU, as thelma runs it (TheLMA on GPU clusters, with thelma's measured parts):
/// - its kernel updates the box's nodes at `gpu_mlups`;
/// - inside the kernel it stores the populations crossing each face: those for a peer GPU of its
///   host at `link_bps` (all its peer faces together), those for another host into its
///   page-locked outbox at `host_bps`; both overlap the kernel;
/// - the host's messages carry its outboxes over the network (`nic_bps` per direction for the
///   whole host) in one round that costs `latency_s` more (the step exchange and the stop
///   collective).
///
/// With the messages after the step (`THELMA_OVERLAP=0`) the step takes `max(kernel, peer faces,
/// outboxes) + network`. Overlapped, as built (the paper's scheme): the box's boundary layers,
/// which store every crossing population, run beside the interior, and the messages leave once they
/// are done: `max(kernel, max(the layers' kernel, peer faces, outboxes) + network)`. Each figure is the busiest GPU's or host's: one in the middle of its row
/// for the peer faces and the network, one at a host's corner for the outboxes. Every face is
/// taken as coalesced (the paper's reordering of x faces in warp-sized tiles; thelma cuts along z,
/// where faces are coalesced already). Walls on every side: a box or host with neighbours on both
/// sides of an axis has two faces across it, at an end one.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct ClusterSpec {
    /// Hosts.
    pub nodes: usize,
    /// GPUs per host.
    pub gpus: usize,
    /// One GPU's node updates on its box (MLUPS).
    pub gpu_mlups: f64,
    /// One GPU's stores to its peers (bytes/s, all its peer faces at once): `comm-bench`'s link
    /// GB/s over peer memory, where every GPU serves its links together.
    pub link_bps: f64,
    /// One GPU's stores into page-locked host memory (bytes/s): `comm-bench`'s link GB/s over
    /// zero-copy.
    pub host_bps: f64,
    /// A host's network bandwidth, each direction (bytes/s).
    pub nic_bps: f64,
    /// The fixed cost of a step's round of messages (s).
    pub latency_s: f64,
    /// Bytes per stored population.
    pub value_bytes: usize,
}

/// The model of one cut: a host grid times a GPU grid inside each host.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ClusterRow {
    /// Hosts along x, y, z.
    pub node_cut: [usize; 3],
    /// GPUs of a host along x, y, z.
    pub gpu_cut: [usize; 3],
    /// One GPU's box (nodes, x, y, z; fractional where the cut does not divide the domain).
    pub box_size: [f64; 3],
    /// Bytes the busiest host sends per step (its network traffic in each direction).
    pub host_bytes: f64,
    /// Bytes the busiest GPU stores to its host's other GPUs per step (it loads as many).
    pub peer_bytes: f64,
    /// Bytes the busiest GPU stores into its outbox per step.
    pub outbox_bytes: f64,
    /// A GPU's update of its box (s).
    pub kernel_s: f64,
    /// The busiest GPU's stores to its peers (s).
    pub peer_s: f64,
    /// The busiest GPU's stores into its outbox (s).
    pub outbox_s: f64,
    /// The busiest host's round of messages (s).
    pub network_s: f64,
    /// A step with the messages after it (`THELMA_OVERLAP=0`) (s).
    pub step_s: f64,
    /// A step as built: the boundary layers, then the interior's update with the messages
    /// under way (s).
    pub overlapped_s: f64,
    /// The cluster's MLUPS with the messages after each step.
    pub mlups: f64,
    /// `mlups` over `nodes · gpus · gpu_mlups`.
    pub efficiency: f64,
    /// The cluster's MLUPS as built, the messages overlapped.
    pub overlapped_mlups: f64,
    /// `overlapped_mlups` over `nodes · gpus · gpu_mlups`.
    pub overlapped_efficiency: f64,
}

/// Faces across one axis of the busiest of `parts` pieces in a row between walls.
fn faces(parts: usize) -> f64 {
    parts.saturating_sub(1).min(2) as f64
}

/// The divisors of `n`, ascending (trial division up to √n).
fn divisors(n: usize) -> Vec<usize> {
    let (mut low, mut high) = (Vec::new(), Vec::new());
    let mut d = 1;
    while d <= n / d {
        if n.is_multiple_of(d) {
            low.push(d);
            if d * d != n {
                high.push(n / d);
            }
        }
        d += 1;
    }
    low.extend(high.into_iter().rev());
    low
}

/// Every way to write `n` as `a · b · c`, as `[a, b, c]`.
pub fn factorisations(n: usize) -> Vec<[usize; 3]> {
    let mut out = Vec::new();
    for a in divisors(n) {
        for b in divisors(n / a) {
            out.push([a, b, n / a / b]);
        }
    }
    out
}

/// The model of `domain` cut into hosts by `node_cut` and each host's piece into GPUs by `gpu_cut`.
pub fn cluster_row(
    domain: [usize; 3],
    spec: &ClusterSpec,
    node_cut: [usize; 3],
    gpu_cut: [usize; 3],
) -> ClusterRow {
    let d = bytes_per_node(spec.value_bytes);
    let host: [f64; 3] = std::array::from_fn(|a| domain[a] as f64 / node_cut[a] as f64);
    let boxed: [f64; 3] = std::array::from_fn(|a| host[a] / gpu_cut[a] as f64);
    let across = |size: &[f64; 3], a: usize| size[(a + 1) % 3] * size[(a + 2) % 3];
    let host_bytes: f64 = (0..3)
        .map(|a| faces(node_cut[a]) * across(&host, a) * d)
        .sum();
    let peer_bytes: f64 = (0..3)
        .map(|a| faces(gpu_cut[a]) * across(&boxed, a) * d)
        .sum();
    // A GPU at a host's corner: across an axis its host does not cut into GPUs, its box has the
    // host's faces; across one it does, one face at most (the other side is a peer).
    let outbox_bytes: f64 = (0..3)
        .map(|a| {
            let f = faces(node_cut[a]);
            (if gpu_cut[a] == 1 { f } else { f.min(1.0) }) * across(&boxed, a) * d
        })
        .sum();
    let kernel_s = boxed.iter().product::<f64>() / (spec.gpu_mlups * 1e6);
    let peer_s = peer_bytes / spec.link_bps;
    let outbox_s = outbox_bytes / spec.host_bps;
    let network_s = if host_bytes > 0.0 {
        host_bytes / spec.nic_bps + spec.latency_s
    } else {
        0.0
    };
    let inside = kernel_s.max(peer_s).max(outbox_s);
    let step_s = inside + network_s;
    // The boundary layers: a box's planes next to each face it exchanges across (the busiest
    // box's, as for the bytes).
    let interior: f64 = (0..3)
        .map(|a| (boxed[a] - faces(node_cut[a] * gpu_cut[a])).max(0.0))
        .product();
    let faces_s = kernel_s * (1.0 - interior / boxed.iter().product::<f64>());
    let overlapped_s = kernel_s.max(faces_s.max(peer_s).max(outbox_s) + network_s);
    let nodes = domain.iter().map(|&n| n as f64).product::<f64>();
    let ideal = (spec.nodes * spec.gpus) as f64 * spec.gpu_mlups;
    let mlups = nodes / step_s / 1e6;
    let overlapped_mlups = nodes / overlapped_s / 1e6;
    ClusterRow {
        node_cut,
        gpu_cut,
        box_size: boxed,
        host_bytes,
        peer_bytes,
        outbox_bytes,
        kernel_s,
        peer_s,
        outbox_s,
        network_s,
        step_s,
        overlapped_s,
        mlups,
        efficiency: mlups / ideal,
        overlapped_mlups,
        overlapped_efficiency: overlapped_mlups / ideal,
    }
}

/// Partitions by how many axes they cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum CutKind {
    /// Slabs along z only, the engine's partition.
    Slabs,
    /// Cuts along y and z.
    Columns,
    /// Cuts along any axis.
    Boxes,
}

impl CutKind {
    /// Every kind, fewest axes cut first.
    pub const ALL: [CutKind; 3] = [CutKind::Slabs, CutKind::Columns, CutKind::Boxes];

    /// How the table names it.
    pub fn name(self) -> &'static str {
        match self {
            CutKind::Slabs => "1D (z slabs)",
            CutKind::Columns => "2D (y, z)",
            CutKind::Boxes => "3D",
        }
    }

    fn allows(self, cut: [usize; 3]) -> bool {
        match self {
            CutKind::Slabs => cut[0] == 1 && cut[1] == 1,
            CutKind::Columns => cut[0] == 1,
            CutKind::Boxes => true,
        }
    }
}

/// The fastest cut of `kind` as built (the messages overlapped), ties going to fewer bytes on the
/// network, then to the faster step with the messages after it, then to less peer time: over
/// every host grid and GPU grid whose pieces are at least one node thick.
pub fn best_cut(domain: [usize; 3], spec: &ClusterSpec, kind: CutKind) -> Option<ClusterRow> {
    let mut best: Option<ClusterRow> = None;
    for n in factorisations(spec.nodes) {
        for g in factorisations(spec.gpus) {
            let total: [usize; 3] = std::array::from_fn(|a| n[a] * g[a]);
            if !kind.allows(total) || (0..3).any(|a| total[a] > domain[a]) {
                continue;
            }
            let r = cluster_row(domain, spec, n, g);
            let key = |r: &ClusterRow| (r.overlapped_s, r.host_bytes, r.step_s, r.peer_s);
            let better = best.as_ref().is_none_or(|b| key(&r) < key(b));
            if better {
                best = Some(r);
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "{a} != {b}");
    }

    #[test]
    fn bytes_per_node_is_five_populations() {
        assert_eq!(bytes_per_node(4), 20.0);
        assert_eq!(bytes_per_node(8), 40.0);
    }

    #[test]
    fn the_communication_bound_matches_the_papers_formula_by_hand() {
        // ℓ = 192, i = 4 in a chain, D = 20 B, T = 6 GB/s:
        // P = 6e9 · 192 / (2 · 3 · 20) = 9.6e9 nodes/s = 9,600 MLUPS.
        close(
            comm_bound_mlups(6e9, 192, 4, Topology::Linear, 20.0).unwrap(),
            9600.0,
        );
        // The ring crosses i interfaces instead of i − 1: 6e9 · 192 / (2 · 4 · 20) = 7,200 MLUPS.
        close(
            comm_bound_mlups(6e9, 192, 4, Topology::Circular, 20.0).unwrap(),
            7200.0,
        );
        assert_eq!(comm_bound_mlups(6e9, 192, 1, Topology::Linear, 20.0), None);
        // One device in a ring still exchanges with itself: 6e9 · 192 / (2 · 1 · 20) = 28,800.
        close(
            comm_bound_mlups(6e9, 192, 1, Topology::Circular, 20.0).unwrap(),
            28800.0,
        );
    }

    #[test]
    fn the_required_throughput_matches_a_hand_computation() {
        // ℓ = 256, P₁ = 20,000 MLUPS → t₁ = 256³ / 2e10 = 838.8608 µs per step.
        let t1 = kernel_time_from_mlups(256, 20_000.0);
        close(t1, 16_777_216.0 / 2e10);
        close(mlups_from_kernel_time(256, t1), 20_000.0);
        // 2 GPUs in a chain: one interface, 2 · 256² · 20 = 2,621,440 B per step, in t₁ / 2:
        // 2,621,440 · 2 / 838.8608e-6 = 6.25e9 B/s.
        close(
            required_throughput(256, 2, Topology::Linear, 20.0, t1),
            6.25e9,
        );
        // 4 GPUs: 3 interfaces, 7,864,320 B per step in t₁ / 4 → 37.5e9 B/s.
        close(
            required_throughput(256, 4, Topology::Linear, 20.0, t1),
            37.5e9,
        );
    }

    #[test]
    fn the_prediction_is_the_lesser_of_ideal_scaling_and_the_bound() {
        let t1 = kernel_time_from_mlups(192, 10_000.0);
        // Throughput far above the need: ideal scaling, 4 · 10,000.
        let r = row(192, 4, Topology::Linear, 20.0, 1e12, Some(t1));
        close(r.ideal_mlups.unwrap(), 40_000.0);
        close(r.predicted_mlups.unwrap(), 40_000.0);
        // Throughput of exactly half the requirement: the bound is half the ideal.
        let need = required_throughput(192, 4, Topology::Linear, 20.0, t1);
        let r = row(192, 4, Topology::Linear, 20.0, need / 2.0, Some(t1));
        close(r.comm_bound_mlups.unwrap(), 20_000.0);
        close(r.predicted_mlups.unwrap(), 20_000.0);
        close(r.required_gbs.unwrap(), need / 1e9);
        // Without a kernel time there is only the bound.
        let r = row(192, 4, Topology::Linear, 20.0, 6e9, None);
        assert_eq!(
            (r.required_gbs, r.ideal_mlups, r.predicted_mlups),
            (None, None, None)
        );
        close(r.comm_bound_mlups.unwrap(), 9600.0);
    }

    fn spec() -> ClusterSpec {
        ClusterSpec {
            nodes: 8,
            gpus: 8,
            gpu_mlups: 20_000.0,
            link_bps: 100e9,
            host_bps: 25e9,
            nic_bps: 50e9,
            latency_s: 10e-6,
            value_bytes: 4,
        }
    }

    #[test]
    fn factorisations_are_every_ordered_triple() {
        assert_eq!(divisors(36), [1, 2, 3, 4, 6, 9, 12, 18, 36]);
        assert_eq!(divisors(1), [1]);
        assert_eq!(factorisations(12).len(), 18);
        let f = factorisations(8);
        assert_eq!(f.len(), 10);
        assert!(f.iter().all(|t| t.iter().product::<usize>() == 8));
        assert!(f.contains(&[2, 2, 2]) && f.contains(&[1, 1, 8]) && f.contains(&[8, 1, 1]));
        assert_eq!(factorisations(1), vec![[1, 1, 1]]);
    }

    #[test]
    fn a_cluster_row_matches_a_hand_computation() {
        let s = spec();
        // 1024³ in z slabs: hosts 1 × 1 × 8, GPUs 1 × 1 × 8, boxes 1024 × 1024 × 16.
        let r = cluster_row([1024; 3], &s, [1, 1, 8], [1, 1, 8]);
        assert_eq!(r.box_size, [1024.0, 1024.0, 16.0]);
        // An interior host sends two faces of 1024² nodes, 20 B each: 41,943,040 B.
        close(r.host_bytes, 41_943_040.0);
        // An interior GPU stores two faces for its peers; the host's end GPU one into its outbox.
        close(r.peer_bytes, 41_943_040.0);
        close(r.outbox_bytes, 20_971_520.0);
        // 16,777,216 nodes at 2e10 per second; the stores and the network at their rates.
        close(r.kernel_s, 838.8608e-6);
        close(r.peer_s, 419.4304e-6);
        close(r.outbox_s, 838.8608e-6);
        close(r.network_s, 838.8608e-6 + 10e-6);
        close(r.step_s, 838.8608e-6 * 2.0 + 10e-6);
        // Overlapped: the two boundary planes of 16 (104.9 µs of kernel) are done when the outbox's
        // stores are, and the network comes after them: nothing gained here.
        close(r.overlapped_s, 838.8608e-6 + 848.8608e-6);
        close(r.mlups, 1024f64.powi(3) / r.step_s / 1e6);
        close(r.efficiency, r.mlups / (64.0 * 20_000.0));

        // 2 × 2 × 2 hosts of 1 × 2 × 4 GPUs: boxes 512 × 256 × 128. A host sends one face per
        // axis: 512² · 20 B three times.
        let r = cluster_row([1024; 3], &s, [2, 2, 2], [1, 2, 4]);
        assert_eq!(r.box_size, [512.0, 256.0, 128.0]);
        close(r.host_bytes, 3.0 * 512.0 * 512.0 * 20.0);
        // Peer faces: one across y (512 × 128) and two across z (512 × 256).
        close(r.peer_bytes, (512.0 * 128.0 + 2.0 * 512.0 * 256.0) * 20.0);
        // A corner GPU's outbox: one face across each axis, x (256 × 128), y (512 × 128) and z
        // (512 × 256).
        close(
            r.outbox_bytes,
            (256.0 * 128.0 + 512.0 * 128.0 + 512.0 * 256.0) * 20.0,
        );
        // After the step: the outbox's 183.5 µs inside the kernel's 838.9, then the network's
        // 314.6 + 10 µs. Overlapped: the boundary layers (one plane across x, two across y and z:
        // 512·256·128 − 511·254·126 nodes, 21.2 µs) are done with the outbox, and the network
        // after them ends within the kernel.
        close(r.step_s, 838.8608e-6 + 324.5728e-6);
        close(r.overlapped_s, 838.8608e-6);
        let layers: f64 = (512.0 * 256.0 * 128.0 - 511.0 * 254.0 * 126.0) / 2e10;
        assert!(layers.max(183.5008e-6) + 324.5728e-6 < 838.8608e-6);

        // One host exchanges nothing over the network.
        let one = ClusterSpec { nodes: 1, ..s };
        let r = cluster_row([256; 3], &one, [1, 1, 1], [1, 1, 8]);
        assert_eq!((r.host_bytes, r.network_s, r.outbox_s), (0.0, 0.0, 0.0));
    }

    #[test]
    fn cubes_win_over_slabs_when_the_network_bounds_the_step() {
        let s = spec();
        let slabs = best_cut([1024; 3], &s, CutKind::Slabs).unwrap();
        let boxes = best_cut([1024; 3], &s, CutKind::Boxes).unwrap();
        assert_eq!(slabs.node_cut, [1, 1, 8]);
        // A cube of hosts sends the fewest bytes: 2 × 2 × 2 hosts, one face per axis.
        assert_eq!(boxes.node_cut, [2, 2, 2]);
        assert!(boxes.host_bytes < slabs.host_bytes / 2.0);
        assert!(boxes.mlups > slabs.mlups);
        // Columns lie between.
        let columns = best_cut([1024; 3], &s, CutKind::Columns).unwrap();
        assert!(columns.mlups >= slabs.mlups && columns.mlups <= boxes.mlups);
        // A domain too thin to cut 64 ways along z has no slab partition.
        assert!(best_cut([1024, 1024, 32], &s, CutKind::Slabs).is_none());
    }
}
