//! Mass conservation in closed domains: the lid-driven cavity over thousands of steps.

use thelma_core::config::{CaseConfig, Precision};
use thelma_tests::cpu_runtime;

fn drift(precision: Precision, steps: u64) -> f64 {
    let mut c = CaseConfig::default();
    c.domain.size = [24, 24, 24];
    c.physics.reynolds = 400.0;
    c.numerics.precision = precision;
    let mut rt = cpu_runtime(&c, 2);
    let m0 = rt.fields().unwrap().mass();
    rt.run(steps).unwrap();
    let f = rt.fields().unwrap();
    // The lid must have set the fluid in motion, or conservation would be trivial.
    let speed = f.ux.iter().map(|u| u.abs()).fold(0.0, f64::max);
    assert!(speed > 0.02, "the flow did not develop: max |u| = {speed}");
    (f.mass() - m0).abs() / m0
}

#[test]
fn closed_cavity_conserves_mass_in_f64() {
    let d = drift(Precision::F64, 3000);
    assert!(d < 1e-12, "relative mass drift {d:e}");
}

#[test]
fn closed_cavity_conserves_mass_in_f32() {
    let d = drift(Precision::F32, 3000);
    assert!(d < 1e-5, "relative mass drift {d:e}");
}
