//! How a process is asked to stop. The binary owns the signals and turns them into calls here;
//! the supervisor only ever sees a [`Shutdown`], so a test can stop an in-process deployment
//! exactly the way SIGTERM stops the real one.

use tokio_util::sync::CancellationToken;

/// A stop request in two steps: [`request`](Self::request) starts the orderly shutdown (drain,
/// then stop services in reverse order); [`force`](Self::force) skips to the end. Cheap to
/// clone; every clone is the same request.
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    requested: CancellationToken,
    forced: CancellationToken,
}

impl Shutdown {
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks for an orderly stop; a second call forces it, as a second signal does.
    pub fn request(&self) {
        if self.requested.is_cancelled() {
            self.force();
        } else {
            self.requested.cancel();
        }
    }

    /// Asks for an immediate stop: whatever still runs is abandoned.
    pub fn force(&self) {
        self.requested.cancel();
        self.forced.cancel();
    }

    pub fn is_requested(&self) -> bool {
        self.requested.is_cancelled()
    }

    /// Resolves once a stop was asked for.
    pub async fn requested(&self) {
        self.requested.cancelled().await;
    }

    /// Resolves once an immediate stop was asked for.
    pub async fn forced(&self) {
        self.forced.cancelled().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_request_forces() {
        let s = Shutdown::new();
        assert!(!s.is_requested());
        s.request();
        assert!(s.is_requested() && !s.forced.is_cancelled());
        s.clone().request();
        assert!(s.forced.is_cancelled());
    }
}
