//! The arrays a VTK file can hold, by the names `output.fields` and `--fields` give them.

use std::fmt;

/// One array of the VTK files. The first five are what the files have always held (the default);
/// the velocity derivatives are asked for by name, because each costs a pass over the field with
/// six neighbour reads per node and a file twice the size of the velocity's for the vorticity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputField {
    /// ρ/ρ₀.
    Density,
    /// The velocity vector.
    Velocity,
    /// |u|.
    Speed,
    /// p − p₀ = (ρ − 1) c_s².
    Pressure,
    /// The solid mask (1 = solid), UInt8.
    Solid,
    /// ω = ∇ × u.
    Vorticity,
    /// Q = ½(‖Ω‖² − ‖S‖²), Ω and S the antisymmetric and symmetric parts of ∇u.
    QCriterion,
    /// T = T₀ + θ, in the unit `[thermal]` gives its temperatures in (cases with a temperature
    /// lattice: added to the default arrays, or named in `output.fields`).
    Temperature,
    /// The time-averaged velocity (`output.average_from`: added to the arrays, or named).
    MeanVelocity,
    /// The time-averaged pressure.
    MeanPressure,
    /// The time-averaged temperature (with a temperature lattice).
    MeanTemperature,
}

impl OutputField {
    /// Every array, in the order of the names listed in messages and help.
    pub const ALL: [OutputField; 11] = [
        OutputField::Density,
        OutputField::Velocity,
        OutputField::Speed,
        OutputField::Pressure,
        OutputField::Solid,
        OutputField::Vorticity,
        OutputField::QCriterion,
        OutputField::Temperature,
        OutputField::MeanVelocity,
        OutputField::MeanPressure,
        OutputField::MeanTemperature,
    ];

    /// What a file holds unless `output.fields` says otherwise.
    pub const DEFAULT: [OutputField; 5] = [
        OutputField::Density,
        OutputField::Velocity,
        OutputField::Speed,
        OutputField::Pressure,
        OutputField::Solid,
    ];

    /// The array's name in the case file and in the VTK file.
    pub fn name(self) -> &'static str {
        match self {
            OutputField::Density => "density",
            OutputField::Velocity => "velocity",
            OutputField::Speed => "speed",
            OutputField::Pressure => "pressure",
            OutputField::Solid => "solid",
            OutputField::Vorticity => "vorticity",
            OutputField::QCriterion => "q_criterion",
            OutputField::Temperature => "temperature",
            OutputField::MeanVelocity => "mean_velocity",
            OutputField::MeanPressure => "mean_pressure",
            OutputField::MeanTemperature => "mean_temperature",
        }
    }

    /// Components per node: 3 for vectors, 1 for scalars.
    pub fn components(self) -> usize {
        match self {
            OutputField::Velocity | OutputField::Vorticity | OutputField::MeanVelocity => 3,
            _ => 1,
        }
    }

    /// Whether the array is a time average.
    pub fn is_mean(self) -> bool {
        matches!(
            self,
            OutputField::MeanVelocity | OutputField::MeanPressure | OutputField::MeanTemperature
        )
    }

    /// The array named `name`, if there is one.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The names of every array, for messages: `density, velocity, …`.
    pub fn names() -> String {
        Self::ALL.map(Self::name).join(", ")
    }
}

impl fmt::Display for OutputField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a list of field names cannot be used.
pub(super) fn parse_list(names: &[String]) -> Result<Vec<OutputField>, String> {
    let mut fields = Vec::with_capacity(names.len());
    for name in names {
        let f = OutputField::parse(name).ok_or_else(|| {
            format!(
                "`{name}` is not an array the VTK files can hold (they can hold {})",
                OutputField::names()
            )
        })?;
        if fields.contains(&f) {
            return Err(format!("`{name}` is listed twice"));
        }
        fields.push(f);
    }
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_and_bad_lists_say_why() {
        for f in OutputField::ALL {
            assert_eq!(OutputField::parse(f.name()), Some(f));
        }
        let list = |n: &[&str]| parse_list(&n.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            list(&["q_criterion", "velocity"]).unwrap(),
            [OutputField::QCriterion, OutputField::Velocity]
        );
        let e = list(&["velocity", "vort"]).unwrap_err();
        assert!(e.contains("`vort`") && e.contains("q_criterion"), "{e}");
        assert!(list(&["speed", "speed"]).unwrap_err().contains("twice"));
        // Names are exact: the case file's spelling is the VTK file's.
        assert!(list(&["Velocity"]).is_err());
    }
}
