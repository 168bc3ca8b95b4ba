//! An HTTP/3 load generator (quinn + h3 over rustls with AWS-LC's crypto), for benchmarks of
//! HTTP/3 servers: Debian's h2load has no HTTP/3, and a Python client (aioquic) is slower than
//! the servers it would load. Each connection has a UDP socket of its own (a client port of its
//! own, as real clients have), so a server that keys anything by the client's address sees as
//! many clients as connections.
//!
//! Three shapes: keep-alive (`connections` × `streams` request loops on long-lived
//! connections), a new connection per request (`new_connection`: handshake, one request,
//! close; full handshakes unless `resume`), and idle (`hold`: connections opened, one request
//! each, then held). A `rate` paces the requests (open loop): each is due at a fixed time and
//! its latency counts from then, so a server that falls behind is charged for the wait
//! (coordinated omission).

use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use bytes::{Buf, Bytes};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// What to run.
#[derive(Debug, Clone)]
pub struct H3Load {
    pub addr: SocketAddr,
    /// The server name sent (SNI) and checked against the certificate.
    pub sni: String,
    pub path: String,
    pub connections: usize,
    /// Requests in flight per connection (keep-alive).
    pub streams: usize,
    /// Stop after this long, or after `requests` requests, whichever comes first.
    pub duration: Duration,
    pub requests: Option<u64>,
    pub new_connection: bool,
    /// With `new_connection`: offer the last session's ticket (a resumed handshake).
    pub resume: bool,
    /// Requests per second offered (open loop), or as fast as answers come (closed loop).
    pub rate: Option<f64>,
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub requests: u64,
    pub errors: u64,
    pub seconds: f64,
    /// Latency percentiles in milliseconds (p50, p99, p99.9).
    pub latency_ms: [f64; 3],
}

impl Report {
    pub fn json(&self) -> String {
        let [p50, p99, p999] = self.latency_ms;
        format!(
            r#"{{"requests": {}, "errors": {}, "seconds": {:.3}, "rps": {:.1}, "p50_ms": {p50:.3}, "p99_ms": {p99:.3}, "p999_ms": {p999:.3}}}"#,
            self.requests,
            self.errors,
            self.seconds,
            self.requests as f64 / self.seconds.max(1e-9)
        )
    }
}

/// Takes any certificate, checks the handshake's signature with it.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

type Sender = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// A client TLS configuration, ALPN `h3`, TLS 1.3 (QUIC's only version). The server's chain is
/// not checked (as h2load's and ab's is not: a benchmark's certificate is self-signed), its
/// handshake signature is, so the client does a real client's work.
fn client_config(resume: bool, keep_alive: bool) -> Result<quinn::ClientConfig> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = Arc::new(AnyCertificate(provider.clone()));
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    if !resume {
        tls.resumption = rustls::client::Resumption::disabled();
    }
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    if keep_alive {
        // Held connections outlive the servers' idle timeouts (30 s by default on both peers).
        let mut transport = quinn::TransportConfig::default();
        transport.keep_alive_interval(Some(Duration::from_secs(10)));
        config.transport_config(Arc::new(transport));
    }
    Ok(config)
}

/// One QUIC connection on a socket of its own, HTTP/3 started; the endpoint goes with it (its
/// driver lives until the connection's close is sent).
async fn connect(spec: &H3Load, config: &quinn::ClientConfig) -> Result<(quinn::Connection, Sender)> {
    let local: SocketAddr = if spec.addr.is_ipv6() { "[::1]:0" } else { "127.0.0.1:0" }.parse()?;
    let endpoint = quinn::Endpoint::client(local)?;
    let conn = endpoint.connect_with(config.clone(), spec.addr, &spec.sni)?.await?;
    let (mut driver, sender) =
        h3::client::builder().send_grease(false).build(h3_quinn::Connection::new(conn.clone())).await?;
    tokio::spawn(async move {
        let _ = poll_fn(|cx| driver.poll_close(cx)).await;
    });
    Ok((conn, sender))
}

/// `GET path`, the response read whole; an error unless it is a 2xx.
async fn request(sender: &mut Sender, spec: &H3Load) -> Result<()> {
    let uri = format!("https://{}{}", spec.sni, spec.path);
    let mut stream = sender.send_request(http::Request::get(uri).body(())?).await?;
    stream.finish().await?;
    let response = stream.recv_response().await?;
    while let Some(mut chunk) = stream.recv_data().await? {
        chunk.advance(chunk.remaining());
    }
    if !response.status().is_success() {
        bail!("status {}", response.status());
    }
    Ok(())
}

/// Hands out requests: each is a number (the run ends when `requests` are taken) and, with a
/// rate, the instant it is due.
struct Tickets {
    start: Instant,
    end: Instant,
    limit: u64,
    taken: AtomicU64,
    interval: Option<Duration>,
}

impl Tickets {
    /// The next request's due time, once it is due; None when the run is over.
    async fn next(&self) -> Option<Instant> {
        let n = self.taken.fetch_add(1, Ordering::Relaxed);
        if n >= self.limit {
            return None;
        }
        let due = match self.interval {
            Some(every) => self.start + every.mul_f64(n as f64),
            None => Instant::now(),
        };
        if due >= self.end {
            return None;
        }
        tokio::time::sleep_until(due.into()).await;
        Some(due)
    }
}

#[derive(Default)]
struct Tally {
    done: u64,
    errors: u64,
    latencies_us: Vec<u32>,
}

impl Tally {
    fn record(&mut self, due: Instant, ok: bool) {
        if ok {
            self.done += 1;
            self.latencies_us.push(u32::try_from(due.elapsed().as_micros()).unwrap_or(u32::MAX));
        } else {
            self.errors += 1;
        }
    }
}

/// Runs `spec`: the requests, their errors and latencies.
pub async fn run(spec: H3Load) -> Result<Report> {
    let config = client_config(spec.resume, false)?;
    let spec = Arc::new(spec);
    let start = Instant::now();
    let tickets = Arc::new(Tickets {
        start,
        end: start + spec.duration,
        limit: spec.requests.unwrap_or(u64::MAX),
        taken: AtomicU64::new(0),
        interval: spec.rate.map(|r| Duration::from_secs_f64(1.0 / r.max(1e-3))),
    });
    let tally = Arc::new(Mutex::new(Tally::default()));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..spec.connections {
        let (spec, config, tickets, tally) = (spec.clone(), config.clone(), tickets.clone(), tally.clone());
        if spec.new_connection {
            tasks.spawn(async move {
                while let Some(due) = tickets.next().await {
                    let ok = async {
                        let (conn, mut sender) = connect(&spec, &config).await?;
                        let result = request(&mut sender, &spec).await;
                        conn.close(0u32.into(), b"");
                        result
                    }
                    .await
                    .is_ok();
                    lock(&tally).record(due, ok);
                }
            });
            continue;
        }
        tasks.spawn(async move {
            let (_conn, sender) = match connect(&spec, &config).await {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("h3-load: connecting: {e:#}");
                    lock(&tally).errors += 1;
                    return;
                }
            };
            let mut streams = tokio::task::JoinSet::new();
            for _ in 0..spec.streams.max(1) {
                let (spec, tickets, tally, mut sender) = (spec.clone(), tickets.clone(), tally.clone(), sender.clone());
                streams.spawn(async move {
                    while let Some(due) = tickets.next().await {
                        let ok = request(&mut sender, &spec).await.is_ok();
                        lock(&tally).record(due, ok);
                    }
                });
            }
            while streams.join_next().await.is_some() {}
        });
    }
    while tasks.join_next().await.is_some() {}
    let seconds = start.elapsed().as_secs_f64();
    let mut tally = std::mem::take(&mut *lock(&tally));
    tally.latencies_us.sort_unstable();
    let pick = |q: f64| {
        let v = &tally.latencies_us;
        if v.is_empty() {
            return 0.0;
        }
        let i = ((v.len() as f64 * q) as usize).min(v.len() - 1);
        f64::from(v[i]) / 1e3
    };
    Ok(Report { requests: tally.done, errors: tally.errors, seconds, latency_ms: [pick(0.5), pick(0.99), pick(0.999)] })
}

/// Opens `count` connections, one request on each, `batch` at once; returns them held open
/// (dropping them closes them).
pub async fn hold(spec: &H3Load, count: usize, batch: usize) -> Result<Vec<(quinn::Connection, Sender)>> {
    let config = client_config(false, true)?;
    let mut held = Vec::with_capacity(count);
    while held.len() < count {
        let n = batch.max(1).min(count - held.len());
        let mut opening = tokio::task::JoinSet::new();
        for _ in 0..n {
            let (spec, config) = (spec.clone(), config.clone());
            opening.spawn(async move {
                let (conn, mut sender) = connect(&spec, &config).await?;
                request(&mut sender, &spec).await?;
                Ok::<_, anyhow::Error>((conn, sender))
            });
        }
        while let Some(opened) = opening.join_next().await {
            held.push(opened.map_err(|e| anyhow!("{e}"))??);
        }
    }
    Ok(held)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
