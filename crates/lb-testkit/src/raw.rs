//! Hand-written bytes on a TCP connection: malformed requests, request smuggling attempts,
//! PROXY protocol headers (built here byte by byte, independently of lb-proxy's parser), and a
//! small HTTP/1.x response reader that says exactly what came back and how the connection ended;
//! for hand-written servers, a request-head reader.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How a connection ended (or did not) while we were reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The peer closed cleanly (FIN).
    Eof,
    /// The peer reset the connection (RST).
    Reset,
    /// Still open when the time ran out.
    Open,
}

/// One HTTP/1.x response as read from the wire.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    /// `HTTP/1.<minor>`.
    pub minor_version: u8,
    /// Header names as sent, in order.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl RawResponse {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A client connection driven by hand.
#[derive(Debug)]
pub struct RawConn {
    stream: TcpStream,
    /// Received but not yet consumed.
    buf: Vec<u8>,
    eof: bool,
}

impl RawConn {
    pub async fn connect(addr: SocketAddr) -> anyhow::Result<RawConn> {
        let stream = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr))
            .await
            .context("connect timed out")?
            .with_context(|| format!("connecting to {addr}"))?;
        let _ = stream.set_nodelay(true);
        Ok(RawConn { stream, buf: Vec::new(), eof: false })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.stream.local_addr().expect("a connected socket's local address")
    }

    /// Writes `bytes` (all of them).
    pub async fn send(&mut self, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
        self.stream.write_all(bytes.as_ref()).await?;
        self.stream.flush().await
    }

    /// Shuts down our writing side (sends FIN); reading goes on.
    pub async fn shutdown_write(&mut self) -> std::io::Result<()> {
        self.stream.shutdown().await
    }

    /// Closes with a reset (RST) instead of a FIN: SO_LINGER 0, then close.
    pub fn reset(self) {
        let _ = socket2::SockRef::from(&self.stream).set_linger(Some(Duration::ZERO));
    }

    /// Reads more into the buffer; Ok(false) at EOF.
    async fn fill(&mut self, deadline: Instant) -> anyhow::Result<bool> {
        if self.eof {
            return Ok(false);
        }
        let mut chunk = [0u8; 16 * 1024];
        let n = tokio::time::timeout_at(deadline, self.stream.read(&mut chunk))
            .await
            .map_err(|_| {
                anyhow!(
                    "timed out waiting for data ({} bytes unparsed: {:?})",
                    self.buf.len(),
                    String::from_utf8_lossy(&self.buf)
                )
            })?
            .context("reading")?;
        if n == 0 {
            self.eof = true;
            return Ok(false);
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(true)
    }

    /// Reads one complete response (head and body) within `within`. Fails when the connection
    /// ends or times out first, saying what had arrived.
    pub async fn read_response(&mut self, within: Duration) -> anyhow::Result<RawResponse> {
        let deadline = Instant::now() + within;
        let (status, minor_version, headers, head_len) = loop {
            let mut slots = [httparse::EMPTY_HEADER; 64];
            let mut parsed = httparse::Response::new(&mut slots);
            match parsed.parse(&self.buf).context("parsing a response head")? {
                httparse::Status::Complete(len) => {
                    let headers = parsed
                        .headers
                        .iter()
                        .map(|h| (h.name.to_owned(), String::from_utf8_lossy(h.value).into_owned()))
                        .collect::<Vec<_>>();
                    break (parsed.code.unwrap_or(0), parsed.version.unwrap_or(0), headers, len);
                }
                httparse::Status::Partial => {
                    if !self.fill(deadline).await? {
                        bail!(
                            "connection closed before a complete response; received {:?}",
                            String::from_utf8_lossy(&self.buf)
                        );
                    }
                }
            }
        };
        self.buf.drain(..head_len);
        let find =
            |name: &str| headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim().to_owned());
        let body = if status < 200 || status == 204 || status == 304 {
            Vec::new()
        } else if find("transfer-encoding").is_some_and(|te| te.to_ascii_lowercase().ends_with("chunked")) {
            self.read_chunked(deadline).await?
        } else if let Some(len) = find("content-length") {
            let len: usize = len.parse().with_context(|| format!("bad Content-Length {len:?}"))?;
            while self.buf.len() < len {
                if !self.fill(deadline).await? {
                    bail!("connection closed after {} of {len} body bytes", self.buf.len());
                }
            }
            self.buf.drain(..len).collect()
        } else {
            while self.fill(deadline).await? {}
            std::mem::take(&mut self.buf)
        };
        Ok(RawResponse { status, minor_version, headers, body })
    }

    async fn read_chunked(&mut self, deadline: Instant) -> anyhow::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line = self.read_line(deadline).await?;
            let size_text = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_text, 16).with_context(|| format!("bad chunk size line {line:?}"))?;
            if size == 0 {
                // Trailers until an empty line.
                while !self.read_line(deadline).await?.is_empty() {}
                return Ok(body);
            }
            while self.buf.len() < size + 2 {
                if !self.fill(deadline).await? {
                    bail!("connection closed inside a chunk");
                }
            }
            body.extend(self.buf.drain(..size));
            self.buf.drain(..2);
        }
    }

    async fn read_line(&mut self, deadline: Instant) -> anyhow::Result<String> {
        loop {
            if let Some(at) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..at]).into_owned();
                self.buf.drain(..at + 2);
                return Ok(line);
            }
            if !self.fill(deadline).await? {
                bail!("connection closed inside a chunked body");
            }
        }
    }

    /// Reads until the peer closes or `within` passes; returns everything received that was not
    /// consumed yet, and how the connection ended.
    pub async fn read_until_closed(&mut self, within: Duration) -> (Vec<u8>, Ending) {
        let deadline = Instant::now() + within;
        let ending = loop {
            if self.eof {
                break Ending::Eof;
            }
            let mut chunk = [0u8; 16 * 1024];
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Err(_) => break Ending::Open,
                Ok(Ok(0)) => {
                    self.eof = true;
                    break Ending::Eof;
                }
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => break Ending::Reset,
                Ok(Err(_)) => break Ending::Reset,
            }
        };
        (std::mem::take(&mut self.buf), ending)
    }

    /// Whatever arrives within `within` (stops early at close); the connection stays usable.
    pub async fn read_for(&mut self, within: Duration) -> Vec<u8> {
        let deadline = Instant::now() + within;
        while let Ok(true) = self.fill(deadline).await {}
        std::mem::take(&mut self.buf)
    }
}

/// A hand-written server's side: reads one request head, byte by byte (so that nothing after it
/// is taken), up to its blank line. `None` if the connection ends first.
pub async fn read_request_head(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    Some(head)
}

/// A PROXY protocol v1 header: `PROXY TCP4 src dst sport dport\r\n` (TCP6 for IPv6).
pub fn proxy_v1(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let family = if src.is_ipv4() { "TCP4" } else { "TCP6" };
    format!("PROXY {family} {} {} {} {}\r\n", src.ip(), dst.ip(), src.port(), dst.port()).into_bytes()
}

/// The 12-byte signature that starts every PROXY v2 header.
pub const PROXY_V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// PROXY v2 TLV type of the TLS facts (`PP2_TYPE_SSL`).
pub const PP2_TYPE_SSL: u8 = 0x20;
/// Sub-TLV of `PP2_TYPE_SSL`: the TLS version (`PP2_SUBTYPE_SSL_VERSION`).
pub const PP2_SUBTYPE_SSL_VERSION: u8 = 0x21;
/// `PP2_TYPE_SSL` client flag: the connection used TLS (`PP2_CLIENT_SSL`).
pub const PP2_CLIENT_SSL: u8 = 0x01;

/// A PROXY v2 `PROXY` command header for a TCP connection from `src` to `dst`, with `tlvs`
/// (type, value) appended in order. Both addresses must be of the same family.
pub fn proxy_v2(src: SocketAddr, dst: SocketAddr, tlvs: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut addresses = Vec::new();
    let family = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            addresses.extend_from_slice(&s.octets());
            addresses.extend_from_slice(&d.octets());
            0x11 // AF_INET, STREAM
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            addresses.extend_from_slice(&s.octets());
            addresses.extend_from_slice(&d.octets());
            0x21 // AF_INET6, STREAM
        }
        _ => panic!("proxy_v2: source and destination must be of the same address family"),
    };
    addresses.extend_from_slice(&src.port().to_be_bytes());
    addresses.extend_from_slice(&dst.port().to_be_bytes());
    for (kind, value) in tlvs {
        addresses.push(*kind);
        addresses.extend_from_slice(&(value.len() as u16).to_be_bytes());
        addresses.extend_from_slice(value);
    }
    let mut header = PROXY_V2_SIGNATURE.to_vec();
    header.push(0x21); // version 2, command PROXY
    header.push(family);
    header.extend_from_slice(&(addresses.len() as u16).to_be_bytes());
    header.extend_from_slice(&addresses);
    header
}

/// A PROXY v2 `LOCAL` command header (health checks of the sender itself): no addresses.
pub fn proxy_v2_local() -> Vec<u8> {
    let mut header = PROXY_V2_SIGNATURE.to_vec();
    header.extend_from_slice(&[0x20, 0x00, 0x00, 0x00]);
    header
}

/// The `PP2_TYPE_SSL` TLV of a TLS connection with no client certificate, verified, with
/// `PP2_SUBTYPE_SSL_VERSION` = `version` (e.g. `TLSv1.3`).
pub fn tlv_ssl(version: &str) -> (u8, Vec<u8>) {
    let mut value = vec![PP2_CLIENT_SSL];
    value.extend_from_slice(&0u32.to_be_bytes()); // verify: 0 = success
    value.push(PP2_SUBTYPE_SSL_VERSION);
    value.extend_from_slice(&(version.len() as u16).to_be_bytes());
    value.extend_from_slice(version.as_bytes());
    (PP2_TYPE_SSL, value)
}
