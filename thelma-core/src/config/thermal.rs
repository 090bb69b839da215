//! The temperature lattice of a case (`[thermal]`): its diffusivity, buoyancy and temperatures,
//! checked and turned into the lattice's [`ThermalSetup`] (what closes each face comes from the
//! `[[boundary]]` tables' kinds and `temperature`s).

use serde::{Deserialize, Serialize};

use super::boundary::{BoundaryConfig, BoundaryKind, Face, FacePatch};
use super::error::{bad, ConfigError};
use super::units::UnitScales;
use crate::numfmt::{num, num_exact};
use crate::physics::{ThermalFace, ThermalModel, ThermalSetup, DEFAULT_THERMAL_MAGIC};

/// Absolute zero in °C. With `[units]` a temperature is in °C or K, and one below this is refused
/// in either (a kelvin temperature below it is below zero too).
pub const ABSOLUTE_ZERO_C: f64 = -273.15;

/// The least `τ_T − ½ = 1/ω⁻ − ½` the temperature lattice accepts. Near ½ the odd rate is
/// `ω⁻ ≈ 2 − 4(τ_T − ½)`, and f32 holds a number near 2 to within 6.0e-8, so at this excess the
/// stored rate already moves the diffusivity by up to 1.5 %; below it, rounding sets α.
const MIN_TAU_EXCESS: f64 = 1e-6;

/// The temperature lattice (`[thermal]`): an advection–diffusion equation for the temperature T,
/// carried by the flow and pushing back on it through the Boussinesq force `F = −β g (T − t0)`
/// (ρ₀ = 1), on D3Q7 with a TRT collision.
///
/// Only differences of temperature reach the lattice (it runs θ = T − t0, and the equations are
/// linear in θ), so temperatures are in whatever unit the case keeps to. With `[units]` they are
/// °C or K, either, and any below −273.15 is refused (`t0`, `initial` and the faces'
/// `temperature`); `diffusivity` is then in m²/s, `gravity` in m/s² and `beta` in 1/K.
///
/// The equilibrium `w_i θ (1 + 4 c_i·u)` gives a population the sign opposite to θ's where a
/// velocity component passes 1/4 (D3Q7's `c_s² = 1/4`), below the flow's own limit: keep the flow's speeds under 0.25
/// (lattice units) in a case with `[thermal]`. Nothing checks it for you.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThermalConfig {
    /// Thermal diffusivity α: lattice units, or m²/s with `[units]` (air 2.2e-5, water 1.4e-7).
    /// Give it or `prandtl`, not both.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diffusivity: Option<f64>,
    /// The Prandtl number `ν / α`, from which α follows the flow's viscosity (air 0.71, water 7).
    /// Give it or `diffusivity`, not both.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prandtl: Option<f64>,
    /// The thermal expansion coefficient β: per unit of temperature, 1/K with `[units]` (an ideal
    /// gas: 1/T₀ in kelvin). 0 (the default) leaves the flow free of buoyancy.
    pub beta: f64,
    /// Gravity `[gx, gy, gz]`: lattice units, or m/s² with `[units]` (`[0, 0, -9.81]`); default 0.
    pub gravity: [f64; 3],
    /// The reference temperature T₀, at which a fluid parcel is neutrally buoyant; default 0.
    pub t0: f64,
    /// The uniform temperature the fluid starts at; default `t0`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial: Option<f64>,
    /// TRT's magic parameter Λ = (1/ω⁺ − ½)(1/ω⁻ − ½) of the temperature lattice; 1/4 by default.
    pub magic: f64,
    /// The turbulent Prandtl number `ν_t / α_t` under the flow's Smagorinsky model
    /// (`numerics.smagorinsky`): each node's diffusivity is `α + ν_t / Pr_t`. 0.85 by default
    /// with the model; refused without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turbulent_prandtl: Option<f64>,
    /// Faces held at a temperature whose Nusselt number the run reports (`["x-", "x+"]`): the
    /// mean heat flux into the fluid over the face, in units of conduction across the box's extent
    /// normal to the face at the difference between the highest and lowest held temperatures.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nusselt: Vec<Face>,
}

/// The turbulent Prandtl number taken under the Smagorinsky model when the case gives none (the
/// usual value for air in wall-bounded flows).
pub const DEFAULT_TURBULENT_PRANDTL: f64 = 0.85;

impl Default for ThermalConfig {
    fn default() -> Self {
        Self {
            diffusivity: None,
            prandtl: None,
            beta: 0.0,
            gravity: [0.0; 3],
            t0: 0.0,
            initial: None,
            magic: DEFAULT_THERMAL_MAGIC,
            turbulent_prandtl: None,
            nusselt: Vec::new(),
        }
    }
}

/// Refuses a value that is not a finite number above 0.
fn positive(v: f64, key: &'static str, unit: &str) -> Result<f64, ConfigError> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(bad(
            key,
            "--config",
            format!("{}{unit} must be a finite number > 0", num_exact(v)),
        ))
    }
}

impl ThermalConfig {
    /// Checks the section and the faces' temperatures and derives the temperature lattice:
    /// `viscosity` is the flow's (lattice units), `scales` the case's physical units, `boundary`
    /// and `periodic` its faces, `les` whether the flow has the Smagorinsky model. A face's kind
    /// is checked with the face (a `temperature` on an open face or without `[thermal]` is refused
    /// there).
    pub(super) fn setup(
        &self,
        viscosity: f64,
        scales: Option<&UnitScales>,
        boundary: &[BoundaryConfig],
        patches_of: &[Option<FacePatch>],
        periodic: [bool; 3],
        les: bool,
    ) -> Result<ThermalSetup, ConfigError> {
        let si = scales.is_some();
        let mut model = self.model(viscosity, scales)?;
        model.turbulent_prandtl = match (self.turbulent_prandtl, les) {
            (Some(_), false) => {
                return Err(bad(
                    "thermal.turbulent_prandtl",
                    "--config",
                    "sets the eddy diffusivity of the Smagorinsky model, which this case does not use (numerics.smagorinsky, --smagorinsky)",
                ))
            }
            (Some(pr), true) => Some(positive(pr, "thermal.turbulent_prandtl", "")?),
            (None, true) => Some(DEFAULT_TURBULENT_PRANDTL),
            (None, false) => None,
        };
        temperature(self.t0, self.t0, si).map_err(|m| bad("thermal.t0", "--config", m))?;
        let initial = self.initial.unwrap_or(self.t0);
        temperature(initial, self.t0, si).map_err(|m| bad("thermal.initial", "--config", m))?;
        let mut faces = [ThermalFace::Adiabatic; 6];
        let mut patches = Vec::new();
        for (b, patch) in boundary
            .iter()
            .zip(patches_of)
            .filter(|(b, _)| !periodic[b.face.axis()])
        {
            if let Some(t) = b.temperature {
                temperature(t, self.t0, si).map_err(|m| {
                    bad(
                        "boundary",
                        "--config",
                        format!("face {}: temperature {m}", b.face.name()),
                    )
                })?;
            }
            let theta = |t: f64| t - self.t0;
            let rule = match b.kind {
                BoundaryKind::Wall => b
                    .temperature
                    .map_or(ThermalFace::Adiabatic, |t| ThermalFace::Held(theta(t))),
                BoundaryKind::Velocity => {
                    ThermalFace::Held(theta(b.temperature.unwrap_or(self.t0)))
                }
                BoundaryKind::Pressure | BoundaryKind::Outflow => ThermalFace::Outflow,
                BoundaryKind::FreeSlip => ThermalFace::Adiabatic,
            };
            match patch {
                Some(p) => patches.push((*p, rule)),
                None => faces[b.face as usize] = rule,
            }
        }
        // Stored as computed; `CaseConfig::thermal_setup` sets the scale of 16-bit storage.
        let setup = ThermalSetup {
            model,
            faces,
            patches,
            initial: initial - self.t0,
            store_scale: 1.0,
        };
        for face in &self.nusselt {
            if !matches!(setup.faces[*face as usize], ThermalFace::Held(_)) {
                return Err(bad(
                    "thermal.nusselt",
                    "--config",
                    format!(
                        "face {} is not held at a temperature (a [[boundary]] wall of the whole face with `temperature`)",
                        face.name()
                    ),
                ));
            }
            if setup.held_spread().is_none() {
                return Err(bad(
                    "thermal.nusselt",
                    "--config",
                    "needs two faces or patches held at different temperatures (the reference difference)",
                ));
            }
        }
        if boundary.iter().any(|b| b.nusselt) && setup.held_spread().is_none() {
            return Err(bad(
                "boundary",
                "--config",
                "`nusselt` needs two faces or patches held at different temperatures (the reference difference)",
            ));
        }
        Ok(setup)
    }

    /// The lattice model: α from `diffusivity` (converted from m²/s, `α dt / dx²`) or from the
    /// flow's viscosity and `prandtl`, gravity converted from m/s² (`g dt² / dx`), and Λ.
    fn model(
        &self,
        viscosity: f64,
        scales: Option<&UnitScales>,
    ) -> Result<ThermalModel, ConfigError> {
        let (alpha, key, given) = match (self.diffusivity, self.prandtl) {
            (None, None) => {
                return Err(bad(
                    "thermal.diffusivity",
                    "--config",
                    "the temperature lattice needs `diffusivity` (lattice units, m²/s with [units]) or `prandtl` (ν/α)",
                ))
            }
            (Some(_), Some(_)) => {
                return Err(bad(
                    "thermal.prandtl",
                    "--config",
                    "give `diffusivity` or `prandtl`, not both (they set the same α)",
                ))
            }
            (Some(a), None) => {
                let unit = if scales.is_some() { " m²/s" } else { "" };
                let a = positive(a, "thermal.diffusivity", unit)?;
                let alpha = a / scales.map_or(1.0, |s| s.viscosity);
                (alpha, "thermal.diffusivity", format!("α = {}{unit}", num_exact(a)))
            }
            (None, Some(pr)) => {
                let pr = positive(pr, "thermal.prandtl", "")?;
                let given = format!(
                    "Pr = {} (ν = {})",
                    num_exact(pr),
                    num_exact(viscosity)
                );
                (viscosity / pr, "thermal.prandtl", given)
            }
        };
        if !(alpha.is_finite() && alpha > 0.0) {
            return Err(bad(
                key,
                "--config",
                format!(
                    "{given} gives the lattice diffusivity {}, not a finite number > 0",
                    num_exact(alpha)
                ),
            ));
        }
        if !self.beta.is_finite() {
            return Err(bad(
                "thermal.beta",
                "--config",
                format!("{} must be finite", num_exact(self.beta)),
            ));
        }
        let to_lattice = scales.map_or(1.0, |s| s.dt * s.dt / s.dx);
        let g = self.gravity.map(|v| v * to_lattice);
        if self.gravity.iter().chain(&g).any(|v| !v.is_finite()) {
            let unit = if scales.is_some() { " m/s²" } else { "" };
            return Err(bad(
                "thermal.gravity",
                "--config",
                format!("{:?}{unit} must be finite", self.gravity),
            ));
        }
        if !(self.magic.is_finite() && self.magic > 0.0) {
            return Err(bad(
                "thermal.magic",
                "--config",
                format!(
                    "Λ = {} must be a finite number > 0 (1/4 by default)",
                    num_exact(self.magic)
                ),
            ));
        }
        let mut model = ThermalModel::new(alpha, self.beta, g);
        model.magic = self.magic;
        let excess = 1.0 / model.omega - 0.5;
        if excess < MIN_TAU_EXCESS {
            return Err(bad(
                key,
                "--config",
                format!(
                    "{given} puts τ_T − ½ at {} (α = {} in lattice units), below {}, where f32 rounding of the rate moves α by more than 1.5 %: raise α in lattice units (with [units], a coarser grid or a larger lid_speed does)",
                    num(excess),
                    num(alpha),
                    num(MIN_TAU_EXCESS)
                ),
            ));
        }
        Ok(model)
    }
}

/// Why a temperature cannot be used: not finite, nor its difference from `t0` (which the lattice
/// holds), or below absolute zero with `[units]` (`si`).
fn temperature(t: f64, t0: f64, si: bool) -> Result<(), String> {
    if !(t.is_finite() && (t - t0).is_finite()) {
        return Err(format!(
            "{} must be finite, and so must its difference from t0 = {}",
            num_exact(t),
            num_exact(t0)
        ));
    }
    if si && t < ABSOLUTE_ZERO_C {
        return Err(format!(
            "{} is below absolute zero (−273.15 °C; with [units] temperatures are °C or K)",
            num_exact(t)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CaseConfig, Face};
    use crate::physics::store_scale_of;
    use crate::Precision;

    /// A 16 × 8 × 8 box of ν = 0.05 (lattice units), periodic along z, with `extra` appended.
    const BOX: &str = "[domain]\ncase = \"box\"\nsize = [16, 8, 8]\nperiodic = [false, false, true]\n[physics]\nviscosity = 0.05\n[run]\nsteps = 100\n";

    /// The same box in SI: 0.1 m along x over 20 nodes (dx = 5 mm), 0.01 m/s at the lattice speed
    /// 0.05 (dt = 0.05 · 0.005 / 0.01 = 25 ms), water's viscosity 1e-6 m²/s (ν = 1e-6 · 0.025 /
    /// 0.005² = 1e-3 in lattice units).
    const SI: &str = "[domain]\ncase = \"box\"\nsize = [20, 8, 8]\nperiodic = [false, false, true]\n[physics]\nlid_speed = 0.05\n[run]\nsteps = 100\n[units]\nlength = 0.1\nvelocity = 0.01\nviscosity = 1e-6\n";

    /// Convergence is judged on the velocity alone, so a thermal case runs a fixed number of steps.
    #[test]
    fn a_thermal_case_runs_a_fixed_number_of_steps() {
        let head = BOX.replace("[run]\nsteps = 100\n", "");
        let e = case(&head, "[thermal]\ndiffusivity = 0.02\n")
            .validate()
            .expect_err("no steps");
        assert_eq!((e.key, e.flag), ("run.steps", "--steps"));
        assert!(e.message.contains("fixed number of steps"), "{e}");
    }

    fn case(head: &str, extra: &str) -> CaseConfig {
        CaseConfig::parse(&format!("{head}{extra}"), false).expect("the case parses")
    }

    fn setup(head: &str, extra: &str) -> ThermalSetup {
        let c = case(head, extra);
        let lattice = c.validate().unwrap_or_else(|e| panic!("{extra}: {e}"));
        c.thermal_setup(&lattice).expect("the case has [thermal]")
    }

    /// Asserts that the case is refused naming `key`, with a message that says `says`.
    fn refused(head: &str, extra: &str, key: &str, says: &str) {
        let e = case(head, extra).validate().expect_err(extra);
        assert_eq!((e.key, e.flag), (key, "--config"), "{extra}: {e:?}");
        assert!(
            e.message.contains(says),
            "{extra}: {e:?} does not say {says:?}"
        );
        assert_eq!(e.to_string().lines().count(), 1, "{e}");
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs()
    }

    /// The turbulent Prandtl number goes with the Smagorinsky model: 0.85 by default under it,
    /// the given one when given, refused without the model or when not a number above 0.
    #[test]
    fn the_turbulent_prandtl_number_goes_with_the_eddy_viscosity() {
        assert_eq!(
            setup(BOX, "[thermal]\nprandtl = 0.71\n")
                .model
                .turbulent_prandtl,
            None
        );
        let les = BOX.replace("[run]", "[numerics]\nsmagorinsky = 0.12\n[run]");
        assert_eq!(
            setup(&les, "[thermal]\nprandtl = 0.71\n")
                .model
                .turbulent_prandtl,
            Some(DEFAULT_TURBULENT_PRANDTL)
        );
        assert_eq!(
            setup(&les, "[thermal]\nprandtl = 0.71\nturbulent_prandtl = 0.6\n")
                .model
                .turbulent_prandtl,
            Some(0.6)
        );
        refused(
            BOX,
            "[thermal]\nprandtl = 0.71\nturbulent_prandtl = 0.6\n",
            "thermal.turbulent_prandtl",
            "Smagorinsky",
        );
        for bad in ["0", "-1", "nan", "inf"] {
            refused(
                &les,
                &format!("[thermal]\nprandtl = 0.71\nturbulent_prandtl = {bad}\n"),
                "thermal.turbulent_prandtl",
                "> 0",
            );
        }
    }

    /// In 16 bits the populations are scaled by the power of two that puts the case's largest
    /// |θ| (held faces and patches, the start) in [1/8, 1/4); as computed they are not scaled.
    #[test]
    fn sixteen_bit_storage_scales_theta_by_the_cases_reach() {
        let faces = "[thermal]\nprandtl = 0.71\nt0 = 20.0\ninitial = 18.0\n\
                     [[boundary]]\nface = \"x-\"\ntemperature = 15.0\n\
                     [[boundary]]\nface = \"x+\"\ntemperature = 22.0\n";
        for (precision, scale) in [("f32", 1.0), ("f64", 1.0), ("f16", 1.0 / 32.0)] {
            let head = BOX.replace(
                "[run]",
                &format!("[numerics]\nprecision = \"{precision}\"\n[run]"),
            );
            let s = setup(&head, faces);
            // θ: −5 (x−), 2 (x+), −2 (start): reach 5, 5/32 in [1/8, 1/4); steered up to 64.
            assert_eq!((s.reach(), s.store_scale), (5.0, scale), "{precision}");
            let bound = s.held_bound(c_precision(precision));
            assert_eq!(bound, if scale == 1.0 { f64::INFINITY } else { 64.0 });
        }
        // A reach that is a power of two lands on 1/8; none scales by 1.
        assert_eq!(store_scale_of(4.0), 1.0 / 32.0);
        assert_eq!(store_scale_of(0.75), 0.25);
        assert_eq!(store_scale_of(0.0), 1.0);
        assert_eq!(store_scale_of(f64::NAN), 1.0);
        assert_eq!(store_scale_of(1e-3), 128.0);
    }

    fn c_precision(name: &str) -> Precision {
        [
            Precision::F32,
            Precision::F64,
            Precision::F16,
            Precision::F16c,
        ]
        .into_iter()
        .find(|p| p.name() == name)
        .expect("a precision")
    }

    #[test]
    fn a_thermal_section_parses_with_its_defaults() {
        let c = case(BOX, "[thermal]\nprandtl = 0.71\n");
        let t = c.thermal.as_ref().unwrap();
        assert_eq!(
            *t,
            ThermalConfig {
                prandtl: Some(0.71),
                ..ThermalConfig::default()
            }
        );
        assert_eq!(
            (t.beta, t.gravity, t.t0, t.initial),
            (0.0, [0.0; 3], 0.0, None)
        );
        assert_eq!(t.magic, DEFAULT_THERMAL_MAGIC);
        let s = setup(BOX, "[thermal]\nprandtl = 0.71\n");
        assert!(close(s.model.diffusivity(), 0.05 / 0.71), "{s:?}");
        assert_eq!(s.model.magic, 0.25);
        assert_eq!(s.model.buoyancy, [-0.0; 3]);
        assert_eq!(s.faces, [ThermalFace::Adiabatic; 6]);
        assert_eq!(s.initial, 0.0);
        // Without [thermal] there is no temperature lattice.
        let c = case(BOX, "");
        assert_eq!(c.thermal_setup(&c.validate().unwrap()), None);
        // Keys are checked by name.
        let e = CaseConfig::parse(
            &format!("{BOX}[thermal]\nprandtl = 0.7\nalpha = 1.0\n"),
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("alpha") && e.contains("line 11"), "{e}");
    }

    #[test]
    fn lattice_values_pass_through_and_magic_is_kept() {
        let s = setup(
            BOX,
            "[thermal]\ndiffusivity = 0.02\nbeta = 0.5\ngravity = [0.0, 0.0, -1e-3]\nt0 = 10.0\ninitial = 12.5\nmagic = 0.1\n",
        );
        assert!(close(s.model.diffusivity(), 0.02), "{s:?}");
        assert_eq!(s.model.buoyancy, [-0.0, -0.0, 5e-4]);
        assert_eq!(s.model.magic, 0.1);
        assert_eq!(s.initial, 2.5);
    }

    #[test]
    fn physical_units_convert_diffusivity_and_gravity_through_dx_and_dt() {
        // α = 1.4e-7 m²/s → α dt / dx² = 1.4e-7 · 0.025 / 2.5e-5 = 1.4e-4; g = 9.81 m/s² →
        // g dt² / dx = 9.81 · 6.25e-4 / 0.005 = 1.22625, so −β g = 2.1e-4 · 1.22625 upwards.
        let s = setup(
            SI,
            "[thermal]\ndiffusivity = 1.4e-7\nbeta = 2.1e-4\ngravity = [0.0, 0.0, -9.81]\nt0 = 293.15\n",
        );
        assert!(close(s.model.diffusivity(), 1.4e-4), "{s:?}");
        assert!(close(s.model.buoyancy[2], 2.1e-4 * 1.22625), "{s:?}");
        assert_eq!(s.model.buoyancy[..2], [-0.0, -0.0]);
        // Pr = 7 with ν = 1e-3 in lattice units: α = 1e-3 / 7, whatever the units.
        let s = setup(SI, "[thermal]\nprandtl = 7.0\n");
        assert!(close(s.model.diffusivity(), 1e-3 / 7.0), "{s:?}");
        // Temperatures are °C or K: t0 = 20 °C and a wall at 15 °C are θ = −5.
        let s = setup(
            SI,
            "[thermal]\nprandtl = 7.0\nt0 = 20.0\n[[boundary]]\nface = \"y-\"\ntemperature = 15.0\n",
        );
        assert_eq!(s.faces[Face::YMinus as usize], ThermalFace::Held(-5.0));
    }

    #[test]
    fn each_face_kind_closes_the_temperature_lattice_as_documented() {
        let faces = "[[boundary]]\nface = \"x-\"\nkind = \"velocity\"\nvelocity = [0.05, 0.0, 0.0]\ntemperature = 22.0\n\
                     [[boundary]]\nface = \"x+\"\nkind = \"pressure\"\n\
                     [[boundary]]\nface = \"y-\"\ntemperature = 15.0\n\
                     [[boundary]]\nface = \"y+\"\nkind = \"free-slip\"\n";
        let s = setup(
            BOX,
            &format!("[thermal]\nprandtl = 0.71\nt0 = 20.0\n{faces}"),
        );
        use ThermalFace::*;
        // x−, x+, y−, y+, then the periodic z faces (never used).
        assert_eq!(
            s.faces,
            [
                Held(2.0),
                Outflow,
                Held(-5.0),
                Adiabatic,
                Adiabatic,
                Adiabatic
            ]
        );
        assert_eq!(s.initial, 0.0);
        // An inlet without a temperature brings t0; a listed wall without one is adiabatic, as is
        // a face not listed; an outflow lets the temperature out.
        let faces =
            "[[boundary]]\nface = \"x-\"\nkind = \"velocity\"\nvelocity = [0.05, 0.0, 0.0]\n\
                     [[boundary]]\nface = \"x+\"\nkind = \"outflow\"\n\
                     [[boundary]]\nface = \"y-\"\nvelocity = [0.01, 0.0, 0.0]\n";
        let s = setup(
            BOX,
            &format!("[thermal]\nprandtl = 0.71\nt0 = 20.0\ninitial = 18.0\n{faces}"),
        );
        assert_eq!(
            s.faces,
            [
                Held(0.0),
                Outflow,
                Adiabatic,
                Adiabatic,
                Adiabatic,
                Adiabatic
            ]
        );
        assert_eq!(s.initial, -2.0);
    }

    #[test]
    fn each_bad_thermal_value_is_refused_naming_its_key() {
        let t = "[thermal]\n";
        refused(BOX, t, "thermal.diffusivity", "`prandtl`");
        let both = "[thermal]\ndiffusivity = 0.01\nprandtl = 0.7\n";
        refused(BOX, both, "thermal.prandtl", "not both");
        for a in ["-0.01", "0.0", "nan", "inf"] {
            let text = format!("[thermal]\ndiffusivity = {a}\n");
            refused(BOX, &text, "thermal.diffusivity", "finite number > 0");
            let text = format!("[thermal]\nprandtl = {a}\n");
            refused(BOX, &text, "thermal.prandtl", "finite number > 0");
        }
        // 4α = 8e-7: τ_T lies within 1e-6 of ½; 4 · 2.6e-7 is just outside.
        let tiny = "[thermal]\ndiffusivity = 2e-7\n";
        refused(BOX, tiny, "thermal.diffusivity", "f32 rounding");
        setup(BOX, "[thermal]\ndiffusivity = 2.6e-7\n");
        // ν = 0.05 over Pr = 3e5 is α = 1.7e-7.
        refused(
            BOX,
            "[thermal]\nprandtl = 3e5\n",
            "thermal.prandtl",
            "f32 rounding",
        );
        // In SI the lattice value decides: 1e-10 m²/s is 1e-7 in lattice units.
        let si_tiny = "[thermal]\ndiffusivity = 1e-10\n";
        refused(SI, si_tiny, "thermal.diffusivity", "α = 1.0e-10 m²/s");
        for m in ["0.0", "-0.25", "nan"] {
            let text = format!("[thermal]\nprandtl = 0.71\nmagic = {m}\n");
            refused(BOX, &text, "thermal.magic", "finite number > 0");
        }
        let p = "[thermal]\nprandtl = 0.71\n";
        refused(BOX, &format!("{p}beta = inf\n"), "thermal.beta", "finite");
        let g = format!("{p}gravity = [0.0, nan, 0.0]\n");
        refused(BOX, &g, "thermal.gravity", "finite");
        // Finite in m/s² and infinite in lattice units: over 100 m, dt = 25 s and dt² / dx = 125.
        let big = SI
            .replace("length = 0.1", "length = 100.0")
            .replace("viscosity = 1e-6", "viscosity = 1e-2");
        let g = format!("{p}gravity = [0.0, 0.0, 1e307]\n");
        refused(&big, &g, "thermal.gravity", "finite");
        refused(BOX, &format!("{p}t0 = nan\n"), "thermal.t0", "finite");
        refused(
            BOX,
            &format!("{p}initial = -inf\n"),
            "thermal.initial",
            "finite",
        );
        let far = format!("{p}t0 = -1.7e308\ninitial = 1.7e308\n");
        refused(BOX, &far, "thermal.initial", "difference from t0");
        // A negative β (water below 4 °C) is a value, not a mistake.
        setup(BOX, &format!("{p}beta = -5e-5\n"));
    }

    #[test]
    fn temperatures_below_absolute_zero_are_refused_with_units_only() {
        let p = "[thermal]\nprandtl = 0.71\n";
        refused(
            SI,
            &format!("{p}t0 = -300.0\n"),
            "thermal.t0",
            "below absolute zero",
        );
        let cold = format!("{p}initial = -273.16\n");
        refused(SI, &cold, "thermal.initial", "below absolute zero");
        let wall = format!("{p}[[boundary]]\nface = \"x-\"\ntemperature = -280.0\n");
        refused(
            SI,
            &wall,
            "boundary",
            "face x-: temperature -280 is below absolute zero",
        );
        // Absolute zero itself, and any temperature without [units] (a unit the case does not say).
        setup(SI, &format!("{p}t0 = -273.15\n"));
        setup(BOX, &format!("{p}t0 = -300.0\ninitial = -1000.0\n"));
        let nan = format!("{p}[[boundary]]\nface = \"y+\"\ntemperature = nan\n");
        refused(BOX, &nan, "boundary", "face y+: temperature");
        refused(BOX, &nan, "boundary", "must be finite");
    }

    #[test]
    fn a_temperature_on_an_open_face_or_without_thermal_is_refused_naming_the_key() {
        let p = "[thermal]\nprandtl = 0.71\n";
        for (kind, why) in [
            ("pressure", "zero gradient"),
            ("outflow", "zero gradient"),
            ("free-slip", "adiabatic"),
        ] {
            let face =
                format!("[[boundary]]\nface = \"x+\"\nkind = \"{kind}\"\ntemperature = 1.0\n");
            refused(
                BOX,
                &format!("{p}{face}"),
                "boundary",
                &format!("face x+: a {kind} face takes no `temperature`"),
            );
            refused(BOX, &format!("{p}{face}"), "boundary", why);
        }
        // A held wall without the temperature lattice, in a box and on a cavity's side wall.
        let wall = "[[boundary]]\nface = \"y-\"\ntemperature = 1.0\n";
        refused(
            BOX,
            wall,
            "boundary",
            "face y-: `temperature` needs a [thermal] section",
        );
        let cavity = "[domain]\nsize = [16, 16, 16]\n";
        refused(
            cavity,
            wall,
            "boundary",
            "`temperature` needs a [thermal] section",
        );
        // With [thermal] the same cavity holds that wall and keeps its lid adiabatic.
        let s = setup(cavity, &format!("[run]\nsteps = 100\n{p}{wall}"));
        assert_eq!(s.faces[Face::YMinus as usize], ThermalFace::Held(1.0));
        assert_eq!(s.faces[Face::ZPlus as usize], ThermalFace::Adiabatic);
        // Nusselt numbers are of held faces, against a spread of held temperatures.
        let nusselt = |faces: &str| format!("[thermal]\nprandtl = 0.71\nnusselt = {faces}\n");
        refused(
            cavity,
            &format!("[run]\nsteps = 100\n{}{wall}", nusselt("[\"x-\"]")),
            "thermal.nusselt",
            "face x- is not held at a temperature",
        );
        refused(
            cavity,
            &format!("[run]\nsteps = 100\n{}{wall}", nusselt("[\"y-\"]")),
            "thermal.nusselt",
            "needs two faces or patches held at different temperatures",
        );
        // Patches keep their own rule: a warm panel in that wall, a cool one in the adiabatic y+.
        let patches = "[[boundary]]\nface = \"y-\"\ntemperature = 3.0\n\
                       patch = { min = [2, 2], max = [5, 4] }\n\
                       [[boundary]]\nface = \"y+\"\ntemperature = -1.0\n\
                       patch = { min = [0, 10], max = [15, 15] }\n";
        let s = setup(cavity, &format!("[run]\nsteps = 100\n{p}{wall}{patches}"));
        let (west, east) = (Face::YMinus as usize, Face::YPlus as usize);
        assert_eq!(s.patches.len(), 2);
        assert_eq!(s.face_at(west, [3, 0, 4]), ThermalFace::Held(3.0));
        assert_eq!(s.face_at(west, [3, 0, 5]), ThermalFace::Held(1.0));
        assert_eq!(s.face_at(west, [6, 0, 4]), ThermalFace::Held(1.0));
        assert_eq!(s.face_at(east, [0, 15, 12]), ThermalFace::Held(-1.0));
        assert_eq!(s.face_at(east, [0, 15, 9]), ThermalFace::Adiabatic);
        // The held patches widen the reference spread of Nusselt numbers: 3.0 down to −1.0.
        assert_eq!(s.held_spread(), Some(4.0));
    }

    #[test]
    fn a_thermal_case_round_trips_through_toml_and_json() {
        let c = case(
            SI,
            "[thermal]\ndiffusivity = 1.4e-7\nbeta = 2.1e-4\ngravity = [0.0, 0.0, -9.81]\nt0 = 20.0\ninitial = 21.0\n\
             [[boundary]]\nface = \"y-\"\ntemperature = 15.1\n",
        );
        let toml = toml::to_string(&c).unwrap();
        assert_eq!(CaseConfig::parse(&toml, false).unwrap(), c, "{toml}");
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(CaseConfig::parse(&json, true).unwrap(), c, "{json}");
        // Absent keys stay absent.
        assert!(!toml.contains("prandtl"), "{toml}");
        assert!(!toml::to_string(&case(BOX, "")).unwrap().contains("thermal"));
    }
}
