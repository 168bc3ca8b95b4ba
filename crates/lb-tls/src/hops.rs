//! `backend.multiplex`: client connections go to lb-proxy as streams of multiplexed hop
//! connections (`lb_supervisor::hop`), one per worker thread, instead of one connection each.
//!
//! Each thread's hop connection is opened when its first client needs it, and replaced by a
//! new one when it has ended (lb-proxy's worker stopped, the socket broke) or lb-proxy sent
//! GOAWAY (its worker drains: the new connection reaches the next worker, which has the
//! listening socket now). Streams open on a replaced connection finish on it; the connection
//! closes once the last has ended. A broken hop connection ends its streams, and so their
//! client connections, as a broken backend connection would.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lb_supervisor::hop::{self, HopClient, HopStream};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::Mutex;

use crate::config::BackendAddr;
use crate::conn::connect_within;

/// One hop connection per worker thread.
#[derive(Debug)]
pub(crate) struct Hops {
    address: BackendAddr,
    connect_timeout: Duration,
    /// Held while a thread's connection is replaced, so that its clients wait for one new
    /// connection instead of each opening its own.
    slots: Box<[Mutex<Option<HopClient>>]>,
}

/// Threads numbered as they first open a stream, for their slot.
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD: usize = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

impl Hops {
    pub(crate) fn new(address: BackendAddr, connect_timeout: Duration, threads: usize) -> Hops {
        Hops { address, connect_timeout, slots: (0..threads.max(1)).map(|_| Mutex::new(None)).collect() }
    }

    /// A new stream announced with `header`, on this thread's hop connection (opened or
    /// replaced when needed); else why none, as the backend failure log says it.
    pub(crate) async fn open(&self, header: &[u8]) -> Result<HopStream, String> {
        let slot = &self.slots[THREAD.with(|t| *t) % self.slots.len()];
        let mut current = slot.lock().await;
        if let Some(stream) = current.as_ref().and_then(|client| client.open(header).ok()) {
            return Ok(stream);
        }
        // Gone, or going away: the old connection (if any) finishes its streams on its own.
        *current = None;
        let client = self.connect().await?;
        let stream = client.open(header).map_err(|e| format!("refused a stream ({e})"))?;
        *current = Some(client);
        Ok(stream)
    }

    async fn connect(&self) -> Result<HopClient, String> {
        Ok(match &self.address {
            BackendAddr::Tcp(a) => {
                let socket = connect_within(self.connect_timeout, TcpStream::connect(a)).await?;
                let _ = socket.set_nodelay(true);
                self.drive(socket)
            }
            BackendAddr::Unix(p) => self.drive(connect_within(self.connect_timeout, UnixStream::connect(p)).await?),
        })
    }

    /// The connection's driver spawned; its end logged when it broke.
    fn drive<IO: AsyncRead + AsyncWrite + Unpin + Send + 'static>(&self, socket: IO) -> HopClient {
        let (client, driver) = hop::connect(socket);
        let address = self.address.clone();
        tokio::spawn(async move {
            if let Err(e) = driver.await {
                tracing::warn!(backend = %address, "hop connection ended: {e}");
            }
        });
        client
    }
}
