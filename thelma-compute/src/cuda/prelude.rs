//! The generated prelude of the CUDA kernels: the D3Q19 table, the flag bits, the launch shape and
//! the collision itself, printed from the Rust operator the CPU module runs
//! (`thelma_core::physics`, recorded on symbols), so that the direction order, the flag values and
//! every physical rule have one source of truth.

use std::fmt::Write as _;

use thelma_core::{Half12, Precision, Real, ScaledHalf};

use super::shape::{LaunchShape, DEFAULT_BLOCK_X};
use thelma_core::physics::d3q19::Q;
use thelma_core::physics::Arith as _;
use thelma_core::physics::{
    absorb_recording, advecting_velocity, collide_thermal, coupled_force, delta_inner, delta_outer,
    dirichlet_term, dispatch, eddy_of, macroscopic, node_density, parabola, pressure_terms,
    smagorinsky_relaxation, sponge_rate, stored_macroscopic, symbolic, temperature, Coefficients,
    Collision, CollisionOperator, FlowModel, OperatorVisitor, Sponges, Stencil, Sym,
    ThermalCoefficients, ThermalFace, ThermalSetup, D3Q19, HELD_FACES, QT,
};
use thelma_core::WALL_SLOTS;
use thelma_core::{side_of, side_populations, SIDES, SIDE_COUNT};
use thelma_geometry::{LinkRule, NodeFlags};

/// The bit of a palette entry's mask that marks a solid node (bits 0..19 are the bounce directions).
pub const SOLID_BIT: u32 = 1 << 31;
/// The bit of a palette entry's mask that marks a node with open-face links (their rules are in the
/// palette's link words, [`thelma_geometry::LinkRule::code`]).
pub const OPEN_BIT: u32 = 1 << 30;

/// Prefix of the run constants the printed collision reads (`THELMA_K_omega`).
const PARAM_PREFIX: &str = "THELMA_K_";

/// What the prelude depends on besides the lattice table.
#[derive(Clone, Debug, PartialEq)]
pub struct PreludeParams {
    pub precision: Precision,
    /// The collision the kernels apply (operator, rates, eddy viscosity, force).
    pub model: FlowModel,
    /// Threads per block along x (a power of two).
    pub block_x: u32,
    /// Blocks per multiprocessor the compiler should plan registers for (`__launch_bounds__`).
    pub min_blocks: u32,
    /// Bytes of a node's palette index: 1 up to [`thelma_geometry::BYTE_PALETTE`] palette entries, 2
    /// beyond.
    pub index_bytes: u32,
    /// The temperature lattice coupled to the flow: its step kernel, and the functions it prints
    /// ([`thermal_source`]), are compiled only then.
    pub thermal: Option<ThermalSetup>,
    /// Whether the held temperatures may change between steps (the live view steers them): the
    /// kernels then read their terms from constant memory, which the module fills; otherwise the
    /// terms are literals in the kernels.
    pub steered_temperatures: bool,
    /// The sponge layers of pressure outlets: `thelma_sponge_absorb` ([`sponge_source`]) is
    /// compiled into the open and coupled steps only where there are some.
    pub sponges: Sponges,
    /// Whether the case has immersed bodies: their kernels (`kernels/immersed.cu`) and the
    /// functions they read ([`immersed_source`]) are compiled only then.
    pub immersed: bool,
    /// Whether the populations stream in place (one lattice): the in-place steps and the swap of
    /// their arrangements (`THELMA_IN_PLACE` in `kernels/lbm_d3q19.cu`) are compiled only then.
    pub in_place: bool,
    /// Whether the step kernels take the first plane slot their grid runs (`THELMA_SLOT_OFFSET`):
    /// the image of a module made for a cluster job's overlapped steps, which launch them on the
    /// faces and on the interior (in place of the plain kernels, which run the whole slab).
    pub slot_offset: bool,
    /// Whether the module steps a grid's subdomain (a partition that cuts x or y): its kernels
    /// (`THELMA_GRID`) read and write every side of the box through channel tables
    /// ([`side_tables`]); slabs compile none of it.
    pub grid: bool,
    /// Whether that grid cuts x (`THELMA_GRID_X`): only then does the pull's fast path take the
    /// x sides' channels, which costs the grids that leave x whole (PERFORMANCE.md).
    pub grid_x: bool,
}

impl PreludeParams {
    /// A representative set (ω = 1.6, default rates), for the compile check.
    pub fn example(precision: Precision, collision: Collision) -> Self {
        Self {
            precision,
            model: FlowModel::plain(collision, 1.6),
            block_x: DEFAULT_BLOCK_X,
            min_blocks: LaunchShape::default().min_blocks_for(precision),
            index_bytes: 1,
            thermal: None,
            steered_temperatures: false,
            sponges: Sponges::default(),
            immersed: false,
            in_place: false,
            slot_offset: false,
            grid: false,
            grid_x: false,
        }
    }
}

/// A device function returning entry `i` of a constant table; fully unrolled loops fold it away.
fn table<V: std::fmt::Display>(out: &mut String, ty: &str, name: &str, values: &[V]) {
    let list: Vec<String> = values.iter().map(|v| v.to_string()).collect();
    let _ = writeln!(
        out,
        "__device__ __forceinline__ {ty} {name}(int i) {{ const {ty} t[{}] = {{{}}}; return t[i]; }}",
        values.len(),
        list.join(", ")
    );
}

/// A literal that reads back as exactly `x` in double precision.
fn lit(x: f64) -> String {
    format!("{x:e}")
}

/// The collision of `model` as a device function `thelma_collide(real g[Q])` on shifted populations,
/// with the run constants it reads defined before it.
pub fn collision_source(model: &FlowModel) -> String {
    collision_function(model, false, false)
}

/// The collision of `model` as `thelma_collide` or, with `per_node_force`, as
/// `thelma_collide_forced(real g[Q], const real F[3], real tau)`, whose force is the node's own
/// (the temperature lattice's coupled force) instead of the uniform run constant and whose
/// Smagorinsky relaxation time is `tau` when `tau_given` (unused otherwise: the collision evaluates
/// it, as `thelma_collide` does).
fn collision_function(model: &FlowModel, per_node_force: bool, tau_given: bool) -> String {
    struct Print<'a>(&'a FlowModel, bool, bool);
    impl OperatorVisitor for Print<'_> {
        type Output = String;
        fn visit<O: CollisionOperator>(self) -> String {
            let (model, per_node, tau_given) = (self.0, self.1, self.2);
            let (g, rec) = symbolic::record(|| {
                let k = Coefficients::new(model, Sym::param);
                let force = if per_node {
                    Some(std::array::from_fn(|a| Sym::input(format!("F[{a}]"))))
                } else {
                    model.force.map(|f| {
                        [
                            Sym::param("force_x", f[0]),
                            Sym::param("force_y", f[1]),
                            Sym::param("force_z", f[2]),
                        ]
                    })
                };
                let mut g: [Sym; Q] = std::array::from_fn(|i| Sym::input(format!("g[{i}]")));
                // The coupled step evaluates the Smagorinsky relaxation time once, for both lattices.
                let tau = (per_node && tau_given && model.smagorinsky.is_some())
                    .then(|| Sym::input("tau"));
                O::collide_with(&mut g, &k, force, tau);
                g
            });
            let mut s = String::new();
            for (name, value) in rec.params() {
                define_param(&mut s, name, *value);
            }
            let outputs: Vec<(String, Sym)> = (0..Q).map(|i| (format!("g[{i}]"), g[i])).collect();
            let _ = writeln!(
                s,
                "// {}: {} ({} operations per node), printed from thelma_core::physics::{}.",
                O::NAME,
                O::SUMMARY,
                rec.operations(&g),
                std::any::type_name::<O>()
                    .rsplit("::")
                    .next()
                    .unwrap_or(O::NAME),
            );
            if per_node {
                let _ = writeln!(
                    s,
                    "__device__ __forceinline__ void thelma_collide_forced(real* __restrict__ g, \
                     const real* __restrict__ F, real tau) {{"
                );
            } else {
                let _ = writeln!(
                    s,
                    "__device__ __forceinline__ void thelma_collide(real* __restrict__ g) {{"
                );
            }
            s.push_str(&rec.emit_c(&outputs, PARAM_PREFIX, "    "));
            s.push_str("}\n");
            s
        }
    }
    dispatch(model.collision, Print(model, per_node_force, tau_given))
}

/// Defines run constant `name`, unless an earlier printed function did (every function of one
/// prelude prints a constant with the same value).
fn define_param(s: &mut String, name: &str, value: f64) {
    let _ = writeln!(
        s,
        "#ifndef {PARAM_PREFIX}{name}\n#define {PARAM_PREFIX}{name} ((real){})\n#endif",
        lit(value)
    );
}

/// The pressure outlet's anti-bounce-back terms as a device function
/// `thelma_pressure_terms(g, drho_w, t[9])`, printed from `thelma_core::physics::pressure_terms`, and
/// the node density and the inlet profile beside it. `g` is any indexable type: the kernels pass a
/// node of the lattice in memory (`thelma_node`), so that its populations are loaded where the sums
/// use them instead of being held in registers beside the pulled ones (held, they made the open step
/// spill).
pub fn pressure_source() -> String {
    let (t, rec) = symbolic::record(|| {
        let g: [Sym; Q] = std::array::from_fn(|i| Sym::input(format!("g[{i}]")));
        pressure_terms(&g, Sym::input("drho_w"))
    });
    let outputs: Vec<(String, Sym)> = (0..9).map(|p| (format!("t[{p}]"), t[p])).collect();
    let mut s = String::from(
        "// The pressure outlet's anti-bounce-back terms, printed from thelma_core::physics::pressure_terms.\n\
         template <typename G>\n\
         __device__ __forceinline__ void thelma_pressure_terms(const G& g, real drho_w, real* __restrict__ t) {\n",
    );
    s.push_str(&rec.emit_c(&outputs, PARAM_PREFIX, "    "));
    s.push_str("}\n");
    let (rho, rec) = symbolic::record(|| {
        let g: [Sym; Q] = std::array::from_fn(|i| Sym::input(format!("g[{i}]")));
        node_density(&g)
    });
    s.push_str(
        "// A node's density, printed from thelma_core::physics::node_density.\n\
         template <typename G>\n\
         __device__ __forceinline__ real thelma_node_density(const G& g) {\n    real rho;\n",
    );
    s.push_str(&rec.emit_c(&[("rho".to_string(), rho)], PARAM_PREFIX, "    "));
    s.push_str("    return rho;\n}\n");
    let (v, rec) = symbolic::record(|| parabola(Sym::input("q"), Sym::input("n")));
    s.push_str(
        "// An inlet's profile across one axis, printed from thelma_core::physics::parabola.\n\
         __device__ __forceinline__ real thelma_parabola(real q, real n) {\n    real v;\n",
    );
    s.push_str(&rec.emit_c(&[("v".to_string(), v)], PARAM_PREFIX, "    "));
    s.push_str("    return v;\n}\n");
    s
}

/// The sponge layers as `THELMA_SPONGE` and a device function `thelma_sponge_absorb(g, x, y, z)`
/// (global coordinates) that relaxes a collided node in a layer towards its outlet's state:
/// `thelma_sponge_rate` and `thelma_absorb` printed from `thelma_core::physics::sponge_rate` and
/// `absorb`, and each layer's depth test with its constants, choosing as
/// `thelma_core::physics::Sponges::at` does (the largest rate, the first of equal ones).
pub fn sponge_source(sponges: &Sponges) -> String {
    let mut s = String::from("#define THELMA_SPONGE 1\n");
    let (v, rec) = symbolic::record(|| {
        sponge_rate(Sym::input("d"), Sym::input("width"), Sym::input("strength"))
    });
    s.push_str(
        "// A sponge layer's rate at depth d, printed from thelma_core::physics::sponge_rate.\n\
         __device__ __forceinline__ real thelma_sponge_rate(real d, real width, real strength) {\n    real v;\n",
    );
    s.push_str(&rec.emit_c(&[("v".to_string(), v)], PARAM_PREFIX, "    "));
    s.push_str("    return v;\n}\n");
    let (g, rec) = absorb_recording();
    let outputs: Vec<(String, Sym)> = (0..Q).map(|i| (format!("g[{i}]"), g[i])).collect();
    s.push_str(
        "// The sponge's absorbing term, printed from thelma_core::physics::absorb.\n\
         __device__ __forceinline__ void thelma_absorb(real* __restrict__ g, real sigma, real drho_w, \
         const real* __restrict__ n) {\n",
    );
    s.push_str(&rec.emit_c(&outputs, PARAM_PREFIX, "    "));
    s.push_str("}\n");
    s.push_str(
        "// The layers of thelma_core::physics::Sponges, at the node at global (x, y, z).\n\
         __device__ __forceinline__ void thelma_sponge_absorb(real* __restrict__ g, int x, int y, int z) {\n    \
         real sigma = (real)0.0, drho_w = (real)0.0;\n    \
         real n[3] = {(real)0.0, (real)0.0, (real)0.0};\n    \
         bool hit = false;\n",
    );
    for l in &sponges.layers {
        let c = ["x", "y", "z"][l.face.axis()];
        let depth = if l.face.upper() {
            format!("{} - 1 - {c}", l.extent)
        } else {
            c.to_string()
        };
        let normal = l.normal();
        let _ = writeln!(
            s,
            "    {{ // {}\n        const int d = {depth};\n        if (d >= 0 && d < {w}) {{\n            \
             const real r = thelma_sponge_rate((real)d, (real){w}, (real){});\n            \
             if (!hit || r > sigma) {{\n                \
             sigma = r;\n                drho_w = (real){};\n                \
             n[0] = (real){}; n[1] = (real){}; n[2] = (real){};\n                \
             hit = true;\n            }}\n        }}\n    }}",
            l.face.name(),
            lit(l.strength),
            lit(l.drho),
            normal[0],
            normal[1],
            normal[2],
            w = l.width,
        );
    }
    s.push_str("    if (hit) thelma_absorb(g, sigma, drho_w, n);\n}\n");
    s
}

/// A node's velocity as the host reads it into `Fields` (Guo's half force step where the model has a
/// force) as a device function `thelma_velocity(g, u[3])`, printed from
/// `thelma_core::physics::stored_macroscopic`: the convergence measure on the device then sees the very
/// velocity `fields_from_populations` computes, bit for bit (the division is correctly rounded, and
/// the only product a sum follows, the half force, is exact, so a contraction cannot change it).
pub fn velocity_source(model: &FlowModel) -> String {
    let (u, rec) = velocity_recording(model);
    let mut s = String::new();
    // The collision defines the same constants with the same values; either may come first.
    for (name, value) in rec.params() {
        define_param(&mut s, name, *value);
    }
    s.push_str(
        "// A node's velocity, printed from thelma_core::physics::stored_macroscopic.\n\
         template <typename G>\n\
         __device__ __forceinline__ void thelma_velocity(const G& g, real* __restrict__ u) {\n",
    );
    let outputs: Vec<(String, Sym)> = (0..3).map(|a| (format!("u[{a}]"), u[a])).collect();
    s.push_str(&rec.emit_c(&outputs, PARAM_PREFIX, "    "));
    s.push_str("}\n");
    // The velocity under a force the node collided with (the temperature lattice's coupled force,
    // an immersed body's): a template over the node's type (the kernels pass a node in memory).
    let (u, rec) = symbolic::record(|| {
        let g: [Sym; Q] = std::array::from_fn(|i| Sym::input(format!("g[{i}]")));
        let f: [Sym; 3] = std::array::from_fn(|a| Sym::input(format!("F[{a}]")));
        stored_macroscopic(&g, Some(f)).u
    });
    s.push_str(
        "// The velocity a node's stored populations report under the force F it collided with,\n\
         // printed from thelma_core::physics::stored_macroscopic.\n\
         template <typename G>\n\
         __device__ __forceinline__ void thelma_stored_velocity(const G& g, const real* __restrict__ F, \
         real* __restrict__ u) {\n",
    );
    let outputs: Vec<(String, Sym)> = (0..3).map(|a| (format!("u[{a}]"), u[a])).collect();
    s.push_str(&rec.emit_c(&outputs, PARAM_PREFIX, "    "));
    s.push_str("}\n");
    // The density beside it, for the time average: δρ as the host's `macroscopic` sums it.
    let (drho, rec) = symbolic::record(|| {
        let g: [Sym; Q] = std::array::from_fn(|i| Sym::input(format!("g[{i}]")));
        macroscopic(&g, None).drho
    });
    s.push_str(
        "// A node's δρ = ρ − 1, printed from thelma_core::physics::macroscopic.\n\
         template <typename G>\n\
         __device__ __forceinline__ real thelma_density_excess(const G& g) {\n    real drho[1];\n",
    );
    s.push_str(&rec.emit_c(&[("drho[0]".into(), drho)], PARAM_PREFIX, "    "));
    s.push_str("    return drho[0];\n}\n");
    s
}

/// `thelma_core::physics::stored_macroscopic`'s velocity under `model`'s force, recorded on symbols.
fn velocity_recording(model: &FlowModel) -> ([Sym; 3], symbolic::Recording) {
    symbolic::record(|| {
        let g: [Sym; Q] = std::array::from_fn(|i| Sym::input(format!("g[{i}]")));
        let force = model.force.map(|f| {
            [
                Sym::param("force_x", f[0]),
                Sym::param("force_y", f[1]),
                Sym::param("force_z", f[2]),
            ]
        });
        stored_macroscopic(&g, force).u
    })
}

/// What the temperature lattice's step kernel (`kernels/thermal_d3q7.cu`) reads, printed from
/// `thelma_core::physics::thermal` and the flow's collision: `THELMA_THERMAL`, the closure of each
/// face of the box (`thelma_tface_kind`: 0 adiabatic, 1 held, 2 outflow) and of its patches
/// (`thelma_tface`), the held faces' and patches' anti-bounce-back terms (`thelma_held`: literals
/// in the arithmetic `fixed` names, or, when `None`, a constant table the module fills, for runs
/// whose temperatures are steered), θ of a node, the coupled force, the advecting velocity, the
/// thermal collision and the flow's collision under a per-node force.
pub fn thermal_source(model: &FlowModel, setup: &ThermalSetup, fixed: Option<Precision>) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "#define THELMA_THERMAL 1");
    let _ = writeln!(s, "#define THELMA_QT {QT}");
    let kind = |f: &ThermalFace| match f {
        ThermalFace::Adiabatic => 0,
        ThermalFace::Held(_) => 1,
        ThermalFace::Outflow => 2,
    };
    let kinds: Vec<i32> = setup.faces.iter().map(kind).collect();
    table(&mut s, "int", "thelma_tface_kind", &kinds);
    // The held faces' and patches' anti-bounce-back terms (`dirichlet_term` of each entry of the
    // held θ table), read through `thelma_held(i)`. Held fixed, they are literals, computed here in
    // the run's arithmetic as the CPU module computes them (`lit` reads back as exactly that value).
    // Steered, they are in constant memory, which the module fills, and fills again when the live
    // view changes a temperature (the index folds per face: a constant operand); the kinds stay
    // literals either way, so the closures still fold per face.
    let held = setup.held_table();
    match fixed {
        Some(Precision::F64) => {
            let terms: Vec<String> = held.iter().map(|&t| lit(dirichlet_term(t))).collect();
            table(&mut s, "real", "thelma_held", &terms);
        }
        Some(_) => {
            let terms: Vec<String> = held
                .iter()
                .map(|&t| lit(dirichlet_term(<f32 as Real>::of(t)) as f64))
                .collect();
            table(&mut s, "real", "thelma_held", &terms);
        }
        None => {
            let _ = writeln!(
                s,
                "__constant__ real thelma_held_term[{}];
                 __device__ __forceinline__ real thelma_held(int i) {{ return thelma_held_term[i]; }}",
                held.len()
            );
        }
    }
    // The patches, as ThermalSetup::face_at reads them: first match wins.
    let _ = writeln!(
        s,
        "// The closure of face f where the link of the node at global (x, y, z) crosses it.\n\
         __device__ __forceinline__ void thelma_tface(int f, int x, int y, int z, int* kind, real* term) {{"
    );
    for (k, (p, rule)) in setup.patches.iter().enumerate() {
        let [a, b] = p.face.transverse();
        let c = ["x", "y", "z"];
        let _ = writeln!(
            s,
            "    if (f == {} && {} >= {} && {} <= {} && {} >= {} && {} <= {}) {{ *kind = {}; *term = thelma_held({}); return; }}",
            p.face as usize, c[a], p.lo[0], c[a], p.hi[0], c[b], p.lo[1], c[b], p.hi[1],
            kind(rule), HELD_FACES + k
        );
    }
    let _ = writeln!(
        s,
        "    *kind = thelma_tface_kind(f);\n    *term = thelma_held(f);\n}}"
    );
    let inputs = |name: &str, n: usize| -> Vec<Sym> {
        (0..n).map(|i| Sym::input(format!("{name}[{i}]"))).collect()
    };
    let function =
        |s: &mut String, doc: &str, head: &str, body: &dyn Fn() -> Vec<(String, Sym)>| {
            let (outputs, rec) = symbolic::record(body);
            for (name, value) in rec.params() {
                define_param(s, name, *value);
            }
            let _ = writeln!(s, "// {doc}\n__device__ __forceinline__ {head} {{");
            s.push_str(&rec.emit_c(&outputs, PARAM_PREFIX, "    "));
            s.push_str("}\n");
        };
    let k = |m: &ThermalSetup| ThermalCoefficients::new(&m.model, Sym::param);
    function(
        &mut s,
        "θ of a node's thermal populations, printed from thelma_core::physics::temperature.",
        "void thelma_temperature(const real* __restrict__ h, real* __restrict__ theta)",
        &|| {
            let h: [Sym; QT] = std::array::from_fn(|i| Sym::input(format!("h[{i}]")));
            vec![("theta[0]".into(), temperature(&h))]
        },
    );
    function(
        &mut s,
        "The force the flow collides with at θ, printed from thelma_core::physics::coupled_force.",
        "void thelma_coupled_force(real theta, real* __restrict__ F)",
        &|| {
            let uniform = match model.force {
                Some(f) => [
                    Sym::param("force_x", f[0]),
                    Sym::param("force_y", f[1]),
                    Sym::param("force_z", f[2]),
                ],
                None => [Sym::c(0.0); 3],
            };
            let f = coupled_force(Sym::input("theta"), uniform, &k(setup));
            (0..3).map(|a| (format!("F[{a}]"), f[a])).collect()
        },
    );
    function(
        &mut s,
        "The velocity that advects θ, printed from thelma_core::physics::advecting_velocity.",
        "void thelma_advecting_velocity(const real* __restrict__ g, const real* __restrict__ F, \
         real* __restrict__ u)",
        &|| {
            let g: [Sym; Q] = inputs("g", Q).try_into().expect("Q inputs");
            let f: [Sym; 3] = inputs("F", 3).try_into().expect("3 inputs");
            let u = advecting_velocity(&g, Some(f));
            (0..3).map(|a| (format!("u[{a}]"), u[a])).collect()
        },
    );
    function(
        &mut s,
        "The flow's Smagorinsky relaxation time at a node and its eddy viscosity (0 without the \
         model), printed from thelma_core::physics::smagorinsky_relaxation and eddy_of.",
        "void thelma_eddy_viscosity(const real* __restrict__ g, const real* __restrict__ F, \
         real* __restrict__ nut, real* __restrict__ tau)",
        &|| {
            let g: [Sym; Q] = inputs("g", Q).try_into().expect("Q inputs");
            let f: [Sym; 3] = inputs("F", 3).try_into().expect("3 inputs");
            let kf = Coefficients::new(model, Sym::param);
            match smagorinsky_relaxation(&g, &kf, Some(f)) {
                Some(t) => vec![("nut[0]".into(), eddy_of(t, &kf)), ("tau[0]".into(), t)],
                None => vec![
                    ("nut[0]".into(), Sym::c(0.0)),
                    ("tau[0]".into(), Sym::c(0.0)),
                ],
            }
        },
    );
    function(
        &mut s,
        "The thermal TRT collision under the eddy viscosity `nut` (unused without a turbulent \
         Prandtl number), printed from thelma_core::physics::collide_thermal.",
        "void thelma_collide_thermal(real* __restrict__ h, const real* __restrict__ u, real nut)",
        &|| {
            let mut h: [Sym; QT] = inputs("h", QT).try_into().expect("QT inputs");
            let u: [Sym; 3] = inputs("u", 3).try_into().expect("3 inputs");
            collide_thermal(&mut h, u, &k(setup), Some(Sym::input("nut")));
            (0..QT).map(|i| (format!("h[{i}]"), h[i])).collect()
        },
    );
    s.push_str(&collision_function(model, true, true));
    s
}

/// The direction table of `stencil` as device functions.
fn stencil_tables(s: &mut String, st: &Stencil) {
    let col = |a: usize| st.c.iter().map(|c| c[a]).collect::<Vec<i32>>();
    table(s, "int", "cx", &col(0));
    table(s, "int", "cy", &col(1));
    table(s, "int", "cz", &col(2));
    table(s, "int", "opp", st.opp);
    table(
        s,
        "double",
        "weight",
        &st.w.iter().map(|&w| lit(w)).collect::<Vec<_>>(),
    );
    table(s, "int", "up_dir", st.up);
    table(s, "int", "down_dir", st.down);
    let slot: Vec<i32> = (0..st.q())
        .map(|i| st.crossing_slot(i).map_or(-1, |k| k as i32))
        .collect();
    table(s, "int", "slot_of", &slot);
}

/// The sides of a grid's subdomain ([`SIDES`]: 6 faces, then 12 edges) for `THELMA_GRID`: each
/// side's offset (`side_dx`, `side_dy`, `side_dz`), the directions a box writes across side s in
/// slot order (`side_out_dir(s · THELMA_CROSSING + k)`, `side_out_len(s)`: those its neighbour pulls
/// across s ^ 1), the slot of direction j in the channel read across side s
/// (`thelma_side_slot[s][j]`, 255 where j does not cross it) and the side an offset (ox, oy, oz)
/// lies beyond (`thelma_side_at[(ox + 1) + 3 (oy + 1) + 9 (oz + 1)]`, −1 for none). The last two
/// are indexed at run time, so they are constant memory, not folded tables.
fn side_tables(s: &mut String, st: &Stencil) {
    let per = st.crossing();
    let _ = writeln!(s, "#define THELMA_GRID 1");
    let _ = writeln!(s, "#define THELMA_SIDES {SIDE_COUNT}");
    for (a, name) in ["side_dx", "side_dy", "side_dz"].into_iter().enumerate() {
        table(s, "int", name, &SIDES.map(|d| d[a]));
    }
    let mut out = vec![0usize; SIDE_COUNT * per];
    let mut len = [0usize; SIDE_COUNT];
    let mut slot = vec![u8::MAX; SIDE_COUNT * st.q()];
    for side in 0..SIDE_COUNT {
        let written = side_populations(st.c, side ^ 1);
        assert!(
            written.len() <= per,
            "a side carries at most a face's populations"
        );
        len[side] = written.len();
        out[side * per..side * per + written.len()].copy_from_slice(&written);
        for (k, j) in side_populations(st.c, side).into_iter().enumerate() {
            slot[side * st.q() + j] = k as u8;
        }
    }
    table(s, "int", "side_out_len", &len);
    table(s, "int", "side_out_dir", &out);
    let join = |v: Vec<String>| v.join(", ");
    let _ = writeln!(
        s,
        "__constant__ unsigned char thelma_side_slot[{SIDE_COUNT}][{}] = {{{}}};",
        st.q(),
        join(slot.iter().map(|v| v.to_string()).collect())
    );
    let at: Vec<String> = (0..27)
        .map(|k| {
            let d = [k % 3, (k / 3) % 3, k / 9].map(|v: i32| v - 1);
            side_of(d).map_or(-1, |s| s as i32).to_string()
        })
        .collect();
    let _ = writeln!(s, "__constant__ int thelma_side_at[27] = {{{}}};", join(at));
}

/// The stored type of the populations, `store_t`, and its conversions (thelma_core::Stored): loads
/// `thelma_load` (of a value) and `thelma_ldg` (through the read-only cache, where the stored type
/// allows), stores `thelma_store<S>`. With f16 storage, the binary16 bits of g · SCALE
/// ([`ScaledHalf`]), converted by the PTX instructions that round to nearest even, as the host's;
/// with f16c storage, [`Half12`]'s bit operations, printed from its constants as the host runs them
/// (`__fadd_rn`, which no contraction fuses, for the subnormal rounding).
fn storage(s: &mut String, precision: Precision) {
    s.push_str(
        "__device__ __forceinline__ real thelma_load(real x) { return x; }\n\
         __device__ __forceinline__ real thelma_ldg(const real* p) { return __ldg(p); }\n\
         template <typename S> __device__ __forceinline__ S thelma_store(real x);\n\
         template <> __device__ __forceinline__ real thelma_store<real>(real x) { return x; }\n",
    );
    if precision == Precision::F16c {
        let _ = write!(
            s,
            "struct thelma_h12 {{ unsigned short bits; }};\n\
             typedef thelma_h12 store_t;\n\
             __device__ __forceinline__ real thelma_load(thelma_h12 h) {{\n    \
                 unsigned int b = h.bits;\n    \
                 float v = __uint_as_float(((b & 0x8000u) << 16) | ((b & 0x7FFFu) << 12)) * {scale};\n    \
                 return (b & 0x7FFFu) == {nan}u ? __uint_as_float(0x7FC00000u) : v;\n}}\n\
             __device__ __forceinline__ thelma_h12 thelma_ldg(const thelma_h12* p) {{\n    \
                 return thelma_h12{{__ldg(&p->bits)}};\n}}\n\
             template <> __device__ __forceinline__ thelma_h12 thelma_store<thelma_h12>(real x) {{\n    \
                 unsigned int bits = __float_as_uint(x), a = bits & 0x7FFFFFFFu, code;\n    \
                 if (a < {min_normal}u) {{\n        \
                     code = __float_as_uint(__fadd_rn(__uint_as_float(a), __uint_as_float({magic}u))) - {magic}u;\n    \
                 }} else {{\n        \
                     unsigned int r = a - {rebias}u;\n        \
                     code = (r + 0x7FFu + ((r >> 12) & 1u)) >> 12;\n    \
                 }}\n    \
                 return thelma_h12{{(unsigned short)(((bits >> 16) & 0x8000u) | min(code, {nan}u))}};\n}}\n",
            scale = lit_f32(Half12::LOAD_SCALE),
            nan = Half12::NAN_BITS,
            min_normal = Half12::MIN_NORMAL_BITS,
            magic = Half12::SUBNORMAL_MAGIC_BITS,
            rebias = Half12::REBIAS_BITS,
        );
        return;
    }
    if precision != Precision::F16 {
        let _ = writeln!(s, "typedef real store_t;");
        return;
    }
    let scale = ScaledHalf::SCALE;
    let _ = write!(
        s,
        "struct thelma_half {{ unsigned short bits; }};\n\
         typedef thelma_half store_t;\n\
         __device__ __forceinline__ real thelma_load(thelma_half h) {{\n    \
             float f;\n    \
             asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h.bits));\n    \
             return f * {inv};\n}}\n\
         __device__ __forceinline__ thelma_half thelma_ldg(const thelma_half* p) {{\n    \
             return thelma_half{{__ldg(&p->bits)}};\n}}\n\
         template <> __device__ __forceinline__ thelma_half thelma_store<thelma_half>(real x) {{\n    \
             thelma_half h;\n    \
             asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h.bits) : \"f\"(x * {scale}));\n    \
             return h;\n}}\n",
        inv = lit_f32(1.0 / scale),
        scale = lit_f32(scale),
    );
}

/// The temperature lattice's loads and stores (thelma_core::physics::load_thermal, store_thermal):
/// `thelma_tload` (of a value), `thelma_tldg` (through the read-only cache) and `thelma_tstore`,
/// the flow's conversions of `store_t` with the store scale's multiplication (an exact power of
/// two, in `f32`: only 16-bit storage scales); without a scale, they are the flow's conversions.
fn thermal_storage(s: &mut String, scale: f64) {
    let (to, from) = if scale == 1.0 {
        (String::new(), String::new())
    } else {
        (
            format!(" * {}", lit_f32(scale as f32)),
            format!(" * {}", lit_f32((1.0 / scale) as f32)),
        )
    };
    let _ = write!(
        s,
        "__device__ __forceinline__ real thelma_tload(store_t x) {{ return thelma_load(x){from}; }}\n\
         __device__ __forceinline__ real thelma_tldg(const store_t* p) {{ return thelma_load(thelma_ldg(p)){from}; }}\n\
         __device__ __forceinline__ store_t thelma_tstore(real h) {{ return thelma_store<store_t>(h{to}); }}\n"
    );
}

/// A float literal that is exactly `x`.
fn lit_f32(x: f32) -> String {
    format!("{x:?}f")
}

/// The prelude for `p`.
pub fn prelude(p: &PreludeParams) -> String {
    let mut s = String::new();
    let (real, sqrt) = match p.precision.arithmetic() {
        Precision::F64 => ("double", "sqrt"),
        _ => ("float", "sqrtf"),
    };
    let suffix = p.precision.name();
    let st = D3Q19;
    let _ = writeln!(
        s,
        "// Generated by thelma_compute::cuda::prelude from thelma-core; do not edit."
    );
    let _ = writeln!(s, "typedef {real} real;");
    storage(&mut s, p.precision);
    let index = match p.index_bytes {
        1 => "unsigned char",
        2 => "unsigned short",
        b => panic!("a palette index of {b} bytes"),
    };
    let _ = writeln!(s, "typedef {index} thelma_index;");
    let _ = writeln!(s, "#define THELMA_NAME(base) base##_{suffix}");
    let _ = writeln!(
        s,
        "#define THELMA_COLLIDE_NAME collide_propagate_{}_{}_{suffix}",
        st.name.to_lowercase(),
        p.model.collision
    );
    let _ = writeln!(
        s,
        "#define THELMA_COLLIDE_OPEN_NAME collide_open_{}_{}_{suffix}",
        st.name.to_lowercase(),
        p.model.collision
    );
    let _ = writeln!(
        s,
        "#define THELMA_COLLIDE_THERMAL_NAME collide_thermal_{}_{}_{suffix}",
        st.name.to_lowercase(),
        p.model.collision
    );
    if p.slot_offset {
        let _ = writeln!(s, "#define THELMA_SLOT_OFFSET 1");
    }
    if p.in_place {
        let _ = writeln!(s, "#define THELMA_IN_PLACE 1");
        for step in ["pull", "local"] {
            let _ = writeln!(
                s,
                "#define THELMA_{}_IN_PLACE_NAME collide_{step}_in_place_{}_{}_{suffix}",
                step.to_uppercase(),
                st.name.to_lowercase(),
                p.model.collision
            );
        }
    }
    let _ = writeln!(s, "#define THELMA_Q {}", st.q());
    let _ = writeln!(s, "#define THELMA_CROSSING {}", st.crossing());
    let _ = writeln!(s, "#define THELMA_SOLID_BIT {SOLID_BIT}u");
    let _ = writeln!(s, "#define THELMA_OPEN_BIT {OPEN_BIT}u");
    // The link words of the palette (thelma_geometry::LinkRule::code): kind, source direction and
    // the offset of the source node, each component stored plus one.
    let (kind, dir, off) = (
        LinkRule::KIND_BITS,
        LinkRule::DIR_BITS,
        LinkRule::OFFSET_SHIFT,
    );
    let _ = writeln!(
        s,
        "#define THELMA_LINK_KIND(c) ((c) & {}u)",
        (1u32 << kind) - 1
    );
    for (name, rule) in [
        ("ANTI_BOUNCE", LinkRule::AntiBounce { drho: 0.0 }),
        (
            "SHIFT",
            LinkRule::Shift {
                dir: 0,
                offset: [-1; 3],
            },
        ),
        ("INLET", LinkRule::Inlet),
    ] {
        let _ = writeln!(s, "#define THELMA_LINK_{name} {}u", rule.code());
    }
    let _ = writeln!(
        s,
        "#define THELMA_LINK_DIR(c) ((int)(((c) >> {kind}) & {}u))",
        (1u32 << dir) - 1
    );
    let _ = writeln!(
        s,
        "#define THELMA_LINK_OFFSET(c, a) ((int)(((c) >> ({off} + 2 * (a))) & 3u) - 1)"
    );
    // The inlet word each palette entry keeps in its direction-0 link word (direction 0 has no
    // link): the wall-velocity slot, then the axes of a parabolic profile
    // (thelma_geometry::FlagPalette::inlet); and the amplitude of every slot, which the module uploads
    // when it changes.
    let _ = writeln!(s, "#define THELMA_SLOT_BITS {}u", NodeFlags::SLOT_BITS);
    let _ = writeln!(s, "#define THELMA_WALL_SLOTS {WALL_SLOTS}");
    let _ = writeln!(s, "__constant__ real thelma_amplitude[{WALL_SLOTS}];");
    let _ = writeln!(s, "#define THELMA_BLOCK_X {}", p.block_x);
    let _ = writeln!(s, "#define THELMA_MIN_BLOCKS {}", p.min_blocks);
    stencil_tables(&mut s, &st);
    if p.grid {
        side_tables(&mut s, &st);
        if p.grid_x {
            let _ = writeln!(s, "#define THELMA_GRID_X 1");
        }
    }
    // The correctly rounded square root of the run's precision (what `Arith::sqrt` is on the CPU).
    let _ = writeln!(
        s,
        "__device__ __forceinline__ real thelma_sqrt(real x) {{ return {sqrt}(x); }}"
    );
    s.push_str(&collision_source(&p.model));
    s.push_str(&pressure_source());
    s.push_str(&velocity_source(&p.model));
    if let Some(setup) = &p.thermal {
        let fixed = (!p.steered_temperatures).then(|| p.precision.arithmetic());
        thermal_storage(&mut s, setup.store_scale);
        s.push_str(&thermal_source(&p.model, setup, fixed));
    }
    if !p.sponges.is_empty() {
        s.push_str(&sponge_source(&p.sponges));
    }
    if p.immersed {
        s.push_str(&immersed_source(&p.model, p.thermal.is_none()));
    }
    s
}

/// What the immersed bodies' kernels (`kernels/immersed.cu`) read besides the step's functions:
/// `THELMA_IMMERSED`, the lanes of a group serving one point (`THELMA_IB_GROUP`,
/// [`super::immersed::GROUP`]) and the words of a band node's force record (`THELMA_IB_RECORD`,
/// [`super::immersed::RECORD`]), the words of a chunk of the band's bitmap (`THELMA_IB_CHUNK`,
/// [`super::immersed::CHUNK`]), the flow's collision under a per-node force
/// (`thelma_collide_forced`, unless the temperature lattice's functions printed it: `forced`), and
/// in namespace `thelma_ib`, where
/// `real` is double (the host solves the forcing in f64), Roma's kernel in its two branches
/// (`delta_inner`, `delta_outer`, printed from `thelma_core::physics::immersed`) and a node's
/// ρ and velocity under the uniform force (`macroscopic`, from `thelma_core::physics::macroscopic`).
pub fn immersed_source(model: &FlowModel, forced: bool) -> String {
    let mut s = format!(
        "#define THELMA_IMMERSED 1
#define THELMA_IB_GROUP {}
#define THELMA_IB_RECORD {}
#define THELMA_IB_CHUNK {}
",
        super::immersed::GROUP,
        super::immersed::RECORD,
        super::immersed::CHUNK
    );
    if forced {
        s.push_str(&collision_function(model, true, false));
    }
    s.push_str(
        "namespace thelma_ib {
typedef double real;
         __device__ __forceinline__ double thelma_sqrt(double x) { return sqrt(x); }
",
    );
    for (name, f) in [
        ("delta_inner", delta_inner::<Sym> as fn(Sym) -> Sym),
        ("delta_outer", delta_outer::<Sym>),
    ] {
        let (v, rec) = symbolic::record(|| f(Sym::input("r")));
        let _ = writeln!(
            s,
            "// Roma's three-point kernel, printed from thelma_core::physics::immersed::{name}.
             __device__ __forceinline__ real {name}(real r) {{
    real v;"
        );
        s.push_str(&rec.emit_c(&[("v".to_string(), v)], PARAM_PREFIX, "    "));
        s.push_str(
            "    return v;
}
",
        );
    }
    let (m, rec) = symbolic::record(|| {
        let g: [Sym; Q] = std::array::from_fn(|i| Sym::input(format!("g[{i}]")));
        let force = model.force.map(|f| {
            [
                Sym::param("force_x", f[0]),
                Sym::param("force_y", f[1]),
                Sym::param("force_z", f[2]),
            ]
        });
        macroscopic(&g, force)
    });
    for (name, value) in rec.params() {
        define_param(&mut s, name, *value);
    }
    s.push_str(
        "// A node's ρ and velocity (j + F/2)/ρ under the uniform force, printed from
         // thelma_core::physics::macroscopic.
         template <typename G>
         __device__ __forceinline__ void macroscopic(const G& g, real* __restrict__ rho,          real* __restrict__ u) {
",
    );
    let mut outputs = vec![("rho[0]".to_string(), m.rho)];
    outputs.extend((0..3).map(|a| (format!("u[{a}]"), m.u[a])));
    s.push_str(&rec.emit_c(&outputs, PARAM_PREFIX, "    "));
    s.push_str(
        "}
}  // namespace thelma_ib
",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use thelma_core::physics::d3q19::UP;

    #[test]
    fn literals_round_trip_and_tables_follow_the_core() {
        for x in [1.0 / 3.0, 1.0 / 36.0, 1.19 / 2394.0, 1.6] {
            assert_eq!(lit(x).parse::<f64>().unwrap(), x);
        }
        let p = prelude(&PreludeParams::example(Precision::F32, Collision::MRT));
        assert!(p.contains("typedef float real;"));
        assert!(p.contains("cx(int i) { const int t[19] = {0, 1, -1, 0, 0, 0, 0, 1, -1, 1, -1, 1, -1, 1, -1, 0, 0, 0, 0};"));
        assert!(p.contains(&format!(
            "up_dir(int i) {{ const int t[5] = {{{}}};",
            UP.map(|u| u.to_string()).join(", ")
        )));
        assert!(p.contains("#define THELMA_COLLIDE_NAME collide_propagate_d3q19_mrt_f32"));
        assert!(p.contains("#define THELMA_K_omega ((real)1.6e0)"));
        let p64 = prelude(&PreludeParams::example(Precision::F64, Collision::TRT));
        assert!(p64.contains("base##_f64") && p64.contains("collide_propagate_d3q19_trt_f64"));
        assert!(p64.contains("typedef double real;") && p64.contains("typedef real store_t;"));
    }

    /// f16 storage collides in float and stores thelma_half, converting with the host's scale
    /// (`ScaledHalf::SCALE`) printed as literals that are exactly it and its inverse.
    #[test]
    fn f16_storage_prints_the_hosts_conversion() {
        let p = prelude(&PreludeParams::example(Precision::F16, Collision::BGK));
        assert!(p.contains("typedef float real;") && p.contains("typedef thelma_half store_t;"));
        assert!(p.contains("collide_propagate_d3q19_bgk_f16"));
        let (scale, inv) = (lit_f32(ScaledHalf::SCALE), lit_f32(1.0 / ScaledHalf::SCALE));
        assert!(p.contains(&format!("(x * {scale})")) && p.contains(&format!("f * {inv}")));
        let parse = |l: &str| l.trim_end_matches('f').parse::<f32>().unwrap();
        assert_eq!(parse(&scale), 32768.0);
        assert_eq!(parse(&inv) * 32768.0, 1.0);
        assert!(p.contains("cvt.rn.f16.f32") && p.contains("cvt.f32.f16"));
    }

    /// f16c storage prints `Half12`'s conversions with its constants: the load's exact scale 2¹¹²,
    /// the NaN code, and the store's rounding thresholds.
    #[test]
    fn f16c_storage_prints_the_hosts_bit_operations() {
        let p = prelude(&PreludeParams::example(Precision::F16c, Collision::MRT));
        assert!(p.contains("typedef float real;") && p.contains("typedef thelma_h12 store_t;"));
        assert!(p.contains("collide_propagate_d3q19_mrt_f16c"));
        let scale = lit_f32(Half12::LOAD_SCALE);
        assert_eq!(
            scale.trim_end_matches('f').parse::<f32>().unwrap(),
            2f32.powi(112)
        );
        assert!(p.contains(&format!("* {scale};")));
        for k in [
            Half12::MIN_NORMAL_BITS,
            Half12::SUBNORMAL_MAGIC_BITS,
            Half12::REBIAS_BITS,
            Half12::NAN_BITS as u32,
        ] {
            assert!(p.contains(&format!("{k}u")), "{k}");
        }
        assert!(p.contains("__fadd_rn") && !p.contains("cvt.rn.f16.f32"));
    }

    /// The printed velocity computes what the host's `stored_macroscopic` does, bit for bit, with and
    /// without a force; the force's constants are defined once whichever function comes first.
    #[test]
    fn the_printed_velocity_is_the_hosts() {
        let mut m = FlowModel::plain(Collision::MRT, 1.7);
        for force in [None, Some([3e-5, -1e-5, 2e-6])] {
            m.force = force;
            let (u, rec) = velocity_recording(&m);
            let g: [f32; Q] = std::array::from_fn(|i| (i as f32 * 0.37).sin() * 1e-2);
            let got = rec.eval::<f32>(&u, |name| {
                let i: usize = name[2..name.len() - 1].parse().unwrap();
                g[i]
            });
            let want = stored_macroscopic(&g, force.map(|f| f.map(|x| x as f32))).u;
            assert_eq!(got, want.to_vec(), "force {force:?}");
            let p = prelude(&PreludeParams {
                model: m.clone(),
                ..PreludeParams::example(Precision::F32, Collision::MRT)
            });
            assert!(p.contains("void thelma_velocity(const G& g, real* __restrict__ u)"));
            let defines = p.matches("#define THELMA_K_force_x ").count();
            assert_eq!(defines, if force.is_some() { 2 } else { 0 }, "{force:?}");
            if force.is_some() {
                assert!(p.contains("#ifndef THELMA_K_force_x"));
            }
        }
    }

    /// With a temperature lattice the prelude prints its functions and the flow's collision under a
    /// per-node force (besides the uniform one), the face closures as tables, and the uniform force
    /// inside the coupled force; without one, none of it.
    #[test]
    fn the_temperature_lattice_is_printed_only_with_one() {
        let mut p = PreludeParams::example(Precision::F32, Collision::TRT);
        assert!(!prelude(&p).contains("THELMA_THERMAL"));
        p.model.force = Some([2e-6, 0.0, 0.0]);
        p.thermal = Some(ThermalSetup {
            model: thelma_core::physics::ThermalModel::new(0.02, 1e-3, [0.0, 0.0, -1e-3]),
            faces: [
                ThermalFace::Held(0.5),
                ThermalFace::Held(-0.25),
                ThermalFace::Adiabatic,
                ThermalFace::Adiabatic,
                ThermalFace::Outflow,
                ThermalFace::Adiabatic,
            ],
            patches: vec![(
                thelma_core::FacePatch {
                    face: thelma_core::Face::XMinus,
                    lo: [2, 3],
                    hi: [4, 5],
                },
                ThermalFace::Outflow,
            )],
            initial: 0.0,
            store_scale: 1.0,
        });
        let s = prelude(&p);
        for head in [
            "#define THELMA_THERMAL 1",
            "void thelma_collide(real* __restrict__ g)",
            "void thelma_collide_forced(real* __restrict__ g, const real* __restrict__ F, real tau)",
            "void thelma_temperature(",
            "void thelma_coupled_force(real theta, real* __restrict__ F)",
            "void thelma_advecting_velocity(",
            "void thelma_collide_thermal(",
            "thelma_tface_kind(int i) { const int t[6] = {1, 1, 0, 0, 2, 0};",
            "if (f == 0 && y >= 2 && y <= 4 && z >= 3 && z <= 5) { *kind = 2; *term = thelma_held(6); return; }",
            "*term = thelma_held(f);",
            "#define THELMA_K_omega_t ",
        ] {
            assert!(s.contains(head), "{head}");
        }
        // Held fixed, the terms are literals of the run's arithmetic (the CPU module's values);
        // steered, a constant table the module fills.
        let terms = [0.5f32, -0.25].map(|t| lit(f64::from(dirichlet_term(t))));
        let fixed = format!(
            "real thelma_held(int i) {{ const real t[7] = {{{}, {}, 0e0, 0e0, 0e0, 0e0, 0e0}}; return t[i]; }}",
            terms[0], terms[1]
        );
        assert!(s.contains(&fixed), "{fixed}");
        assert!(!s.contains("__constant__ real thelma_held_term"));
        let steered = prelude(&PreludeParams {
            steered_temperatures: true,
            ..p.clone()
        });
        assert!(steered.contains("__constant__ real thelma_held_term[7];"));
        assert!(!steered.contains(&fixed));
        // The uniform force is added to the buoyancy, and defined once.
        let start = s.find("void thelma_coupled_force").unwrap();
        assert!(s[start..start + 400].contains("THELMA_K_force_x"));
        assert_eq!(s.matches("#define THELMA_K_force_x ").count(), 1 + 1 + 1);
    }

    /// The sponge layers are printed only for a case with some: one depth test per layer, with its
    /// width, strength, target and outward normal.
    #[test]
    fn sponge_layers_are_printed_only_with_some() {
        use thelma_core::physics::SpongeLayer;
        use thelma_core::Face;
        let mut p = PreludeParams::example(Precision::F32, Collision::MRT);
        assert!(!prelude(&p).contains("THELMA_SPONGE"));
        p.sponges.layers = vec![
            SpongeLayer {
                face: Face::XPlus,
                width: 12,
                strength: 0.5,
                drho: 0.002,
                extent: 96,
            },
            SpongeLayer {
                face: Face::ZMinus,
                width: 6,
                strength: 0.25,
                drho: 0.0,
                extent: 40,
            },
        ];
        let s = prelude(&p);
        for want in [
            "#define THELMA_SPONGE 1",
            "void thelma_absorb(real* __restrict__ g, real sigma, real drho_w, const real* __restrict__ n)",
            "const int d = 96 - 1 - x;",
            "thelma_sponge_rate((real)d, (real)12, (real)5e-1)",
            "drho_w = (real)2e-3;",
            "n[0] = (real)1; n[1] = (real)0; n[2] = (real)0;",
            "const int d = z;",
            "thelma_sponge_rate((real)d, (real)6, (real)2.5e-1)",
            "n[0] = (real)0; n[1] = (real)0; n[2] = (real)-1;",
        ] {
            assert!(s.contains(want), "{want}");
        }
        assert_eq!(s.matches("const int d = ").count(), 2);
    }

    /// The printed collision follows the model: a force and the eddy viscosity appear as run
    /// constants and square roots only when the model has them.
    #[test]
    fn the_printed_collision_follows_the_model() {
        let mut m = FlowModel::plain(Collision::BGK, 1.2);
        let plain = collision_source(&m);
        assert!(!plain.contains("thelma_sqrt(") && !plain.contains("force_x"));
        m.smagorinsky = Some(0.1);
        m.force = Some([1e-5, 0.0, 0.0]);
        let extra = collision_source(&m);
        assert!(extra.contains("thelma_sqrt(") && extra.contains("#define THELMA_K_force_x"));
        // Every population is assigned once.
        for i in 0..Q {
            assert_eq!(
                extra.matches(&format!("    g[{i}] = ")).count(),
                1,
                "g[{i}]"
            );
        }
    }
}
