//! The convergence measure taken on the devices (`Runtime::velocity_change`) against its definition,
//! `thelma_results::relative_change` of the gathered fields: equal to 1e-12 (only the order of the
//! sums differs) over a few checks of a moving cavity, with and without a body force, on one slab and
//! on three, f32 and f64; and a convergence run that stops at the check the gathered fields would
//! have stopped it at.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use thelma_cli::app::run_case;
use thelma_core::physics::Collision;
use thelma_core::{BackendName, CaseConfig, Fields, Precision, Runtime};
use thelma_results::relative_change;
use thelma_tests::{per_module, variant_case, Module};

/// Relative distance of `got` from `want` (0 when both are 0).
fn rel(got: f64, want: f64) -> f64 {
    if got == want {
        0.0
    } else {
        (got - want).abs() / want.abs().max(got.abs())
    }
}

/// Checks `checks` measures of `rt` against the fields gathered at the same steps, `every` steps
/// apart; returns the relative changes seen.
fn measures_against_fields(rt: &mut Runtime, checks: usize, every: u64, what: &str) -> Vec<f64> {
    assert_eq!(
        rt.velocity_change().unwrap(),
        None,
        "{what}: the first measure has nothing to compare with"
    );
    let mut prev: Fields = rt.fields().unwrap();
    let mut seen = Vec::new();
    for k in 0..checks {
        rt.run(every).unwrap();
        let now = rt.fields().unwrap();
        let sums = rt
            .velocity_change()
            .unwrap()
            .unwrap_or_else(|| panic!("{what}: check {k} has a previous velocity"));
        let want = relative_change(&prev, &now);
        let got = sums.relative();
        eprintln!("{what}: check {k}: {got:.6e} (fields {want:.6e})");
        assert!(
            want > 0.0 && want.is_finite(),
            "{what}: the cavity must move"
        );
        assert!(
            rel(got, want) <= 1e-12,
            "{what}: check {k}: on the devices {got:e}, from the fields {want:e}"
        );
        // The norm alone is the fields' Σ|u|² over fluid nodes.
        let norm: f64 = (0..now.rho.len())
            .filter(|&p| !now.solid[p])
            .map(|p| now.ux[p].powi(2) + now.uy[p].powi(2) + now.uz[p].powi(2))
            .sum();
        assert!(rel(sums.norm, norm) <= 1e-12, "{what}: check {k}: norm");
        seen.push(got);
        prev = now;
    }
    seen
}

fn the_measure_equals_relative_change_of_the_fields(m: Module) {
    // A lid-driven cavity with a box obstacle (solid nodes), plain MRT and TRT with the eddy
    // viscosity and a body force (the velocity's half force step).
    for variant in [(Collision::MRT, false), (Collision::TRT, true)] {
        for precision in [Precision::F32, Precision::F64] {
            let c = variant_case([20, 18, 21], false, variant, precision);
            let mut one_slab = Vec::new();
            for slabs in [1, 3] {
                let what = format!("{} {variant:?} {precision:?} {slabs} slab(s)", m.name());
                let mut rt = m.runtime(&c, slabs);
                let seen = measures_against_fields(&mut rt, 3, 40, &what);
                // Loading populations starts over: nothing to compare the next measure with.
                let pops = rt.read_populations().unwrap();
                rt.write_populations(pops, rt.step()).unwrap();
                assert_eq!(rt.velocity_change().unwrap(), None, "{what}: after a load");
                rt.shutdown();
                if slabs == 1 {
                    one_slab = seen;
                } else {
                    // Partition invariance holds for the state; the sums differ in order only.
                    for (a, b) in seen.iter().zip(&one_slab) {
                        assert!(
                            rel(*a, *b) <= 1e-12,
                            "{what}: {a:e} against one slab's {b:e}"
                        );
                    }
                }
            }
        }
    }
}

per_module!(the_measure_equals_relative_change_of_the_fields =>
    the_cpu_modules_measure_equals_relative_change_of_the_fields,
    the_cuda_modules_measure_equals_relative_change_of_the_fields);

/// The step at which a convergence run of `case` on `m` stops, from the measure taken the old way:
/// the whole fields gathered at every check and compared on the host.
fn converged_step_from_gathered_fields(m: Module, case: &CaseConfig) -> u64 {
    let check = case.resolved_check_every();
    let mut rt = m.runtime(case, 1);
    let mut prev = rt.fields().unwrap();
    while rt.step() < case.run.max_steps {
        let chunk = check.min(case.run.max_steps - rt.step());
        rt.run(chunk).unwrap();
        let now = rt.fields().unwrap();
        let change = relative_change(&prev, &now) * 1000.0 / chunk as f64;
        assert!(
            change.is_finite(),
            "{}: the reference run diverged",
            m.name()
        );
        if change < case.run.tolerance {
            break;
        }
        prev = now;
    }
    let step = rt.step();
    rt.shutdown();
    step
}

fn the_default_cavity_converges_at_the_same_check(m: Module) {
    let tmp = tempfile::tempdir().unwrap();
    // The default cavity, small: at Re = 1000 a 16³ grid diverges, so at Re = 100.
    let mut c = CaseConfig::default();
    c.domain.size = [16, 16, 16];
    c.physics.reynolds = 100.0;
    c.run.max_steps = 40_000;
    c.hardware.backend = BackendName::new(m.name());
    c.output.dir = tmp.path().to_path_buf();
    let reference = converged_step_from_gathered_fields(m, &c);
    let out = run_case(&c, Arc::new(AtomicBool::new(false)), &mut |_| {}).unwrap();
    let s = &out.summary;
    eprintln!(
        "{}: converged at step {} (gathered fields: {reference}), check every {}",
        m.name(),
        s.steps,
        c.resolved_check_every()
    );
    assert!(s.converged, "{}: stopped by {:?}", m.name(), s.stop_reason);
    // The measures equal the gathered fields' to rounding, so the run stops at the same check,
    // unless a change falls within that rounding of the tolerance: then one check later or
    // earlier.
    assert!(
        s.steps.abs_diff(reference) <= c.resolved_check_every(),
        "{}: step {} against {reference}",
        m.name(),
        s.steps
    );
    // The fields a converged run returns are those of its last step.
    let again = {
        let mut rt = m.runtime(&c, 1);
        rt.run(s.steps).unwrap();
        let f = rt.fields().unwrap();
        rt.shutdown();
        f
    };
    assert_eq!(relative_change(&again, &out.fields), 0.0);
}

per_module!(the_default_cavity_converges_at_the_same_check =>
    the_default_cavity_converges_at_the_same_check_on_the_cpu_module,
    the_default_cavity_converges_at_the_same_check_on_the_cuda_module);
