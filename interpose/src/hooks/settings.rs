//! The interposer's switches, read once through `rankwise::settings` (a bad
//! value gets its default and one line on stderr, as everywhere), and its
//! one way of writing to stderr.

pub use rankwise::settings::Checks;
use std::io::Write;
use std::sync::OnceLock;

pub fn settings() -> &'static rankwise::settings::Settings {
    static S: OnceLock<rankwise::settings::Settings> = OnceLock::new();
    S.get_or_init(rankwise::settings::Settings::from_env_or_defaults)
}

/// One line on stderr, written whole; a closed stderr loses it.
pub fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}
