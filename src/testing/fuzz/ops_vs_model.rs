//! Target `ops_vs_model`: the embedded backend against the model, op by op.

// A broken contract panics: that panic is what the fuzzer reports.
#![allow(clippy::panic)]

use arbitrary::{Arbitrary, Unstructured};

use super::{MAX_OPS, disk_name, fresh_image, runtime};
use crate::testing::faults::SimDisk;
use crate::testing::ops::{self, Op, Setup};

/// A run of ops: the limits and the sequence.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub struct OpsInput {
    /// The limits.
    pub setup: Setup,
    /// The sequence (at most [`MAX_OPS`] are run).
    pub ops: Vec<Op>,
}

/// Target `ops_vs_model`: a sequence of ops on the embedded backend (a file
/// on a [`SimDisk`], in memory, with close-and-reopen) and on the model;
/// every result, `stats()` and the file's recount must equal the model's
/// after every step. (`tests/model.rs` runs the same comparison on a real
/// file.)
///
/// # Panics
///
/// On the first difference.
pub fn ops_vs_model(data: &[u8]) {
    let Ok(input) = OpsInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let ops = &input.ops[..input.ops.len().min(MAX_OPS)];
    let disk = SimDisk::from_image(fresh_image().clone());
    if let Err(e) = runtime().block_on(ops::run_embedded_on_disk(
        disk_name(),
        disk,
        &input.setup,
        ops,
    )) {
        panic!("embedded backend differs from the model: {e}");
    }
}
