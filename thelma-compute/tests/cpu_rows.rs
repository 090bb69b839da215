//! The CPU module's vectorised step against a plain node-by-node pull written from the definition,
//! on one slab and on several linked by interfaces, on every bundle width this CPU runs.
//!
//! An integration test, not a unit test: it reaches the rows through [`CpuFactory`], compiled once
//! in the library, so that no unit-test build of thelma-compute compiles every row a second time
//! (they are most of a clean build).

use std::sync::Arc;

use thelma_compute::{wide_rows_available, CpuFactory, ModelParams};
use thelma_core::physics::d3q19::{C, OPP, Q, W};
use thelma_core::physics::{
    absorb, dispatch, node_density, pressure_terms, Arith, Coefficients, CollisionOperator,
    OperatorVisitor, Sponges,
};
use thelma_core::physics::{Collision, FlowModel, SpongeLayer};
use thelma_core::Domain;
use thelma_core::{ComputeModule, Half12, Links, Real, ScaledHalf, SlabSpec, Stored, Streaming};
use thelma_core::{Face, Obstacle};
use thelma_core::{ModuleFactory, Transport};
use thelma_geometry::LinkRule;
use thelma_geometry::{Geometry, OpenKind};

/// One step of the pull scheme, node by node, on the whole domain: the definition the CPU module
/// must reproduce bit for bit.
fn naive_step<T: Real + Arith<Scalar = T>>(
    g: &Geometry,
    model: &FlowModel,
    sponges: &Sponges,
    a: &[T],
) -> Vec<T> {
    struct Collide<'a, T: Real>(&'a FlowModel, &'a mut [T; Q]);
    impl<T: Real + Arith<Scalar = T>> OperatorVisitor for Collide<'_, T> {
        type Output = ();
        fn visit<O: CollisionOperator>(self) {
            let k = Coefficients::new(self.0, |_, x| T::of(x));
            O::collide(self.1, &k, self.0.force.map(|f| f.map(T::of)));
        }
    }
    let [nx, ny, nz] = g.domain.size;
    let n = nx * ny * nz;
    let flags = g.slab(0..nz).unwrap();
    let mut b = vec![T::zero(); Q * n];
    for z in 0..nz {
        for y in 0..ny {
            for x in 0..nx {
                let p = (z * ny + y) * nx + x;
                let fl = flags.get(x, y, z);
                if fl.is_solid() {
                    for i in 0..Q {
                        b[i * n + p] = a[i * n + p];
                    }
                    continue;
                }
                let k = flags.palette.flags.iter().position(|&f| f == fl).unwrap();
                let node: [T; Q] = std::array::from_fn(|j| a[j * n + p]);
                // Population j at (x, y, z) + d, wrapped (only periodic axes wrap in practice).
                let at = |j: usize, d: [i64; 3]| {
                    let s: Vec<usize> = (0..3)
                        .map(|a| {
                            ([x, y, z][a] as i64 + d[a]).rem_euclid(g.domain.size[a] as i64)
                                as usize
                        })
                        .collect();
                    a[j * n + (s[2] * ny + s[1]) * nx + s[0]]
                };
                let mut f = [T::zero(); Q];
                for i in 0..Q {
                    let term = T::of(flags.palette.moving_term[k][i]);
                    f[i] = match flags.palette.links[k][i] {
                        LinkRule::Bounce => node[OPP[i]] + term,
                        LinkRule::AntiBounce { .. } => {
                            -node[OPP[i]] + pressure_terms(&node, term)[(i - 1) / 2]
                        }
                        LinkRule::Shift { dir, offset } => at(dir, offset.map(i64::from)),
                        LinkRule::Inlet => node[OPP[i]] + node_density(&node) * term,
                        LinkRule::Pull => at(i, C[i].map(|c| -c as i64)),
                    };
                }
                dispatch(model.collision, Collide(model, &mut f));
                if let Some(a) = sponges.at::<T>([x, y, z]) {
                    absorb(&mut f, &a);
                }
                for i in 0..Q {
                    b[i * n + p] = f[i];
                }
            }
        }
    }
    b
}

/// The bundle widths this CPU can run: the portable one, and the AVX-512 one where available.
fn widths() -> Vec<bool> {
    let mut w = vec![false];
    if wide_rows_available() {
        w.push(true);
    }
    w
}

/// A module's populations as values (copied, so the byte buffer's alignment does not matter).
fn populations<T: Real, S: Stored<Arith = T>>(m: &mut dyn ComputeModule) -> Vec<T> {
    let bytes = m.read_populations().unwrap();
    bytemuck::pod_collect_to_vec::<u8, S>(&bytes)
        .into_iter()
        .map(S::load)
        .collect()
}

/// `v` as the storage `S` holds it.
fn rounded<T: Real, S: Stored<Arith = T>>(v: Vec<T>) -> Vec<T> {
    v.into_iter().map(|x| S::store(x).load()).collect()
}

/// Small and odd shapes (nx below, at and around a bundle; one-plane slabs) and rows long enough
/// for whole bundles beside an obstacle; every combination of periodic and walled axes; 1–3 slabs
/// linked by interfaces as the runtime links them; f32, f64 and f16 storage (the definition's
/// values rounded to the storage after every step) on every width this CPU runs.
#[test]
fn the_vectorised_step_equals_the_node_by_node_definition() {
    vectorised_step_equals_the_definition::<f32, f32>();
    vectorised_step_equals_the_definition::<f64, f64>();
    vectorised_step_equals_the_definition::<f32, ScaledHalf>();
    vectorised_step_equals_the_definition::<f32, Half12>();
}

fn vectorised_step_equals_the_definition<T: Real + Arith<Scalar = T>, S: Stored<Arith = T>>() {
    let small = [1usize, 2, 3, 8, 9, 15, 16, 17, 31, 32, 33]
        .into_iter()
        .flat_map(|nx| (1..=3).flat_map(move |ny| (1..=4).map(move |nz| [nx, ny, nz])));
    let long = [7, 33, 64, 70].map(|nx| [nx, 5, 6]);
    for [nx, ny, nz] in small.chain(long) {
        for axes in 0..8u32 {
            let periodic = [axes & 1 != 0, axes & 2 != 0, axes & 4 != 0];
            // Every operator, plain and with the eddy viscosity and a force (the EXTRA loop).
            let collision = [Collision::MRT, Collision::BGK, Collision::TRT][axes as usize % 3];
            let mut model = FlowModel::plain(collision, 1.3);
            if axes % 2 == 1 {
                model.smagorinsky = Some(0.15);
                model.force = Some([1e-4, -2e-4, 3e-4]);
            }
            let domain = Domain::new([nx, ny, nz], periodic);
            let sphere = Obstacle::Sphere {
                centre: [nx as f64 / 2.0, ny as f64 / 2.0, nz as f64 / 2.0],
                radius: if ny >= 5 { 1.6 } else { 1.1 },
            };
            let mut g = if periodic[2] || !periodic[0] {
                Geometry::closed_box(domain).with_obstacle(sphere)
            } else {
                Geometry::cavity(domain, 0.08).with_obstacle(sphere)
            };
            // Open faces wherever an axis is walled: an inlet on x− with a pressure outlet or
            // an outflow on x+, a free-slip y+, an outflow z−.
            let mut sponges = Sponges::default();
            if !periodic[0] {
                let out = if nx % 2 == 0 {
                    OpenKind::Pressure { drho: 0.01 }
                } else {
                    OpenKind::Outflow
                };
                g = g
                    .with_moving_wall(Face::XMinus, [0.04, 0.01, -0.01])
                    .unwrap()
                    .with_open_face(Face::XPlus, out)
                    .unwrap();
                // The pressure outlet's sponge layer, over several bundles where the row
                // is long enough.
                if nx % 2 == 0 && nx >= 4 {
                    sponges.layers.push(SpongeLayer {
                        face: Face::XPlus,
                        width: (nx / 2).min(20),
                        strength: 0.7,
                        drho: 0.01,
                        extent: nx,
                    });
                }
            }
            if !periodic[1] && ny > 1 {
                g = g.with_open_face(Face::YPlus, OpenKind::FreeSlip).unwrap();
            }
            if !periodic[2] && nz % 2 == 0 {
                g = g.with_open_face(Face::ZMinus, OpenKind::Outflow).unwrap();
            }
            let params = ModelParams {
                geometry: Arc::new(g.clone()),
                model: model.clone(),
                precision: S::PRECISION,
                streaming: Streaming::TwoLattice,
                initial: None,
                inlets: Arc::new(thelma_core::InletSchedule::constant_one()),
                thermal: None,
                steered_temperatures: false,
                sponges: sponges.clone(),
                immersed: false,
                overlapped_steps: false,
            };
            let n = nx * ny * nz;
            let mut seed = 0x2545_f491_4f6c_dd1du64 ^ (nx * 131 + ny * 17 + nz) as u64;
            let mut next = || {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (seed >> 40) as f64 / (1u64 << 24) as f64
            };
            // Shifted populations of a disturbed state (f = w (0.8 … 1.2)).
            let a: Vec<T> = rounded::<T, S>(
                (0..Q * n)
                    .map(|k| T::of(W[k / n] * (0.4 * next() - 0.2)))
                    .collect(),
            );
            let mut want = a.clone();
            for _ in 0..3 {
                want = rounded::<T, S>(naive_step(&g, &model, &sponges, &want));
            }
            // The planes of slab `s` of a whole-domain population array.
            let part = |v: &[T], s: &SlabSpec| -> Vec<T> {
                let plane = nx * ny;
                (0..Q)
                    .flat_map(|i| v[i * n + s.z.start * plane..i * n + s.z.end * plane].iter())
                    .copied()
                    .collect()
            };
            for slabs in (1..=3).filter(|&k| k <= nz) {
                for wide in widths() {
                    let specs = SlabSpec::split(domain, slabs).unwrap();
                    // One thread per slab, in the bundles of this width.
                    let factory =
                        CpuFactory::new(params.clone(), slabs, slabs).with_wide_rows(wide);
                    let mut ms: Vec<Box<dyn ComputeModule>> = specs
                        .iter()
                        .map(|s| factory.create(0, s).unwrap())
                        .collect();
                    // Slab s reads the channels it allocates; periodic z closes the ring.
                    let n = slabs;
                    let mut own = |s: usize, side: usize, has: bool| {
                        has.then(|| ms[s].allocate_channel(side, Transport::ZeroCopy).unwrap())
                    };
                    let channels: Vec<_> = (0..n)
                        .map(|s| {
                            (
                                own(s, 0, specs[s].has_below()),
                                own(s, 1, specs[s].has_above()),
                            )
                        })
                        .collect();
                    for s in 0..n {
                        let mut links = Links::default();
                        links.reads[0] = channels[s].0.clone();
                        links.reads[1] = channels[s].1.clone();
                        links.writes[1] = channels[(s + 1) % n]
                            .0
                            .clone()
                            .filter(|_| specs[s].has_above());
                        links.writes[0] = channels[(s + n - 1) % n]
                            .1
                            .clone()
                            .filter(|_| specs[s].has_below());
                        ms[s].attach(links).unwrap();
                    }
                    for (m, spec) in ms.iter_mut().zip(&specs) {
                        let stored: Vec<S> = part(&a, spec).into_iter().map(S::store).collect();
                        m.write_populations(bytemuck::cast_slice(&stored), 0)
                            .unwrap();
                    }
                    for t in 0..3 {
                        for m in ms.iter_mut() {
                            m.step(t).unwrap();
                        }
                    }
                    for (s, (m, spec)) in ms.iter_mut().zip(&specs).enumerate() {
                        let got = populations::<T, S>(m.as_mut());
                        let bad = got.iter().zip(&part(&want, spec)).position(|(g, w)| {
                            Real::to_f64(*g).to_bits() != Real::to_f64(*w).to_bits()
                        });
                        assert!(
                            bad.is_none(),
                            "{} {nx}x{ny}x{nz}, periodic {periodic:?}, slab {s} of {slabs}, wide {wide}: first difference at value {bad:?}",
                            S::PRECISION.name()
                        );
                    }
                }
            }
        }
    }
}
