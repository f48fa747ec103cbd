//! The crawler: keeps the index in step with the spaces by their etags.
//!
//! It looks at a space as soon as storage-users hints that the space changed (the bus's
//! [`arca_proto::HINT_SPACE_CHANGED`], sent at most every 100 ms per busy space), so a file
//! written is findable within a fraction of a second. A hint that names the nodes written or
//! removed has only those looked at (one `Stat` each: upserted, moved, or removed with their
//! subtree when gone), so the cost follows the writes, not the size of the folders written
//! into; a hint of the whole space has it walked by etags, as below. Hints are lossy and need
//! not be trusted: the etags are the truth, and every `search.interval` (and after a hint feed
//! that lagged) the crawler looks at every space anyway. A round lists every space as the search service's own identity
//! (`service:search`, which storage-users lets read every space and change none). A space
//! whose root etag equals the one last indexed is done. Otherwise its root is listed, and
//! below it only the folders whose etag changed (etags propagate to the root on every change)
//! or whose path changed (a moved folder's children moved too); changed nodes are upserted,
//! children gone from a listing are removed with their subtrees, and text-like files up to
//! `search.max_content_bytes` have their content read from the provider's data path. A space
//! is recorded at its new etag only once its walk finished, so a walk cut short (a stop, a
//! failed call) is simply done again: catching up after downtime and surviving restarts
//! follow from this. Spaces gone from the listing are dropped; disabled ones are kept (a
//! restore needs no reindex) but flagged, and queries skip them.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use arca_proto::v1::{
    GetSpaceRequest, InitiateDownloadRequest, ListRequest, ListSpacesRequest, Node, Ref, Space,
    StatRequest,
};
use arca_runtime::events::{Hint, Hints};
use arca_runtime::worker::{Schedule, State};
use arca_runtime::{BoxFuture, Identity, Providers, ServiceError, TokenSigner, Worker};
use arca_transport::Channel;
use axum::body::Body;
use http_body_util::BodyExt as _;
use tokio::time::Instant;
use tower::ServiceExt as _;

use crate::index::{Change, Doc, Index, IndexError, Known};
use crate::mime;

/// Index writes made in one transaction at most.
const BATCH: usize = 256;

/// How long the crawler's own identity token lives: longer than any one call it makes.
const IDENTITY_TTL: Duration = Duration::from_secs(300);

/// Why a crawl step failed (it is retried on the next tick).
#[derive(Debug, thiserror::Error)]
pub enum CrawlError {
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error("storage-users: {0}")]
    Storage(String),
}

impl From<tonic::Status> for CrawlError {
    fn from(s: tonic::Status) -> Self {
        CrawlError::Storage(s.message().to_owned())
    }
}

/// How a space's walk ended.
enum Walk {
    Done,
    /// At shutdown, part-way: the space's etag is not recorded.
    Stopped,
}

pub struct Crawler {
    index: Index,
    storage: Channel,
    providers: Providers,
    signer: TokenSigner,
    interval: Duration,
    max_content: u64,
    /// The service's shutdown: a long walk (a first index of a big space) stops between two
    /// folders instead of holding the process's stop; the space is walked again next time.
    stop: tokio_util::sync::CancellationToken,
    /// storage-users' hints of changed spaces.
    hints: Hints,
    /// Spaces hinted since the last look at them, with the nodes named (`None`: the whole
    /// space).
    hinted: HashMap<String, Option<HashSet<String>>>,
    /// When every space is looked at next (now, at start: catching up after downtime; a
    /// worker that waited for the lease finds it past, so a new holder begins with a round).
    next_round: Instant,
    /// The hint feed ended for good (the bus is gone): only the rounds remain.
    hints_closed: bool,
}

/// Where a [`Crawler`] reads from and how it paces itself.
pub struct Sources {
    pub storage: Channel,
    pub providers: Providers,
    pub signer: TokenSigner,
    /// storage-users' hints of changed spaces (`bus.hints(HINT_SPACE_CHANGED)`).
    pub hints: Hints,
    pub stop: tokio_util::sync::CancellationToken,
}

impl Crawler {
    /// A crawler that looks at every space at once, then at each hinted space when hinted and
    /// at every space each `search.interval`.
    pub fn new(index: Index, from: Sources, config: &arca_config::SearchSection) -> Self {
        Self {
            index,
            storage: from.storage,
            providers: from.providers,
            signer: from.signer,
            interval: config.interval,
            max_content: config.max_content_bytes,
            stop: from.stop,
            hints: from.hints,
            hinted: HashMap::new(),
            next_round: Instant::now(),
            hints_closed: false,
        }
    }
}

impl Worker for Crawler {
    fn name(&self) -> &'static str {
        "search/crawl"
    }

    // An index of the instance's own (a file on its disk) is crawled by that instance: a
    // lease would leave every instance but one stale. A shared one (PostgreSQL) is crawled by
    // one instance at a time, under the leader lease; another takes over when it stops or
    // dies, and begins with a whole round (see `next_round`), catching up with whatever the
    // last holder had not reached. A failed step is tried again as a whole round (see
    // `work`).
    fn schedule(&self) -> Schedule {
        let schedule = Schedule::on_work(Duration::from_secs(1), Duration::from_secs(30));
        if self.index.is_shared() {
            schedule.leased()
        } else {
            schedule
        }
    }

    fn wait_for_work(&mut self) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            if !self.hinted.is_empty() {
                return true;
            }
            let round = tokio::time::sleep_until(self.next_round);
            tokio::pin!(round);
            loop {
                let hint = async {
                    if self.hints_closed {
                        std::future::pending().await
                    } else {
                        self.hints.next().await
                    }
                };
                tokio::select! {
                    biased;
                    () = &mut round => return true,
                    hint = hint => match hint {
                        Hint::Key(key) => {
                            self.note_hint(&key);
                            return true;
                        }
                        Hint::Missed => {
                            self.next_round = Instant::now();
                            return true;
                        }
                        Hint::Closed => self.hints_closed = true,
                    },
                }
            }
        })
    }

    fn work(&mut self) -> BoxFuture<'_, Result<State, ServiceError>> {
        Box::pin(async move {
            let result = if Instant::now() >= self.next_round {
                // A round covers whatever was hinted before it began.
                self.hinted.clear();
                self.next_round = Instant::now() + self.interval;
                self.crawl().await
            } else {
                let hinted = std::mem::take(&mut self.hinted);
                self.crawl_hinted(hinted).await
            };
            result.map_err(|e| {
                // The next step (after the backoff) is a whole round.
                self.next_round = Instant::now();
                tracing::warn!(error = %e, "search crawl failed; trying again");
                Box::new(e) as ServiceError
            })?;
            Ok(State::Idle)
        })
    }
}

impl Crawler {
    /// Adds a hint's space, and the nodes it names, to what is looked at next: a space once
    /// hinted whole stays whole.
    fn note_hint(&mut self, key: &str) {
        let (space, nodes) = arca_proto::parse_space_hint(key);
        if space.is_empty() {
            return;
        }
        let entry = self
            .hinted
            .entry(space.to_owned())
            .or_insert_with(|| Some(HashSet::new()));
        match entry {
            Some(known) if !nodes.is_empty() => {
                known.extend(nodes.into_iter().map(str::to_owned));
            }
            _ => *entry = None,
        }
    }

    /// A request made as `service:search`, not as any user.
    fn as_service<T>(&self, message: T) -> tonic::Request<T> {
        let identity = Identity {
            id: arca_proto::principals::SEARCH_SERVICE.to_owned(),
            username: "search".to_owned(),
            display_name: String::new(),
            groups: Vec::new(),
            admin: false,
            space_admin: false,
            login: None,
        };
        let mut req = tonic::Request::new(message);
        let token = self.signer.sign_identity(&identity, IDENTITY_TTL);
        if let Ok(v) = token.parse() {
            req.metadata_mut()
                .insert(arca_transport::context::IDENTITY, v);
        }
        req
    }

    /// A look at the spaces storage-users hinted: at the nodes named, or for a whole space one
    /// `GetSpace` and a walk where the etag moved.
    async fn crawl_hinted(
        &self,
        hinted: HashMap<String, Option<HashSet<String>>>,
    ) -> Result<(), CrawlError> {
        for (id, nodes) in hinted {
            if let Some(nodes) = nodes {
                match self.look_at_nodes(&id, nodes).await? {
                    Some(Walk::Stopped) => return Ok(()),
                    Some(Walk::Done) => continue,
                    // Not indexed yet, or disabled: the whole look below settles it.
                    None => {}
                }
            }
            let space = arca_proto::storage_client(self.storage.clone())
                .get_space(self.as_service(GetSpaceRequest {
                    space_id: id.clone(),
                    with_usage: false,
                }))
                .await;
            match space {
                Ok(space) => {
                    let known = self.index.space_etag(&id).await?;
                    if let Walk::Stopped = self.look_at(&space.into_inner(), known).await? {
                        return Ok(());
                    }
                }
                // Gone (deleted) or disabled meanwhile: the next round settles it.
                Err(s) if s.code() == tonic::Code::NotFound => {}
                Err(s) => return Err(s.into()),
            }
        }
        Ok(())
    }

    /// The nodes `ids` of the space `space_id` against what the index holds of them: each one
    /// stat'ed, then those gone removed with their subtrees, then those whose etag or path
    /// moved upserted — in that order, because a name removed and made again in one hint
    /// (a folder deleted and made anew) is two ids at one path, and removing the old one's
    /// path after the new one was indexed would take the new one with it. `None` when the
    /// space must be looked at whole instead (never indexed, or disabled). The space's
    /// recorded etag stays: the next round walks it, and finds what was done here done.
    ///
    /// A folder new at its path (made, moved here, copied here) is walked once its own
    /// document is written: a moved one's subtree went with its old path, a copied one brings
    /// contents no hint names. A new empty folder costs one listing of nothing.
    async fn look_at_nodes(
        &self,
        space_id: &str,
        ids: HashSet<String>,
    ) -> Result<Option<Walk>, CrawlError> {
        if self.index.space_etag(space_id).await?.is_none()
            || self.index.is_disabled(space_id).await?
        {
            return Ok(None);
        }
        let mut gone = Vec::new();
        let mut present = Vec::new();
        let mut known_all = {
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            self.index.known(&ids).await?
        };
        for id in ids {
            if self.stop.is_cancelled() {
                return Ok(Some(Walk::Stopped));
            }
            let known = known_all.remove(&id);
            let node = arca_proto::storage_client(self.storage.clone())
                .stat(self.as_service(StatRequest {
                    r#ref: Some(Ref {
                        space_id: space_id.to_owned(),
                        path: String::new(),
                        node_id: id.clone(),
                    }),
                    ..Default::default()
                }))
                .await;
            match node {
                Ok(n) => present.push((n.into_inner(), known)),
                // Removed (into the trash, or purged).
                Err(s) if s.code() == tonic::Code::NotFound => gone.extend(known),
                Err(s) => return Err(s.into()),
            }
        }
        let mut walks = Vec::new();
        let mut changes: Vec<Change> = gone
            .into_iter()
            .map(|k| Change::Remove {
                space_id: space_id.to_owned(),
                path: k.path,
            })
            .collect();
        for (node, known) in present {
            let moved = known
                .as_ref()
                .is_none_or(|k| k.path != node.path || k.is_dir != node.is_dir);
            if !moved && known.as_ref().is_some_and(|k| k.etag == node.etag) {
                continue;
            }
            if let Some(k) = known.as_ref().filter(|_| moved) {
                changes.push(Change::Remove {
                    space_id: space_id.to_owned(),
                    path: k.path.clone(),
                });
            }
            if moved && node.is_dir {
                walks.push((node.id.clone(), node.path.clone()));
            }
            changes.push(self.change_for(&node, known.as_ref()).await);
            self.flush_full(&mut changes).await?;
        }
        self.index.apply(&changes).await?;
        for (folder_id, path) in walks {
            if let Walk::Stopped = self.walk_from(space_id, &folder_id, &path).await? {
                return Ok(Some(Walk::Stopped));
            }
        }
        Ok(Some(Walk::Done))
    }

    /// One space against what the index holds of it (`known`: the etag it was indexed at).
    async fn look_at(&self, space: &Space, known: Option<String>) -> Result<Walk, CrawlError> {
        if space.disabled {
            // Nobody reads a disabled space: nothing to walk (and the provider would not
            // list it). Its documents stay, flagged, for when it is restored.
            if known.is_some() {
                self.index.set_disabled(&space.id, true).await?;
            }
            return Ok(Walk::Done);
        }
        if known.as_ref() == Some(&space.etag) {
            self.index.set_disabled(&space.id, false).await?;
            return Ok(Walk::Done);
        }
        if known.is_none() && space.empty {
            // A space never indexed with nothing in it (most often a home made at a first
            // login): nothing to list. What is added later moves the etag recorded here.
            self.index.set_space(&space.id, &space.etag, false).await?;
            return Ok(Walk::Done);
        }
        match self.walk_from(&space.id, &space.root_id, "/").await {
            Ok(Walk::Done) => self.index.set_space(&space.id, &space.etag, false).await?,
            Ok(Walk::Stopped) => return Ok(Walk::Stopped),
            // One space failing (a call refused, its provider away) holds no other back;
            // it keeps its old etag, so it is walked again on the next round.
            Err(e) => {
                tracing::warn!(error = %e, space = %space.id, "search: space not indexed")
            }
        }
        Ok(Walk::Done)
    }

    /// One pass over every space.
    pub async fn crawl(&self) -> Result<(), CrawlError> {
        let spaces = arca_proto::storage_client(self.storage.clone())
            .list_spaces(self.as_service(ListSpacesRequest {
                all: true,
                with_usage: false,
            }))
            .await?
            .into_inner()
            .spaces;
        let known = self.index.spaces().await?;
        let mut seen = HashSet::new();
        for space in &spaces {
            seen.insert(space.id.as_str());
            if let Walk::Stopped = self.look_at(space, known.get(&space.id).cloned()).await? {
                return Ok(());
            }
        }
        for gone in known.keys().filter(|k| !seen.contains(k.as_str())) {
            self.index.drop_space(gone).await?;
        }
        Ok(())
    }

    /// Walks the folder `folder_id` at `path` (a space's root at "/") and below, folder by
    /// folder, into those whose etag or path changed.
    async fn walk_from(
        &self,
        space_id: &str,
        folder_id: &str,
        path: &str,
    ) -> Result<Walk, CrawlError> {
        let mut folders = vec![(folder_id.to_owned(), path.to_owned())];
        while let Some((folder_id, path)) = folders.pop() {
            if self.stop.is_cancelled() {
                return Ok(Walk::Stopped);
            }
            let listing = arca_proto::storage_client(self.storage.clone())
                .list(self.as_service(ListRequest {
                    r#ref: Some(Ref {
                        space_id: space_id.to_owned(),
                        path: path.clone(),
                        node_id: String::new(),
                    }),
                    without_checksums: true,
                    ..Default::default()
                }))
                .await;
            let listing = match listing {
                Ok(l) => l.into_inner(),
                // Removed since its parent was listed: its parent's next walk drops it.
                Err(s) if s.code() == tonic::Code::NotFound => continue,
                Err(s) => return Err(s.into()),
            };
            let mut known = self.index.children(&folder_id).await?;
            let mut changes = Vec::new();
            for child in listing.children {
                let before = known.remove(&child.id);
                let changed = before
                    .as_ref()
                    .is_none_or(|k| k.etag != child.etag || k.path != child.path);
                if !changed {
                    continue;
                }
                if child.is_dir {
                    folders.push((child.id.clone(), child.path.clone()));
                }
                // A node that changed kind or moved here from elsewhere under the same id is
                // replaced as a whole (its old subtree paths go with it).
                if let Some(k) = before
                    .as_ref()
                    .filter(|k| k.path != child.path || k.is_dir != child.is_dir)
                {
                    changes.push(Change::Remove {
                        space_id: space_id.to_owned(),
                        path: k.path.clone(),
                    });
                }
                changes.push(self.change_for(&child, before.as_ref()).await);
                self.flush_full(&mut changes).await?;
            }
            // Whatever the index had here and the listing has not is gone (or moved: then the
            // walk of its new folder puts it back).
            changes.extend(known.into_values().map(|gone| Change::Remove {
                space_id: space_id.to_owned(),
                path: gone.path,
            }));
            self.index.apply(&changes).await?;
        }
        Ok(Walk::Done)
    }

    /// Writes `changes` once they are [`BATCH`] long (a folder of 100,000 files is not one
    /// transaction holding 100,000 contents in memory).
    async fn flush_full(&self, changes: &mut Vec<Change>) -> Result<(), CrawlError> {
        if changes.len() >= BATCH {
            self.index.apply(changes).await?;
            changes.clear();
        }
        Ok(())
    }

    /// The change that indexes `node` (`before`: what the index held of it), with its
    /// content read when it is text.
    async fn change_for(&self, node: &Node, before: Option<&Known>) -> Change {
        let mime = mime::of(&node.name, node.is_dir);
        let doc = Doc {
            id: node.id.clone(),
            space_id: node.space_id.clone(),
            parent_id: node.parent_id.clone(),
            path: node.path.clone(),
            name: node.name.clone(),
            is_dir: node.is_dir,
            size: node.size,
            mtime_ns: node.mtime_ns,
            etag: node.etag.clone(),
            mime: mime.to_owned(),
            owner_id: node.owner_id.clone(),
        };
        // In place under the same name, a folder or a file whose content is not read keeps
        // what its text index holds (the name, no content): only its other fields change,
        // which is most of a sync client's writes (an overwrite, a folder's new etag).
        if before.is_some_and(|k| k.path == node.path && k.is_dir == node.is_dir)
            && (node.is_dir || !mime::is_text(mime))
        {
            return Change::Refresh(doc);
        }
        let content = if !node.is_dir && mime::is_text(mime) && node.size <= self.max_content {
            match self.content(node).await {
                Ok(text) => Some(text),
                // The file changed or went away meanwhile: its name is indexed now, its
                // content with the next etag.
                Err(e) => {
                    tracing::debug!(error = %e, node = %node.id, "content not indexed");
                    Some(String::new())
                }
            }
        } else if node.is_dir {
            None
        } else {
            Some(String::new())
        };
        Change::Upsert { doc, content }
    }

    /// A text file's content, from its provider's data path, at most `max_content` bytes.
    async fn content(&self, node: &Node) -> Result<String, CrawlError> {
        let transfer = arca_proto::storage_client(self.storage.clone())
            .initiate_download(self.as_service(InitiateDownloadRequest {
                r#ref: Some(Ref {
                    space_id: node.space_id.clone(),
                    path: String::new(),
                    node_id: node.id.clone(),
                }),
                version_key: String::new(),
                // A small file kept in the provider's database comes in the answer itself:
                // one call instead of two for most of what a crawl reads.
                small_body: true,
            }))
            .await?
            .into_inner();
        let limit = usize::try_from(self.max_content).unwrap_or(usize::MAX);
        if transfer.has_body {
            let bytes = &transfer.body[..transfer.body.len().min(limit)];
            return Ok(text_of(bytes));
        }
        let req = http::Request::get(format!("/data/{}", transfer.token))
            .body(Body::empty())
            .map_err(|e| CrawlError::Storage(e.to_string()))?;
        let resp = self
            .providers
            .get(&transfer.provider)
            .clone()
            .oneshot(req)
            .await
            .map_err(|e| CrawlError::Storage(e.to_string()))?;
        if !resp.status().is_success() {
            return Err(CrawlError::Storage(format!(
                "the data path answered {}",
                resp.status()
            )));
        }
        let bytes = http_body_util::Limited::new(resp.into_body(), limit)
            .collect()
            .await
            .map_err(|e| CrawlError::Storage(e.to_string()))?
            .to_bytes();
        Ok(text_of(&bytes))
    }
}

/// A text file's bytes as text to index: none for binary content under a text name (a NUL
/// byte).
fn text_of(bytes: &[u8]) -> String {
    if bytes.contains(&0) {
        return String::new();
    }
    String::from_utf8_lossy(bytes).into_owned()
}
