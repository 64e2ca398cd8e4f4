//! TLS for `https://` endpoints (rustls with ring): the servers are trusted as far as
//! `ca_file` vouches for them, and `cert_file` with `key_file` is the client's certificate for
//! servers that ask for one. The files are read once, when the client is built.

use std::path::Path;
use std::sync::Arc;

use leaf_core::{Error, Result};
use rustls::{ClientConfig as TlsConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::ClientConfig;

/// The rustls configuration of `config`'s files, without ALPN (HTTP/1.1 only: hyper-rustls
/// sets none for it). With no `ca_file` it trusts no server: `check` refuses an `https://`
/// endpoint without one, so such a configuration only ever connects over `http://`.
pub(crate) fn client_config(config: &ClientConfig) -> Result<TlsConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = TlsConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("tls: {e}")))?;
    let mut roots = RootCertStore::empty();
    if let Some(path) = &config.ca_file {
        for ca in certificates("ca_file", path)? {
            roots
                .add(ca)
                .map_err(|e| Error::Config(format!("ca_file: {}: {e}", path.display())))?;
        }
    }
    let builder = builder.with_root_certificates(roots);
    match (&config.cert_file, &config.key_file) {
        (Some(cert), Some(key)) => {
            let chain = certificates("cert_file", cert)?;
            let bytes = read("key_file", key)?;
            let key_der = PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
                Error::Config(format!(
                    "key_file: {}: not a PEM private key: {e}",
                    key.display()
                ))
            })?;
            builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                Error::Config(format!(
                    "key_file: {} does not go with cert_file {}: {e}",
                    key.display(),
                    cert.display()
                ))
            })
        }
        // `check` has refused one without the other.
        _ => Ok(builder.with_no_client_auth()),
    }
}

/// The bytes of `path`, the file of `field`.
fn read(field: &str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path)
        .map_err(|e| Error::Config(format!("{field}: cannot read {}: {e}", path.display())))
}

/// The certificates of the PEM file `path`, the file of `field`: at least one.
fn certificates(field: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let bytes = read(field, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| {
            Error::Config(format!(
                "{field}: {}: not PEM certificates: {e}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(Error::Config(format!(
            "{field}: {} holds no CERTIFICATE block",
            path.display()
        )));
    }
    Ok(certs)
}
