//! The conformance suite (src/testing/conformance.rs) against every backend:
//! one module per backend, one test per case, so a failure names both.

#[macro_use]
extern crate workjournal;

mod memory {
    workjournal::conformance_tests!(workjournal::testing::MemoryFactory);
}

mod embedded {
    workjournal::conformance_tests!(workjournal::testing::EmbeddedFactory);
}

#[cfg(feature = "redis")]
mod redis {
    workjournal::conformance_tests!(workjournal::testing::RedisFactory);
}

/// The same cases on a real Redis Cluster of 3 primaries and 3 replicas:
/// each queue's namespace is one slot, so the cases spread over the
/// primaries.
#[cfg(feature = "redis")]
mod redis_cluster {
    workjournal::conformance_tests!(workjournal::testing::RedisClusterFactory);
}
