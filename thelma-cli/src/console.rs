//! Printing that survives its reader going away. `println!` panics when stdout is a closed pipe
//! (`thelma run | head -3`), a full disk (`> /dev/full`) or a `tee` that died; a run must then go
//! on quietly and still write its files, so every line the program prints goes through here.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write to stdout fails: nothing is printed there again (the reader is gone, and trying
/// each line would only fail each time).
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);
static STDERR_GONE: AtomicBool = AtomicBool::new(false);

/// Writes `args` to stdout; after the first failure, does nothing.
pub fn out(args: fmt::Arguments) {
    write_to(&mut std::io::stdout().lock(), &STDOUT_GONE, args);
}

/// Writes `args` to stderr; after the first failure, does nothing.
pub fn err(args: fmt::Arguments) {
    write_to(&mut std::io::stderr().lock(), &STDERR_GONE, args);
}

/// Whether stdout has failed (the reader went away or the disk is full).
pub fn stdout_gone() -> bool {
    STDOUT_GONE.load(Ordering::Relaxed)
}

fn write_to(w: &mut dyn Write, gone: &AtomicBool, args: fmt::Arguments) {
    if gone.load(Ordering::Relaxed) {
        return;
    }
    // One write of the whole text: stderr is unbuffered, and `write_fmt` would write each piece of
    // the format on its own, letting another writer to the same stream (mpirun's own notices, a
    // second rank) land inside the line. Stdout is line-buffered, so a failing line shows up here
    // rather than at some later write.
    if w.write_all(fmt::format(args).as_bytes()).is_err() {
        gone.store(true, Ordering::Relaxed);
    }
}

/// `println!` to stdout that never panics (see the module's comment).
#[macro_export]
macro_rules! say {
    () => { $crate::console::out(format_args!("\n")) };
    ($($t:tt)*) => { $crate::console::out(format_args!("{}\n", format_args!($($t)*))) };
}

/// `print!` to stdout that never panics.
#[macro_export]
macro_rules! say_raw {
    ($($t:tt)*) => { $crate::console::out(format_args!($($t)*)) };
}

/// `eprintln!` that never panics: a closed stderr must not turn a warning into a crash.
#[macro_export]
macro_rules! warn_line {
    ($($t:tt)*) => { $crate::console::err(format_args!("{}\n", format_args!($($t)*))) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that fails every write, as a closed pipe does.
    struct Closed;
    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_write_stops_printing_without_panicking() {
        let gone = AtomicBool::new(false);
        write_to(&mut Closed, &gone, format_args!("one line\n"));
        assert!(gone.load(Ordering::Relaxed));
        write_to(&mut Closed, &gone, format_args!("and another\n"));
    }
}
