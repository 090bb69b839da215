//! STL bodies through the `thelma` binary: the example case runs, and a body that cannot be built
//! is refused in one line naming its key, exit 2, with nothing written.

mod common;

use std::path::Path;

use common::thelma;

fn examples() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

#[test]
fn the_body_in_channel_example_runs_on_the_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let case = examples().join("body-in-channel.toml");
    let (code, stdout, err) = thelma(&[
        "run",
        "--config",
        case.to_str().unwrap(),
        "--steps",
        "20",
        "--backend",
        "cpu",
        "-o",
        out.to_str().unwrap(),
    ]);
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
    let tmp = tempfile::tempdir().unwrap();
    if let Some(bytes) = stl {
        std::fs::write(tmp.path().join("body.stl"), bytes).unwrap();
    }
    let case = tmp.path().join("case.toml");
    std::fs::write(
        &case,
        format!(
            "[domain]\nsize = [32, 16, 16]\n\n[[body]]\nstl = \"body.stl\"\nscale = 3.0\ntranslate = {translate}\n"
        ),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let (code, stdout, err) = thelma(&[
        "run",
        "--config",
        case.to_str().unwrap(),
        "--steps",
        "2",
        "--backend",
        "cpu",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{stdout}{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("body[0]"), "does not name the key: {err}");
    assert!(!out.exists(), "a refused body left {}", out.display());
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
    let case = tmp.path().join("case.toml");
    std::fs::write(
        &case,
        format!("[domain]\nsize = [32, 16, 16]\ncase = \"box\"\n\n[physics]\nviscosity = 0.05\n\n[[body]]\nstl = \"body.stl\"\nscale = 3.0\ntranslate = {centre}\n"),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let (code, stdout, err) = thelma(&[
        "run",
        "--config",
        case.to_str().unwrap(),
        "--steps",
        "2",
        "--backend",
        "cpu",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}{err}");
}
