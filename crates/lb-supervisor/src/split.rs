//! A worker's side of a canary: new connections split with the other worker.
//!
//! Both workers accept from the same listening sockets. The one that accepted a connection
//! decides whose it is with a counter ([`Route`]); one that belongs to the other side goes over
//! the socketpair the master set up between them, by `SCM_RIGHTS`, with the address it was
//! accepted on, and the peer's accept loop for that address returns it as its own. Nothing is
//! lost on the way (docs/architecture.md, "Canary reloads"):
//! - a hand-over that cannot be sent is served here;
//! - a connection handed over is never handed on; one that finds no accept loop for its
//!   address (the peer drains) is sent back, and one sent back is served by whoever gets it;
//! - a side that stops splitting sends `End` on the pair, and a worker does not exit before its
//!   peers have said `End` (or are gone) and its own hand-overs have been sent ([`Splitter::quiet`]).
//!
//! One [`Splitter`] per worker process, installed before the daemon starts; the daemon's
//! client listeners ([`AsyncListener::for_clients`](crate::AsyncListener::for_clients)) find it
//! there. Outside a supervised worker there is none, and accepting is what it always was.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tokio_util::task::TaskTracker;

use crate::accept::{configure, Socket};
use crate::canary::Share;
use crate::channel::{Channel, ChannelReceiver, ChannelSender};
use crate::protocol::Side;
use crate::{Accepted, ListenAddr};

static SPLITTER: OnceLock<Splitter> = OnceLock::new();

/// What goes over the pair between two workers.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum PairMessage {
    /// A connection accepted on `address` (its fd attached); `returned`: sent back, because the
    /// receiver no longer accepts there.
    Handover { address: ListenAddr, returned: bool },
    /// The sender hands nothing more over on this pair (it may still return what it gets).
    End,
}

/// How a worker routes what it accepts.
#[derive(Debug, Clone)]
enum Route {
    /// Keep everything (no canary, or it is over).
    Whole,
    /// A canary waiting for its split: accept nothing yet.
    Hold,
    /// Hand `theirs_ppm` of every million connections to the peer over `link`.
    Split { theirs_ppm: u32, link: ChannelSender },
}

/// A connection that came over a pair, waiting for this worker's accept loop.
#[derive(Debug)]
struct Handed {
    fd: OwnedFd,
    /// Where to send it back if nobody accepts here (`None`: nowhere, it was sent back already
    /// or never left this worker).
    back: Option<ChannelSender>,
}

/// The worker's splitter: its route, its accept loops by address, its pairs.
#[derive(Debug, Clone)]
pub(crate) struct Splitter {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    route: watch::Sender<Route>,
    /// Connections routed so far (the counter that splits them).
    routed: AtomicU64,
    ports: Mutex<HashMap<ListenAddr, mpsc::UnboundedSender<Handed>>>,
    /// Pairs whose peer has not said `End` (or closed) yet.
    open_pairs: watch::Sender<usize>,
    /// Hand-overs and returns on their way.
    sending: TaskTracker,
}

impl Splitter {
    /// Install this process's splitter: holding its accepts (a canary waiting for its split)
    /// or keeping everything.
    pub(crate) fn install(hold: bool) -> Splitter {
        SPLITTER
            .get_or_init(|| Splitter {
                inner: Arc::new(Inner {
                    route: watch::Sender::new(if hold { Route::Hold } else { Route::Whole }),
                    routed: AtomicU64::new(0),
                    ports: Mutex::new(HashMap::new()),
                    open_pairs: watch::Sender::new(0),
                    sending: TaskTracker::new(),
                }),
            })
            .clone()
    }

    pub(crate) fn installed() -> Option<Splitter> {
        SPLITTER.get().cloned()
    }

    /// Split with the worker at the other end of `pair`. A pair this replaces gets its `End`.
    pub(crate) fn split(&self, side: Side, share: Share, pair: OwnedFd) -> io::Result<()> {
        let stream = std::os::unix::net::UnixStream::from(pair);
        stream.set_nonblocking(true)?;
        let (link, receiver) = Channel::new(tokio::net::UnixStream::from_std(stream)?).split();
        let theirs_ppm = match side {
            Side::Old => share.ppm(),
            Side::New => Share::WHOLE - share.ppm(),
        };
        self.inner.open_pairs.send_modify(|n| *n += 1);
        tokio::spawn(self.clone().read_pair(receiver, link.clone()));
        self.set_route(Route::Split { theirs_ppm, link });
        Ok(())
    }

    /// Keep every connection from now on (the canary is over, or this worker drains).
    pub(crate) fn whole(&self) {
        self.set_route(Route::Whole);
    }

    fn set_route(&self, route: Route) {
        let previous = self.inner.route.send_replace(route);
        if let Route::Split { link, .. } = previous {
            self.inner.sending.spawn(async move {
                let _ = link.send(&PairMessage::End, &[]).await;
            });
        }
    }

    /// Resolves once nothing more can come over a pair and everything this worker handed over
    /// or sent back has gone out: then it may exit without losing a connection. Bounded, for a
    /// peer that never answers.
    pub(crate) async fn quiet(&self, at_most: Duration) {
        self.whole();
        let mut open = self.inner.open_pairs.subscribe();
        let sending = self.inner.sending.clone();
        sending.close();
        let settle = async move {
            let _ = open.wait_for(|n| *n == 0).await;
            sending.wait().await;
        };
        if tokio::time::timeout(at_most, settle).await.is_err() {
            tracing::warn!("exiting before the other worker of the canary said it hands nothing more over");
        }
    }

    /// Where a connection accepted here on `route` goes: `None` to keep it.
    fn theirs(&self, route: &Route) -> Option<ChannelSender> {
        let Route::Split { theirs_ppm, link } = route else { return None };
        let k = self.inner.routed.fetch_add(1, Ordering::Relaxed);
        // Connection k is theirs when floor((k+1)·share) > floor(k·share): exactly the share,
        // to one connection, spread evenly.
        let share = u64::from(*theirs_ppm);
        let whole = u64::from(Share::WHOLE);
        ((k + 1) * share / whole > k * share / whole).then(|| link.clone())
    }

    /// Send a connection accepted here to the peer; if it cannot go, serve it here.
    fn hand_over(&self, link: ChannelSender, address: ListenAddr, fd: OwnedFd) {
        let this = self.clone();
        self.inner.sending.spawn(async move {
            let message = PairMessage::Handover { address: address.clone(), returned: false };
            if let Err(e) = link.send(&message, &[fd.as_fd()]).await {
                tracing::debug!(%address, "handing a connection to the other worker: {e}; serving it here");
                this.deliver(&address, Handed { fd, back: None }).await;
            }
        });
    }

    /// A connection for this worker's accept loop on `address`; sent back when there is none.
    async fn deliver(&self, address: &ListenAddr, handed: Handed) {
        let refused = {
            let ports = self.inner.ports.lock().unwrap_or_else(PoisonError::into_inner);
            match ports.get(address) {
                Some(port) => port.send(handed).err().map(|e| e.0),
                None => Some(handed),
            }
        };
        if let Some(handed) = refused {
            send_back(address, handed).await;
        }
    }

    async fn read_pair(self, mut receiver: ChannelReceiver, link: ChannelSender) {
        let mut ended = false;
        loop {
            match receiver.recv::<PairMessage>().await {
                Ok(Some((PairMessage::Handover { address, returned }, mut fds))) => {
                    let Some(fd) = fds.pop() else { continue };
                    let back = (!returned).then(|| link.clone());
                    self.deliver(&address, Handed { fd, back }).await;
                }
                Ok(Some((PairMessage::End, _))) => {
                    if !std::mem::replace(&mut ended, true) {
                        self.inner.open_pairs.send_modify(|n| *n = n.saturating_sub(1));
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("the pair with the other worker of the canary: {e}");
                    break;
                }
            }
        }
        if !ended {
            self.inner.open_pairs.send_modify(|n| *n = n.saturating_sub(1));
        }
    }

    /// The queue of connections handed over for `address`, for its accept loop.
    fn port(&self, address: ListenAddr) -> Port {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut ports = self.inner.ports.lock().unwrap_or_else(PoisonError::into_inner);
        ports.insert(address.clone(), tx);
        let mut route = self.inner.route.subscribe();
        let current = route.borrow_and_update().clone();
        Port { splitter: self.clone(), address, state: tokio::sync::Mutex::new(PortState { rx, route, current }) }
    }
}

async fn send_back(address: &ListenAddr, handed: Handed) {
    let Some(link) = handed.back else {
        tracing::warn!(%address, "a connection handed over found no worker accepting: closed");
        return;
    };
    let message = PairMessage::Handover { address: address.clone(), returned: true };
    if let Err(e) = link.send(&message, &[handed.fd.as_fd()]).await {
        tracing::warn!(%address, "returning a connection to the other worker: {e}: closed");
    }
}

/// A client listener's part in the split: connections handed over for its address.
#[derive(Debug)]
pub(crate) struct Port {
    splitter: Splitter,
    address: ListenAddr,
    state: tokio::sync::Mutex<PortState>,
}

/// What the accept loop works with.
#[derive(Debug)]
struct PortState {
    /// Connections handed over for this address.
    rx: mpsc::UnboundedReceiver<Handed>,
    route: watch::Receiver<Route>,
    /// The route as last read from `route`: read again only when it changed (a canary's start
    /// and end), not at every accept.
    current: Route,
}

impl PortState {
    fn refresh(&mut self) {
        if self.route.has_changed().unwrap_or(false) {
            self.current = self.route.borrow_and_update().clone();
        }
    }
}

impl Port {
    pub(crate) fn for_address(address: &ListenAddr) -> Option<Port> {
        Splitter::installed().map(|s| s.port(address.clone()))
    }

    /// The next connection for this worker on `socket`: one handed over, or one accepted
    /// that is ours. Cancel-safe: a connection accepted is routed before anything is awaited.
    pub(crate) async fn accept(&self, socket: &Socket, keepalive: Option<Duration>) -> io::Result<Accepted> {
        let mut state = self.state.lock().await;
        let state = &mut *state;
        loop {
            state.refresh();
            if let Route::Hold = state.current {
                tokio::select! {
                    Some(handed) = state.rx.recv() => return socket.adopt(handed.fd, keepalive),
                    // Seen once it resolves: read here, not by `refresh`.
                    _ = state.route.changed() => {}
                }
                state.current = state.route.borrow_and_update().clone();
                continue;
            }
            tokio::select! {
                biased;
                Some(handed) = state.rx.recv() => return socket.adopt(handed.fd, keepalive),
                accepted = socket.accept_raw() => {
                    let accepted = accepted?;
                    state.refresh();
                    match self.splitter.theirs(&state.current) {
                        Some(link) => {
                            let fd = accepted.into_fd()?;
                            self.splitter.hand_over(link, self.address.clone(), fd);
                        }
                        None => return Ok(configure(accepted, keepalive)),
                    }
                }
            }
        }
    }
}

impl Drop for Port {
    /// The accept loop ended (the worker drains): what was handed over and not taken goes back.
    fn drop(&mut self) {
        let rx = &mut self.state.get_mut().rx;
        rx.close();
        let mut left = Vec::new();
        while let Ok(handed) = rx.try_recv() {
            left.push(handed);
        }
        if left.is_empty() {
            return;
        }
        if tokio::runtime::Handle::try_current().is_err() {
            tracing::warn!(address = %self.address, "{} connections handed over lost: the worker is ending", left.len());
            return;
        }
        let address = self.address.clone();
        self.splitter.inner.sending.spawn(async move {
            for handed in left {
                send_back(&address, handed).await;
            }
        });
    }
}
