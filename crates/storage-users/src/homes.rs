//! Personal spaces made at first use, without letting a burst of first logins stampede the
//! database: the space is looked for first (one read, the path every later request takes);
//! only when it is missing does the request join the one creation running for that user
//! ([`SingleFlight`]: 50 concurrent first requests of one user create one space, not 50
//! racing write transactions of which 49 roll back), and creations run within
//! `storage-users.provisioning` ([`Limiter`]: so many at once, so many per second).

use std::sync::Arc;

use arca_runtime::limit::count_provisioning;
use arca_runtime::{Flight, Limiter, Limits, SingleFlight};
use arca_store_files::{Node, Space, Store};
use tonic::Status;

/// A personal space as [`Homes::create`] found or made it: the space, its root, and whether
/// this creation made it (a root made just now has no properties yet).
pub(crate) type Created = (Space, Node, bool);

#[derive(Clone)]
pub(crate) struct Homes {
    store: Store,
    limiter: Limiter,
    flights: Arc<SingleFlight<String, Result<Created, Status>>>,
}

impl Homes {
    pub(crate) fn new(store: Store, limits: Limits) -> Self {
        Self {
            store,
            limiter: Limiter::new("storage-users/personal-space", limits),
            flights: Arc::default(),
        }
    }

    /// The personal space of `owner`, created if it does not exist yet.
    pub(crate) async fn get(&self, owner: &str) -> Result<Space, Status> {
        if let Some(space) = self
            .store
            .find_personal_space(owner)
            .await
            .map_err(|e| e.status())?
        {
            return Ok(space);
        }
        Ok(self.create(owner).await?.0)
    }

    /// Creates the personal space of `owner`, for a caller that just looked for it and found
    /// none (looking again would be one more read per first login).
    pub(crate) async fn create(&self, owner: &str) -> Result<Created, Status> {
        let started = std::time::SystemTime::now();
        let (result, flight) = self
            .flights
            .run(owner.to_owned(), || {
                // A run that ended just before this one began has made it: the create then
                // meets the unique owner index and returns that space.
                self.limiter.run(async {
                    self.store
                        .create_personal_space(owner)
                        .await
                        .map_err(|e| e.status())
                })
            })
            .await;
        count_provisioning(
            "space",
            match (&result, flight) {
                (Err(_), _) => "failed",
                // A run that began after another ended finds the space that one made.
                (Ok((space, ..)), Flight::Led) if space.created < started => "found",
                (Ok(_), Flight::Led) => "provisioned",
                (Ok(_), Flight::Joined) => "joined",
            },
        );
        result
    }
}
