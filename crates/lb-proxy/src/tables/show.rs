//! The runtime commands on tables, in HAProxy's words and output:
//!
//! ```text
//! show table
//! # table: per_ip, type: ip, size:1048576, used:2
//! show table per_ip [data.<type> <op> <value>]... | [key <key>]
//! # table: per_ip, type: ip, size:1048576, used:2
//! 0x1000002a: key=192.0.2.7 use=0 exp=599873 shard=1 http_req_rate(10000)=12 conn_cur=0
//! clear table per_ip [data.<type> <op> <value>]... | [key <key>]
//! set table per_ip key <key> [data.<type> <value>]...
//! set fleet share 3
//! show table
//! # table: fleet_ip, type: ip, size:1048576, used:2, share:3
//! ```
//!
//! `set fleet share N` divides the limits of every `fleet: true` table by N (the live nodes);
//! the header of such a table says its share.
//!
//! `exp` is milliseconds until the entry expires; the first column identifies the entry
//! (shard and slot), as HAProxy prints the entry's address. A `limit_req` bucket shows as
//! `limit_req=N`, its excess in requests.

use std::fmt::Write as _;

use lb_config::{CmpOp, DataType};

use super::{Key, Now, Row, Table, Tables};

/// Refusals, as HAProxy words them.
const NO_TABLE: &str = "No such table.";
const UNKNOWN_DATA: &str = "Unknown data type";
const NOT_STORED: &str = "Data type not stored in this table";
const NEED_OPERATOR: &str = "Require and operator among \"eq\", \"ne\", \"le\", \"ge\", \"lt\", \"gt\"";
const NEED_INT_COMPARE: &str = "Require a valid integer value to compare against";
const NEED_INT_STORE: &str = "Require a valid integer value to store";
const IN_USE: &str = "Entry currently in use, cannot remove";
const OPTIONAL: &str = "Optional argument only supports \"data.<store_data_type>\" <operator> <value> and key <key>";

/// `show table …`, `clear table …`, `set table …`: the output, or the one line saying why not.
pub(crate) fn command(tables: &Tables, words: &[&str]) -> Option<Result<String, String>> {
    Some(match words {
        ["show", "table"] => Ok(tables.iter().map(|t| header(t) + "\n").collect()),
        ["show", "table", name, rest @ ..] => with_table(tables, name, |t| show(t, rest)),
        ["clear", "table", name, rest @ ..] => with_table(tables, name, |t| clear(t, rest)),
        ["clear", "table"] => Err("'clear table' expects a table name.".into()),
        ["set", "table", name, rest @ ..] => with_table(tables, name, |t| set(t, rest)),
        ["set", "fleet", "share", n] => set_share(tables, n),
        ["set", "fleet", ..] => Err("'set fleet' expects 'share <n>'.".into()),
        ["set", "table"] => Err("'set table' expects a table name.".into()),
        _ => return None,
    })
}

fn with_table(tables: &Tables, name: &str, f: impl FnOnce(&Table) -> Result<String, String>) -> Result<String, String> {
    tables.get(name).ok_or_else(|| NO_TABLE.to_owned()).and_then(|t| f(t))
}

fn header(table: &Table) -> String {
    let mut out = format!(
        "# table: {}, type: {}, size:{}, used:{}",
        table.name(),
        table.config.key.word(),
        table.config.size,
        table.used()
    );
    if table.config.fleet {
        let _ = write!(out, ", share:{}", table.share());
    }
    out
}

/// `set fleet share <n>`: the live nodes of the fleet, dividing every fleet table's limits.
fn set_share(tables: &Tables, n: &str) -> Result<String, String> {
    match n.parse::<u32>() {
        Ok(n) if n >= 1 => {
            tables.set_share(n);
            Ok(String::new())
        }
        _ => Err(format!("'set fleet share' expects the number of live nodes (1 or more), got '{n}'.")),
    }
}

/// What selects entries: every filter must hold, or one key.
#[derive(Debug)]
enum Selection {
    Filters(Vec<(DataType, CmpOp, i64)>),
    Key(Key),
}

fn selection(table: &Table, args: &[&str]) -> Result<Selection, String> {
    match args {
        ["key", key] => Key::parse(&table.config.key, key).map(Selection::Key),
        _ => {
            let mut filters = Vec::new();
            for chunk in args.chunks(3) {
                let [data, op, value] = chunk else { return Err(OPTIONAL.into()) };
                let data = data_type(table, data)?;
                let op = CmpOp::KEYWORDS.iter().find(|(k, _)| k == op).map(|(_, o)| *o).ok_or(NEED_OPERATOR)?;
                let value: i64 = value.parse().map_err(|_| NEED_INT_COMPARE)?;
                filters.push((data, op, value));
            }
            Ok(Selection::Filters(filters))
        }
    }
}

/// `data.<type>`, stored in this table.
fn data_type(table: &Table, word: &str) -> Result<DataType, String> {
    let name = word.strip_prefix("data.").ok_or(OPTIONAL)?;
    let data = DataType::parse(name).ok_or(UNKNOWN_DATA)?;
    if !table.layout.stores(data) {
        return Err(NOT_STORED.into());
    }
    Ok(data)
}

fn selected(selection: &Selection, key: &Key, row: &Row<'_>) -> bool {
    match selection {
        Selection::Key(wanted) => wanted == key,
        Selection::Filters(filters) => filters.iter().all(|(data, op, value)| {
            let got = row.get(*data).map_or(0, |v| i64::try_from(v).unwrap_or(i64::MAX));
            op.holds(got, *value)
        }),
    }
}

fn show(table: &Table, args: &[&str]) -> Result<String, String> {
    let selection = selection(table, args)?;
    let mut out = header(table) + "\n";
    table.for_each(Now::read(), |id, key, refs, exp, row| {
        if selected(&selection, key, row) {
            let _ =
                write!(out, "0x{id:x}: key={} use={refs} exp={exp} shard={}", key.display(&table.config.key), id >> 32);
            for store in &table.config.store {
                let value = row.get(store.data).unwrap_or(0);
                let _ = write!(out, " {store}={value}");
            }
            if let Some(excess) = row.excess(table.share()) {
                let _ = write!(out, " limit_req={excess}");
            }
            out.push('\n');
        }
    });
    Ok(out)
}

fn clear(table: &Table, args: &[&str]) -> Result<String, String> {
    match selection(table, args)? {
        Selection::Key(key) => match table.remove(&key) {
            Ok(_) => Ok(String::new()),
            Err(()) => Err(IN_USE.into()),
        },
        Selection::Filters(filters) if filters.is_empty() => {
            table.clear();
            Ok(String::new())
        }
        selection => {
            let mut keys = Vec::new();
            table.for_each(Now::read(), |_, key, refs, _, row| {
                if refs == 0 && selected(&selection, key, row) {
                    keys.push(key.clone());
                }
            });
            for key in keys {
                // In use since: left, as HAProxy leaves entries in use.
                let _ = table.remove(&key);
            }
            Ok(String::new())
        }
    }
}

fn set(table: &Table, args: &[&str]) -> Result<String, String> {
    let ["key", key, data @ ..] = args else {
        return Err("'set table' expects 'key <key>' then 'data.<type> <value>' pairs.".into());
    };
    let key = Key::parse(&table.config.key, key)?;
    let mut values = Vec::new();
    for pair in data.chunks(2) {
        let [data, value] = pair else { return Err("\"data.<type>\" followed by a value expected".into()) };
        if !data.starts_with("data.") {
            return Err("\"data.<type>\" followed by a value expected".into());
        }
        let data = data_type(table, data)?;
        let value: u64 = value.parse().map_err(|_| NEED_INT_STORE)?;
        values.push((data, value));
    }
    table
        .update(&key, Now::read(), |row, _| {
            for (data, value) in values {
                row.set(data, value);
            }
        })
        .ok_or_else(|| "Unable to allocate a new entry".to_owned())?;
    Ok(String::new())
}
