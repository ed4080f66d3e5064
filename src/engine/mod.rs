//! Engines execute checked calls. `local` runs ranks as threads of this process.

pub mod local;
