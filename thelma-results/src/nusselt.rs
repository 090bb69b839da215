//! The Nusselt number of a held wall: the heat it passes into the fluid, in units of conduction
//! across a reference length and temperature difference.

use serde::Serialize;
use thelma_core::{Face, Fields};

/// The Nusselt number of one held wall over a run's fields.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct WallNusselt {
    pub face: Face,
    /// The rectangle of a patch, in nodes along the face's two transverse axes (in order, both
    /// ends included); absent for the whole face.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<[[usize; 2]; 2]>,
    /// Mean over the held wall of `−∂θ/∂s · L / ΔT`, s the distance into the fluid: positive where
    /// heat enters the fluid.
    pub nusselt: f64,
}

impl WallNusselt {
    /// The wall's name in reports: the face, and a patch's node ranges (`z- [4–9, 2–6]`).
    pub fn label(&self) -> String {
        match self.patch {
            None => self.face.name().to_string(),
            Some([lo, hi]) => format!(
                "{} [{}–{}, {}–{}]",
                self.face.name(),
                lo[0],
                hi[0],
                lo[1],
                hi[1]
            ),
        }
    }
}

/// The mean Nusselt number of the part of `face` where `wall` gives the θ it is held at (θ = T −
/// T₀, half a spacing outside the lattice; `wall` is asked with the node's global position and
/// says `None` where the face is not held there, or not part of the wall asked for), from the
/// fields' θ (`f.temperature`, the whole domain): at each fluid node of the layer beside the face
/// whose next node inward is fluid too, the wall gradient of the quadratic through the wall value
/// and the two nodes (at ½ and 3⁄2 spacings), `∂θ/∂s = (9θ₁ − θ₂ − 8θ_w)/3`, times
/// `length / delta` (both in node spacings and θ units). `None` where no node qualifies.
pub fn wall_nusselt(
    f: &Fields,
    face: Face,
    wall: impl Fn([usize; 3]) -> Option<f64>,
    length: f64,
    delta: f64,
) -> Option<f64> {
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
                p
            };
            let Some(theta_w) = wall(at(first)) else {
                continue;
            };
            let idx = |p: [usize; 3]| f.idx(p[0], p[1], p[2]);
            let (p1, p2) = (idx(at(first)), idx(at(second)));
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
        let held = |t: f64| move |_: [usize; 3]| Some(t);
        let hot = wall_nusselt(&f, Face::ZMinus, held(0.5), n as f64, 1.0).unwrap();
        let cold = wall_nusselt(&f, Face::ZPlus, held(-0.5), n as f64, 1.0).unwrap();
        assert!((hot - 1.0).abs() < 1e-12, "{hot}");
        assert!((cold + 1.0).abs() < 1e-12, "{cold}");
        assert_eq!(
            wall_nusselt(&f, Face::XMinus, held(0.5), 1.0, 1.0).map(|v| v.is_finite()),
            Some(true)
        );
        assert_eq!(wall_nusselt(&f, Face::ZMinus, |_| None, 1.0, 1.0), None);
    }

    /// A patch of the z− wall held at 1.5 among wall held at 0.5, the cold wall at −0.5: the
    /// columns above the patch conduct 2 across the box, the others 1. Asked for the patch, the
    /// mean is the patch's; asked for the face, each node takes its own wall value and the mean is
    /// weighted by the nodes.
    #[test]
    fn a_patch_reports_its_own_heat_and_the_face_the_mean() {
        let (nx, ny, n) = (6, 5, 10);
        let patch = |p: [usize; 3]| (1..=2).contains(&p[0]) && (1..=3).contains(&p[1]);
        let mut f = Fields::zeros([nx, ny, n], 0);
        f.temperature = (0..nx * ny * n)
            .map(|q| {
                let (x, y, z) = (q % nx, (q / nx) % ny, q / (nx * ny));
                let hot = if patch([x, y, z]) { 1.5 } else { 0.5 };
                hot - (hot + 0.5) * (z as f64 + 0.5) / n as f64
            })
            .collect();
        let wall = |p: [usize; 3]| Some(if patch(p) { 1.5 } else { 0.5 });
        let only = |p: [usize; 3]| patch(p).then_some(1.5);
        let (len, delta) = (n as f64, 2.0);
        let on_patch = wall_nusselt(&f, Face::ZMinus, only, len, delta).unwrap();
        assert!((on_patch - 1.0).abs() < 1e-12, "{on_patch}");
        let face = wall_nusselt(&f, Face::ZMinus, wall, len, delta).unwrap();
        let weighted = (6.0 * 1.0 + 24.0 * 0.5) / 30.0;
        assert!((face - weighted).abs() < 1e-12, "{face} vs {weighted}");
        let label = WallNusselt {
            face: Face::ZMinus,
            patch: Some([[1, 1], [2, 3]]),
            nusselt: on_patch,
        }
        .label();
        assert_eq!(label, "z- [1–2, 1–3]");
    }
}
