//! Empty: the peers project holds benches only.
