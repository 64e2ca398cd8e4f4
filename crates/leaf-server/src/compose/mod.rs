//! The composition: the configuration (`config`), the table of backends the server may compose
//! (`backends`, one line each) and the opening of the ones the configuration chooses (`open`).

pub(crate) mod backends;
pub mod config;
pub(crate) mod open;
