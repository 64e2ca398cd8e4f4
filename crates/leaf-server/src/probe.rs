//! `leaf-server probe`: the container health check. It asks the running server's `/healthz`
//! (or `/readyz`) over plain HTTP/1.1 and reports whether it answered 200, so that an image
//! needs no shell, curl or wget for its `HEALTHCHECK`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// The base URL of the server listening on `listen`: an unspecified address (`0.0.0.0`, `::`)
/// is asked on loopback.
pub fn base_url(listen: SocketAddr) -> String {
    let ip = match listen.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".to_owned(),
        ip if ip.is_unspecified() => "[::1]".to_owned(),
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
        ip => ip.to_string(),
    };
    format!("http://{ip}:{}", listen.port())
}

/// Asks `{base}/healthz` (`ready`: `/readyz`) within `timeout`: `Ok` with the status line on a
/// 200, `Err` saying what happened otherwise (another status with its body, no answer, a
/// malformed URL).
pub fn probe(base: &str, ready: bool, timeout: Duration) -> Result<String, String> {
    let rest = base
        .strip_prefix("http://")
        .ok_or_else(|| format!("{base:?} is not an http:// URL"))?;
    let (authority, prefix) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    if authority.is_empty() {
        return Err(format!("{base:?} names no host"));
    }
    let with_port = if authority.ends_with(']') || !authority.contains(':') {
        format!("{authority}:80")
    } else {
        authority.to_owned()
    };
    let addr = with_port
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {authority}: {e}"))?
        .next()
        .ok_or_else(|| format!("{authority} resolves to no address"))?;
    let path = format!("{prefix}/{}", if ready { "readyz" } else { "healthz" });
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| format!("no answer from {addr}: {e}"))?;
    let io = |e: std::io::Error| format!("GET {path} on {addr}: {e}");
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: leaf-server-probe\r\n\
         Connection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).map_err(io)?;
    let mut answer = Vec::new();
    // A server that keeps the connection open past `Connection: close` still times out.
    stream
        .take(64 * 1024)
        .read_to_end(&mut answer)
        .map_err(io)?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status_line = head.lines().next().unwrap_or_default().to_owned();
    match status_line.split(' ').nth(1) {
        Some("200") => Ok(format!("{path}: {status_line}")),
        Some(_) => Err(format!("{path}: {status_line} {}", body.trim())),
        None => Err(format!("{path}: no HTTP answer from {addr}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_url_table() {
        let check = |listen: &str, expect: &str| {
            assert_eq!(base_url(listen.parse().unwrap()), expect, "{listen}");
        };
        check("0.0.0.0:8080", "http://127.0.0.1:8080");
        check("10.0.0.5:9090", "http://10.0.0.5:9090");
        check("[::]:8080", "http://[::1]:8080");
        check("[fe80::1]:8080", "http://[fe80::1]:8080");
    }

    #[test]
    fn malformed_urls_are_errors_not_panics() {
        let t = Duration::from_millis(200);
        for url in ["https://h:1", "h:1", "http://", "http:///healthz"] {
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
