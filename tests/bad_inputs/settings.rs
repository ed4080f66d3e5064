//! Bad inputs: settings.

use super::Bad;

pub const ROWS: &[Bad] = &[];
