//! The on-disk store of compiled kernel images, so that every start after the first loads a cubin
//! instead of running NVRTC over the D3Q19 kernels (seconds of a short run's wall time).
//!
//! An image is filed under a key of everything its bytes depend on: the whole source (the prelude,
//! hence the model's constants, included), the architecture, NVRTC's version and the compile
//! options. The key is a 128-bit FNV-1a hash, which unlike `std`'s hasher is the same in every build
//! and Rust version; each file also carries the key, the source's length and a checksum of the image,
//! so a file that is damaged, cut short or filed under another key reads as absent. Files are written
//! to a temporary name in the same folder and renamed, so a reader never sees half of one, and two
//! runs compiling the same kernels at once both leave a whole file.
//!
//! The store never fails a run: where it cannot be read or written, the kernels are compiled as if
//! it were not there, and the process says so once (on stderr, never panicking).
//! `THELMA_KERNEL_CACHE=0` turns it off.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The start of every file: the format's name and version.
const MAGIC: &[u8; 16] = b"thelma-cubin-v1\n";
/// Bytes of the header: magic, key hash, source length, image length, image checksum.
const HEADER: usize = 16 + 16 + 8 + 8 + 8;

/// FNV-1a over `bytes`, 128 bits, continuing from `h` (the offset basis to start).
fn fnv1a_128(mut h: u128, bytes: &[u8]) -> u128 {
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013B;
    for &b in bytes {
        h ^= u128::from(b);
        h = h.wrapping_mul(PRIME);
    }
    h
}
const FNV128_BASIS: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;

/// FNV-1a over `bytes`, 64 bits: the image's checksum.
fn fnv1a_64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

/// What an image is filed under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    hash: u128,
    source_len: u64,
}

impl Key {
    /// The key of `source` compiled for `arch` (`sm_90`) by NVRTC `nvrtc` (major, minor) with
    /// `options`. Each part is hashed with its length before it, so no two lists of parts run
    /// together into the same bytes.
    pub fn new(source: &str, arch: &str, nvrtc: (i32, i32), options: &[String]) -> Key {
        let version = format!("{}.{}", nvrtc.0, nvrtc.1);
        let parts = [source, arch, version.as_str()]
            .into_iter()
            .chain(options.iter().map(String::as_str));
        let hash = parts.fold(FNV128_BASIS, |h, part| {
            let h = fnv1a_128(h, &(part.len() as u64).to_le_bytes());
            fnv1a_128(h, part.as_bytes())
        });
        Key {
            hash,
            source_len: source.len() as u64,
        }
    }

    fn file_name(&self) -> String {
        format!("{:032x}.cubin", self.hash)
    }
}

/// A folder of compiled images.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// A store in `dir` (created when the first image is saved).
    pub fn at(dir: impl Into<PathBuf>) -> Store {
        Store { dir: dir.into() }
    }

    /// The user's store: `$XDG_CACHE_HOME/thelma/kernels`, else `$HOME/.cache/thelma/kernels`; none
    /// with `THELMA_KERNEL_CACHE=0` or where neither variable names a folder.
    pub fn from_env() -> Option<Store> {
        if std::env::var_os("THELMA_KERNEL_CACHE").is_some_and(|v| v == "0") {
            return None;
        }
        // The XDG rule: a relative path in the variable is to be ignored.
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| {
                std::env::var_os("HOME")
                    .map(PathBuf::from)
                    .filter(|p| p.is_absolute())
                    .map(|h| h.join(".cache"))
            })?;
        Some(Store::at(base.join("thelma").join("kernels")))
    }

    /// The folder of the store.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The image filed under `key`: `None` when there is none or the file is not a whole image of
    /// that key (it is then compiled again and the file replaced); an error only when the file
    /// exists and cannot be read.
    pub fn load(&self, key: &Key) -> io::Result<Option<Vec<u8>>> {
        let mut file = match std::fs::File::open(self.dir.join(key.file_name())) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        if bytes.len() < HEADER || &bytes[..16] != MAGIC {
            return Ok(None);
        }
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let hash = u128::from_le_bytes(bytes[16..32].try_into().expect("16 bytes"));
        let (source_len, len, sum) = (word(32), word(40), word(48));
        let image = &bytes[HEADER..];
        if hash != key.hash
            || source_len != key.source_len
            || len != image.len() as u64
            || sum != fnv1a_64(image)
        {
            return Ok(None);
        }
        Ok(Some(image.to_vec()))
    }

    /// Files `image` under `key`, replacing any file there, through a temporary file in the same
    /// folder and a rename.
    pub fn save(&self, key: &Key, image: &[u8]) -> io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        // Unique within the process (the counter) and among processes (the pid), so that runs
        // compiling at once never write into each other's temporary file.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let tmp = self.dir.join(format!(
            ".{}.{}-{}.tmp",
            key.file_name(),
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            let mut header = Vec::with_capacity(HEADER);
            header.extend_from_slice(MAGIC);
            header.extend_from_slice(&key.hash.to_le_bytes());
            header.extend_from_slice(&key.source_len.to_le_bytes());
            header.extend_from_slice(&(image.len() as u64).to_le_bytes());
            header.extend_from_slice(&fnv1a_64(image).to_le_bytes());
            f.write_all(&header)?;
            f.write_all(image)?;
            f.sync_all()?;
            std::fs::rename(&tmp, self.dir.join(key.file_name()))
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }
}

/// Says once per process, on stderr, that the store could not be used; later calls say nothing.
/// A failed write to stderr is ignored: a warning must not stop a run.
pub fn warn_once(store: &Store, what: &str, e: &io::Error) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if SAID.swap(true, Ordering::Relaxed) {
        return;
    }
    let _ = writeln!(
        io::stderr().lock(),
        "warning: the kernel cache in {} cannot be {what} ({e}); compiling the kernels instead (THELMA_KERNEL_CACHE=0 turns the cache off)",
        store.dir().display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder under the system's temporary folder, removed when dropped.
    struct TempDir(PathBuf);
    impl TempDir {
        fn new(name: &str) -> TempDir {
            let d = std::env::temp_dir()
                .join(format!("thelma-kernel-cache-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            TempDir(d)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn opts() -> Vec<String> {
        vec!["--gpu-architecture=sm_90".into(), "--std=c++17".into()]
    }

    #[test]
    fn the_key_is_the_published_fnv_and_changes_with_every_part() {
        // FNV-1a 128 test vectors (draft-eastlake-fnv): a key that changed between builds would
        // never find an image again.
        assert_eq!(fnv1a_128(FNV128_BASIS, b""), FNV128_BASIS);
        assert_eq!(
            fnv1a_128(FNV128_BASIS, b"a"),
            0xd228_cb69_6f1a_8caf_7891_2b70_4e4a_8964
        );
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        let k = Key::new("kernel", "sm_90", (13, 0), &opts());
        assert_eq!(k, Key::new("kernel", "sm_90", (13, 0), &opts()));
        for other in [
            Key::new("kernel ", "sm_90", (13, 0), &opts()),
            Key::new("kernel", "sm_80", (13, 0), &opts()),
            Key::new("kernel", "sm_90", (13, 1), &opts()),
            Key::new("kernel", "sm_90", (13, 0), &opts()[..1]),
            // The parts are delimited: moving bytes from one to the next is another key.
            Key::new("kernelsm_9", "0", (13, 0), &opts()),
        ] {
            assert_ne!(k.hash, other.hash, "{other:?}");
        }
    }

    #[test]
    fn an_image_saved_is_loaded_back_and_a_damaged_one_reads_as_absent() {
        let tmp = TempDir::new("round-trip");
        let store = Store::at(tmp.0.join("kernels"));
        let key = Key::new(
            "extern \"C\" __global__ void k() {}",
            "sm_90",
            (13, 0),
            &opts(),
        );
        let image: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(store.load(&key).unwrap(), None, "an empty store");
        store.save(&key, &image).unwrap();
        assert_eq!(store.load(&key).unwrap().as_deref(), Some(&image[..]));
        // Replacing an image leaves no temporary file behind.
        store.save(&key, &image[..100]).unwrap();
        assert_eq!(store.load(&key).unwrap().as_deref(), Some(&image[..100]));
        let names: Vec<_> = std::fs::read_dir(store.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from(key.file_name())]);

        let path = store.dir().join(key.file_name());
        // Cut short, one bit flipped, or filed under another key: absent, not an error.
        let whole = std::fs::read(&path).unwrap();
        std::fs::write(&path, &whole[..whole.len() - 1]).unwrap();
        assert_eq!(store.load(&key).unwrap(), None);
        let mut flipped = whole.clone();
        *flipped.last_mut().unwrap() ^= 1;
        std::fs::write(&path, &flipped).unwrap();
        assert_eq!(store.load(&key).unwrap(), None);
        let other = Key::new("another source", "sm_90", (13, 0), &opts());
        std::fs::write(store.dir().join(other.file_name()), &whole).unwrap();
        assert_eq!(store.load(&other).unwrap(), None);
        std::fs::write(&path, b"not an image").unwrap();
        assert_eq!(store.load(&key).unwrap(), None);
    }

    #[test]
    fn a_store_that_cannot_be_written_reports_an_error_and_leaves_nothing() {
        let tmp = TempDir::new("unwritable");
        std::fs::create_dir_all(&tmp.0).unwrap();
        // A folder that cannot exist: its parent is a file.
        let file = tmp.0.join("a-file");
        std::fs::write(&file, b"").unwrap();
        let store = Store::at(file.join("kernels"));
        let key = Key::new("k", "sm_90", (13, 0), &opts());
        assert!(store.save(&key, b"image").is_err());
        assert!(store.load(&key).is_err() || store.load(&key).unwrap().is_none());
        assert_eq!(std::fs::read_dir(&tmp.0).unwrap().count(), 1);
    }
}
