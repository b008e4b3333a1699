//! The backends, one module each, each behind its cargo feature.

pub(crate) mod memory;
pub(crate) mod partitioned;

#[cfg(feature = "embedded")]
pub(crate) mod embedded;

#[cfg(feature = "redis")]
pub(crate) mod redis;

#[cfg(feature = "remote")]
pub(crate) mod remote;
