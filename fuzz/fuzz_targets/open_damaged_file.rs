#![no_main]

// Body: workjournal::testing::fuzz::open_damaged_file (replayed by
// tests/fuzz_regressions.rs). Panics inside redb on a damaged file are
// caught by the backend and become Error::Corrupt, so they must not abort.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    workjournal::testing::fuzz::let_redb_panics_be_caught();
    workjournal::testing::fuzz::open_damaged_file(data)
});
