//! List and map files (HAProxy's `-f FILE` pattern files and map files): reading them, checking
//! an entry, and writing them back. Shared by validation (a file with a bad entry is refused
//! whole, naming its line) and lb-proxy's runtime commands (`add acl` checks an entry the same
//! way; a list that came from a file is written back after each change).

use std::path::Path;

use super::{Cidr, ListKind};

/// One entry as a list of `kind` keeps it: addresses in a canonical form (`10.0.0.0/8`,
/// `192.0.2.1`), text as written.
pub fn parse_list_entry(kind: ListKind, text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("an empty entry".to_owned());
    }
    match kind {
        ListKind::Ip => Cidr::parse(text).map(|c| c.to_string()),
        ListKind::String | ListKind::Prefix => {
            if text.chars().any(char::is_control) {
                return Err(format!("`{}` has a control character", text.escape_debug()));
            }
            Ok(text.to_owned())
        }
    }
}

/// Lines without their comments and surrounding blanks, numbered from 1; empty ones left out.
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().filter_map(|(i, line)| {
        let line = line.split_once('#').map_or(line, |(before, _)| before).trim();
        (!line.is_empty()).then_some((i + 1, line))
    })
}

/// A list file's entries; the first bad one refuses the whole file: `(line, message)`.
pub fn parse_list_text(kind: ListKind, text: &str) -> Result<Vec<String>, (usize, String)> {
    lines(text).map(|(n, line)| parse_list_entry(kind, line).map_err(|e| (n, e))).collect()
}

/// A map file's `key value` lines (the value is the rest of the line, trimmed).
pub fn parse_map_text(text: &str) -> Result<Vec<(String, String)>, (usize, String)> {
    lines(text)
        .map(|(n, line)| {
            let Some((key, value)) = line.split_once(char::is_whitespace) else {
                return Err((n, format!("`{line}` has a key but no value (`key value`)")));
            };
            check_map_entry(key, value.trim()).map_err(|e| (n, e))?;
            Ok((key.to_owned(), value.trim().to_owned()))
        })
        .collect()
}

/// A map entry: a key without blanks, a value without control characters.
pub fn check_map_entry(key: &str, value: &str) -> Result<(), String> {
    if key.is_empty() || key.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("invalid key `{}`: no blanks or control characters", key.escape_debug()));
    }
    if value.is_empty() || value.chars().any(char::is_control) {
        return Err(format!("invalid value `{}` for key `{key}`", value.escape_debug()));
    }
    Ok(())
}

/// A list as its file holds it, one entry a line, under a comment saying who wrote it.
pub fn list_file_text<'a>(entries: impl Iterator<Item = &'a str>) -> String {
    let mut text = String::from("# written by lb-proxy after a runtime change (add/del/clear acl)\n");
    for entry in entries {
        text.push_str(entry);
        text.push('\n');
    }
    text
}

/// A map as its file holds it.
pub fn map_file_text<'a>(entries: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut text = String::from("# written by lb-proxy after a runtime change (add/set/del/clear map)\n");
    for (key, value) in entries {
        text.push_str(key);
        text.push(' ');
        text.push_str(value);
        text.push('\n');
    }
    text
}

/// Replaces `path`'s content at once (a temporary file beside it, then a rename), so that a
/// reload reading it meanwhile sees the old list or the new one, never half of one.
pub fn write_back(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, text)?;
    // Keep the file's permissions: an operator's mode on an allow list is deliberate.
    if let Ok(meta) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(&tmp, meta.permissions());
    }
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_files_are_read_and_refused_whole() {
        let text = "# blocked\n10.0.0.0/8\n\n192.0.2.1  # one host\n2001:db8::/32\n";
        assert_eq!(
            parse_list_text(ListKind::Ip, text).expect("valid"),
            ["10.0.0.0/8", "192.0.2.1", "2001:db8::/32"].map(String::from)
        );
        let err = parse_list_text(ListKind::Ip, "10.0.0.0/8\n10.0.0.0/33\n").expect_err("bad prefix");
        assert_eq!(err.0, 2);
        assert!(err.1.contains("0 to 32"), "{}", err.1);
        assert_eq!(parse_list_text(ListKind::String, "curl\nwget\n").expect("strings"), ["curl", "wget"]);
    }

    #[test]
    fn map_files_need_a_value() {
        assert_eq!(
            parse_map_text("a.example.com web\n# c\nb.example.com  api  \n").expect("valid"),
            [("a.example.com".into(), "web".into()), ("b.example.com".into(), "api".into())]
        );
        assert_eq!(parse_map_text("ok v\nalone\n").expect_err("no value").0, 2);
    }
}
