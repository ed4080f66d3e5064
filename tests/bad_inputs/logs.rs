//! Bad inputs: logs.

use super::Bad;

pub const ROWS: &[Bad] = &[];
