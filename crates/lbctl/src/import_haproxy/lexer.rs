//! haproxy.cfg's lines as HAProxy splits them (configuration.txt §2.2, §2.3): words separated
//! by blanks, `#` to the end of the line a comment, backslash escapes (`\ `, `\#`, `\\`,
//! `\'`, `\"`, `\r`, `\n`, `\t`, `\xNN`), weak quoting ("…": escapes and `$VAR`/`${VAR}`
//! interpreted, blanks and `#` not), strong quoting ('…': nothing interpreted), quoted and
//! unquoted parts of one word joined. HAProxy has no line continuation: a line ending in a
//! backslash is refused, as haproxy refuses it.

use super::report::Report;

/// One configuration line, split into words, with its number in the file (from 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Line {
    pub(crate) number: usize,
    pub(crate) words: Vec<String>,
}

impl Line {
    /// The word at `i`, or "" past the end.
    pub(crate) fn word(&self, i: usize) -> &str {
        self.words.get(i).map_or("", String::as_str)
    }

    /// The directive as an operator names it in a report: `timeout client`, `option httpchk`,
    /// `http-request deny`, `bind`.
    pub(crate) fn directive(&self) -> String {
        let first = self.word(0);
        let two_words = ["timeout", "option", "no", "http-request", "http-response", "stats", "capture", "http-check"];
        if two_words.contains(&first) && self.words.len() > 1 {
            format!("{first} {}", self.word(1))
        } else {
            first.to_owned()
        }
    }
}

/// Every non-empty line of `text`; lines that cannot be split are reported and left out.
pub(crate) fn lines(text: &str, env: &dyn Fn(&str) -> Option<String>, report: &mut Report) -> Vec<Line> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let number = i + 1;
        match split(raw, env) {
            Ok(words) if words.is_empty() => {}
            Ok(words) => out.push(Line { number, words }),
            Err(why) => report.error(number, raw.trim(), why),
        }
    }
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Quote {
    None,
    Weak,
    Strong,
}

/// One line into words, or why it cannot be split.
pub(crate) fn split(line: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    // A word may be empty but present (`""`), so "started" is tracked apart from its text.
    let mut started = false;
    let mut quote = Quote::None;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Quote::Strong, '\'') => quote = Quote::None,
            (Quote::Strong, c) => word.push(c),
            (Quote::Weak, '"') => quote = Quote::None,
            (Quote::None, '"') => {
                quote = Quote::Weak;
                started = true;
            }
            (Quote::None, '\'') => {
                quote = Quote::Strong;
                started = true;
            }
            (Quote::None, '#') => break,
            (Quote::None, c) if c == ' ' || c == '\t' => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            (_, '\\') => {
                started = true;
                match chars.next() {
                    None => return Err("ends with a backslash: HAProxy has no line continuation".to_owned()),
                    Some('r') => word.push('\r'),
                    Some('n') => word.push('\n'),
                    Some('t') => word.push('\t'),
                    Some('x') => {
                        let hex: String = [chars.next(), chars.next()].into_iter().flatten().collect();
                        match u8::from_str_radix(&hex, 16) {
                            Ok(byte) => word.push(char::from(byte)),
                            Err(_) => return Err(format!("`\\x{hex}` is not a hexadecimal escape")),
                        }
                    }
                    // `\ `, `\#`, `\\`, `\'`, `\"`, `\$`: the character itself. HAProxy keeps
                    // other backslashes as they are (regular expressions rely on it).
                    Some(c @ (' ' | '#' | '\\' | '\'' | '"' | '$')) => word.push(c),
                    Some(c) => {
                        word.push('\\');
                        word.push(c);
                    }
                }
            }
            (Quote::Weak, '$') => {
                let name = variable_name(&mut chars)?;
                match name {
                    Some(name) => word.push_str(&env(&name).unwrap_or_default()),
                    None => word.push('$'),
                }
            }
            (_, c) => {
                started = true;
                word.push(c);
            }
        }
    }
    match quote {
        Quote::Weak => return Err("a double quote is not closed".to_owned()),
        Quote::Strong => return Err("a single quote is not closed".to_owned()),
        Quote::None => {}
    }
    if started {
        words.push(word);
    }
    Ok(words)
}

/// After a `$` in weak quotes: `NAME` or `{NAME}`; `None` when no name follows (a lone `$`).
fn variable_name(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Result<Option<String>, String> {
    let braced = chars.peek() == Some(&'{');
    if braced {
        chars.next();
    }
    let mut name = String::new();
    while let Some(&c) = chars.peek() {
        if c.is_ascii_alphanumeric() || c == '_' {
            name.push(c);
            chars.next();
        } else {
            break;
        }
    }
    if braced && chars.next() != Some('}') {
        return Err(format!("`${{{name}` is not closed with `}}`"));
    }
    Ok((!name.is_empty()).then_some(name))
}
