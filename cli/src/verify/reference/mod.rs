//! Expected values, computed on the CPU from closed-form formulas that never
//! call the engine (docs/reference/contracts.md §7).
//!
//! Three kinds of formula live here:
//! - the seed chapter's own closed forms (`seed_*`), e.g. ReduceScatter's
//!   `rank_slice * N + 100 * N(N-1)/2`, written for any N;
//! - the contract definitions of docs/reference/contracts.md §1 ([`contract_output`]):
//!   `y[s·q + j] = x_s[j]` and friends, evaluated on inputs given by formula;
//! - the input schemes of the full suite ([`matrix_input`]), chosen so that
//!   every reduction is exact in every datatype, at every N: sums stay below
//!   the largest integer the type holds exactly, products are powers of two
//!   (and ±1), Max/Min only select. Float Avg is the one op whose result
//!   depends on rounding (NCCL multiplies each input by 1/N rounded to the
//!   type, and adds each product with one rounding except on fp8).
//!
//! The closed forms and input schemes compute in `f64`: every value they
//! produce is a small integer or a dyadic fraction, exact in its datatype
//! and in `f64`. The contract definitions ([`reduce`], [`contract_output`])
//! take any elements, as exact [`Scalar`]s (`rankwise run` gives them
//! arbitrary inputs, 64-bit integers above 2^53 included): integers wrap
//! at the type's width, floats round to the type after every step, with
//! the type's own conversion from `core`.

mod arith;
mod inputs;
mod seed;

pub use arith::*;
pub use inputs::*;
pub use seed::*;

#[cfg(test)]
mod test_support {
    use rankwise::core::{DataType, Scalar};

    /// Closed-form values as elements of `dt`.
    pub fn sc(dt: DataType, v: &[f64]) -> Vec<Scalar> {
        v.iter().map(|x| Scalar::from_f64(dt, *x)).collect()
    }
    pub fn per_rank(dt: DataType, v: &[Vec<f64>]) -> Vec<Vec<Scalar>> {
        v.iter().map(|x| sc(dt, x)).collect()
    }
}
