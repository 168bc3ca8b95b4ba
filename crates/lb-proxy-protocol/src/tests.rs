//! Unit tests of PROXY header parsing and reading: every version and family we accept, the
//! errors for what we refuse, and above all that reading never consumes the data that follows.

use std::net::SocketAddr;

use ppp::v2;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("test address")
}

const V1_TCP4: &[u8] = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n";
const V1_TCP6: &[u8] = b"PROXY TCP6 2001:db8::1 ::1 65535 8443\r\n";
const DATA: &[u8] = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";

fn v2_builder(command: v2::Command, client: &str, local: &str) -> v2::Builder {
    v2::Builder::with_addresses(v2::Version::Two | command, v2::Protocol::Stream, (addr(client), addr(local)))
}

fn ssl_tlv(client: u8, verify: u32, version: &[u8], cipher: &[u8]) -> Vec<u8> {
    let mut v = vec![client];
    v.extend_from_slice(&verify.to_be_bytes());
    for (kind, value) in [(0x21u8, version), (0x23, cipher)] {
        v.push(kind);
        v.extend_from_slice(&u16::try_from(value.len()).expect("short").to_be_bytes());
        v.extend_from_slice(value);
    }
    v
}

fn v2_full() -> Vec<u8> {
    v2_builder(v2::Command::Proxy, "203.0.113.7:50000", "10.0.0.1:443")
        .write_tlv(v2::Type::ALPN, b"h2")
        .and_then(|b| b.write_tlv(v2::Type::Authority, b"api.example.com"))
        .and_then(|b| b.write_tlv(v2::Type::SSL, &ssl_tlv(0x03, 0, b"TLSv1.3", b"TLS_AES_256_GCM_SHA384")))
        .and_then(|b| b.write_tlv(v2::Type::NoOp, b"\0\0\0"))
        .and_then(v2::Builder::build)
        .expect("build v2 header")
}

#[test]
fn v1_tcp4() {
    let h = parse(V1_TCP4).expect("valid");
    assert_eq!(h.client, Some(addr("192.168.0.1:56324")));
    assert_eq!(h.local, Some(addr("192.168.0.11:443")));
    assert_eq!((h.tls, h.alpn, h.authority), (None, None, None));
}

#[test]
fn v1_tcp6() {
    let h = parse(V1_TCP6).expect("valid");
    assert_eq!(h.client, Some(addr("[2001:db8::1]:65535")));
    assert_eq!(h.local, Some(addr("[::1]:8443")));
}

#[test]
fn v1_unknown() {
    assert_eq!(parse(b"PROXY UNKNOWN\r\n").expect("valid"), ProxyHeader::default());
    let long = b"PROXY UNKNOWN ffff:f::1 ffff:f::2 65535 65535\r\n";
    assert_eq!(parse(long).expect("valid"), ProxyHeader::default());
}

#[test]
fn v2_with_tlvs() {
    let h = parse(&v2_full()).expect("valid");
    assert_eq!(h.client, Some(addr("203.0.113.7:50000")));
    assert_eq!(h.local, Some(addr("10.0.0.1:443")));
    assert_eq!(h.alpn.as_deref(), Some("h2"));
    assert_eq!(h.authority.as_deref(), Some("api.example.com"));
    let tls = h.tls.expect("SSL TLV");
    assert_eq!(tls.version.as_deref(), Some("TLSv1.3"));
    assert_eq!(tls.cipher.as_deref(), Some("TLS_AES_256_GCM_SHA384"));
    assert!(tls.client_cert && tls.client_cert_verified);
}

#[test]
fn v2_ssl_flags() {
    let build = |client: u8, verify: u32| {
        let bytes = v2_builder(v2::Command::Proxy, "[2001:db8::5]:4000", "[2001:db8::1]:443")
            .write_tlv(v2::Type::SSL, &ssl_tlv(client, verify, b"TLSv1.2", b"X"))
            .and_then(v2::Builder::build)
            .expect("build");
        parse(&bytes).expect("valid")
    };
    let h = build(0x01, 0);
    assert_eq!(h.client, Some(addr("[2001:db8::5]:4000")));
    let tls = h.tls.expect("TLS");
    assert!(!tls.client_cert && !tls.client_cert_verified);
    let tls = build(0x03, 1).tls.expect("TLS");
    assert!(tls.client_cert && !tls.client_cert_verified);
    // The TLV without PP2_CLIENT_SSL: the client did not use TLS.
    assert_eq!(build(0x00, 0).tls, None);
    // Shorter than client + verify.
    let bytes = v2_builder(v2::Command::Proxy, "1.2.3.4:5", "5.6.7.8:9")
        .write_tlv(v2::Type::SSL, &[1, 0, 0])
        .and_then(v2::Builder::build)
        .expect("build");
    assert!(matches!(parse(&bytes), Err(ProxyError::MalformedV2(_))));
}

#[test]
fn v2_local_and_unspec() {
    let local = v2_builder(v2::Command::Local, "1.2.3.4:5", "5.6.7.8:9")
        .write_tlv(v2::Type::Authority, b"ignored")
        .and_then(v2::Builder::build)
        .expect("build");
    assert_eq!(parse(&local).expect("valid"), ProxyHeader::default());
    let unspec = v2::Builder::new(v2::Version::Two | v2::Command::Proxy, 0x00)
        .write_tlv(v2::Type::ALPN, b"http/1.1")
        .and_then(v2::Builder::build)
        .expect("build");
    let h = parse(&unspec).expect("valid");
    assert_eq!((h.client, h.local), (None, None));
    assert_eq!(h.alpn.as_deref(), Some("http/1.1"));
}

#[test]
fn v2_crc32c() {
    assert_eq!(crc32c(b"123456789".iter().copied()), 0xE306_9283);
    let mut bytes = v2_builder(v2::Command::Proxy, "1.2.3.4:5", "5.6.7.8:9")
        .write_tlv(v2::Type::CRC32C, &[0, 0, 0, 0])
        .and_then(|b| b.write_tlv(v2::Type::ALPN, b"h2"))
        .and_then(v2::Builder::build)
        .expect("build");
    let at = V2_FIXED_LEN + 12 + 3;
    let crc = crc32c(bytes.iter().copied());
    bytes[at..at + 4].copy_from_slice(&crc.to_be_bytes());
    assert_eq!(parse(&bytes).expect("valid").alpn.as_deref(), Some("h2"));
    bytes[at] ^= 1;
    let err = parse(&bytes).expect_err("bad CRC");
    assert!(err.to_string().contains("CRC32C mismatch"), "{err}");
}

#[test]
fn absent_header() {
    let err = parse(DATA).expect_err("no header");
    assert_eq!(err.to_string(), r#"missing PROXY header (first bytes: "GET / HT")"#);
    let err = parse(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03").expect_err("TLS");
    assert_eq!(err.to_string(), r#"missing PROXY header (first bytes: "\x16\x03\x01\x02\x00\x01\x00\x01")"#);
}

#[test]
fn malformed_rejected() {
    let v1_bad: &[&[u8]] = &[
        b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\n",
        b"PROXY TCP4 192.168.0.1 192.168.0.11 56324\r\n",
        b"PROXY TCP4 192.168.0.1 192.168.0.011 56324 443\r\n",
        b"PROXY TCP4 192.168.0.1 192.168.0.11 +5632 443\r\n",
        b"PROXY TCP4 192.168.0.1 192.168.0.11 056324 443\r\n",
        b"PROXY TCP4 192.168.0.1 192.168.0.11 65536 443\r\n",
        b"PROXY TCP4 ::1 ::1 1 1\r\n",
        b"PROXY TCP6 1.2.3.4 1.2.3.4 1 1\r\n",
        b"PROXY UDP4 1.2.3.4 1.2.3.4 1 1\r\n",
        b"PROXY TCP4 1.2.3.4 1.2.3.4 1 1\r\nextra",
        b"PROXY  TCP4 1.2.3.4 1.2.3.4 1 1\r\n",
        b"PROXY TCP4 1.2.3.4 1.2.3.4 1 1 \r\n",
        // Found by the fuzzer: ppp takes a bare LF after UNKNOWN, and anything after it.
        b"PROXY UNKNOWN UNKNOWN \n \nQUI2",
        b"PROXY UNKNOWN UNKNOWN \n",
        b"PROXY UNKNOWN\r\r\n",
    ];
    for bytes in v1_bad {
        assert!(matches!(parse(bytes), Err(ProxyError::MalformedV1(_))), "{:?}", bytes.escape_ascii().to_string());
    }
    let full = v2_full();
    let mut version = full.clone();
    version[12] = 0x11;
    assert_eq!(parse(&version).expect_err("v1 in v2").to_string(), "PROXY v2 signature with unsupported version 1");
    let mut family = full.clone();
    family[13] = 0x41;
    assert_eq!(parse(&family).expect_err("family").to_string(), "PROXY v2: unsupported address family 0x40");
    let mut command = full.clone();
    command[12] = 0x22;
    assert!(matches!(parse(&command), Err(ProxyError::MalformedV2(_))));
    let mut trailing = full.clone();
    trailing.push(0);
    assert!(matches!(parse(&trailing), Err(ProxyError::MalformedV2(_))));
    // A TLV running past the announced length.
    let mut tlv = full.clone();
    let n = tlv.len();
    tlv[n - 5] = 0x10;
    assert!(matches!(parse(&tlv), Err(ProxyError::MalformedV2(_))));
}

#[test]
fn truncated_rejected() {
    for header in [V1_TCP4, V1_TCP6, &v2_full()[..]] {
        for cut in 0..header.len() {
            assert!(parse(&header[..cut]).is_err(), "cut at {cut}");
            let mut reader = &header[..cut];
            let rt = runtime();
            let err = rt.block_on(read_proxy_header(&mut reader)).expect_err("truncated");
            match cut {
                0 => assert!(matches!(err, ProxyError::Closed), "{err}"),
                _ => assert!(matches!(err, ProxyError::Truncated(n) if n <= cut), "{err}"),
            }
        }
    }
    let mut endless: &[u8] = &[b'x'; 200];
    let mut v1_endless = b"PROXY UNKNOWN ".to_vec();
    v1_endless.extend_from_slice(endless);
    let mut reader = &v1_endless[..];
    let err = runtime().block_on(read_proxy_header(&mut reader)).expect_err("too long");
    assert_eq!(err.to_string(), "malformed PROXY v1 header: no CRLF within 107 bytes");
    assert_eq!(v1_endless.len() - reader.len(), 107);
    let err = runtime().block_on(read_proxy_header(&mut endless)).expect_err("absent");
    assert!(matches!(err, ProxyError::Missing(_)), "{err}");
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

/// The reader stops exactly at the header's end, for every kind of header.
#[test]
fn data_after_header_not_consumed() {
    let headers: Vec<Vec<u8>> = vec![
        V1_TCP4.to_vec(),
        V1_TCP6.to_vec(),
        b"PROXY UNKNOWN\r\n".to_vec(),
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n".to_vec(),
        b"PROXY TCP6 :: :: 0 0\r\n".to_vec(),
        v2_full(),
        v2_builder(v2::Command::Local, "1.2.3.4:5", "5.6.7.8:9").build().expect("build"),
        v2::Builder::new(v2::Version::Two | v2::Command::Local, 0).build().expect("build"),
    ];
    let rt = runtime();
    for header in &headers {
        let mut input = header.clone();
        input.extend_from_slice(DATA);
        let mut reader = &input[..];
        let h = rt.block_on(read_proxy_header(&mut reader)).expect("valid");
        assert_eq!(h, parse(header).expect("valid"));
        assert_eq!(reader, DATA, "{:?}", header.escape_ascii().to_string());
        assert!(fuzz_parse(header));
        assert!(!fuzz_parse(&input));
    }
    // Over a real duplex stream, header and data written in one go.
    rt.block_on(async {
        let (mut client, mut server) = tokio::io::duplex(4096);
        let mut input = v2_full();
        input.extend_from_slice(DATA);
        client.write_all(&input).await.expect("write");
        drop(client);
        let h = read_proxy_header(&mut server).await.expect("valid");
        assert_eq!(h.alpn.as_deref(), Some("h2"));
        let mut rest = Vec::new();
        server.read_to_end(&mut rest).await.expect("read");
        assert_eq!(rest, DATA);
    });
}

/// xorshift64*: deterministic, std-only.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n.max(1) as u64).unwrap_or(0)
    }
}

/// Random valid v1 lines followed by data: the reader's chunked reads never pass the CRLF.
#[test]
fn v1_reads_stop_at_crlf() {
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let rt = runtime();
    for _ in 0..2000 {
        let line = if rng.below(2) == 0 {
            let ip = |r: &mut Rng| {
                let o: Vec<String> = (0..4).map(|_| (r.next() % 256).to_string()).collect();
                o.join(".")
            };
            format!("PROXY TCP4 {} {} {} {}\r\n", ip(&mut rng), ip(&mut rng), rng.next() % 65536, rng.next() % 65536)
        } else {
            // Random 128-bit values with runs of zero groups, so that `::` forms appear.
            let ip = |r: &mut Rng| {
                let bits = (u128::from(r.next()) << 64) | u128::from(r.next());
                let zeros = r.below(8) * 16;
                std::net::Ipv6Addr::from(bits >> zeros << (r.below(2) * zeros)).to_string()
            };
            format!("PROXY TCP6 {} {} {} {}\r\n", ip(&mut rng), ip(&mut rng), rng.next() % 65536, rng.next() % 65536)
        };
        let mut input = line.clone().into_bytes();
        input.extend_from_slice(b"\r\nPROXY TCP4 ");
        let mut reader = &input[..];
        let h = rt.block_on(read_proxy_header(&mut reader));
        assert!(h.is_ok(), "{line:?}: {h:?}");
        assert_eq!(input.len() - reader.len(), line.len(), "{line:?}");
    }
}

/// Random and mutated inputs: no panic, and reader and parser agree (`fuzz_parse` asserts it).
#[test]
fn random_inputs_never_panic() {
    let mut rng = Rng(0x0DDB_A11C_AFE0_0042);
    let seeds: Vec<Vec<u8>> = vec![
        V1_TCP4.to_vec(),
        V1_TCP6.to_vec(),
        b"PROXY UNKNOWN\r\n".to_vec(),
        v2_full(),
        v2_builder(v2::Command::Proxy, "[::1]:1", "[::2]:2").build().expect("build"),
    ];
    for i in 0..20_000 {
        let input: Vec<u8> = if i % 4 == 0 {
            let len = rng.below(300);
            let mut v: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            if rng.below(2) == 0 {
                let prefix: &[u8] = if rng.below(2) == 0 { V2_SIGNATURE } else { b"PROXY " };
                v.splice(0..0, prefix.iter().copied());
            }
            v
        } else {
            let mut v = seeds[rng.below(seeds.len())].clone();
            for _ in 0..=rng.below(4) {
                match rng.below(4) {
                    0 if !v.is_empty() => {
                        let at = rng.below(v.len());
                        v[at] = rng.next() as u8;
                    }
                    1 if !v.is_empty() => {
                        let at = rng.below(v.len());
                        v.truncate(at);
                    }
                    2 => {
                        let at = rng.below(v.len() + 1);
                        v.insert(at, rng.next() as u8);
                    }
                    _ if !v.is_empty() => {
                        let at = rng.below(v.len());
                        v.remove(at);
                    }
                    _ => {}
                }
            }
            v
        };
        let _ = fuzz_parse(&input);
    }
}

#[tokio::test]
async fn a_preface_instead_of_a_header_is_told_apart_and_read_exactly() {
    const PREFACE: &[u8; 8] = b"LB-HOP\0\x01";
    let mut input: &[u8] = b"LB-HOP\0\x01frames";
    assert_eq!(read_proxy_header_or(&mut input, PREFACE).await.expect("preface"), None);
    assert_eq!(input, b"frames", "only the preface is read");
    let mut input = [V1_TCP4, DATA].concat();
    let mut reader = &input[..];
    let header = read_proxy_header_or(&mut reader, PREFACE).await.expect("header").expect("a header");
    assert_eq!(header.client, Some(addr("192.168.0.1:56324")));
    assert_eq!(reader, DATA);
    // Neither: the error a connection without a header gets.
    input = b"LB-HOP\0\x02".to_vec();
    let err = read_proxy_header_or(&mut &input[..], PREFACE).await.expect_err("not the preface");
    assert!(matches!(err, ProxyError::Missing(_)), "{err}");
}
