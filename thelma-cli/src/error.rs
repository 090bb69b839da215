//! The one error the application gives a meaning of its own: bad input, which exits with status 2
//! and one line naming the option or key at fault.

use std::fmt;

/// A bad input: the program exits with status 2 and this one line.
#[derive(Debug)]
pub struct UsageError {
    pub flag: String,
    pub message: String,
}

impl UsageError {
    pub fn new(flag: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            flag: flag.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.flag, self.message)
    }
}
impl std::error::Error for UsageError {}
