//! The control socket, both ends: the master serves it, lbctl and lb-watcher call it.
//!
//! The protocol is line-delimited JSON over a Unix stream socket: the client writes one
//! [`Request`] followed by `\n`, the master answers one [`Response`] followed by `\n`. A
//! connection may carry several requests in sequence; each is answered before the next one is
//! read. Plain text on purpose: an operator can talk to the master with `socat` in a pinch.
//!
//! The socket is the master's only authentication: whoever can connect can reload the daemon.
//! So it is created with mode 0600 (its owner only), and never visible with wider permissions,
//! not even for an instant (see `bind`).

use std::future::Future;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use std::{fmt, fs};

use socket2::{Domain, SockAddr, Socket, Type};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use crate::{Error, Request, Response};

/// lb-proxy's control socket when its configuration does not name one: the one place this
/// default is written (lb-config's schema and lbctl both use it).
pub const DEFAULT_SOCKET: &str = "/var/run/lb/lb-proxy.sock";

/// A request line longer than this closes the connection: no request comes close, so it is a
/// confused or hostile client, and reading on would let it grow our buffer without bound.
pub(crate) const MAX_LINE: usize = 64 * 1024;

/// How long to wait before accepting again when we are out of file descriptors or memory:
/// retrying at once would spin until a connection somewhere closes.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Send `request` to the master listening on `socket` and wait for its answer.
///
/// There is no timeout: a [`Request::Reload`] is answered only once the new worker serves or
/// failed, which may take as long as the worker start timeout. Wrap the call in
/// `tokio::time::timeout` to bound it. [`connect_failed`] tells a master that cannot be reached
/// from one that was reached but did not answer.
pub async fn call(socket: &Path, request: &Request) -> Result<Response, Error> {
    let stream = UnixStream::connect(socket).await.map_err(|e| connect_error(socket, e))?;
    let (read, mut write) = stream.into_split();
    let line = encode(socket, request)?;
    write.write_all(&line).await.map_err(|e| exchange_error(socket, "sending the request", e))?;
    let mut answer = Vec::new();
    BufReader::new(read)
        .read_until(b'\n', &mut answer)
        .await
        .map_err(|e| exchange_error(socket, "reading the answer", e))?;
    decode(socket, &answer)
}

/// [`call`] for simple tools without a Tokio runtime (lbctl).
///
/// `timeout` bounds the whole exchange, connecting included; `None` waits as long as the
/// master takes (what a reload needs). A timeout is reported as an [`io::ErrorKind::TimedOut`]
/// source of [`Error::ControlSocket`].
pub fn call_blocking(socket: &Path, request: &Request, timeout: Option<Duration>) -> Result<Response, Error> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let expired = || Error::ControlSocket { path: socket.to_path_buf(), source: timed_out(timeout) };
    let line = encode(socket, request)?;
    let left = remaining(deadline).ok_or_else(|| connect_error(socket, timed_out(timeout)))?;
    let mut stream = connect_blocking(socket, left).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock => connect_error(socket, timed_out(timeout)),
        _ => connect_error(socket, e),
    })?;

    let left = remaining(deadline).ok_or_else(expired)?;
    stream.set_write_timeout(left).map_err(|e| exchange_error(socket, "sending the request", e))?;
    stream.write_all(&line).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => expired(),
        _ => exchange_error(socket, "sending the request", e),
    })?;

    // Read by hand rather than through a BufReader so that each read gets only what is left
    // of the deadline, not the whole timeout again.
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let left = remaining(deadline).ok_or_else(expired)?;
        stream.set_read_timeout(left).map_err(|e| exchange_error(socket, "reading the answer", e))?;
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&chunk[..n]);
                if chunk[..n].contains(&b'\n') {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(expired());
            }
            Err(e) => return Err(exchange_error(socket, "reading the answer", e)),
        }
    }
    if let Some(end) = answer.iter().position(|&b| b == b'\n') {
        answer.truncate(end + 1);
    }
    decode(socket, &answer)
}

/// Whether `error`, returned by [`call`] or [`call_blocking`], means the master could not be
/// reached at all: the socket file is missing, nobody listens on it, permission was denied, or
/// the connection timed out. Nothing was sent then, so nothing happened. Any other error may
/// have come after the master acted on the request (a reload whose answer was lost).
pub fn connect_failed(error: &Error) -> bool {
    match error {
        Error::ControlSocket { source, .. } => source.get_ref().is_some_and(|inner| inner.is::<ConnectFailed>()),
        _ => false,
    }
}

/// Bind the control socket at `path` with mode 0600 and listen on it.
///
/// A socket file left by a master that died is replaced; one on which a process still accepts
/// connections is not ("another master is running"), nor is anything that is not a socket.
///
/// Must be called within a Tokio runtime (the listener is registered with it).
pub(crate) fn bind(path: &Path) -> Result<UnixListener, Error> {
    let fail = |source| Error::ControlSocket { path: path.to_path_buf(), source };
    // Checked first: failing after the rename would leave a socket file nobody listens on.
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(fail(io::Error::other("bind must be called within a Tokio runtime")));
    }
    refuse_if_live(path).map_err(fail)?;
    let listener = bind_private(path).map_err(fail)?;
    listener.set_nonblocking(true).map_err(fail)?;
    UnixListener::from_std(listener).map_err(fail)
}

/// Answer requests on `listener` with `handler`, one task per connection, until accepting
/// fails for good (transient failures such as running out of file descriptors are waited
/// out). A line that is not a [`Request`] is answered with [`Response::Error`] and the
/// connection stays open; a line over 64 KiB closes it. Blank lines are skipped.
///
/// The handler may take long (a reload): its connection waits, others are served meanwhile.
/// Clients that go away do not cancel it: a reload asked for is carried out.
pub(crate) async fn serve<H, F>(listener: UnixListener, handler: H)
where
    H: Fn(Request) -> F + Clone + Send + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(connection(stream, handler.clone()));
            }
            Err(e) if is_transient(&e) => {
                tracing::warn!("control socket: accept: {e}; retrying");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
            Err(e) => {
                tracing::error!("control socket: accept: {e}; no longer serving it");
                return;
            }
        }
    }
}

/// One client: read a line, answer it, until the client closes or misbehaves.
pub(crate) async fn connection<H, F>(stream: UnixStream, handler: H)
where
    H: Fn(Request) -> F,
    F: Future<Output = Response>,
{
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    loop {
        line.clear();
        // One byte past the limit: a line of exactly MAX_LINE bytes plus its newline is fine.
        let limit = (MAX_LINE + 1) as u64;
        match (&mut reader).take(limit).read_until(b'\n', &mut line).await {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => {
                tracing::debug!("control socket: reading a request: {e}");
                return;
            }
        }
        if line.last() != Some(&b'\n') && line.len() > MAX_LINE {
            let message = format!("request line longer than {MAX_LINE} bytes; closing");
            let _ = send(&mut write, &Response::Error { message }).await;
            return;
        }
        // A line cut short by the end of the stream is still a request: answer it, then the
        // next read sees the end.
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        let response = match serde_json::from_slice::<Request>(text) {
            Ok(request) => handler(request).await,
            Err(e) => Response::Error { message: format!("malformed request: {e}") },
        };
        if let Err(e) = send(&mut write, &response).await {
            tracing::debug!("control socket: writing an answer: {e}");
            return;
        }
    }
}

async fn send(write: &mut tokio::net::unix::OwnedWriteHalf, response: &Response) -> io::Result<()> {
    let mut line = serde_json::to_vec(response).map_err(io::Error::other)?;
    line.push(b'\n');
    write.write_all(&line).await
}

/// Accept failures that concern one connection or a momentary shortage, not the listener.
fn is_transient(e: &io::Error) -> bool {
    use nix::errno::Errno;
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    ) || e.raw_os_error().is_some_and(|code| {
        matches!(Errno::from_raw(code), Errno::EMFILE | Errno::ENFILE | Errno::ENOBUFS | Errno::ENOMEM | Errno::EPROTO)
    })
}

/// Fail if something at `path` must not be replaced: a socket a process accepts on, or
/// anything that is not a socket. A stale socket (nobody listening) is left for the rename in
/// [`bind_private`] to replace atomically.
///
/// Two masters started at the very same moment could both find the path stale; the service
/// manager (systemd, SMF) runs one master per service, so this is not guarded further.
fn refuse_if_live(path: &Path) -> io::Result<()> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(io::ErrorKind::AlreadyExists, "exists and is not a socket"));
    }
    // Non-blocking, so that a live master with a full backlog (EAGAIN) cannot hang us: it
    // counts as live too.
    let probe = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    probe.set_nonblocking(true)?;
    match probe.connect(&SockAddr::unix(path)?) {
        Ok(()) => Err(another_master()),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(another_master()),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io::Error::new(e.kind(), format!("cannot tell whether another master is running on it: {e}"))),
    }
}

fn another_master() -> io::Error {
    io::Error::new(io::ErrorKind::AddrInUse, "another master is running (it accepts connections)")
}

/// Bind at `path` so that the socket is never reachable with a mode wider than 0600.
///
/// bind(2) creates the socket file with `0777 & !umask`, and the umask is process-wide: setting
/// it around the bind would race with every other thread creating files. fchmod on the socket
/// before bind only works on Linux. So: bind inside a fresh directory of mode 0700 next to
/// `path` (nobody but us can reach anything in it), chmod the socket to 0600 there, then rename
/// it into place. The rename is atomic and replaces a stale socket in the same step; renaming
/// keeps the socket bound, as the kernel finds a listener by its inode, not by its name.
fn bind_private(path: &Path) -> io::Result<std::os::unix::net::UnixListener> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    // /var/run is a tmpfs: the directory is gone after a boot unless the service manager
    // makes it (systemd's RuntimeDirectory=). Make it if it is missing.
    if !dir.exists() {
        fs::DirBuilder::new().recursive(true).mode(0o755).create(dir)?;
    }
    // Short names: a socket path is limited to about 100 bytes, and the temporary one should
    // not be much longer than the final one.
    let private = nix::unistd::mkdtemp(&dir.join(".ctlXXXXXX")).map_err(io::Error::from)?;
    let staging = Staging { dir: private };
    // mkdtemp asks for 0700 but the umask may have taken more: make sure we can use it.
    fs::set_permissions(&staging.dir, fs::Permissions::from_mode(0o700))?;
    let temporary = staging.dir.join("s");
    let listener = std::os::unix::net::UnixListener::bind(&temporary)?;
    fs::set_permissions(&temporary, fs::Permissions::from_mode(0o600))?;
    fs::rename(&temporary, path)?;
    Ok(listener)
}

/// The private directory of [`bind_private`], removed with whatever is left in it.
struct Staging {
    dir: PathBuf,
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = fs::remove_file(self.dir.join("s"));
        let _ = fs::remove_dir(&self.dir);
    }
}

/// Connect, waiting at most `timeout` for room in the master's backlog.
fn connect_blocking(socket: &Path, timeout: Option<Duration>) -> io::Result<std::os::unix::net::UnixStream> {
    let stream = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    // Linux applies the send timeout to a connect that waits for room in the backlog, and
    // fails it with EAGAIN once it has passed.
    stream.set_write_timeout(timeout)?;
    stream.connect(&SockAddr::unix(socket)?)?;
    Ok(stream.into())
}

/// What is left until `deadline`: `Some(None)` for no deadline, `None` once it has passed.
fn remaining(deadline: Option<Instant>) -> Option<Option<Duration>> {
    match deadline {
        None => Some(None),
        Some(deadline) => {
            let left = deadline.saturating_duration_since(Instant::now());
            (!left.is_zero()).then_some(Some(left))
        }
    }
}

fn timed_out(timeout: Option<Duration>) -> io::Error {
    match timeout {
        Some(t) => io::Error::new(io::ErrorKind::TimedOut, format!("no answer within {t:?}")),
        None => io::Error::from(io::ErrorKind::TimedOut),
    }
}

fn encode(socket: &Path, request: &Request) -> Result<Vec<u8>, Error> {
    let mut line =
        serde_json::to_vec(request).map_err(|source| Error::ControlProtocol { path: socket.to_path_buf(), source })?;
    line.push(b'\n');
    Ok(line)
}

fn decode(socket: &Path, answer: &[u8]) -> Result<Response, Error> {
    if answer.last() != Some(&b'\n') {
        let e = io::Error::new(io::ErrorKind::UnexpectedEof, "the master closed the connection without answering");
        return Err(Error::ControlSocket { path: socket.to_path_buf(), source: e });
    }
    serde_json::from_slice(answer).map_err(|source| Error::ControlProtocol { path: socket.to_path_buf(), source })
}

/// Marks the errors of [`connect_failed`]: the connection was never made.
#[derive(Debug)]
struct ConnectFailed(io::Error);

impl fmt::Display for ConnectFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

// No `source()`: the wrapper shows the inner error's text already; a chain would repeat it.
impl std::error::Error for ConnectFailed {}

fn connect_error(socket: &Path, source: io::Error) -> Error {
    let kind = source.kind();
    Error::ControlSocket { path: socket.to_path_buf(), source: io::Error::new(kind, ConnectFailed(source)) }
}

/// An I/O failure after connecting, saying what we were doing.
fn exchange_error(socket: &Path, doing: &str, source: io::Error) -> Error {
    Error::ControlSocket {
        path: socket.to_path_buf(),
        source: io::Error::new(source.kind(), format!("{doing}: {source}")),
    }
}

#[cfg(test)]
mod tests;
