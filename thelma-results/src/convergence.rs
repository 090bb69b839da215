//! Convergence of a run to steady state.

use thelma_core::{ChangeSums, Fields};

/// Relative L2 change of the velocity field between two snapshots, over fluid nodes:
/// `‖u − u_prev‖₂ / ‖u‖₂` (0 when the field is zero and unchanged). The definition of the measure a
/// run takes on its devices (`ComputeModule::velocity_change`), which sums the same terms per slab.
pub fn relative_change(prev: &Fields, now: &Fields) -> f64 {
    let mut diff = 0.0;
    let mut norm = 0.0;
    for p in 0..now.rho.len() {
        if now.solid[p] {
            continue;
        }
        let d = [
            now.ux[p] - prev.ux[p],
            now.uy[p] - prev.uy[p],
            now.uz[p] - prev.uz[p],
        ];
        diff += d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
        norm += now.ux[p] * now.ux[p] + now.uy[p] * now.uy[p] + now.uz[p] * now.uz[p];
    }
    ChangeSums { diff, norm }.relative()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_is_relative_to_the_new_field() {
        let mut a = Fields::zeros([2, 1, 1], 0);
        let mut b = a.clone();
        assert_eq!(relative_change(&a, &b), 0.0);
        b.ux = vec![1.0, 1.0];
        a.ux = vec![1.0, 0.9];
        let r = relative_change(&a, &b);
        assert!((r - (0.01f64 / 2.0).sqrt()).abs() < 1e-12);
        b.solid[1] = true;
        assert_eq!(relative_change(&a, &b), 0.0);
    }
}
