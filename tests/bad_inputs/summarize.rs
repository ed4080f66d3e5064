//! Bad inputs: summarize.

use super::Bad;

pub const ROWS: &[Bad] = &[];
