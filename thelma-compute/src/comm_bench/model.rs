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
}
