//! Share records on both databases: the same scenario on SQLite and on a private PostgreSQL
//! (see `arca_test_servers::Postgres`), so the 0010 migration and the dynamically built filters hold on each.

mod support;

use arca_store_records::{Records, ShareFilter, ShareRow, StoreError};
use support::Ctx;

fn row(grantee: &str, share_type: i32, created: i64) -> ShareRow {
    ShareRow {
        share_type,
        space_id: "storage-users$s".into(),
        node_id: "storage-users$s!n".into(),
        is_dir: true,
        target: "Docs".into(),
        owner_id: "alice".into(),
        creator_id: "alice".into(),
        grantee_id: grantee.into(),
        permissions: 15,
        created,
        ..Default::default()
    }
}

async fn shares_scenario(s: &Records) {
    let bob = s.create_share(&row("bob", 0, 1)).await.unwrap();
    let team = s.create_share(&row("team", 1, 2)).await.unwrap();
    let mut link = row("", 3, 3);
    link.token = Some("0123456789abcdef0123456789abcdef".into());
    link.password_hash = "$argon2id$x".into();
    link.expires = 4_000_000_000;
    let link = s.create_share(&link).await.unwrap();
    let mut dup = row("", 3, 4);
    dup.token = link.token.clone();
    assert!(matches!(
        s.create_share(&dup).await,
        Err(StoreError::AlreadyExists)
    ));

    // A recipient's grants in one space: its own id and its groups', users and groups only.
    let grants = s
        .list_shares(&ShareFilter {
            space_id: Some("storage-users$s".into()),
            grantee_ids: vec!["bob".into(), "team".into()],
            share_types: vec![0, 1],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(grants, vec![bob.clone(), team.clone()], "oldest first");
    let by_owner = s
        .list_shares(&ShareFilter {
            creator_or_owner: Some("alice".into()),
            node_id: Some("storage-users$s!n".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(by_owner.len(), 3);
    assert_eq!(
        s.share_by_token("0123456789abcdef0123456789abcdef")
            .await
            .unwrap(),
        link
    );
    assert!(matches!(s.share("nope").await, Err(StoreError::NotFound)));

    let mut narrower = team.clone();
    narrower.permissions = 1;
    narrower.expires = 5;
    assert_eq!(s.update_share(&narrower).await.unwrap(), narrower);

    s.set_share_state(&team.id, "bob", 1).await.unwrap();
    s.set_share_state(&team.id, "bob", 2).await.unwrap();
    s.set_share_state(&bob.id, "bob", 0).await.unwrap();
    let mut states = s.share_states("bob").await.unwrap();
    states.sort();
    let mut want = vec![(team.id.clone(), 2), (bob.id.clone(), 0)];
    want.sort();
    assert_eq!(states, want);
    assert!(s.delete_share(&team.id).await.unwrap());
    assert_eq!(
        s.share_states("bob").await.unwrap(),
        vec![(bob.id.clone(), 0)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    let ctx = Ctx::sqlite().await;
    shares_scenario(&ctx.store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let pg = arca_test_servers::postgres_for_tests().await;
    let url = pg.fresh_database().await.expect("fresh database");
    let ctx = Ctx::with_url(&url).await;
    shares_scenario(&ctx.store).await;
    ctx.store.close().await;
    drop(ctx);
    pg.drop_database(&url).await.expect("drop database");
}
