//! Getting a new server list into the running lb-proxy: runtime commands over the control
//! socket for membership changes (no new worker), else a reload.
//!
//! The file is always written first, so that it stays the single reference: a restart from it
//! gives the state the runtime commands produced. Membership changes are: a server to add
//! (`add server`, then `set server … state ready`), a server gone (`set server … state drain`,
//! then `del server` once idle, retried at each drift check), a drained server back. Anything
//! else (an address or weight that differs, a runtime command refused, no runtime socket) is a
//! reload: the configured command with its exit status checked, or the control socket's
//! reload; failures are retried with backoff.

mod state;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use lb_supervisor::{control, Request, Response};

use crate::config::{Proxy, Service};
use crate::hysteresis::Sets;
use crate::Error;
pub use state::{parse_servers_state, RunningServer};

/// How a change reached lb-proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Runtime commands, this many; no new worker.
    Runtime { commands: usize },
    /// No command to send, but this many drained servers still hold connections: their `del
    /// server` waits for the next drift check. Not in step yet.
    Draining { waiting: usize },
    /// Nothing to do: lb-proxy already runs the file's servers.
    InSync,
}

/// Talks to one lb-proxy.
#[derive(Debug, Clone)]
pub struct Applier {
    pub control_socket: PathBuf,
    pub settings: Proxy,
}

const RUNTIME_TIMEOUT: Duration = Duration::from_secs(10);
/// A request line's share of the control socket's 64 KiB limit.
const BATCH_BYTES: usize = 48 * 1024;

impl Applier {
    /// One runtime command; its output, or [`Error::Runtime`] when refused or not delivered.
    pub async fn runtime(&self, line: &str) -> Result<String, Error> {
        let request = Request::Runtime { line: line.to_owned() };
        let refused = |message: String| Error::Runtime { line: line.to_owned(), message };
        let answer = tokio::time::timeout(RUNTIME_TIMEOUT, control::call(&self.control_socket, &request))
            .await
            .map_err(|_| refused(format!("no answer within {RUNTIME_TIMEOUT:?}")))?
            .map_err(|e| refused(e.to_string()))?;
        match answer {
            Response::Runtime { output } => match refusal(&output) {
                Some(message) => Err(refused(message.to_owned())),
                None => Ok(output),
            },
            Response::Error { message } => Err(refused(message)),
            other => Err(refused(format!("unexpected answer {other:?}"))),
        }
    }

    /// `show servers state BACKEND`.
    pub async fn running(&self, backend: &str) -> Result<Vec<RunningServer>, Error> {
        let line = format!("show servers state {backend}");
        let output = self.runtime(&line).await?;
        parse_servers_state(&output).map_err(|message| Error::Runtime { line, message })
    }

    /// Brings the running servers of the watched backends to `sets` with runtime commands: adds,
    /// drains and deletes, moves (`set server … addr`) and re-weights. Fails (and the caller
    /// reloads) on any refused command, except `del server` of a draining server, which waits
    /// for its connections to end. The commands go many to a request (HAProxy's `;`), so that a
    /// change of a thousand servers is a few round trips, not thousands.
    pub async fn membership(&self, services: &[Service], sets: &Sets) -> Result<Applied, Error> {
        let (mut changes, mut deletes) = (Vec::new(), Vec::new());
        for service in services {
            let Some(wanted) = sets.get(&service.backend) else { continue };
            let backend = &service.backend;
            let running = self.running(backend).await?;
            let by_name: HashMap<&str, &RunningServer> = running.iter().map(|r| (r.name.as_str(), r)).collect();
            for (name, member) in wanted {
                let id = format!("{backend}/{name}");
                match by_name.get(name.as_str()) {
                    None => {
                        let mut line = format!("add server {id} {}", member.address);
                        if service.check {
                            line.push_str(" check");
                        }
                        line.push_str(&format!(" weight {}", member.weight));
                        if let Some(slowstart) = service.slowstart {
                            line.push_str(&format!(" slowstart {}", lb_config::format_duration(slowstart)));
                        }
                        changes.push(line);
                        changes.push(format!("set server {id} state ready"));
                    }
                    Some(r) => {
                        // Moved (a registrar that came back on another port or address) or
                        // re-weighted: changed in place, its connections made to the old
                        // address are not reused (lb-proxy's `set server … addr`), no reload.
                        if r.address != member.address {
                            let (ip, port) = (member.address.ip(), member.address.port());
                            changes.push(format!("set server {id} addr {ip} port {port}"));
                        }
                        if r.weight != member.weight {
                            changes.push(format!("set weight {id} {}", member.weight));
                        }
                        if r.drain || r.maint {
                            changes.push(format!("set server {id} state ready"));
                        }
                    }
                }
            }
            for r in running.iter().filter(|r| !wanted.contains_key(&r.name)) {
                let id = format!("{backend}/{}", r.name);
                if !r.drain && !r.maint {
                    changes.push(format!("set server {id} state drain"));
                }
                deletes.push(format!("del server {id}"));
            }
        }
        for (line, result) in changes.iter().zip(self.batch(&changes).await?) {
            if let Err(message) = result {
                return Err(Error::Runtime { line: line.clone(), message });
            }
        }
        let (mut commands, mut waiting) = (changes.len(), 0);
        for (line, result) in deletes.iter().zip(self.batch(&deletes).await?) {
            match result {
                Ok(()) => commands += 1,
                // Refused while connections remain: the next drift check tries again.
                Err(message) => {
                    tracing::debug!("runtime command `{line}`: {message} (deleted later, once idle)");
                    waiting += 1;
                }
            }
        }
        Ok(match (commands, waiting) {
            (0, 0) => Applied::InSync,
            (0, waiting) => Applied::Draining { waiting },
            (commands, _) => Applied::Runtime { commands },
        })
    }

    /// Runs `lines`, as many to a request as fit; each one's outcome (its refusal message).
    /// Fails when a request is not answered, or its answer cannot be told apart by command.
    async fn batch(&self, lines: &[String]) -> Result<Vec<Result<(), String>>, Error> {
        let mut outcomes = Vec::with_capacity(lines.len());
        let mut rest = lines;
        while !rest.is_empty() {
            let mut size = 0;
            let n = rest.iter().take_while(|l| {
                size += l.len() + 2;
                size <= BATCH_BYTES
            });
            let n = n.count().max(1);
            let (chunk, after) = rest.split_at(n);
            rest = after;
            let line = chunk.join("; ");
            let request = Request::Runtime { line: line.clone() };
            let failed = |message: String| Error::Runtime { line: chunk[0].clone(), message };
            let answer = tokio::time::timeout(RUNTIME_TIMEOUT, control::call(&self.control_socket, &request))
                .await
                .map_err(|_| failed(format!("no answer within {RUNTIME_TIMEOUT:?}")))?
                .map_err(|e| failed(e.to_string()))?;
            match answer {
                // Every command succeeded (a single one may still say it refused).
                Response::Runtime { output } if chunk.len() == 1 => {
                    outcomes.push(refusal(&output).map_or(Ok(()), |m| Err(m.to_owned())));
                }
                Response::Runtime { .. } => outcomes.extend(chunk.iter().map(|_| Ok(()))),
                Response::Error { message } if chunk.len() == 1 => outcomes.push(Err(message.trim().to_owned())),
                // Some refused: each command's answer is followed by an empty line.
                Response::Error { message } => {
                    // A silent success is an empty answer, kept in its place.
                    let answers = lb_supervisor::unframe(&message);
                    if answers.len() != chunk.len() {
                        return Err(failed(format!(
                            "{} answers to {} commands: {message}",
                            answers.len(),
                            chunk.len()
                        )));
                    }
                    outcomes.extend(answers.iter().map(|a| refusal(a).map_or(Ok(()), |m| Err(m.to_owned()))));
                }
                other => return Err(failed(format!("unexpected answer {other:?}"))),
            }
        }
        Ok(outcomes)
    }

    /// Reloads lb-proxy, retrying with backoff; the error of the last attempt.
    pub async fn reload(&self) -> Result<(), Error> {
        let mut delay = Duration::from_millis(500);
        let mut attempt = 0;
        loop {
            match self.reload_once().await {
                Ok(()) => return Ok(()),
                Err(e) if attempt >= self.settings.reload_retries => return Err(e),
                Err(e) => {
                    tracing::warn!("{e}; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(30));
                    attempt += 1;
                }
            }
        }
    }

    async fn reload_once(&self) -> Result<(), Error> {
        let timeout = self.settings.reload_timeout;
        let failed = |message: String| Error::Reload { message };
        match &self.settings.reload_command {
            Some(argv) => {
                let mut command = tokio::process::Command::new(&argv[0]);
                command.args(&argv[1..]).stdin(std::process::Stdio::null()).kill_on_drop(true);
                let output = tokio::time::timeout(timeout, command.output())
                    .await
                    .map_err(|_| failed(format!("`{}` did not finish within {timeout:?}", argv.join(" "))))?
                    .map_err(|e| failed(format!("cannot run `{}`: {e}", argv.join(" "))))?;
                if output.status.success() {
                    Ok(())
                } else {
                    let stderr = String::from_utf8_lossy(&output.stderr);
                    Err(failed(format!("`{}` exited with {}: {}", argv.join(" "), output.status, stderr.trim())))
                }
            }
            None => {
                let call = control::call(&self.control_socket, &Request::Reload);
                match tokio::time::timeout(timeout, call).await {
                    Err(_) => Err(failed(format!("no answer within {timeout:?}"))),
                    Ok(Err(e)) => Err(failed(e.to_string())),
                    Ok(Ok(Response::Reloaded { .. })) => Ok(()),
                    Ok(Ok(Response::ReloadFailed { error })) => Err(failed(error)),
                    Ok(Ok(other)) => Err(failed(format!("unexpected answer {other:?}"))),
                }
            }
        }
    }
}

/// A one-line answer that says the command was refused (HAProxy's wording and lb-proxy's):
/// the message; `None` for success (nothing, or an acknowledgement).
fn refusal(output: &str) -> Option<&str> {
    let text = output.trim();
    if text.is_empty() || text.contains('\n') {
        return None;
    }
    let lower = text.to_ascii_lowercase();
    const WORDS: [&str; 10] =
        ["error", "unknown", "no such", "not ", "cannot", "can't", "refused", "invalid", "require", "must"];
    WORDS.iter().any(|w| lower.contains(w)).then_some(text)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use lb_testkit::{client, ProxyProcess, TestServer};

    use super::{refusal, Applied, Applier};
    use crate::config::{NodeFormat, Proxy, Service};
    use crate::node::Member;

    /// A drained server that a keep-alive client still holds is not "in step": the drift check
    /// must keep its deletion pending, else the `del server` that finally succeeds is taken
    /// for lb-proxy drifting from the file (a false warning, seen in scripts/fleet).
    /// The deletions go in one request: lb-proxy's answer to it is told apart by command (one
    /// refused, one done).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_drained_server_still_held_is_draining_not_in_sync() {
        let web1 = TestServer::start("web1");
        let web2 = TestServer::start("web2");
        let web3 = TestServer::start("web3");
        let (addr, addr3) = (web1.addr(), web3.addr());
        let proxy = ProxyProcess::start_with(1, |ports| {
            format!(
                "global:\n  worker_threads: 1\n\
                 defaults:\n  timeouts: {{ connect: 2s, client: 30s, server: 30s, http_keep_alive: 30s }}\n\
                 frontends:\n  - name: fe\n    bind: [\"127.0.0.1:{}\"]\n    default_backend: api\n\
                 backends:\n  - name: api\n    servers: [ {{ name: web1, address: \"{addr}\" }}, \
                 {{ name: web3, address: \"{addr3}\", weight: 0 }} ]\n",
                ports[0]
            )
        });
        // A keep-alive client (web3, of weight 0, takes none): lb-proxy pins its server
        // connection to web1 (`http_reuse: never`).
        let mut held = client::Connection::open(proxy.addr()).await.expect("a client connection");
        let answer = held.get("/").await.expect("a response");
        assert_eq!(answer.server(), Some("web1"));

        let applier = Applier {
            control_socket: proxy.control_socket().to_path_buf(),
            settings: Proxy {
                base: proxy.config_path().to_path_buf(),
                config: proxy.config_path().to_path_buf(),
                control_socket: None,
                reload_command: None,
                runtime: true,
                reload_retries: 0,
                reload_timeout: Duration::from_secs(10),
                drift_check: Duration::from_secs(30),
            },
        };
        let services = [Service {
            backend: "api".into(),
            path: "/api".into(),
            format: NodeFormat::Registrar,
            record_type: "load_balancer".into(),
            port: None,
            check: false,
            weight: 100,
            slowstart: None,
        }];
        let wanted = BTreeMap::from([("web2".to_owned(), Member { address: web2.addr(), weight: 100 })]);
        let sets = BTreeMap::from([("api".to_owned(), wanted)]);

        // web2 added and made ready, web1 and web3 drained; web3 deleted, web1's deletion refused
        // while the client holds it.
        let first = applier.membership(&services, &sets).await.expect("runtime commands");
        assert_eq!(first, Applied::Runtime { commands: 5 });
        // What the next drift check sees: nothing to send, web1 still there.
        let again = applier.membership(&services, &sets).await.expect("runtime commands");
        assert_eq!(again, Applied::Draining { waiting: 1 });

        drop(held);
        let mut deleted = None;
        for _ in 0..100 {
            match applier.membership(&services, &sets).await.expect("runtime commands") {
                Applied::Draining { .. } => tokio::time::sleep(Duration::from_millis(50)).await,
                other => {
                    deleted = Some(other);
                    break;
                }
            }
        }
        assert_eq!(deleted, Some(Applied::Runtime { commands: 1 }), "web1 deleted once the client left");
        assert_eq!(applier.membership(&services, &sets).await.expect("runtime commands"), Applied::InSync);
    }

    #[test]
    fn refusals() {
        assert_eq!(refusal(""), None);
        assert_eq!(refusal("New server registered.\n"), None);
        assert_eq!(refusal("Server deleted.\n"), None);
        assert!(refusal("No such server.\n").is_some());
        assert!(refusal("Server still has connections attached to it, cannot remove it.\n").is_some());
        assert!(refusal("Unknown command: 'add'\n").is_some());
        assert_eq!(refusal("1\n# be_id be_name\n"), None);
    }
}
