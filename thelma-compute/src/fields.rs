//! The macroscopic fields and the watchdog's figures from a slab's populations, computed the same
//! way by every module that reads its lattice back to the host.

use rayon::prelude::*;
use thelma_core::physics::d3q19::Q;
use thelma_core::physics::{equilibrium, stored_macroscopic, Arith};
use thelma_core::InitialState;
use thelma_core::SlabSpec;
use thelma_core::{plane_axes, ChangeSums, ComputeError, Fields, Health, MeanSums, PlaneFields};
use thelma_core::{Real, Stored};

/// The shifted populations `[i][z][y][x]` of a slab starting at the equilibrium of `init`'s state
/// at every node (solid nodes too: they are never updated, and the value is harmless).
pub(crate) fn initial_populations<T: Real + Arith<Scalar = T>, S: Stored<Arith = T>>(
    slab: &SlabSpec,
    init: &InitialState,
) -> Result<Vec<S>, ComputeError> {
    let (nx, ny, nz) = (slab.nx(), slab.ny(), slab.nz());
    let n = slab.nodes();
    let mut g = vec![S::default(); Q * n];
    for z in 0..nz {
        for y in 0..ny {
            for x in 0..nx {
                let (drho, u) = init
                    .check(slab.x.start + x, slab.y.start + y, slab.z.start + z)
                    .map_err(|e| ComputeError::Invalid(format!("initial: {}", e.message)))?;
                let geq = equilibrium(T::of(drho), u.map(T::of));
                let p = (z * ny + y) * nx + x;
                for i in 0..Q {
                    g[i * n + p] = S::store(geq[i]);
                }
            }
        }
    }
    Ok(g)
}

/// Zero fields over `slab`'s nodes, at its place in the domain.
fn zero_fields(slab: &SlabSpec) -> Fields {
    let mut f = Fields::zeros(slab.size(), slab.z.start);
    f.xy0 = [slab.x.start, slab.y.start];
    f
}

/// The running sums of a slab's time average before its first sample: zeros over the slab's
/// nodes (θ's too with a temperature lattice), its solid nodes marked.
pub(crate) fn no_means(slab: &SlabSpec, solid: impl Fn(usize) -> bool, thermal: bool) -> MeanSums {
    let mut f = zero_fields(slab);
    for (p, s) in f.solid.iter_mut().enumerate() {
        *s = solid(p);
    }
    if thermal {
        f.temperature = vec![0.0; slab.nodes()];
    }
    MeanSums {
        samples: 0,
        sums: f,
    }
}

/// Refuses running sums of a time average that do not fit `slab` (with a temperature lattice's
/// θ where `thermal`): a restart's checkpoint of another case.
pub(crate) fn check_mean_shape(
    slab: &SlabSpec,
    thermal: bool,
    got: &MeanSums,
) -> Result<(), ComputeError> {
    let b = &got.sums;
    let size = [slab.nx(), slab.ny(), slab.nz()];
    let theta = if thermal { slab.nodes() } else { 0 };
    if b.size != size
        || b.z0 != slab.z.start
        || b.xy0 != [slab.x.start, slab.y.start]
        || b.temperature.len() != theta
    {
        return Err(ComputeError::Invalid(format!(
            "time-average sums of a slab {:?} at z {} (θ: {}) for a slab {size:?} at z {} (θ: {thermal})",
            b.size,
            b.z0,
            !b.temperature.is_empty(),
            slab.z.start,
        )));
    }
    Ok(())
}

/// ρ and u of every node of a slab from its shifted populations `g` (`[i][z][y][x]`), solid nodes
/// marked. The density is `1 + δρ` summed in f64, so small density changes keep their digits; the
/// velocity is the one node p collided with, `(j + F/2)/ρ` under its force `force(p)` (the uniform
/// body force, or with a temperature lattice the coupled force at its θ), from the stored momentum
/// `j + F` ([`stored_macroscopic`]). Nodes are independent, so runs
/// of them are computed on rayon's threads: every run reads its fields at its start and its end,
/// and that time is the run's wall time beyond its steps.
pub(crate) fn fields_from_populations<T: Real + Arith<Scalar = T>, S: Stored<Arith = T>>(
    slab: &SlabSpec,
    g: &[S],
    solid: impl Fn(usize) -> bool + Sync,
    force: impl Fn(usize) -> Option<[T; 3]> + Sync,
) -> Fields {
    const RUN: usize = 4096;
    let n = slab.nodes();
    let mut out = zero_fields(slab);
    out.rho
        .par_chunks_mut(RUN)
        .zip(out.ux.par_chunks_mut(RUN))
        .zip(out.uy.par_chunks_mut(RUN))
        .zip(out.uz.par_chunks_mut(RUN))
        .zip(out.solid.par_chunks_mut(RUN))
        .enumerate()
        .for_each(|(k, ((((rho, ux), uy), uz), sol))| {
            for j in 0..rho.len() {
                let p = k * RUN + j;
                if solid(p) {
                    sol[j] = true;
                    continue;
                }
                let node: [T; Q] = std::array::from_fn(|i| g[i * n + p].load());
                let m = stored_macroscopic(&node, force(p));
                rho[j] = 1.0 + m.drho.to_f64();
                ux[j] = m.u[0].to_f64();
                uy[j] = m.u[1].to_f64();
                uz[j] = m.u[2].to_f64();
            }
        });
    out
}

/// The slab-local nodes of the plane `axis = index` (slab-local), in [`PlaneFields`] order: the
/// plane's first axis fastest.
pub(crate) fn plane_nodes(slab: &SlabSpec, axis: usize, index: usize) -> ([usize; 2], Vec<usize>) {
    let size = [slab.nx(), slab.ny(), slab.nz()];
    let [a, b] = plane_axes(axis);
    let mut nodes = Vec::with_capacity(size[a] * size[b]);
    for j in 0..size[b] {
        for i in 0..size[a] {
            let mut c = [0; 3];
            c[axis] = index;
            c[a] = i;
            c[b] = j;
            nodes.push((c[2] * size[1] + c[1]) * size[0] + c[0]);
        }
    }
    ([size[a], size[b]], nodes)
}

/// The plane `axis = index` (slab-local) of a slab from its shifted populations `g`, each node as
/// [`fields_from_populations`] computes it, rounded to `f32`; θ from `theta` where given. The nodes
/// are shared out over the threads of the rayon pool it runs in (each node's values depend on that
/// node alone): a plane taken between two runs of steps holds every thread of the run up.
pub(crate) fn plane_from_populations<T: Real + Arith<Scalar = T>, S: Stored<Arith = T>>(
    slab: &SlabSpec,
    g: &[S],
    (axis, index): (usize, usize),
    solid: impl Fn(usize) -> bool + Sync,
    force: impl Fn(usize) -> Option<[T; 3]> + Sync,
    theta: Option<&(dyn Fn(usize) -> f64 + Sync)>,
) -> Result<PlaneFields, ComputeError> {
    let size = [slab.nx(), slab.ny(), slab.nz()];
    if axis > 2 || index >= size[axis] {
        return Err(ComputeError::Invalid(format!(
            "plane {} = {index} outside a slab of {size:?} nodes",
            ["x", "y", "z"].get(axis).unwrap_or(&"?")
        )));
    }
    let n = slab.nodes();
    let (dims, nodes) = plane_nodes(slab, axis, index);
    // Per node: ρ, u, whether solid, θ (0 without `theta`).
    let values: Vec<([f32; 5], bool)> = nodes
        .par_iter()
        .with_min_len(256)
        .map(|&p| {
            let s = solid(p);
            let (rho, u) = if s {
                (0.0, [0.0; 3])
            } else {
                let node: [T; Q] = std::array::from_fn(|i| g[i * n + p].load());
                let m = stored_macroscopic(&node, force(p));
                (1.0 + m.drho.to_f64(), m.u.map(|v| v.to_f64()))
            };
            let t = match theta {
                Some(theta) if !s => theta(p) as f32,
                _ => 0.0,
            };
            ([rho as f32, u[0] as f32, u[1] as f32, u[2] as f32, t], s)
        })
        .collect();
    let mut out = PlaneFields {
        axis,
        size: dims,
        ..PlaneFields::default()
    };
    for ([rho, ux, uy, uz, t], s) in values {
        out.rho.push(rho);
        out.ux.push(ux);
        out.uy.push(uy);
        out.uz.push(uz);
        out.solid.push(s);
        if theta.is_some() {
            out.temperature.push(t);
        }
    }
    Ok(out)
}

/// The convergence measure of a slab's shifted populations `g`: over its fluid nodes, Σ |u − u_prev|²
/// and Σ |u|² in f64, node after node in the order and form of `thelma_results::relative_change`, with
/// u computed as [`fields_from_populations`] computes it. `prev` holds u_prev (x, y, z per node, in
/// the run's precision, which holds u exactly) when `compare`; it receives u. Without `compare` the
/// change is 0.
pub(crate) fn velocity_change_of_populations<T: Real + Arith<Scalar = T>, S: Stored<Arith = T>>(
    slab: &SlabSpec,
    g: &[S],
    solid: impl Fn(usize) -> bool,
    force: Option<[f64; 3]>,
    prev: &mut [T],
    compare: bool,
) -> ChangeSums {
    let n = slab.nodes();
    debug_assert_eq!(prev.len(), 3 * n);
    let force = force.map(|f| f.map(T::of));
    let mut sums = ChangeSums::default();
    for p in 0..n {
        if solid(p) {
            continue;
        }
        let node: [T; Q] = std::array::from_fn(|i| g[i * n + p].load());
        let now = stored_macroscopic(&node, force).u;
        let u = [now[0].to_f64(), now[1].to_f64(), now[2].to_f64()];
        let was = &mut prev[3 * p..3 * p + 3];
        if compare {
            let d = [
                u[0] - was[0].to_f64(),
                u[1] - was[1].to_f64(),
                u[2] - was[2].to_f64(),
            ];
            sums.diff += d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
        }
        sums.norm += u[0] * u[0] + u[1] * u[1] + u[2] * u[2];
        was.copy_from_slice(&now);
    }
    sums
}

/// The watchdog's check of shifted populations: the first fluid node with a non-finite value and the
/// fluid density range, summed in f64 (the CUDA module's reduction kernel does the same on the device).
pub(crate) fn health_of_populations<S: Stored>(
    slab: &SlabSpec,
    g: &[S],
    solid: impl Fn(usize) -> bool,
) -> Health {
    let (nx, ny) = (slab.nx(), slab.ny());
    let n = slab.nodes();
    let mut h = Health {
        non_finite: None,
        rho_min: f64::INFINITY,
        rho_max: f64::NEG_INFINITY,
    };
    for p in 0..n {
        if solid(p) {
            continue;
        }
        let mut drho = 0.0;
        let mut finite = true;
        for i in 0..Q {
            let v = g[i * n + p].load().to_f64();
            finite &= v.is_finite();
            drho += v;
        }
        if !finite && h.non_finite.is_none() {
            h.non_finite = Some([
                slab.x.start + p % nx,
                slab.y.start + (p / nx) % ny,
                slab.z.start + p / (nx * ny),
            ]);
        }
        if finite {
            h.rho_min = h.rho_min.min(1.0 + drho);
            h.rho_max = h.rho_max.max(1.0 + drho);
        }
    }
    h
}
