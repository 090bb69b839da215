//! Checkpoints: the populations of the whole domain, the step and the case in one checksummed file,
//! written atomically, from which `thelma run --resume DIR` continues bit for bit (on any device
//! count and layout: the file names the box of each block it holds, and loading cuts the domain
//! into the new slabs or subdomains).
//!
//! File layout (`checkpoint.thelma`, format 6), all integers little-endian:
//! `THELMACP` · format version (u32) · length D of the blocks (u64) · the blocks (D bytes) · header
//! length (u64) · header (JSON, [`Header`], naming each block's box in `blocks`) · CRC-32 (u32) of
//! everything before it. Each block is one slab's or subdomain's: its populations `[i][z][y][x]`
//! of its own box in the run's precision, stored as the modules hold them (shifted by their
//! weights, `g = f − w`), then, in a run with time averages (`output.average_from`), its running
//! sums per field (ρ, u_x, u_y, u_z, and θ with `[thermal]`) `[z][y][x]` in f64, the header giving
//! their sample count (`means`). Every slab's worker writes its own block at its offset at once
//! (`Runtime::write_blocks`: on a cluster, each rank its own, into a file every rank reaches), and
//! the whole file's checksum is combined from the blocks' without reading them back; the header
//! comes after the blocks, so that their offsets are known before it is.
//!
//! The header names the case's lattices, from which the population count Q follows: `D3Q19` for
//! the flow alone (Q = 19), `D3Q19+D3Q7` for the flow and its temperature lattice (Q = 26, the
//! flow's 19 populations then the temperature's 7, as the modules read and write them).
//!
//! Formats 2 to 5 are read too: `THELMACP` · version · header length (u64) · header · the
//! populations `[i][z][y][x]` of the whole domain · its sums `[field][z][y][x]` · CRC-32.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use thelma_core::block::{write_block, BlockWritten};
use thelma_core::physics::{D3Q19, D3Q7};
use thelma_core::Runtime;
use thelma_core::{CaseConfig, MeanSums, Precision};
use thelma_core::{Domain, SlabSpec};

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
/// Format 6: the populations and sums in blocks, one per slab or subdomain written at once, the
/// header after them (the module's documentation).
const VERSION: u32 = 6;
/// The first format with blocks and the header after them.
const BLOCKS: u32 = 6;
/// Bytes before the blocks (format 6) or the header (formats 2 to 5): the magic, the version and
/// a length.
const FIXED: u64 = 20;

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
    /// Bytes of population data in the file (all blocks').
    pub data_bytes: u64,
    /// The case that produced it; a resumed run keeps its domain, physics and numerics.
    pub case: CaseConfig,
    /// The states the time averages' sums hold (after each block's populations; in formats 2 to
    /// 5 after the whole domain's); absent: the file holds no sums.
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
    /// The blocks in file order (format 6); absent: the whole domain in one (formats 2 to 5).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<Block>,
}

/// A block's box: its first node and its nodes along x, y and z.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    pub origin: [usize; 3],
    pub size: [usize; 3],
}

impl Block {
    /// The box of a slab or subdomain.
    pub fn of(slab: &SlabSpec) -> Self {
        Self {
            origin: slab.origin(),
            size: slab.size(),
        }
    }

    fn nodes(&self) -> usize {
        self.size.iter().product()
    }

    /// The box as a subdomain of `domain` (cut and paste need only its ranges), if it lies in it.
    fn spec(&self, domain: Domain) -> Option<SlabSpec> {
        let range = |a: usize| {
            let end = self.origin[a].checked_add(self.size[a])?;
            (self.size[a] > 0 && end <= domain.size[a]).then_some(self.origin[a]..end)
        };
        let cuts = [vec![range(0)?], vec![range(1)?], vec![range(2)?]];
        SlabSpec::cells(domain, &cuts).pop()
    }

    /// Bytes of the block: `q` populations of `width` bytes and `fields` sums per node.
    fn bytes(&self, q: usize, width: usize, fields: usize) -> u64 {
        (self.nodes() * (q * width + fields * 8)) as u64
    }
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

/// Fields of the time averages' sums a checkpoint's blocks hold: none without sums.
fn held_fields(h: &Header) -> usize {
    h.means.map_or(0, |_| mean_fields(&h.case))
}

/// Bytes of the time averages' sums after the populations.
fn mean_bytes(h: &Header) -> u64 {
    (held_fields(h) * h.size.iter().product::<usize>() * 8) as u64
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

/// Writes the checkpoint `path` atomically, with one block per box of `boxes` (slab order):
/// `write(file, offsets)` writes each block into the temporary `file` at its offset (each
/// holding the time averages' sums with `means`) and answers what each wrote; the file's own
/// bytes (its start, the header, the checksum) are written around them.
/// `store_scale`: the run's temperature lattice's (`ThermalSetup::store_scale`), `None` without one.
#[allow(clippy::too_many_arguments)]
fn write_file(
    path: &Path,
    case: &CaseConfig,
    step: u64,
    boxes: Vec<Block>,
    means: bool,
    steered: &Steered,
    store_scale: Option<f64>,
    write: impl FnOnce(&Path, &[u64]) -> std::io::Result<Vec<BlockWritten>>,
) -> std::io::Result<()> {
    let precision = case.numerics.precision;
    let (stencil, q) = lattices(case);
    let fields = if means { mean_fields(case) } else { 0 };
    let mut offsets = Vec::with_capacity(boxes.len());
    let mut at = FIXED;
    for b in &boxes {
        offsets.push(at);
        at += b.bytes(q, precision.bytes(), fields);
    }
    let blocks_len = at - FIXED;
    let nodes: usize = boxes.iter().map(Block::nodes).sum();
    if nodes != case.domain.size.iter().product::<usize>() {
        return Err(std::io::Error::other(format!(
            "blocks of {nodes} nodes for a {:?} lattice",
            case.domain.size
        )));
    }
    thelma_results::write_atomic_with(path, |file, tmp| {
        // Every writer of a block opens the file by its path: a whole one, wherever it runs from.
        // This process writes its own bytes (the first and the last) only once they are done.
        let written = write(&std::path::absolute(tmp)?, &offsets)?;
        let mut head = MAGIC.to_vec();
        head.extend(VERSION.to_le_bytes());
        head.extend(blocks_len.to_le_bytes());
        file.write_all_at(&head, 0)?;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&head);
        for (k, (w, b)) in written.iter().zip(&boxes).enumerate() {
            if w.bytes != b.bytes(q, precision.bytes(), fields) {
                return Err(std::io::Error::other(format!(
                    "block {k} holds {} bytes, its box {:?} calls for {}",
                    w.bytes,
                    b.size,
                    b.bytes(q, precision.bytes(), fields)
                )));
            }
            crc.combine(&crc32fast::Hasher::new_with_initial_len(w.crc, w.bytes));
        }
        let samples = written.first().and_then(|w| w.samples);
        if written.len() != boxes.len() || written.iter().any(|w| w.samples != samples) {
            return Err(std::io::Error::other(
                "the blocks' writers disagree on their count or their samples",
            ));
        }
        let header = Header {
            step,
            size: case.domain.size,
            precision,
            data_bytes: data_bytes(case.domain.size, precision, q).unwrap_or(u64::MAX),
            stencil,
            case: case.clone(),
            means: samples,
            walls: steered.walls.clone(),
            held: steered.held.clone(),
            store_scale,
            blocks: boxes,
        };
        let json = serde_json::to_vec(&header).map_err(std::io::Error::other)?;
        let mut tail = (json.len() as u64).to_le_bytes().to_vec();
        tail.extend(json);
        crc.update(&tail);
        tail.extend(crc.finalize().to_le_bytes());
        file.write_all_at(&tail, FIXED + blocks_len)
    })
}

/// Writes the checkpoint `path` from this process: `parts` (each `[i][z][y][x]` of its box in
/// `specs`, values in the machine's byte order) one block after another as the slabs' workers
/// write theirs, with their time averages' sums where `means` has some (one per part).
#[allow(clippy::too_many_arguments)]
pub fn write_parts(
    path: &Path,
    case: &CaseConfig,
    step: u64,
    specs: &[SlabSpec],
    parts: &[Vec<u8>],
    means: &[MeanSums],
    steered: &Steered,
    store_scale: Option<f64>,
) -> std::io::Result<()> {
    let boxes = specs.iter().map(Block::of).collect();
    let width = case.numerics.precision.bytes();
    let with_means = !means.is_empty();
    write_file(
        path,
        case,
        step,
        boxes,
        with_means,
        steered,
        store_scale,
        |tmp, at| {
            (0..parts.len().min(at.len()))
                .map(|k| {
                    let sums = if with_means { means.get(k) } else { None };
                    write_block(tmp, at[k], &parts[k], width, sums)
                })
                .collect()
        },
    )
}

/// Saves the runtime's state at its step as `dir/checkpoint.thelma`, atomically: a failure or an
/// interruption at any point leaves the previous checkpoint as it was. Every slab writes its own
/// block at once ([`Runtime::write_blocks`]); in a cluster job `dir` must be a folder every rank
/// reaches at the same path (a shared file system, as clusters' are).
/// `store_scale`: the run's temperature lattice's, `None` without one.
pub fn save(
    dir: &Path,
    case: &CaseConfig,
    rt: &mut Runtime,
    steered: &Steered,
    store_scale: Option<f64>,
) -> Result<()> {
    let boxes: Vec<Block> = rt.devices().iter().map(|d| Block::of(&d.slab)).collect();
    // Sums only once a state may have been sampled: the first is the state of step `from`, or of
    // step `every` where `from` is 0 (the starting state is never sampled).
    let means = rt.averaging().is_some_and(|a| {
        let first = if a.from == 0 { a.every } else { a.from };
        rt.step() >= first
    });
    let width = case.numerics.precision.bytes();
    let path = dir.join(FILE_NAME);
    write_file(
        &path,
        case,
        rt.step(),
        boxes,
        means,
        steered,
        store_scale,
        |tmp, offsets| {
            rt.write_blocks(tmp, offsets, width, means)
                .map_err(|e| std::io::Error::other(e.to_string()))
        },
    )
    .with_context(|| format!("cannot write the checkpoint {}", path.display()))
}

/// What a checkpoint's checksum covers besides its data: the bytes before the data (`head`) and,
/// in format 6, the header's after it (`tail`, its length and text).
struct Framing {
    version: u32,
    head: Vec<u8>,
    tail: Vec<u8>,
}

fn read_header_from<R: Read + Seek>(r: &mut R) -> Result<(Header, Framing)> {
    let mut fixed = [0u8; FIXED as usize];
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
    let mut len = u64::from_le_bytes(fixed[12..20].try_into().expect("8 bytes"));
    // Format 6: the length of the blocks, after which the header's length and text follow.
    let blocks_len = len;
    if version >= BLOCKS {
        let at = FIXED
            .checked_add(blocks_len)
            .context("damaged: the blocks' length")?;
        r.seek(SeekFrom::Start(at))
            .context("damaged: the header is missing")?;
        let mut n = [0u8; 8];
        r.read_exact(&mut n)
            .context("damaged: the header is missing")?;
        len = u64::from_le_bytes(n);
    }
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
    let framing = if version >= BLOCKS {
        check_blocks(&header, blocks_len)?;
        let mut tail = len.to_le_bytes().to_vec();
        tail.extend(json);
        Framing {
            version,
            head: fixed.to_vec(),
            tail,
        }
    } else {
        let mut head = fixed.to_vec();
        head.extend(json);
        Framing {
            version,
            head,
            tail: Vec::new(),
        }
    };
    Ok((header, framing))
}

/// Refuses a format 6 header whose blocks do not tile its domain, or whose blocks' bytes are not
/// `blocks_len` (the file's own count).
fn check_blocks(header: &Header, blocks_len: u64) -> Result<()> {
    let domain = Domain::new(header.size, [false; 3]);
    let specs: Option<Vec<SlabSpec>> = header.blocks.iter().map(|b| b.spec(domain)).collect();
    let Some(specs) = specs else {
        bail!(
            "damaged header: a block outside the {:?} domain",
            header.size
        );
    };
    let nodes: usize = specs.iter().map(SlabSpec::nodes).sum();
    let overlap = |a: &SlabSpec, b: &SlabSpec| {
        a.x.start < b.x.end
            && b.x.start < a.x.end
            && a.y.start < b.y.end
            && b.y.start < a.y.end
            && a.z.start < b.z.end
            && b.z.start < a.z.end
    };
    let overlapping = specs
        .iter()
        .enumerate()
        .any(|(k, a)| specs[k + 1..].iter().any(|b| overlap(a, b)));
    if nodes != header.size.iter().product::<usize>() || overlapping {
        bail!(
            "damaged header: its blocks do not tile the {:?} domain",
            header.size
        );
    }
    if header.data_bytes.checked_add(mean_bytes(header)) != Some(blocks_len) {
        bail!(
            "damaged: {blocks_len} bytes of blocks for {} of populations and {} of sums",
            header.data_bytes,
            mean_bytes(header)
        );
    }
    Ok(())
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

/// `want` bytes from `r`, or what is damaged (`what` of them cut short).
fn read_exactly(r: &mut dyn Read, want: u64, what: &str) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(want as usize)
        .context("not enough memory to load it")?;
    r.take(want).read_to_end(&mut v)?;
    if v.len() as u64 != want {
        bail!("damaged: {} of {want} bytes of {what}", v.len());
    }
    Ok(v)
}

/// Little-endian f64 values.
fn f64s(raw: &[u8]) -> Vec<f64> {
    raw.chunks_exact(8)
        .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")))
        .collect()
}

/// Loads and verifies a checkpoint (its length and checksum).
pub fn load(path: &Path) -> Result<Checkpoint> {
    let path = resolve(path);
    let inner = || -> Result<Checkpoint> {
        let mut f = std::io::BufReader::new(std::fs::File::open(&path).context("cannot open")?);
        let (header, framing) = read_header_from(&mut f)?;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&framing.head);
        let (mut populations, means);
        if framing.version >= BLOCKS {
            // The blocks from the start, each pasted into the whole domain's arrays.
            f.seek(SeekFrom::Start(FIXED))?;
            let (q, w, fields) = (header.q(), header.precision.bytes(), held_fields(&header));
            let n: usize = header.size.iter().product();
            populations = Vec::new();
            populations
                .try_reserve_exact(header.data_bytes as usize)
                .context("not enough memory to load it")?;
            populations.resize(header.data_bytes as usize, 0);
            let mut sums = vec![0.0; fields * n];
            let domain = Domain::new(header.size, [false; 3]);
            for b in &header.blocks {
                let spec = b.spec(domain).expect("checked with the header");
                let raw = read_exactly(&mut f, b.bytes(q, w, fields), "a block")?;
                crc.update(&raw);
                let pops = q * spec.nodes() * w;
                spec.paste(&raw[..pops], &mut populations, q, w);
                spec.paste(&f64s(&raw[pops..]), &mut sums, fields, 1);
            }
            means = sums;
            f.seek(SeekFrom::Current(framing.tail.len() as i64))?;
            crc.update(&framing.tail);
        } else {
            populations = read_exactly(&mut f, header.data_bytes, "populations")?;
            crc.update(&populations);
            let raw = read_exactly(&mut f, mean_bytes(&header), "time-average sums")?;
            crc.update(&raw);
            means = f64s(&raw);
        }
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

    /// The z slabs of `c`'s domain holding planes `a` and `b`.
    fn cuts(c: &CaseConfig, a: std::ops::Range<usize>, b: std::ops::Range<usize>) -> Vec<SlabSpec> {
        let [nx, ny, _] = c.domain.size;
        let d = Domain::new(c.domain.size, [false; 3]);
        let all = |n: usize| std::iter::once(0..n).collect();
        SlabSpec::cells(d, &[all(nx), all(ny), vec![a, b]])
    }

    /// The z slabs of 1 and 3 planes of `c`'s domain that `slabs` cuts.
    fn z_slabs(c: &CaseConfig) -> Vec<SlabSpec> {
        cuts(c, 0..1, 1..c.domain.size[2])
    }

    /// [`write_parts`] of `parts` on [`z_slabs`], without sums or steering.
    fn write_slabs(
        path: &Path,
        c: &CaseConfig,
        step: u64,
        parts: &[Vec<u8>],
        scale: Option<f64>,
    ) -> std::io::Result<()> {
        write_parts(
            path,
            c,
            step,
            &z_slabs(c),
            parts,
            &[],
            &Steered::default(),
            scale,
        )
    }

    /// One block of the whole domain.
    fn whole(c: &CaseConfig) -> Vec<SlabSpec> {
        vec![SlabSpec::whole(Domain::new(c.domain.size, [false; 3]))]
    }

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
        write_slabs(&path, &c, 77, &parts, None).unwrap();
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

    /// A grid's blocks (cut along x, y and z) with their time averages' sums come back as the
    /// whole domain's arrays, and cut into z slabs; a file of format 5 (the whole domain's
    /// populations and sums after its header) still loads to the same.
    #[test]
    fn a_grid_checkpoint_with_sums_round_trips_and_format_5_still_loads() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = case();
        c.output.average_from = Some(4.0);
        let (whole, _) = slabs(FLOW, 3.0);
        let d = Domain::new(c.domain.size, [false; 3]);
        let grid = SlabSpec::grid(d, [2, 2, 2]).unwrap();
        let n = 24;
        let sums_whole: Vec<f64> = (0..4 * n).map(|k| k as f64 / 7.0).collect();
        let mut parts = Vec::new();
        let mut means = Vec::new();
        for s in &grid {
            let part = s.cut(&whole, FLOW, 1);
            parts.push(
                part.iter()
                    .flat_map(|v| v.to_ne_bytes())
                    .collect::<Vec<u8>>(),
            );
            let mut m = MeanSums::empty(&thelma_core::Fields::zeros(s.size(), 0));
            m.samples = 9;
            let fields = s.cut(&sums_whole, 4, 1);
            let k = s.nodes();
            m.sums.rho = fields[..k].to_vec();
            m.sums.ux = fields[k..2 * k].to_vec();
            m.sums.uy = fields[2 * k..3 * k].to_vec();
            m.sums.uz = fields[3 * k..].to_vec();
            means.push(m);
        }
        let path = dir.path().join(FILE_NAME);
        write_parts(
            &path,
            &c,
            30,
            &grid,
            &parts,
            &means,
            &Steered::default(),
            None,
        )
        .unwrap();
        let ck = load(&path).unwrap();
        let whole_le: Vec<u8> = whole.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(ck.header.blocks.len(), 8);
        assert_eq!(ck.header.means, Some(9));
        assert_eq!(ck.populations, whole_le);
        assert_eq!(ck.means, sums_whole);
        let specs = SlabSpec::split(d, 2).unwrap();
        for (s, bytes) in specs.iter().zip(ck.slabs(&specs)) {
            let want: Vec<u8> = s
                .cut(&whole, FLOW, 1)
                .iter()
                .flat_map(|v| v.to_ne_bytes())
                .collect();
            assert_eq!(bytes, want);
        }
        // The same state as format 5 wrote it.
        let mut header = ck.header.clone();
        header.blocks.clear();
        let json = serde_json::to_vec(&header).unwrap();
        let mut old = MAGIC.to_vec();
        old.extend(5u32.to_le_bytes());
        old.extend((json.len() as u64).to_le_bytes());
        old.extend(&json);
        old.extend(&whole_le);
        old.extend(sums_whole.iter().flat_map(|v| v.to_le_bytes()));
        let crc = crc32fast::hash(&old);
        old.extend(crc.to_le_bytes());
        std::fs::write(&path, old).unwrap();
        let again = load(&path).unwrap();
        assert_eq!(again.header, header);
        assert_eq!(again.populations, whole_le);
        assert_eq!(again.means, sums_whole);
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
        write_parts(
            &path,
            &c,
            3,
            &whole(&c),
            &parts,
            &[],
            &Steered::default(),
            store_scale(&c),
        )
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
        write_parts(
            &path,
            &f32_case,
            3,
            &whole(&c),
            &parts,
            &[],
            &Steered::default(),
            Some(1.0),
        )
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
        write_parts(
            &path,
            &c,
            12,
            &cuts(&c, 0..3, 3..4),
            &parts,
            &[],
            &Steered::default(),
            store_scale(&c),
        )
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
        // Flow-sized blocks do not make a thermal checkpoint, and the one before stays.
        let (_, flow) = slabs(FLOW, 1.0);
        let e = write_slabs(&path, &c, 13, &flow, None).unwrap_err();
        assert!(e.to_string().contains("its box [3, 2, 1] calls for"), "{e}");
        assert_eq!(load(&path).unwrap().header.step, 12);
    }

    /// A flow-only checkpoint does not resume a case with [thermal], nor the reverse, and says why
    /// on one line; an old header naming `D3Q19` still loads for the flow.
    #[test]
    fn a_checkpoint_of_other_lattices_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (flow, thermal) = (dir.path().join("flow"), dir.path().join("thermal"));
        let (_, parts) = slabs(FLOW, 1.0);
        write_slabs(&flow, &case(), 3, &parts, None).unwrap();
        let (_, parts) = slabs(THERMAL, 1.0);
        let c = thermal_case();
        write_slabs(&thermal, &c, 3, &parts, Some(1.0)).unwrap();
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
        write_slabs(&path, &case(), 5, &parts, None).unwrap();
        let good = std::fs::read(&path).unwrap();
        // One flipped bit in the populations, a cut-off tail, a foreign file; a header whose
        // blocks overlap (its checksum made again, as a writer's bug would).
        let mut flipped = good.clone();
        flipped[FIXED as usize + 40] ^= 0x10;
        let cut = good[..good.len() - 100].to_vec();
        let header_at = FIXED as usize + 2 * 3 * 4 * FLOW * 4 + 8;
        let text = String::from_utf8_lossy(&good[header_at..good.len() - 4]).to_string();
        let bent = text.replace(r#""origin":[0,0,1]"#, r#""origin":[0,0,0]"#);
        assert_ne!(bent, text);
        let mut overlapping = good[..header_at].to_vec();
        overlapping.extend(bent.as_bytes());
        let crc = crc32fast::hash(&overlapping);
        overlapping.extend(crc.to_le_bytes());
        for (bad, what) in [
            (flipped, "checksum"),
            (cut, "damaged"),
            (overlapping, "blocks do not tile the [3, 2, 4] domain"),
            (b"P6 3 2 255\n".repeat(4), "not a thelma checkpoint"),
        ] {
            std::fs::write(&path, bad).unwrap();
            let e = format!("{:#}", load(&path).err().expect("damage must be detected"));
            assert!(e.contains(what), "{e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    #[test]
    fn a_checkpoint_whose_write_fails_midway_leaves_the_previous_one_loadable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let (first, parts) = slabs(FLOW, 1.0);
        write_slabs(&path, &case(), 10, &parts, None).unwrap();
        // The second slab's writer fails (a full disk, a rank gone) after the first wrote.
        let (_, newer) = slabs(FLOW, 2.0);
        let c = case();
        let boxes = z_slabs(&c).iter().map(Block::of).collect();
        let err = write_file(
            &path,
            &c,
            20,
            boxes,
            false,
            &Steered::default(),
            None,
            |tmp, at| {
                write_block(tmp, at[0], &newer[0], 4, None)?;
                Err(std::io::Error::other("no space left on device"))
            },
        );
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
