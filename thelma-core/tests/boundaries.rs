//! `[[boundary]]` tables that cannot hold are refused by validation, naming the key `boundary` and
//! the face: a face on a periodic axis (it has none), two tables on one face, a table on the
//! cavity's lid (which `physics.lid_speed` already sets), and an inlet faster than the stable
//! lattice speed. The binary's side (one line, exit 2, nothing written) is in thelma-cli's
//! `reliability.rs`.

use thelma_core::physics::MAX_SPEED;
use thelma_core::{CaseConfig, ConfigError};

/// Validates a 16 × 8 × 8 case of ν = 0.05 (lattice units) whose `[domain]` table starts with `head`,
/// with `boundaries` appended.
fn validate(head: &str, boundaries: &str) -> Result<(), ConfigError> {
    let text = format!(
        "[domain]\n{head}size = [16, 8, 8]\n[physics]\nviscosity = 0.05\n[run]\nsteps = 100\n{boundaries}"
    );
    CaseConfig::parse(&text, false)
        .expect("the case parses")
        .validate()
        .map(|_| ())
}

/// Asserts that `r` is a refusal of the key `boundary` whose message says `says`.
fn refused(r: Result<(), ConfigError>, says: &str) {
    let e = r.expect_err(says);
    assert_eq!(e.key, "boundary", "{e:?}");
    assert_eq!(e.flag, "--config", "{e:?}");
    assert!(e.message.contains(says), "{e:?} does not say {says:?}");
}

const BOX: &str = "case = \"box\"\nperiodic = [false, true, false]\n";

#[test]
fn a_boundary_on_a_periodic_axis_is_refused_naming_the_key() {
    let outlet = "[[boundary]]\nface = \"y+\"\nkind = \"pressure\"\n";
    refused(
        validate(BOX, outlet),
        "face y+: the y axis is periodic, so it has no face",
    );
    // The same face with y walled is accepted: the refusal is the periodic axis's.
    validate("case = \"box\"\n", outlet).unwrap();
    // A wall (the default kind) is refused there too: a periodic axis has no face to close.
    refused(
        validate(BOX, "[[boundary]]\nface = \"y-\"\n"),
        "the y axis is periodic",
    );
}

#[test]
fn conflicting_boundaries_on_one_face_are_refused_naming_the_key() {
    // Two tables on one face, whatever their kinds, and even when they agree.
    for second in [
        "kind = \"pressure\"\n",
        "kind = \"velocity\"\nvelocity = [0.05, 0, 0]\n",
    ] {
        refused(
            validate(
                BOX,
                &format!(
                    "[[boundary]]\nface = \"x-\"\nkind = \"velocity\"\nvelocity = [0.05, 0, 0]\n\
                     [[boundary]]\nface = \"x+\"\nkind = \"pressure\"\n\
                     [[boundary]]\nface = \"x-\"\n{second}"
                ),
            ),
            "face x-: listed twice",
        );
    }
    // The cavity's lid is its z+ face, set by physics.lid_speed: a table there conflicts with it.
    refused(
        validate("", "[[boundary]]\nface = \"z+\"\nvelocity = [0.1, 0, 0]\n"),
        "face z+: is the cavity's lid",
    );
    // Other faces of the cavity take walls.
    validate("", "[[boundary]]\nface = \"z-\"\nvelocity = [0.1, 0, 0]\n").unwrap();
}

#[test]
fn an_inlet_faster_than_the_stable_lattice_speed_is_refused_naming_the_key() {
    let inlet = |u: f64| {
        format!("[[boundary]]\nface = \"x-\"\nkind = \"velocity\"\nvelocity = [{u}, 0, 0]\n")
    };
    validate(BOX, &inlet(0.39)).unwrap();
    for u in [MAX_SPEED, 0.5, -0.45] {
        refused(
            validate(BOX, &inlet(u)),
            &format!("each component must stay below {MAX_SPEED}"),
        );
    }
    // A tangential component counts as much as the normal one.
    refused(
        validate(
            BOX,
            "[[boundary]]\nface = \"x-\"\nkind = \"velocity\"\nvelocity = [0.1, 0, 0.41]\n",
        ),
        "face x-: velocity",
    );
}

/// A box 16 nodes long of 0.16 m with a pressure face on x+ given by `outlet`: dx = 1 cm, and at
/// the lattice speed 0.1 (`physics.lid_speed`) for 0.01 m/s one lattice velocity is 0.1 m/s, so
/// with 1000 kg/m³ one lattice pressure unit is 1000 · 0.1² = 10 Pa.
fn in_pascals(outlet: &str, density: &str) -> Result<CaseConfig, ConfigError> {
    let text = format!(
        "[domain]\n{BOX}size = [16, 8, 8]\n[units]\nlength = 0.16\nvelocity = 0.01\nviscosity = 1e-5\n\
         {density}[run]\nsteps = 100\n[[boundary]]\nface = \"x+\"\nkind = \"pressure\"\n{outlet}"
    );
    let case = CaseConfig::parse(&text, false).expect("the case parses");
    case.validate().map(|_| case)
}

/// The density the case's x+ face is held at.
fn outlet_density(case: &CaseConfig) -> f64 {
    let faces = case.open_faces();
    assert_eq!(faces.len(), 1, "{faces:?}");
    faces[0].2
}

#[test]
fn a_pressure_face_takes_its_pressure_in_lattice_units_or_pascals() {
    let lattice = |outlet: &str| {
        let text = format!(
            "[domain]\n{BOX}size = [16, 8, 8]\n[physics]\nviscosity = 0.05\n\
             [[boundary]]\nface = \"x+\"\nkind = \"pressure\"\n{outlet}"
        );
        let case = CaseConfig::parse(&text, false).unwrap();
        case.validate().unwrap();
        outlet_density(&case)
    };
    // Without [units], p − p0 = (ρ − 1)/3 in lattice units.
    let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
    assert!(close(lattice("pressure = 0.002\n"), 1.006));
    assert!(close(lattice("pressure = -0.002\n"), 0.994));
    assert_eq!(lattice("density = 1.006\n"), 1.006);
    assert_eq!(lattice(""), 1.0);
    // With [units], Pa: 0.03 Pa is 0.003 lattice pressure units of 10 Pa, ρ = 1 + 3 · 0.003.
    let rho = "density = 1000.0\n";
    let got = outlet_density(&in_pascals("pressure = 0.03\n", rho).unwrap());
    assert!(close(got, 1.009), "{got}");
    let got = outlet_density(&in_pascals("pressure = -0.03\n", rho).unwrap());
    assert!(close(got, 0.991), "{got}");
    // `density` stays relative to the reference, with or without [units].
    let got = outlet_density(&in_pascals("density = 1.009\n", rho).unwrap());
    assert_eq!(got, 1.009);
}

#[test]
fn a_pressure_that_cannot_be_used_is_refused_naming_the_key() {
    let outlet = |keys: &str| {
        validate(
            BOX,
            &format!("[[boundary]]\nface = \"x+\"\nkind = \"pressure\"\n{keys}"),
        )
    };
    // Both keys on one face, even when they agree.
    refused(
        outlet("density = 1.006\npressure = 0.002\n"),
        "face x+: give `density` or `pressure`, not both",
    );
    // Pa without a density to convert them with.
    let e = in_pascals("pressure = 0.03\n", "").unwrap_err();
    assert_eq!(e.key, "boundary", "{e:?}");
    assert!(e.message.contains("units.density"), "{e:?}");
    // A pressure whose density leaves the weakly compressible range says both.
    refused(
        outlet("pressure = 1.0\n"),
        "face x+: pressure 1 gives density 4 must lie in [0.5, 1.5]",
    );
    // Only a pressure face takes one.
    refused(
        validate(
            BOX,
            "[[boundary]]\nface = \"x+\"\nkind = \"outflow\"\npressure = 0.001\n",
        ),
        "takes no density or pressure (only `pressure` does)",
    );
}

/// A case of the `BOX` head with `boundaries`, parsed and validated.
fn case_of(boundaries: &str) -> CaseConfig {
    let text = format!(
        "[domain]\n{BOX}size = [16, 8, 8]\n[physics]\nviscosity = 0.05\n[run]\nsteps = 100\n{boundaries}"
    );
    let case = CaseConfig::parse(&text, false).expect("the case parses");
    case.validate().expect("the case is valid");
    case
}

#[test]
fn a_patch_holds_the_nodes_whose_centres_lie_within_it() {
    use thelma_core::{Face, FacePatch};
    // On x− the corners are (y, z); y is periodic here but a patch spans it like any axis.
    let case = case_of(
        "[[boundary]]\nface = \"x-\"\nkind = \"velocity\"\nvelocity = [0.05, 0, 0]\n\
         patch = { min = [1.5, 2], max = [4, 6.9] }\n",
    );
    let p = case.face_patch(&case.boundary[0]).unwrap();
    assert_eq!(
        p,
        Some(FacePatch {
            face: Face::XMinus,
            lo: [2, 2],
            hi: [4, 6]
        })
    );
    assert_eq!(case.moving_walls()[0].3, p);
    // Beyond the lattice a patch is clipped to it; on z+ the corners are (x, y).
    let case = case_of(
        "[[boundary]]\nface = \"z+\"\nkind = \"outflow\"\npatch = { min = [-3, 0], max = [40, 0.2] }\n",
    );
    let p = case.face_patch(&case.boundary[0]).unwrap().unwrap();
    assert_eq!((p.lo, p.hi), ([0, 0], [15, 0]));
    assert_eq!(case.open_faces()[0].3, Some(p));
    // In metres with [units], from the box's corner: nodes 0.01 m apart, centres at 0.005 m + k dx.
    let text = format!(
        "[domain]\n{BOX}size = [16, 8, 8]\n[units]\nlength = 0.16\nvelocity = 0.01\nviscosity = 1e-5\n\
         [run]\nsteps = 100\n[[boundary]]\nface = \"y-\"\npatch = {{ min = [0.02, 0.0], max = [0.05, 0.03] }}\n\
         kind = \"pressure\"\n"
    );
    let case = CaseConfig::parse(
        &text.replace("periodic = [false, true, false]\n", ""),
        false,
    )
    .unwrap();
    case.validate().unwrap();
    let p = case.face_patch(&case.boundary[0]).unwrap().unwrap();
    assert_eq!((p.lo, p.hi), ([2, 0], [4, 2]));
}

#[test]
fn patches_that_cannot_hold_are_refused_naming_the_key() {
    let inlet = |patch: &str| {
        format!(
            "[[boundary]]\nface = \"x-\"\nkind = \"velocity\"\nvelocity = [0.05, 0, 0]\npatch = {patch}\n"
        )
    };
    refused(
        validate(BOX, &inlet("{ min = [3, 3], max = [2, 5] }")),
        "face x-: patch min [3.0, 3.0] exceeds max [2.0, 5.0]",
    );
    refused(
        validate(BOX, &inlet("{ min = [2.2, 3], max = [2.8, 5] }")),
        "holds no node centre",
    );
    refused(
        validate(BOX, &inlet("{ min = [20, 3], max = [30, 5] }")),
        "holds no node centre",
    );
    refused(
        validate(
            BOX,
            &inlet("{ min = [1, 1], max = [3, 3] }\nprofile = \"parabolic\""),
        ),
        "a patch's inlet is uniform",
    );
    // Two patches of a face may not share a node; side by side they may.
    let two = |second: &str| {
        format!(
            "{}[[boundary]]\nface = \"x-\"\nkind = \"outflow\"\npatch = {second}\n",
            inlet("{ min = [1, 1], max = [3, 3] }")
        )
    };
    refused(
        validate(BOX, &two("{ min = [3, 3], max = [6, 6] }")),
        "patches of a face must not share a node",
    );
    validate(BOX, &two("{ min = [4, 1], max = [6, 6] }")).unwrap();
    // A face opens one way: an outflow patch in a pressure face is refused, a wall patch is not.
    let face = "[[boundary]]\nface = \"x+\"\nkind = \"pressure\"\n";
    refused(
        validate(
            BOX,
            &format!("{face}[[boundary]]\nface = \"x+\"\nkind = \"outflow\"\npatch = {{ min = [1, 1], max = [3, 3] }}\n"),
        ),
        "face x+: its open parts must share one kind and density (here pressure and outflow)",
    );
    refused(
        validate(
            BOX,
            &format!("{face}[[boundary]]\nface = \"x+\"\nkind = \"pressure\"\ndensity = 1.01\npatch = {{ min = [1, 1], max = [3, 3] }}\n"),
        ),
        "here densities 1 and 1.01",
    );
    validate(
        BOX,
        &format!("{face}[[boundary]]\nface = \"x+\"\npatch = {{ min = [1, 1], max = [3, 3] }}\n"),
    )
    .unwrap();
    // A patch on a periodic axis's face, and on the cavity's lid.
    refused(
        validate(
            BOX,
            "[[boundary]]\nface = \"y+\"\npatch = { min = [1, 1], max = [3, 3] }\n",
        ),
        "the y axis is periodic",
    );
    refused(
        validate(
            "",
            "[[boundary]]\nface = \"z+\"\npatch = { min = [1, 1], max = [3, 3] }\n",
        ),
        "is the cavity's lid",
    );
}

#[test]
fn a_pressure_outlets_sponge_is_a_layer_of_whole_planes() {
    use thelma_core::physics::SpongeLayer;
    use thelma_core::Face;
    let case = case_of(
        "[[boundary]]\nface = \"x-\"\nkind = \"velocity\"\nvelocity = [0.05, 0, 0]\n\
         [[boundary]]\nface = \"x+\"\nkind = \"pressure\"\ndensity = 1.002\nsponge = { width = 5.4 }\n\
         [[boundary]]\nface = \"z-\"\nkind = \"pressure\"\nsponge = { width = 2, strength = 0.25 }\n",
    );
    let layers = case.sponges().layers;
    assert_eq!(layers.len(), 2);
    let want = SpongeLayer {
        face: Face::XPlus,
        width: 5,
        strength: thelma_core::SpongeConfig::DEFAULT_STRENGTH,
        drho: 1.002 - 1.0,
        extent: 16,
    };
    assert_eq!(layers[0], want);
    assert_eq!(
        layers[1],
        SpongeLayer {
            face: Face::ZMinus,
            width: 2,
            strength: 0.25,
            drho: 0.0,
            extent: 8,
        }
    );
    // The layers' nodes: depth 0 beside the face, none beyond the width.
    assert_eq!(layers[0].depth([15, 3, 3]), Some(0));
    assert_eq!(layers[0].depth([11, 0, 0]), Some(4));
    assert_eq!(layers[0].depth([10, 0, 0]), None);
    assert_eq!(layers[1].depth([0, 0, 1]), Some(1));
    assert_eq!(layers[1].depth([0, 0, 2]), None);
    // Without sponges, none.
    assert!(
        case_of("[[boundary]]\nface = \"x+\"\nkind = \"pressure\"\n")
            .sponges()
            .is_empty()
    );
    // In metres with [units]: 0.01 m per node, so 0.042 m is 4 planes.
    let text = "[domain]\ncase = \"box\"\nsize = [16, 8, 8]\n[units]\nlength = 0.16\nvelocity = 0.01\n\
                viscosity = 1e-5\n[run]\nsteps = 100\n[[boundary]]\nface = \"y+\"\nkind = \"pressure\"\n\
                sponge = { width = 0.042 }\n";
    let case = CaseConfig::parse(text, false).unwrap();
    case.validate().unwrap();
    assert_eq!(case.sponges().layers[0].width, 4);
}

#[test]
fn sponges_that_cannot_hold_are_refused_naming_the_key() {
    let outlet = |kind: &str, sponge: &str| {
        format!("[[boundary]]\nface = \"x+\"\nkind = \"{kind}\"\nsponge = {sponge}\n")
    };
    refused(
        validate(BOX, &outlet("outflow", "{ width = 4 }")),
        "face x+: kind = \"outflow\" takes no sponge (only `pressure` does",
    );
    refused(
        validate(BOX, &outlet("wall", "{ width = 4 }")),
        "kind = \"wall\" takes no sponge",
    );
    for (sponge, says) in [
        (
            "{ width = 1 }",
            "sponge.width 1 rounds to 1 planes of nodes; it must be 2 to 8 (half the 16 nodes along x)",
        ),
        ("{ width = 8.6 }", "sponge.width 8.6 rounds to 9 planes"),
        ("{ width = nan }", "sponge.width NaN"),
        (
            "{ width = 4, strength = 0 }",
            "sponge.strength 0 must lie in (0, 0.5]",
        ),
        (
            "{ width = 4, strength = 0.6 }",
            "sponge.strength 0.6 must lie in (0, 0.5]",
        ),
        ("{ width = 4, strength = inf }", "sponge.strength inf must lie"),
    ] {
        refused(validate(BOX, &outlet("pressure", sponge)), says);
    }
    // The widest layer is accepted, but not two that meet.
    validate(BOX, &outlet("pressure", "{ width = 8, strength = 0.5 }")).unwrap();
    let both = |w: f64| {
        format!(
            "{}[[boundary]]\nface = \"x-\"\nkind = \"pressure\"\nsponge = {{ width = {w} }}\n",
            outlet("pressure", "{ width = 8 }")
        )
    };
    validate(BOX, &both(7.0)).unwrap();
    refused(
        validate(BOX, &both(8.0)),
        "faces x+ and x-: their sponge layers of 8 and 8 planes cover all 16 nodes between them",
    );
    // (A walled axis has at least 4 nodes, so every face takes a layer of 2.)
    refused(
        validate(
            BOX,
            "[[boundary]]\nface = \"x+\"\nkind = \"pressure\"\npatch = { min = [1, 1], max = [3, 3] }\n\
             sponge = { width = 4 }\n",
        ),
        "a sponge spans its whole face; a patch outlet takes none",
    );
    // An unknown key of the sponge table is a syntax error naming it.
    let text = format!(
        "[domain]\n{BOX}size = [16, 8, 8]\n[physics]\nviscosity = 0.05\n[run]\nsteps = 100\n{}",
        outlet("pressure", "{ width = 4, depth = 3 }")
    );
    let e = CaseConfig::parse(&text, false).expect_err("unknown key");
    assert!(e.to_string().contains("depth"), "{e}");
}

/// An amplitude holding a line break (TOML's `"\n"`) that does not parse is refused in one line,
/// the break written as `\n`: the message quotes the text.
#[test]
fn an_amplitude_with_a_line_break_is_refused_in_one_line() {
    let inlet = "[[boundary]]\nface = \"x-\"\nkind = \"velocity\"\nvelocity = [0.05, 0, 0]\n\
                 amplitude = \"min(t, 1) w\\n(t)\"\n";
    let e = validate(BOX, inlet).expect_err("the amplitude does not parse");
    assert_eq!(e.key, "boundary", "{e:?}");
    let text = e.to_string();
    assert_eq!(text.lines().count(), 1, "{text:?}");
    assert!(text.contains("w\\n(t)"), "{text:?}");
}
