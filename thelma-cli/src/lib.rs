//! The `thelma` application: composes geometry, compute modules, the runtime and results into runs.
//! The binary (`main.rs`) only parses the command line and prints; everything a run does lives here so
//! that end-to-end tests can drive it without a process.

pub mod app;
pub mod backend;
pub mod bench;
pub mod checkpoint;
pub mod cli;
pub mod cluster;
pub mod comm_bench;
pub mod console;
pub mod devices;
pub mod error;
pub mod init;
pub mod layout;
pub mod live;
pub mod outputs;
pub mod preflight;
pub mod samples;
pub mod watchdog;
