//! Lines into sections (`global`, `defaults`, `frontend`, `backend`, `listen`), and which
//! `defaults` each proxy inherits: the one named by `from NAME`, else the last `defaults`
//! before it (named or not), as HAProxy 2.x does. A `defaults` starts afresh unless it names
//! another with `from`.

use super::lexer::Line;
use super::report::Report;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Global,
    Defaults,
    Frontend,
    Backend,
    Listen,
}

#[derive(Debug, Clone)]
pub(crate) struct Section {
    pub(crate) kind: Kind,
    /// Empty for `global` and an unnamed `defaults`.
    pub(crate) name: String,
    /// The header line.
    pub(crate) header: Line,
    pub(crate) body: Vec<Line>,
    /// The index (in the section list) of the `defaults` this one inherits from.
    pub(crate) defaults: Option<usize>,
}

/// Sections HAProxy has that lb has no counterpart for: reported once, at their header.
const OTHER_SECTIONS: &[(&str, &str)] = &[
    ("userlist", "lb-proxy has no HTTP authentication (user lists)"),
    ("peers", "lb-proxy has no stick tables to share between peers"),
    (
        "resolvers",
        "lb-proxy takes server addresses, not names resolved at run time (lb-watcher follows ZooKeeper instead)",
    ),
    ("mailers", "lb-proxy sends no mail; alert from its logs or metrics"),
    ("program", "lb-proxy's master runs no other programs; run them as services of their own"),
    ("http-errors", "lb-proxy has error files per frontend (`errorfile` lines), not named sets"),
    ("ring", "lb-proxy logs to stdout, a Unix socket or UDP syslog, not to rings"),
    ("cache", "lb-proxy has no response cache"),
    ("fcgi-app", "lb-proxy's servers speak HTTP, not FastCGI"),
    ("log-forward", "lb-proxy forwards no syslog traffic"),
    ("crt-store", "certificates are listed in lb-tls's configuration"),
    ("traces", "lb-proxy has no trace section"),
];

pub(crate) fn sections(lines: Vec<Line>, report: &mut Report) -> Vec<Section> {
    let mut sections: Vec<Section> = Vec::new();
    // Lines of a section lb has no counterpart for: dropped (the section was reported).
    let mut skipping_other = false;
    let mut last_defaults = None;
    for line in lines {
        let keyword = line.word(0);
        let kind = match keyword {
            "global" => Some(Kind::Global),
            "defaults" => Some(Kind::Defaults),
            "frontend" => Some(Kind::Frontend),
            "backend" => Some(Kind::Backend),
            "listen" => Some(Kind::Listen),
            _ => None,
        };
        if let Some(kind) = kind {
            skipping_other = false;
            let (name, from) = header(&line, kind, report);
            let defaults = match (kind, from) {
                (Kind::Global, _) => None,
                (_, Some(from)) => {
                    let found = sections.iter().rposition(|s| s.kind == Kind::Defaults && s.name == from);
                    if found.is_none() {
                        report.error(line.number, keyword, format!("no defaults section named `{from}` before it"));
                    }
                    found
                }
                // A `defaults` resets what the previous ones set (it inherits only by `from`).
                (Kind::Defaults, None) => None,
                (_, None) => last_defaults,
            };
            if kind == Kind::Defaults {
                last_defaults = Some(sections.len());
            }
            sections.push(Section { kind, name, header: line, body: Vec::new(), defaults });
        } else if let Some((_, why)) = OTHER_SECTIONS.iter().find(|(k, _)| *k == keyword) {
            skipping_other = true;
            report.error(
                line.number,
                format!("{keyword} {}", line.word(1)).trim_end(),
                format!("{why} (the whole section)"),
            );
        } else if keyword.starts_with('.') {
            report.error(
                line.number,
                keyword,
                "conditional blocks (.if/.else/.endif) are not evaluated: write the branch you want",
            );
        } else if sections.is_empty() && !skipping_other {
            report.error(line.number, keyword, "outside any section");
        } else if skipping_other {
            // Inside a section already reported as a whole.
        } else if let Some(section) = sections.last_mut() {
            section.body.push(line);
        }
    }
    sections
}

/// The section's name and its `from NAME`, reporting what the header holds besides.
fn header(line: &Line, kind: Kind, report: &mut Report) -> (String, Option<String>) {
    let mut words = line.words[1..].iter();
    let mut name = String::new();
    let mut from = None;
    if kind != Kind::Global {
        if let Some(first) = words.clone().next() {
            if first != "from" {
                name = first.clone();
                words.next();
            }
        }
    }
    while let Some(word) = words.next() {
        if word == "from" && kind != Kind::Global {
            from = words.next().cloned();
        } else if kind != Kind::Listen {
            // (`listen NAME ADDR` is the 1.x form: the address is a bind, read with the binds.)
            report.error(line.number, line.word(0), format!("`{word}` in the section header is not understood"));
        }
    }
    (name, from)
}
