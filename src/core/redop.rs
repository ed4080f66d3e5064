//! Reduction operations (`ncclRedOp_t`) and their semantics per datatype
//! family; the arithmetic itself lives with the kernels.

use super::DataType;
use std::fmt;

/// A reduction. `PreMulSum` multiplies each input by the scalar, then sums.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum RedOp {
    Sum,
    Prod,
    Max,
    Min,
    /// Integers: the sum wrapped to the type, then divided by N toward
    /// zero, N never converted to the element type. Floats: a sum of the
    /// inputs each multiplied by 1/N (rounded to the type), as NCCL 2.28
    /// computes it: for half, float, double and bfloat16 each product is
    /// added with one rounding (fused), for fp8 rounded first.
    Avg,
    PreMulSum(f64),
}

/// Number of built-in op codes (`ncclNumOps` in the C API); user-created
/// PreMulSum ops take codes from here on.
pub const NUM_BUILTIN_OPS: i32 = 5;

impl RedOp {
    pub const BUILTIN: [RedOp; 5] = [RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg];

    pub fn from_builtin_code(code: i32) -> Option<RedOp> {
        usize::try_from(code)
            .ok()
            .and_then(|i| Self::BUILTIN.get(i).copied())
    }
    /// The code of a built-in op; PreMulSum codes are handed out at run time.
    pub fn builtin_code(self) -> Option<i32> {
        Self::BUILTIN
            .iter()
            .position(|o| *o == self)
            .map(|i| i as i32)
    }
    pub fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Max => "max",
            RedOp::Min => "min",
            RedOp::Avg => "avg",
            RedOp::PreMulSum(_) => "premulsum",
        }
    }
    pub fn nccl_name(self) -> &'static str {
        match self {
            RedOp::Sum => "ncclSum",
            RedOp::Prod => "ncclProd",
            RedOp::Max => "ncclMax",
            RedOp::Min => "ncclMin",
            RedOp::Avg => "ncclAvg",
            RedOp::PreMulSum(_) => "ncclPreMulSum",
        }
    }
    /// Parses `sum|prod|max|min|avg` (any case, `nccl` prefix allowed).
    pub fn parse(s: &str) -> Option<RedOp> {
        let lower = s.to_ascii_lowercase();
        let t = lower.strip_prefix("nccl").unwrap_or(&lower);
        RedOp::BUILTIN.into_iter().find(|o| o.name() == t)
    }
}

impl RedOp {
    /// What the op computes for one output element on `n` ranks of `dt`,
    /// as contract prose (what `rankwise explain` prints).
    pub fn semantics(self, dt: DataType, n: usize) -> String {
        let t = dt.name();
        let int = !dt.is_float();
        let order = if int {
            String::new()
        } else {
            format!(
                " Every step is rounded to {t}; rankwise folds in rank order, NCCL in its algorithm's order, so float results can differ from NCCL's in the last bits."
            )
        };
        match self {
            RedOp::Sum | RedOp::Prod if int => format!(
                "y[i] = x_0[i] {op} x_1[i] {op} … {op} x_{{N-1}}[i], computed in {t} with wrap-around (two's complement, modulo 2^{bits}).",
                op = if self == RedOp::Sum { "+" } else { "×" },
                bits = 8 * dt.size()
            ),
            RedOp::Sum | RedOp::Prod => format!(
                "y[i] = x_0[i] {op} x_1[i] {op} … {op} x_{{N-1}}[i].{order}",
                op = if self == RedOp::Sum { "+" } else { "×" }
            ),
            RedOp::Max | RedOp::Min => format!(
                "y[i] = the {} of x_0[i] … x_{{N-1}}[i]: one of the inputs, exactly.",
                if self == RedOp::Max {
                    "largest"
                } else {
                    "smallest"
                }
            ),
            RedOp::Avg if int => {
                let (sum, avg) = avg_of_ones(dt, n);
                let example = if sum == n as i128 {
                    format!("every rank passing 1 gives the sum {n} and {n} / {n} = {avg}")
                } else {
                    format!(
                        "every rank passing 1 gives the sum {n}, which wraps to {sum} in {t}, and {sum} / {n} = {avg}"
                    )
                };
                format!(
                    "y[i] = (x_0[i] + … + x_{{N-1}}[i]) / N: the sum is computed in {t} with wrap-around, then divided by N = {n} as an integer (N is never converted to {t}), rounding toward zero (NCCL's SumPostDiv). At N = {n}, {example}."
                )
            }
            RedOp::Avg => format!(
                "y[i] = x_0[i]·s + x_1[i]·s + … + x_{{N-1}}[i]·s with s = 1/N = 1/{n} rounded to {t}: each input is scaled before the sum, not the sum divided after.{}{order}",
                premul_steps(dt)
            ),
            RedOp::PreMulSum(k) => format!(
                "y[i] = x_0[i]·s + … + x_{{N-1}}[i]·s with s = {k} converted to {t}.{}",
                if int {
                    " Products and sum wrap around in the type.".to_string()
                } else {
                    format!("{}{order}", premul_steps(dt))
                }
            ),
        }
    }
}

/// How a float pre-multiplied sum (Avg, PreMulSum) rounds, as NCCL 2.28
/// computes it (docs/findings/real-nccl.md "Reduction rules"), for `explain`.
fn premul_steps(dt: DataType) -> String {
    let t = dt.name();
    match dt {
        DataType::Float8e4m3 | DataType::Float8e5m2 => format!(
            " Steps: acc = x_0[i]·s rounded to {t}; then for each next rank acc = acc + x_r[i]·s, the product rounded to {t} and then the sum."
        ),
        _ => format!(
            " Steps: acc = x_0[i]·s rounded to {t}; then for each next rank acc = acc + x_r[i]·s rounded once, the product unrounded (a fused multiply-add, as NCCL's kernels compute it)."
        ),
    }
}

/// Integer Avg when every rank passes 1: the sum N wrapped to `dt`, and
/// that sum divided by N toward zero. Written from the definition (wrap
/// modulo 2^bits, then ordinary integer division), not from the kernels.
fn avg_of_ones(dt: DataType, n: usize) -> (i128, i128) {
    let bits = 8 * dt.size() as u32;
    let modulus = 1i128 << bits;
    let mut sum = (n as i128).rem_euclid(modulus);
    let signed = !matches!(dt, DataType::Uint8 | DataType::Uint32 | DataType::Uint64);
    if signed && sum >= modulus / 2 {
        sum -= modulus;
    }
    (sum, sum / n as i128)
}

impl fmt::Display for RedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedOp::PreMulSum(s) => write!(f, "premulsum({s})"),
            o => f.write_str(o.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_avg_prose_shows_the_wrap_and_the_wide_divisor() {
        let t = RedOp::Avg.semantics(DataType::Int8, 200);
        assert!(t.contains("wraps to -56 in int8, and -56 / 200 = 0"), "{t}");
        assert!(t.contains("never converted to int8"), "{t}");
        let t = RedOp::Avg.semantics(DataType::Uint8, 256);
        assert!(t.contains("wraps to 0 in uint8, and 0 / 256 = 0"), "{t}");
        let t = RedOp::Avg.semantics(DataType::Int32, 4);
        assert!(t.contains("the sum 4 and 4 / 4 = 1"), "{t}");
        let t = RedOp::Avg.semantics(DataType::Float32, 3);
        assert!(t.contains("1/N = 1/3 rounded to float:"), "{t}");
        assert!(t.contains("rounded once, the product unrounded"), "{t}");
        let t = RedOp::PreMulSum(0.5).semantics(DataType::Float8e5m2, 3);
        assert!(
            t.contains("the product rounded to f8e5m2 and then the sum"),
            "{t}"
        );
    }

    #[test]
    fn codes_follow_nccl_h() {
        for (i, op) in RedOp::BUILTIN.iter().enumerate() {
            assert_eq!(op.builtin_code(), Some(i as i32));
            assert_eq!(RedOp::from_builtin_code(i as i32), Some(*op));
            assert_eq!(RedOp::parse(op.name()), Some(*op));
            assert_eq!(RedOp::parse(op.nccl_name()), Some(*op));
        }
        assert_eq!(RedOp::from_builtin_code(5), None);
        assert_eq!(RedOp::from_builtin_code(-1), None);
        assert_eq!(RedOp::PreMulSum(2.0).builtin_code(), None);
    }
}
