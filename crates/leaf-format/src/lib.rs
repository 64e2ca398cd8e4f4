#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod period;
mod radix;
mod snowflake;
mod template;

pub use period::{Period, Reset, Zone};
pub use radix::Radix;
pub use snowflake::{SnowflakeForm, friendly, parse_friendly};
pub use template::{MAX_WIDTH, Renderer, Template, overflow};
