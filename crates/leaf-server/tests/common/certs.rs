//! Certificates made at test time (rcgen): a CA, a server certificate for `localhost` and
//! `127.0.0.1`, client certificates, and TLS clients of rustls that trust the CA.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use super::{Reply, parse_reply};

// Not every test binary that includes this module uses each of them.
#[allow(unused_imports)]
pub(crate) use leaf_testkit::pki::{Ca, Pair, put};

/// A rustls client that trusts `ca` (PEM), offers `alpn`, and presents `client`, if any.
pub(crate) fn client_config(
    ca: &str,
    client: Option<&Pair>,
    alpn: &[&[u8]],
) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some(p) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(p.cert.as_bytes())
                    .map(Result::unwrap)
                    .collect(),
                PrivateKeyDer::from_pem_slice(p.key.as_bytes()).unwrap(),
            )
            .unwrap(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A TLS connection of the tests, kept open across requests.
pub(crate) struct Tls {
    stream: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
}

impl Tls {
    pub(crate) fn connect(port: u16, config: Arc<rustls::ClientConfig>) -> std::io::Result<Tls> {
        let tcp = TcpStream::connect(("127.0.0.1", port))?;
        tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
        let name = ServerName::try_from("localhost").unwrap();
        let conn = rustls::ClientConnection::new(config, name).map_err(std::io::Error::other)?;
        let mut stream = rustls::StreamOwned::new(conn, tcp);
        // The handshake, now: a refused one fails here, not at the first request.
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(Tls { stream })
    }

    /// The server's certificate on this connection, as DER.
    pub(crate) fn server_cert(&self) -> Vec<u8> {
        self.stream.conn.peer_certificates().unwrap()[0].to_vec()
    }

    pub(crate) fn handshake(&self) -> Option<rustls::HandshakeKind> {
        self.stream.conn.handshake_kind()
    }

    pub(crate) fn alpn(&self) -> Option<Vec<u8>> {
        self.stream.conn.alpn_protocol().map(<[u8]>::to_vec)
    }

    /// One GET on the open connection (keep-alive), its answer read by `Content-Length`.
    pub(crate) fn get(&mut self, path: &str) -> std::io::Result<Reply> {
        write!(
            self.stream,
            "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n"
        )?;
        self.stream.flush()?;
        let mut raw = Vec::new();
        let mut byte = [0u8; 1];
        while !raw.ends_with(b"\r\n\r\n") {
            if self.stream.read(&mut byte)? == 0 {
                return Err(std::io::Error::other(format!(
                    "closed after {:?}",
                    String::from_utf8_lossy(&raw)
                )));
            }
            raw.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&raw).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body)?;
        raw.extend_from_slice(&body);
        parse_reply(&raw)
    }
}

/// One GET on a connection of its own.
pub(crate) fn https(
    port: u16,
    config: &Arc<rustls::ClientConfig>,
    path: &str,
) -> std::io::Result<Reply> {
    Tls::connect(port, Arc::clone(config))?.get(path)
}
