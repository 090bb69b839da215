//! `thelma run` argument and case-file handling never panics: random argument vectors and mutated
//! example case files go through clap or the case parser, the translation into a case, validation,
//! the geometry, the backend choice and the pre-run checks, and every error on the way is one line
//! (for clap's, the first line the binary prints).

use clap::Parser;
use proptest::prelude::*;
use thelma_cli::cli::RunArgs;
use thelma_compute::ModelParams;
use thelma_geometry::Geometry;

#[derive(Parser, Debug)]
struct Run {
    #[command(flatten)]
    args: RunArgs,
}

const FLAGS: &[&str] = &[
    "--config",
    "--resume",
    "--size",
    "--re",
    "--viscosity",
    "--lid-speed",
    "--steps",
    "--tolerance",
    "--check-every",
    "--max-steps",
    "--watchdog-every",
    "--density-bounds",
    "--checkpoint-every",
    "--collision",
    "--trt-magic",
    "--smagorinsky",
    "--force",
    "--precision",
    "--backend",
    "--devices",
    "--threads",
    "--periodic",
    "--output",
    "-o",
    "--quiet",
    "-q",
    "--output-every",
    "--vtk-pieces",
    "--no-vtk",
    "--no-images",
    "--fields",
    "--slice",
    "--phys-length",
    "--phys-velocity",
    "--phys-viscosity",
];

const VALUES: &[&str] = &[
    "0",
    "1",
    "2",
    "-1",
    "8",
    "3,",
    "1,1",
    "2,0,1",
    "0,1",
    "all",
    "x,y",
    "z",
    "none",
    "nan",
    "inf",
    "-inf",
    "1e400",
    "0.4",
    "0.1",
    "-0.0",
    "1e-9",
    "18446744073709551616",
    "bgk",
    "mrt",
    "f32",
    "f16",
    "cpu",
    "cuda",
    "auto",
    "",
    ",",
    "8,8",
    "4,5,6",
    "0.5,2",
    "2,0.5",
    "1e12",
    "/",
    "ρ",
    "--size",
    "-",
    "4096,4096,4096",
    "z=10",
    "x=0",
    "y=99",
    "w=1",
    "z=",
    "=3",
    "0.096",
    "1e-6",
    "1e-300",
    "vorticity",
    "velocity,q_criterion",
    "speed,speed",
];

fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (0..FLAGS.len()).prop_map(|k| FLAGS[k].to_string()),
        3 => (0..VALUES.len()).prop_map(|k| VALUES[k].to_string()),
        1 => "\\PC{0,10}",
        1 => (0..FLAGS.len(), "\\PC{0,6}").prop_map(|(k, v)| format!("{}={v}", FLAGS[k])),
    ]
}

fn one_line(e: &str) {
    assert_eq!(e.trim_end().lines().count(), 1, "not one line: {e:?}");
}

fn drive(argv: &[String]) {
    let parsed = match Run::try_parse_from(
        std::iter::once("thelma".to_string()).chain(argv.iter().cloned()),
    ) {
        Ok(p) => p,
        Err(e) => {
            // The binary prints clap's first line; it must name what went wrong.
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("");
            assert!(first.starts_with("error:"), "{text}");
            return;
        }
    };
    let (case, _) = match parsed.args.into_case() {
        Ok(c) => c,
        Err(e) => return one_line(&format!("{e:#}")),
    };
    drive_case(&case);
}

/// Everything `thelma run` does with a case before it allocates a lattice.
fn drive_case(case: &thelma_core::CaseConfig) {
    let lattice = match case.validate() {
        Ok(l) => l,
        Err(e) => return one_line(&e.to_string()),
    };
    let _ = case.resolved_check_every();
    let geometry = match Geometry::from_case(case) {
        Ok(g) => std::sync::Arc::new(g),
        Err(e) => return one_line(&e.to_string()),
    };
    let params = ModelParams::new(case, &lattice, geometry);
    let sel = match thelma_cli::backend::select(case, params, None) {
        Ok(s) => s,
        Err(e) => return one_line(&format!("{e:#}")),
    };
    if let Err(e) = thelma_cli::preflight::check(case, &*sel.factory, &sel.layout, 0, true) {
        one_line(&format!("{e:#}"));
    }
}

proptest! {
    // Bounded for CI: a few thousand argument vectors take about a second.
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_arguments_never_panic(argv in prop::collection::vec(token(), 0..10)) {
        drive(&argv);
    }

    #[test]
    fn flag_value_pairs_never_panic(pairs in prop::collection::vec((0..FLAGS.len(), token()), 0..6)) {
        let argv: Vec<String> = pairs
            .into_iter()
            .flat_map(|(f, v)| [FLAGS[f].to_string(), v])
            .collect();
        drive(&argv);
    }

    /// The example case files, mutated (a range replaced by a token or random text), go through the
    /// parser and then, where they parse, through validation, the geometry and the pre-run checks.
    #[test]
    fn mutated_case_files_never_panic(
        file in 0..EXAMPLES.len(),
        at in 0.0..1.0f64,
        cut in 0usize..12,
        insert in prop_oneof![token(), "\\PC{0,12}"],
    ) {
        let chars: Vec<char> = EXAMPLES[file].chars().collect();
        let start = ((chars.len() as f64) * at) as usize;
        let end = (start + cut).min(chars.len());
        let mutated: String = chars[..start]
            .iter()
            .copied()
            .chain(insert.chars())
            .chain(chars[end..].iter().copied())
            .collect();
        match thelma_core::CaseConfig::parse(&mutated, false) {
            Ok(case) => drive_case(&case),
            Err(e) => one_line(&e.to_string()),
        }
    }
}

/// The commented example cases shipped under `examples/` (`tests/tests/examples.rs` also builds
/// their geometry, STL bodies included, from the folder itself).
const EXAMPLES: &[&str] = &[
    include_str!("../../examples/cavity.toml"),
    include_str!("../../examples/cavity-re100.toml"),
    include_str!("../../examples/cavity-re1000.toml"),
    include_str!("../../examples/ahmed.toml"),
    include_str!("../../examples/body-in-channel.toml"),
    include_str!("../../examples/channel-sphere.toml"),
    include_str!("../../examples/couette.toml"),
    include_str!("../../examples/cylinder-3d.toml"),
    include_str!("../../examples/inlet-outlet.toml"),
    include_str!("../../examples/pipe.toml"),
    include_str!("../../examples/poiseuille.toml"),
    include_str!("../../examples/taylor-green.toml"),
];

/// Every example case is valid as shipped.
#[test]
fn every_example_case_validates() {
    for (k, text) in EXAMPLES.iter().enumerate() {
        let case = thelma_core::CaseConfig::parse(text, false)
            .unwrap_or_else(|e| panic!("example {k}: {e}"));
        case.validate()
            .unwrap_or_else(|e| panic!("example {k}: {e}"));
    }
}
