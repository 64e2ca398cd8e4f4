//! `leaf-server probe`: the container health check. It asks the running server's `/healthz`
//! (or `/readyz`) over HTTP/1.1 (over TLS when the server's port speaks it, `https://`) and
//! reports whether it answered 200, so that an image needs no shell, curl or wget for its
//! `HEALTHCHECK`. Over TLS it does not verify the certificate: it asks its own node, whose
//! certificate seldom names a loopback address, and learns only whether the node is up.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// The base URL of the server listening on `listen` (`https://` when `tls`): an unspecified
/// address (`0.0.0.0`, `::`) is asked on loopback.
pub fn base_url(listen: SocketAddr, tls: bool) -> String {
    let ip = match listen.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".to_owned(),
        ip if ip.is_unspecified() => "[::1]".to_owned(),
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
        ip => ip.to_string(),
    };
    let scheme = if tls { "https" } else { "http" };
    format!("{scheme}://{ip}:{}", listen.port())
}

/// Asks `{base}/healthz` (`ready`: `/readyz`) within `timeout`: `Ok` with the status line on a
/// 200, `Err` saying what happened otherwise (another status with its body, no answer, a
/// malformed URL).
pub fn probe(base: &str, ready: bool, timeout: Duration) -> Result<String, String> {
    let (tls, rest) = match (base.strip_prefix("http://"), base.strip_prefix("https://")) {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        _ => return Err(format!("{base:?} is not an http:// or https:// URL")),
    };
    let (authority, prefix) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    if authority.is_empty() {
        return Err(format!("{base:?} names no host"));
    }
    let with_port = if authority.ends_with(']') || !authority.contains(':') {
        format!("{authority}:{}", if tls { 443 } else { 80 })
    } else {
        authority.to_owned()
    };
    let addr = with_port
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {authority}: {e}"))?
        .next()
        .ok_or_else(|| format!("{authority} resolves to no address"))?;
    let path = format!("{prefix}/{}", if ready { "readyz" } else { "healthz" });
    let stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| format!("no answer from {addr}: {e}"))?;
    let io = |e: std::io::Error| format!("GET {path} on {addr}: {e}");
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: leaf-server-probe\r\n\
         Connection: close\r\n\r\n"
    );
    // A server that keeps the connection open past `Connection: close` still times out.
    let answer = if tls {
        let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
        let name = crate::http::tls::server_name(host).map_err(io)?;
        let conn = rustls::ClientConnection::new(crate::http::tls::unverified_client(), name)
            .map_err(|e| format!("TLS to {addr}: {e}"))?;
        exchange(rustls::StreamOwned::new(conn, stream), &request).map_err(io)?
    } else {
        exchange(stream, &request).map_err(io)?
    };
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status_line = head.lines().next().unwrap_or_default().to_owned();
    match status_line.split(' ').nth(1) {
        Some("200") => Ok(format!("{path}: {status_line}")),
        Some(_) => Err(format!("{path}: {status_line} {}", body.trim())),
        None => Err(format!("{path}: no HTTP answer from {addr}")),
    }
}

/// Writes `request` and reads the answer, up to 64 KiB.
fn exchange(mut stream: impl Read + Write, request: &str) -> std::io::Result<Vec<u8>> {
    stream.write_all(request.as_bytes())?;
    stream.flush()?;
    let mut answer = Vec::new();
    match stream.take(64 * 1024).read_to_end(&mut answer) {
        // A TLS peer that closes without close_notify after a whole answer.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !answer.is_empty() => {}
        other => {
            other?;
        }
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_url_table() {
        let check = |listen: &str, expect: &str| {
            assert_eq!(base_url(listen.parse().unwrap(), false), expect, "{listen}");
        };
        check("0.0.0.0:8080", "http://127.0.0.1:8080");
        check("10.0.0.5:9090", "http://10.0.0.5:9090");
        check("[::]:8080", "http://[::1]:8080");
        check("[fe80::1]:8080", "http://[fe80::1]:8080");
        assert_eq!(
            base_url("0.0.0.0:8443".parse().unwrap(), true),
            "https://127.0.0.1:8443"
        );
    }

    #[test]
    fn malformed_urls_are_errors_not_panics() {
        let t = Duration::from_millis(200);
        for url in ["ftp://h:1", "h:1", "http://", "http:///healthz", "https://"] {
            assert!(probe(url, false, t).is_err(), "{url}");
        }
    }

    #[test]
    fn nothing_listening_is_an_error_naming_the_address() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let e = probe(
            &format!("http://127.0.0.1:{port}"),
            true,
            Duration::from_millis(500),
        )
        .unwrap_err();
        assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
    }
}
