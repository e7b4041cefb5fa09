//! Any text as a config file: the loader never panics, every problem is one line that starts
//! with a key path (or `config:`), and a value taken from the environment never shows up in one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sturnus::config::Config;

const SECRET: &str = "fuzz-secret-4f1b";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let env = |name: &str| (name == "SECRET").then(|| SECRET.to_string());
    match Config::parse(text, &env) {
        Ok(cfg) => {
            let _ = cfg.describe();
        }
        Err(e) => {
            assert!(!e.problems.is_empty());
            for p in &e.problems {
                assert!(!p.contains('\n') && !p.contains('\r'), "{p:?}");
                let (path, _) = p.split_once(": ").expect("problem without a key path");
                assert!(!path.is_empty(), "{p:?}");
                if !text.contains(SECRET) {
                    assert!(!p.contains(SECRET), "an environment value leaked: {p:?}");
                }
            }
        }
    }
});
