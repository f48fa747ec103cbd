//! arca-thumbnails: previews of files, for `?preview=1` on every file URL.
//!
//! It serves the `Thumbnails` API (through the gateway, which hands it the source's transfer,
//! made as the caller: the provider has checked the caller may read the file, and says its
//! id and current etag). A preview is looked up in the disk [`cache`] by (file id, etag,
//! box, mode); otherwise the source is read from its provider's data path — at most
//! `thumbnails.max_source_size` bytes, never more held — and drawn by [`render`]: PNG, JPEG,
//! GIF and WebP sources scaled into the box (their headers checked against
//! `thumbnails.max_source_pixels` before a pixel is decoded), text files as a page of their
//! first lines. Sizes are snapped up to `thumbnails.resolutions`.
//!
//! CPU is bounded: at most `thumbnails.workers` renders run at once, each on a blocking
//! thread. A request waits `thumbnails.render_wait` for its preview; past that it is told to
//! come back (`retry_after`, the client's 425) while the render goes on and files its
//! result, and requests for a preview already being made wait for that one render.
//!
//! Main items: [`Thumbnails`] (the service), [`render`] (pure drawing), [`cache`].

pub mod cache;
mod font;
pub mod render;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arca_config::ThumbnailsSection;
use arca_proto::ErrorKind;
use arca_proto::v1::thumbnails_server::ThumbnailsServer;
use arca_proto::v1::{GetThumbnailRequest, Processor, Thumbnail, Transfer};
use arca_runtime::{BoxFuture, Context, Providers, Service, ServiceError, caller};
use arca_transport::context::CallContext;
use axum::body::Body;
use http_body_util::BodyExt as _;
use tokio::sync::{Semaphore, watch};
use tokio_util::task::TaskTracker;
use tonic::{Request, Response, Status};
use tower::ServiceExt as _;

use crate::cache::{Cache, Key};
use crate::render::{Kind, Mode, RenderError, Rendered};

/// What a waiting client is told to wait before asking again, in seconds.
const RETRY_AFTER_SECS: u32 = 1;

/// The thumbnails service.
pub struct Thumbnails;

impl Service for Thumbnails {
    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), ServiceError>> {
        Box::pin(async move {
            let config = ctx.config().thumbnails.clone();
            let cache = Cache::open(ctx.data_dir("thumbnails").await?, config.cache_size).await?;
            let workers = match config.workers {
                0 => std::thread::available_parallelism().map_or(1, usize::from),
                n => n as usize,
            };
            // Renders outlive the requests that started them (see `get_thumbnail`); they
            // are waited for after the server stops, like the requests themselves.
            let renders = TaskTracker::new();
            let api = ThumbnailsApi {
                inner: Arc::new(Inner {
                    config,
                    cache,
                    workers: Semaphore::new(workers),
                    providers: ctx.providers(),
                    pending: Mutex::default(),
                    renders: renders.clone(),
                }),
            };
            let router = tonic::service::Routes::new(ThumbnailsServer::new(api)).into_axum_router();
            ctx.set_ready();
            let served = ctx.serve(router).await;
            renders.close();
            renders.wait().await;
            served
        })
    }
}

/// Why a preview could not be made.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error("the file is too large for a preview")]
    SourceTooLarge,
    #[error("no preview for a folder")]
    Folder,
    #[error("the source was not given")]
    NoSource,
    #[error("the file is gone")]
    SourceGone,
    #[error("reading the file failed: {0}")]
    Source(String),
    #[error("the render stopped: {0}")]
    Worker(String),
}

impl Error {
    /// The one-line status a client may read (through the frontend's one mapping).
    fn status(&self) -> Status {
        match self {
            Error::Render(_) | Error::SourceTooLarge | Error::Folder | Error::SourceGone => {
                ErrorKind::NotFound.status(self.to_string())
            }
            Error::NoSource => ErrorKind::InvalidArgument.status(self.to_string()),
            Error::Source(_) => ErrorKind::Unavailable.status(self.to_string()),
            Error::Worker(_) => ErrorKind::Internal.status(self.to_string()),
        }
    }
}

/// A render's result, shared by every request waiting for it.
type Outcome = Result<Rendered, Status>;

struct ThumbnailsApi {
    inner: Arc<Inner>,
}

struct Inner {
    config: ThumbnailsSection,
    cache: Cache,
    /// One permit per render: CPU (and the memory of sources held) bounded by config.
    workers: Semaphore,
    providers: Providers,
    /// Renders under way, by cache key: a second request for the same preview waits for the
    /// first render instead of starting another. (Not `arca_runtime::SingleFlight`, which
    /// runs the work in the leading request: a render must outlive a request that gave up.)
    pending: Mutex<HashMap<Key, watch::Receiver<Option<Outcome>>>>,
    renders: TaskTracker,
}

/// What one request asks for, settled.
struct Job {
    key: Key,
    kind: Kind,
    bx: (u32, u32),
    mode: Mode,
    source: Transfer,
}

#[tonic::async_trait]
impl arca_proto::v1::thumbnails_server::Thumbnails for ThumbnailsApi {
    async fn get_thumbnail(
        &self,
        req: Request<GetThumbnailRequest>,
    ) -> Result<Response<Thumbnail>, Status> {
        caller(&req)?;
        let job = self.job(req.into_inner()).map_err(|e| e.status())?;
        if let Some(data) = self.inner.cache.get(&job.key).await {
            return Ok(Response::new(answer(Rendered {
                mime: render::mime_of(&data),
                data,
            })));
        }
        let mut waiting = self.start(job);
        let wait = self.inner.config.render_wait;
        match tokio::time::timeout(wait, waiting.wait_for(Option::is_some)).await {
            Ok(Ok(done)) => match done.as_ref() {
                Some(Ok(rendered)) => Ok(Response::new(answer(rendered.clone()))),
                Some(Err(status)) => Err(status.clone()),
                None => Err(Error::Worker("no outcome".into()).status()),
            },
            Ok(Err(_)) => Err(Error::Worker("the render went away".into()).status()),
            // Still rendering: the client comes back and finds it filed (or joins it).
            Err(_) => Ok(Response::new(Thumbnail {
                retry_after: RETRY_AFTER_SECS,
                ..Default::default()
            })),
        }
    }
}

fn answer(rendered: Rendered) -> Thumbnail {
    Thumbnail {
        mime_type: rendered.mime.to_owned(),
        data: rendered.data,
        retry_after: 0,
    }
}

impl ThumbnailsApi {
    fn job(&self, mut r: GetThumbnailRequest) -> Result<Job, Error> {
        let source = r.source.take().ok_or(Error::NoSource)?;
        let node = source.node.clone().ok_or(Error::NoSource)?;
        if node.is_dir {
            return Err(Error::Folder);
        }
        let kind = render::kind_of(&node.name).ok_or(RenderError::Unsupported)?;
        // Text is read only as far as a page shows, whatever its size.
        if kind == Kind::Image && node.size > self.inner.config.max_source_size {
            return Err(Error::SourceTooLarge);
        }
        let mode = match r.processor() {
            Processor::Fit => Mode::Fit,
            Processor::Resize => Mode::Resize,
            Processor::Fill | Processor::Thumbnail => Mode::Fill,
            Processor::Unspecified if r.keep_aspect => Mode::Fit,
            Processor::Unspecified => Mode::Fill,
        };
        let bx = render::snap(
            &self.inner.config.resolutions,
            r.width.max(1),
            r.height.max(1),
        );
        let key = Key {
            file: node.id.clone(),
            etag: node.etag.clone(),
            variant: format!("{}x{}-{}", bx.0, bx.1, mode.as_str()),
        };
        Ok(Job {
            key,
            kind,
            bx,
            mode,
            source,
        })
    }

    /// The outcome to wait for: the render under way for the same key, or a new one.
    fn start(&self, job: Job) -> watch::Receiver<Option<Outcome>> {
        let mut pending = self
            .inner
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(rx) = pending.get(&job.key) {
            return rx.clone();
        }
        let (tx, rx) = watch::channel(None);
        pending.insert(job.key.clone(), rx.clone());
        drop(pending);
        let inner = self.inner.clone();
        // The request's context (request id, trace) goes with the render's calls.
        let call = CallContext::current().unwrap_or_default();
        self.inner.renders.spawn(call.scope(async move {
            let outcome = inner.render(&job).await;
            if let Ok(rendered) = &outcome {
                inner.cache.put(&job.key, &rendered.data).await;
            }
            let _ = tx.send(Some(outcome.map_err(|e| {
                if matches!(e, Error::Render(_) | Error::SourceTooLarge) {
                    tracing::debug!(error = %e, file = %job.key.file, "no preview");
                } else {
                    tracing::warn!(error = %e, file = %job.key.file, "preview failed");
                }
                e.status()
            })));
            // Filed before it leaves the map: a request that misses both cannot happen.
            inner
                .pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&job.key);
        }));
        rx
    }
}

impl Inner {
    async fn render(&self, job: &Job) -> Result<Rendered, Error> {
        // Taken before the source is read, so the sources held in memory are bounded too.
        let _permit = self
            .workers
            .acquire()
            .await
            .map_err(|e| Error::Worker(e.to_string()))?;
        let (max, prefix) = match job.kind {
            Kind::Image => (self.config.max_source_size, None),
            Kind::Text => (render::TEXT_PREFIX, Some(render::TEXT_PREFIX)),
        };
        let bytes = self.fetch(&job.source, max, prefix).await?;
        let (kind, bx, mode, max_pixels) =
            (job.kind, job.bx, job.mode, self.config.max_source_pixels);
        let rendered = tokio::task::spawn_blocking(move || match kind {
            Kind::Image => render::image(&bytes, bx, mode, max_pixels),
            Kind::Text => render::text(&bytes, bx),
        })
        .await
        .map_err(|e| Error::Worker(e.to_string()))??;
        Ok(rendered)
    }

    /// The source's bytes from its provider's data path: at most `max` (more is
    /// [`Error::SourceTooLarge`], found without holding more), only the first `prefix` when
    /// asked.
    async fn fetch(
        &self,
        source: &Transfer,
        max: u64,
        prefix: Option<u64>,
    ) -> Result<Vec<u8>, Error> {
        let mut req = http::Request::get(format!("/data/{}", source.token));
        if let Some(n) = prefix {
            req = req.header(http::header::RANGE, format!("bytes=0-{}", n - 1));
        }
        let req = req
            .body(Body::empty())
            .map_err(|e| Error::Source(e.to_string()))?;
        let resp = self
            .providers
            .get(&source.provider)
            .clone()
            .oneshot(req)
            .await
            .map_err(|e| Error::Source(e.to_string()))?;
        match resp.status() {
            s if s.is_success() => {}
            http::StatusCode::NOT_FOUND => return Err(Error::SourceGone),
            // An empty file: nothing to draw from.
            http::StatusCode::RANGE_NOT_SATISFIABLE => return Ok(Vec::new()),
            s => return Err(Error::Source(format!("the data path answered {s}"))),
        }
        let limit = usize::try_from(max).unwrap_or(usize::MAX);
        match http_body_util::Limited::new(resp.into_body(), limit)
            .collect()
            .await
        {
            Ok(body) => Ok(body.to_bytes().to_vec()),
            Err(e)
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some() =>
            {
                Err(Error::SourceTooLarge)
            }
            Err(e) => Err(Error::Source(e.to_string())),
        }
    }
}
