//! Published reference data and the comparison of simulated profiles against it.

use serde::Serialize;

use crate::profiles::Profile;

/// Centreline velocities of the steady cubic cavity at Re = 1000, Albensoeder & Kuhlmann (2005);
/// provenance and frame are in the file's header.
pub const CAVITY_RE1000_CSV: &str =
    include_str!("../data/cavity3d_re1000_albensoeder_kuhlmann2005.csv");

/// Published extrema of the same flow (Albensoeder & Kuhlmann 2005, as quoted by Ben Beya & Lili 2008):
/// (name, coordinate, value).
pub const CAVITY_RE1000_EXTREMA: [(&str, f64, f64); 3] = [
    ("u_min", 0.12419, -0.2803833),
    ("w_min", 0.90957, -0.4350186),
    ("w_max", 0.10913, 0.2466511),
];

/// The mean velocity of turbulent plane channel flow at Re_τ = 178.12 in wall units, Moser, Kim &
/// Mansour (1999); provenance in the file's header.
pub const CHANNEL_RETAU180_CSV: &str =
    include_str!("../data/channel_retau180_moser_kim_mansour1999.csv");

/// The friction Reynolds number of [`CHANNEL_RETAU180_CSV`].
pub const CHANNEL_RETAU180: f64 = 178.12;

/// Reference data that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    #[error("reference data, record {record}: {message}")]
    Record { record: usize, message: String },
    #[error("reference data, record {record}: bad {what} `{text}`")]
    Number {
        record: usize,
        what: &'static str,
        text: String,
    },
}

/// A reference data set: named profiles of (coordinate, value).
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    pub profiles: Vec<Profile>,
}

impl Reference {
    /// Parses the `profile,coordinate,value` format, with `#` comment lines.
    pub fn parse(text: &str) -> Result<Self, ReferenceError> {
        let mut rdr = csv::ReaderBuilder::new()
            .comment(Some(b'#'))
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        let mut profiles: Vec<Profile> = Vec::new();
        for (k, rec) in rdr.records().enumerate() {
            let record = k + 1;
            let rec = rec.map_err(|e| ReferenceError::Record {
                record,
                message: e.to_string(),
            })?;
            if rec.len() != 3 {
                return Err(ReferenceError::Record {
                    record,
                    message: "expected 3 fields".into(),
                });
            }
            let number = |s: &str, what: &'static str| {
                s.parse::<f64>().map_err(|_| ReferenceError::Number {
                    record,
                    what,
                    text: s.to_string(),
                })
            };
            let c = number(&rec[1], "coordinate")?;
            let v = number(&rec[2], "value")?;
            match profiles.iter_mut().find(|p| p.name == rec[0]) {
                Some(p) => p.points.push((c, v)),
                None => profiles.push(Profile {
                    name: rec[0].to_string(),
                    points: vec![(c, v)],
                }),
            }
        }
        for p in &mut profiles {
            p.points.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        Ok(Self { profiles })
    }

    /// The Re = 1000 cavity data of Albensoeder & Kuhlmann (2005).
    pub fn cavity_re1000() -> Self {
        Self::parse(CAVITY_RE1000_CSV).expect("the embedded reference data parses")
    }

    /// The Re_τ = 180 channel's mean velocity U⁺(y⁺) of Moser, Kim & Mansour (1999), profile
    /// `u_plus`.
    pub fn channel_retau180() -> Self {
        Self::parse(CHANNEL_RETAU180_CSV).expect("the embedded reference data parses")
    }
}

/// A mean velocity profile in wall units against a reference over a band of y⁺.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct WallUnitsError {
    /// The band compared, y⁺ from `from` to `to`.
    pub from: f64,
    pub to: f64,
    /// Reference points inside the band.
    pub points: usize,
    /// Largest |U⁺ − U⁺_ref| / U⁺_ref over them, the simulation interpolated linearly in y⁺.
    pub max_relative: f64,
    /// The y⁺ where it is reached.
    pub at: f64,
    /// Root mean square of the relative differences.
    pub rms_relative: f64,
}

/// Compares a simulated mean profile (y⁺, U⁺) with the reference profile over from ≤ y⁺ ≤ to, at
/// the reference's points (the simulation is interpolated linearly between its own points and
/// must cover the band); `None` when the band holds no reference point or the simulation does not
/// reach across it.
pub fn compare_wall_units(
    sim: &Profile,
    reference: &Profile,
    from: f64,
    to: f64,
) -> Option<WallUnitsError> {
    let (first, last) = (sim.points.first()?.0, sim.points.last()?.0);
    if first > from || last < to {
        return None;
    }
    let rel: Vec<(f64, f64)> = reference
        .points
        .iter()
        .filter(|(y, v)| *y >= from && *y <= to && *v != 0.0)
        .map(|(y, v)| (*y, (sim.at(*y) - v) / v))
        .collect();
    if rel.is_empty() {
        return None;
    }
    let (at, max_relative) =
        rel.iter().fold(
            (0.0, 0.0f64),
            |m, (y, e)| if e.abs() > m.1 { (*y, e.abs()) } else { m },
        );
    let rms_relative = (rel.iter().map(|(_, e)| e * e).sum::<f64>() / rel.len() as f64).sqrt();
    Some(WallUnitsError {
        from,
        to,
        points: rel.len(),
        max_relative,
        at,
        rms_relative,
    })
}

/// Error of one simulated profile against its reference.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ProfileError {
    pub profile: String,
    /// Reference points compared (the wall values at both ends excluded).
    pub points: usize,
    /// Root mean square of (simulated − reference), simulated interpolated linearly at the reference
    /// coordinates; in units of the lid speed.
    pub l2: f64,
    /// Largest |simulated − reference|.
    pub max: f64,
}

/// One extremum, simulated against published.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ExtremumError {
    pub name: String,
    pub coordinate: f64,
    pub value: f64,
    pub reference_coordinate: f64,
    pub reference_value: f64,
}

/// The full comparison of a cavity run with the reference.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Comparison {
    pub profiles: Vec<ProfileError>,
    pub extrema: Vec<ExtremumError>,
}

impl Comparison {
    /// The largest L2 error over the profiles.
    pub fn worst_l2(&self) -> f64 {
        self.profiles.iter().map(|p| p.l2).fold(0.0, f64::max)
    }
}

/// Compares simulated profiles with the reference profiles of the same name.
pub fn compare(sim: &[Profile], reference: &Reference) -> Comparison {
    let mut profiles = Vec::new();
    for r in &reference.profiles {
        let Some(s) = sim.iter().find(|s| s.name == r.name) else {
            continue;
        };
        let inner: Vec<_> = r
            .points
            .iter()
            .filter(|(c, _)| *c > 0.0 && *c < 1.0)
            .collect();
        let errs: Vec<f64> = inner.iter().map(|(c, v)| s.at(*c) - v).collect();
        let l2 = (errs.iter().map(|e| e * e).sum::<f64>() / errs.len().max(1) as f64).sqrt();
        let max = errs.iter().fold(0.0f64, |m, e| m.max(e.abs()));
        profiles.push(ProfileError {
            profile: r.name.clone(),
            points: errs.len(),
            l2,
            max,
        });
    }
    let mut extrema = Vec::new();
    let find = |n: &str| sim.iter().find(|s| s.name == n);
    if let (Some(u), Some(w)) = (find("u_vs_z"), find("w_vs_x")) {
        let (umin, _) = u.extrema();
        let (wmin, wmax) = w.extrema();
        for ((name, rc, rv), (c, v)) in CAVITY_RE1000_EXTREMA.iter().zip([umin, wmin, wmax]) {
            extrema.push(ExtremumError {
                name: name.to_string(),
                coordinate: c,
                value: v,
                reference_coordinate: *rc,
                reference_value: *rv,
            });
        }
    }
    Comparison { profiles, extrema }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_reference_has_both_profiles_with_wall_values() {
        let r = Reference::cavity_re1000();
        let u = r.profiles.iter().find(|p| p.name == "u_vs_z").unwrap();
        let w = r.profiles.iter().find(|p| p.name == "w_vs_x").unwrap();
        assert_eq!(u.points.first(), Some(&(0.0, 0.0)));
        assert_eq!(u.points.last(), Some(&(1.0, 1.0)));
        assert_eq!(w.points.last(), Some(&(1.0, 0.0)));
        assert!(u.points.len() > 10 && w.points.len() > 10);
    }

    #[test]
    fn the_channel_reference_follows_the_wall_laws() {
        let r = Reference::channel_retau180();
        let u = r.profiles.iter().find(|p| p.name == "u_plus").unwrap();
        assert_eq!(u.points.first(), Some(&(0.0, 0.0)));
        assert!((u.points.last().unwrap().0 - CHANNEL_RETAU180).abs() < 1e-9);
        // The viscous sublayer (U⁺ = y⁺ below y⁺ ≈ 1) and, within a few per cent, the log law
        // U⁺ = ln y⁺ / 0.41 + 5.5 that Kim, Moin & Moser (1987) found at this Reynolds number.
        assert!((u.at(0.5) - 0.5).abs() < 1e-3);
        for y in [40.0, 60.0] {
            let log = f64::ln(y) / 0.41 + 5.5;
            assert!((u.at(y) - log).abs() / log < 0.03, "{y}: {} {log}", u.at(y));
        }
    }

    #[test]
    fn wall_units_comparison_finds_a_scaled_profile_and_refuses_a_short_one() {
        let r = Reference::channel_retau180();
        let u = r.profiles.iter().find(|p| p.name == "u_plus").unwrap();
        let same = compare_wall_units(u, u, 30.0, 150.0).unwrap();
        assert!(same.max_relative < 1e-15 && same.points > 10);
        // A profile 4 % fast over the band, sampled on its own (coarser) points.
        let fast = Profile {
            name: "u_plus".into(),
            points: (0..=90)
                .map(|k| 2.0 * k as f64)
                .map(|y| (y, 1.04 * u.at(y)))
                .collect(),
        };
        let e = compare_wall_units(&fast, u, 30.0, 150.0).unwrap();
        assert!((e.max_relative - 0.04).abs() < 2e-3, "{e:?}");
        assert!(e.rms_relative > 0.035 && e.rms_relative <= e.max_relative);
        let short = Profile {
            name: "u_plus".into(),
            points: vec![(1.0, 1.0), (100.0, 17.0)],
        };
        assert!(compare_wall_units(&short, u, 30.0, 150.0).is_none());
    }

    #[test]
    fn comparing_the_reference_with_itself_gives_zero_and_a_shift_gives_the_shift() {
        let r = Reference::cavity_re1000();
        let c = compare(&r.profiles, &r);
        assert!(c.worst_l2() < 1e-15);
        let shifted: Vec<Profile> = r
            .profiles
            .iter()
            .map(|p| Profile {
                name: p.name.clone(),
                points: p.points.iter().map(|(c, v)| (*c, v + 0.01)).collect(),
            })
            .collect();
        let c = compare(&shifted, &r);
        for p in &c.profiles {
            assert!((p.l2 - 0.01).abs() < 1e-12 && (p.max - 0.01).abs() < 1e-12);
        }
        assert!(Reference::parse("profile,coordinate,value\nu,x,1\n").is_err());
    }
}
