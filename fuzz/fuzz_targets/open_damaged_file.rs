#![no_main]

// Body: workjournal::testing::fuzz::open_damaged_file (replayed by tests/fuzz_regressions.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| workjournal::testing::fuzz::open_damaged_file(data));
