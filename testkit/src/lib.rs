//! Test support for rankwise (not published): [`synth`] writes multi-rank
//! NCCL logs with one injected fault, for the integration tests, the
//! examples and the speed measurement of `rankwise logs`.

pub mod synth;
