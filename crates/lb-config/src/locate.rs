//! Where each value sits in the source text.
//!
//! serde throws positions away once the raw structs are built, yet validation wants to say
//! `proxy.yaml:42:18`. So the text is read a second time with yaml-rust2's event parser, and
//! every node's start is recorded under its field path (`backends[1].servers[3].address`, the
//! same spelling serde_yaml uses in its own errors). Keys that appear twice in one mapping are
//! noticed here too, with both positions, which serde_yaml reports only vaguely.

use std::collections::HashMap;

// Every node's path is hashed two or three times (its value, its key, its mapping's duplicate
// check): foldhash instead of std's SipHash, with each key's path built once, takes reading
// back lb-watcher's 10,000-server file (1 MB) from 80 to 70 ms. It is seeded per process, and
// these are configuration files, not network input.
use foldhash::fast::RandomState;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// A 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

impl Pos {
    pub const START: Pos = Pos { line: 1, column: 1 };

    fn of(mark: Marker) -> Pos {
        // yaml-rust2 counts lines from 1 but columns from 0.
        Pos { line: mark.line(), column: mark.col() + 1 }
    }
}

/// A key seen twice in the same mapping.
#[derive(Debug, Clone)]
pub struct DuplicateKey {
    pub path: String,
    pub first: Pos,
    pub again: Pos,
}

/// Field path → position, for every node of the first document.
#[derive(Debug, Default)]
pub struct Locations {
    values: HashMap<String, Pos, RandomState>,
    keys: HashMap<String, Pos, RandomState>,
    pub duplicate_keys: Vec<DuplicateKey>,
}

impl Locations {
    /// Records what it can: on a syntax error the nodes before it are still located (serde_yaml
    /// reports the error itself).
    pub fn scan(text: &str) -> Locations {
        let mut walker = Walker { stack: Vec::new(), locations: Locations::default(), done: false };
        // Events are pulled one at a time rather than through `Parser::load`, which recurses
        // once per nesting level of block collections and so can overflow the stack.
        let mut parser = Parser::new_from_str(text);
        while !walker.done {
            match parser.next_token() {
                Ok((event, mark)) => {
                    let end = event == Event::StreamEnd;
                    walker.on_event(event, mark);
                    walker.done |= end;
                }
                // serde_yaml reports syntax errors itself.
                Err(_) => break,
            }
        }
        walker.locations
    }

    /// Where the value at `path` starts, or else where its nearest located ancestor starts.
    pub fn value(&self, path: &str) -> Pos {
        let mut path = path;
        loop {
            if let Some(pos) = self.values.get(path) {
                return *pos;
            }
            match parent(path) {
                Some(up) => path = up,
                None => return Pos::START,
            }
        }
    }

    /// Where the key naming `path` is written, for complaints about the key itself.
    pub fn key(&self, path: &str) -> Pos {
        self.keys.get(path).copied().unwrap_or_else(|| self.value(path))
    }
}

/// `a.b[2]` → `a.b` → `a` → `` → none.
fn parent(path: &str) -> Option<&str> {
    if path.is_empty() {
        return None;
    }
    Some(path.rfind(['.', '[']).map_or("", |cut| &path[..cut]))
}

pub fn child(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

pub fn item(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

enum Frame {
    Map {
        path: String,
        start: Marker,
        /// The path of the key whose value comes next, with where the key was written.
        key: Option<(String, Pos)>,
        seen: HashMap<String, Pos, RandomState>,
        first_key: bool,
    },
    Seq {
        path: String,
        next: usize,
    },
    /// Inside a complex (non-scalar) key: nothing is recorded until it closes.
    Skip {
        depth: usize,
    },
}

/// Walks the event stream with an explicit stack, so that no input nests deep enough to
/// overflow ours.
struct Walker {
    stack: Vec<Frame>,
    locations: Locations,
    done: bool,
}

impl Walker {
    fn record(&mut self, path: String, pos: Pos) {
        self.locations.values.insert(path, pos);
    }

    /// The path of the node this event starts, or `None` when the event is a mapping key
    /// (handled here) or inside a skipped key.
    fn slot(&mut self, ev: &Event, mark: Marker) -> Option<(String, Option<Pos>)> {
        let Some(top) = self.stack.last_mut() else {
            return Some((String::new(), None));
        };
        match top {
            Frame::Skip { depth } => {
                match ev {
                    Event::MappingStart(..) | Event::SequenceStart(..) => *depth += 1,
                    Event::MappingEnd | Event::SequenceEnd => *depth = depth.saturating_sub(1),
                    _ => {}
                }
                if *depth == 0 {
                    self.stack.pop();
                }
                None
            }
            Frame::Seq { path, next } => {
                let path = item(path, *next);
                *next += 1;
                Some((path, None))
            }
            Frame::Map { key, .. } if key.is_some() => key.take().map(|(full, key_pos)| (full, Some(key_pos))),
            Frame::Map { path, start, key, seen, first_key } => {
                let pos = Pos::of(mark);
                let name = match ev {
                    Event::Scalar(text, ..) => text.clone(),
                    _ => "?".to_owned(),
                };
                let full = child(path, &name);
                if let Some(first) = seen.get(&name) {
                    self.locations.duplicate_keys.push(DuplicateKey { path: full.clone(), first: *first, again: pos });
                } else {
                    seen.insert(name, pos);
                }
                // A block mapping's start mark lands just after its first key; a flow
                // mapping's is its `{`. Whichever comes first is where the mapping starts.
                if *first_key && mark.index() < start.index() {
                    let map_path = path.clone();
                    self.locations.values.insert(map_path, pos);
                }
                *first_key = false;
                self.locations.keys.insert(full.clone(), pos);
                *key = Some((full, pos));
                if matches!(ev, Event::MappingStart(..) | Event::SequenceStart(..)) {
                    self.stack.push(Frame::Skip { depth: 1 });
                }
                None
            }
        }
    }
}

impl MarkedEventReceiver for Walker {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.done {
            return;
        }
        match ev {
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentStart => return,
            Event::DocumentEnd => {
                self.done = true;
                return;
            }
            Event::MappingEnd | Event::SequenceEnd if !matches!(self.stack.last(), Some(Frame::Skip { .. })) => {
                self.stack.pop();
                return;
            }
            _ => {}
        }
        let Some((path, key_pos)) = self.slot(&ev, mark) else {
            return;
        };
        let pos = match (&ev, key_pos) {
            // `key:` with nothing after it: the empty value is "found" at the next token, often
            // on a later line, so point at the key instead.
            (Event::Scalar(text, TScalarStyle::Plain, ..), Some(key_pos)) if text.is_empty() => key_pos,
            _ => Pos::of(mark),
        };
        match ev {
            Event::MappingStart(..) => {
                self.record(path.clone(), pos);
                self.stack.push(Frame::Map { path, start: mark, key: None, seen: HashMap::default(), first_key: true });
            }
            Event::SequenceStart(..) => {
                self.record(path.clone(), pos);
                self.stack.push(Frame::Seq { path, next: 0 });
            }
            _ => self.record(path, pos),
        }
    }
}
