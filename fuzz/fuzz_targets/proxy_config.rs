//! lb-proxy's configuration loader (`lb_config::Config::parse`, what `Config::load` runs on a
//! file's text) on arbitrary text: a refusal is a list of diagnostics naming the file, a line of
//! the text and a message, never a panic; an accepted configuration, written out with
//! `to_yaml`, parses back to an equal value, and writes out the same again (lb-watcher relies on
//! both).
#![no_main]

use libfuzzer_sys::fuzz_target;

const FILE: &str = "fuzz.yaml";

fuzz_target!(|data: &[u8]| {
    let Some(text) = lb_fuzz::config_text(data) else { return };
    match lb_config::Config::parse(text, FILE) {
        Ok(config) => {
            let yaml = config.to_yaml();
            match lb_config::Config::parse(&yaml, "rendered.yaml") {
                Ok(again) => {
                    assert_eq!(again, config, "the rendering reads back differently:\n{yaml}");
                    assert_eq!(again.to_yaml(), yaml, "the rendering is not stable");
                }
                Err(e) => panic!("an accepted configuration renders to text that does not load:\n{e}\n---\n{yaml}"),
            }
        }
        Err(lb_config::Error::Invalid { diagnostics }) => lb_fuzz::check_diagnostics(&diagnostics, FILE, text),
        Err(lb_config::Error::Read { .. }) => {}
    }
});
