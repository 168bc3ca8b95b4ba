//! For the fuzzer (`fuzz/`, target `runtime_command`): the runtime commands answered by a
//! process state built from a configuration as a worker builds it, but with no socket, no log
//! and no health check running, so that one fuzz input costs microseconds and leaves nothing
//! behind. The checks of what the answers say are here, next to the parser they check.

use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;

use lb_config::{Config, LogTarget};
use lb_supervisor::{RuntimeResult, ShutdownHandle};

use super::servers::{parse_weight_for, server_config};
use super::ProxyRuntime;
use crate::backend::Backends;
use crate::counters::Counters;
use crate::limit::Limit;
use crate::log::Logger;
use crate::pool::Pool;
use crate::state::{FrontendState, Proxy};

/// A fresh process state answering runtime commands (see the module's comment).
#[doc(hidden)]
#[derive(Debug)]
pub struct FuzzRuntime {
    runtime: ProxyRuntime,
    /// Kept so that the state's shutdown never reads as "stopped" while commands run.
    _handle: ShutdownHandle,
}

impl FuzzRuntime {
    /// The state `start` would build for `config`. Health checks start only within a tokio
    /// runtime (`add server … check` included): the fuzzer calls this outside one, so no check
    /// ever connects to the addresses it makes up.
    pub fn new(config: &Config) -> std::io::Result<FuzzRuntime> {
        // No log at all: the runtime commands write none, and a stdout log has a writer thread.
        let log = lb_config::Log { target: LogTarget::None, ..config.global.log.clone() };
        let backends = Backends::new(config);
        let max = config.global.max_connections;
        let patterns = Arc::new(crate::policy::Patterns::new(&config.policy));
        let tables = crate::tables::Tables::new(&config.tables);
        let frontends = config
            .frontends
            .iter()
            .map(|fe| FrontendState::new(fe, &backends, max, &config.policy, &patterns, &tables).map(Arc::new))
            .collect::<Result<_, _>>()
            .map_err(std::io::Error::other)?;
        let (handle, shutdown) = lb_supervisor::shutdown_channel();
        let proxy = Arc::new(Proxy {
            backends,
            logger: Logger::new(&log)?,
            pool: Pool::default(),
            close_spread: Duration::ZERO,
            actconn: AtomicUsize::new(0),
            limit: Limit::new(max),
            hard_max_connections: max,
            conn_rate_limit: AtomicU64::new(0),
            patterns,
            counters: Counters::default(),
            frontends,
            tables,
            threads: 1,
            started: std::time::Instant::now(),
            started_at: std::time::SystemTime::now(),
            runtime_name: "lb-proxy".to_owned(),
            shutdown: shutdown.clone(),
            counters_ready: tokio::sync::watch::Sender::new(true),
        });
        Ok(FuzzRuntime { runtime: ProxyRuntime::new(proxy, shutdown), _handle: handle })
    }

    /// One line as the runtime socket takes it (commands split on `;` and newlines), each
    /// answered.
    ///
    /// # Panics
    /// When an answer breaks a promise of the runtime API: a refusal that does not say why in
    /// one line, an `add server` whose arguments, written out again, parse differently, or a
    /// weight set that is not the weight read back. Never on a malformed command as such.
    pub fn line(&self, line: &str) -> Vec<RuntimeResult> {
        lb_supervisor::split_commands(line).iter().map(|command| self.command(command)).collect()
    }

    fn command(&self, command: &str) -> RuntimeResult {
        let words: Vec<&str> = command.split_whitespace().collect();
        if let ["add", "server", target, args @ ..] = words.as_slice() {
            add_server_round_trip(target, args);
        }
        let result = self.runtime.run(command);
        if result.ok {
            if let ["set", "server", target, "weight", weight] | ["set", "weight", target, weight] = words.as_slice() {
                self.weight_reads_back(target, weight);
            }
        } else {
            let why = result.output.trim_end();
            assert!(!why.is_empty() && !why.contains('\n'), "`{command}` refused with {:?}", result.output);
        }
        result
    }

    /// `get weight` after a `set weight` that was taken: the weight asked for.
    fn weight_reads_back(&self, target: &str, asked: &str) {
        let got = self.runtime.run(&format!("get weight {target}"));
        // `<current> (initial <configured>)`
        let numbers: Vec<u32> = got
            .output
            .split(|c: char| !c.is_ascii_digit())
            .filter(|n| !n.is_empty())
            .map(|n| n.parse().unwrap_or(u32::MAX))
            .collect();
        let [current, initial] = numbers[..] else {
            panic!("`get weight {target}` after `set weight {asked}` answered {got:?}");
        };
        assert_eq!(Ok(current), parse_weight_for(asked, initial), "`set weight {target} {asked}`, then {got:?}");
    }
}

/// An `add server` command parses to a server; written out again as a command, it parses to the
/// same server.
fn add_server_round_trip(target: &str, args: &[&str]) {
    let Some((_, name)) = target.split_once('/') else { return };
    let Ok(server) = server_config(name, args) else { return };
    let mut again = vec![server.address.to_string()];
    if server.check {
        again.push("check".to_owned());
    }
    again.extend(["weight".to_owned(), server.weight.to_string()]);
    if let Some(slowstart) = server.slowstart {
        again.extend(["slowstart".to_owned(), format!("{}ms", slowstart.as_millis())]);
    }
    let again_words: Vec<&str> = again.iter().map(String::as_str).collect();
    assert_eq!(
        server_config(name, &again_words),
        Ok(server),
        "`add server {target} {}` written as {again:?}",
        args.join(" ")
    );
}

#[cfg(test)]
mod tests {
    use super::FuzzRuntime;

    const CONFIG: &str = "frontends: [ { name: web, bind: [ \"127.0.0.1:8080\" ], default_backend: app } ]\n\
                          backends: [ { name: app, servers: [ { name: a1, address: \"10.0.0.1:80\", weight: 10 } ] } ]\n";

    #[test]
    fn commands_are_answered_and_checked() {
        let config = lb_config::Config::parse(CONFIG, "t.yaml").unwrap_or_else(|e| panic!("{e}"));
        let runtime = FuzzRuntime::new(&config).unwrap_or_else(|e| panic!("{e}"));
        let results = runtime.line("set weight app/a1 50%; get weight app/a1; add server app/a2 10.0.0.2:80 check weight 3 slowstart 2m; nonsense");
        let outputs: Vec<(bool, &str)> = results.iter().map(|r| (r.ok, r.output.as_str())).collect();
        assert_eq!(&outputs[..3], [(true, ""), (true, "5 (initial 10)"), (true, "New server registered.")]);
        assert!(!outputs[3].0 && outputs[3].1.starts_with("Unknown command"), "{outputs:?}");
    }
}
