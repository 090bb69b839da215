//! Fuzz target: `CaseConfig::parse` (TOML and JSON) and `validate` never panic on any text, and every
//! error they give is one line. The property test `thelma-core/tests/case_file_props.rs` runs the same
//! check in CI for a bounded time; this one runs as long as it is let.
#![no_main]

use libfuzzer_sys::fuzz_target;
use thelma_core::CaseConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for json in [false, true] {
        match CaseConfig::parse(text, json) {
            Ok(case) => {
                if let Err(e) = case.validate() {
                    assert_eq!(e.to_string().lines().count(), 1);
                }
            }
            Err(e) => assert_eq!(e.to_string().lines().count(), 1),
        }
    }
});
