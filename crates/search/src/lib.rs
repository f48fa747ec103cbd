//! arca-search: name and content search over every space a user may read.
//!
//! It serves the `Search` API (through the gateway, which forwards it as it is). Queries are
//! oCIS's KQL subset ([`kql`]) run against the [`index`]: documents with a trigram index over
//! names and the text of text-like files, in an SQLite file of the instance's own at
//! `data_dir/search/index.db`, or in PostgreSQL (`search.database`) shared by every search
//! instance. The index is fed by the [`crawl`]er, which follows the spaces' etags as the
//! service's own read-only identity, so it survives restarts and catches up after downtime
//! by construction (`arca search reindex` rebuilds it from the store). A shared index is
//! crawled by one instance at a time, under the leader lease `search/crawl`.
//!
//! Rights are checked when a query runs, never only when a file was indexed: the caller's
//! readable places are asked afresh of storage-users (their personal space and the project
//! spaces they are a member of, disabled ones skipped) and of the sharing service (the shares
//! they accepted, each the shared node's path in its space), both as the caller, and the
//! hits are those places' documents only. A revoked share, a removed member or a disabled
//! space is therefore gone from the very next query.
//!
//! Main items: [`Search`] (the service), [`kql::parse`], [`index::Index`],
//! [`crawl::Crawler`].

pub mod crawl;
pub mod index;
pub mod kql;
pub mod mime;

use std::time::Duration;

use arca_proto::ErrorKind;
use arca_proto::sharing::{self, perm, share_type};
use arca_proto::v1::search_server::SearchServer;
use arca_proto::v1::sharing_client::SharingClient;
use arca_proto::v1::{
    ListSharesRequest, ListSpacesRequest, Node, SearchHit, SearchOrder, SearchRequest,
    SearchResponse,
};
use arca_runtime::{BoxFuture, Context, Service, ServiceError, caller};
use arca_transport::Channel;
use tonic::{Request, Response, Status};

use crate::index::{Index, Order, Reach};

/// Hits returned when a query names no limit, and the most it may ask for.
const DEFAULT_LIMIT: u32 = 200;
const MAX_LIMIT: u32 = 1000;

/// The search service.
pub struct Search;

impl Service for Search {
    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), ServiceError>> {
        Box::pin(async move {
            let config = ctx.config().search.clone();
            let index = match &config.database {
                None => Index::open(&ctx.data_dir("search").await?).await?,
                Some(url) => match shared_index(url, &ctx).await {
                    Some(index) => index,
                    // Stopped before the database could be reached.
                    None => return Ok(()),
                },
            };
            let sources = crawl::Sources {
                storage: ctx.channel("storage-users"),
                providers: ctx.providers(),
                signer: ctx.signer().clone(),
                hints: ctx.bus().hints(arca_proto::HINT_SPACE_CHANGED),
                stop: ctx.shutdown(),
            };
            ctx.spawn_worker(crawl::Crawler::new(index.clone(), sources, &config));
            let api = SearchApi {
                index,
                storage: ctx.channel("storage-users"),
                sharing: ctx.channel("sharing"),
            };
            let router = tonic::service::Routes::new(SearchServer::new(api)).into_axum_router();
            // Ready once the index is open: queries answer from what it holds while the
            // crawler catches up.
            ctx.set_ready();
            ctx.serve(router).await
        })
    }
}

/// How often a search instance tries again to reach the database of a shared index.
const CONNECT_RETRY: Duration = Duration::from_secs(1);

/// The index shared in PostgreSQL at `url`, tried until reached (the service is not ready
/// meanwhile) or until the service stops (`None`).
async fn shared_index(url: &str, ctx: &Context) -> Option<Index> {
    let stop = ctx.shutdown();
    loop {
        match Index::connect(url).await {
            Ok(index) => return Some(index),
            Err(e) => {
                tracing::warn!(error = %e, "search: the index's database is out of reach; trying again");
            }
        }
        tokio::select! {
            () = stop.cancelled() => return None,
            () = tokio::time::sleep(CONNECT_RETRY) => {}
        }
    }
}

struct SearchApi {
    index: Index,
    storage: Channel,
    sharing: Channel,
}

/// A place the caller may read, and the permission bits it gives there (0: everything, as a
/// space's owner; `Node::shared_permissions`' convention).
struct Place {
    reach: Reach,
    permissions: u32,
}

#[tonic::async_trait]
impl arca_proto::v1::search_server::Search for SearchApi {
    async fn search(
        &self,
        req: Request<SearchRequest>,
    ) -> Result<Response<SearchResponse>, Status> {
        let who = caller(&req)?.id.clone();
        let r = req.into_inner();
        let expr =
            kql::parse(&r.query).map_err(|e| ErrorKind::InvalidArgument.status(e.to_string()))?;
        let limit = match r.limit {
            0 => DEFAULT_LIMIT,
            n => n.min(MAX_LIMIT),
        };
        let places = self.places(&who).await?;
        let reach: Vec<Reach> = places.iter().map(|p| p.reach.clone()).collect();
        let descending = r.descending;
        let order = match SearchOrder::try_from(r.order).unwrap_or_default() {
            SearchOrder::Relevance => Order::Relevance,
            SearchOrder::Name => Order::Name { descending },
            SearchOrder::Mtime => Order::Mtime { descending },
            SearchOrder::Size => Order::Size { descending },
        };
        let (hits, total) = self
            .index
            .search(&expr, &reach, order, limit)
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "search failed");
                ErrorKind::Internal.status("the search index failed")
            })?;
        let hits = hits
            .into_iter()
            .map(|h| {
                let permissions = permissions_at(&places, &h.doc.space_id, &h.doc.path);
                #[allow(clippy::cast_possible_truncation)]
                let score = h.score as f32;
                SearchHit {
                    media_type: h.doc.mime.clone(),
                    score,
                    node: Some(Node {
                        id: h.doc.id,
                        space_id: h.doc.space_id,
                        parent_id: h.doc.parent_id,
                        name: h.doc.name,
                        is_dir: h.doc.is_dir,
                        size: h.doc.size,
                        mtime_ns: h.doc.mtime_ns,
                        etag: h.doc.etag,
                        path: h.doc.path,
                        owner_id: h.doc.owner_id,
                        shared_permissions: permissions,
                        ..Default::default()
                    }),
                }
            })
            .collect();
        Ok(Response::new(SearchResponse { hits, total }))
    }
}

impl SearchApi {
    /// Where the caller may read now, asked as the caller (its identity travels with the
    /// calls): its spaces and the shares it accepted.
    async fn places(&self, who: &str) -> Result<Vec<Place>, Status> {
        let spaces = arca_proto::storage_client(self.storage.clone())
            .list_spaces(ListSpacesRequest {
                all: false,
                with_usage: false,
            })
            .await?
            .into_inner()
            .spaces;
        let mut places = Vec::new();
        for s in spaces {
            // A disabled space is its managers' to see, nobody's to read.
            if s.disabled {
                continue;
            }
            let permissions = if s.kind == "personal" {
                if s.owner_id != who {
                    continue;
                }
                0
            } else {
                match sharing::Role::for_space(&s.role) {
                    Some(role) if role == sharing::MANAGER => 0,
                    Some(role) => role.permissions,
                    // Listed without a role (an admin's view): not theirs to read.
                    None => continue,
                }
            };
            places.push(Place {
                reach: Reach {
                    space_id: s.id,
                    below: None,
                },
                permissions,
            });
        }
        let shares = SharingClient::new(self.sharing.clone())
            .list_shares(ListSharesRequest {
                shared_with_me: true,
                node_id: String::new(),
                reshares: false,
                state: sharing::share_state::ACCEPTED,
                skip_names: true,
            })
            .await?
            .into_inner()
            .shares;
        for share in shares {
            if !matches!(share.share_type, share_type::USER | share_type::GROUP)
                || share.permissions & perm::READ == 0
            {
                continue;
            }
            let located = self.index.locate(&share.node_id).await.map_err(|e| {
                tracing::warn!(error = %e, "search index failed");
                ErrorKind::Internal.status("the search index failed")
            })?;
            // Not indexed yet: nothing of it to find until the crawler gets there.
            let Some((space_id, path)) = located else {
                continue;
            };
            let disabled = self.index.is_disabled(&space_id).await.map_err(|e| {
                tracing::warn!(error = %e, "search index failed");
                ErrorKind::Internal.status("the search index failed")
            })?;
            if disabled {
                continue;
            }
            places.push(Place {
                reach: Reach {
                    space_id,
                    below: Some(path),
                },
                permissions: share.permissions,
            });
        }
        Ok(places)
    }
}

/// The caller's permission bits at a hit: everything (0) where a place gives everything,
/// else what every place covering it gives together.
fn permissions_at(places: &[Place], space_id: &str, path: &str) -> u32 {
    let mut bits = 0;
    for p in places.iter().filter(|p| p.reach.space_id == space_id) {
        let covers = match &p.reach.below {
            None => true,
            Some(below) => {
                path == below
                    || path
                        .strip_prefix(below.trim_end_matches('/'))
                        .is_some_and(|rest| rest.starts_with('/'))
            }
        };
        if covers {
            if p.permissions == 0 {
                return 0;
            }
            bits |= p.permissions;
        }
    }
    bits
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(space: &str, below: Option<&str>, permissions: u32) -> Place {
        Place {
            reach: Reach {
                space_id: space.into(),
                below: below.map(str::to_owned),
            },
            permissions,
        }
    }

    #[test]
    fn permissions_come_from_the_places_covering_a_hit() {
        let places = [
            place("p$a", None, 0),
            place("p$b", Some("/Docs"), perm::READ),
            place("p$b", Some("/Docs/sub"), perm::READ | perm::UPDATE),
        ];
        assert_eq!(permissions_at(&places, "p$a", "/x"), 0);
        assert_eq!(permissions_at(&places, "p$b", "/Docs/x"), perm::READ);
        assert_eq!(
            permissions_at(&places, "p$b", "/Docs/sub/y"),
            perm::READ | perm::UPDATE
        );
        // A sibling whose name starts the same is not below the share.
        assert_eq!(permissions_at(&places, "p$b", "/Docs2/x"), 0);
    }
}
