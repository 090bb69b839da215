//! What a run leaves behind and prints: the example case files run from the command line and write
//! every output (VTK, pieces, slice images, profiles, report); the arrays `output.fields` names, the
//! same gathered or in pieces; progress lines when the output is not a terminal; physical units; bad
//! output options.

use std::path::{Path, PathBuf};

mod common;
use common::{run_on_cpu, thelma};

fn example(name: &str) -> String {
    format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("thelma-outputs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

/// Whether `path` is a PNG (by its signature) of some size.
fn is_png(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|b| b.len() > 1000 && b.starts_with(b"\x89PNG\r\n\x1a\n"))
}

/// The XML header of a `.vti` file: everything before its appended data.
fn vti_header(bytes: &[u8]) -> String {
    let end = bytes
        .windows(13)
        .position(|w| w == b"<AppendedData")
        .expect("an AppendedData element");
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// The names of the arrays a `.vti` header declares, in order.
fn array_names(header: &str) -> Vec<String> {
    header
        .split("<DataArray ")
        .skip(1)
        .map(|d| {
            d.split("Name=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// Checks the files every field output writes at `steps`, and that the report lists only files
/// that exist.
fn check_outputs(dir: &Path, steps: &[u64], cavity: bool) {
    for s in steps {
        let vti = dir.join(format!("fields_{s:08}.vti"));
        let bytes = std::fs::read(&vti).unwrap_or_else(|e| panic!("{}: {e}", vti.display()));
        let head = vti_header(&bytes);
        assert!(head.contains(r#"<VTKFile type="ImageData""#), "{head}");
        assert_eq!(
            array_names(&head),
            ["density", "velocity", "speed", "pressure", "solid"]
        );
        assert!(is_png(&dir.join(format!("slice_{s:08}.png"))));
    }
    let pvd = std::fs::read_to_string(dir.join("fields.pvd")).unwrap();
    assert_eq!(pvd.matches("<DataSet").count(), steps.len(), "{pvd}");
    assert_eq!(dir.join("profiles.csv").exists(), cavity);
    assert_eq!(is_png(&dir.join("profiles.png")), cavity);
    let s = summary(dir);
    let listed = s["outputs"].as_array().unwrap();
    assert!(listed.len() >= 2 * steps.len() + 2, "{listed:?}");
    for f in listed {
        assert!(
            dir.join(f.as_str().unwrap()).exists(),
            "{f} listed, not written"
        );
    }
    for k in ["setup_s", "stepping_s", "output_s", "total_s"] {
        assert!(s["timings"][k].as_f64().unwrap() >= 0.0, "{k}");
    }
}

#[test]
fn the_cavity_examples_run_from_the_command_line_and_write_every_output() {
    for (file, re) in [("cavity-re100.toml", 100.0), ("cavity-re1000.toml", 1000.0)] {
        let dir = scratch(file);
        let (code, out, err) = thelma(&[
            "run",
            "--config",
            &example(file),
            "--size",
            "12",
            "--steps",
            "40",
            "--output-every",
            "20",
            "--backend",
            "cpu",
            "-o",
            dir.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{file}: {err}");
        assert!(out.contains("outputs in"), "{out}");
        check_outputs(&dir, &[20, 40], true);
        let s = summary(&dir);
        assert_eq!(s["steps"], 40);
        assert!((s["lattice"]["reynolds"].as_f64().unwrap() - re).abs() < 1e-9);
        // The Re = 1000 cube is the reference case: its report holds the comparison.
        assert_eq!(s["validation"].is_object(), re == 1000.0, "{file}");
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn the_channel_example_runs_in_physical_units_and_reports_the_real_time_ratio() {
    let dir = scratch("channel");
    let (code, out, err) = thelma(&[
        "run",
        "--config",
        &example("channel-sphere.toml"),
        "--steps",
        "20",
        "--output-every",
        "10",
        "--backend",
        "cpu",
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    // The conversion factors are printed: 1 mm nodes, 8 ms steps.
    assert!(
        out.contains("units: dx = 1.0e-03 m, dt = 8.0e-03 s"),
        "{out}"
    );
    assert!(out.contains("x real time"), "{out}");
    // Periodic along the wall's motion it is a channel, not a cavity: no centreline profiles.
    check_outputs(&dir, &[10, 20], false);
    let s = summary(&dir);
    assert!((s["lattice"]["reynolds"].as_f64().unwrap() - 960.0).abs() < 1e-9);
    let u = &s["units"];
    assert!((u["physical_time_s"].as_f64().unwrap() - 20.0 * 8e-3).abs() < 1e-12);
    let ratio = u["realtime_ratio"].as_f64().unwrap();
    let expect = 0.16 / s["timings"]["stepping_s"].as_f64().unwrap();
    assert!((ratio - expect).abs() < 1e-9 * expect, "{ratio} {expect}");
    // The mask holds exactly the sphere's nodes.
    let vti = std::fs::read(dir.join("fields_00000020.vti")).unwrap();
    // The arrays carry their units: [units] without a density leaves the pressure in lattice units.
    let head = vti_header(&vti);
    let unit = |name: &str| {
        let d = head.split(&format!(r#"Name="{name}""#)).nth(1).unwrap();
        // Up to the next array's declaration (or the end of the list).
        let d = &d[..d.find("<DataArray").or(d.find("</CellData>")).unwrap()];
        d.split("UNITS_LABEL\" location=\"vtkDataArray\">")
            .nth(1)
            .map(|u| u.split('<').next().unwrap().to_string())
    };
    assert_eq!(unit("velocity").as_deref(), Some("m/s"));
    assert_eq!(unit("pressure").as_deref(), Some("lattice units"));
    assert_eq!(unit("density"), None);
    let text = String::from_utf8_lossy(&vti);
    let at = text.find(r#"Name="solid""#).unwrap();
    let offset: usize = text[at..].split('"').nth(7).unwrap().parse().unwrap();
    let data = text.find("<AppendedData encoding=\"raw\">").unwrap();
    let data = data + text[data..].find('_').unwrap() + 1 + offset;
    let len = u64::from_le_bytes(vti[data..data + 8].try_into().unwrap()) as usize;
    assert_eq!(len, 96 * 48 * 32);
    let solid = vti[data + 8..data + 8 + len]
        .iter()
        .filter(|&&b| b == 1)
        .count();
    let mut sphere = 0;
    for z in 0..32i64 {
        for y in 0..48i64 {
            for x in 0..96i64 {
                sphere += usize::from((x - 24).pow(2) + (y - 24).pow(2) + (z - 12).pow(2) <= 25);
            }
        }
    }
    assert_eq!(solid, sphere);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn vtk_pieces_write_one_file_per_slab_and_an_index() {
    let dir = scratch("pieces");
    let (code, _, err) = thelma(&[
        "run",
        "--size",
        "12",
        "--steps",
        "10",
        "--backend",
        "cpu",
        "--devices",
        "3",
        "--vtk-pieces",
        "--no-images",
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let index = std::fs::read_to_string(dir.join("fields_00000010.pvti")).unwrap();
    assert!(index.contains(r#"WholeExtent="0 12 0 12 0 12""#), "{index}");
    let extents = ["0 12 0 12 0 4", "0 12 0 12 4 8", "0 12 0 12 8 12"];
    for (k, e) in extents.iter().enumerate() {
        let piece = format!(r#"<Piece Extent="{e}" Source="fields_00000010_{k}.vti"/>"#);
        assert!(index.contains(&piece), "{piece} not in\n{index}");
        let vti = std::fs::read(dir.join(format!("fields_00000010_{k}.vti"))).unwrap();
        assert!(String::from_utf8_lossy(&vti[..400]).contains(&format!(r#"Extent="{e}""#)));
        // Each piece holds its own 12 × 12 × 4 nodes, not the whole domain.
        assert!(vti.len() < 12 * 12 * 4 * 6 * 4 + 2000, "{}", vti.len());
    }
    let pvd = std::fs::read_to_string(dir.join("fields.pvd")).unwrap();
    assert!(pvd.contains("fields_00000010.pvti"));
    assert!(!dir.join("slice_00000010.png").exists() && !dir.join("profiles.png").exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn piped_output_gets_plain_progress_lines_and_quiet_only_the_summary() {
    let dir = scratch("progress");
    let o = dir.to_str().unwrap();
    // Re = 100 keeps τ = 0.53, clear of the near-½ warning, so a quiet run has nothing for stderr.
    let args = [
        "run",
        "--size",
        "10",
        "--re",
        "100",
        "--steps",
        "40",
        "--check-every",
        "10",
        "--backend",
        "cpu",
        "--no-vtk",
        "--no-images",
        "-o",
        o,
    ];
    let (code, out, _) = thelma(&args);
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("step ")).collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[1].starts_with("step 20/40 (50%): "), "{}", lines[1]);
    assert!(lines[1].contains("MLUPS, elapsed ") && lines[1].contains(", ETA "));
    let mut quiet = args.to_vec();
    quiet.push("--quiet");
    let (code, out, err) = thelma(&quiet);
    assert_eq!(code, 0);
    assert!(!out.lines().any(|l| l.starts_with("step ")), "{out}");
    assert!(out.contains("MLUPS") && err.is_empty(), "{out}{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn output_and_unit_options_are_documented_and_checked() {
    let (code, out, _) = thelma(&["run", "--help"]);
    assert_eq!(code, 0);
    for opt in [
        "--output-every",
        "--vtk-pieces",
        "--no-vtk",
        "--no-images",
        "--fields",
        "--slice",
        "--phys-length",
        "--phys-velocity",
        "--phys-viscosity",
    ] {
        assert!(out.contains(opt), "--help does not mention {opt}");
    }
    let dir = scratch("bad");
    let o = dir.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["run", "--slice", "w", "-o", o], "--slice"),
        (
            &["run", "--size", "8", "--slice", "z=8", "-o", o],
            "--slice",
        ),
        (&["run", "--output-every", "-3", "-o", o], "--output-every"),
        (
            &["run", "--fields", "velocity,omega", "-o", o],
            "--fields: `omega` is not",
        ),
        (&["run", "--fields", "speed,speed", "-o", o], "--fields"),
        (&["run", "--phys-length", "0.1", "-o", o], "--phys-velocity"),
        (
            &[
                "run",
                "--phys-length",
                "0.1",
                "--phys-velocity",
                "0.01",
                "--phys-viscosity",
                "-1e-6",
                "-o",
                o,
            ],
            "--phys-viscosity",
        ),
        (
            &[
                "run",
                "--re",
                "100",
                "--config",
                &example("channel-sphere.toml"),
                "-o",
                o,
            ],
            "--re",
        ),
    ];
    for (args, flag) in cases {
        let (code, out, err) = thelma(args);
        assert_eq!(code, 2, "{args:?}: exit {code}, stderr {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: does not name {flag}: {err}");
        assert!(!out.contains("step "), "{args:?} started running");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The `count` little-endian f32 values of array `name` in a `.vti` file written by a run.
fn vti_f32(bytes: &[u8], name: &str, count: usize) -> Vec<f32> {
    let text = String::from_utf8_lossy(bytes);
    let at = text.find(&format!(r#"Name="{name}""#)).unwrap();
    let offset: usize = text[at..].split('"').nth(7).unwrap().parse().unwrap();
    let data = text.find(r#"<AppendedData encoding="raw">"#).unwrap();
    let start = data + text[data..].find('_').unwrap() + 1 + offset;
    let len = u64::from_le_bytes(bytes[start..start + 8].try_into().unwrap()) as usize;
    assert_eq!(len, 4 * count, "{name}");
    bytes[start + 8..start + 8 + len]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn the_written_fields_are_the_fields_the_run_gathered_from_every_device() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use thelma_core::{BackendName, CaseConfig, DeviceSpec};

    let dir = scratch("gathered");
    let mut case = CaseConfig::default();
    case.domain.size = [10, 8, 9];
    case.physics.reynolds = 100.0;
    case.run.steps = Some(30);
    case.hardware.backend = BackendName::new("cpu");
    case.hardware.devices = DeviceSpec::Count(3);
    case.output.dir = dir.clone();
    case.output.images = false;
    let outcome =
        thelma_cli::app::run_case(&case, Arc::new(AtomicBool::new(false)), &mut |_| {}).unwrap();
    let f = &outcome.fields;
    let n = f.rho.len();
    let bytes = std::fs::read(dir.join("fields_00000030.vti")).unwrap();
    let rho = vti_f32(&bytes, "density", n);
    let u = vti_f32(&bytes, "velocity", 3 * n);
    for p in 0..n {
        assert_eq!(rho[p], f.rho[p] as f32, "density at {p}");
        let want = [f.ux[p] as f32, f.uy[p] as f32, f.uz[p] as f32];
        assert_eq!(u[3 * p..3 * p + 3], want, "velocity at {p}");
    }
    // The lid drives the flow: the written velocity is not trivially zero.
    assert!(u.iter().any(|&v| v.abs() > 1e-3));
    assert_eq!(
        outcome.summary.outputs,
        [
            "fields_00000030.vti",
            "fields.pvd",
            "profiles.csv",
            "summary.json"
        ]
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The physics options from the command line over a case file: a TRT channel with an eddy viscosity,
/// driven by the body force given on the command line; the run reports them and the flow goes the
/// way the force pushes it.
#[test]
fn collision_les_and_force_options_reach_a_run_from_the_command_line_and_a_case_file() {
    let dir = scratch("physics-options");
    let (code, out, err) = thelma(&[
        "run",
        "--config",
        &example("poiseuille.toml"),
        "--steps",
        "300",
        "--collision",
        "trt",
        "--smagorinsky",
        "0.1",
        "--force",
        "0,2e-5,0",
        "--backend",
        "cpu",
        "--no-vtk",
        "--no-images",
        "-q",
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let s = summary(&dir);
    let numerics = &s["case"]["numerics"];
    assert_eq!(numerics["collision"], "trt");
    assert_eq!(numerics["smagorinsky"], 0.1);
    // The command line's force replaced the file's (along x) and now drives the flow along y.
    assert_eq!(s["case"]["physics"]["force"][1], 2e-5);
    assert_eq!(s["lattice"]["force"][0], 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The arrays of the `.vti` file at `path`, in order: their names and raw bytes.
fn vti_arrays(path: &Path) -> (Vec<String>, Vec<Vec<u8>>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let head = vti_header(&bytes);
    let names = array_names(&head);
    let data = head.len() + bytes[head.len()..].iter().position(|&b| b == b'_').unwrap() + 1;
    let mut at = data;
    let arrays = names
        .iter()
        .map(|_| {
            let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
            let raw = bytes[at + 8..at + 8 + len].to_vec();
            at += 8 + len;
            raw
        })
        .collect();
    (names, arrays)
}

fn f32s(raw: &[u8]) -> Vec<f32> {
    raw.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Runs the case file `case` on the CPU module, quietly, into `dir`, with `extra` flags; it must
/// succeed.
fn run_case(case: &Path, dir: &Path, extra: &[&str]) {
    let mut args = vec![
        "run",
        "--config",
        case.to_str().unwrap(),
        "--backend",
        "cpu",
        "-q",
    ];
    args.extend_from_slice(&["-o", dir.to_str().unwrap()]);
    args.extend_from_slice(extra);
    let (code, out, err) = thelma(&args);
    assert_eq!(code, 0, "{out}{err}");
}

/// A small cavity on three CPU devices asks for the velocity and its derivatives by name: the
/// gathered file holds exactly those arrays, the pieces hold the same bytes (their z-derivatives at
/// the slab edges read the neighbouring slabs), and the vorticity has the lid's sign.
#[test]
fn the_fields_named_are_the_arrays_written_gathered_or_in_pieces() {
    let tmp = tempfile::tempdir().unwrap();
    let case = tmp.path().join("case.toml");
    std::fs::write(
        &case,
        "[domain]\nsize = [10, 8, 9]\n[physics]\nreynolds = 100.0\n[run]\nsteps = 30\n\
         [output]\nimages = false\nfields = [\"velocity\", \"vorticity\", \"q_criterion\"]\n",
    )
    .unwrap();
    let run = |name: &str, extra: &[&str]| {
        let dir = tmp.path().join(name);
        run_case(&case, &dir, &[&["--devices", "3"], extra].concat());
        dir
    };
    let gathered = run("gathered", &[]);
    let pieces = run("pieces", &["--vtk-pieces"]);
    let (names, whole) = vti_arrays(&gathered.join("fields_00000030.vti"));
    assert_eq!(names, ["velocity", "vorticity", "q_criterion"]);
    let n = 10 * 8 * 9;
    assert_eq!(
        whole.iter().map(Vec::len).collect::<Vec<_>>(),
        [3 * n * 4, 3 * n * 4, n * 4]
    );
    let index = std::fs::read_to_string(pieces.join("fields_00000030.pvti")).unwrap();
    assert_eq!(index.matches("<PDataArray").count(), 3, "{index}");
    let mut joined = vec![Vec::new(); 3];
    for k in 0..3 {
        let (piece_names, arrays) = vti_arrays(&pieces.join(format!("fields_00000030_{k}.vti")));
        assert_eq!(piece_names, names);
        for (all, a) in joined.iter_mut().zip(arrays) {
            all.extend(a);
        }
    }
    for ((name, a), b) in names.iter().zip(&whole).zip(&joined) {
        assert!(
            a == b,
            "the pieces' {name} differs from the gathered file's"
        );
    }
    // The lid drags the top layer along +x over slower fluid: ∂u/∂z > 0 there, so ω_y > 0 below
    // the lid's centre, and the shear beside the lid is a strain as much as a rotation.
    let omega = f32s(&whole[1]);
    let below_lid = (8 * 8 + 4) * 10 + 5;
    assert!(
        omega[3 * below_lid + 1] > 0.0,
        "{}",
        omega[3 * below_lid + 1]
    );
    assert!(f32s(&whole[2]).iter().any(|&q| q != 0.0));
}

/// A layout that cuts x and y writes one piece per subdomain: the index lists the four boxes, each
/// piece holds the bytes the gathered file of one slab holds over its box (the derivatives at the
/// boxes' edges read the neighbouring boxes), and the slice image is the same picture.
#[test]
fn a_grid_writes_one_piece_per_subdomain_holding_the_gathered_values() {
    let tmp = tempfile::tempdir().unwrap();
    let case = tmp.path().join("case.toml");
    std::fs::write(
        &case,
        "[domain]\nsize = [10, 8, 9]\n[physics]\nreynolds = 100.0\n[run]\nsteps = 30\n\
         [output]\nfields = [\"velocity\", \"vorticity\", \"q_criterion\", \"solid\"]\n",
    )
    .unwrap();
    let layout = tmp.path().join("grid.toml");
    let (code, _, err) = thelma(&[
        "layout",
        "--size",
        "10,8,9",
        "--grid",
        "2,2,1",
        "--gpus",
        "4",
        layout.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let run = |name: &str, extra: &[&str]| {
        let dir = tmp.path().join(name);
        run_case(&case, &dir, extra);
        dir
    };
    let gathered = run("gathered", &["--devices", "1"]);
    let pieces = run(
        "pieces",
        &["--layout", layout.to_str().unwrap(), "--vtk-pieces"],
    );
    let (names, whole) = vti_arrays(&gathered.join("fields_00000030.vti"));
    let index = std::fs::read_to_string(pieces.join("fields_00000030.pvti")).unwrap();
    assert!(index.contains(r#"WholeExtent="0 10 0 8 0 9""#), "{index}");
    let mut boxes = Vec::new();
    for line in index.lines().filter(|l| l.contains("<Piece ")) {
        let field = |key: &str| {
            line.split(&format!("{key}=\""))
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
                .to_string()
        };
        let e: Vec<usize> = field("Extent")
            .split(' ')
            .map(|v| v.parse().unwrap())
            .collect();
        boxes.push((
            [e[0], e[2], e[4]],
            [e[1] - e[0], e[3] - e[2], e[5] - e[4]],
            field("Source"),
        ));
    }
    let mut extents: Vec<_> = boxes.iter().map(|b| (b.0, b.1)).collect();
    extents.sort();
    assert_eq!(
        extents,
        [
            ([0, 0, 0], [5, 4, 9]),
            ([0, 4, 0], [5, 4, 9]),
            ([5, 0, 0], [5, 4, 9]),
            ([5, 4, 0], [5, 4, 9])
        ],
        "{index}"
    );
    for (origin, size, source) in &boxes {
        let (piece_names, arrays) = vti_arrays(&pieces.join(source));
        assert_eq!(piece_names, names);
        for ((name, all), part) in names.iter().zip(&whole).zip(&arrays) {
            // Bytes per node of this array in the gathered file (10 × 8 × 9 nodes).
            let width = all.len() / (10 * 8 * 9);
            let mut want = Vec::new();
            for z in origin[2]..origin[2] + size[2] {
                for y in origin[1]..origin[1] + size[1] {
                    let row = ((z * 8 + y) * 10 + origin[0]) * width;
                    want.extend_from_slice(&all[row..row + size[0] * width]);
                }
            }
            assert!(
                *part == want,
                "{source}: {name} differs from the gathered file's"
            );
        }
    }
    let slice = |dir: &Path| std::fs::read(dir.join("slice_00000030.png")).unwrap();
    assert!(
        slice(&pieces) == slice(&gathered),
        "the slice images differ"
    );
}

/// An unknown name in `output.fields` is refused before anything is written: one line naming the
/// key, its line in the case file and the name, exit 2, no output folder.
#[test]
fn an_unknown_field_name_in_a_case_file_is_refused_naming_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let case = tmp.path().join("case.toml");
    std::fs::write(
        &case,
        "[run]\nsteps = 5\n[output]\nfields = [\"velocity\", \"vorticty\"]\n",
    )
    .unwrap();
    let out = tmp.path().join("out");
    let (code, stdout, err) = run_on_cpu(&case, &out);
    assert_eq!(code, 2, "{stdout}{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("case.toml line 4: output.fields:") && err.contains("`vorticty`"),
        "{err}"
    );
    assert!(!out.exists(), "a refused run created {}", out.display());
}

/// `[[line]]` profiles land in `lines.csv` when the run ends: a body-force channel between walls
/// at z− and z+ (TRT, whose halfway walls are exact for Poiseuille flow) gives, along z, the
/// parabola `u(z) = F/(2ν) s (H − s)`, `s = z + ½`, within 1e-4 of its peak, in the instantaneous
/// columns and in the time averages; a line outside the domain, or a bad or repeated name, is
/// refused naming `line`, and nothing is written.
#[test]
fn lines_write_the_profiles_of_the_final_and_the_mean_fields() {
    let dir = scratch("lines");
    std::fs::create_dir_all(&dir).unwrap();
    let base = "[domain]\ncase = \"box\"\nsize = [4, 4, 32]\nperiodic = [true, true, false]\n\
                [physics]\nviscosity = 0.1666666666666667\nforce = [1.3e-5, 0.0, 0.0]\n\
                [numerics]\ncollision = \"trt\"\nprecision = \"f64\"\n[run]\nsteps = 8000\n\
                [output]\naverage_from = 7000\n";
    let case = dir.join("case.toml");
    std::fs::write(
        &case,
        format!(
            "{base}[[line]]\naxis = \"z\"\nat = [1.0, 2.2]\nname = \"across\"\n\
             [[line]]\naxis = \"x\"\nat = [2.0, 16.0]\n\
             [[line]]\naxis = \"z\"\nplane = true\nname = \"plane\"\n"
        ),
    )
    .unwrap();
    let run = |out: &Path| run_on_cpu(&case, out);
    let out = dir.join("out");
    let (code, o, e) = run(&out);
    assert_eq!(code, 0, "{o}{e}");
    let csv = std::fs::read_to_string(out.join("lines.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("line,position,p,ux,uy,uz,mean_p,mean_ux,mean_uy,mean_uz")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 32 + 4 + 32, "{csv}");
    let (f, nu, h) = (1.3e-5, 1.0 / 6.0, 32.0);
    let peak = f / (2.0 * nu) * (h / 2.0) * (h / 2.0);
    // The line across the channel and the plane means along z of a flow uniform across z: the
    // same parabola, in the final fields and their averages.
    let parabola = |name: &str, rows: &[Vec<&str>]| {
        for (z, r) in rows.iter().enumerate() {
            assert_eq!((r[0], r[1].parse::<f64>().unwrap()), (name, z as f64));
            let s = z as f64 + 0.5;
            let exact = f / (2.0 * nu) * s * (h - s);
            for col in [3, 7] {
                let u: f64 = r[col].parse().unwrap();
                assert!(
                    (u - exact).abs() < 1e-4 * peak,
                    "{name} z = {z}, column {col}: {u} vs {exact}"
                );
            }
        }
    };
    parabola("across", &rows[..32]);
    parabola("plane", &rows[36..]);
    // The line along x through the middle plane: the peak at every node.
    for (x, r) in rows[32..36].iter().enumerate() {
        assert_eq!((r[0], r[1].parse::<f64>().unwrap()), ("line1", x as f64));
        let u: f64 = r[3].parse().unwrap();
        assert!(
            (u / (f / (2.0 * nu) * 16.5 * 15.5) - 1.0).abs() < 1e-4,
            "{u}"
        );
    }
    assert!(summary(&out)["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v == "lines.csv"));
    // Bad lines: one line naming the key, exit 2, no folder.
    for (extra, says) in [
        (
            "[[line]]\naxis = \"y\"\nat = [1.0, 40.0]\n",
            "line 0: at = [1.0, 40.0] (along [\"x\", \"z\"]) lies outside the domain along z",
        ),
        (
            "[[line]]\naxis = \"y\"\nat = [1.0, 4.0]\nname = \"a,b\"\n",
            "line 0: name \"a,b\" must be non-empty, without commas",
        ),
        (
            "[[line]]\naxis = \"y\"\nat = [1.0, 4.0]\nname = \"line1\"\n\
             [[line]]\naxis = \"x\"\nat = [1.0, 4.0]\n",
            "line 1: name \"line1\" names another line too",
        ),
        (
            "[[line]]\naxis = \"y\"\nat = [1.0, 4.0]\nplane = true\n",
            "line 0: `at` and `plane = true` exclude each other",
        ),
        (
            "[[line]]\naxis = \"y\"\n",
            "line 0: needs `at` (where the line crosses the plane of the other two axes) or `plane = true`",
        ),
    ] {
        std::fs::write(&case, format!("{base}{extra}")).unwrap();
        let refused = dir.join("refused");
        let (code, _, e) = run(&refused);
        assert_eq!(code, 2, "{e}");
        assert!(e.contains("line") && e.contains(says), "{e}");
        assert!(!refused.exists());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A line of plane means averages over its planes: a periodic box whose x velocity is
/// `U + A sin(2π x / nx)` gives `U` on every plane across z (the sine sums to zero over its
/// period) where the line through x = 1 gives `U + A sin(2π / nx)`.
#[test]
fn plane_lines_average_over_their_planes() {
    let dir = scratch("plane-lines");
    std::fs::create_dir_all(&dir).unwrap();
    let case = dir.join("case.toml");
    std::fs::write(
        &case,
        "[domain]\ncase = \"box\"\nsize = [16, 4, 6]\nperiodic = [true, true, true]\n\
         [physics]\nviscosity = 0.1\n[numerics]\nprecision = \"f64\"\n[run]\nsteps = 1\n\
         [initial]\nvelocity = [\"0.01 + 0.004 * sin(2 * PI * x / nx)\", 0.0, 0.0]\n\
         [[line]]\naxis = \"z\"\nplane = true\nname = \"mean\"\n\
         [[line]]\naxis = \"z\"\nat = [1.0, 2.0]\nname = \"at1\"\n",
    )
    .unwrap();
    let out = dir.join("out");
    let (code, o, e) = run_on_cpu(&case, &out);
    assert_eq!(code, 0, "{o}{e}");
    let csv = std::fs::read_to_string(out.join("lines.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 12, "{csv}");
    // One step of viscous decay (ν k² = 0.1 (2π/16)² per step) and the density waves it starts
    // (u is j / ρ) stay well inside these bounds.
    let at1 = 0.01 + 0.004 * (2.0 * std::f64::consts::PI / 16.0).sin();
    for r in &rows {
        let u: f64 = r[3].parse().unwrap();
        match r[0] {
            "mean" => assert!((u - 0.01).abs() < 1e-7, "{u}"),
            "at1" => assert!((u - at1).abs() < 3e-4 && (u - 0.01).abs() > 1e-3, "{u}"),
            other => panic!("row {other}"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `nusselt = true` on a `[[boundary]]` wall reports that wall's Nusselt number, a patch's too:
/// conduction (no gravity) from a floor held at 21 °C with a 23 °C patch to a ceiling at 19 °C,
/// adiabatic sides, run to a steady state. The patch passes more heat than the floor around it,
/// the floor's mean (each node with its own wall's θ) lies between, what enters through the
/// floor leaves through the ceiling within 1 %, and the summary names the patch by its nodes. A
/// `nusselt` on a wall without a temperature, or with one spread of none, is refused naming
/// `boundary`, exit 2, nothing written.
#[test]
fn a_held_patch_reports_its_nusselt_number() {
    let dir = scratch("patch-nusselt");
    std::fs::create_dir_all(&dir).unwrap();
    let base = "[domain]\ncase = \"box\"\nsize = [8, 8, 10]\n\
                [physics]\nviscosity = 0.1\n[numerics]\nprecision = \"f64\"\n\
                [run]\nsteps = 6000\n[output]\nvtk = false\nimages = false\n\
                [thermal]\nprandtl = 1.0\nbeta = 0.0\ngravity = [0.0, 0.0, 0.0]\nt0 = 20.0\n";
    let floor = "[[boundary]]\nface = \"z-\"\ntemperature = 21.0\nnusselt = true\n";
    let patch = "[[boundary]]\nface = \"z-\"\ntemperature = 23.0\nnusselt = true\n\
                 patch = { min = [2.0, 3.0], max = [4.0, 5.0] }\n";
    let ceiling = "[[boundary]]\nface = \"z+\"\ntemperature = 19.0\nnusselt = true\n";
    let case = dir.join("case.toml");
    std::fs::write(&case, format!("{base}{floor}{patch}{ceiling}")).unwrap();
    let out = dir.join("out");
    let (code, o, e) = run_on_cpu(&case, &out);
    assert_eq!(code, 0, "{o}{e}");
    let nu = summary(&out)["nusselt"].as_array().unwrap().clone();
    assert_eq!(nu.len(), 3, "{nu:?}");
    let value = |k: usize| nu[k]["nusselt"].as_f64().unwrap();
    let (floor_nu, patch_nu, ceiling_nu) = (value(0), value(1), value(2));
    assert_eq!(
        nu[1]["patch"],
        serde_json::json!([[2, 3], [4, 5]]),
        "{nu:?}"
    );
    assert!(nu[0].get("patch").is_none());
    assert!(patch_nu > floor_nu && floor_nu > 0.0, "{nu:?}");
    assert!(
        (floor_nu + ceiling_nu).abs() < 0.01 * floor_nu,
        "in {floor_nu}, out {ceiling_nu}"
    );
    assert!(o.contains("z- [2–4, 3–5]"), "{o}");
    for (extra, says) in [
        (
            "[[boundary]]\nface = \"y-\"\nnusselt = true\n",
            "`nusselt` reports the heat of a wall held at a `temperature`",
        ),
        (
            "[[boundary]]\nface = \"z-\"\ntemperature = 21.0\nnusselt = true\n",
            "`nusselt` needs two faces or patches held at different temperatures",
        ),
    ] {
        std::fs::write(&case, format!("{base}{extra}")).unwrap();
        let refused = dir.join("refused");
        let (code, _, e) = run_on_cpu(&case, &refused);
        assert_eq!(code, 2, "{e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        assert!(e.contains("boundary") && e.contains(says), "{e}");
        assert!(!refused.exists());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
