//! The identity tables (groups, app tokens, the credential change feed) on both databases: the
//! same scenario on SQLite and on a private PostgreSQL (see `arca_test_servers::Postgres`), including the
//! property storage-system relies on: concurrent credential changes get gapless generations
//! whose events are all readable once the counter shows them.

mod support;

use std::time::{Duration, SystemTime};

use arca_store_records::{Records, StoreError};
use support::Ctx;

async fn identity_scenario(s: &Records) {
    let alice = s.create_user("alice", "A", "", "h1", false).await.unwrap();
    let bob = s.create_user("bob", "B", "", "h2", false).await.unwrap();
    let start = s.credentials_generation().await.unwrap();

    // Groups: unique names (on create and rename), members both ways.
    let team = s.create_group("team", "t").await.unwrap();
    let crew = s.create_group("crew", "").await.unwrap();
    assert!(matches!(
        s.update_group(&crew.id, Some("team"), None).await,
        Err(StoreError::AlreadyExists)
    ));
    assert!(s.add_group_member(&team.id, &alice.id).await.unwrap());
    assert!(s.add_group_member(&crew.id, &alice.id).await.unwrap());
    assert!(s.add_group_member(&team.id, &bob.id).await.unwrap());
    let names: Vec<String> = s
        .user_groups(&alice.id)
        .await
        .unwrap()
        .into_iter()
        .map(|g| g.display_name)
        .collect();
    assert_eq!(names, ["crew", "team"]);
    let members: Vec<String> = s
        .group_members(&team.id)
        .await
        .unwrap()
        .into_iter()
        .map(|u| u.username)
        .collect();
    assert_eq!(members, ["alice", "bob"]);

    // App tokens: expiry, revocation by id or hash.
    let hour = Duration::from_secs(3600);
    let t1 = s
        .create_app_token(&alice.id, "hash1", "phone", Some(SystemTime::now() + hour))
        .await
        .unwrap();
    s.create_app_token(&alice.id, "hash2", "", Some(SystemTime::now() - hour))
        .await
        .unwrap();
    s.create_app_token(&alice.id, "hash3", "laptop", None)
        .await
        .unwrap();
    let listed: Vec<String> = s
        .app_tokens(&alice.id)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.label)
        .collect();
    assert_eq!(listed.len(), 2, "{listed:?}");
    s.delete_app_token(&alice.id, &t1.id).await.unwrap();
    s.delete_app_token(&alice.id, "hash3").await.unwrap();
    assert!(s.app_tokens(&alice.id).await.unwrap().is_empty());
    assert_eq!(s.prune_expired_app_tokens().await.unwrap(), 1);

    // Deleting a user ends their memberships; deleting a group is an event per member.
    s.delete_user(&bob.id).await.unwrap();
    let members = s.group_members(&team.id).await.unwrap();
    assert_eq!(members.len(), 1);
    s.delete_group(&crew.id).await.unwrap();

    let events: Vec<(u64, String)> = s
        .credential_events_after(start, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.generation, e.user_id))
        .collect();
    let expected_users = [
        &alice.id, &alice.id, &bob.id, // three memberships
        &alice.id, &alice.id, // two revocations
        &bob.id,   // deletion
        &alice.id, // the crew she was in is gone
    ];
    assert_eq!(events.len(), expected_users.len(), "{events:?}");
    for (i, ((generation, user), want)) in events.iter().zip(expected_users).enumerate() {
        assert_eq!(*generation, start + 1 + i as u64);
        assert_eq!(user, want);
    }

    // Concurrent changes: every generation up to the counter is there, each once.
    let before = s.credentials_generation().await.unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let s = s.clone();
            let id = alice.id.clone();
            tokio::spawn(async move {
                let name = format!("A{i}");
                s.update_user(&id, Some(&name), None, None).await.unwrap();
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let after = s.credentials_generation().await.unwrap();
    assert_eq!(after, before + 16);
    let generations: Vec<u64> = s
        .credential_events_after(before, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.generation)
        .collect();
    assert_eq!(generations, (before + 1..=after).collect::<Vec<_>>());

    assert!(s.prune_credential_events(Duration::ZERO).await.unwrap() > 0);
    assert!(s.credential_events_after(0, 100).await.unwrap().is_empty());
    assert_eq!(s.credentials_generation().await.unwrap(), after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    let ctx = Ctx::sqlite().await;
    identity_scenario(&ctx.store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let pg = arca_test_servers::postgres_for_tests().await;
    let url = pg.fresh_database().await.expect("fresh database");
    let ctx = Ctx::with_url(&url).await;
    identity_scenario(&ctx.store).await;
    ctx.store.close().await;
    drop(ctx);
    pg.drop_database(&url).await.expect("drop database");
}
