#![no_main]

// Body: workjournal::testing::fuzz::ops_vs_model (replayed by tests/fuzz_regressions.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| workjournal::testing::fuzz::ops_vs_model(data));
