//! What a case can get wrong: a value ([`ConfigError`], naming its key and flag) or the file itself
//! ([`CaseFileError`], with the line and column).

use std::path::PathBuf;

/// A configuration value that cannot be used, with the key and the command-line flag that set it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{flag}: {message}")]
pub struct ConfigError {
    /// Dotted key in the case file (`physics.reynolds`).
    pub key: &'static str,
    /// The command-line flag (`--re`).
    pub flag: &'static str,
    pub message: String,
}

pub(super) fn bad(
    key: &'static str,
    flag: &'static str,
    message: impl Into<String>,
) -> ConfigError {
    ConfigError {
        key,
        flag,
        message: escape_controls(message.into()),
    }
}

/// `message` with its control characters escaped (`\n` for a line break): a message may quote a
/// case's text, and a string in the case may hold a line break (TOML's `"\n"`), which must not
/// split the one-line message.
fn escape_controls(message: String) -> String {
    if !message.chars().any(char::is_control) {
        return message;
    }
    message
        .chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A case file that cannot be read as a case.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CaseFileError {
    #[error("cannot read case file {}: {message}", path.display())]
    Read { path: PathBuf, message: String },
    #[error("{}: line {line}, column {column}: the file is not UTF-8 text", path.display())]
    NotUtf8 {
        path: PathBuf,
        line: usize,
        column: usize,
    },
    #[error("{}: {error}", path.display())]
    Syntax { path: PathBuf, error: SyntaxError },
}

/// Case text that is not valid TOML or JSON, or does not fit the case's shape: one line, with the
/// line and column (in characters) where it went wrong when the parser knows it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{message}", at.map(|(l, c)| format!("line {l}, column {c}: ")).unwrap_or_default())]
pub struct SyntaxError {
    /// Line and column, both from 1.
    pub at: Option<(usize, usize)>,
    pub message: String,
}

impl SyntaxError {
    pub(super) fn json(e: &serde_json::Error) -> Self {
        // serde_json appends " at line L column C"; say it once, in front.
        let msg = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let msg = msg.strip_suffix(&suffix).unwrap_or(&msg);
        Self {
            at: Some((e.line(), e.column())),
            message: one_line(msg),
        }
    }

    pub(super) fn toml(text: &str, e: &toml::de::Error) -> Self {
        Self {
            at: e.span().map(|s| line_column(text, s.start)),
            message: one_line(e.message()),
        }
    }
}

/// Line and column (both from 1, the column in characters) of byte offset `at` in `text`; an offset
/// inside a character counts as that character.
pub(super) fn line_column(text: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let col = before[before.rfind('\n').map_or(0, |p| p + 1)..]
        .chars()
        .count()
        + 1;
    (line, col)
}

/// A message on one line: parser messages may quote the offending text, newlines included. Rust's
/// type names, which serde puts in its messages, are said in words a case file's author knows.
fn one_line(s: &str) -> String {
    let mut s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    for (rust, plain) in [
        ("expected usize", "expected a whole number >= 0"),
        ("expected u64", "expected a whole number >= 0"),
        ("expected u32", "expected a whole number >= 0"),
        ("expected i64", "expected a whole number"),
        ("expected f64", "expected a number"),
        ("expected a sequence", "expected a list"),
        ("expected an array of length 2", "expected a list of 2"),
        ("expected an array of length 3", "expected a list of 3"),
    ] {
        s = s.replace(rust, plain);
    }
    s
}
