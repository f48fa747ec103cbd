//! The proxy as a public edge, through the real single binary: HTTPS (curl, h2 and HTTP/1.1)
//! with a certificate made by openssl, bad TLS files refused at start, header and body limits,
//! slow headers dropped, CORS, and OIDC Bearer tokens from a test issuer (discovery + JWKS
//! served here, keys made by openssl, tokens signed with jsonwebtoken).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, ensure};
use arca_tests::{
    HttpResponse, Launch, Server, TempDir, basic, eventually, free_addr, run_arca, send,
};
use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const READY: Duration = Duration::from_secs(30);
const PASSWORD: &str = "edge-secret";
/// `admin:edge-secret`, as HTTP Basic.
const AUTH: &str = "Basic YWRtaW46ZWRnZS1zZWNyZXQ=";
const ROOT: &str = "/remote.php/dav/files/admin";

async fn start(dir: &TempDir, settings: &[(&str, &str)]) -> anyhow::Result<Server> {
    let mut launch = Launch::arca(dir).env("ARCA_ADMIN_PASSWORD", PASSWORD);
    for (key, value) in settings {
        launch = launch.set(key, value);
    }
    let mut server = launch.spawn()?;
    server.wait_ready(READY).await?;
    Ok(server)
}

/// Runs openssl (Debian's CLI) in `dir`; its absence is a failure, never a skip.
fn openssl(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .context("running openssl")?;
    ensure!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A self-signed certificate for localhost and 127.0.0.1: (cert.pem, key.pem).
fn self_signed(dir: &Path, name: &str) -> anyhow::Result<(PathBuf, PathBuf)> {
    let (cert, key) = (format!("{name}.crt.pem"), format!("{name}.key.pem"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            &key,
            "-out",
            &cert,
        ],
    )?;
    Ok((dir.join(cert), dir.join(key)))
}

struct Curl {
    status: u16,
    version: String,
    body: String,
}

/// `curl` over HTTPS trusting `ca`; `extra` are more curl arguments.
async fn curl(ca: &Path, url: &str, extra: &[&str]) -> anyhow::Result<Curl> {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--max-time", "20", "--cacert"])
        .arg(ca)
        .args(extra)
        .args(["-w", "\n%{http_code} %{http_version}", url])
        .output()
        .await
        .context("running curl")?;
    ensure!(
        out.status.success(),
        "curl {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, last) = text.rsplit_once('\n').context("curl output")?;
    let (status, version) = last.split_once(' ').context("curl -w output")?;
    Ok(Curl {
        status: status.parse()?,
        version: version.to_owned(),
        body: body.to_owned(),
    })
}

#[tokio::test]
async fn https_serves_http1_and_h2_with_the_configured_certificate() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let (cert, key) = self_signed(dir.path(), "server")?;
    let server = start(
        &dir,
        &[
            ("proxy.tls.cert", cert.to_str().context("path")?),
            ("proxy.tls.key", key.to_str().context("path")?),
        ],
    )
    .await?;
    let base = format!("https://{}", server.public);

    let h2 = curl(&cert, &format!("{base}/status.php"), &["--http2"]).await?;
    assert_eq!((h2.status, h2.version.as_str()), (200, "2"), "{}", h2.body);
    assert!(h2.body.contains("\"installed\""), "{}", h2.body);
    let h1 = curl(&cert, &format!("{base}/status.php"), &["--http1.1"]).await?;
    assert_eq!((h1.status, h1.version.as_str()), (200, "1.1"));

    // A file up and down over h2, authenticated: bodies stream through TLS both ways.
    let file = dir.join("up.bin");
    let content: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&file, &content)?;
    let put = curl(
        &cert,
        &format!("{base}{ROOT}/up.bin"),
        &[
            "--http2",
            "-u",
            &format!("admin:{PASSWORD}"),
            "-T",
            file.to_str().context("path")?,
        ],
    )
    .await?;
    assert_eq!(
        (put.status, put.version.as_str()),
        (201, "2"),
        "{}",
        put.body
    );
    let back = dir.join("back.bin");
    let get = curl(
        &cert,
        &format!("{base}{ROOT}/up.bin"),
        &[
            "--http2",
            "-u",
            &format!("admin:{PASSWORD}"),
            "-o",
            back.to_str().context("path")?,
        ],
    )
    .await?;
    assert_eq!(get.status, 200);
    assert!(std::fs::read(&back)? == content, "downloaded bytes differ");

    // A client that does not trust the certificate is refused by curl's own check, and plain
    // HTTP on the TLS port gets no HTTP answer.
    let untrusted = tokio::process::Command::new("curl")
        .args(["-sS", "--max-time", "10", &format!("{base}/status.php")])
        .output()
        .await?;
    assert!(
        !untrusted.status.success(),
        "curl trusted a self-signed certificate"
    );
    assert!(
        arca_tests::get(&server.public, "/status.php", &[])
            .await
            .is_err()
    );
    Ok(())
}

#[tokio::test]
async fn unusable_tls_files_stop_arca_with_exit_2_before_binding() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let (cert, key) = self_signed(dir.path(), "a")?;
    let (_, other_key) = self_signed(dir.path(), "b")?;
    let garbage = dir.join("garbage.pem");
    std::fs::write(&garbage, "not PEM at all\n")?;
    let missing = dir.join("missing.pem");
    let path = |p: &Path| p.to_str().map(str::to_owned).context("path");
    let cases = [
        (
            path(&missing)?,
            path(&key)?,
            "proxy.tls.cert",
            "cannot read",
        ),
        (
            path(&garbage)?,
            path(&key)?,
            "proxy.tls.cert",
            "no PEM certificate",
        ),
        (
            path(&cert)?,
            path(&missing)?,
            "proxy.tls.key",
            "cannot read",
        ),
        (
            path(&cert)?,
            path(&garbage)?,
            "proxy.tls.key",
            "no PEM private key",
        ),
        (
            path(&cert)?,
            path(&other_key)?,
            "proxy.tls.key",
            "does not belong",
        ),
    ];
    for (cert, key, blamed, problem) in cases {
        let public = free_addr();
        let data = dir.join("data");
        let finished = run_arca(
            &[
                "server",
                "--data-dir",
                data.to_str().context("path")?,
                "--debug-addr",
                &free_addr(),
                "--proxy-http-addr",
                &public,
                "--set",
                &format!("proxy.tls.cert={cert}"),
                "--set",
                &format!("proxy.tls.key={key}"),
            ],
            &[],
        )
        .await?;
        assert_eq!(
            finished.code,
            Some(2),
            "{cert} {key}: {:?}",
            finished.stderr
        );
        assert_eq!(finished.stderr.len(), 1, "one line: {:?}", finished.stderr);
        let line = &finished.stderr[0];
        assert!(
            line.starts_with(&format!("config error: {blamed}: ")) && line.contains(problem),
            "{line}"
        );
        // Refused before anything was bound or created.
        assert!(!data.exists(), "{line}: the data dir was created");
    }
    Ok(())
}

#[tokio::test]
async fn oversized_headers_get_431_and_slow_headers_are_dropped() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(
        &dir,
        &[
            ("proxy.limits.max_header_bytes", "4KiB"),
            ("proxy.limits.header_timeout", "1s"),
        ],
    )
    .await?;
    let addr = server.public.clone();
    let fits = "x".repeat(3000);
    let ok = arca_tests::get(&addr, "/status.php", &[("x-pad", &fits)]).await?;
    assert_eq!(ok.status, 200);
    let big = "x".repeat(5000);
    let refused = arca_tests::get(&addr, "/status.php", &[("x-pad", &big)]).await?;
    assert_eq!(refused.status, 431, "{}", refused.text());
    // Far past anything the HTTP layer buffers: still a clean 431, from hyper itself.
    let huge = "x".repeat(600 << 10);
    let refused = arca_tests::get(&addr, "/status.php", &[("x-pad", &huge)]).await?;
    assert_eq!(refused.status, 431);

    // A client that starts a request and never finishes its headers is cut off.
    let mut slow = tokio::net::TcpStream::connect(&addr).await?;
    slow.write_all(b"GET /status.php HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n")
        .await?;
    let started = Instant::now();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), slow.read_to_end(&mut buf)).await;
    let waited = started.elapsed();
    ensure!(read.is_ok(), "the slow client was not dropped within 10 s");
    assert!(
        waited >= Duration::from_millis(800) && waited < Duration::from_secs(5),
        "dropped after {waited:?}, want about 1 s"
    );
    assert!(
        !String::from_utf8_lossy(&buf).contains("200 OK"),
        "a half-sent request was answered"
    );
    // The server is fine afterwards.
    assert_eq!(server.get("/status.php").await?.status, 200);
    Ok(())
}

#[tokio::test]
async fn idle_connections_are_closed() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(
        &dir,
        &[
            ("proxy.limits.idle_timeout", "1s"),
            ("proxy.limits.header_timeout", "30s"),
        ],
    )
    .await?;
    // A kept-alive connection is closed once it has been quiet for the idle timeout, after
    // its request was answered; so is one that never says anything.
    for request in [&b"GET /status.php HTTP/1.1\r\nHost: x\r\n\r\n"[..], b""] {
        let mut conn = tokio::net::TcpStream::connect(&server.public).await?;
        conn.write_all(request).await?;
        let started = Instant::now();
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(15), conn.read_to_end(&mut buf)).await;
        let waited = started.elapsed();
        ensure!(read.is_ok(), "an idle connection stayed open 15 s");
        assert!(
            waited >= Duration::from_millis(800) && waited < Duration::from_secs(5),
            "closed after {waited:?}, want about 1 s"
        );
        assert_eq!(
            String::from_utf8_lossy(&buf).contains("200 OK"),
            !request.is_empty(),
            "{}",
            String::from_utf8_lossy(&buf)
        );
    }
    Ok(())
}

/// PUT with a streamed body (chunked: no Content-Length), the whole answer.
async fn put_streamed(addr: &str, path: &str, chunks: Vec<Bytes>) -> anyhow::Result<HttpResponse> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let frames = futures::stream::iter(
        chunks
            .into_iter()
            .map(|c| Ok::<_, std::io::Error>(Frame::data(c))),
    );
    let req = hyper::Request::put(path)
        .header("host", addr)
        .header("authorization", AUTH)
        .body(StreamBody::new(frames))?;
    let resp = tokio::time::timeout(Duration::from_secs(20), sender.send_request(req))
        .await
        .context("no answer within 20 s")??;
    let status = resp.status().as_u16();
    let (parts, body) = resp.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .unwrap_or_default();
    Ok(HttpResponse {
        status,
        headers: parts.headers,
        body,
    })
}

#[tokio::test]
async fn bodies_over_the_limit_get_413_and_nothing_is_written() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[("proxy.limits.max_body_bytes", "64KiB")]).await?;
    let a = &server.public;
    let auth = [("authorization", AUTH)];

    let declared = send(
        a,
        "PUT",
        &format!("{ROOT}/declared.bin"),
        &auth,
        vec![7u8; 70_000],
    )
    .await?;
    assert_eq!(declared.status, 413, "{}", declared.text());
    let streamed = put_streamed(
        a,
        &format!("{ROOT}/streamed.bin"),
        vec![
            Bytes::from(vec![1u8; 40_000]),
            Bytes::from(vec![2u8; 40_000]),
        ],
    )
    .await?;
    assert_eq!(streamed.status, 413, "{}", streamed.text());
    for name in ["declared.bin", "streamed.bin"] {
        let got = send(a, "GET", &format!("{ROOT}/{name}"), &auth, "").await?;
        assert_eq!(got.status, 404, "{name} must not exist: {}", got.text());
    }

    // Within the limit, streamed or not, uploads go through whole.
    let small = put_streamed(
        a,
        &format!("{ROOT}/small.bin"),
        vec![
            Bytes::from(vec![3u8; 30_000]),
            Bytes::from(vec![4u8; 30_000]),
        ],
    )
    .await?;
    assert_eq!(small.status, 201, "{}", small.text());
    let got = send(a, "GET", &format!("{ROOT}/small.bin"), &auth, "").await?;
    assert_eq!(got.body.len(), 60_000);
    assert!(
        got.body[..30_000].iter().all(|b| *b == 3) && got.body[30_000..].iter().all(|b| *b == 4)
    );
    Ok(())
}

/// Reads one HTTP/1.1 answer with a Content-Length body: (status line, body).
async fn read_answer(conn: &mut tokio::net::TcpStream) -> anyhow::Result<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = conn.read(&mut chunk).await.context("reading the answer")?;
        ensure!(n > 0, "connection closed before the answer's head: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .context("no content-length in the answer")?;
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let mut chunk = [0u8; 4096];
        let n = conn.read(&mut chunk).await?;
        ensure!(n > 0, "connection closed inside the answer's body");
        body.extend_from_slice(&chunk[..n]);
    }
    let status = head.lines().next().unwrap_or_default().to_owned();
    Ok((status, body))
}

/// A request refused before its body was read (wrong password: 401; a declared length over
/// the limit: 413): the client, which writes its whole body before reading, still gets the
/// answer, and the connection stays usable. 32 MiB is more than the sockets' buffers hold, so
/// a server that closed instead of reading would break the client's write.
#[tokio::test]
async fn a_client_sending_a_refused_body_hears_why() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[("proxy.limits.max_body_bytes", "40MiB")]).await?;
    let mut conn = tokio::net::TcpStream::connect(&server.public).await?;
    // "Basic wrong:wrong", within the size limit; then the right password, over it.
    for (auth, size, want) in [
        ("Basic d3Jvbmc6d3Jvbmc=", 32 << 20, 401),
        (AUTH, 48 << 20, 413),
    ] {
        let body = vec![0u8; size];
        let head = format!(
            "PUT {ROOT}/refused.bin HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n\
             Content-Length: {}\r\n\r\n",
            body.len()
        );
        conn.write_all(head.as_bytes()).await?;
        conn.write_all(&body)
            .await
            .with_context(|| format!("writing the body the server answers {want} to"))?;
        let (status, text) = tokio::time::timeout(Duration::from_secs(20), read_answer(&mut conn))
            .await
            .context("no answer within 20 s")??;
        ensure!(
            status.starts_with(&format!("HTTP/1.1 {want} ")),
            "{status}: {}",
            String::from_utf8_lossy(&text)
        );
    }
    let got = send(
        &server.public,
        "GET",
        &format!("{ROOT}/refused.bin"),
        &[("authorization", AUTH)],
        "",
    )
    .await?;
    assert_eq!(got.status, 404, "a refused body was stored: {}", got.text());
    Ok(())
}

#[tokio::test]
async fn cors_answers_allowed_origins_only_and_webdav_options_stays_authenticated()
-> anyhow::Result<()> {
    let dir = TempDir::new();
    let web = "https://web.example.com";
    let server = start(
        &dir,
        &[(
            "proxy.cors.allowed_origins",
            "https://web.example.com, http://localhost:9100",
        )],
    )
    .await?;
    let a = &server.public;
    let path = format!("{ROOT}/");

    // Preflight from an allowed origin: answered without credentials.
    let pre = send(
        a,
        "OPTIONS",
        &path,
        &[
            ("origin", web),
            ("access-control-request-method", "PROPFIND"),
            ("access-control-request-headers", "authorization, depth"),
        ],
        "",
    )
    .await?;
    assert_eq!(pre.status, 204, "{}", pre.text());
    assert_eq!(pre.header("access-control-allow-origin"), Some(web));
    assert_eq!(pre.header("access-control-allow-credentials"), Some("true"));
    assert!(pre.header("access-control-max-age").is_some());
    let methods = pre
        .header("access-control-allow-methods")
        .unwrap_or_default();
    for m in ["PROPFIND", "MKCOL", "MOVE", "PATCH", "LOCK"] {
        assert!(methods.contains(m), "{m} missing in {methods}");
    }
    let allowed = pre
        .header("access-control-allow-headers")
        .unwrap_or_default()
        .to_ascii_lowercase();
    for h in [
        "authorization",
        "depth",
        "destination",
        "oc-checksum",
        "x-oc-mtime",
        "tus-resumable",
        "upload-offset",
        "upload-metadata",
        "x-request-id",
        "ocs-apirequest",
    ] {
        assert!(allowed.contains(h), "{h} missing in {allowed}");
    }

    // Preflight from another origin: refused, with no CORS header at all.
    let evil = send(
        a,
        "OPTIONS",
        &path,
        &[
            ("origin", "https://evil.example.com"),
            ("access-control-request-method", "GET"),
        ],
        "",
    )
    .await?;
    assert_eq!(evil.status, 403);
    assert!(evil.header("access-control-allow-origin").is_none());

    // A WebDAV OPTIONS (no Access-Control-Request-Method) is not a preflight: authenticated.
    let dav = send(a, "OPTIONS", &path, &[("origin", web)], "").await?;
    assert_eq!(dav.status, 401, "{}", dav.text());
    assert_eq!(
        dav.header("access-control-allow-origin"),
        Some(web),
        "a browser must read the 401"
    );
    let dav = send(
        a,
        "OPTIONS",
        &path,
        &[("origin", web), ("authorization", AUTH)],
        "",
    )
    .await?;
    assert!(dav.status < 300, "{} {}", dav.status, dav.text());

    // Actual requests: allowed origins may read the answer and its sync headers.
    assert_eq!(
        send(
            a,
            "PUT",
            &format!("{ROOT}/c.txt"),
            &[("authorization", AUTH)],
            "cors"
        )
        .await?
        .status,
        201
    );
    let got = send(
        a,
        "GET",
        &format!("{ROOT}/c.txt"),
        &[("origin", web), ("authorization", AUTH)],
        "",
    )
    .await?;
    assert_eq!(got.status, 200);
    assert_eq!(got.header("access-control-allow-origin"), Some(web));
    let exposed = got
        .header("access-control-expose-headers")
        .unwrap_or_default();
    for h in [
        "ETag",
        "OC-FileId",
        "OC-ETag",
        "Location",
        "Upload-Offset",
        "Tus-Resumable",
    ] {
        assert!(exposed.contains(h), "{h} missing in {exposed}");
    }
    let other = send(
        a,
        "GET",
        &format!("{ROOT}/c.txt"),
        &[
            ("origin", "https://evil.example.com"),
            ("authorization", AUTH),
        ],
        "",
    )
    .await?;
    assert_eq!(other.status, 200);
    assert!(other.header("access-control-allow-origin").is_none());
    Ok(())
}

#[tokio::test]
async fn without_cors_config_no_cors_headers_are_sent() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let pre = send(
        &server.public,
        "OPTIONS",
        &format!("{ROOT}/"),
        &[
            ("origin", "https://web.example.com"),
            ("access-control-request-method", "GET"),
        ],
        "",
    )
    .await?;
    assert_eq!(
        pre.status, 401,
        "not a preflight without CORS: authenticated like any OPTIONS"
    );
    assert!(
        pre.headers
            .keys()
            .all(|k| !k.as_str().starts_with("access-control-"))
    );
    Ok(())
}

// --- OIDC ---------------------------------------------------------------------------------

/// A signing key made by openssl: the private key for jsonwebtoken, its public JWK.
struct SigningKey {
    alg: Algorithm,
    encoding: EncodingKey,
    jwk: Jwk,
}

fn rsa_key(dir: &Path, kid: &str) -> anyhow::Result<SigningKey> {
    let pem = format!("{kid}.pem");
    let der = format!("{kid}.der");
    openssl(
        dir,
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            &pem,
        ],
    )?;
    // jsonwebtoken's aws-lc-rs signer takes an RSAPrivateKey (PKCS#1) DER.
    openssl(
        dir,
        &[
            "rsa",
            "-in",
            &pem,
            "-traditional",
            "-outform",
            "DER",
            "-out",
            &der,
        ],
    )?;
    signing_key(
        Algorithm::RS256,
        kid,
        EncodingKey::from_rsa_der(&std::fs::read(dir.join(der))?),
    )
}

fn ec_key(dir: &Path, kid: &str) -> anyhow::Result<SigningKey> {
    let pem = format!("{kid}.pem");
    let der = format!("{kid}.der");
    openssl(
        dir,
        &[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            &pem,
        ],
    )?;
    // ... and a PKCS#8 DER for ECDSA.
    openssl(
        dir,
        &[
            "pkcs8", "-topk8", "-nocrypt", "-in", &pem, "-outform", "DER", "-out", &der,
        ],
    )?;
    signing_key(
        Algorithm::ES256,
        kid,
        EncodingKey::from_ec_der(&std::fs::read(dir.join(der))?),
    )
}

fn signing_key(alg: Algorithm, kid: &str, encoding: EncodingKey) -> anyhow::Result<SigningKey> {
    let mut jwk = Jwk::from_encoding_key(&encoding, alg)?;
    jwk.common.key_id = Some(kid.to_owned());
    Ok(SigningKey { alg, encoding, jwk })
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A token signed by `key` (with `kid` in its header) carrying `claims`.
fn token(key: &SigningKey, kid: &str, claims: &Value) -> anyhow::Result<String> {
    let mut header = Header::new(key.alg);
    header.kid = Some(kid.to_owned());
    Ok(jsonwebtoken::encode(&header, claims, &key.encoding)?)
}

/// The usual claims for `user` from `issuer` to `aud`, valid for 10 minutes.
fn claims(issuer: &str, aud: &str, user: &str) -> Value {
    json!({
        "iss": issuer,
        "aud": aud,
        "sub": format!("sub-{user}"),
        "preferred_username": user,
        "name": format!("{user} from the IdP"),
        "email": format!("{user}@example.com"),
        "iat": now(),
        "exp": now() + 600,
    })
}

/// An OpenID provider as far as arca sees one: discovery and JWKS over HTTP, the key set
/// replaceable, JWKS requests counted.
struct Issuer {
    url: String,
    jwks: Arc<Mutex<Value>>,
    jwks_hits: Arc<AtomicUsize>,
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Issuer {
    async fn start(addr: &str, keys: &[&SigningKey]) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let url = format!("http://{}/realms/test", listener.local_addr()?);
        let jwks = Arc::new(Mutex::new(key_set(keys)?));
        let jwks_hits = Arc::new(AtomicUsize::new(0));
        let discovery = json!({
            "issuer": url,
            "jwks_uri": format!("{url}/protocol/openid-connect/certs"),
            "id_token_signing_alg_values_supported": ["RS256", "ES256"],
        });
        let (set, hits) = (jwks.clone(), jwks_hits.clone());
        let app = axum::Router::new()
            .route(
                "/realms/test/.well-known/openid-configuration",
                axum::routing::get(move || {
                    let d = discovery.clone();
                    async move { axum::Json(d) }
                }),
            )
            .route(
                "/realms/test/protocol/openid-connect/certs",
                axum::routing::get(move || {
                    hits.fetch_add(1, Ordering::SeqCst);
                    let body = set.lock().map(|s| s.clone()).unwrap_or(Value::Null);
                    async move { axum::Json(body) }
                }),
            );
        let stop = tokio_util::sync::CancellationToken::new();
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stopped.cancelled_owned())
                .await;
        });
        Ok(Self {
            url,
            jwks,
            jwks_hits,
            stop,
            task,
        })
    }

    fn rotate(&self, keys: &[&SigningKey]) -> anyhow::Result<()> {
        let set = key_set(keys)?;
        *self.jwks.lock().map_err(|_| anyhow::anyhow!("poisoned"))? = set;
        Ok(())
    }

    fn hits(&self) -> usize {
        self.jwks_hits.load(Ordering::SeqCst)
    }

    /// Stops serving and closes every connection, kept-alive ones included.
    async fn stop(self) -> anyhow::Result<()> {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .context("issuer did not stop")??;
        Ok(())
    }
}

fn key_set(keys: &[&SigningKey]) -> anyhow::Result<Value> {
    Ok(serde_json::to_value(JwkSet {
        keys: keys.iter().map(|k| k.jwk.clone()).collect(),
    })?)
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// PROPFIND Depth 0 on `path` with `authorization`; the status.
async fn propfind(addr: &str, path: &str, authorization: &str) -> anyhow::Result<u16> {
    let r = send(
        addr,
        "PROPFIND",
        path,
        &[("authorization", authorization), ("depth", "0")],
        "",
    )
    .await?;
    Ok(r.status)
}

#[tokio::test]
async fn oidc_tokens_are_verified_provision_users_and_survive_the_issuer() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let rsa = rsa_key(dir.path(), "rsa-1")?;
    let ec = ec_key(dir.path(), "ec-1")?;
    let forger = rsa_key(dir.path(), "forger")?;
    let issuer = Issuer::start("127.0.0.1:0", &[&rsa, &ec]).await?;
    let iss = issuer.url.clone();
    let server = start(
        &dir,
        &[
            ("proxy.oidc.issuer", &iss),
            ("proxy.oidc.audience", "arca-web"),
            // 13 refused tokens below from one address: more than the default 10 failed
            // logins, which would be throttled (that has its own test).
            ("proxy.auth.max_failures", "100"),
        ],
    )
    .await?;
    let a = server.public.clone();

    // A valid token for a user arca has never seen: created, and their space works.
    let alice = token(&rsa, "rsa-1", &claims(&iss, "arca-web", "alice"))?;
    let alice_root = "/remote.php/dav/files/alice";
    let put = send(
        &a,
        "PUT",
        &format!("{alice_root}/hello.txt"),
        &[("authorization", &bearer(&alice))],
        "hi from alice",
    )
    .await?;
    assert_eq!(put.status, 201, "{}", put.text());
    let got = send(
        &a,
        "GET",
        &format!("{alice_root}/hello.txt"),
        &[("authorization", &bearer(&alice))],
        "",
    )
    .await?;
    assert_eq!((got.status, got.text().as_str()), (200, "hi from alice"));
    let me = send(
        &a,
        "GET",
        "/graph/v1.0/me",
        &[("authorization", &bearer(&alice))],
        "",
    )
    .await?;
    assert_eq!(me.status, 200, "{}", me.text());
    let me = me.json()?;
    assert_eq!(me["onPremisesSamAccountName"], "alice");
    assert_eq!(me["displayName"], "alice from the IdP");
    assert_eq!(me["mail"], "alice@example.com");
    // The user now exists for the admin too.
    let users = send(
        &a,
        "GET",
        "/graph/v1.0/users",
        &[("authorization", AUTH)],
        "",
    )
    .await?;
    assert!(users.text().contains("\"alice\""), "{}", users.text());

    // ES256 works as well.
    let bob = token(&ec, "ec-1", &claims(&iss, "arca-web", "bob"))?;
    assert_eq!(
        propfind(&a, "/remote.php/dav/files/bob/", &bearer(&bob)).await?,
        207
    );

    // Refused: wrong issuer, wrong audience, expired, not yet valid, forged signature under a
    // known kid, unsupported algorithm, no user claim, garbage.
    let mut wrong_iss = claims(&iss, "arca-web", "alice");
    wrong_iss["iss"] = json!("http://127.0.0.1:1/realms/other");
    let mut expired = claims(&iss, "arca-web", "alice");
    expired["exp"] = json!(now() - 300);
    let mut early = claims(&iss, "arca-web", "alice");
    early["nbf"] = json!(now() + 300);
    let mut nameless = claims(&iss, "arca-web", "alice");
    nameless
        .as_object_mut()
        .context("claims")?
        .remove("preferred_username");
    let hs256 = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims(&iss, "arca-web", "alice"),
        &EncodingKey::from_secret(b"guess")?,
    )?;
    let refused = [
        ("wrong issuer", token(&rsa, "rsa-1", &wrong_iss)?),
        (
            "wrong audience",
            token(&rsa, "rsa-1", &claims(&iss, "someone-else", "alice"))?,
        ),
        ("expired", token(&rsa, "rsa-1", &expired)?),
        ("not yet valid", token(&rsa, "rsa-1", &early)?),
        (
            "forged signature",
            token(&forger, "rsa-1", &claims(&iss, "arca-web", "alice"))?,
        ),
        ("HS256", hs256),
        ("no user claim", token(&rsa, "rsa-1", &nameless)?),
        ("garbage", "not.a.jwt".to_owned()),
    ];
    for (why, t) in &refused {
        let r = send(
            &a,
            "PROPFIND",
            &format!("{alice_root}/"),
            &[("authorization", &bearer(t)), ("depth", "0")],
            "",
        )
        .await?;
        assert_eq!(r.status, 401, "{why}: {}", r.text());
        let challenges: Vec<_> = r
            .headers
            .get_all("www-authenticate")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        assert!(
            challenges.iter().any(|c| c.starts_with("Bearer ")),
            "{why}: {challenges:?}"
        );
    }

    // Key rotation: the issuer switches to a new key; a token under its kid triggers one
    // refetch and works.
    let rsa2 = rsa_key(dir.path(), "rsa-2")?;
    issuer.rotate(&[&rsa2])?;
    let hits_before = issuer.hits();
    let carol = token(&rsa2, "rsa-2", &claims(&iss, "arca-web", "carol"))?;
    assert_eq!(
        propfind(&a, "/remote.php/dav/files/carol/", &bearer(&carol)).await?,
        207
    );
    assert_eq!(
        issuer.hits(),
        hits_before + 1,
        "one JWKS refetch for the new kid"
    );
    // Unknown kids right after do not make arca ask again (at most one refetch per 30 s).
    for i in 0..5 {
        let t = token(
            &forger,
            &format!("unknown-{i}"),
            &claims(&iss, "arca-web", "carol"),
        )?;
        assert_eq!(
            propfind(&a, "/remote.php/dav/files/carol/", &bearer(&t)).await?,
            401
        );
    }
    assert_eq!(
        issuer.hits(),
        hits_before + 1,
        "garbage kids must not hammer the issuer"
    );

    // The issuer goes away: tokens already verified, new tokens under known keys and Basic
    // logins all keep working.
    issuer.stop().await?;
    assert_eq!(
        propfind(&a, "/remote.php/dav/files/carol/", &bearer(&carol)).await?,
        207
    );
    let dave = token(&rsa2, "rsa-2", &claims(&iss, "arca-web", "dave"))?;
    assert_eq!(
        propfind(&a, "/remote.php/dav/files/dave/", &bearer(&dave)).await?,
        207
    );
    assert_eq!(propfind(&a, &format!("{ROOT}/"), AUTH).await?, 207);

    // No token ever reaches the log.
    let log = server.proc.stderr().join("\n") + &server.proc.stdout().join("\n");
    for t in [&alice, &bob, &carol, &dave] {
        let signature = t.rsplit('.').next().unwrap_or(t);
        assert!(!log.contains(signature), "a token was logged");
    }
    Ok(())
}

#[tokio::test]
async fn an_issuer_down_at_start_delays_bearer_logins_only() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let rsa = rsa_key(dir.path(), "rsa-1")?;
    // The issuer's address is known, but nothing answers there yet.
    let issuer_addr = free_addr();
    let iss = format!("http://{issuer_addr}/realms/test");
    let server = start(
        &dir,
        &[
            ("proxy.oidc.issuer", &iss),
            ("proxy.oidc.provision", "false"),
        ],
    )
    .await?;
    let a = server.public.clone();
    let admin_token = token(&rsa, "rsa-1", &claims(&iss, "any", "admin"))?;
    // Basic works; a Bearer token cannot be checked yet: 503 (retry), not 401 (log in again).
    assert_eq!(propfind(&a, &format!("{ROOT}/"), AUTH).await?, 207);
    assert_eq!(
        propfind(&a, &format!("{ROOT}/"), &bearer(&admin_token)).await?,
        503
    );

    let issuer = Issuer::start(&issuer_addr, &[&rsa]).await?;
    eventually(
        Duration::from_secs(40),
        "Bearer logins once the issuer is up",
        || {
            let (a, t) = (a.clone(), admin_token.clone());
            async move {
                Ok((propfind(&a, &format!("{ROOT}/"), &bearer(&t)).await? == 207).then_some(()))
            }
        },
    )
    .await?;
    // Without provisioning, a user arca does not know is refused.
    let stranger = token(&rsa, "rsa-1", &claims(&iss, "any", "stranger"))?;
    assert_eq!(
        propfind(&a, "/remote.php/dav/files/stranger/", &bearer(&stranger)).await?,
        401
    );
    let users = send(
        &a,
        "GET",
        "/graph/v1.0/users",
        &[("authorization", AUTH)],
        "",
    )
    .await?;
    assert!(!users.text().contains("stranger"), "{}", users.text());
    issuer.stop().await?;
    Ok(())
}

// --- Bearer logins and the credential feed, throttling, secrets in logs -------------------

/// Creates `name` with `password` through Graph as admin; their id.
async fn create_user(addr: &str, name: &str, password: &str) -> anyhow::Result<String> {
    let body = json!({
        "onPremisesSamAccountName": name,
        "displayName": name,
        "mail": format!("{name}@example.org"),
        "passwordProfile": {"password": password},
    });
    let r = send(
        addr,
        "POST",
        "/graph/v1.0/users",
        &[
            ("authorization", AUTH),
            ("content-type", "application/json"),
        ],
        body.to_string(),
    )
    .await?;
    ensure!(r.status == 201, "create {name}: {} {}", r.status, r.text());
    Ok(r.json()?["id"].as_str().unwrap_or_default().to_owned())
}

/// How often storage-system was asked for a user (what a Bearer login costs uncached), from
/// the metrics of the process at `debug`.
async fn user_lookups(debug: &str) -> anyhow::Result<f64> {
    let metrics = arca_tests::get(debug, "/metrics", &[]).await?.text();
    Ok(metrics
        .lines()
        .filter(|l| {
            l.starts_with(
                r#"arca_requests_total{service="storage-system",route="/arca.v1.Users/GetUser""#,
            )
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// Waits until Bearer `token` is served from the proxy's cache: three PROPFINDs of `path` in
/// a row cost storage-system no user lookup. Without that the eviction test would prove
/// nothing (an uncached proxy passes it anyway).
async fn wait_bearer_cached(server: &Server, path: &str, token: &str) -> anyhow::Result<()> {
    eventually(
        Duration::from_secs(15),
        "the Bearer login served from the cache",
        || async move {
            ensure!(propfind(&server.public, path, &bearer(token)).await? == 207);
            let before = user_lookups(&server.debug).await?;
            for _ in 0..3 {
                ensure!(propfind(&server.public, path, &bearer(token)).await? == 207);
            }
            Ok((user_lookups(&server.debug).await? == before).then_some(()))
        },
    )
    .await
}

#[tokio::test]
async fn a_deleted_users_bearer_token_is_refused_on_the_very_next_request() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let rsa = rsa_key(dir.path(), "rsa-1")?;
    let issuer = Issuer::start("127.0.0.1:0", &[&rsa]).await?;
    let iss = issuer.url.clone();
    let server = start(
        &dir,
        &[
            ("proxy.oidc.issuer", &iss),
            ("proxy.oidc.provision", "false"),
        ],
    )
    .await?;
    let a = server.public.clone();
    let frank_id = create_user(&a, "frank", "frank-password").await?;
    let frank = token(&rsa, "rsa-1", &claims(&iss, "any", "frank"))?;
    let root = "/remote.php/dav/files/frank/";
    wait_bearer_cached(&server, root, &frank).await?;

    // An OIDC login may manage app tokens (only app tokens may not).
    let created = send(
        &a,
        "POST",
        "/auth-app/tokens?expiry=1h",
        &[("authorization", &bearer(&frank))],
        "",
    )
    .await?;
    assert_eq!(created.status, 200, "{}", created.text());

    let deleting = Instant::now();
    let r = send(
        &a,
        "DELETE",
        &format!("/graph/v1.0/users/{frank_id}"),
        &[("authorization", AUTH)],
        "",
    )
    .await?;
    assert_eq!(r.status, 204, "{}", r.text());
    // The token is still valid for the provider for ten minutes; arca refuses it at once.
    assert_eq!(propfind(&a, root, &bearer(&frank)).await?, 401);
    eprintln!(
        "deletion answered and its Bearer token refused within {:?}",
        deleting.elapsed()
    );

    // A new frank is someone else: the same token now names them, never the old identity.
    let new_id = create_user(&a, "frank", "another-password").await?;
    assert_ne!(new_id, frank_id);
    let me = send(
        &a,
        "GET",
        "/graph/v1.0/me",
        &[("authorization", &bearer(&frank))],
        "",
    )
    .await?;
    assert_eq!(me.status, 200, "{}", me.text());
    assert_eq!(me.json()?["id"], new_id.as_str());
    issuer.stop().await?;
    Ok(())
}

/// A PROPFIND Depth 0 of `path` sent from the local address `from` (any of 127.0.0.0/8: the
/// proxy throttles per client address, and these are different clients to it): the status
/// and the `Retry-After` seconds.
async fn propfind_from(
    from: &str,
    addr: &str,
    path: &str,
    authorization: &str,
) -> anyhow::Result<(u16, Option<u64>)> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(format!("{from}:0").parse()?)?;
    let stream = socket.connect(addr.parse()?).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = hyper::Request::builder()
        .method("PROPFIND")
        .uri(path)
        .header("host", addr)
        .header("depth", "0")
        .header("authorization", authorization)
        .body(http_body_util::Empty::<Bytes>::new())?;
    let resp = tokio::time::timeout(Duration::from_secs(30), sender.send_request(req))
        .await
        .context("no answer within 30s")??;
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    Ok((resp.status().as_u16(), retry_after))
}

#[tokio::test]
async fn failed_bearer_logins_are_throttled_per_address_and_per_signed_user() -> anyhow::Result<()>
{
    let dir = TempDir::new();
    let rsa = rsa_key(dir.path(), "rsa-1")?;
    let forger = rsa_key(dir.path(), "forger")?;
    let issuer = Issuer::start("127.0.0.1:0", &[&rsa]).await?;
    let iss = issuer.url.clone();
    let server = start(
        &dir,
        &[
            ("proxy.oidc.issuer", &iss),
            ("proxy.oidc.provision", "false"),
            ("proxy.auth.max_failures", "3"),
            ("proxy.auth.window", "60s"),
        ],
    )
    .await?;
    let a = server.public.clone();
    create_user(&a, "frank", "frank-password").await?;
    let frank_root = "/remote.php/dav/files/frank/";
    // A token the proxy has not seen yet each time (a verified one is served from the cache
    // without any throttle check, which would make the checks below pass for nothing).
    let jti = AtomicUsize::new(0);
    let fresh = |user: &str| -> anyhow::Result<String> {
        let mut c = claims(&iss, "any", user);
        c["jti"] = json!(jti.fetch_add(1, Ordering::SeqCst));
        Ok(bearer(&token(&rsa, "rsa-1", &c)?))
    };
    // Wait for the issuer's keys (loaded in the background at start).
    eventually(Duration::from_secs(15), "Bearer logins work", || {
        let (a, frank) = (a.clone(), fresh("frank"));
        async move {
            Ok((propfind_from("127.0.0.9", &a, frank_root, &frank?).await?.0 == 207).then_some(()))
        }
    })
    .await?;

    // 127.0.0.2 sends forged tokens naming frank: three 401s, then 429 for anything it sends
    // that is not already verified, even a good token.
    for i in 0..3 {
        let forged = token(&forger, "rsa-1", &claims(&iss, "any", "frank"))?;
        let (status, _) = propfind_from("127.0.0.2", &a, frank_root, &bearer(&forged)).await?;
        assert_eq!(status, 401, "forged token {i}");
    }
    let (status, retry) = propfind_from("127.0.0.2", &a, frank_root, "Bearer not.a.jwt").await?;
    assert_eq!(status, 429);
    let retry = retry.context("429 without Retry-After")?;
    assert!((1..=60).contains(&retry), "Retry-After: {retry}");
    assert_eq!(
        propfind_from("127.0.0.2", &a, frank_root, &fresh("frank")?)
            .await?
            .0,
        429,
        "a blocked address is refused before its token is checked"
    );
    eprintln!("127.0.0.2 blocked after 3 bad Bearer tokens, Retry-After {retry}s");
    // Forged tokens prove nothing about who they name: frank is not blocked elsewhere.
    assert_eq!(
        propfind_from("127.0.0.3", &a, frank_root, &fresh("frank")?)
            .await?
            .0,
        207
    );

    // Validly signed tokens for a user arca refuses (no such user, provisioning off) count
    // against that user as well: ghost is blocked from every address.
    let ghost = bearer(&token(&rsa, "rsa-1", &claims(&iss, "any", "ghost"))?);
    let ghost_root = "/remote.php/dav/files/ghost/";
    for from in ["127.0.0.4", "127.0.0.5", "127.0.0.6"] {
        assert_eq!(propfind_from(from, &a, ghost_root, &ghost).await?.0, 401);
    }
    let (status, retry) = propfind_from("127.0.0.7", &a, ghost_root, &ghost).await?;
    assert_eq!(status, 429, "ghost's 4th failure, from a fresh address");
    assert!(retry.is_some_and(|r| (1..=60).contains(&r)), "{retry:?}");
    // ... and the address that saw one failure may still log in as someone else.
    assert_eq!(
        propfind_from("127.0.0.4", &a, frank_root, &fresh("frank")?)
            .await?
            .0,
        207
    );
    issuer.stop().await?;
    Ok(())
}

#[tokio::test]
async fn no_secret_reaches_the_log_even_at_trace_and_access_lines_cut_path_tokens()
-> anyhow::Result<()> {
    let dir = TempDir::new();
    let rsa = rsa_key(dir.path(), "rsa-1")?;
    let issuer = Issuer::start("127.0.0.1:0", &[&rsa]).await?;
    let iss = issuer.url.clone();
    let server = start(&dir, &[("proxy.oidc.issuer", &iss), ("log.level", "trace")]).await?;
    let a = server.public.clone();
    let user_password = "Gina-Pw-3kq9Zx";
    let link_password = "Link-Pw-8hd2Lm";
    create_user(&a, "gina", user_password).await?;
    let gina = basic("gina", user_password);
    let root = "/remote.php/dav/files/gina";

    // Password, app token and Bearer logins.
    let created = send(
        &a,
        "POST",
        "/auth-app/tokens?expiry=1h",
        &[("authorization", &gina)],
        "",
    )
    .await?;
    assert_eq!(created.status, 200, "{}", created.text());
    let app_token = created.json()?["token"]
        .as_str()
        .context("app token")?
        .to_owned();
    let with_app_token = basic("gina", &app_token);
    assert_eq!(
        propfind(&a, &format!("{root}/"), &with_app_token).await?,
        207
    );
    let jwt = token(&rsa, "rsa-1", &claims(&iss, "any", "gina"))?;
    eventually(Duration::from_secs(15), "the Bearer login", || {
        let (a, jwt) = (a.clone(), jwt.clone());
        async move {
            Ok(
                (propfind(&a, "/remote.php/dav/files/gina/", &bearer(&jwt)).await? == 207)
                    .then_some(()),
            )
        }
    })
    .await?;

    // A password-protected public link, opened under every path form.
    assert_eq!(
        send(
            &a,
            "MKCOL",
            &format!("{root}/Pub"),
            &[("authorization", &gina)],
            ""
        )
        .await?
        .status,
        201
    );
    assert_eq!(
        send(
            &a,
            "PUT",
            &format!("{root}/Pub/p.txt"),
            &[("authorization", &gina)],
            "pub"
        )
        .await?
        .status,
        201
    );
    let shared = send(
        &a,
        "POST",
        "/ocs/v2.php/apps/files_sharing/api/v1/shares?format=json",
        &[
            ("authorization", &gina),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        format!("path=%2FPub&shareType=3&permissions=1&password={link_password}"),
    )
    .await?;
    assert_eq!(shared.status, 200, "{}", shared.text());
    let link = shared.json()?["ocs"]["data"]["token"]
        .as_str()
        .context("link token")?
        .to_owned();
    let link_auth = basic("public", link_password);
    for path in [
        format!("/remote.php/dav/public-files/{link}/"),
        format!("/dav/public-files/{link}/p.txt"),
    ] {
        assert_eq!(propfind(&a, &path, &link_auth).await?, 207, "{path}");
    }
    send(&a, "GET", &format!("/s/{link}"), &[], "").await?;

    // A TUS upload: its URL is the capability.
    let upload = send(
        &a,
        "POST",
        &format!("{root}/"),
        &[
            ("authorization", &gina),
            ("tus-resumable", "1.0.0"),
            ("upload-length", "5"),
            ("upload-metadata", "filename dXAudHh0"), // up.txt
        ],
        "",
    )
    .await?;
    assert_eq!(upload.status, 201, "{}", upload.text());
    let location = upload.header("location").context("no Location")?.to_owned();
    let data_path = location
        .find("/data/")
        .map(|at| location[at..].to_owned())
        .context("Location outside /data/")?;
    let upload_token = data_path["/data/".len()..].to_owned();
    let patched = send(
        &a,
        "PATCH",
        &data_path,
        &[
            ("tus-resumable", "1.0.0"),
            ("upload-offset", "0"),
            ("content-type", "application/offset+octet-stream"),
            ("x-request-id", "last-of-secrets"),
        ],
        "hello",
    )
    .await?;
    assert_eq!(patched.status, 204, "{}", patched.text());
    server
        .proc
        .wait_event(Duration::from_secs(15), "the last access line", |e| {
            e["target"] == "access" && e["fields"]["request_id"] == "last-of-secrets"
        })
        .await?;

    let out = server.proc.stderr().join("\n") + "\n" + &server.proc.stdout().join("\n");
    // The level took effect: what info would hide is there.
    let debug_lines = server
        .proc
        .events()
        .iter()
        .filter(|e| e["level"] == "DEBUG")
        .count();
    assert!(debug_lines > 0, "no debug events: is log.level ignored?");
    let secrets: Vec<(&str, String)> = vec![
        ("admin password", PASSWORD.to_owned()),
        ("admin Authorization", AUTH["Basic ".len()..].to_owned()),
        ("user password", user_password.to_owned()),
        ("user Authorization", gina["Basic ".len()..].to_owned()),
        ("app token", app_token.clone()),
        (
            "app token Authorization",
            with_app_token["Basic ".len()..].to_owned(),
        ),
        (
            "JWT claims and signature",
            jwt[jwt.find('.').unwrap_or(0)..].to_owned(),
        ),
        ("public link token", link.clone()),
        ("public link password", link_password.to_owned()),
        (
            "public link Authorization",
            link_auth["Basic ".len()..].to_owned(),
        ),
        ("upload token", upload_token.clone()),
        // Identity tokens and transfer grants the services pass each other.
        ("a signed arca token", "v1.eyJ".to_owned()),
    ];
    for (what, secret) in &secrets {
        assert!(!secret.is_empty(), "{what}");
        if let Some(line) = out.lines().find(|l| l.contains(secret.as_str())) {
            panic!("{what} logged:\n{line}");
        }
    }
    eprintln!(
        "{} log lines at trace ({} KiB) carry none of {} secrets",
        out.lines().count(),
        out.len() / 1024,
        secrets.len()
    );

    // The access log names capability paths with the token cut to 4 characters.
    let access: Vec<String> = server
        .proc
        .events()
        .into_iter()
        .filter(|e| e["target"] == "access")
        .filter_map(|e| e["fields"]["path"].as_str().map(str::to_owned))
        .collect();
    let cut = |t: &str| format!("{}…", &t[..4]);
    for expected in [
        format!("/remote.php/dav/public-files/{}/", cut(&link)),
        format!("/dav/public-files/{}/p.txt", cut(&link)),
        format!("/s/{}", cut(&link)),
        format!("/data/{}", cut(&upload_token)),
    ] {
        assert!(
            access.contains(&expected),
            "no access line for {expected}: {access:?}"
        );
    }
    issuer.stop().await?;
    Ok(())
}
