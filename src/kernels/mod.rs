//! Reduction kernels, shared by every engine that reduces on the host
//! (the local engine's data phase, the mpi engine's folds): loops over
//! typed slices. Inputs are folded in rank order (`x_0 ⊕ x_1 ⊕ …`), each
//! intermediate rounded to the element type, so a result is a function of
//! the inputs alone and identical on every rank that receives it.
//!
//! Float Avg and PreMulSum follow NCCL 2.28's lowering (measured on an H200):
//! `acc = rnd(x_0·s)`, then for each next
//! input `acc = rnd(acc + x·s)`. For half, float, double and bfloat16 that
//! step is fused, one rounding of the exact `acc + x·s` (NCCL's kernels
//! compile the multiply and the add into an FMA); for fp8 it is not (`x·s`
//! rounded to the type, then the sum rounded).
//!
//! One file per job: `arith` the element operations, `fused` the fused step
//! rounded once, `fold` the loops over N inputs, `isa` the instruction
//! sets they are compiled for and the choice between them.

mod arith;
#[cfg(test)]
mod exact;
mod fold;
mod fused;
mod isa;

pub use arith::Arith;
pub use fold::{reduce_blocks, reduce_blocks_on, reduce_into, reduce_into_on};
pub use isa::Isa;

/// Runs `$body` with `$T` bound to the Rust type of `$dt`.
#[macro_export]
#[doc(hidden)]
macro_rules! with_element_type {
    ($dt:expr, $T:ident => $body:expr) => {{
        use $crate::core::DataType as __D;
        match $dt {
            __D::Int8 => {
                type $T = i8;
                $body
            }
            __D::Uint8 => {
                type $T = u8;
                $body
            }
            __D::Int32 => {
                type $T = i32;
                $body
            }
            __D::Uint32 => {
                type $T = u32;
                $body
            }
            __D::Int64 => {
                type $T = i64;
                $body
            }
            __D::Uint64 => {
                type $T = u64;
                $body
            }
            __D::Float16 => {
                type $T = half::f16;
                $body
            }
            __D::Float32 => {
                type $T = f32;
                $body
            }
            __D::Float64 => {
                type $T = f64;
                $body
            }
            __D::Bfloat16 => {
                type $T = half::bf16;
                $body
            }
            __D::Float8e4m3 => {
                type $T = $crate::core::F8E4M3;
                $body
            }
            __D::Float8e5m2 => {
                type $T = $crate::core::F8E5M2;
                $body
            }
        }
    }};
}

#[cfg(test)]
mod tests;
