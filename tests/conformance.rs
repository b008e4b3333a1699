//! The conformance suite (src/testing/conformance.rs) against every backend:
//! one module per backend, one test per case, so a failure names both.

// The macros name their helpers by path: no `#[macro_use]` needed.

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

mod remote {
    workjournal::conformance_tests!(workjournal::testing::RemoteFactory);
}

/// The same cases on a real Redis Cluster of 3 primaries and 3 replicas:
/// each queue's namespace is one slot, so the cases spread over the
/// primaries.
#[cfg(feature = "redis")]
mod redis_cluster {
    workjournal::conformance_tests!(workjournal::testing::RedisClusterFactory);
}

/// A partitioned queue over 3 memory queues: the routing layer alone.
mod partitioned_memory {
    workjournal::partitioned_conformance_tests!(workjournal::testing::MemoryFactory, 3);
}

/// A partitioned queue over 4 namespaces of the test Redis Cluster (so
/// over its 3 primaries).
#[cfg(feature = "redis")]
mod partitioned_redis_cluster {
    workjournal::partitioned_conformance_tests!(workjournal::testing::RedisClusterFactory, 4);
}
