#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod checks;
mod classify;
mod create;
mod definition;
mod issue;
mod listing;
mod periods;
pub mod raise;
mod requests;
mod tags;

pub use checks::{check_description, check_new_plain, check_plain, check_unclaimed, check_update};
pub use classify::{Kind, Shape, shape};
pub use definition::{
    ALL_PERIODS, CLAIM_PREFIX, DRAFT_PREFIX, Definition, FIRST_SHARE, MAX_BASE_CHARS, PROPS_PREFIX,
    Properties, STEP_SHARE, definition_tag, is_claim,
};
pub use issue::{Issued, Joined, PRELOAD_AHEAD, Taken};
pub use listing::{Grouped, Listed, group_rows};
pub use requests::{CreateTag, Created, Lease};
pub use tags::BusinessTags;
