//! Target `ops_vs_model`: the embedded backend against the model, op by op.

// A broken contract panics: that panic is what the fuzzer reports.
#![allow(clippy::panic)]

use arbitrary::{Arbitrary, Unstructured};

use super::{MAX_OPS, disk_name, fresh_image, runtime};
use crate::testing::faults::SimDisk;
use crate::testing::ops::{self, ControlsOp, LegacyOp, Op, Setup};

/// A run of ops: the limits and the sequence.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub struct OpsInput {
    /// The limits.
    pub setup: Setup,
    /// The sequence (at most [`MAX_OPS`] are run).
    pub ops: Vec<Op>,
}

/// [`OpsInput`] with its ops decoded by an earlier draw, as inputs
/// committed then were made: `T` is [`LegacyOp`] or [`ControlsOp`]. Same
/// fields, same order.
#[derive(Arbitrary)]
struct OpsInputAs<T> {
    setup: Setup,
    ops: Vec<T>,
}

/// Target `ops_vs_model`: a sequence of ops on the embedded backend (a file
/// on a [`SimDisk`], in memory, with close-and-reopen) and on the model;
/// every reply must equal the model's at every step, and the whole state
/// (stats, the file's recount, every listing) every 16 steps and after the
/// last. (`tests/model.rs` runs the same comparison on a real file.)
///
/// # Panics
///
/// On the first difference.
pub fn ops_vs_model(data: &[u8]) {
    let Ok(input) = OpsInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    run(&input);
}

/// [`ops_vs_model`] with `data` decoded as before the item and flow
/// controls were drawn ([`LegacyOp`]), so that an input committed then
/// replays as the sequence it was found with.
///
/// # Panics
///
/// As [`ops_vs_model`].
pub fn ops_vs_model_legacy(data: &[u8]) {
    run_as(data, |op: LegacyOp| op.0);
}

/// [`ops_vs_model`] with `data` decoded as before cancelling, updating and
/// the schedules were drawn ([`ControlsOp`]), so that an input committed
/// then replays as the sequence it was found with.
///
/// # Panics
///
/// As [`ops_vs_model`].
pub fn ops_vs_model_controls(data: &[u8]) {
    run_as(data, |op: ControlsOp| op.0);
}

/// `data` decoded as an [`OpsInputAs`], its ops mapped to [`Op`], run.
fn run_as<T: for<'a> Arbitrary<'a>>(data: &[u8], op: fn(T) -> Op) {
    let Ok(input) = OpsInputAs::<T>::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    run(&OpsInput {
        setup: input.setup,
        ops: input.ops.into_iter().map(op).collect(),
    });
}

fn run(input: &OpsInput) {
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
