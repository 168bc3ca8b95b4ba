//! A multiplexed hop from lb-tls (`backend.multiplex` there), on a bind with `accept_proxy`:
//! every stream is a client connection, admitted as one accepted alone is (the global and the
//! frontend's limit, `feconn`, the session counters), its facts from the PROXY header its OPEN
//! carries, served by the same code. The hop connection itself holds no permit.
//!
//! When this worker drains, GOAWAY tells lb-tls to open new hop connections (they reach the
//! next worker, which has the listening socket now) while the streams open here finish. A
//! stream lb-tls opened before the GOAWAY reached it is still served here.

use std::net::SocketAddr;
use std::sync::Arc;

use lb_supervisor::{Quiet, Shutdown};
use tokio_util::task::TaskTracker;

use super::{permits, serve_connection, Admission};
use crate::facts::ConnFacts;
use crate::listener::ClientStream;
use crate::state::{FrontendState, Proxy};

/// Serves the hop connection `stream` (its preface read) until lb-tls closes it, or a hard stop.
/// `peer` is the socket's peer (lb-tls), taken for a stream's client when its header has none.
pub(super) async fn serve(
    proxy: Arc<Proxy>,
    fe: Arc<FrontendState>,
    stream: ClientStream,
    peer: Option<SocketAddr>,
    shutdown: Shutdown,
    tracker: TaskTracker,
) {
    let (mut incoming, driver) = lb_supervisor::hop::accept(stream);
    let name = fe.name().to_owned();
    let mut stop = shutdown.clone();
    tracker.spawn(async move {
        tokio::select! {
            ended = driver => if let Err(e) = ended {
                tracing::warn!(frontend = %name, "hop connection from lb-tls ended: {e}");
            },
            () = stop.stopped() => {}
        }
    });
    let mut drain_watch = shutdown.clone();
    let draining = Quiet::new(drain_watch.draining());
    tokio::pin!(draining);
    let mut went_away = false;
    loop {
        // A stream waits for its permits, then comes; a drain meanwhile says GOAWAY once and
        // goes on serving what lb-tls opened before it saw it. (Cancelling the wait drops
        // permits not yet used, and `accept` takes a stream only when it returns one.)
        let next = async { Some((permits(&proxy, &fe).await?, incoming.accept().await?)) };
        let (permits, (stream, header)) = tokio::select! {
            biased;
            () = &mut draining, if !went_away => {
                incoming.go_away();
                went_away = true;
                continue;
            }
            next = next => match next { Some(next) => next, None => break },
        };
        let mut facts = ConnFacts::from_socket(peer);
        match lb_proxy_protocol::parse(&header) {
            Ok(header) => facts.take_header(header),
            Err(e) => {
                tracing::warn!(frontend = fe.name(), stream = stream.id(), "closing hop stream: {e}");
                continue;
            }
        }
        let admission = Admission::new(&proxy, &fe, permits);
        let serving = serve_connection(admission, ClientStream::Hop(stream), facts, shutdown.clone());
        tracker.spawn(Box::pin(serving));
    }
    // No more streams accepted here (the limits were closed): lb-tls must open them elsewhere.
    incoming.go_away();
}
