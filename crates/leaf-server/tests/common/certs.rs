//! Certificates made at test time (rcgen): a CA, a server certificate for `localhost` and
//! `127.0.0.1`, client certificates, and TLS clients of rustls that trust the CA.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A certificate authority.
pub(crate) struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

/// A certificate and its key, as PEM.
#[derive(Clone)]
pub(crate) struct Pair {
    pub(crate) cert: String,
    pub(crate) key: String,
}

impl Ca {
    pub(crate) fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    pub(crate) fn pem(&self) -> String {
        self.cert.pem()
    }

    fn issue(&self, params: CertificateParams) -> Pair {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// A server certificate for `localhost` and `127.0.0.1`, its `CN` `name`.
    pub(crate) fn server(&self, name: &str) -> Pair {
        self.issue(server_params(name))
    }

    /// A server certificate whose time ended in 2021.
    pub(crate) fn expired_server(&self, name: &str) -> Pair {
        let mut params = server_params(name);
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        self.issue(params)
    }

    /// A client certificate of `name`; `expired`: one whose time ended yesterday.
    pub(crate) fn client(&self, name: &str, expired: bool) -> Pair {
        let mut params = CertificateParams::new(vec![name.to_owned()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        self.issue(params)
    }
}

fn server_params(name: &str) -> CertificateParams {
    let mut params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params
}

/// Writes `text` to `dir/name` as a secret volume does (a new file moved over the old one).
pub(crate) fn put(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    path
}

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
