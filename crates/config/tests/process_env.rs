//! `load_from_process` reads the real environment; alone in this binary because it changes it.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use arca_config::{Overrides, load_from_process};

#[test]
fn non_utf8_values_of_our_variables_are_refused_by_name() {
    // SAFETY: the only test in this binary, so no other thread reads the environment meanwhile.
    unsafe {
        std::env::set_var("ARCA_DEBUG_ADDR", OsStr::from_bytes(b"\xff:1"));
        std::env::set_var("ARCA_NOT_OURS", OsStr::from_bytes(b"\xff"));
        std::env::set_var("ARCA_LOG_LEVEL", "warn");
    }
    let err = load_from_process(None, Overrides::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "debug.addr: value is not valid UTF-8 (env ARCA_DEBUG_ADDR)"
    );

    unsafe { std::env::set_var("ARCA_DEBUG_ADDR", "0.0.0.0:9") };
    let config = load_from_process(None, Overrides::default()).unwrap();
    assert_eq!(config.debug.addr, "0.0.0.0:9");
    assert_eq!(config.log.level, "warn");
}
