//! Checkpoints: the populations of the whole domain, the step and the case in one checksummed file,
//! written atomically, from which `thelma run --resume DIR` continues bit for bit (on any device
//! count: the populations are stored for the whole domain and cut into the new slabs on loading).
//!
//! File layout (`checkpoint.thelma`), all integers little-endian:
//! `THELMACP` · format version (u32) · header length (u64) · header (JSON, [`Header`]) ·
//! populations `[i][z][y][x]` of the whole domain in the run's precision, little-endian, stored as
//! the modules hold them (shifted by their weights, `g = f − w`) · CRC-32 (u32) of everything before
//! it. The header names the stencil, from which the population count follows.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use thelma_core::physics::{Stencil, D3Q19};
use thelma_core::Runtime;
use thelma_core::{CaseConfig, Precision};
use thelma_core::{Domain, SlabSpec};

/// The checkpoint's file name inside the output folder.
pub const FILE_NAME: &str = "checkpoint.thelma";

const MAGIC: &[u8; 8] = b"THELMACP";
/// Format 2: populations shifted by their weights and the stencil in the header. Format 1 held
/// unshifted populations and is refused, not misread.
const VERSION: u32 = 2;

/// The lattice a checkpoint holds (the flow lattice).
const STENCIL: Stencil = D3Q19;

/// What a checkpoint says about itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// The next step to run: the populations are those after `step` steps.
    pub step: u64,
    pub size: [usize; 3],
    pub precision: Precision,
    /// The stencil of the lattice held (`D3Q19`): its Q populations per node follow.
    pub stencil: String,
    /// Bytes of population data that follow the header.
    pub data_bytes: u64,
    /// The case that produced it; a resumed run keeps its domain, physics and numerics.
    pub case: CaseConfig,
}

/// A loaded checkpoint: its header and the whole domain's populations `[i][z][y][x]` (little-endian).
pub struct Checkpoint {
    pub header: Header,
    pub populations: Vec<u8>,
}

/// The checkpoint file named by `path`: the file itself, or [`FILE_NAME`] inside a folder.
pub fn resolve(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join(FILE_NAME)
    } else {
        path.to_path_buf()
    }
}

/// Bytes of the populations of a lattice of `size`, or `None` when a (damaged) header's size
/// overflows.
fn data_bytes(size: [usize; 3], precision: Precision) -> Option<u64> {
    [size[0], size[1], size[2], precision.bytes()]
        .iter()
        .try_fold(STENCIL.q() as u64, |acc, &n| acc.checked_mul(n as u64))
}

/// A writer that hashes what passes through it.
struct Hashing<'a> {
    inner: &'a mut dyn Write,
    crc: crc32fast::Hasher,
}

impl Write for Hashing<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes a checkpoint of `slabs` (each `[i][z][y][x]` of its own planes, in slab order, in the
/// machine's byte order) to `w`, reordering them into the whole domain's layout as it goes.
pub fn write_to(
    w: &mut dyn Write,
    case: &CaseConfig,
    step: u64,
    slabs: &[Vec<u8>],
) -> std::io::Result<()> {
    let precision = case.numerics.precision;
    let header = Header {
        step,
        size: case.domain.size,
        precision,
        stencil: STENCIL.name.to_string(),
        data_bytes: data_bytes(case.domain.size, precision).unwrap_or(u64::MAX),
        case: case.clone(),
    };
    let total: usize = slabs.iter().map(Vec::len).sum();
    if total as u64 != header.data_bytes || slabs.iter().any(|s| s.len() % STENCIL.q() != 0) {
        return Err(std::io::Error::other(format!(
            "populations of {total} bytes for a {:?} lattice of {} bytes",
            header.size, header.data_bytes
        )));
    }
    let json = serde_json::to_vec(&header).map_err(std::io::Error::other)?;
    let mut h = Hashing {
        inner: w,
        crc: crc32fast::Hasher::new(),
    };
    h.write_all(MAGIC)?;
    h.write_all(&VERSION.to_le_bytes())?;
    h.write_all(&(json.len() as u64).to_le_bytes())?;
    h.write_all(&json)?;
    let width = precision.bytes();
    let mut le = Vec::new();
    for i in 0..STENCIL.q() {
        for s in slabs {
            let per = s.len() / STENCIL.q();
            let part = &s[i * per..(i + 1) * per];
            if cfg!(target_endian = "little") {
                h.write_all(part)?;
            } else {
                le.clear();
                le.extend(
                    part.chunks_exact(width)
                        .flat_map(|v| v.iter().rev().copied()),
                );
                h.write_all(&le)?;
            }
        }
    }
    let crc = h.crc.finalize();
    h.inner.write_all(&crc.to_le_bytes())
}

/// Saves the runtime's current populations as `dir/checkpoint.thelma`, atomically: a failure or an
/// interruption at any point leaves the previous checkpoint as it was.
pub fn save(dir: &Path, case: &CaseConfig, rt: &mut Runtime) -> Result<()> {
    let slabs = rt.read_populations()?;
    let path = dir.join(FILE_NAME);
    thelma_results::write_atomic(&path, |w| write_to(w, case, rt.step(), &slabs))
        .with_context(|| format!("cannot write the checkpoint {}", path.display()))
}

fn read_header_from(r: &mut dyn Read) -> Result<(Header, Vec<u8>)> {
    let mut fixed = [0u8; 20];
    r.read_exact(&mut fixed)
        .context("too short to be a checkpoint")?;
    if &fixed[..8] != MAGIC {
        bail!("not a thelma checkpoint");
    }
    let version = u32::from_le_bytes(fixed[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        bail!(
            "checkpoint format {version}, this build reads format {VERSION}{}",
            if version == 1 {
                " (format 1 stored unshifted populations; rerun the case to make a new one)"
            } else {
                ""
            }
        );
    }
    let len = u64::from_le_bytes(fixed[12..20].try_into().expect("8 bytes"));
    if len > 1 << 24 {
        bail!("damaged: a header of {len} bytes");
    }
    let mut json = vec![0u8; len as usize];
    r.read_exact(&mut json)
        .context("damaged: the header is cut short")?;
    let header: Header =
        serde_json::from_slice(&json).map_err(|e| anyhow::anyhow!("damaged header: {e}"))?;
    if header.stencil != STENCIL.name {
        bail!(
            "the checkpoint holds a {} lattice, this build resumes {}",
            header.stencil,
            STENCIL.name
        );
    }
    if Some(header.data_bytes) != data_bytes(header.size, header.precision) {
        bail!(
            "damaged header: {} bytes of populations for a {:?} lattice",
            header.data_bytes,
            header.size
        );
    }
    let mut prefix = fixed.to_vec();
    prefix.extend_from_slice(&json);
    Ok((header, prefix))
}

/// Reads only the header (cheap): what case and step a checkpoint holds.
pub fn read_header(path: &Path) -> Result<Header> {
    let path = resolve(path);
    let mut f =
        std::fs::File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
    read_header_from(&mut f)
        .map(|(h, _)| h)
        .with_context(|| path.display().to_string())
}

/// Loads and verifies a checkpoint (its length and checksum).
pub fn load(path: &Path) -> Result<Checkpoint> {
    let path = resolve(path);
    let inner = || -> Result<Checkpoint> {
        let mut f = std::io::BufReader::new(std::fs::File::open(&path).context("cannot open")?);
        let (header, prefix) = read_header_from(&mut f)?;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&prefix);
        let mut populations = Vec::new();
        populations
            .try_reserve_exact(header.data_bytes as usize)
            .context("not enough memory to load it")?;
        (&mut f)
            .take(header.data_bytes)
            .read_to_end(&mut populations)?;
        if populations.len() as u64 != header.data_bytes {
            bail!(
                "damaged: {} of {} bytes of populations",
                populations.len(),
                header.data_bytes
            );
        }
        crc.update(&populations);
        let mut tail = Vec::new();
        f.read_to_end(&mut tail)?;
        if tail.len() != 4 {
            bail!("damaged: {} bytes where the checksum should be", tail.len());
        }
        let stored = u32::from_le_bytes(tail[..4].try_into().expect("4 bytes"));
        if stored != crc.finalize() {
            bail!("damaged: checksum mismatch");
        }
        if cfg!(target_endian = "big") {
            let w = header.precision.bytes();
            for v in populations.chunks_exact_mut(w) {
                v.reverse();
            }
        }
        Ok(Checkpoint {
            header,
            populations,
        })
    };
    inner().with_context(|| path.display().to_string())
}

impl Checkpoint {
    /// The populations cut into `slabs` (any partition of the checkpoint's domain), each
    /// `[i][z][y][x]` of its own planes, as [`Runtime::write_populations`] takes them.
    pub fn slabs(&self, slabs: &[SlabSpec]) -> Vec<Vec<u8>> {
        let d = Domain::new(self.header.size, [false; 3]);
        let b = self.header.precision.bytes();
        let (n, plane) = (d.nodes(), d.plane());
        slabs
            .iter()
            .map(|s| {
                let mut out = Vec::with_capacity(STENCIL.q() * s.nodes() * b);
                for i in 0..STENCIL.q() {
                    let from = (i * n + s.z.start * plane) * b;
                    let to = (i * n + s.z.end * plane) * b;
                    out.extend_from_slice(&self.populations[from..to]);
                }
                out
            })
            .collect()
    }

    /// Loads the populations into `rt` (whatever its device count) and sets its step.
    pub fn restore(&self, rt: &mut Runtime) -> Result<()> {
        let slabs: Vec<SlabSpec> = rt.devices().iter().map(|d| d.slab.clone()).collect();
        rt.write_populations(self.slabs(&slabs), self.header.step)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case() -> CaseConfig {
        let mut c = CaseConfig::default();
        c.domain.size = [3, 2, 4];
        // Awkward floats must come back bit for bit: the resumed run derives ω from them.
        c.physics.reynolds = 1e4 / 7.0;
        c.physics.lid_speed = 0.1 + 1e-17;
        c
    }

    /// Populations of a [3, 2, 4] lattice split into slabs of 1 and 3 planes.
    fn slabs(seed: f32) -> (Vec<f32>, Vec<Vec<u8>>) {
        let n = 3 * 2 * 4;
        let whole: Vec<f32> = (0..STENCIL.q() * n)
            .map(|k| seed + k as f32 * 0.25)
            .collect();
        let cut = |z0: usize, z1: usize| -> Vec<u8> {
            (0..STENCIL.q())
                .flat_map(|i| whole[i * n + z0 * 6..i * n + z1 * 6].to_vec())
                .flat_map(f32::to_ne_bytes)
                .collect()
        };
        (whole.clone(), vec![cut(0, 1), cut(1, 4)])
    }

    #[test]
    fn a_checkpoint_round_trips_and_repartitions() {
        let dir = tempfile::tempdir().unwrap();
        let c = case();
        let (whole, parts) = slabs(1.0);
        let path = dir.path().join(FILE_NAME);
        thelma_results::write_atomic(&path, |w| write_to(w, &c, 77, &parts)).unwrap();
        let ck = load(dir.path()).unwrap();
        assert_eq!(ck.header.step, 77);
        assert_eq!(ck.header.case, c);
        assert_eq!(read_header(&path).unwrap(), ck.header);
        let whole_bytes: Vec<u8> = whole.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(ck.populations, whole_bytes);
        // Cut into three slabs of 2, 1, 1 planes: each gets exactly its planes of every population.
        let d = Domain::new(c.domain.size, [false; 3]);
        let specs = SlabSpec::split(d, 3).unwrap();
        let again = ck.slabs(&specs);
        for (s, bytes) in specs.iter().zip(&again) {
            let vals: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
                .collect();
            let per = s.nodes();
            for i in 0..STENCIL.q() {
                assert_eq!(
                    &vals[i * per..(i + 1) * per],
                    &whole[i * 24 + s.z.start * 6..i * 24 + s.z.end * 6]
                );
            }
        }
    }

    #[test]
    fn damage_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let (_, parts) = slabs(1.0);
        thelma_results::write_atomic(&path, |w| write_to(w, &case(), 5, &parts)).unwrap();
        let good = std::fs::read(&path).unwrap();
        // One flipped bit in the populations, a cut-off tail, a foreign file.
        let mut flipped = good.clone();
        let k = flipped.len() - 40;
        flipped[k] ^= 0x10;
        let cut = good[..good.len() - 100].to_vec();
        for (bad, what) in [
            (flipped, "checksum"),
            (cut, "damaged"),
            (b"P6 3 2 255\n".repeat(4), "not a thelma checkpoint"),
        ] {
            std::fs::write(&path, bad).unwrap();
            let e = format!("{:#}", load(&path).err().expect("damage must be detected"));
            assert!(e.contains(what), "{e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    /// A writer that fails after `left` bytes, as a full disk or a killed process would.
    struct FailAfter<'a> {
        inner: &'a mut dyn Write,
        left: usize,
    }
    impl Write for FailAfter<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.left == 0 {
                return Err(std::io::Error::other("no space left on device"));
            }
            let n = buf.len().min(self.left);
            self.left -= n;
            self.inner.write(&buf[..n])
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.inner.flush()
        }
    }

    #[test]
    fn a_checkpoint_whose_write_fails_midway_leaves_the_previous_one_loadable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let (first, parts) = slabs(1.0);
        thelma_results::write_atomic(&path, |w| write_to(w, &case(), 10, &parts)).unwrap();
        let (_, newer) = slabs(2.0);
        let err = thelma_results::write_atomic(&path, |w| {
            write_to(
                &mut FailAfter {
                    inner: w,
                    left: 1000,
                },
                &case(),
                20,
                &newer,
            )
        });
        assert!(err.is_err());
        let ck = load(&path).unwrap();
        assert_eq!(ck.header.step, 10);
        let vals: Vec<f32> = ck
            .populations
            .chunks_exact(4)
            .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(vals, first);
        // Nothing else is left in the folder.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
