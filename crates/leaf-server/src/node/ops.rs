//! What the HTTP routes and the gRPC RPCs do, written once: each operation checks its input
//! by the server's rules, does the work, counts what it issued and maps errors to
//! [`ApiError`]. The HTTP handlers (`crate::http`) and the gRPC services (`crate::grpc`) only
//! read their requests and write their answers around these calls, so the two APIs cannot
//! drift apart in what they allow, issue or refuse.

use leaf_core::{Allocation, DecodedId, Tag, TagRecord, TagUpdate};
use std::sync::Arc;

use leaf_business::{CreateTag, Created, Definition, Joined, Listed};
use leaf_format::SnowflakeForm;
use leaf_segment::SegmentAllocator;

use crate::node::error::{ApiError, Origin};
use crate::node::metrics::Family;
use crate::node::state::AppState;

/// `count` within `1..=max`, else the 400 (`INVALID_ARGUMENT`) naming the bounds.
pub(crate) fn check_count(count: u64, max: usize) -> Result<usize, ApiError> {
    match usize::try_from(count) {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(count_error(max, &count.to_string())),
    }
}

/// The error of a count outside `1..=max` (or not a number), showing what was sent.
pub(crate) fn count_error(max: usize, shown: &str) -> ApiError {
    ApiError::bad_request(format!(
        "count must be a whole number from 1 to {max}, got {shown}"
    ))
}

/// A tag as a client sent it: checked by [`Tag::new`]'s rules.
pub(crate) fn parse_tag(raw: &str) -> Result<Tag, ApiError> {
    Tag::new(raw).map_err(|e| ApiError::from_core(Origin::Segment, e))
}

/// A segment tag's IDs: numbers, or the text a business tag's format prints.
pub(crate) enum SegmentIds {
    /// A plain tag's.
    Numbers(Vec<i64>),
    /// A business tag's (issue 27), printed into one buffer.
    Text(Joined),
}

fn text_only(tag: &Tag) -> ApiError {
    ApiError::bad_request(format!(
        "tag {tag} is a business tag whose IDs are text: they cannot be numbers (as=number, \
         gRPC's ids)"
    ))
}

/// `count` IDs of `raw_tag`, numbers or (`text_ok`) a business tag's text.
pub(crate) async fn segment_batch(
    state: &AppState,
    raw_tag: &str,
    count: u64,
    text_ok: bool,
) -> Result<(Tag, SegmentIds), ApiError> {
    let allocator = state.segment()?;
    let tag = parse_tag(raw_tag)?;
    let business = state.business()?;
    let seg = |e| ApiError::from_core(Origin::Segment, e);
    business.refuse_row(&tag).await.map_err(seg)?;
    let count = check_count(count, state.max_batch())?;
    let def = match business.known(tag.as_str()) {
        Some(def) => def,
        None => match take_plain(state, allocator, &tag, count).await {
            Ok(ids) => return Ok((tag, SegmentIds::Numbers(ids))),
            Err(e) => business.after_plain(&tag, e).await.map_err(seg)?,
        },
    };
    if !text_ok {
        return Err(text_only(&tag));
    }
    let taken = business.take(&def, count).await.map_err(seg)?;
    let ids = taken.render_joined().map_err(|e| {
        state.metrics().format_overflow(&tag);
        let mut answer = ApiError::from_core(Origin::Segment, e);
        answer.code = crate::node::error::CODE_FORMAT_OVERFLOW;
        answer
    })?;
    state.metrics().segment_issued(&tag, ids.len() as u64);
    Ok((tag, SegmentIds::Text(ids)))
}

/// `raw_tag` checked as a plain tag's name: valid, and neither a business tag's row nor its base
/// (`refused` says why that one is refused).
pub(crate) async fn plain_tag(
    state: &AppState,
    raw_tag: &str,
    refused: &str,
) -> Result<Tag, ApiError> {
    let tag = parse_tag(raw_tag)?;
    state
        .business()?
        .require_plain(&tag, refused)
        .await
        .map_err(|e| ApiError::from_core(Origin::Segment, e))?;
    Ok(tag)
}

/// The definition of the business tag `raw_tag`; 404 (Leaf's -2) when it is not one.
pub(crate) async fn business_definition(
    state: &AppState,
    raw_tag: &str,
) -> Result<Arc<Definition>, ApiError> {
    state.segment()?;
    let tag = parse_tag(raw_tag)?;
    state
        .business()?
        .business_tag(&tag)
        .await
        .map_err(|e| ApiError::from_core(Origin::Segment, e))
}

/// One segment ID of `raw_tag` as Leaf's route prints it: the number, or a business tag's text.
pub(crate) async fn segment_id_text(state: &AppState, raw_tag: &str) -> Result<String, ApiError> {
    match segment_batch(state, raw_tag, 1, true).await? {
        (_, SegmentIds::Numbers(ids)) => one(ids).map(|id| id.to_string()),
        (_, SegmentIds::Text(ids)) => ids.iter().next().map(str::to_owned).ok_or_else(|| {
            ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "internal error: a batch of one held no ID",
            )
        }),
    }
}

/// One snowflake ID.
pub(crate) async fn snowflake_id(state: &AppState) -> Result<i64, ApiError> {
    one(snowflake_ids(state, 1).await?)
}

/// The one ID of a batch of one.
fn one(ids: Vec<i64>) -> Result<i64, ApiError> {
    ids.first().copied().ok_or_else(|| {
        ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "internal error: a batch of one held no ID",
        )
    })
}

/// `count` IDs of a checked `tag` (one with `next_id`, more with `next_ids`), counted in the
/// metrics; for a stream's chunks, whose request was checked once.
pub(crate) async fn take_segment_ids(
    state: &AppState,
    tag: &Tag,
    count: usize,
) -> Result<Vec<i64>, ApiError> {
    let allocator = state.segment()?;
    take_plain(state, allocator, tag, count)
        .await
        .map_err(|e| ApiError::from_core(Origin::Segment, e))
}

/// [`take_segment_ids`] with the store's error as it is.
async fn take_plain(
    state: &AppState,
    allocator: &SegmentAllocator,
    tag: &Tag,
    count: usize,
) -> leaf_core::Result<Vec<i64>> {
    let ids = if count == 1 {
        allocator.next_id(tag.as_str()).await.map(|id| vec![id])
    } else {
        allocator.next_ids(tag.as_str(), count).await
    }?;
    state.metrics().segment_issued(tag, ids.len() as u64);
    Ok(ids)
}

/// `count` snowflake IDs, ascending, counted in the metrics.
pub(crate) async fn snowflake_ids(state: &AppState, count: u64) -> Result<Vec<i64>, ApiError> {
    state.snowflake()?;
    let count = check_count(count, state.max_batch())?;
    take_snowflake_ids(state, count).await
}

/// `count` snowflake IDs of a checked request, counted in the metrics.
pub(crate) async fn take_snowflake_ids(
    state: &AppState,
    count: usize,
) -> Result<Vec<i64>, ApiError> {
    let generator = state.snowflake()?;
    let ids = if count == 1 {
        generator.next_id().await.map(|id| vec![id])
    } else {
        generator.next_ids(count).await
    }
    .map_err(|e| ApiError::from_core(Origin::Snowflake, e))?;
    state.metrics().snowflake_issued(ids.len() as u64);
    Ok(ids)
}

/// `count` monotonic IDs (`1..=max_batch`), ascending, each above every ID of a request that
/// completed before this one began; counted in the metrics.
pub(crate) async fn monotonic_ids(
    state: &AppState,
    count: u64,
) -> Result<std::ops::RangeInclusive<u64>, ApiError> {
    let service = state.monotonic()?;
    let count = check_count(count, state.max_batch())?;
    service.ids(count as u64).await
}

/// A range of `count` monotonic IDs issued by this node (`1..=MAX_ISSUE`): what a follower asks
/// its leader for, never forwarded.
pub(crate) async fn monotonic_range(
    state: &AppState,
    count: u64,
) -> Result<std::ops::RangeInclusive<u64>, ApiError> {
    let service = state.monotonic()?;
    let max = leaf_snowflake::monotonic::MAX_ISSUE as usize;
    let count = check_count(count, max)?;
    service.range(count as u64).await
}

/// A monotonic ID taken apart: its time part (Unix ms, the snowflake epoch added back) and its
/// counter. A negative ID is a 400.
pub(crate) fn decode_monotonic(state: &AppState, id: i64) -> Result<(u64, u64), ApiError> {
    use leaf_snowflake::monotonic::{LOGICAL_BITS, MonotonicLayout};
    let id = u64::try_from(id)
        .map_err(|_| ApiError::bad_request(format!("{id} is not a monotonic id (negative)")))?;
    let layout = MonotonicLayout {
        epoch_ms: state.layout().epoch_ms(),
    };
    Ok((layout.ms_of(id), id & ((1 << LOGICAL_BITS) - 1)))
}

/// The step rule of allocations: a whole number from 1, lowered to `max_step` when above it
/// (`None`: the stored step). Rows may hold steps up to `i32::MAX` while the servers' limit is
/// lower, and a leasing client asks at least its row's step: a refusal would end its leases, so
/// the answer's `used_step` tells it the step it got instead. `shown` is the value as sent.
pub(crate) fn check_step(
    step: Option<i64>,
    max_step: i64,
    shown: &str,
) -> Result<Option<i64>, ApiError> {
    match step {
        None => Ok(None),
        Some(n) if n >= 1 => Ok(Some(n.min(max_step))),
        Some(_) => Err(step_error(max_step, shown)),
    }
}

/// The error of a step that is not a whole number from 1, showing what was sent.
pub(crate) fn step_error(max_step: i64, shown: &str) -> ApiError {
    ApiError::bad_request(format!(
        "step must be a whole number from 1 (one above {max_step}, segment.max_step, is \
         lowered to it), got {shown}"
    ))
}

/// One allocation of `raw_tag` straight from the store (never from this server's buffers),
/// for a leasing client of address `family`; `step` as [`check_step`] reads it.
pub(crate) async fn allocate(
    state: &AppState,
    raw_tag: &str,
    step: Option<i64>,
    shown_step: &str,
    family: Family,
) -> Result<Allocation, ApiError> {
    let allocator = state.segment()?;
    let tag = parse_tag(raw_tag)?;
    let step = check_step(step, allocator.config().max_step, shown_step)?;
    let seg = |e| ApiError::from_core(Origin::Segment, e);
    // A business tag's period row: created if absent, its step capped; leases of a business
    // tag count under its base tag, not one label per period row.
    let lease = state.business()?.lease(&tag, step).await.map_err(seg)?;
    let a = allocator
        .store()
        .allocate(&tag, lease.step)
        .await
        .map_err(seg)?;
    state
        .metrics()
        .client_allocation(&lease.counted, family, a.used_step.max(0) as u64);
    Ok(a)
}

/// The stored row of `raw_tag`; unknown: 404 with Leaf's -2.
pub(crate) async fn get_tag(state: &AppState, raw_tag: &str) -> Result<TagRecord, ApiError> {
    let allocator = state.segment()?;
    let tag = parse_tag(raw_tag)?;
    // A business tag's period row within one period of this server's clock is created if
    // absent, so that a leasing client without the admin token counts in it (`leaf-client`
    // reads the row, then allocates from it); a period out of that window is a 400.
    state
        .business()?
        .ensure_period(&tag)
        .await
        .map_err(|e| ApiError::from_core(Origin::Segment, e))?;
    allocator
        .store()
        .get(&tag)
        .await
        .map_err(|e| ApiError::from_core(Origin::Segment, e))?
        .ok_or_else(|| {
            ApiError::from_core(
                Origin::Segment,
                leaf_core::Error::NotFound(format!("tag {tag}")),
            )
        })
}

/// `id` decoded with the configured layout and epoch (whether or not snowflake mode runs).
pub(crate) fn decode(state: &AppState, id: i64) -> Result<DecodedId, ApiError> {
    state
        .layout()
        .decode(id)
        .map_err(|e| ApiError::from_core(Origin::Other, e))
}

/// The form a client asked snowflake IDs in (`format`: `number`, `base36`, `base62`,
/// `friendly`; `None`, not asked: the number). A name that is none of them is the 400 listing
/// them, before any ID is taken.
pub(crate) fn snowflake_form(raw: Option<&str>) -> Result<SnowflakeForm, ApiError> {
    raw.map_or(Ok(SnowflakeForm::Number), |name| {
        name.parse()
            .map_err(|e| ApiError::from_core(Origin::Snowflake, e))
    })
}

/// `ids` of this server's layout written in `form`.
pub(crate) fn render_snowflake(
    state: &AppState,
    ids: &[i64],
    form: SnowflakeForm,
) -> Result<Vec<String>, ApiError> {
    ids.iter()
        .map(|&id| form.render(id, state.layout()))
        .collect::<leaf_core::Result<_>>()
        .map_err(|e| ApiError::from_core(Origin::Snowflake, e))
}

/// The ID that `text`, written in `form`, stands for under this server's layout; text that is
/// not an ID in that form is a 400.
pub(crate) fn parse_snowflake(
    state: &AppState,
    text: &str,
    form: SnowflakeForm,
) -> Result<i64, ApiError> {
    form.parse(text, state.layout())
        .map_err(|e| ApiError::from_core(Origin::Other, e))
}

async fn stored_rows(allocator: &SegmentAllocator) -> Result<Vec<TagRecord>, ApiError> {
    allocator
        .store()
        .list()
        .await
        .map_err(|e| ApiError::from_core(Origin::Other, e))
}

/// Every stored row, business tags' rows grouped under their base tag, with this server's
/// cache of each when it holds one.
pub(crate) async fn list_grouped(state: &AppState) -> Result<Vec<Listed>, ApiError> {
    let allocator = state.segment()?;
    let rows = stored_rows(allocator).await?;
    Ok(state.business()?.listing(rows, allocator.snapshot()))
}

/// Creates a tag ([`leaf_business::BusinessTags::create_tag`]: a plain tag or a business
/// tag, each refused the other's names); 409 (`ALREADY_EXISTS`) if it exists.
pub(crate) async fn create_tag(state: &AppState, body: CreateTag) -> Result<Created, ApiError> {
    let allocator = state.segment()?;
    let created = (state.business()?.create_tag(body).await)
        .map_err(|e| ApiError::from_core(Origin::Other, e))?;
    // The tag may have been asked for (and remembered as unknown) a moment ago.
    allocator.forget_miss(created.tag().as_str());
    Ok(created)
}

/// Changes a tag's stored step or description; an unknown tag is a 404 with Leaf's -2.
pub(crate) async fn update_tag(
    state: &AppState,
    raw_tag: &str,
    update: TagUpdate,
) -> Result<TagRecord, ApiError> {
    let allocator = state.segment()?;
    let other = |e| ApiError::from_core(Origin::Other, e);
    let tag = Tag::new(raw_tag).map_err(other)?;
    (state.business()?.check_change(&tag, &update).await).map_err(other)?;
    let record = allocator
        .store()
        .update(&tag, &update)
        .await
        .map_err(|e| match e {
            // An unknown tag answers as on every route that names one: Leaf's -2, which a
            // client tells apart from a route this server lacks.
            leaf_core::Error::NotFound(_) => ApiError::from_core(Origin::Segment, e),
            e => ApiError::from_core(Origin::Other, e),
        })?;
    // An operator who lowered `max_id` by hand touches the row to end a remembered exhaustion.
    allocator.forget_miss(tag.as_str());
    tracing::info!(tag = %tag, step = record.step, "tag updated");
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_table() {
        let check = |n: u64, ok: Option<usize>| {
            let got = check_count(n, 10);
            assert_eq!(got.as_ref().ok().copied(), ok, "{n}");
            if let Err(e) = got {
                assert_eq!(e.status.as_u16(), 400);
                assert!(e.message.contains("from 1 to 10"), "{}", e.message);
            }
        };
        check(0, None);
        check(1, Some(1));
        check(10, Some(10));
        check(11, None);
        check(u64::MAX, None);
    }
}
