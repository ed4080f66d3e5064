//! Bad inputs: bench.

use super::Bad;

pub const ROWS: &[Bad] = &[];
