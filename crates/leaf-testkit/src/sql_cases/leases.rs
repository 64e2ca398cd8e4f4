//! The monotonic leader's leased pool on a SQL server (`leaf_sql::SqlLeases`, what
//! `fence_on_disconnect` opens as the leader's claim), beyond the recycling conformance cases:
//! the lease it grants is the configured one, and claims that race for a pool of one give it
//! to exactly one of them.

use std::time::Duration;

use leaf_core::Error;

use super::request;
use crate::RegistryFixture;
use crate::sql::{LEASE_TTL_MS, SqlBackend, SqlFix};

/// The lease granted, renewed and stored is `lease_ttl_ms`, not a default.
pub async fn the_leased_pool_grants_its_lease_ttl<B: SqlBackend>() {
    let fix = SqlFix::<B>::leased().await;
    let node = fix.node().await;
    let lease = node.acquire(&request(fix.identity(1), 0)).await.unwrap();
    let ttl = Duration::from_millis(LEASE_TTL_MS);
    assert_eq!(lease.ttl, Some(ttl));
    let renewed = node.renew(&lease, super::now_ms() + 3000).await.unwrap();
    assert_eq!(renewed, leaf_core::Renewal::Ok { ttl: Some(ttl) });
    let stored = fix
        .db
        .scalar("SELECT ttl_ms FROM leaf_workerid_lease WHERE id = 0")
        .await;
    assert_eq!(stored, Some(LEASE_TTL_MS as i64));
}

/// Eight nodes claim a pool of one at once, some finding no row yet (their inserts race) and,
/// in a second round after the first holder released, the freed row (their takes race):
/// each round exactly one claim wins, the others are refused as "in use".
pub async fn racing_claims_of_a_pool_of_one_give_it_to_one<B: SqlBackend>() {
    let fix = SqlFix::<B>::leased().await;
    let mut nodes = Vec::new();
    for _ in 0..8 {
        nodes.push(fix.node().await);
    }
    for round in 0..2 {
        let tasks: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let (n, me) = (n.clone(), fix.identity(i as u16 + 1));
                tokio::spawn(async move { n.acquire(&request(me, 0)).await })
            })
            .collect();
        let (mut won, mut refused) = (Vec::new(), 0);
        for (i, t) in tasks.into_iter().enumerate() {
            match t.await.unwrap() {
                Ok(lease) => won.push((i, lease)),
                Err(Error::Unavailable(m)) if m.contains("in use") => refused += 1,
                Err(e) => panic!("round {round}: a racer failed otherwise: {e}"),
            }
        }
        assert_eq!((won.len(), refused), (1, 7), "round {round}: won {won:?}");
        let (i, lease) = won.pop().unwrap();
        nodes[i].release(&lease, super::now_ms()).await.unwrap();
    }
}
