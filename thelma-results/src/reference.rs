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
