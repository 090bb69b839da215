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
