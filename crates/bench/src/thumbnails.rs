//! The previews benchmark: how many previews of camera-sized photos the thumbnails service
//! makes per second, through the real `arca server` on built-in defaults with two render
//! workers (`ARCA_THUMBNAILS_WORKERS=2`: the "at 2 cores").
//!
//! [`PHOTOS`] JPEGs of 4 megapixels (2448×1632, a gradient with grain so they compress like
//! photos, about 1 MiB each) are uploaded, then previews are asked for over [`CONNECTIONS`]
//! connections, each (photo, size) once, so every answer is a render from the source:
//! download, decode, scale, encode, file in the cache. The same previews asked again are the
//! cached rate. A 425 (a render outlasting `thumbnails.render_wait`) is asked again.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use image::{DynamicImage, Rgb, RgbImage};

use crate::files::{CREATED, Conn, thousands};
use crate::process;
use crate::{Scratch, Targets};

const USER: &str = "admin";
const PHOTOS: usize = 16;
const WIDTH: u32 = 2448;
const HEIGHT: u32 = 1632;
/// Preview sizes asked of each photo (ownCloud Web's list icons to its sidebar).
const SIZES: [u32; 4] = [16, 32, 64, 128];
const CONNECTIONS: usize = 4;
const WORKERS: &str = "2";

pub(crate) fn run(_targets: &mut Targets) -> anyhow::Result<()> {
    let bin = process::locate_arca("thumbnails")?;
    let scratch = Scratch::new("thumbnails").context("scratch directory")?;
    let (password, auth) = process::admin_credentials(USER);
    let (mut server, debug, addr) = process::spawn_arca(
        &bin,
        &scratch.path,
        &[
            ("ARCA_ADMIN_PASSWORD", &password),
            ("ARCA_THUMBNAILS_WORKERS", WORKERS),
        ],
    )?;
    server.wait_ready(debug)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let result = rt.block_on(measure(addr, &auth));
    let (cold, cached, bytes) =
        result.map_err(|e| anyhow::anyhow!(server.with_log(&format!("{e:#}"))))?;
    println!(
        "thumbnails: {} previews of {PHOTOS} JPEGs {WIDTH}x{HEIGHT} ({:.1} MP, {} KiB average), \
         {WORKERS} workers, {CONNECTIONS} connections",
        PHOTOS * SIZES.len(),
        f64::from(WIDTH * HEIGHT) / 1e6,
        bytes / PHOTOS / 1024
    );
    println!(
        "thumbnails: rendered from the source  {} previews/s",
        thousands(cold)
    );
    println!(
        "thumbnails: served from the cache     {} previews/s",
        thousands(cached)
    );
    server.terminate()?;
    Ok(())
}

/// A photo-like JPEG: smooth gradients with per-pixel grain (so it neither compresses to
/// nothing nor decodes faster than a photo would).
fn photo(seed: u32) -> anyhow::Result<Vec<u8>> {
    let mut state = seed.wrapping_mul(2_654_435_761).max(1);
    let img = RgbImage::from_fn(WIDTH, HEIGHT, |x, y| {
        // xorshift: cheap grain.
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let grain = state & 15;
        Rgb([
            ((x * 200 / WIDTH) + grain) as u8,
            ((y * 200 / HEIGHT) + grain) as u8,
            (((x + y + seed * 97) % 220) + grain) as u8,
        ])
    });
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 88)
        .encode_image(&DynamicImage::ImageRgb8(img))?;
    Ok(out)
}

/// Uploads the photos, then returns (rendered previews/s, cached previews/s, bytes uploaded).
async fn measure(addr: SocketAddr, auth: &str) -> anyhow::Result<(f64, f64, usize)> {
    let mut c = Conn::open(addr, auth).await?;
    let mut total = 0;
    for i in 0..PHOTOS {
        let jpeg = tokio::task::spawn_blocking(move || photo(i as u32)).await??;
        total += jpeg.len();
        c.call(
            "PUT",
            &format!("/remote.php/webdav/photo-{i}.jpg"),
            &[],
            Bytes::from(jpeg),
            CREATED,
        )
        .await?;
    }
    let urls: Vec<String> = (0..PHOTOS)
        .flat_map(|i| {
            SIZES.iter().map(move |s| {
                format!("/remote.php/webdav/photo-{i}.jpg?preview=1&x={s}&y={s}&processor=fill")
            })
        })
        .collect();
    let cold = rate(addr, auth, &urls).await?;
    let cached = rate(addr, auth, &urls).await?;
    Ok((cold, cached, total))
}

/// Previews per second for `urls`, spread over [`CONNECTIONS`] connections.
async fn rate(addr: SocketAddr, auth: &str, urls: &[String]) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for lane in 0..CONNECTIONS {
        let mine: Vec<String> = urls
            .iter()
            .skip(lane)
            .step_by(CONNECTIONS)
            .cloned()
            .collect();
        let auth = auth.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::open(addr, &auth).await?;
            for url in mine {
                preview(&mut c, &url).await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(urls.len() as f64 / started.elapsed().as_secs_f64())
}

/// One preview, asked again after a 425 until it comes (at most a minute).
async fn preview(c: &mut Conn, url: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let resp = c
            .send("GET", url, &[], Full::new(Bytes::new()).boxed())
            .await?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes();
        match status {
            200 => {
                ensure!(!body.is_empty(), "{url}: an empty preview");
                return Ok(());
            }
            425 if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            _ => anyhow::bail!(
                "{url}: {status} {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            ),
        }
    }
}
