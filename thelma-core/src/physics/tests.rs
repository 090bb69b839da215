//! Tests of the collision operators: fixed points, conservation, reductions between operators, a
//! hand-computed node, the force and the eddy viscosity, and the symbolic recording that the CUDA
//! code is printed from, evaluated against the direct call bit for bit.

use proptest::prelude::*;

use super::d3q19::{M, NM, NORM2, Q, W};
use super::*;

fn model(collision: Collision, omega: f64) -> FlowModel {
    FlowModel::plain(collision, omega)
}

fn coefficients<T: crate::Real + Arith<Scalar = T>>(m: &FlowModel) -> Coefficients<T> {
    Coefficients::new(m, |_, x| T::of(x))
}

fn collide_f64(m: &FlowModel, g: &mut [f64; Q]) {
    struct Run<'a>(&'a FlowModel, &'a mut [f64; Q]);
    impl OperatorVisitor for Run<'_> {
        type Output = ();
        fn visit<O: CollisionOperator>(self) {
            let k = coefficients::<f64>(self.0);
            O::collide(self.1, &k, self.0.force);
        }
    }
    dispatch(m.collision, Run(m, g));
}

/// A perturbed shifted equilibrium: non-equilibrium parts in every moment.
fn perturbed(seed: &[f64; Q], drho: f64, u: [f64; 3]) -> [f64; Q] {
    let geq = equilibrium(drho, u);
    std::array::from_fn(|i| geq[i] + 0.03 * W[i] * seed[i])
}

/// Mass (δρ) and momentum.
fn conserved(g: &[f64; Q]) -> [f64; 4] {
    let (d, j) = density_momentum(g);
    [d, j[0], j[1], j[2]]
}

const ALL: [Collision; 3] = [Collision::BGK, Collision::TRT, Collision::MRT];

#[test]
fn the_registry_names_every_operator_once() {
    let names: Vec<&str> = OPERATORS.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["bgk", "trt", "mrt"]);
    for n in names {
        assert_eq!(Collision::parse(n).unwrap().name(), n);
        assert_eq!(Collision::parse(&n.to_uppercase()).unwrap().name(), n);
    }
    let e = Collision::parse("lbgk").unwrap_err().to_string();
    assert!(e.contains("bgk, trt, mrt"), "{e}");
}

#[test]
fn equilibrium_moments_are_the_moments_of_the_shifted_equilibrium() {
    for (drho, u) in [
        (0.0, [0.0, 0.0, 0.0]),
        (0.03, [0.05, -0.02, 0.08]),
        (-0.03, [-0.1, 0.07, 0.01]),
    ] {
        let g = equilibrium(drho, u);
        let rho = 1.0 + drho;
        let j = u.map(|v| rho * v);
        let meq = equilibrium_moments(drho, rho, j);
        for k in 0..NM {
            let mk: f64 = (0..Q).map(|i| M[k][i] as f64 * g[i]).sum();
            assert!(
                (mk - meq[k]).abs() < 1e-14,
                "moment {k}: {mk} vs {}",
                meq[k]
            );
        }
        // The shifted equilibrium plus the weights is the textbook one.
        for i in 0..Q {
            let c = super::d3q19::C[i].map(|v| v as f64);
            let cu = c[0] * u[0] + c[1] * u[1] + c[2] * u[2];
            let u2 = u[0] * u[0] + u[1] * u[1] + u[2] * u[2];
            let f = W[i] * rho * (1.0 + 3.0 * cu + 4.5 * cu * cu - 1.5 * u2);
            assert!((g[i] + W[i] - f).abs() < 1e-15, "direction {i}");
        }
    }
}

#[test]
fn guo_moments_are_the_moments_of_guos_source() {
    for (u, f) in [
        ([0.0, 0.0, 0.0], [1e-3, -2e-3, 5e-4]),
        ([0.05, -0.02, 0.08], [3e-4, 1e-4, -7e-4]),
        ([-0.1, 0.07, 0.01], [-2e-5, 6e-5, 1e-5]),
    ] {
        let s = guo_source(&u, &f).unpack();
        let closed = guo_moments(&u, &f);
        let scale = f.iter().map(|v: &f64| v.abs()).fold(0.0, f64::max);
        for k in 0..NM {
            let mk: f64 = (0..Q).map(|i| M[k][i] as f64 * s[i]).sum();
            let got = closed[k].unwrap_or(0.0);
            assert!(
                (mk - got).abs() < 1e-13 * scale,
                "moment {k}: {mk} vs {got} (u {u:?}, F {f:?})"
            );
        }
    }
}

#[test]
fn the_rest_state_is_exactly_zero_and_stays_so() {
    for c in ALL {
        for les in [None, Some(0.17)] {
            let mut m = model(c, 1.7);
            m.smagorinsky = les;
            let k32 = coefficients::<f32>(&m);
            let mut g = [0.0f32; Q];
            dispatch_f32(&m, &k32, &mut g);
            assert_eq!(g, [0.0; Q], "{c} les {les:?}");
        }
    }
}

fn dispatch_f32(m: &FlowModel, k: &Coefficients<f32>, g: &mut [f32; Q]) {
    struct Run<'a>(&'a Coefficients<f32>, &'a mut [f32; Q]);
    impl OperatorVisitor for Run<'_> {
        type Output = ();
        fn visit<O: CollisionOperator>(self) {
            O::collide(self.1, self.0, None);
        }
    }
    dispatch(m.collision, Run(k, g));
}

#[test]
fn a_moving_equilibrium_is_a_fixed_point_of_every_operator() {
    for c in ALL {
        let m = model(c, 1.7);
        let mut g = equilibrium(0.02, [0.05, -0.03, 0.02]);
        let before = g;
        collide_f64(&m, &mut g);
        for i in 0..Q {
            assert!((g[i] - before[i]).abs() < 1e-16, "{c} direction {i}");
        }
    }
}

#[test]
fn mrt_with_equal_rates_and_trt_with_equal_rates_are_bgk() {
    let seed: [f64; Q] = std::array::from_fn(|i| ((i * 7919) % 23) as f64 / 11.5 - 1.0);
    let g0 = perturbed(&seed, 0.01, [0.04, -0.02, 0.03]);
    for omega in [0.6, 1.0, 1.3, 1.9] {
        let mut bgk = g0;
        collide_f64(&model(Collision::BGK, omega), &mut bgk);
        let mut mrt = g0;
        let mut mm = model(Collision::MRT, omega);
        mm.mrt_rates = MrtRates::uniform(omega);
        collide_f64(&mm, &mut mrt);
        let mut trt = g0;
        let mut mt = model(Collision::TRT, omega);
        // Λ = (τ − ½)² makes ω⁻ = ω⁺.
        mt.trt_magic = (1.0 / omega - 0.5).powi(2);
        collide_f64(&mt, &mut trt);
        for i in 0..Q {
            assert!((bgk[i] - mrt[i]).abs() < 1e-15, "MRT ω {omega} dir {i}");
            assert!((bgk[i] - trt[i]).abs() < 1e-15, "TRT ω {omega} dir {i}");
        }
    }
}

proptest! {
    #[test]
    fn collision_conserves_mass_and_momentum_and_a_force_adds_exactly_f(
        seed in prop::array::uniform19(-1.0f64..1.0),
        drho in -0.1f64..0.1,
        ux in -0.1f64..0.1, uy in -0.1f64..0.1, uz in -0.1f64..0.1,
        omega in 0.5f64..1.99,
        op in 0usize..3,
        les in prop::option::of(0.05f64..0.3),
        force in prop::option::of(prop::array::uniform3(-1e-3f64..1e-3)),
    ) {
        let g0 = perturbed(&seed, drho, [ux, uy, uz]);
        let mut m = model(ALL[op], omega);
        m.smagorinsky = les;
        m.force = force;
        let mut g = g0;
        collide_f64(&m, &mut g);
        let a = conserved(&g0);
        let b = conserved(&g);
        let f = force.unwrap_or([0.0; 3]);
        prop_assert!((a[0] - b[0]).abs() < 1e-15, "mass {} -> {}", a[0], b[0]);
        for k in 0..3 {
            prop_assert!((a[k + 1] + f[k] - b[k + 1]).abs() < 1e-15, "momentum {} {} -> {}", k, a[k + 1], b[k + 1]);
        }
    }
}

/// The Guo scheme in its defining form for BGK, written out with unshifted populations:
/// `f' = f − ω (f − f_eq(ρ, u*)) + (1 − ω/2) w_i (3 (c − u*)·F + 9 (c·u*)(c·F))`, `u* = (j + F/2)/ρ`.
#[test]
fn bgk_with_a_force_follows_guo_written_out() {
    let seed: [f64; Q] = std::array::from_fn(|i| ((i * 31) % 17) as f64 / 8.5 - 1.0);
    let g0 = perturbed(&seed, 0.02, [0.03, 0.01, -0.02]);
    let f = [2e-4, -1e-4, 3e-4];
    let omega = 1.4;
    let mut m = model(Collision::BGK, omega);
    m.force = Some(f);
    let mut g = g0;
    collide_f64(&m, &mut g);
    let full: [f64; Q] = std::array::from_fn(|i| g0[i] + W[i]);
    let rho: f64 = full.iter().sum();
    let j: [f64; 3] = std::array::from_fn(|a| {
        (0..Q)
            .map(|i| super::d3q19::C[i][a] as f64 * full[i])
            .sum::<f64>()
    });
    let u: [f64; 3] = std::array::from_fn(|a| (j[a] + 0.5 * f[a]) / rho);
    for i in 0..Q {
        let c = super::d3q19::C[i].map(|v| v as f64);
        let cu = c[0] * u[0] + c[1] * u[1] + c[2] * u[2];
        let cf = c[0] * f[0] + c[1] * f[1] + c[2] * f[2];
        let uf = u[0] * f[0] + u[1] * f[1] + u[2] * f[2];
        let u2 = u[0] * u[0] + u[1] * u[1] + u[2] * u[2];
        let feq = W[i] * rho * (1.0 + 3.0 * cu + 4.5 * cu * cu - 1.5 * u2);
        let src = W[i] * (3.0 * (cf - uf) + 9.0 * cu * cf);
        let want = full[i] - omega * (full[i] - feq) + (1.0 - 0.5 * omega) * src;
        assert!((g[i] + W[i] - want).abs() < 1e-15, "direction {i}");
    }
}

/// MRT with all rates equal to ω and a force is BGK with the same force: the moment-space forcing
/// `(I − S/2) M F` reduces to `(1 − ω/2) F`.
#[test]
fn mrt_with_equal_rates_and_a_force_is_bgk_with_a_force() {
    let seed: [f64; Q] = std::array::from_fn(|i| ((i * 13) % 19) as f64 / 9.5 - 1.0);
    let g0 = perturbed(&seed, -0.01, [0.02, -0.04, 0.01]);
    for omega in [0.7, 1.5] {
        let mut b = model(Collision::BGK, omega);
        b.force = Some([1e-4, 2e-4, -3e-4]);
        let mut mm = b.clone();
        mm.collision = Collision::MRT;
        mm.mrt_rates = MrtRates::uniform(omega);
        let mut mt = b.clone();
        mt.collision = Collision::TRT;
        mt.trt_magic = (1.0 / omega - 0.5).powi(2);
        let (mut gb, mut gm, mut gt) = (g0, g0, g0);
        collide_f64(&b, &mut gb);
        collide_f64(&mm, &mut gm);
        collide_f64(&mt, &mut gt);
        for i in 0..Q {
            assert!((gb[i] - gm[i]).abs() < 1e-15, "MRT ω {omega} dir {i}");
            assert!((gb[i] - gt[i]).abs() < 1e-15, "TRT ω {omega} dir {i}");
        }
    }
}

/// The eddy viscosity: for a node whose non-equilibrium stress is known, the relaxation time the
/// BGK collision used equals Hou et al.'s formula, and it grows with C_s.
#[test]
fn smagorinsky_relaxes_with_the_local_eddy_viscosity() {
    // A pure shear non-equilibrium part: Π_xy only (directions 7–10, the xy diagonals).
    let mut g0 = equilibrium(0.0, [0.0; 3]);
    let e = 1e-3;
    g0[7] += e;
    g0[8] += e;
    g0[9] -= e;
    g0[10] -= e;
    // Π_xy = Σ c_x c_y g = 2e + 2e = 4e; Q = 2 Π_xy².
    let pi_xy: f64 = 4.0 * e;
    let qq = 2.0 * pi_xy * pi_xy;
    let omega0 = 1.8;
    let tau0 = 1.0 / omega0;
    for cs in [0.1, 0.2] {
        let mut m = model(Collision::BGK, omega0);
        m.smagorinsky = Some(cs);
        let mut g = g0;
        collide_f64(&m, &mut g);
        // g' − g_eq = (1 − ω)(g − g_eq), and g_eq = 0 here (δρ = 0, j = 0).
        let omega = 1.0 - g[7] / g0[7];
        let tau = 0.5 * (tau0 + (tau0 * tau0 + 18.0 * 2f64.sqrt() * cs * cs * qq.sqrt()).sqrt());
        assert!(
            (omega - 1.0 / tau).abs() < 1e-12,
            "C_s {cs}: ω {omega} vs {}",
            1.0 / tau
        );
        assert!(omega < omega0);
    }
}

/// A coupled step evaluates the Smagorinsky relaxation time once and hands it to the collision:
/// given the node's own `smagorinsky_relaxation`, `collide_with` equals `collide` bit for bit for
/// BGK (the same stress) and to rounding for TRT and MRT (the same stress from their own moments),
/// under a force too; without the model the given time is not read.
#[test]
fn a_given_smagorinsky_time_is_the_collisions_own() {
    struct With<'a>(&'a FlowModel, [f64; Q], Option<[f64; 3]>, bool);
    impl OperatorVisitor for With<'_> {
        type Output = [f64; Q];
        fn visit<O: CollisionOperator>(self) -> [f64; Q] {
            let k = coefficients::<f64>(self.0);
            let mut g = self.1;
            let tau = if self.3 {
                smagorinsky_relaxation(&g, &k, self.2).or(Some(7.0))
            } else {
                None
            };
            O::collide_with(&mut g, &k, self.2, tau);
            g
        }
    }
    let mut g0 = equilibrium(0.01, [0.03, -0.02, 0.01]);
    for (i, v) in g0.iter_mut().enumerate() {
        *v += 1e-3 * ((i * 7 % 5) as f64 - 2.0);
    }
    for c in [Collision::BGK, Collision::TRT, Collision::MRT] {
        for force in [None, Some([1e-4, -2e-4, 3e-5])] {
            for cs in [None, Some(0.15)] {
                let mut m = model(c, 1.7);
                m.smagorinsky = cs;
                let own = dispatch(c, With(&m, g0, force, false));
                let given = dispatch(c, With(&m, g0, force, true));
                let tol = if c == Collision::BGK || cs.is_none() {
                    0.0
                } else {
                    1e-15
                };
                for i in 0..Q {
                    assert!(
                        (own[i] - given[i]).abs() <= tol,
                        "{c} C_s {cs:?} {force:?} dir {i}: {} vs {}",
                        own[i],
                        given[i]
                    );
                }
            }
        }
    }
}

/// The node of the hand check: f = w_i (1 + δ_i), δ = +0.1 on direction 1 (+x) and −0.1 on 7 (+x+y).
/// ρ = 361/360, j = (1/360, −1/360, 0), u = (1/361, −1/361, 0). BGK with ω = 1 returns the
/// equilibrium of (ρ, u); MRT is checked through the dense inverse of M.
#[test]
fn one_node_collision_matches_hand_computation() {
    let mut g = [0.0; Q];
    g[1] = 0.1 * W[1];
    g[7] = -0.1 * W[7];
    let start = g;
    collide_f64(&model(Collision::BGK, 1.0), &mut g);
    let rho = 361.0 / 360.0;
    let e0 = (1.0 / 3.0) * rho * (1.0 - 3.0 / (361.0 * 361.0));
    let e1 = (1.0 / 18.0) * rho * (1.0 + 3.0 / 361.0 + 1.5 / (361.0 * 361.0));
    assert!((g[0] + W[0] - e0).abs() < 1e-15, "{} vs {e0}", g[0] + W[0]);
    assert!((g[1] + W[1] - e1).abs() < 1e-15, "{} vs {e1}", g[1] + W[1]);

    let f: [f64; Q] = std::array::from_fn(|i| start[i] + W[i]);
    let rates = MrtRates::default();
    let omega = 1.25;
    let s = rates.diagonal(omega);
    let m: Vec<f64> = (0..NM)
        .map(|k| (0..Q).map(|i| M[k][i] as f64 * f[i]).sum())
        .collect();
    // d'Humières et al. (2002), eq. (B1) with ω_ε = 3, ω_εj = −11/2, ω_xx = −1/2, for this node.
    let (jx, jy, jz) = (0.1 / 36.0, -0.1 / 36.0, 0.0);
    let jj = (jx * jx + jy * jy + jz * jz) / rho;
    let pxx3 = (2.0 * jx * jx - jy * jy - jz * jz) / rho;
    let pww = (jy * jy - jz * jz) / rho;
    let meq = [
        rho,
        -11.0 * rho + 19.0 * jj,
        3.0 * rho - 5.5 * jj,
        jx,
        -2.0 / 3.0 * jx,
        jy,
        -2.0 / 3.0 * jy,
        jz,
        -2.0 / 3.0 * jz,
        pxx3,
        -0.5 * pxx3,
        pww,
        -0.5 * pww,
        jx * jy / rho,
        jy * jz / rho,
        jx * jz / rho,
        0.0,
        0.0,
        0.0,
    ];
    let mstar: Vec<f64> = (0..NM).map(|k| m[k] - s[k] * (m[k] - meq[k])).collect();
    let mut g = start;
    let mut mm = model(Collision::MRT, omega);
    mm.mrt_rates = rates;
    collide_f64(&mm, &mut g);
    for i in 0..Q {
        let want: f64 = (0..NM)
            .map(|k| M[k][i] as f64 * mstar[k] / NORM2[k] as f64)
            .sum();
        assert!(
            (g[i] + W[i] - want).abs() < 1e-15,
            "dir {i}: {} vs {want}",
            g[i] + W[i]
        );
    }
}

/// What the CUDA code is printed from computes what the CPU code computes: every operator, with and
/// without the eddy viscosity and the force, recorded on symbols and evaluated with the kernel's
/// rounding, equals the direct call in f32 and f64 bit for bit.
#[test]
fn the_recording_the_kernels_are_printed_from_equals_the_direct_call_bit_for_bit() {
    let seed: [f64; Q] = std::array::from_fn(|i| ((i * 7) % 11) as f64 / 5.5 - 1.0);
    let g0 = perturbed(&seed, 0.013, [0.031, -0.022, 0.017]);
    for c in ALL {
        for les in [None, Some(0.16)] {
            for force in [None, Some([1.5e-4, -2.5e-4, 0.5e-4])] {
                let mut m = model(c, 1.62);
                m.smagorinsky = les;
                m.force = force;
                struct Rec<'a>(&'a FlowModel);
                impl OperatorVisitor for Rec<'_> {
                    type Output = ([Sym; Q], Recording);
                    fn visit<O: CollisionOperator>(self) -> Self::Output {
                        symbolic::record(|| {
                            let k = Coefficients::new(self.0, Sym::param);
                            let f = self.0.force.map(|f| {
                                [
                                    Sym::param("force_x", f[0]),
                                    Sym::param("force_y", f[1]),
                                    Sym::param("force_z", f[2]),
                                ]
                            });
                            let mut g: [Sym; Q] =
                                std::array::from_fn(|i| Sym::input(format!("g[{i}]")));
                            O::collide(&mut g, &k, f);
                            g
                        })
                    }
                }
                let (out, rec) = dispatch(c, Rec(&m));
                let index = |s: &str| s[2..s.len() - 1].parse::<usize>().unwrap();
                // f64
                let sym = rec.eval::<f64>(&out, |s| g0[index(s)]);
                let mut direct = g0;
                collide_f64(&m, &mut direct);
                for i in 0..Q {
                    assert_eq!(
                        sym[i].to_bits(),
                        direct[i].to_bits(),
                        "{c} {les:?} {force:?} f64 {i}"
                    );
                }
                // f32
                let g32: [f32; Q] = g0.map(|v| v as f32);
                let sym = rec.eval::<f32>(&out, |s| g32[index(s)]);
                let mut direct = g32;
                struct Run32<'a>(&'a FlowModel, &'a mut [f32; Q]);
                impl OperatorVisitor for Run32<'_> {
                    type Output = ();
                    fn visit<O: CollisionOperator>(self) {
                        let k = coefficients::<f32>(self.0);
                        O::collide(self.1, &k, self.0.force.map(|f| f.map(|v| v as f32)));
                    }
                }
                dispatch(c, Run32(&m, &mut direct));
                for i in 0..Q {
                    assert_eq!(
                        sym[i].to_bits(),
                        direct[i].to_bits(),
                        "{c} {les:?} {force:?} f32 {i}"
                    );
                }
                assert!(
                    rec.operations(&out) > 50,
                    "{c}: {} operations",
                    rec.operations(&out)
                );
            }
        }
    }
}

/// The pressure outlet's terms: the recording the kernels print equals the direct call bit for bit,
/// and at rest with the outlet's own density the anti-bounce-back returns the node's equilibrium.
#[test]
fn the_pressure_terms_are_printed_from_the_function_the_cpu_module_calls() {
    let seed: [f64; Q] = std::array::from_fn(|i| ((i * 5) % 13) as f64 / 6.5 - 1.0);
    let g0 = perturbed(&seed, 0.011, [0.027, -0.014, 0.009]);
    let drho_w = 0.004;
    let (out, rec) = symbolic::record(|| {
        let g: [Sym; Q] = std::array::from_fn(|i| Sym::input(format!("g[{i}]")));
        pressure_terms(&g, Sym::input("drho_w"))
    });
    let value = |s: &str, g: &[f64; Q]| {
        if s == "drho_w" {
            drho_w
        } else {
            g[s[2..s.len() - 1].parse::<usize>().unwrap()]
        }
    };
    let sym = rec.eval::<f64>(&out, |s| value(s, &g0));
    let direct = pressure_terms(&g0, drho_w);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&sym), bits(&direct));
    let g32 = g0.map(|v| v as f32);
    let sym = rec.eval::<f32>(&out, |s| value(s, &g0) as f32);
    let direct = pressure_terms(&g32, drho_w as f32);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&sym), bits(&direct));
    // At rest: −g̃_ī + 2 e = g^eq for every link of a node already at (δρ_w, 0).
    let eq = equilibrium(drho_w, [0.0; 3]);
    let t = pressure_terms(&eq, drho_w);
    for i in 1..Q {
        let g = -eq[super::d3q19::OPP[i]] + t[(i - 1) / 2];
        assert!((g - eq[i]).abs() < 1e-16, "direction {i}: {g} vs {}", eq[i]);
    }
}

/// The sponge's absorbing term moves a node's density by `−σ (ρ − ρ_w)` and its momentum by
/// `−σ c_s (ρ − ρ_w) n`, so that an outgoing sound wave (momentum `c_s δρ n`) keeps its shape and a
/// node at the outlet's density is left as it is; its recording (what the kernels print) equals the
/// direct call bit for bit in both precisions; the rate falls from the strength at the face to zero
/// at the layer's inner edge, and the largest rate of overlapping layers wins.
#[test]
fn the_sponge_damps_the_outgoing_sound_wave() {
    let seed: [f64; Q] = std::array::from_fn(|i| ((i * 7) % 11) as f64 / 5.5 - 1.0);
    let g0 = perturbed(&seed, 0.013, [0.031, -0.012, 0.007]);
    let a = Absorption {
        sigma: 0.37,
        drho_w: -0.002,
        normal: [0.0, -1.0, 0.0],
    };
    let cs = 1.0 / 3f64.sqrt();
    let (d0, j0) = density_momentum(&g0);
    let mut g = g0;
    absorb(&mut g, &a);
    let (d1, j1) = density_momentum(&g);
    let excess = d0 - a.drho_w;
    assert!((d1 - (d0 - a.sigma * excess)).abs() < 1e-16, "{d1}");
    for k in 0..3 {
        let want = j0[k] - a.sigma * cs * excess * a.normal[k];
        assert!((j1[k] - want).abs() < 1e-16, "j[{k}]: {} vs {want}", j1[k]);
    }
    // A sound wave leaving through the face keeps its shape: its excess and momentum both shrink by
    // 1 − σ about the outlet's state.
    let wave = |amp: f64| {
        equilibrium(
            a.drho_w + amp,
            [0.0, -cs * amp / (1.0 + a.drho_w + amp), 0.0],
        )
    };
    let mut w = wave(1e-4);
    absorb(&mut w, &a);
    let (dw, jw) = density_momentum(&w);
    let left = (dw - a.drho_w) / 1e-4;
    assert!((left - (1.0 - a.sigma)).abs() < 1e-9, "{left}");
    assert!(
        (jw[1] / (-cs * (dw - a.drho_w)) - 1.0).abs() < 1e-9,
        "{jw:?}"
    );
    // At the outlet's density nothing changes but rounding.
    let mut at = perturbed(&seed, a.drho_w, [0.02, 0.0, -0.01]);
    let kept = at;
    let b = Absorption {
        drho_w: density_momentum(&at).0,
        ..a
    };
    absorb(&mut at, &b);
    for i in 0..Q {
        assert!(
            (at[i] - kept[i]).abs() < 1e-17,
            "{i}: {} vs {}",
            at[i],
            kept[i]
        );
    }
    // The printed recording.
    let (out, rec) = absorb_recording();
    let value = |s: &str| match s {
        "sigma" => a.sigma,
        "drho_w" => a.drho_w,
        _ if s.starts_with("n[") => a.normal[s[2..s.len() - 1].parse::<usize>().unwrap()],
        _ => g0[s[2..s.len() - 1].parse::<usize>().unwrap()],
    };
    let sym = rec.eval::<f64>(&out, value);
    assert_eq!(
        sym.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        g.map(f64::to_bits).to_vec()
    );
    let mut g32 = g0.map(|v| v as f32);
    let a32 = Absorption {
        sigma: a.sigma as f32,
        drho_w: a.drho_w as f32,
        normal: a.normal.map(|c| c as f32),
    };
    absorb(&mut g32, &a32);
    let sym = rec.eval::<f32>(&out, |s| value(s) as f32);
    assert_eq!(
        sym.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        g32.map(f32::to_bits).to_vec()
    );
    // The rate over a layer of 8 planes of strength 0.5.
    assert_eq!(sponge_rate(0.0, 8.0, 0.5), 0.5);
    assert_eq!(sponge_rate(4.0, 8.0, 0.5), 0.125);
    assert_eq!(sponge_rate(8.0, 8.0, 0.5), 0.0);
    // Two layers meeting along an edge: the larger rate, with its own target and normal.
    let layer = |face, width, strength, drho| SpongeLayer {
        face,
        width,
        strength,
        drho,
        extent: 20,
    };
    let s = Sponges {
        layers: vec![
            layer(crate::Face::XPlus, 8, 0.5, 0.001),
            layer(crate::Face::YMinus, 4, 1.0, -0.001),
        ],
    };
    let x_plus = Some(Absorption {
        sigma: 0.5,
        drho_w: 0.001,
        normal: [1.0, 0.0, 0.0],
    });
    assert_eq!(s.at::<f64>([19, 10, 0]), x_plus);
    // Beside x+ at depth 3 of y− (rate 1/16): x+'s 0.5 wins.
    assert_eq!(s.at::<f64>([19, 3, 0]), x_plus);
    let y_minus = s.at::<f64>([12, 0, 5]).unwrap();
    assert_eq!((y_minus.sigma, y_minus.normal), (1.0, [0.0, -1.0, 0.0]));
    assert_eq!(s.at::<f64>([5, 10, 5]), None);
    assert!(s.touches(0, 16, 10, 3) && !s.touches(0, 12, 10, 3) && s.touches(0, 1, 2, 0));
}
