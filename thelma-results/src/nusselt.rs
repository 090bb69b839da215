//! The Nusselt number of a held wall: the heat it passes into the fluid, in units of conduction
//! across a reference length and temperature difference.

use serde::Serialize;
use thelma_core::{Face, Fields};

/// The Nusselt number of one face over a run's fields.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct WallNusselt {
    pub face: Face,
    /// Mean over the face of `−∂θ/∂s · L / ΔT`, s the distance into the fluid: positive where
    /// heat enters the fluid.
    pub nusselt: f64,
}

/// The mean Nusselt number of `face`, held at `theta_w` (θ = T − T₀) half a spacing outside the
/// lattice, from the fields' θ (`f.temperature`, the whole domain): at each fluid node of the
/// layer beside the face whose next node inward is fluid too, the wall gradient of the quadratic
/// through the wall value and the two nodes (at ½ and 3⁄2 spacings), `∂θ/∂s = (9θ₁ − θ₂ − 8θ_w)/3`,
/// times `length / delta` (both in node spacings and θ units). `None` where no node qualifies.
pub fn wall_nusselt(f: &Fields, face: Face, theta_w: f64, length: f64, delta: f64) -> Option<f64> {
    let axis = face.axis();
    let n = f.size[axis];
    if n < 2 || f.temperature.is_empty() {
        return None;
    }
    let [a, b] = face.transverse();
    let (first, second) = if face.upper() { (n - 1, n - 2) } else { (0, 1) };
    let (mut sum, mut count) = (0.0, 0usize);
    for j in 0..f.size[b] {
        for i in 0..f.size[a] {
            let at = |k: usize| {
                let mut p = [0; 3];
                p[a] = i;
                p[b] = j;
                p[axis] = k;
                f.idx(p[0], p[1], p[2])
            };
            let (p1, p2) = (at(first), at(second));
            if f.solid[p1] || f.solid[p2] {
                continue;
            }
            let grad = (9.0 * f.temperature[p1] - f.temperature[p2] - 8.0 * theta_w) / 3.0;
            sum += -grad * length / delta;
            count += 1;
        }
    }
    (count > 0).then(|| sum / count as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Conduction between two held walls: θ linear from +½ (z−) to −½ (z+) across n nodes with
    /// the walls half a spacing outside; the gradient is exact for it, so Nu = 1 into the fluid at
    /// the hot wall and −1 (out) at the cold one.
    #[test]
    fn linear_conduction_has_unit_nusselt_numbers() {
        let n = 12;
        let mut f = Fields::zeros([3, 4, n], 0);
        f.temperature = (0..3 * 4 * n)
            .map(|p| 0.5 - ((p / 12) as f64 + 0.5) / n as f64)
            .collect();
        let hot = wall_nusselt(&f, Face::ZMinus, 0.5, n as f64, 1.0).unwrap();
        let cold = wall_nusselt(&f, Face::ZPlus, -0.5, n as f64, 1.0).unwrap();
        assert!((hot - 1.0).abs() < 1e-12, "{hot}");
        assert!((cold + 1.0).abs() < 1e-12, "{cold}");
        assert_eq!(
            wall_nusselt(&f, Face::XMinus, 0.5, 1.0, 1.0).map(|v| v.is_finite()),
            Some(true)
        );
    }
}
