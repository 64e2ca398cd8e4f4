use super::*;

#[test]
fn the_probes_routes_never_need_a_certificate_and_admin_guards_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let ca = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = params.self_signed(&ca).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["localhost".into()])
        .unwrap()
        .signed_by(&key, &ca_cert, &ca)
        .unwrap();
    let write = |name: &str, text: String| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let mut files = TlsConfig {
        cert_file: Some(write("cert.pem", leaf.pem())),
        key_file: Some(write("key.pem", key.serialize_pem())),
        client_ca_file: Some(write("ca.pem", ca_cert.pem())),
        client_auth: None,
    };
    let all = ServerTls::new(&files, None).unwrap();
    files.client_auth = Some(ClientAuth::Admin);
    let admin = ServerTls::new(&files, None).unwrap();
    files.client_ca_file = None;
    files.client_auth = None;
    let none = ServerTls::new(&files, None).unwrap();
    for probe in [
        "/healthz",
        "/readyz",
        "/metrics",
        "/v1/time",
        "/grpc.health.v1.Health/Check",
        "/grpc.health.v1.Health/Watch",
    ] {
        assert!(!all.needs_client_cert(probe), "{probe}");
        assert!(!admin.needs_client_cert(probe), "{probe}");
    }
    for open in [
        "/decodeSnowflakeId",
        "/v1/decode/order",
        "/v1/snowflake/123/decode",
        "/leaf.v1.Snowflake/DecodeSnowflake",
        "/v1/monotonic/123/decode",
        "/leaf.v1.Monotonic/DecodeMonotonic",
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    ] {
        assert!(all.needs_client_cert(open), "{open}");
        assert!(!admin.needs_client_cert(open), "{open}");
    }
    for guarded in [
        "/",
        "/cache",
        "/db",
        "/snowflake",
        "/v1/tags",
        "/v1/tags/order",
        "/api/segment/get/order",
        "/api/snowflake/get/x",
        "/v1/segment/order",
        "/v1/segment/order/allocate",
        "/v1/snowflake",
        "/v1/monotonic",
        "/v1/monotonic/range",
        "/api/monotonic/get",
        "/leaf.v1.Monotonic/NextMonotonicIds",
        "/leaf.v1.Monotonic/StreamMonotonicIds",
        "/leaf.v1.Segment/AllocateSegment",
        "/leaf.v1.Admin/CreateTag",
        "/%63ache",
        "/no/such/route",
        "/healthz/",
        "/v1/snowflake/decode/../../v1/snowflake",
    ] {
        assert!(all.needs_client_cert(guarded), "{guarded}");
        assert!(admin.needs_client_cert(guarded), "{guarded}");
        assert!(!none.needs_client_cert(guarded), "{guarded}");
    }
}

#[test]
fn a_pair_replaced_file_by_file_is_taken_once_whole_and_counts_no_error() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (pair("first"), pair("second"));
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    write("cert.pem", &first.0);
    write("key.pem", &first.1);
    let files = TlsConfig {
        cert_file: Some(dir.path().join("cert.pem")),
        key_file: Some(dir.path().join("key.pem")),
        client_ca_file: None,
        client_auth: None,
    };
    let tls = ServerTls::new(&files, None).unwrap();
    assert_eq!(tls.reload(false), Reload::Unchanged);
    // The key first, read before the certificate follows: a new key with the old certificate.
    write("key.pem", &second.1);
    assert_eq!(
        tls.reload(false),
        Reload::Unchanged,
        "a change is held once first"
    );
    write("cert.pem", &second.0);
    assert_eq!(
        tls.reload(false),
        Reload::Unchanged,
        "changed again: held again"
    );
    assert_eq!(tls.reload(false), Reload::Loaded);
    assert_eq!(tls.reload(false), Reload::Unchanged);
    // A bad pair that stays: one error, then quiet.
    write("key.pem", &first.1);
    assert_eq!(tls.reload(false), Reload::Unchanged);
    assert!(matches!(tls.reload(false), Reload::Kept(why) if why.contains("does not go with")));
    assert_eq!(tls.reload(false), Reload::Unchanged);
    // SIGHUP reads and loads at once.
    write("key.pem", &second.1);
    assert_eq!(tls.reload(true), Reload::Loaded);
}

/// A self-signed certificate for `localhost` and its key, as PEM.
fn pair(name: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
}
