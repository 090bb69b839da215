//! Atomic output files: every file thelma writes goes through [`write_atomic`], so a crash or an
//! interruption never leaves a half-written file under its final name (the previous one stays intact).

use std::io::{BufWriter, Write};
use std::path::Path;

/// Writes `path` atomically: the content goes to a temporary file in the same folder, is flushed to
/// disk, and is then renamed over `path`.
pub fn write_atomic(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    write_atomic_with(path, |file, _| {
        let mut w = BufWriter::new(file);
        fill(&mut w)?;
        w.flush()
    })
}

/// [`write_atomic`] for writers that place their bytes themselves: `fill` gets the temporary file
/// and its path (which other writers may open to write their parts at their offsets), and what
/// it wrote is flushed to disk and renamed over `path` once it returns.
pub fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&std::fs::File, &Path) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut builder = tempfile::Builder::new();
    builder.prefix(".thelma-").suffix(".tmp");
    // Temporary files are private (0600) by default; an output file gets the usual mode (0666 less
    // the umask), as if it had been created directly.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let tmp = builder.tempfile_in(dir)?;
    fill(tmp.as_file(), tmp.path())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    // The rename itself reaches the disk only with the folder's metadata; without this a power cut
    // could bring back the previous file (never a torn one). Best effort: not every system can.
    #[cfg(unix)]
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// [`write_atomic`] of a byte string.
pub fn write_bytes_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic(path, |w| w.write_all(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupted_write_leaves_the_previous_file_intact() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("report.json");
        write_bytes_atomic(&p, b"first").unwrap();
        let err = write_atomic(&p, |w| {
            w.write_all(b"half of the seco")?;
            Err(std::io::Error::other("interrupted midway"))
        });
        assert!(err.is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"first");
        // No temporary file is left behind either.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        write_bytes_atomic(&p, b"second").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second");
    }

    #[cfg(unix)]
    #[test]
    fn outputs_are_readable_by_others_like_any_created_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("profiles.csv");
        write_bytes_atomic(&p, b"x").unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o044, 0o044 & !umask(), "mode {mode:o}");
    }

    /// The process's umask, read from /proc (the only way that does not change it).
    #[cfg(unix)]
    fn umask() -> u32 {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                let l = s.lines().find(|l| l.starts_with("Umask:"))?.to_string();
                u32::from_str_radix(l.split_whitespace().nth(1)?, 8).ok()
            })
            .unwrap_or(0o022)
    }
}
