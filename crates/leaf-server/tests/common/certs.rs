//! Certificates made at test time (rcgen): a CA, a server certificate for `localhost` and
//! `127.0.0.1`, client certificates, and TLS clients of rustls that trust the CA.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

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
