//! One client connection of the load generator: send a request, read exactly one response,
//! and say how it ended.

use std::io::ErrorKind;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::Outcome;

/// A client connection and what it has received but not consumed.
pub(super) struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// Why reading stopped.
enum ReadEnd {
    Eof,
    Reset(String),
    Timeout,
}

impl Conn {
    pub(super) fn new(stream: TcpStream) -> Self {
        Conn { stream, buf: Vec::with_capacity(1024) }
    }

    async fn fill(&mut self, deadline: Instant) -> Result<(), ReadEnd> {
        let mut chunk = [0u8; 16 * 1024];
        match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
            Err(_) => Err(ReadEnd::Timeout),
            Ok(Ok(0)) => Err(ReadEnd::Eof),
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Ok(Err(e)) => Err(ReadEnd::Reset(e.to_string())),
        }
    }

    /// Sends `request` and reads one complete response.
    pub(super) async fn exchange(&mut self, request: &[u8], deadline: Instant) -> Outcome {
        match tokio::time::timeout_at(deadline, self.stream.write_all(request)).await {
            Err(_) => return Outcome::Timeout("sending the request".into()),
            Ok(Err(e)) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => {
                return Outcome::Reset(format!("sending the request: {e}"));
            }
            Ok(Err(e)) => return Outcome::OtherError(format!("sending the request: {e}")),
            Ok(Ok(())) => {}
        }
        // The head.
        let (status, minor, head_len, close_header, length, chunked) = loop {
            let mut slots = [httparse::EMPTY_HEADER; 32];
            let mut parsed = httparse::Response::new(&mut slots);
            match parsed.parse(&self.buf) {
                Ok(httparse::Status::Complete(len)) => {
                    let mut close = false;
                    let mut keep_alive = false;
                    let mut length = None;
                    let mut chunked = false;
                    for h in parsed.headers.iter() {
                        let value = String::from_utf8_lossy(h.value).to_ascii_lowercase();
                        if h.name.eq_ignore_ascii_case("connection") {
                            close |= value.split(',').any(|t| t.trim() == "close");
                            keep_alive |= value.split(',').any(|t| t.trim() == "keep-alive");
                        } else if h.name.eq_ignore_ascii_case("content-length") {
                            length = value.trim().parse::<usize>().ok();
                        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                            chunked = value.trim().ends_with("chunked");
                        }
                    }
                    let minor = parsed.version.unwrap_or(1);
                    let close = close || (minor == 0 && !keep_alive);
                    break (parsed.code.unwrap_or(0), minor, len, close, length, chunked);
                }
                Ok(httparse::Status::Partial) => match self.fill(deadline).await {
                    Ok(()) => {}
                    Err(ReadEnd::Eof) if self.buf.is_empty() => {
                        return Outcome::Reset("connection closed before any response byte".into());
                    }
                    Err(ReadEnd::Eof) => {
                        return Outcome::Reset(format!(
                            "connection closed inside the response head ({} bytes)",
                            self.buf.len()
                        ));
                    }
                    Err(ReadEnd::Reset(e)) => {
                        return Outcome::Reset(format!("reading the response head after {} bytes: {e}", self.buf.len()))
                    }
                    Err(ReadEnd::Timeout) => {
                        return Outcome::Timeout(format!("waiting for the response head ({} bytes)", self.buf.len()))
                    }
                },
                Err(e) => return Outcome::OtherError(format!("malformed response head: {e}")),
            }
        };
        let _ = minor;
        self.buf.drain(..head_len);
        // The body.
        let mut close = close_header;
        let body_end = if status < 200 || status == 204 || status == 304 {
            Ok(())
        } else if chunked {
            self.read_chunked(deadline).await
        } else if let Some(len) = length {
            self.read_exactly(len, deadline).await
        } else {
            // Delimited by the end of the connection: a clean end is the end of the body.
            close = true;
            loop {
                match self.fill(deadline).await {
                    Ok(()) => self.buf.clear(),
                    Err(ReadEnd::Eof) => break Ok(()),
                    Err(other) => break Err(other),
                }
            }
        };
        match body_end {
            Ok(()) => {}
            Err(ReadEnd::Eof) => {
                return Outcome::Truncated(format!("status {status}: connection closed inside the body"))
            }
            Err(ReadEnd::Reset(e)) => return Outcome::Truncated(format!("status {status}: reading the body: {e}")),
            Err(ReadEnd::Timeout) => return Outcome::Timeout(format!("status {status}: reading the body")),
        }
        if !self.buf.is_empty() && !close {
            return Outcome::OtherError(format!("{} unexpected bytes after the response", self.buf.len()));
        }
        match status {
            200..=299 => Outcome::Ok { close },
            500..=599 => Outcome::ServerError(status),
            s => Outcome::OtherStatus(s),
        }
    }

    async fn read_exactly(&mut self, len: usize, deadline: Instant) -> Result<(), ReadEnd> {
        while self.buf.len() < len {
            self.fill(deadline).await?;
        }
        self.buf.drain(..len);
        Ok(())
    }

    async fn read_chunked(&mut self, deadline: Instant) -> Result<(), ReadEnd> {
        loop {
            let line = self.read_line(deadline).await?;
            let size_text = line.split(';').next().unwrap_or("").trim();
            let size =
                usize::from_str_radix(size_text, 16).map_err(|_| ReadEnd::Reset(format!("bad chunk size {line:?}")))?;
            if size == 0 {
                while !self.read_line(deadline).await?.is_empty() {}
                return Ok(());
            }
            self.read_exactly(size + 2, deadline).await?;
        }
    }

    async fn read_line(&mut self, deadline: Instant) -> Result<String, ReadEnd> {
        loop {
            if let Some(at) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..at]).into_owned();
                self.buf.drain(..at + 2);
                return Ok(line);
            }
            self.fill(deadline).await?;
        }
    }
}
