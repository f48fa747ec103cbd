//! Previews (`?preview=1`) in one in-process deployment (every service, the real boot path,
//! the proxy on a real port): PNG, JPEG, GIF and WebP sources at their asked sizes on every
//! file URL form, fit and fill, snapped sizes, a new etag giving a new preview, a text
//! file's page, the decompression bomb refused from its header, 400s and 404s, a public
//! link's preview over GET and HEAD, another user's 404, 425 while a render runs, and the
//! capability.

use std::io::Cursor;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use arca_tests::{HttpResponse, InProcess, TempDir, eventually, get, send};
use image::{DynamicImage, ImageFormat, Rgb, RgbImage};
use serde_json::Value;

/// `admin:thumbs-secret`.
const ADMIN: (&str, &str) = ("authorization", "Basic YWRtaW46dGh1bWJzLXNlY3JldA==");
/// `bob:bob-pass`.
const BOB: (&str, &str) = ("authorization", "Basic Ym9iOmJvYi1wYXNz");

async fn start(dir: &TempDir, settings: &[(&str, &str)]) -> anyhow::Result<InProcess> {
    let server = InProcess::ready(dir, "thumbs-secret", settings).await?;
    let bob = send(
        &server.public,
        "POST",
        "/graph/v1.0/users",
        &[ADMIN, ("content-type", "application/json")],
        r#"{"onPremisesSamAccountName":"bob","displayName":"Bob","passwordProfile":{"password":"bob-pass"}}"#,
    )
    .await?;
    anyhow::ensure!(bob.status == 201, "creating bob: {}", bob.text());
    Ok(server)
}

/// A `w`×`h` picture: a gradient, so scaling has something to average.
fn picture(w: u32, h: u32, format: ImageFormat) -> anyhow::Result<Vec<u8>> {
    let img = RgbImage::from_fn(w, h, |x, y| {
        Rgb([(x * 255 / w.max(1)) as u8, (y * 255 / h.max(1)) as u8, 90])
    });
    encode(DynamicImage::ImageRgb8(img), format)
}

fn solid(w: u32, h: u32, color: [u8; 3]) -> anyhow::Result<Vec<u8>> {
    encode(
        DynamicImage::ImageRgb8(RgbImage::from_pixel(w, h, Rgb(color))),
        ImageFormat::Png,
    )
}

fn encode(img: DynamicImage, format: ImageFormat) -> anyhow::Result<Vec<u8>> {
    let img = match format {
        // GIF and WebP (lossless) encoders take RGBA.
        ImageFormat::Gif | ImageFormat::WebP => DynamicImage::ImageRgba8(img.to_rgba8()),
        _ => img,
    };
    let mut out = Vec::new();
    img.write_to(&mut Cursor::new(&mut out), format)?;
    Ok(out)
}

/// A PNG that says it is 100,000 × 100,000 pixels (30 GB of RGB once decoded) and holds
/// almost nothing: the signature, a valid IHDR and IEND.
fn bomb() -> Vec<u8> {
    let chunk = |kind: &[u8; 4], data: &[u8]| {
        let mut c = Vec::new();
        c.extend_from_slice(&(data.len() as u32).to_be_bytes());
        c.extend_from_slice(kind);
        c.extend_from_slice(data);
        let mut crc = crc32fast::Hasher::new();
        crc.update(kind);
        crc.update(data);
        c.extend_from_slice(&crc.finalize().to_be_bytes());
        c
    };
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&100_000u32.to_be_bytes());
    ihdr.extend_from_slice(&100_000u32.to_be_bytes());
    // 8-bit RGB, deflate, adaptive filtering, no interlace.
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut png = vec![0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];
    png.extend(chunk(b"IHDR", &ihdr));
    // One zlib stream of a few zero bytes: the start of the "image".
    png.extend(chunk(
        b"IDAT",
        &[0x78, 0x9C, 0x63, 0x60, 0x00, 0x00, 0x00, 0x02, 0x00, 0x01],
    ));
    png.extend(chunk(b"IEND", &[]));
    png
}

async fn put(addr: &str, path: &str, who: (&str, &str), body: Vec<u8>) -> anyhow::Result<()> {
    let r = send(addr, "PUT", path, &[who], body).await?;
    anyhow::ensure!(
        r.status == 201 || r.status == 204,
        "PUT {path}: {} {}",
        r.status,
        r.text()
    );
    Ok(())
}

async fn preview(addr: &str, path: &str, who: (&str, &str)) -> anyhow::Result<HttpResponse> {
    get(addr, path, &[who]).await
}

/// The decoded preview of a 200 answer.
fn decoded(r: &HttpResponse, what: &str) -> anyhow::Result<DynamicImage> {
    anyhow::ensure!(r.status == 200, "{what}: {} {}", r.status, r.text());
    let mime = r.header("content-type").unwrap_or_default();
    anyhow::ensure!(mime.starts_with("image/"), "{what}: content-type {mime}");
    let format = ImageFormat::from_mime_type(mime).with_context(|| format!("{what}: {mime}"))?;
    image::load_from_memory_with_format(&r.body, format).with_context(|| what.to_owned())
}

fn size(img: &DynamicImage) -> (u32, u32) {
    (img.width(), img.height())
}

/// The id of the caller's personal space (Graph's me/drives).
async fn space_id(addr: &str, who: (&str, &str)) -> anyhow::Result<String> {
    let r = get(addr, "/graph/v1.0/me/drives", &[who]).await?;
    let v: Value = r.json()?;
    v["value"][0]["id"]
        .as_str()
        .map(str::to_owned)
        .context("me/drives: no id")
}

#[tokio::test]
async fn every_source_format_previews_at_its_size_on_every_file_url() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let a = &server.public;
    let space = space_id(a, ADMIN).await?;
    for (ext, format) in [
        ("png", ImageFormat::Png),
        ("jpg", ImageFormat::Jpeg),
        ("gif", ImageFormat::Gif),
        ("webp", ImageFormat::WebP),
    ] {
        let original = picture(400, 200, format)?;
        put(
            a,
            &format!("/remote.php/webdav/pic.{ext}"),
            ADMIN,
            original.clone(),
        )
        .await?;
        for root in [
            "/remote.php/webdav".to_owned(),
            "/remote.php/dav/files/admin".to_owned(),
            format!("/dav/spaces/{space}"),
        ] {
            let url = format!("{root}/pic.{ext}?preview=1&x=128&y=128&a=1");
            let img = decoded(&preview(a, &url, ADMIN).await?, &url)?;
            assert_eq!(size(&img), (128, 64), "{url}");
        }
        // JPEG stays JPEG; the rest come as PNG.
        let r = preview(
            a,
            &format!("/remote.php/webdav/pic.{ext}?preview=1&x=64&y=64"),
            ADMIN,
        )
        .await?;
        let want = if ext == "jpg" {
            "image/jpeg"
        } else {
            "image/png"
        };
        assert_eq!(r.header("content-type"), Some(want), "{ext}");
        // Without preview=1 the file is the file.
        let plain = preview(a, &format!("/remote.php/webdav/pic.{ext}?x=32&y=32"), ADMIN).await?;
        assert_eq!(plain.status, 200);
        assert_eq!(plain.body, original, "{ext}: a plain GET is the whole file");
    }

    // HEAD: the preview's headers, no body.
    let head = send(
        a,
        "HEAD",
        "/remote.php/webdav/pic.png?preview=1&x=32&y=32",
        &[ADMIN],
        "",
    )
    .await?;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-type"), Some("image/png"));
    assert!(head.body.is_empty());
    assert!(head.header("content-length").is_some_and(|l| l != "0"));
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn processors_aspect_and_snapped_sizes() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let a = &server.public;
    put(
        a,
        "/remote.php/webdav/wide.png",
        ADMIN,
        picture(400, 200, ImageFormat::Png)?,
    )
    .await?;
    put(
        a,
        "/remote.php/webdav/tiny.png",
        ADMIN,
        picture(40, 20, ImageFormat::Png)?,
    )
    .await?;
    for (query, want) in [
        // fit keeps the aspect inside the box; fill and thumbnail crop to it.
        ("x=64&y=64&processor=fit", (64, 32)),
        ("x=64&y=64&processor=fill", (64, 64)),
        ("x=64&y=64&processor=thumbnail", (64, 64)),
        ("x=64&y=64&processor=resize", (64, 64)),
        // a=1 without a processor is fit; neither is oCIS's default, thumbnail.
        ("x=64&y=64&a=1", (64, 32)),
        ("x=64&y=64", (64, 64)),
        // Snapped up to the next configured resolution (16, 32, 64, 128, 1920x1080 …).
        ("x=20&y=20&processor=fill", (32, 32)),
        ("x=100&y=50&a=1", (128, 64)),
        ("x=300&y=200&a=1", (400, 200)),
        // No x and y: oCIS's 32×32.
        ("processor=fill", (32, 32)),
        // c and scalingup are the client's business.
        ("x=32&y=32&c=whatever&scalingup=0&processor=fill", (32, 32)),
    ] {
        let url = format!("/remote.php/webdav/wide.png?preview=1&{query}");
        let img = decoded(&preview(a, &url, ADMIN).await?, &url)?;
        assert_eq!(size(&img), want, "{query}");
    }
    // Never enlarged.
    let url = "/remote.php/webdav/tiny.png?preview=1&x=128&y=128&a=1";
    assert_eq!(
        size(&decoded(&preview(a, url, ADMIN).await?, url)?),
        (40, 20)
    );
    let url = "/remote.php/webdav/tiny.png?preview=1&x=128&y=128&processor=fill";
    assert_eq!(
        size(&decoded(&preview(a, url, ADMIN).await?, url)?),
        (20, 20)
    );
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn a_new_etag_gives_a_new_preview() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let a = &server.public;
    let url = "/remote.php/webdav/color.png?preview=1&x=32&y=32";
    let center = |img: &DynamicImage| img.to_rgb8().get_pixel(16, 16).0;
    put(
        a,
        "/remote.php/webdav/color.png",
        ADMIN,
        solid(100, 100, [255, 0, 0])?,
    )
    .await?;
    let red = decoded(&preview(a, url, ADMIN).await?, "red")?;
    assert_eq!(center(&red), [255, 0, 0]);
    // Served again from the cache: the same bytes.
    let again = preview(a, url, ADMIN).await?;
    assert_eq!(center(&decoded(&again, "red again")?), [255, 0, 0]);
    put(
        a,
        "/remote.php/webdav/color.png",
        ADMIN,
        solid(100, 100, [0, 0, 255])?,
    )
    .await?;
    let blue = decoded(&preview(a, url, ADMIN).await?, "blue")?;
    assert_eq!(center(&blue), [0, 0, 255], "the overwritten file's preview");
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn a_decompression_bomb_is_refused_from_its_header() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let a = &server.public;
    let bomb = bomb();
    assert!(bomb.len() < 100, "the bomb is {} bytes", bomb.len());
    put(a, "/remote.php/webdav/bomb.png", ADMIN, bomb).await?;
    let started = Instant::now();
    let r = preview(
        a,
        "/remote.php/webdav/bomb.png?preview=1&x=128&y=128",
        ADMIN,
    )
    .await?;
    let took = started.elapsed();
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(r.text().contains("too large"), "{}", r.text());
    // Refused from the header: nothing near the 30 GB it claims was ever decoded.
    assert!(took < Duration::from_secs(2), "took {took:?}");
    // And the service goes on.
    put(
        a,
        "/remote.php/webdav/ok.png",
        ADMIN,
        picture(64, 64, ImageFormat::Png)?,
    )
    .await?;
    let ok = preview(a, "/remote.php/webdav/ok.png?preview=1&x=32&y=32", ADMIN).await?;
    assert_eq!(size(&decoded(&ok, "after the bomb")?), (32, 32));
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn a_text_file_previews_as_a_page_of_its_first_lines() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let a = &server.public;
    let mut text = String::from("# Notes\n\nfn main() {\n\tprintln!(\"hello\");\n}\n");
    // Far more than a page: only the start is read and drawn.
    text.push_str(&"more lines of text\n".repeat(20_000));
    put(a, "/remote.php/webdav/notes.md", ADMIN, text.into_bytes()).await?;
    let url = "/remote.php/webdav/notes.md?preview=1&x=128&y=128";
    let img = decoded(&preview(a, url, ADMIN).await?, url)?;
    assert_eq!(size(&img), (128, 128));
    let gray = img.to_luma8();
    let ink = gray.pixels().filter(|p| p.0[0] < 128).count();
    assert!(ink > 50, "some text is drawn ({ink} dark pixels)");
    assert!(gray.get_pixel(0, 0).0[0] > 200, "on a light page");
    put(a, "/remote.php/webdav/empty.txt", ADMIN, Vec::new()).await?;
    let empty = preview(a, "/remote.php/webdav/empty.txt?preview=1", ADMIN).await?;
    assert_eq!(size(&decoded(&empty, "empty text")?), (32, 32));
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn bad_sizes_are_400_and_what_has_no_preview_is_404() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let a = &server.public;
    put(
        a,
        "/remote.php/webdav/pic.png",
        ADMIN,
        picture(50, 50, ImageFormat::Png)?,
    )
    .await?;
    for query in ["x=0&y=32", "x=32&y=0", "x=-1", "y=-5", "x=abc", "y=1.5"] {
        let r = preview(
            a,
            &format!("/remote.php/webdav/pic.png?preview=1&{query}"),
            ADMIN,
        )
        .await?;
        assert_eq!(r.status, 400, "{query}: {}", r.text());
        assert!(r.text().contains("Cannot set"), "{query}: {}", r.text());
    }
    put(a, "/remote.php/webdav/movie.mp4", ADMIN, vec![0; 1000]).await?;
    put(
        a,
        "/remote.php/webdav/fake.png",
        ADMIN,
        b"not a picture at all".to_vec(),
    )
    .await?;
    put(a, "/remote.php/webdav/blob.txt", ADMIN, vec![0, 1, 2, 3]).await?;
    let mkcol = send(a, "MKCOL", "/remote.php/webdav/Folder", &[ADMIN], "").await?;
    assert_eq!(mkcol.status, 201);
    for (path, why) in [
        ("movie.mp4", "an unsupported type"),
        ("fake.png", "an image that is none"),
        ("blob.txt", "binary text"),
        ("Folder", "a folder"),
        ("missing.png", "a missing file"),
    ] {
        let url = format!("/remote.php/webdav/{path}?preview=1&x=32&y=32");
        let r = preview(a, &url, ADMIN).await?;
        assert_eq!(r.status, 404, "{why}: {}", r.text());
        let text = r.text();
        assert!(!text.contains("internal"), "{why}: {text}");
    }
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn public_links_preview_over_get_and_head_and_others_get_404() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let a = &server.public;
    put(
        a,
        "/remote.php/webdav/shared.png",
        ADMIN,
        picture(300, 150, ImageFormat::Png)?,
    )
    .await?;
    let link = send(
        a,
        "POST",
        "/ocs/v2.php/apps/files_sharing/api/v1/shares?format=json",
        &[ADMIN, ("content-type", "application/x-www-form-urlencoded")],
        "path=%2Fshared.png&shareType=3&permissions=1",
    )
    .await?;
    let v = link.json()?;
    let token = v["ocs"]["data"]["token"]
        .as_str()
        .context("token")?
        .to_owned();
    for url in [
        format!("/remote.php/dav/public-files/{token}/shared.png?preview=1&x=128&y=128&a=1"),
        format!("/dav/public-files/{token}?preview=1&x=128&y=128&a=1"),
    ] {
        let r = get(a, &url, &[]).await?;
        assert_eq!(size(&decoded(&r, &url)?), (128, 64), "{url}");
        // ownCloud Web asks with HEAD whether a public preview exists.
        let head = send(a, "HEAD", &url, &[], "").await?;
        assert_eq!(head.status, 200, "HEAD {url}");
        assert_eq!(head.header("content-type"), Some("image/png"));
        assert!(head.body.is_empty());
    }
    let bad = get(
        a,
        &format!("/remote.php/dav/public-files/{token}/shared.png?preview=1&x=0"),
        &[],
    )
    .await?;
    assert_eq!(bad.status, 400);

    // Bob may not read the admin's file: the same 404 as for a missing one.
    let space = space_id(a, ADMIN).await?;
    for url in [
        format!("/dav/spaces/{space}/shared.png?preview=1&x=32&y=32"),
        "/remote.php/dav/files/admin/shared.png?preview=1&x=32&y=32".to_owned(),
    ] {
        let r = preview(a, &url, BOB).await?;
        assert_eq!(r.status, 404, "bob {url}: {}", r.text());
    }
    // Without a login: 401, as for the file.
    let anon = get(a, "/remote.php/webdav/shared.png?preview=1", &[]).await?;
    assert_eq!(anon.status, 401);
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn a_slow_render_is_425_with_retry_after_and_the_retry_finds_it() -> anyhow::Result<()> {
    let dir = TempDir::new();
    // A wait no render of a 9-megapixel source meets.
    let server = start(&dir, &[("thumbnails.render_wait", "1ms")]).await?;
    let a = &server.public;
    put(
        a,
        "/remote.php/webdav/big.png",
        ADMIN,
        picture(3000, 3000, ImageFormat::Png)?,
    )
    .await?;
    let url = "/remote.php/webdav/big.png?preview=1&x=64&y=64&a=1";
    let first = preview(a, url, ADMIN).await?;
    assert_eq!(first.status, 425, "{}", first.text());
    assert_eq!(first.header("retry-after"), Some("1"));
    // The render went on: a retry finds it made (bounded, no sleep as readiness).
    let done = eventually(Duration::from_secs(60), "the preview made", || async {
        let r = preview(a, url, ADMIN).await?;
        Ok((r.status == 200).then_some(r))
    })
    .await?;
    assert_eq!(size(&decoded(&done, "after 425")?), (64, 64));
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn capabilities_advertise_thumbnails() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let r = get(
        &server.public,
        "/ocs/v1.php/cloud/capabilities?format=json",
        &[ADMIN],
    )
    .await?;
    let v = r.json()?;
    let thumb = &v["ocs"]["data"]["capabilities"]["files"]["thumbnail"];
    assert_eq!(thumb["enabled"], true, "{thumb}");
    assert_eq!(thumb["version"], "v0.1");
    let types = thumb["supportedMimeTypes"]
        .as_array()
        .context("supportedMimeTypes")?;
    for t in [
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "text/plain",
    ] {
        assert!(types.iter().any(|x| x == t), "{t} in {thumb}");
    }
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn without_a_thumbnails_service_previews_are_503_and_the_rest_works() -> anyhow::Result<()> {
    let dir = TempDir::new();
    // The example configs list their services; one that leaves previews out still starts
    // (the gateway's call to thumbnails is optional, no dependency).
    let server = start(
        &dir,
        &[(
            "services",
            "proxy,frontend,gateway,storage-users,storage-system,sharing",
        )],
    )
    .await?;
    let a = &server.public;
    let png = picture(64, 64, ImageFormat::Png)?;
    put(a, "/remote.php/webdav/pic.png", ADMIN, png.clone()).await?;
    let r = preview(a, "/remote.php/webdav/pic.png?preview=1&x=32&y=32", ADMIN).await?;
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.header("retry-after").is_some());
    let plain = preview(a, "/remote.php/webdav/pic.png", ADMIN).await?;
    assert_eq!(plain.body, png);
    server.stop().await?;
    Ok(())
}
