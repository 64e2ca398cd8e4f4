//! The composition: the configuration (`config`), and the table of backends the server may
//! compose (`backends`, one line each), which also opens the ones the configuration chooses.

pub(crate) mod backends;
pub mod config;
