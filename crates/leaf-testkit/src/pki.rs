//! Certificates made at test time (rcgen): a CA, server certificates for `localhost` and
//! `127.0.0.1` (and any other names), client certificates, and [`Pki`], the files of one CA,
//! one server and one client in a directory of their own, as a secured test server and its
//! clients read them.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair};

/// A certificate authority.
pub struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

/// A certificate and its key, as PEM.
#[derive(Clone)]
pub struct Pair {
    /// The certificate.
    pub cert: String,
    /// Its private key (PKCS#8).
    pub key: String,
}

impl std::fmt::Debug for Pair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pair").finish_non_exhaustive()
    }
}

impl Ca {
    /// A new CA whose `CN` is `name`.
    pub fn new(name: &str) -> Ca {
        let key = KeyPair::generate().expect("a new key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("no names");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("a self-signed CA");
        Ca { cert, key }
    }

    /// The CA's certificate, PEM.
    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    fn issue(&self, params: CertificateParams) -> Pair {
        let key = KeyPair::generate().expect("a new key");
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("a certificate signed by the CA");
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// A server certificate for `localhost` and `127.0.0.1`, its `CN` `name`.
    pub fn server(&self, name: &str) -> Pair {
        self.server_for(name, &[])
    }

    /// A server certificate for `localhost`, `127.0.0.1` and `more` (host names, or
    /// addresses), its `CN` `name`.
    pub fn server_for(&self, name: &str, more: &[&str]) -> Pair {
        self.issue(server_params(name, more))
    }

    /// A server certificate whose time ended in 2021.
    pub fn expired_server(&self, name: &str) -> Pair {
        let mut params = server_params(name, &[]);
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        self.issue(params)
    }

    /// A client certificate of `name` (its `CN`, as the servers that map certificates to users
    /// read it); `expired`: one whose time ended in 2021.
    pub fn client(&self, name: &str, expired: bool) -> Pair {
        let mut params = CertificateParams::new(vec![name.to_owned()]).expect("a name");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        self.issue(params)
    }
}

fn server_params(name: &str, more: &[&str]) -> CertificateParams {
    let names = ["localhost", "127.0.0.1"]
        .iter()
        .chain(more)
        .map(|n| n.to_string())
        .collect::<Vec<_>>();
    let mut params = CertificateParams::new(names).expect("valid names");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        // etcd's members and some servers present their serving certificate as clients too.
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params
}

/// Writes `text` to `dir/name` as a secret volume does (a new file moved over the old one).
pub fn put(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    // A name of this write's own: tests running at once may put the same file.
    let tmp = dir.join(format!(".{name}.{:016x}.tmp", fastrand::u64(..)));
    std::fs::write(&tmp, text).expect("write a file of the test's directory");
    std::fs::rename(&tmp, &path).expect("move it into place");
    path
}

/// One CA, a server certificate and a client certificate, written as PEM files into a
/// directory of their own: `ca.pem`, `server.pem`, `server.key`, `client.pem`, `client.key`
/// (and `other-ca.pem`, a CA that signed none of them, for the wrong-CA cases). The directory
/// is removed with this value.
pub struct Pki {
    dir: tempfile::TempDir,
    /// The CA's certificate.
    pub ca: String,
    /// The server's certificate and key.
    pub server: Pair,
    /// The client's certificate and key.
    pub client: Pair,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki")
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl Pki {
    /// A new CA, a server certificate for `localhost`, `127.0.0.1` and `server_names`, and a
    /// client certificate whose `CN` is `client_name` (the user a server maps it to).
    pub fn new(server_names: &[&str], client_name: &str) -> Pki {
        let ca = Ca::new("leaf test CA");
        let server = ca.server_for("leaf test server", server_names);
        Self::write(ca, server, client_name)
    }

    /// As [`new`](Self::new), the server certificate for `localhost` only: a client that
    /// verifies the host name refuses the server at `127.0.0.1` (the wrong-host cases).
    pub fn localhost_only(client_name: &str) -> Pki {
        let ca = Ca::new("leaf test CA");
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).expect("a name");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "leaf test server");
        let server = ca.issue(params);
        Self::write(ca, server, client_name)
    }

    fn write(ca: Ca, server: Pair, client_name: &str) -> Pki {
        let client = ca.client(client_name, false);
        let other = Ca::new("another CA");
        let dir = tempfile::tempdir().expect("a directory for the certificates");
        put(dir.path(), "ca.pem", &ca.pem());
        put(dir.path(), "other-ca.pem", &other.pem());
        put(dir.path(), "server.pem", &server.cert);
        put(dir.path(), "server.key", &server.key);
        put(dir.path(), "client.pem", &client.cert);
        put(dir.path(), "client.key", &client.key);
        Pki {
            ca: ca.pem(),
            dir,
            server,
            client,
        }
    }

    /// The path of one of the files (`ca.pem`, `client.key`, ...).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The directory of the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
