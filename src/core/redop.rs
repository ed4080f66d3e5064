//! Reduction operations (`ncclRedOp_t`) and their semantics per datatype
//! family; the arithmetic itself lives with the kernels.

use std::fmt;

/// A reduction. `PreMulSum` multiplies each input by the scalar, then sums.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum RedOp {
    Sum,
    Prod,
    Max,
    Min,
    /// Integers: sum, then integer division by N (toward zero).
    /// Floats: each input multiplied by 1/N (rounded to the type), then summed.
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
