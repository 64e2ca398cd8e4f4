#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod business;
mod period;
mod radix;
mod snowflake;
mod template;

pub use business::{
    ALL_PERIODS, BusinessTags, CLAIM_PREFIX, DRAFT_PREFIX, Definition, FIRST_SHARE, Grouped,
    Issued, Joined, MAX_BASE_CHARS, PRELOAD_AHEAD, PROPS_PREFIX, Properties, STEP_SHARE, Taken,
    check_description, check_new_plain, check_plain, check_unclaimed, check_update, definition_tag,
    group_rows, is_claim, reserved,
};
pub use period::{Period, Reset, Zone};
pub use radix::Radix;
pub use snowflake::{SnowflakeForm, friendly, parse_friendly};
pub use template::{MAX_WIDTH, Renderer, Template, overflow};
