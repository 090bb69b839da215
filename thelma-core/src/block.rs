//! A subdomain's block of a checkpoint written in parallel: each slab's worker (a thread of this
//! process, or a serving rank of a cluster job) writes its own populations, and its time averages'
//! sums where asked, into the file at the offset the coordinator gives it, and answers with the
//! block's CRC-32 and length, from which the coordinator makes the whole file's checksum without
//! reading the blocks back (CRC-32's combination). The file's layout is `thelma-cli`'s
//! `checkpoint` module's; here is only what every worker writes.
//!
//! A block holds the subdomain's populations `[i][z][y][x]` of its own box in the run's
//! precision, then, where asked, its sums per field (ρ, u_x, u_y, u_z, and θ where the sums have
//! one) `[z][y][x]` in f64, everything little-endian.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::compute::MeanSums;

/// What a worker wrote: its block's CRC-32, its length in bytes, and the samples its sums hold
/// (`None` where no sums were asked).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockWritten {
    pub crc: u32,
    pub bytes: u64,
    pub samples: Option<u64>,
}

/// Bytes written at a time: the little-endian copy of a big-endian host's values is this long.
const CHUNK: usize = 1 << 22;

/// Writes `populations` (values of `width` bytes in the machine's order) and the fields of
/// `means` into the existing file `path` from `offset` on, little-endian, and flushes them to
/// disk.
pub fn write_block(
    path: &Path,
    offset: u64,
    populations: &[u8],
    width: usize,
    means: Option<&MeanSums>,
) -> io::Result<BlockWritten> {
    let file = OpenOptions::new().write(true).open(path)?;
    let mut crc = crc32fast::Hasher::new();
    let mut at = offset;
    let mut le = Vec::new();
    let mut put = |bytes: &[u8], width: usize| -> io::Result<()> {
        for chunk in bytes.chunks(CHUNK) {
            let out = if cfg!(target_endian = "little") {
                chunk
            } else {
                le.clear();
                le.extend(chunk.chunks_exact(width).flat_map(|v| v.iter().rev()));
                &le[..]
            };
            file.write_all_at(out, at)?;
            crc.update(out);
            at += out.len() as u64;
        }
        Ok(())
    };
    put(populations, width)?;
    if let Some(m) = means {
        let s = &m.sums;
        for field in [&s.rho, &s.ux, &s.uy, &s.uz, &s.temperature] {
            if !field.is_empty() {
                put(bytemuck::cast_slice(field), 8)?;
            }
        }
    }
    file.sync_data()?;
    Ok(BlockWritten {
        crc: crc.finalize(),
        bytes: at - offset,
        samples: means.map(|m| m.samples),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::Fields;

    #[test]
    fn a_block_lands_at_its_offset_with_its_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![0xAAu8; 64]).unwrap();
        let pops: Vec<u8> = (1..=8).collect();
        let mut sums = MeanSums::empty(&Fields::zeros([1, 1, 1], 0));
        sums.samples = 3;
        sums.sums.ux = vec![0.5];
        let w = write_block(&path, 10, &pops, 4, Some(&sums)).unwrap();
        let file = std::fs::read(&path).unwrap();
        let mut want = pops.clone();
        for v in [0.0f64, 0.5, 0.0, 0.0] {
            want.extend(v.to_le_bytes());
        }
        assert_eq!(&file[10..10 + want.len()], &want[..]);
        assert_eq!(file[9], 0xAA);
        assert_eq!(file[10 + want.len()], 0xAA);
        assert_eq!(w.crc, crc32fast::hash(&want));
        assert_eq!(w.bytes, want.len() as u64);
        assert_eq!(w.samples, Some(3));
        // Without sums, the populations alone; a file that is not there is an error, not made.
        let w = write_block(&path, 0, &pops, 4, None).unwrap();
        assert_eq!((w.bytes, w.samples), (8, None));
        assert!(write_block(&dir.path().join("missing"), 0, &pops, 4, None).is_err());
    }
}
