//! Secrets read from files, as Kubernetes mounts them: a backend reads a `password_file` (or a
//! key named `*_file`) each time it connects, so a rotated secret takes effect at the next
//! connection without a restart. The value is never logged: errors name the key and the path,
//! never the content.

use std::path::Path;

use crate::{Error, Result};

/// The secret of `inline` (the key `key`, such as `password`) or of the file of `file` (the key
/// `{key}_file`), read now: the file's text without one trailing line break (`echo` and most
/// secret tools add one). `Config` naming the keys when both are set, and naming `{key}_file`
/// and its path when the file cannot be read or is empty.
pub fn secret(key: &str, inline: Option<&str>, file: Option<&Path>) -> Result<Option<String>> {
    match (inline, file) {
        (Some(_), Some(_)) => Err(Error::Config(format!(
            "{key} and {key}_file are both set: give one"
        ))),
        (Some(value), None) => Ok(Some(value.to_owned())),
        (None, None) => Ok(None),
        (None, Some(path)) => read_secret_file(&format!("{key}_file"), path).map(Some),
    }
}

/// The text of the secret file `path` (the key `key`) without one trailing line break; `Config`
/// naming `key` and the path when it cannot be read or holds nothing.
pub fn read_secret_file(key: &str, path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Config(format!("{key}: cannot read {}: {e}", path.display())))?;
    let value = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(&text);
    if value.is_empty() {
        return Err(Error::Config(format!("{key}: {} is empty", path.display())));
    }
    Ok(value.to_owned())
}

/// `Config` naming the key when a client certificate (`cert_file`) comes without its key
/// (`key_file`) or the reverse, or when one of the TLS files cannot be opened: checked when the
/// configuration is read, so that a missing file stops the start with its key rather than
/// failing every connection.
pub fn check_tls_files(
    ca_file: Option<&Path>,
    cert_file: Option<&Path>,
    key_file: Option<&Path>,
) -> Result<()> {
    match (cert_file, key_file) {
        (Some(_), None) => {
            return Err(Error::Config(
                "cert_file is set without key_file: a client certificate needs its key".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(Error::Config(
                "key_file is set without cert_file: a client key needs its certificate".into(),
            ));
        }
        _ => {}
    }
    let files = [
        ("ca_file", ca_file),
        ("cert_file", cert_file),
        ("key_file", key_file),
    ];
    for (key, path) in files {
        if let Some(path) = path {
            std::fs::File::open(path).map_err(|e| {
                Error::Config(format!("{key}: cannot read {}: {e}", path.display()))
            })?;
        }
    }
    Ok(())
}

/// Whether the text of a TLS error (rustls's `Display`) says a certificate was refused in the
/// handshake: the peer's not trusted or not for the name asked for, or ours refused or
/// missing. That is the configuration's to fix (`ca_file`, `cert_file`, the host name); other
/// TLS failures (a protocol error, a corrupt record) are not.
pub fn tls_certificate_refused(text: &str) -> bool {
    const ALERTS: &[&str] = &[
        "BadCertificate",
        "UnsupportedCertificate",
        "CertificateRevoked",
        "CertificateExpired",
        "CertificateUnknown",
        "UnknownCA",
        "CertificateRequired",
        "AccessDenied",
    ];
    text.contains("invalid peer certificate")
        || text.contains("peer sent no certificates")
        || (text.contains("received fatal alert") && ALERTS.iter().any(|a| text.contains(a)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_gives_its_text_without_one_line_break() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pw");
        std::fs::write(&path, "s3cret\n").unwrap();
        assert_eq!(
            secret("password", None, Some(&path)).unwrap().as_deref(),
            Some("s3cret")
        );
        std::fs::write(&path, "two\n\n").unwrap();
        assert_eq!(read_secret_file("password_file", &path).unwrap(), "two\n");
        std::fs::write(&path, "crlf\r\n").unwrap();
        assert_eq!(read_secret_file("password_file", &path).unwrap(), "crlf");
    }

    #[test]
    fn certificate_refusals_are_told_from_other_tls_failures() {
        assert!(tls_certificate_refused(
            "invalid peer certificate: UnknownIssuer"
        ));
        assert!(tls_certificate_refused(
            "received fatal alert: BadCertificate"
        ));
        assert!(tls_certificate_refused(
            "received fatal alert: CertificateRequired"
        ));
        assert!(!tls_certificate_refused(
            "received fatal alert: DecodeError"
        ));
        assert!(!tls_certificate_refused("peer misbehaved: something"));
    }

    #[test]
    fn tls_files_come_in_pairs_and_must_be_there() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "pem").unwrap();
        check_tls_files(Some(&ca), Some(&ca), Some(&ca)).unwrap();
        check_tls_files(None, None, None).unwrap();
        let names = |e: Error, key: &str| matches!(e, Error::Config(m) if m.starts_with(key));
        let e = check_tls_files(None, Some(&ca), None).unwrap_err();
        assert!(names(e, "cert_file"));
        let e = check_tls_files(None, None, Some(&ca)).unwrap_err();
        assert!(names(e, "key_file"));
        let e = check_tls_files(Some(&dir.path().join("no")), None, None).unwrap_err();
        assert!(names(e, "ca_file: cannot read"));
    }

    #[test]
    fn each_failure_names_the_key_and_never_the_value() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pw");
        let both = secret("password", Some("x"), Some(&path)).unwrap_err();
        assert!(both.to_string().contains("password_file"), "{both}");
        let missing = secret("password", None, Some(&path)).unwrap_err();
        assert!(missing.to_string().contains("password_file"), "{missing}");
        std::fs::write(&path, "\n").unwrap();
        let empty = secret("password", None, Some(&path)).unwrap_err();
        assert!(empty.to_string().contains("is empty"), "{empty}");
        std::fs::write(&path, "hunter2").unwrap();
        let both = secret("password", Some("inline-pw"), Some(&path)).unwrap_err();
        assert!(!both.to_string().contains("hunter2"), "{both}");
        assert!(!both.to_string().contains("inline-pw"), "{both}");
        assert_eq!(secret("password", None, None).unwrap(), None);
        assert_eq!(
            secret("password", Some("inline"), None).unwrap().as_deref(),
            Some("inline")
        );
    }
}
