//! No input makes parsing panic: truncated, mangled and hostile YAML.

use super::{MINIMAL, RICH};
use crate::locate::Locations;
use crate::Config;

/// Parses `text`, which may be anything; only a panic fails.
fn survive(text: &str) {
    let _ = Config::parse(text, "fuzz.yaml");
}

#[test]
fn every_prefix_of_a_config_is_handled() {
    for (end, _) in RICH.char_indices() {
        survive(&RICH[..end]);
    }
}

#[test]
fn mangled_configs_are_handled() {
    // A tiny deterministic generator (no dependency, same cases every run).
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let alphabet: Vec<char> = " \n\t:-[]{},'\"&*!|>#%@`?0123456789abcxyz~.é\u{feff}".chars().collect();
    for _ in 0..600 {
        let mut chars: Vec<char> = RICH.chars().collect();
        for _ in 0..(1 + next() % 6) {
            let at = (next() as usize) % chars.len();
            let with = alphabet[(next() as usize) % alphabet.len()];
            match next() % 3 {
                0 => chars[at] = with,
                1 => chars.insert(at, with),
                _ => {
                    chars.remove(at);
                }
            }
        }
        survive(&chars.into_iter().collect::<String>());
    }
}

#[test]
fn hostile_shapes_are_handled() {
    let deep_flow = format!("{}{}", "[".repeat(50_000), "]".repeat(50_000));
    let deep_block: String = (0..2_000).map(|i| format!("{}- \n", "  ".repeat(i))).collect();
    let laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n\
                  b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
                  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n\
                  d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n\
                  frontends: [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n";
    let cases = [
        deep_flow.as_str(),
        &deep_block,
        laughs,
        "? [complex, key]\n: value\n",
        "frontends:\n  - ? { a: 1 }\n    : b\n",
        "--- a\n--- b\n",
        "*undefined\n",
        "!!binary aGVsbG8=\n",
        "frontends: !!map { name: x }\n",
        "\u{feff}frontends: []\n",
        "\t\t\t",
        "%YAML 1.2\n---\n",
        "frontends: [{ name: x, bind: ['1.2.3.4:99999999999999999999'], default_backend: y }]",
        &MINIMAL.replace("10.0.0.1:80", &"9".repeat(10_000)),
        &MINIMAL.replace("app", &"é".repeat(1_000)),
    ];
    for text in cases {
        survive(text);
        let _ = Locations::scan(text);
    }
}
