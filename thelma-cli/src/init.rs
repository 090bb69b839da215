//! `thelma init [FILE]`: writes a commented starting case (the default case with every key), so
//! that a first run does not begin with reading the documentation for key names.

use std::io::Write;
use std::path::Path;

use anyhow::Result;

use crate::error::UsageError;

/// The default case, every key with a comment: the same text as `examples/cavity.toml`, which a
/// test parses so that the template never drifts from the configuration it documents.
pub const TEMPLATE: &str = include_str!("../../examples/cavity.toml");

/// The case text `init` writes to `path`: the template, naming the file it is in.
pub fn case_text(path: &Path) -> String {
    TEMPLATE.replace("examples/cavity.toml", &path.display().to_string())
}

/// Writes the starting case to `path`; an existing file is never overwritten.
pub fn write(path: &Path) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| {
            let why = if e.kind() == std::io::ErrorKind::AlreadyExists {
                "already exists; not overwritten (remove it or name another file)".to_string()
            } else {
                format!("cannot create it: {e}")
            };
            UsageError::new(path.display().to_string(), why)
        })?;
    f.write_all(case_text(path).as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use thelma_core::CaseConfig;

    #[test]
    fn the_template_is_the_default_case() {
        let c = CaseConfig::parse(&case_text(Path::new("case.toml")), false).unwrap();
        assert_eq!(c, CaseConfig::default());
        assert!(case_text(Path::new("my.toml")).contains("--config my.toml"));
    }
}
