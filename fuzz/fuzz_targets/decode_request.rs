#![no_main]

// Body: workjournal::testing::fuzz::decode_request (replayed by tests/fuzz_regressions.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| workjournal::testing::fuzz::decode_request(data));
