//! Business tags over gRPC, on a test clock.

use super::*;

/// `n` IDs of the business tag `order`, as printed.
async fn order_ids(segment: &SegmentClient<Channel>, n: u32) -> Vec<String> {
    let mut segment = segment.clone();
    let got = segment.next_segment_ids(seg("order", n)).await.unwrap();
    got.into_inner().formatted_ids
}

/// 2026-11-27 10:00 in Asia/Shanghai: the business test's day is its clock's, never the
/// machine's (issue 32: on the wall clock it failed when midnight there, 16:00 UTC, fell between
/// two of its requests).
const SHANGHAI_MORNING_MS: u64 = 1_795_744_800_000;

#[tokio::test]
async fn business_tags_are_created_listed_and_answered_as_formatted_ids() {
    let clock = ManualClock::new(SHANGHAI_MORNING_MS);
    let s = start_on(config(), Arc::new(clock.clone())).await;
    let mut admin = AdminClient::new(s.channel().await);
    let created = admin
        .create_tag(pb::CreateTagRequest {
            tag: "order".into(),
            step: Some(100),
            reset: Some("day".into()),
            time_zone: Some("Asia/Shanghai".into()),
            format: Some("ORD{date:%Y%m%d}{seq:06}".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(created.tag, "order");
    let props = created.business.expect("a business tag's properties");
    assert_eq!(props.reset.as_deref(), Some("day"));
    assert_eq!(
        (props.time_zone.as_str(), props.first),
        ("Asia/Shanghai", 1)
    );

    let mut segment = SegmentClient::new(s.channel().await);
    let got = segment
        .next_segment_ids(seg("order", 3))
        .await
        .unwrap()
        .into_inner();
    assert!(got.ids.is_empty(), "{got:?}");
    assert_eq!(
        got.formatted_ids,
        [
            "ORD20261127000001",
            "ORD20261127000002",
            "ORD20261127000003"
        ]
    );
    // Plain tags answer numbers as before, with no formatted_ids.
    let plain = segment
        .next_segment_ids(seg("t", 2))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((plain.ids.len(), plain.formatted_ids.len()), (2, 0));

    // Streams and leases carry numbers only: a business tag is refused before any ID is taken.
    let e = segment
        .stream_segment_ids(pb::StreamSegmentIdsRequest {
            tag: "order".into(),
            count: 10,
            chunk: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    let e = segment
        .allocate_segment(pb::AllocateSegmentRequest {
            tag: "order".into(),
            step: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert_eq!(order_ids(&segment, 1).await, ["ORD20261127000004"]);

    let list = admin
        .list_tags(pb::ListTagsRequest {})
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = list.tags.iter().map(|t| t.tag.as_str()).collect();
    assert!(names.iter().all(|n| !n.contains('@')), "{names:?}");
    let order = list.tags.iter().find(|t| t.tag == "order").expect("order");
    assert!(order.business.is_some());
    let periods: Vec<&str> = order.periods.iter().map(|p| p.tag.as_str()).collect();
    assert_eq!(periods, ["order@20261127"], "{order:?}");
    let row = &order.periods[0];
    assert!(row.cache.as_ref().is_some_and(|c| c.initialized), "{row:?}");
    // At midnight in Shanghai the count restarts, on this clock only.
    clock.set_ms(SHANGHAI_MORNING_MS + 14 * 3_600_000);
    assert_eq!(order_ids(&segment, 1).await, ["ORD20261128000001"]);

    // Its rows never change, refused by their names; nor does any tag take properties as its
    // description (issue 32).
    for (tag, description) in [
        (
            "order@",
            "leaf-props:v1 reset=month zone=UTC first=1 format=O{date:%Y%m}{seq}",
        ),
        ("order@20261127", "x"),
        ("order", "x"),
        ("t", "leaf-props:v1 zone=UTC first=1 format=T{seq}"),
    ] {
        let e = admin
            .update_tag(pb::UpdateTagRequest {
                tag: tag.into(),
                step: None,
                description: Some(description.into()),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{tag}: {e}");
    }

    // A bad zone is INVALID_ARGUMENT, nothing created.
    let e = admin
        .create_tag(pb::CreateTagRequest {
            tag: "bad".into(),
            reset: Some("day".into()),
            time_zone: Some("Mars/Olympus".into()),
            format: Some("B{date:%Y%m%d}{seq}".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(e.message().contains("Mars/Olympus"), "{e}");
}
