//! STL bodies through the `thelma` binary: the example case runs, and a body that cannot be built
//! is refused in one line naming its key, exit 2, with nothing written.

mod common;

use std::path::Path;

use common::thelma;

fn examples() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// Writes `text` as `case.toml` in `dir` and returns its path.
fn write_case(dir: &Path, text: &str) -> std::path::PathBuf {
    let case = dir.join("case.toml");
    std::fs::write(&case, text).unwrap();
    case
}

/// `thelma run --config case --steps steps [--backend backend] -o out`: exit code, stdout, stderr.
fn run_case(case: &Path, steps: &str, backend: Option<&str>, out: &Path) -> (i32, String, String) {
    let mut args = vec![
        "run",
        "--config",
        case.to_str().unwrap(),
        "--steps",
        steps,
        "-o",
        out.to_str().unwrap(),
    ];
    if let Some(b) = backend {
        args.extend(["--backend", b]);
    }
    thelma(&args)
}

#[test]
fn the_body_in_channel_example_runs_on_the_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let case = examples().join("body-in-channel.toml");
    let (code, stdout, err) = run_case(&case, "20", Some("cpu"), &out);
    assert_eq!(code, 0, "{stdout}{err}");
    assert!(out.join("fields.pvd").exists(), "{stdout}");
    // The sphere of radius 4 nodes takes about 4/3 π 4³ · 0.966 (its mesh's share) ≈ 259 nodes.
    let mass: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("mass "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("no mass line: {stdout}"));
    let solid = 64.0 * 24.0 * 24.0 - mass;
    assert!((solid - 259.0).abs() < 15.0, "{solid} solid nodes");
}

/// A case in a fresh folder with one `[[body]]` whose STL file holds `stl` (none when `None`).
fn refused_body(stl: Option<&[u8]>, translate: &str) {
    refused_body_with(stl, translate, "", "body[0]");
}

/// [`refused_body`] with `extra` lines in the `[[body]]` table (and the case after it), refused
/// naming `key`.
fn refused_body_with(stl: Option<&[u8]>, translate: &str, extra: &str, key: &str) {
    let tmp = tempfile::tempdir().unwrap();
    if let Some(bytes) = stl {
        std::fs::write(tmp.path().join("body.stl"), bytes).unwrap();
    }
    let case = write_case(tmp.path(), &format!(
            "[domain]\nsize = [32, 16, 16]\n\n[[body]]\nstl = \"body.stl\"\nscale = 3.0\ntranslate = {translate}\n{extra}\n"
        ));
    let out = tmp.path().join("out");
    let (code, stdout, err) = run_case(&case, "2", Some("cpu"), &out);
    assert_eq!(code, 2, "{stdout}{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(key), "does not name {key}: {err}");
    assert!(!out.exists(), "a refused body left {}", out.display());
}

#[test]
fn an_immersed_body_that_cannot_move_as_given_is_refused_naming_the_key() {
    let sphere = std::fs::read(examples().join("sphere.stl")).unwrap();
    let centre = "[16.0, 7.5, 7.5]";
    let refused = |extra: &str, key: &str| refused_body_with(Some(&sphere), centre, extra, key);
    // A motion table out of order.
    refused(
        "method = \"immersed\"\npath = [[10.0, 0.0, 0.0, 0.0], [5.0, 1.0, 0.0, 0.0]]",
        "body[0].path",
    );
    // Motion given to a voxelised body.
    refused("velocity = [0.01, 0.0, 0.0]", "body[0].velocity");
    refused(
        "rotation = { axis = [0.0, 0.0, 1.0], origin = [16.0, 7.5, 7.5], rate = 0.01 }",
        "body[0].rotation",
    );
    refused(
        "method = \"immersed\"\nrotation = { axis = [0.0, 0.0, 0.0], origin = [16.0, 7.5, 7.5], rate = 0.01 }",
        "body[0].rotation.axis",
    );
    // Leaving the domain within the run's two steps: the sphere's top at z = 10.5 rises by 5.
    refused(
        "method = \"immersed\"\npath = [[0.0, 0.0, 0.0, 0.0], [2.0, 0.0, 0.0, 5.0]]",
        "body[0]: the immersed body leaves the domain along z",
    );
    // Points faster than the lattice allows.
    refused(
        "method = \"immersed\"\nvelocity = [0.3, 0.0, 0.0]",
        "body[0]: the immersed body's points move",
    );
    refused(
        "method = \"immersed\"\n\n[numerics]\nimmersed_iterations = 0",
        "numerics.immersed_iterations",
    );
    // A mesh whose triangles have no area gives no points.
    let flat = b"solid flat\nfacet normal 0 0 1\nouter loop\nvertex 0 0 0\nvertex 1 0 0\nvertex 2 0 0\nendloop\nendfacet\nendsolid flat\n";
    refused_body_with(
        Some(flat),
        centre,
        "method = \"immersed\"",
        "body[0]: the immersed body has no surface points",
    );
}

#[test]
fn an_immersed_body_reports_its_force_and_torque() {
    // A sphere turning about z in a closed box at rest: the fluid brakes the rotation (a torque
    // against it, −z) and, by symmetry, pushes it nowhere.
    let tmp = tempfile::tempdir().unwrap();
    let stl = examples().join("sphere.stl");
    let case = write_case(tmp.path(), &format!(
            "[domain]\nsize = [24, 24, 24]\ncase = \"box\"\n\n[physics]\nviscosity = 0.05\n\n[forces]\nevery = 10\n\n[[body]]\nstl = {stl:?}\nscale = 5.0\ntranslate = [11.5, 11.5, 11.5]\nmethod = \"immersed\"\nrotation = {{ axis = [0.0, 0.0, 1.0], origin = [11.5, 11.5, 11.5], rate = 0.004 }}\nname = \"ball\"\n"
        ));
    let out = tmp.path().join("out");
    let (code, stdout, err) = run_case(&case, "100", None, &out);
    assert_eq!(code, 0, "{stdout}{err}");
    let text = std::fs::read_to_string(out.join("forces.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "step,time,ball_fx,ball_fy,ball_fz,ball_tx,ball_ty,ball_tz"
    );
    let last: Vec<f64> = lines
        .last()
        .unwrap()
        .split(',')
        .map(|v| v.parse().unwrap())
        .collect();
    let (force, torque) = (&last[2..5], &last[5..8]);
    assert!(torque[2] < -1e-3, "the fluid brakes the rotation: {last:?}");
    for a in 0..3 {
        assert!(force[a].abs() < 1e-3 * torque[2].abs(), "{last:?}");
    }
    assert!(torque[0].abs() < 1e-3 * torque[2].abs(), "{last:?}");
    let summary = std::fs::read_to_string(out.join("summary.json")).unwrap();
    assert!(summary.contains("\"torque\""), "{summary}");
}

#[test]
fn a_missing_empty_foreign_or_outside_stl_is_refused_naming_the_key() {
    let sphere = std::fs::read(examples().join("sphere.stl")).unwrap();
    let centre = "[16.0, 7.5, 7.5]";
    refused_body(None, centre);
    refused_body(Some(b""), centre);
    refused_body(Some(b"solid nothing\nendsolid nothing\n"), centre);
    refused_body(
        Some("[domain]\nsize = [8, 8, 8]\n".repeat(10).as_bytes()),
        centre,
    );
    refused_body(Some(&sphere), "[100.0, 7.5, 7.5]");
    // The same sphere inside the domain runs.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("body.stl"), &sphere).unwrap();
    let case = write_case(tmp.path(), &format!("[domain]\nsize = [32, 16, 16]\ncase = \"box\"\n\n[physics]\nviscosity = 0.05\n\n[[body]]\nstl = \"body.stl\"\nscale = 3.0\ntranslate = {centre}\n"));
    let out = tmp.path().join("out");
    let (code, stdout, err) = run_case(&case, "2", Some("cpu"), &out);
    assert_eq!(code, 0, "{stdout}{err}");
}
