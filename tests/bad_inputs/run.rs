//! Bad inputs: run.

use super::Bad;

pub const ROWS: &[Bad] = &[];
