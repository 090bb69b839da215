//! The divergence watchdog end to end: a run made to blow up stops with the step, the node and why,
//! leaves the last healthy state in its output folder, and never checkpoints a diverged state.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use thelma_cli::app::{run_case, run_case_from, Diverged};
use thelma_cli::checkpoint;
use thelma_cli::watchdog::Reason;
use thelma_core::physics::d3q19::Q;
use thelma_core::physics::Collision;
use thelma_core::{BackendName, CaseConfig, SlabSpec};

/// BGK at a viscosity near zero with a fast lid: unstable within a few dozen steps.
fn unstable(out: &std::path::Path) -> CaseConfig {
    let mut c = CaseConfig::default();
    c.domain.size = [12, 12, 12];
    c.numerics.collision = Collision::BGK;
    c.physics.viscosity = Some(1e-5);
    c.physics.lid_speed = 0.35;
    c.run.steps = Some(2000);
    c.run.watchdog_every = 10;
    c.hardware.backend = BackendName::new("cpu");
    c.hardware.devices = thelma_core::DeviceSpec::Count(2);
    c.output.dir = out.to_path_buf();
    c
}

fn diverge(case: &CaseConfig) -> Diverged {
    let e = run_case(case, Arc::new(AtomicBool::new(false)), &mut |_| {})
        .err()
        .expect("the run must diverge");
    match e.downcast::<Diverged>() {
        Ok(d) => d,
        Err(e) => panic!("not a divergence: {e:#}"),
    }
}

#[test]
fn an_unstable_run_stops_at_a_check_with_the_node_and_writes_the_initial_state() {
    let tmp = tempfile::tempdir().unwrap();
    let d = diverge(&unstable(tmp.path()));
    assert!(
        d.step < 2000 && d.step.is_multiple_of(10),
        "stopped at step {}",
        d.step
    );
    assert!(d.node.iter().all(|&c| c < 12), "{:?}", d.node);
    // Without checkpoints the only healthy state held is the initial one, written as the outputs.
    assert_eq!(d.last_good, Some(0));
    assert!(tmp.path().join("profiles.csv").exists());
    let m = d.to_string();
    assert!(m.contains(&format!("step {}", d.step)), "{m}");
    assert_eq!(m.lines().count(), 1);
}

#[test]
fn with_checkpoints_the_last_healthy_checkpoint_is_what_remains() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = unstable(tmp.path());
    c.run.checkpoint_every = 20;
    let d = diverge(&c);
    let good = d.last_good.expect("a healthy state was written");
    assert!(
        good > 0 && good.is_multiple_of(20) && good < d.step,
        "{good} / {}",
        d.step
    );
    // The checkpoint left behind is that healthy state: finite everywhere, loadable.
    let ck = checkpoint::load(tmp.path()).unwrap();
    assert_eq!(ck.header.step, good);
    let vals: Vec<f32> = ck
        .populations
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert!(vals.iter().all(|v| v.is_finite()));
}

#[test]
fn a_density_band_stops_a_run_before_anything_is_non_finite() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = unstable(tmp.path());
    // A tight band trips on the first excursions of a run that is still finite.
    c.run.density_bounds = [0.999, 1.001];
    c.run.watchdog_every = 1;
    let d = diverge(&c);
    match d.reason {
        Reason::Density { rho, bounds } => {
            assert_eq!(bounds, [0.999, 1.001]);
            assert!(rho.is_finite() && !(0.999..=1.001).contains(&rho), "{rho}");
        }
        r => panic!("expected a density finding, got {r:?}"),
    }
    assert!(d.step < 50, "{}", d.step);
}

#[test]
fn a_nan_in_the_populations_is_reported_at_its_node() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = CaseConfig::default();
    c.domain.size = [8, 6, 10];
    c.run.steps = Some(20);
    c.run.checkpoint_every = 20;
    c.hardware.backend = BackendName::new("cpu");
    c.output.dir = tmp.path().join("healthy");
    run_case(&c, Arc::new(AtomicBool::new(false)), &mut |_| {}).unwrap();

    // Poison one population of node (5, 2, 7) and save it as a proper checkpoint.
    let mut ck = checkpoint::load(&c.output.dir).unwrap();
    let n = 8 * 6 * 10;
    let p = (7 * 6 + 2) * 8 + 5;
    let k = (3 * n + p) * 4;
    ck.populations[k..k + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    let whole = vec![ck.populations.clone()];
    let sick = tmp.path().join("sick");
    std::fs::create_dir_all(&sick).unwrap();
    checkpoint::write_parts(
        &sick.join(checkpoint::FILE_NAME),
        &ck.header.case,
        ck.header.step,
        &[SlabSpec::whole(thelma_tests::domain(&ck.header.case))],
        &whole,
        &[],
        &checkpoint::Steered::default(),
        ck.header.store_scale,
    )
    .unwrap();
    assert_eq!(whole[0].len(), Q * n * 4);

    let mut r = c.clone();
    r.run.steps = Some(40);
    r.run.checkpoint_every = 0;
    r.output.dir = tmp.path().join("resumed");
    let e = run_case_from(
        &r,
        Some(&sick),
        Arc::new(AtomicBool::new(false)),
        &mut |_| {},
    )
    .err()
    .expect("a NaN must stop the run");
    let d = e.downcast::<Diverged>().expect("a divergence");
    assert_eq!(
        (d.step, d.node, d.reason),
        (20, [5, 2, 7], Reason::NonFinite)
    );
}

#[test]
fn a_case_without_field_outputs_points_to_its_checkpoint_as_the_healthy_state() {
    // A closed box writes no profiles. It starts from a fast vortex (saved as a checkpoint) that BGK
    // at a vanishing viscosity cannot hold.
    let tmp = tempfile::tempdir().unwrap();
    let mut c = unstable(tmp.path());
    c.domain.case = thelma_core::CaseKind::Box;
    c.domain.size = [12, 12, 16];
    c.run.checkpoint_every = 20;
    let whole: Vec<u8> = thelma_tests::vortex_populations(thelma_tests::domain(&c), 0.3)
        .iter()
        .flat_map(|v| (*v as f32).to_le_bytes())
        .collect();
    checkpoint::write_parts(
        &tmp.path().join(checkpoint::FILE_NAME),
        &c,
        0,
        &[SlabSpec::whole(thelma_tests::domain(&c))],
        &[whole],
        &[],
        &checkpoint::Steered::default(),
        None,
    )
    .unwrap();
    let e = run_case_from(
        &c,
        Some(tmp.path()),
        Arc::new(AtomicBool::new(false)),
        &mut |_| {},
    )
    .err()
    .expect("the vortex must blow up");
    let d = e.downcast::<Diverged>().expect("a divergence");
    let good = d.last_good.expect("the checkpoint is the healthy state");
    assert!(
        good < d.step && good.is_multiple_of(20),
        "{good} / {}",
        d.step
    );
    assert_eq!(checkpoint::read_header(tmp.path()).unwrap().step, good);
    assert!(!tmp.path().join("profiles.csv").exists());
}
