//! Checkpoints: the populations of the whole domain, the step and the case in one checksummed file,
//! written atomically, from which `thelma run --resume DIR` continues bit for bit (on any device
//! count: the populations are stored for the whole domain and cut into the new slabs on loading).
//!
//! File layout (`checkpoint.thelma`), all integers little-endian:
//! `THELMACP` · format version (u32) · header length (u64) · header (JSON, [`Header`]) ·
//! populations `[i][z][y][x]` of the whole domain in the run's precision, little-endian, stored as
//! the modules hold them (shifted by their weights, `g = f − w`) · CRC-32 (u32) of everything before
//! it. The header names the case's lattices, from which the population count Q follows: `D3Q19`
//! for the flow alone (Q = 19), `D3Q19+D3Q7` for the flow and its temperature lattice (Q = 26, the
//! flow's 19 populations then the temperature's 7, as the modules read and write them). A run with
//! time averages (`output.average_from`) that has sampled some appends their running sums after the
//! populations, before the checksum: per field (ρ, u_x, u_y, u_z, and θ with `[thermal]`)
//! `[z][y][x]` of the whole domain in f64, the header giving their sample count (`means`), so that
//! a resumed run continues its averages bit for bit.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use thelma_core::physics::{D3Q19, D3Q7};
use thelma_core::Runtime;
use thelma_core::SlabSpec;
use thelma_core::{CaseConfig, MeanSums, Precision};

/// The checkpoint's file name inside the output folder.
pub const FILE_NAME: &str = "checkpoint.thelma";

const MAGIC: &[u8; 8] = b"THELMACP";
/// Format 3: format 2 (populations shifted by their weights, the stencil in the header) with the
/// time averages' sums after the populations where the header counts some; a format 2 file has
/// none and reads as one of format 3 without them. Format 1 held unshifted populations and is
/// refused, not misread.
/// Format 4: format 3 with the walls' velocities in the header where a live view steered them
/// (`walls`); a format 3 file has none. Written as 4 so that a build of format 3, which would
/// ignore them, refuses the file instead of resuming with the case's walls.
/// Format 5: format 4 with the held temperatures where a live view steered them (`held`), for
/// the same reason.
const VERSION: u32 = 5;

/// What a live view changed of the case, which every checkpoint after the change keeps and a
/// resumed run restores before its first step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Steered {
    /// The walls' velocities of every wall-velocity slot, lattice units.
    pub walls: Option<Vec<[f64; 3]>>,
    /// The temperature lattice's held θ table (`ThermalSetup::held_table`), lattice units.
    pub held: Option<Vec<f64>>,
}

impl Steered {
    /// Whether anything was steered away from the case.
    pub fn any(&self) -> bool {
        self.walls.is_some() || self.held.is_some()
    }
}

/// The lattices of `case`, as the header names them (`D3Q19`, `D3Q19+D3Q7` with `[thermal]`), and
/// the populations per node they hold together.
fn lattices(case: &CaseConfig) -> (String, usize) {
    let mut name = D3Q19.name.to_string();
    let mut q = D3Q19.q();
    if case.thermal.is_some() {
        name = format!("{name}+{}", D3Q7.name);
        q += D3Q7.q();
    }
    (name, q)
}

/// What a checkpoint's lattices are, for a message.
fn describe(stencil: &str) -> String {
    if stencil == D3Q19.name {
        format!("{stencil} (the flow alone)")
    } else {
        format!("{stencil} (the flow and its [thermal] temperature)")
    }
}

/// What a checkpoint says about itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// The next step to run: the populations are those after `step` steps.
    pub step: u64,
    pub size: [usize; 3],
    pub precision: Precision,
    /// The lattices held, `+` between them (`D3Q19`, or `D3Q19+D3Q7` for a case with `[thermal]`):
    /// their Q populations per node follow, the flow's first.
    pub stencil: String,
    /// Bytes of population data that follow the header.
    pub data_bytes: u64,
    /// The case that produced it; a resumed run keeps its domain, physics and numerics.
    pub case: CaseConfig,
    /// The states the time averages' sums after the populations hold; absent: no sums follow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub means: Option<u64>,
    /// The walls' velocities of every wall-velocity slot (lattice units) where the live view
    /// steered them away from the case's; a resumed run moves them so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub walls: Option<Vec<[f64; 3]>>,
    /// The held θ table (lattice units) where the live view steered a temperature; a resumed run
    /// holds them so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<Vec<f64>>,
    /// The power of two the temperature lattice's populations are stored multiplied by
    /// (`ThermalSetup::store_scale`, fixed by the case's temperatures in 16-bit storage, 1
    /// otherwise), written with every temperature lattice; a resumed run must store them so.
    /// Absent: no temperature lattice, or a file written before it was recorded (at its case's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_scale: Option<f64>,
}

impl Header {
    /// What the live view had changed when it was written.
    pub fn steered(&self) -> Steered {
        Steered {
            walls: self.walls.clone(),
            held: self.held.clone(),
        }
    }
}

/// The store scale of `case`'s temperature lattice (`ThermalSetup::store_scale`); `None` without
/// `[thermal]` or for a case that does not validate (validates it: for a resume, not every write).
pub fn store_scale(case: &CaseConfig) -> Option<f64> {
    case.thermal.as_ref()?;
    let lattice = case.validate().ok()?;
    case.thermal_setup(&lattice).map(|s| s.store_scale)
}

/// Fields of the time averages' sums for `case`: ρ, u_x, u_y, u_z, and θ with `[thermal]`.
fn mean_fields(case: &CaseConfig) -> usize {
    4 + usize::from(case.thermal.is_some())
}

/// Bytes of the time averages' sums after the populations.
fn mean_bytes(h: &Header) -> u64 {
    h.means.map_or(0, |_| {
        (mean_fields(&h.case) * h.size.iter().product::<usize>() * 8) as u64
    })
}

/// A loaded checkpoint: its header and the whole domain's populations `[i][z][y][x]` (little-endian).
pub struct Checkpoint {
    pub header: Header,
    pub populations: Vec<u8>,
    /// The time averages' sums of the whole domain, `[field][z][y][x]`, when it holds some.
    pub means: Vec<f64>,
}

/// The checkpoint file named by `path`: the file itself, or [`FILE_NAME`] inside a folder.
pub fn resolve(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join(FILE_NAME)
    } else {
        path.to_path_buf()
    }
}

/// Bytes of `q` populations per node on a lattice of `size`, or `None` when a (damaged) header's
/// size overflows.
fn data_bytes(size: [usize; 3], precision: Precision, q: usize) -> Option<u64> {
    [size[0], size[1], size[2], precision.bytes()]
        .iter()
        .try_fold(q as u64, |acc, &n| acc.checked_mul(n as u64))
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

/// Writes a checkpoint of `slabs` (each `[i][z][y][x]` of its own planes for the Q populations of
/// `case`'s lattices, in slab order, in the machine's byte order) to `w`, reordering them into the
/// whole domain's layout as it goes.
/// `store_scale`: the run's temperature lattice's (`ThermalSetup::store_scale`), `None` without one.
pub fn write_to(
    w: &mut dyn Write,
    case: &CaseConfig,
    step: u64,
    slabs: &[Vec<u8>],
    means: &[MeanSums],
    steered: &Steered,
    store_scale: Option<f64>,
) -> std::io::Result<()> {
    let means = if means.first().is_some_and(|m| m.samples > 0) {
        means
    } else {
        &[]
    };
    let precision = case.numerics.precision;
    let (stencil, q) = lattices(case);
    let header = Header {
        step,
        size: case.domain.size,
        precision,
        data_bytes: data_bytes(case.domain.size, precision, q).unwrap_or(u64::MAX),
        stencil,
        case: case.clone(),
        means: means.first().map(|m| m.samples),
        walls: steered.walls.clone(),
        held: steered.held.clone(),
        store_scale,
    };
    let total: usize = slabs.iter().map(Vec::len).sum();
    if total as u64 != header.data_bytes || slabs.iter().any(|s| s.len() % q != 0) {
        return Err(std::io::Error::other(format!(
            "populations of {total} bytes for a {:?} {} lattice of {} bytes",
            header.size, header.stencil, header.data_bytes
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
    for i in 0..q {
        for s in slabs {
            let per = s.len() / q;
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
    let fields = if means.is_empty() {
        0
    } else {
        mean_fields(case)
    };
    for field in 0..fields {
        for m in means {
            let s = &m.sums;
            let v = [&s.rho, &s.ux, &s.uy, &s.uz, &s.temperature][field];
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            h.write_all(&bytes)?;
        }
    }
    let crc = h.crc.finalize();
    h.inner.write_all(&crc.to_le_bytes())
}

/// Saves the runtime's current populations as `dir/checkpoint.thelma`, atomically: a failure or an
/// interruption at any point leaves the previous checkpoint as it was.
/// Saves the runtime's state at its step into `dir`, with what the live view steered and the
/// temperature lattice's store scale (`None` without one).
pub fn save(
    dir: &Path,
    case: &CaseConfig,
    rt: &mut Runtime,
    steered: &Steered,
    store_scale: Option<f64>,
) -> Result<()> {
    let mut slabs = rt.read_populations()?;
    let mut means = if case.output.average_from.is_some() {
        rt.slab_mean_sums()?
    } else {
        Vec::new()
    };
    if rt.devices().iter().any(|d| d.slab.cuts_x_or_y()) {
        // The file holds whole planes in z order: a grid's parts are joined first.
        let (q, b) = (lattices(case).1, case.numerics.precision.bytes());
        let n: usize = case.domain.size.iter().product();
        let mut whole = vec![0; q * n * b];
        for (d, part) in rt.devices().iter().zip(&slabs) {
            d.slab.paste(part, &mut whole, q, b);
        }
        slabs = vec![whole];
        if !means.is_empty() {
            means = vec![MeanSums::concat(means)];
        }
    }
    let path = dir.join(FILE_NAME);
    thelma_results::write_atomic(&path, |w| {
        write_to(w, case, rt.step(), &slabs, &means, steered, store_scale)
    })
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
    if !(2..=VERSION).contains(&version) {
        bail!(
            "checkpoint format {version}, this build reads formats 2 to {VERSION}{}",
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
    // The lattices follow from the case the header holds; a name that is not theirs is a lattice
    // this build does not know (or a damaged header), never populations to cut by a guessed Q.
    let (stencil, q) = lattices(&header.case);
    if header.stencil != stencil {
        bail!(
            "the checkpoint holds {} lattices, where its case runs {stencil}",
            header.stencil
        );
    }
    if Some(header.data_bytes) != data_bytes(header.size, header.precision, q) {
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

impl Header {
    /// Populations per node: 19 for the flow, 26 with its temperature lattice.
    fn q(&self) -> usize {
        lattices(&self.case).1
    }

    /// Refuses to resume `case` from this checkpoint when their lattices differ (the flow alone
    /// against the flow and its temperature): the populations held are not the ones it runs.
    pub fn check_lattices(&self, case: &CaseConfig) -> Result<()> {
        let (wanted, _) = lattices(case);
        if self.stencil != wanted {
            bail!(
                "the checkpoint holds the lattices {}, the case runs {}: resume a checkpoint of the same case",
                describe(&self.stencil),
                describe(&wanted)
            );
        }
        Ok(())
    }
}

impl Header {
    /// Refuses to resume `case` when its temperature lattice is stored under another scale than
    /// the checkpoint's populations (16-bit storage scales them by a power of two that the case's
    /// temperatures fix): read under another, every one would be off by their ratio.
    pub fn check_store_scale(&self, case: &CaseConfig) -> Result<()> {
        let Some(written) = self.store_scale else {
            // No temperature lattice, or written at its case's scale before scales were recorded.
            return Ok(());
        };
        let wanted = store_scale(case).unwrap_or(1.0);
        if written != wanted {
            bail!(
                "the checkpoint stores the temperature lattice scaled by {written}, the case's \
                 temperatures call for {wanted} (in {} the scale follows the largest |T − t0| of \
                 the held faces, patches and start): resume with the temperatures it was written with",
                case.numerics.precision.name()
            );
        }
        Ok(())
    }
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
        let want = mean_bytes(&header);
        let mut raw = Vec::new();
        raw.try_reserve_exact(want as usize)
            .context("not enough memory to load it")?;
        (&mut f).take(want).read_to_end(&mut raw)?;
        if raw.len() as u64 != want {
            bail!(
                "damaged: {} of {want} bytes of time-average sums",
                raw.len()
            );
        }
        crc.update(&raw);
        let means = raw
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect();
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
            means,
        })
    };
    inner().with_context(|| path.display().to_string())
}

impl Checkpoint {
    /// The populations cut into `slabs` (any partition of the checkpoint's domain), each
    /// `[i][z][y][x]` of its own planes, as [`Runtime::write_populations`] takes them.
    pub fn slabs(&self, slabs: &[SlabSpec]) -> Vec<Vec<u8>> {
        let (b, q) = (self.header.precision.bytes(), self.header.q());
        slabs
            .iter()
            .map(|s| s.cut(&self.populations, q, b))
            .collect()
    }

    /// Loads the populations into `rt` (whatever its device count) and sets its step, and the
    /// time averages' sums where it holds some.
    pub fn restore(&self, rt: &mut Runtime) -> Result<()> {
        let slabs: Vec<SlabSpec> = rt.devices().iter().map(|d| d.slab.clone()).collect();
        rt.write_populations(self.slabs(&slabs), self.header.step)?;
        if let Some(walls) = &self.header.walls {
            rt.set_wall_velocities(walls)?;
        }
        if let Some(held) = &self.header.held {
            rt.set_held_temperatures(held)?;
        }
        let Some(samples) = self.header.means else {
            return Ok(());
        };
        let n: usize = self.header.size.iter().product();
        let mut sums = rt.slab_mean_sums()?;
        for (m, slab) in sums.iter_mut().zip(&slabs) {
            let s = &mut m.sums;
            let fields = [
                &mut s.rho,
                &mut s.ux,
                &mut s.uy,
                &mut s.uz,
                &mut s.temperature,
            ];
            for (k, v) in fields.into_iter().enumerate() {
                if !v.is_empty() {
                    v.copy_from_slice(&slab.cut(&self.means[k * n..(k + 1) * n], 1, 1));
                }
            }
            m.samples = samples;
        }
        rt.write_mean_sums(sums)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use thelma_core::Domain;

    fn case() -> CaseConfig {
        let mut c = CaseConfig::default();
        c.domain.size = [3, 2, 4];
        // Awkward floats must come back bit for bit: the resumed run derives ω from them.
        c.physics.reynolds = 1e4 / 7.0;
        c.physics.lid_speed = 0.1 + 1e-17;
        c
    }

    /// The same case with a temperature lattice.
    fn thermal_case() -> CaseConfig {
        let mut c = case();
        c.thermal = Some(thelma_core::ThermalConfig {
            prandtl: Some(0.71),
            beta: 1e-3 / 3.0,
            gravity: [0.0, 0.0, -1e-3],
            ..Default::default()
        });
        c
    }

    /// The flow's populations per node, and those of the flow with its temperature.
    const FLOW: usize = 19;
    const THERMAL: usize = 26;

    /// `q` populations per node of a [3, 2, 4] lattice split into slabs of 1 and 3 planes.
    fn slabs(q: usize, seed: f32) -> (Vec<f32>, Vec<Vec<u8>>) {
        let n = 3 * 2 * 4;
        let whole: Vec<f32> = (0..q * n).map(|k| seed + k as f32 * 0.25).collect();
        let cut = |z0: usize, z1: usize| -> Vec<u8> {
            (0..q)
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
        let (whole, parts) = slabs(FLOW, 1.0);
        let path = dir.path().join(FILE_NAME);
        thelma_results::write_atomic(&path, |w| {
            write_to(w, &c, 77, &parts, &[], &Steered::default(), None)
        })
        .unwrap();
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
            for i in 0..FLOW {
                assert_eq!(
                    &vals[i * per..(i + 1) * per],
                    &whole[i * 24 + s.z.start * 6..i * 24 + s.z.end * 6]
                );
            }
        }
    }

    /// A case whose temperatures reach |θ| = 5 in f16 stores its temperature populations scaled by
    /// 2⁻⁵; the header records it (and nothing in f32), and a case whose temperatures call for
    /// another scale is refused, naming both.
    #[test]
    fn the_store_scale_is_recorded_and_a_case_of_another_is_refused() {
        let held = |t: f64| {
            let mut c = thermal_case();
            // A cavity with walled edges of 4 nodes at least, which validates.
            c.domain.size = [4, 4, 4];
            c.run.steps = Some(10);
            c.numerics.precision = Precision::F16;
            c.boundary.push(thelma_core::BoundaryConfig {
                temperature: Some(t),
                ..thelma_core::BoundaryConfig::new(
                    thelma_core::Face::XMinus,
                    thelma_core::BoundaryKind::Wall,
                )
            });
            c
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let c = held(5.0);
        c.validate().unwrap();
        let parts = [vec![0u8; 2 * THERMAL * 64]];
        thelma_results::write_atomic(&path, |w| {
            write_to(w, &c, 3, &parts, &[], &Steered::default(), store_scale(&c))
        })
        .unwrap();
        let h = read_header(&path).unwrap();
        assert_eq!(h.store_scale, Some(1.0 / 32.0));
        h.check_store_scale(&c).unwrap();
        // |θ| = 7 keeps 2⁻⁵; 9 calls for 2⁻⁶.
        h.check_store_scale(&held(7.0)).unwrap();
        let e = h.check_store_scale(&held(9.0)).unwrap_err().to_string();
        assert!(
            e.starts_with("the checkpoint stores the temperature lattice scaled by 0.03125, the case's temperatures call for 0.015625"),
            "{e}"
        );
        let mut f32_case = c.clone();
        f32_case.numerics.precision = Precision::F32;
        assert_eq!(store_scale(&f32_case), Some(1.0));
        let parts = [vec![0u8; 4 * THERMAL * 64]];
        thelma_results::write_atomic(&path, |w| {
            write_to(w, &f32_case, 3, &parts, &[], &Steered::default(), Some(1.0))
        })
        .unwrap();
        let mut h = read_header(&path).unwrap();
        assert_eq!(h.store_scale, Some(1.0));
        h.check_store_scale(&f32_case).unwrap();
        assert!(h.check_store_scale(&c).is_err());
        // A file from before the scale was recorded was written at its case's: accepted.
        h.store_scale = None;
        h.check_store_scale(&c).unwrap();
    }

    /// A thermal case's 26 populations per node (the flow's 19, then the temperature's 7) come back
    /// bit for bit, cut into another partition: bit patterns no arithmetic produces included
    /// (NaNs with payloads, signed zeros, subnormals), since the file only moves bytes.
    #[test]
    fn a_thermal_checkpoint_round_trips_its_26_populations_onto_other_slabs() {
        let dir = tempfile::tempdir().unwrap();
        let c = thermal_case();
        let n = 3 * 2 * 4;
        let mut bits = 0x9e37_79b9u32;
        let mut whole: Vec<u32> = (0..THERMAL * n)
            .map(|_| {
                bits ^= bits << 13;
                bits ^= bits >> 17;
                bits ^= bits << 5;
                bits
            })
            .collect();
        // −0, a NaN with a payload and the least subnormal, in the flow's and the temperature's.
        for (k, v) in [
            (0, 0x8000_0000),
            (FLOW * n + 5, 0x7fc0_1234),
            (THERMAL * n - 1, 1),
        ] {
            whole[k] = v;
        }
        let cut = |z0: usize, z1: usize| -> Vec<u8> {
            (0..THERMAL)
                .flat_map(|i| whole[i * n + z0 * 6..i * n + z1 * 6].to_vec())
                .flat_map(u32::to_ne_bytes)
                .collect()
        };
        let path = dir.path().join(FILE_NAME);
        let parts = [cut(0, 3), cut(3, 4)];
        thelma_results::write_atomic(&path, |w| {
            write_to(w, &c, 12, &parts, &[], &Steered::default(), store_scale(&c))
        })
        .unwrap();
        let ck = load(&path).unwrap();
        assert_eq!(ck.header.stencil, "D3Q19+D3Q7");
        assert_eq!(ck.header.data_bytes, (THERMAL * n * 4) as u64);
        assert_eq!(ck.header.case, c);
        let whole_le: Vec<u8> = whole.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(ck.populations, whole_le);
        ck.header.check_lattices(&c).unwrap();
        // Slabs of 2, 1 and 1 planes and of 4: each is exactly what the modules would hand over.
        let d = Domain::new(c.domain.size, [false; 3]);
        for k in [3, 1] {
            let specs = SlabSpec::split(d, k).unwrap();
            let again = ck.slabs(&specs);
            for (s, bytes) in specs.iter().zip(&again) {
                assert_eq!(*bytes, cut(s.z.start, s.z.end), "{k} slabs, {:?}", s.z);
            }
        }
        // Flow-sized slabs do not make a thermal checkpoint.
        let (_, flow) = slabs(FLOW, 1.0);
        let e = write_to(
            &mut Vec::new(),
            &c,
            12,
            &flow,
            &[],
            &Steered::default(),
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("D3Q19+D3Q7"), "{e}");
    }

    /// A flow-only checkpoint does not resume a case with [thermal], nor the reverse, and says why
    /// on one line; an old header naming `D3Q19` still loads for the flow.
    #[test]
    fn a_checkpoint_of_other_lattices_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (flow, thermal) = (dir.path().join("flow"), dir.path().join("thermal"));
        let (_, parts) = slabs(FLOW, 1.0);
        thelma_results::write_atomic(&flow, |w| {
            write_to(w, &case(), 3, &parts, &[], &Steered::default(), None)
        })
        .unwrap();
        let (_, parts) = slabs(THERMAL, 1.0);
        thelma_results::write_atomic(&thermal, |w| {
            write_to(
                w,
                &thermal_case(),
                3,
                &parts,
                &[],
                &Steered::default(),
                Some(1.0),
            )
        })
        .unwrap();
        let flow = read_header(&flow).unwrap();
        let thermal = read_header(&thermal).unwrap();
        assert_eq!(flow.stencil, "D3Q19");
        flow.check_lattices(&case()).unwrap();
        for (h, c, holds) in [
            (&flow, thermal_case(), "D3Q19 (the flow alone)"),
            (&thermal, case(), "D3Q19+D3Q7 (the flow and its [thermal]"),
        ] {
            let e = format!("{:#}", h.check_lattices(&c).unwrap_err());
            assert!(e.contains(&format!("holds the lattices {holds}")), "{e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    #[test]
    fn damage_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let (_, parts) = slabs(FLOW, 1.0);
        thelma_results::write_atomic(&path, |w| {
            write_to(w, &case(), 5, &parts, &[], &Steered::default(), None)
        })
        .unwrap();
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
        let (first, parts) = slabs(FLOW, 1.0);
        thelma_results::write_atomic(&path, |w| {
            write_to(w, &case(), 10, &parts, &[], &Steered::default(), None)
        })
        .unwrap();
        let (_, newer) = slabs(FLOW, 2.0);
        let err = thelma_results::write_atomic(&path, |w| {
            write_to(
                &mut FailAfter {
                    inner: w,
                    left: 1000,
                },
                &case(),
                20,
                &newer,
                &[],
                &Steered::default(),
                None,
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
