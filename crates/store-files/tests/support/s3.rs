//! The store's view of a private S3 server ([`arca_test_servers::Moto`]): buckets of their own
//! with the options the store opens them with and a client for the test to look inside, and
//! the multipart uploads left open in one.
//!
//! [`s3_for_tests`] is what tests call; it fails the test, saying how to fix it, when moto is
//! not installed (a skipped suite would count as passed).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arca_store_files::S3Options;
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};

/// Any credentials do for moto; they are still sent, signed, as to a real server.
const KEY_ID: &str = "arca-test";
const SECRET: &str = "arca-test-secret";

/// The S3 server to test against.
pub async fn s3_for_tests() -> Moto {
    Moto {
        server: arca_test_servers::moto_for_tests().await,
    }
}

pub struct Moto {
    server: arca_test_servers::Moto,
}

impl Moto {
    /// Creates a new bucket with a name of its own and returns it.
    pub async fn bucket(&self) -> Bucket {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("arca-test-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        self.server
            .create_bucket(&name)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        Bucket::new(self.options(&name))
    }

    /// Options for `bucket` on this server, whether or not it exists.
    pub fn options(&self, bucket: &str) -> S3Options {
        S3Options {
            endpoint: Some(self.server.endpoint().to_owned()),
            access_key_id: Some(KEY_ID.to_owned()),
            secret_access_key: Some(SECRET.to_owned()),
            ..S3Options::new(bucket, "us-east-1")
        }
    }

    /// Multipart uploads started and neither completed nor aborted in `bucket`.
    pub async fn open_multipart_uploads(&self, bucket: &str) -> usize {
        let (status, body) = self
            .server
            .request("GET", &format!("/{bucket}?uploads"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(status, 200, "GET /{bucket}?uploads: {body}");
        body.matches("<Upload>").count()
    }
}

/// A bucket and a client of its own for the test to look inside.
#[derive(Clone)]
pub struct Bucket {
    pub options: S3Options,
    client: Arc<dyn ObjectStore>,
}

impl Bucket {
    fn new(options: S3Options) -> Bucket {
        let client = AmazonS3Builder::new()
            .with_endpoint(options.endpoint.clone().unwrap_or_default())
            .with_allow_http(true)
            .with_bucket_name(&options.bucket)
            .with_region(&options.region)
            .with_access_key_id(KEY_ID)
            .with_secret_access_key(SECRET)
            .build()
            .expect("S3 client for the test");
        Bucket {
            options,
            client: Arc::new(client),
        }
    }

    /// Every object key in the bucket.
    pub async fn keys(&self) -> Vec<String> {
        self.client
            .list(None)
            .map_ok(|meta| meta.location.to_string())
            .try_collect()
            .await
            .expect("list bucket")
    }

    /// Bytes of every object in the bucket.
    pub async fn bytes(&self) -> u64 {
        self.client
            .list(None)
            .map_ok(|meta| meta.size)
            .try_fold(0u64, |sum, size| async move { Ok(sum + size) })
            .await
            .expect("list bucket")
    }

    pub async fn head(&self, key: &str) -> ObjectMeta {
        self.client
            .head(&Path::from(key))
            .await
            .unwrap_or_else(|e| panic!("HEAD {key}: {e}"))
    }
}
