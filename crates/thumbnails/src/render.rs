//! Making one preview, pure and synchronous (it runs on a worker thread): what kind of
//! source a file is, the size its preview gets, decoding within bounds, scaling, encoding;
//! and text files drawn as a page of their first lines.

use std::io::Cursor;

use image::codecs::jpeg::JpegEncoder;
use image::{DynamicImage, GrayImage, ImageDecoder, ImageFormat, ImageReader, Limits, Luma};

use crate::font;

/// Why a source gets no preview. Every one is the client's 404: the file is what it is.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("no preview for this type of file")]
    Unsupported,
    #[error("the image is too large for a preview")]
    TooLarge,
    #[error("the file could not be read as an image")]
    Undecodable,
    #[error("the preview could not be encoded")]
    Encode,
}

/// What a source is drawn from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// PNG, JPEG, GIF or WebP (the bytes decide which).
    Image,
    /// Text: its first lines drawn on a page.
    Text,
}

/// How many bytes of a text file are read: more lines than any preview shows.
pub const TEXT_PREFIX: u64 = 64 << 10;

/// The kind of a file by its name's extension, as oCIS's previews go by the media type the
/// storage derives from it; `None`: no preview. (An image's bytes are checked on decoding.)
pub fn kind_of(name: &str) -> Option<Kind> {
    let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
    match ext.as_str() {
        "png" | "jpg" | "jpeg" | "jpe" | "gif" | "webp" => Some(Kind::Image),
        "txt" | "text" | "md" | "markdown" | "log" | "csv" | "tsv" | "json" | "xml" | "yaml"
        | "yml" | "toml" | "ini" | "conf" | "cfg" | "rs" | "go" | "py" | "js" | "ts" | "c"
        | "h" | "cc" | "cpp" | "hpp" | "java" | "kt" | "rb" | "php" | "sh" | "sql" | "css"
        | "proto" => Some(Kind::Text),
        _ => None,
    }
}

/// How a source is fitted into its box.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Inside the box, aspect kept.
    Fit,
    /// Exactly the box, aspect not kept.
    Resize,
    /// Covers the box, cropped to it around the centre.
    Fill,
}

impl Mode {
    /// Its name in cache keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Fit => "fit",
            Mode::Resize => "resize",
            Mode::Fill => "fill",
        }
    }
}

/// The box a request for `width`×`height` gets: the smallest configured resolution holding
/// both (of two as small, the one with the request's orientation), else the largest. Sizes
/// are snapped so that previews come in a few sizes a cache can hold, as oCIS does.
pub fn snap(resolutions: &[(u32, u32)], width: u32, height: u32) -> (u32, u32) {
    let area = |&(w, h): &(u32, u32)| u64::from(w) * u64::from(h);
    let landscape = width >= height;
    let orientation_miss = |&(w, h): &(u32, u32)| u8::from((w >= h) != landscape);
    resolutions
        .iter()
        .filter(|&&(w, h)| w >= width && h >= height)
        .min_by_key(|r| (area(r), orientation_miss(r)))
        .or_else(|| {
            resolutions
                .iter()
                .max_by_key(|r| (area(r), u8::from(orientation_miss(r) == 0)))
        })
        .copied()
        .unwrap_or((width, height))
}

/// What to cut from a source and the size to scale it to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// x, y, width, height in the source.
    pub crop: (u32, u32, u32, u32),
    pub out: (u32, u32),
}

/// The plan for a `src`-sized image in box `bx`. Never larger than the source: a preview
/// is not an enlargement (oCIS's `scalingup=0`, ownCloud Web's default).
pub fn plan(src: (u32, u32), bx: (u32, u32), mode: Mode) -> Plan {
    let (sw, sh) = (f64::from(src.0.max(1)), f64::from(src.1.max(1)));
    let (bw, bh) = (f64::from(bx.0.max(1)), f64::from(bx.1.max(1)));
    let whole = (0, 0, src.0, src.1);
    let px = |v: f64| (v.round() as u32).max(1);
    match mode {
        Mode::Fit => {
            let s = (bw / sw).min(bh / sh).min(1.0);
            Plan {
                crop: whole,
                out: (px(sw * s), px(sh * s)),
            }
        }
        Mode::Resize => Plan {
            crop: whole,
            out: (bx.0.clamp(1, src.0.max(1)), bx.1.clamp(1, src.1.max(1))),
        },
        Mode::Fill => {
            // A box larger than the source shrinks to fit in it, keeping its shape.
            let shrink = (sw / bw).min(sh / bh).min(1.0);
            let (ow, oh) = (bw * shrink, bh * shrink);
            // The largest centred part of the source with the box's shape.
            let s = (ow / sw).max(oh / sh);
            let (cw, ch) = ((ow / s).min(sw), (oh / s).min(sh));
            let (cw, ch) = (px(cw).min(src.0), px(ch).min(src.1));
            Plan {
                crop: ((src.0 - cw) / 2, (src.1 - ch) / 2, cw, ch),
                out: (px(ow), px(oh)),
            }
        }
    }
}

/// One encoded preview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub data: Vec<u8>,
    pub mime: &'static str,
}

/// The media type of an encoded preview, from its first bytes (what the cache keeps is only
/// the bytes).
pub fn mime_of(data: &[u8]) -> &'static str {
    if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
        "image/jpeg"
    } else {
        "image/png"
    }
}

/// A preview of the image in `bytes`, in box `bx`. Its header is read first: more than
/// `max_pixels` pixels (a decompression bomb, or just a huge scan) is refused before any
/// pixel is decoded, and the decoder is held to an allocation bound besides.
pub fn image(
    bytes: &[u8],
    bx: (u32, u32),
    mode: Mode,
    max_pixels: u64,
) -> Result<Rendered, RenderError> {
    let mut reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|_| RenderError::Undecodable)?;
    let format = reader.format().ok_or(RenderError::Unsupported)?;
    if !matches!(
        format,
        ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::Gif | ImageFormat::WebP
    ) {
        return Err(RenderError::Unsupported);
    }
    let side = u32::try_from(max_pixels).unwrap_or(u32::MAX);
    let mut limits = Limits::default();
    limits.max_image_width = Some(side);
    limits.max_image_height = Some(side);
    // 16-bit RGBA is 8 bytes a pixel; a decoder's own buffers come on top.
    limits.max_alloc = Some(max_pixels.saturating_mul(8).saturating_add(64 << 20));
    reader.limits(limits);
    let mut decoder = reader.into_decoder().map_err(decode_error)?;
    let (w, h) = decoder.dimensions();
    if u64::from(w) * u64::from(h) > max_pixels {
        return Err(RenderError::TooLarge);
    }
    let orientation = decoder.orientation().ok();
    let mut img = DynamicImage::from_decoder(decoder).map_err(decode_error)?;
    if let Some(o) = orientation {
        img.apply_orientation(o);
    }
    let plan = plan((img.width(), img.height()), bx, mode);
    encode(shrink(&img, plan), format == ImageFormat::Jpeg)
}

/// The plan carried out: the crop read in place (copying a camera-sized crop first cost a
/// tenth of a render), scaled by a box filter over the source pixels each output pixel
/// covers, as good as a triangle filter for shrinking at a fraction of its cost.
fn shrink(img: &DynamicImage, plan: Plan) -> DynamicImage {
    let (x, y, w, h) = plan.crop;
    let (ow, oh) = plan.out;
    macro_rules! scaled {
        ($buf:expr, $variant:path) => {{
            let view = image::imageops::crop_imm($buf, x, y, w, h);
            if (ow, oh) == (w, h) {
                $variant(view.to_image())
            } else {
                $variant(image::imageops::thumbnail(&*view, ow, oh))
            }
        }};
    }
    match img {
        DynamicImage::ImageLuma8(b) => scaled!(b, DynamicImage::ImageLuma8),
        DynamicImage::ImageLumaA8(b) => scaled!(b, DynamicImage::ImageLumaA8),
        DynamicImage::ImageRgb8(b) => scaled!(b, DynamicImage::ImageRgb8),
        DynamicImage::ImageRgba8(b) => scaled!(b, DynamicImage::ImageRgba8),
        // 16-bit and float sources: rare for previews, taken the plain way.
        other => other.crop_imm(x, y, w, h).thumbnail_exact(ow, oh),
    }
}

fn decode_error(e: image::ImageError) -> RenderError {
    match e {
        image::ImageError::Limits(_) => RenderError::TooLarge,
        image::ImageError::Unsupported(_) => RenderError::Unsupported,
        _ => RenderError::Undecodable,
    }
}

/// JPEG for photos (what they came as: a PNG of one is several times larger), PNG for the
/// rest (transparency, sharp edges).
fn encode(img: DynamicImage, jpeg: bool) -> Result<Rendered, RenderError> {
    let mut data = Vec::new();
    if jpeg {
        let rgb = match img {
            DynamicImage::ImageLuma8(_) | DynamicImage::ImageRgb8(_) => img,
            other => DynamicImage::ImageRgb8(other.to_rgb8()),
        };
        JpegEncoder::new_with_quality(&mut data, 85)
            .encode_image(&rgb)
            .map_err(|_| RenderError::Encode)?;
        return Ok(Rendered {
            data,
            mime: "image/jpeg",
        });
    }
    let eight_bit = match img {
        DynamicImage::ImageLuma8(_)
        | DynamicImage::ImageLumaA8(_)
        | DynamicImage::ImageRgb8(_)
        | DynamicImage::ImageRgba8(_) => img,
        other => DynamicImage::ImageRgba8(other.to_rgba8()),
    };
    eight_bit
        .write_to(&mut Cursor::new(&mut data), ImageFormat::Png)
        .map_err(|_| RenderError::Encode)?;
    Ok(Rendered {
        data,
        mime: "image/png",
    })
}

/// Longest side of a text page: enough to read, small enough to draw at once.
const MAX_PAGE: u32 = 1280;
/// Columns across a page drawn at its largest: glyphs grow with the page up to this.
const COLUMNS: u32 = 60;
const INK: Luma<u8> = Luma([48]);
const PAPER: u8 = 255;

/// A preview of a text file: its first lines, as far as they go, drawn dark on white in the
/// box's shape (at most [`MAX_PAGE`] on its longest side). Bytes that look binary (a NUL
/// in them) are not text: no preview.
pub fn text(bytes: &[u8], bx: (u32, u32)) -> Result<Rendered, RenderError> {
    if bytes.contains(&0) {
        return Err(RenderError::Unsupported);
    }
    let longest = bx.0.max(bx.1).max(1);
    let shrink = f64::from(MAX_PAGE.min(longest)) / f64::from(longest);
    let w = ((f64::from(bx.0) * shrink).round() as u32).max(1);
    let h = ((f64::from(bx.1) * shrink).round() as u32).max(1);
    let mut page = GrayImage::from_pixel(w, h, Luma([PAPER]));
    let scale = (w / ((font::WIDTH + 1) * COLUMNS)).max(1);
    let margin = (w.min(h) / 16).max(1);
    let (cell_w, cell_h) = ((font::WIDTH + 1) * scale, (font::HEIGHT + 2) * scale);
    // A multi-byte character cut at the end of the prefix read is dropped, not drawn as junk.
    let text = String::from_utf8_lossy(bytes);
    let mut y = margin;
    for line in text.lines() {
        if y + font::HEIGHT * scale > h {
            break;
        }
        let mut x = margin;
        for c in line.chars().flat_map(|c| {
            // A tab is four columns, as most editors show it.
            let n = if c == '\t' { 4 } else { 1 };
            std::iter::repeat_n(if c == '\t' { ' ' } else { c }, n)
        }) {
            if x + font::WIDTH * scale > w.saturating_sub(margin) {
                break;
            }
            if c != '\u{FFFD}' && !c.is_control() {
                draw(&mut page, font::glyph(c), x, y, scale);
            }
            x += cell_w;
        }
        y += cell_h;
    }
    let mut data = Vec::new();
    DynamicImage::ImageLuma8(page)
        .write_to(&mut Cursor::new(&mut data), ImageFormat::Png)
        .map_err(|_| RenderError::Encode)?;
    Ok(Rendered {
        data,
        mime: "image/png",
    })
}

/// One glyph at (x, y), each font pixel a `scale`×`scale` square (clipped to the page).
fn draw(page: &mut GrayImage, columns: [u8; 5], x: u32, y: u32, scale: u32) {
    for (cx, col) in (0u32..).zip(columns) {
        for row in 0..font::HEIGHT {
            if col & (1 << row) == 0 {
                continue;
            }
            for dy in 0..scale {
                for dx in 0..scale {
                    let (px, py) = (x + cx * scale + dx, y + row * scale + dy);
                    if px < page.width() && py < page.height() {
                        page.put_pixel(px, py, INK);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULTS: [(u32, u32); 10] = [
        (16, 16),
        (32, 32),
        (64, 64),
        (128, 128),
        (1080, 1920),
        (1920, 1080),
        (2160, 3840),
        (3840, 2160),
        (4320, 7680),
        (7680, 4320),
    ];

    #[test]
    fn sizes_snap_up_to_the_smallest_configured_box_that_holds_them() {
        assert_eq!(snap(&DEFAULTS, 32, 32), (32, 32));
        assert_eq!(snap(&DEFAULTS, 20, 20), (32, 32));
        assert_eq!(snap(&DEFAULTS, 100, 50), (128, 128));
        assert_eq!(snap(&DEFAULTS, 300, 200), (1920, 1080));
        assert_eq!(snap(&DEFAULTS, 200, 300), (1080, 1920));
        assert_eq!(snap(&DEFAULTS, 1500, 1500), (3840, 2160));
        assert_eq!(snap(&DEFAULTS, 90_000, 1), (7680, 4320));
        assert_eq!(snap(&DEFAULTS, 1, 90_000), (4320, 7680));
    }

    #[test]
    fn fit_keeps_the_aspect_and_never_enlarges() {
        assert_eq!(plan((400, 200), (128, 128), Mode::Fit).out, (128, 64));
        assert_eq!(plan((200, 400), (128, 128), Mode::Fit).out, (64, 128));
        assert_eq!(plan((40, 20), (128, 128), Mode::Fit).out, (40, 20));
        assert_eq!(plan((10_000, 1), (32, 32), Mode::Fit).out, (32, 1));
    }

    #[test]
    fn fill_crops_the_centre_to_the_box() {
        let p = plan((400, 200), (128, 128), Mode::Fill);
        assert_eq!(p.out, (128, 128));
        assert_eq!(p.crop, (100, 0, 200, 200));
        // Smaller than the box: the box shrinks to the source, keeping its shape.
        let p = plan((100, 50), (128, 128), Mode::Fill);
        assert_eq!(p.out, (50, 50));
        assert_eq!(p.crop, (25, 0, 50, 50));
        let p = plan((100, 50), (128, 128), Mode::Resize);
        assert_eq!(p.out, (100, 50));
    }

    #[test]
    fn kinds_come_from_the_extension() {
        assert_eq!(kind_of("a.PNG"), Some(Kind::Image));
        assert_eq!(kind_of("notes.md"), Some(Kind::Text));
        assert_eq!(kind_of("movie.mp4"), None);
        assert_eq!(kind_of("README"), None);
    }

    fn png(w: u32, h: u32) -> Vec<u8> {
        let img = image::RgbImage::from_fn(w, h, |x, y| image::Rgb([x as u8, y as u8, 7]));
        let mut out = Vec::new();
        DynamicImage::ImageRgb8(img)
            .write_to(&mut Cursor::new(&mut out), ImageFormat::Png)
            .unwrap_or_default();
        out
    }

    fn dims(data: &[u8]) -> (u32, u32) {
        image::load_from_memory(data)
            .map(|i| (i.width(), i.height()))
            .unwrap_or((0, 0))
    }

    #[test]
    fn an_image_is_scaled_into_its_box() -> Result<(), RenderError> {
        let r = image(&png(300, 150), (128, 128), Mode::Fit, 1 << 20)?;
        assert_eq!(r.mime, "image/png");
        assert_eq!(dims(&r.data), (128, 64));
        let r = image(&png(300, 150), (64, 64), Mode::Fill, 1 << 20)?;
        assert_eq!(dims(&r.data), (64, 64));
        Ok(())
    }

    #[test]
    fn too_many_pixels_are_refused_before_decoding() {
        let r = image(&png(300, 150), (128, 128), Mode::Fit, 300 * 150 - 1);
        assert!(matches!(r, Err(RenderError::TooLarge)), "{r:?}");
        let r = image(b"not an image at all", (32, 32), Mode::Fit, 1 << 20);
        assert!(matches!(r, Err(RenderError::Unsupported)), "{r:?}");
    }

    #[test]
    fn text_is_drawn_in_the_box_shape() -> Result<(), RenderError> {
        let r = text(b"hello\n\tworld\n", (128, 128))?;
        assert_eq!(dims(&r.data), (128, 128));
        let gray = image::load_from_memory(&r.data)
            .map(|i| i.to_luma8())
            .unwrap_or_default();
        assert!(gray.pixels().any(|p| p.0[0] < 128), "some ink");
        let r = text(b"x", (7680, 4320))?;
        assert_eq!(dims(&r.data), (1280, 720));
        assert!(matches!(
            text(b"\0ELF", (32, 32)),
            Err(RenderError::Unsupported)
        ));
        Ok(())
    }
}
