//! Conditions as written (a name, `all`/`any`/`not`, or `{ FETCH: MATCH }`) → [`Condition`].

use serde_yaml::{Mapping, Value};

use super::{keys_of, scalar_text, Names};
use crate::check::Checker;
use crate::locate::{child, item};
use crate::policy::{Cidr, CmpOp, Compare, Condition, Fetch, ListKind, Matcher, Pattern, Test};

const FETCHES: &str = "method, path, uri, query, host, header, cookie, src, src_port, frontend, sni, alpn, \
                       tls_version, tls_cipher, status, response_header, sc0, sc1, sc2";

/// A condition at `path`; `None` (reported) when it is not one.
pub(in crate::validate) fn condition(
    ctx: &mut Checker<'_>,
    path: &str,
    value: &Value,
    names: &Names<'_>,
) -> Option<Condition> {
    match value {
        Value::String(name) => {
            if names.conditions.contains(name) {
                Some(Condition::Named(name.clone()))
            } else {
                let known = names.conditions.iter().map(String::as_str).collect::<Vec<_>>().join(", ");
                let known = if known.is_empty() {
                    "none is defined under `conditions`".to_owned()
                } else {
                    format!("known: {known}")
                };
                ctx.error(path, format!("no condition named `{name}` ({known})"));
                None
            }
        }
        Value::Mapping(map) if map.len() == 1 => {
            let (key, inner) = map.iter().next()?;
            let Some(key) = key.as_str() else {
                ctx.error(path, "a condition's key must be text");
                return None;
            };
            let inner_path = child(path, key);
            match key {
                "all" | "any" => {
                    let Value::Sequence(items) = inner else {
                        ctx.error(&inner_path, format!("`{key}` takes a list of conditions"));
                        return None;
                    };
                    let conditions: Vec<_> = items
                        .iter()
                        .enumerate()
                        .map(|(i, c)| condition(ctx, &item(&inner_path, i), c, names))
                        .collect::<Option<_>>()?;
                    Some(if key == "all" { Condition::All(conditions) } else { Condition::Any(conditions) })
                }
                "not" => Some(Condition::Not(Box::new(condition(ctx, &inner_path, inner, names)?))),
                _ => match Fetch::KEYS.iter().find(|(k, _)| *k == key) {
                    Some(&(_, needs_name)) => {
                        test(ctx, &inner_path, key, needs_name, inner, names).map(Condition::Test)
                    }
                    None => {
                        ctx.error(
                            path,
                            format!("unknown condition `{key}`: expected a fetch ({FETCHES}), `all`, `any`, `not`, or a condition's name"),
                        );
                        None
                    }
                },
            }
        }
        Value::Mapping(map) => {
            let keys = keys_of(map);
            ctx.error(path, format!("a condition has exactly one key (a fetch, `all`, `any` or `not`); found {keys}"));
            None
        }
        _ => {
            ctx.error(path, "expected a condition: a condition's name, or a map such as `{ path: { prefix: /api } }`");
            None
        }
    }
}

/// `{ FETCH: MATCH }`'s MATCH: a scalar (equals; for `src` an address or network) or a map of
/// `name`, `ignore_case` and one matcher.
fn test(
    ctx: &mut Checker<'_>,
    path: &str,
    key: &str,
    needs_name: bool,
    value: &Value,
    names: &Names<'_>,
) -> Option<Test> {
    let map = match value {
        Value::Mapping(map) => map,
        scalar => {
            if needs_name {
                ctx.error(path, format!("`{key}` needs a `name`: write `{key}: {{ name: …, equals: … }}`"));
                return None;
            }
            let text = scalar_text(scalar).or_else(|| {
                ctx.error(path, "expected a value or a map with a matcher");
                None
            })?;
            let fetch = Fetch::from_key(key, None)?;
            let matcher = if fetch == Fetch::Src {
                Matcher::In(vec![Pattern::Net(net(ctx, path, &text)?)])
            } else {
                Matcher::Equals(text)
            };
            return Some(Test { fetch, matcher, ignore_case: false });
        }
    };
    let mut name = None;
    let mut ignore_case = false;
    let mut matchers = Vec::new();
    for (k, v) in map {
        let Some(k) = k.as_str() else {
            ctx.error(path, "keys must be text");
            return None;
        };
        let field = child(path, k);
        match k {
            "name" => match v.as_str() {
                Some(n) if !n.trim().is_empty() && needs_name => name = Some(n.trim().to_owned()),
                Some(_) if !needs_name => ctx.error(&field, format!("`{key}` takes no `name`")),
                _ => ctx.error(&field, "expected a non-empty name"),
            },
            "ignore_case" => match v.as_bool() {
                Some(b) => ignore_case = b,
                None => ctx.error(&field, "expected true or false"),
            },
            k if crate::policy::Matcher::KEYS.contains(&k) => matchers.push((k, v, field)),
            other => {
                let known = crate::policy::Matcher::KEYS.join(", ");
                ctx.error(
                    &field,
                    format!("unknown key `{other}`: expected `name`, `ignore_case` or a matcher ({known})"),
                );
                return None;
            }
        }
    }
    if needs_name && name.is_none() {
        ctx.error(path, format!("`{key}` needs a `name` (which {key} to test)"));
        return None;
    }
    if key.starts_with("sc") && name.as_deref().and_then(crate::table::DataType::parse).is_none() {
        let name = name.unwrap_or_default();
        ctx.error(
            &child(path, "name"),
            format!("`{name}` is not a data type a table stores (http_req_rate, conn_cur, gpc0, …)"),
        );
        return None;
    }
    let fetch = Fetch::from_key(key, name)?;
    let (m, v, field) = match matchers.as_slice() {
        [one] => one.clone(),
        [] => {
            ctx.error(path, format!("no matcher: add one of {}", crate::policy::Matcher::KEYS.join(", ")));
            return None;
        }
        many => {
            let found: Vec<_> = many.iter().map(|(k, _, _)| format!("`{k}`")).collect();
            ctx.error(path, format!("one matcher per test, found {}: combine tests with `all`", found.join(", ")));
            return None;
        }
    };
    let matcher = matcher(ctx, &field, &fetch, m, v, names)?;
    Some(Test { fetch, matcher, ignore_case })
}

fn matcher(
    ctx: &mut Checker<'_>,
    field: &str,
    fetch: &Fetch,
    key: &str,
    v: &Value,
    names: &Names<'_>,
) -> Option<Matcher> {
    let is_src = *fetch == Fetch::Src;
    let text = |ctx: &mut Checker<'_>| {
        scalar_text(v).or_else(|| {
            ctx.error(field, format!("`{key}` takes a value"));
            None
        })
    };
    if is_src && matches!(key, "prefix" | "suffix" | "contains" | "regex" | "count") {
        ctx.error(field, format!("`src` is an address: use `in`, `list`, `equals` or `exists`, not `{key}`"));
        return None;
    }
    Some(match key {
        "equals" if is_src => {
            let t = text(ctx)?;
            Matcher::In(vec![Pattern::Net(net(ctx, field, &t)?)])
        }
        "equals" => Matcher::Equals(text(ctx)?),
        "prefix" => Matcher::Prefix(text(ctx)?),
        "suffix" => Matcher::Suffix(text(ctx)?),
        "contains" => Matcher::Contains(text(ctx)?),
        "regex" => {
            let source = text(ctx)?;
            if let Err(e) = regex::RegexBuilder::new(&source).size_limit(1 << 20).build() {
                ctx.error(field, format!("invalid regular expression: {}", one_line(&e.to_string())));
                return None;
            }
            Matcher::Regex(source)
        }
        "exists" => match v.as_bool() {
            Some(b) => Matcher::Exists(b),
            None => {
                ctx.error(field, "expected true or false");
                return None;
            }
        },
        "in" => {
            let Value::Sequence(items) = v else {
                ctx.error(field, "`in` takes a list of values");
                return None;
            };
            let mut patterns = Vec::with_capacity(items.len());
            for (i, entry) in items.iter().enumerate() {
                let at = item(field, i);
                let Some(t) = scalar_text(entry) else {
                    ctx.error(&at, "expected a value");
                    return None;
                };
                patterns.push(if is_src { Pattern::Net(net(ctx, &at, &t)?) } else { Pattern::Text(t) });
            }
            Matcher::In(patterns)
        }
        "list" => {
            let name = text(ctx)?;
            match names.lists.get(name.as_str()) {
                None => {
                    ctx.error(field, format!("no list named `{name}` under `lists`"));
                    return None;
                }
                Some(ListKind::Ip) if !is_src => {
                    ctx.error(field, format!("list `{name}` is of type ip: only `src` is looked up in it"));
                    return None;
                }
                Some(kind) if is_src && *kind != ListKind::Ip => {
                    ctx.error(field, format!("`src` needs a list of type ip; `{name}` is of type {}", kind.keyword()));
                    return None;
                }
                Some(_) => Matcher::List(name),
            }
        }
        "count" => {
            if !fetch.is_multi() {
                ctx.error(field, "`count` is for header, response_header, query and cookie");
                return None;
            }
            let Value::Mapping(map) = v else {
                ctx.error(field, "`count` takes a comparison, e.g. `{ gt: 1 }`");
                return None;
            };
            Matcher::Count(comparison(ctx, field, map)?)
        }
        op => {
            let op = CmpOp::KEYWORDS.iter().find(|(k, _)| *k == op).map(|(_, o)| *o)?;
            let Some(value) = v.as_i64() else {
                ctx.error(field, format!("`{key}` takes an integer"));
                return None;
            };
            Matcher::Int(Compare { op, value })
        }
    })
}

/// `{ gt: 1 }`: one operator and an integer.
fn comparison(ctx: &mut Checker<'_>, field: &str, map: &Mapping) -> Option<Compare> {
    let [(k, v)] = map.iter().collect::<Vec<_>>()[..] else {
        ctx.error(field, "one comparison: eq, ne, gt, ge, lt or le");
        return None;
    };
    let op = k.as_str().and_then(|k| CmpOp::KEYWORDS.iter().find(|(w, _)| *w == k)).map(|(_, o)| *o);
    let Some(op) = op else {
        ctx.error(field, "one comparison: eq, ne, gt, ge, lt or le");
        return None;
    };
    let Some(value) = v.as_i64() else {
        ctx.error(field, "expected an integer");
        return None;
    };
    Some(Compare { op, value })
}

fn net(ctx: &mut Checker<'_>, field: &str, text: &str) -> Option<Cidr> {
    Cidr::parse(text).map_err(|e| ctx.error(field, e)).ok()
}

/// regex's messages span several lines (with a caret under the pattern); a diagnostic is one.
fn one_line(message: &str) -> String {
    let lines = message.lines().map(str::trim).filter(|l| !l.is_empty() && !l.chars().all(|c| c == '^'));
    lines.map(|l| l.trim_end_matches(':')).collect::<Vec<_>>().join(": ")
}

/// Whether `condition` tests the response (so it can only be used in `http_response`).
pub(in crate::validate) fn tests_response(
    condition: &Condition,
    named: &std::collections::BTreeMap<String, Condition>,
) -> bool {
    condition.any_test(named, &mut |t| t.fetch.is_response())
}
