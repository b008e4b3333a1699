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

mod remote {
    workjournal::conformance_tests!(workjournal::testing::RemoteFactory);
}
