//! The `RANKWISE_*` environment variables: their names, what each accepts,
//! and the one parser that everything reading them goes through.
//!
//! | variable | accepts | unset or empty |
//! |---|---|---|
//! | `RANKWISE_TIMEOUT` | seconds, a finite number > 0 and at most [`MAX_TIMEOUT_SECS`] (`300`, `0.5`, `1e3`), at least 1 ns | 300 s |
//! | `RANKWISE_POISON` | `0` or `1` | off |
//! | `RANKWISE_DEBUG` | `VERSION`, `WARN`, `INFO`, `TRACE` (any case) | no trace |
//! | `RANKWISE_DEBUG_SUBSYS` | comma list of `INIT`, `COLL`, `P2P`, `ALL`; a leading `^` excludes them | all |
//! | `RANKWISE_DEBUG_FILE` | a path; `%h` host, `%p` pid, `%r` rank | stderr |
//! | `RANKWISE_SHM` | `0` or `1`: whether ranks of one host agree through shared memory (`transport::lane`) | on |
//! | `RANKWISE_SHM_DIR` | a directory for the shared-memory segments | `/dev/shm` |
//! | `RANKWISE_CHECK` | `0`, `local`, `watch`, `1` or `full` (any case): how much the checker (`librankwise_nccl.so`) checks | `full` |
//! | `RANKWISE_ABORT` | `0` or `1`: the checker aborts the process after an error line | off |
//!
//! An empty value means unset, as NCCL reads its own variables.
//!
//! Two faces: [`Settings::from_env`] fails on any bad value (every command
//! that launches ranks calls it before doing anything, and exits 1 naming
//! the variable); [`Settings::from_env_or_defaults`], behind
//! `LaunchOptions::default()` and `Tracer::from_env()`, cannot fail: it
//! uses the default for each bad variable and says so once on stderr.

use std::ffi::OsString;
use std::sync::Once;
use std::time::Duration;

pub const TIMEOUT: &str = "RANKWISE_TIMEOUT";
pub const POISON: &str = "RANKWISE_POISON";
pub const DEBUG: &str = "RANKWISE_DEBUG";
pub const DEBUG_SUBSYS: &str = "RANKWISE_DEBUG_SUBSYS";
pub const DEBUG_FILE: &str = "RANKWISE_DEBUG_FILE";
pub const SHM: &str = "RANKWISE_SHM";
pub const SHM_DIR: &str = "RANKWISE_SHM_DIR";
pub const CHECK: &str = "RANKWISE_CHECK";
pub const ABORT: &str = "RANKWISE_ABORT";

/// Every variable rankwise reads.
pub const ALL: [&str; 9] = [
    TIMEOUT,
    POISON,
    DEBUG,
    DEBUG_SUBSYS,
    DEBUG_FILE,
    SHM,
    SHM_DIR,
    CHECK,
    ABORT,
];

/// The deadline of every wait when `RANKWISE_TIMEOUT` is unset.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// The longest `RANKWISE_TIMEOUT` (about 31.7 years). A deadline is
/// `Instant::now() + timeout`, which must not overflow; this bound keeps it
/// far from that on every platform, and no wait needs longer.
pub const MAX_TIMEOUT_SECS: u64 = 1_000_000_000;

/// How much the tracer prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Off,
    Warn,
    Info,
}

/// Which trace subsystems print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subsystems {
    pub init: bool,
    /// collectives and point-to-point calls
    pub coll: bool,
}

/// How much the checker checks (`RANKWISE_CHECK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checks {
    /// `0`: every call is forwarded untouched.
    Off,
    /// `local`: each call's own checks (arguments, datatype, op, NULL,
    /// alignment, overlap, extent); no side channel, nothing compared
    /// across ranks.
    Local,
    /// `watch`: the local checks; every call goes to NCCL at once, and the
    /// ranks compare what they called in the background
    /// (`agreement::watch`).
    Watch,
    /// The default (or `1`, `full`): the local checks, and every launch
    /// agreed across ranks before NCCL is called.
    Full,
}

impl Checks {
    /// Whether the ranks compare their calls (a side channel is needed).
    pub fn across_ranks(self) -> bool {
        matches!(self, Checks::Watch | Checks::Full)
    }
}

/// Everything the variables configure.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub timeout: Duration,
    pub poison: bool,
    pub debug: Level,
    pub subsystems: Subsystems,
    /// `None`: trace lines go to stderr.
    pub debug_file: Option<String>,
    /// Ranks of one host agree through shared memory.
    pub shm: bool,
    /// Where the shared-memory segments go (`None`: `/dev/shm`).
    pub shm_dir: Option<String>,
    /// How much the checker checks.
    pub checks: Checks,
    /// The checker aborts the process after an error line.
    pub abort: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            timeout: DEFAULT_TIMEOUT,
            poison: false,
            debug: Level::Off,
            subsystems: Subsystems {
                init: true,
                coll: true,
            },
            debug_file: None,
            shm: true,
            shm_dir: None,
            checks: Checks::Full,
            abort: false,
        }
    }
}

/// A variable whose value is not one it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingError {
    pub var: &'static str,
    pub value: String,
    /// What is wrong and what is accepted.
    pub why: String,
}

impl std::fmt::Display for SettingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}: {}", self.var, self.value, self.why)
    }
}

impl std::error::Error for SettingError {}

impl Settings {
    /// The settings from the process environment, or every bad variable.
    pub fn from_env() -> Result<Settings, Vec<SettingError>> {
        match Settings::parse(|name| std::env::var_os(name)) {
            (s, errors) if errors.is_empty() => Ok(s),
            (_, errors) => Err(errors),
        }
    }

    /// The settings from the process environment, with the default in place
    /// of each bad variable; the first call that meets bad variables prints
    /// one line per variable on stderr, later calls print nothing.
    pub fn from_env_or_defaults() -> Settings {
        let (s, errors) = Settings::parse(|name| std::env::var_os(name));
        if !errors.is_empty() {
            static WARNED: Once = Once::new();
            WARNED.call_once(|| {
                for e in &errors {
                    // a closed stderr must not turn a warning into a panic
                    use std::io::Write as _;
                    let _ = writeln!(
                        std::io::stderr(),
                        "rankwise: {e} (ignored: using the default)"
                    );
                }
            });
        }
        s
    }

    /// Reads each variable through `get` (the environment, or a test's
    /// table): the settings, with defaults in place of bad values, and what
    /// was wrong with each bad one.
    pub fn parse(get: impl Fn(&str) -> Option<OsString>) -> (Settings, Vec<SettingError>) {
        let mut s = Settings::default();
        let mut errors = Vec::new();
        let mut read = |var: &'static str, apply: &mut dyn FnMut(&str) -> Result<(), String>| {
            let Some(raw) = get(var) else { return };
            let Some(value) = raw.to_str() else {
                errors.push(SettingError {
                    var,
                    value: raw.to_string_lossy().into_owned(),
                    why: "not valid UTF-8".into(),
                });
                return;
            };
            if value.is_empty() {
                return;
            }
            if let Err(why) = apply(value) {
                errors.push(SettingError {
                    var,
                    value: value.to_string(),
                    why,
                });
            }
        };
        read(TIMEOUT, &mut |v| {
            s.timeout = parse_timeout(v)?;
            Ok(())
        });
        read(POISON, &mut |v| {
            s.poison = parse_poison(v)?;
            Ok(())
        });
        read(DEBUG, &mut |v| {
            s.debug = parse_debug(v)?;
            Ok(())
        });
        read(DEBUG_SUBSYS, &mut |v| {
            s.subsystems = parse_subsystems(v)?;
            Ok(())
        });
        read(DEBUG_FILE, &mut |v| {
            s.debug_file = Some(v.to_string());
            Ok(())
        });
        read(SHM, &mut |v| {
            s.shm = match v.trim() {
                "0" => false,
                "1" => true,
                _ => {
                    return Err(
                        "expected 0 or 1 (0 makes ranks of one host agree through the store or MPI messages instead of shared memory)"
                            .into(),
                    );
                }
            };
            Ok(())
        });
        read(SHM_DIR, &mut |v| {
            s.shm_dir = Some(v.to_string());
            Ok(())
        });
        read(CHECK, &mut |v| {
            s.checks = parse_checks(v)?;
            Ok(())
        });
        read(ABORT, &mut |v| {
            s.abort = match v.trim() {
                "0" => false,
                "1" => true,
                _ => {
                    return Err(
                        "expected 0 or 1 (1 makes the checker abort the process after an error line)"
                            .into(),
                    );
                }
            };
            Ok(())
        });
        (s, errors)
    }
}

/// `RANKWISE_TIMEOUT`: seconds, finite, more than 0, at most
/// [`MAX_TIMEOUT_SECS`], and at least 1 ns (a shorter deadline would be 0).
pub fn parse_timeout(v: &str) -> Result<Duration, String> {
    let accepted = format!(
        "expected a positive finite number of seconds, at most {MAX_TIMEOUT_SECS} (about 31.7 years), such as 300 or 0.5"
    );
    let secs: f64 = match v.trim().parse() {
        Ok(x) => x,
        Err(_) => return Err(format!("not a number; {accepted}")),
    };
    let why = if secs.is_nan() {
        "not a number"
    } else if secs.is_infinite() {
        "not finite"
    } else if secs <= 0.0 {
        "not more than 0 (every wait would fail at once)"
    } else if secs > MAX_TIMEOUT_SECS as f64 {
        // the value's own text, not a re-printed float
        return Err(format!("more than {MAX_TIMEOUT_SECS} s; {accepted}"));
    } else {
        match Duration::try_from_secs_f64(secs) {
            Ok(d) if !d.is_zero() => return Ok(d),
            // 0 < secs <= MAX: only rounding to zero nanoseconds is left
            _ => "shorter than 1 ns",
        }
    };
    Err(format!("{why}; {accepted}"))
}

/// `RANKWISE_CHECK`: `0`, `local`, `watch`, `1` or `full`, any case.
pub fn parse_checks(v: &str) -> Result<Checks, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "0" => Ok(Checks::Off),
        "local" => Ok(Checks::Local),
        "watch" => Ok(Checks::Watch),
        "1" | "full" => Ok(Checks::Full),
        _ => Err(
            "expected 0, local, watch, 1 or full (0 forwards every call untouched; local checks each call on its own rank; watch also compares the ranks' calls in the background; full agrees every launch across ranks before NCCL gets it)"
                .into(),
        ),
    }
}

/// `RANKWISE_POISON`: `0` or `1`.
pub fn parse_poison(v: &str) -> Result<bool, String> {
    match v.trim() {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err("expected 0 or 1 (1 fills the buffers the contract leaves undefined)".into()),
    }
}

/// `RANKWISE_DEBUG`: NCCL_DEBUG's levels. VERSION prints the warnings too:
/// rankwise has no separate version banner.
pub fn parse_debug(v: &str) -> Result<Level, String> {
    match v.trim().to_ascii_uppercase().as_str() {
        "INFO" | "TRACE" => Ok(Level::Info),
        "WARN" | "VERSION" => Ok(Level::Warn),
        _ => Err("expected VERSION, WARN, INFO or TRACE (as NCCL_DEBUG; any case)".into()),
    }
}

/// `RANKWISE_DEBUG_SUBSYS`: a comma list of `INIT`, `COLL`, `P2P` (both
/// traced as COLL lines), `ALL`; a leading `^` excludes the listed ones.
pub fn parse_subsystems(v: &str) -> Result<Subsystems, String> {
    let (exclude, list) = match v.trim().strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, v.trim()),
    };
    let mut init = false;
    let mut coll = false;
    for item in list.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        match item.to_ascii_uppercase().as_str() {
            "ALL" => (init, coll) = (true, true),
            "INIT" => init = true,
            "COLL" | "P2P" => coll = true,
            _ => {
                return Err(format!(
                    "{item} is not a subsystem rankwise traces: expected a comma list of INIT, COLL, P2P, ALL, optionally after ^ to exclude them"
                ));
            }
        }
    }
    Ok(if exclude {
        Subsystems {
            init: !init,
            coll: !coll,
        }
    } else {
        Subsystems { init, coll }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(vars: &[(&str, &str)]) -> (Settings, Vec<SettingError>) {
        Settings::parse(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        })
    }

    #[test]
    fn unset_and_empty_are_the_defaults() {
        assert_eq!(parse(&[]), (Settings::default(), vec![]));
        let empty: Vec<(&str, &str)> = ALL.iter().map(|v| (*v, "")).collect();
        assert_eq!(parse(&empty), (Settings::default(), vec![]));
    }

    #[test]
    fn good_values_are_read() {
        let (s, e) = parse(&[
            (TIMEOUT, "0.25"),
            (POISON, "1"),
            (DEBUG, "info"),
            (DEBUG_SUBSYS, "^COLL"),
            (DEBUG_FILE, "/tmp/t.%r"),
            (SHM, "0"),
            (SHM_DIR, "/run/rw"),
            (CHECK, " Local"),
            (ABORT, "1"),
        ]);
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(
            s,
            Settings {
                timeout: Duration::from_millis(250),
                poison: true,
                debug: Level::Info,
                subsystems: Subsystems {
                    init: true,
                    coll: false
                },
                debug_file: Some("/tmp/t.%r".into()),
                shm: false,
                shm_dir: Some("/run/rw".into()),
                checks: Checks::Local,
                abort: true,
            }
        );
        assert_eq!(parse_checks("0"), Ok(Checks::Off));
        assert_eq!(parse_checks("FULL"), Ok(Checks::Full));
        assert_eq!(parse_checks("Watch"), Ok(Checks::Watch));
        assert_eq!(parse_checks("1"), Ok(Checks::Full));
        assert_eq!(
            parse_timeout("1e9"),
            Ok(Duration::from_secs(MAX_TIMEOUT_SECS))
        );
        assert_eq!(parse_timeout("1e-9"), Ok(Duration::from_nanos(1)));
    }

    #[test]
    fn each_bad_value_is_named_and_the_others_still_apply() {
        let (s, e) = parse(&[
            (TIMEOUT, "inf"),
            (POISON, "yes"),
            (DEBUG, "INFO"),
            (DEBUG_SUBSYS, "INIT,NET"),
            (SHM, "off"),
            (CHECK, "yes"),
            (ABORT, "true"),
        ]);
        let shown: Vec<String> = e.iter().map(|e| e.to_string()).collect();
        assert_eq!(shown.len(), 6, "{shown:?}");
        assert!(shown[4].starts_with("RANKWISE_CHECK=yes: expected 0, local, watch, 1 or full"));
        assert!(shown[5].starts_with("RANKWISE_ABORT=true: expected 0 or 1"));
        assert_eq!(
            (s.checks, s.abort),
            (Checks::Full, false),
            "the defaults stay"
        );
        assert!(shown[3].starts_with("RANKWISE_SHM=off: expected 0 or 1"));
        assert!(s.shm, "the default stays");
        assert!(shown[0].starts_with("RANKWISE_TIMEOUT=inf: not finite; expected"));
        assert!(shown[1].starts_with("RANKWISE_POISON=yes: expected 0 or 1"));
        assert!(shown[2].starts_with("RANKWISE_DEBUG_SUBSYS=INIT,NET: NET is not a subsystem"));
        assert_eq!(s.timeout, DEFAULT_TIMEOUT);
        assert!(!s.poison);
        assert_eq!(s.debug, Level::Info);
        assert_eq!(s.subsystems, Settings::default().subsystems);
    }

    #[test]
    fn subsystem_lists() {
        let sub = |v| parse_subsystems(v).map(|s| (s.init, s.coll));
        assert_eq!(sub("COLL"), Ok((false, true)));
        assert_eq!(sub("INIT,COLL"), Ok((true, true)));
        assert_eq!(sub("^COLL"), Ok((true, false)));
        assert_eq!(sub("ALL"), Ok((true, true)));
        assert_eq!(sub("p2p,"), Ok((false, true)));
        assert!(sub("COLL,,BOGUS").unwrap_err().starts_with("BOGUS is not"));
    }

    #[test]
    fn timeout_refusals_say_why() {
        for (v, why) in [
            ("inf", "not finite"),
            ("-inf", "not finite"),
            ("1e300", "more than 1000000000 s"),
            ("0", "not more than 0"),
            ("-0", "not more than 0"),
            ("-1", "not more than 0"),
            ("abc", "not a number"),
            ("nan", "not a number"),
            ("30s", "not a number"),
            ("1e-12", "shorter than 1 ns"),
        ] {
            let e = parse_timeout(v).unwrap_err();
            assert!(e.starts_with(why), "{v}: {e}");
            assert!(e.contains("at most 1000000000"), "{v}: {e}");
        }
    }

    proptest! {
        /// Any number: accepted exactly when 1 ns <= x <= MAX, as that many
        /// seconds to the nanosecond; never a panic.
        #[test]
        fn any_number_is_a_duration_in_range_or_refused(x in any::<f64>()) {
            let text = format!("{x:e}");
            match parse_timeout(&text) {
                Ok(d) => {
                    prop_assert!(x > 0.0 && x <= MAX_TIMEOUT_SECS as f64, "{x}");
                    prop_assert!(d >= Duration::from_nanos(1));
                    prop_assert!(d <= Duration::from_secs(MAX_TIMEOUT_SECS));
                    let back: f64 = text.parse().unwrap();
                    prop_assert!((d.as_secs_f64() - back).abs() <= 1e-9 + back * 1e-15, "{x} -> {d:?}");
                }
                // 1 ns itself may round either way: 2 ns may not
                Err(e) => prop_assert!(
                    !(2e-9..=MAX_TIMEOUT_SECS as f64).contains(&x),
                    "{x} refused: {e}"
                ),
            }
        }

        /// Any text at all: a value only when the text is one of the
        /// accepted forms, else a reason that says what is accepted.
        #[test]
        fn any_text_is_parsed_or_refused(v in ".{0,40}") {
            match parse_timeout(&v) {
                Ok(_) => prop_assert!(v.trim().parse::<f64>().is_ok_and(|x| x > 0.0), "{v:?}"),
                Err(e) => prop_assert!(e.contains("expected a positive finite number"), "{e}"),
            }
            match parse_poison(&v) {
                Ok(on) => prop_assert_eq!(v.trim(), if on { "1" } else { "0" }),
                Err(e) => prop_assert!(e.starts_with("expected 0 or 1"), "{e}"),
            }
            match parse_debug(&v) {
                Ok(_) => prop_assert!(["VERSION", "WARN", "INFO", "TRACE"]
                    .contains(&v.trim().to_ascii_uppercase().as_str())),
                Err(e) => prop_assert!(e.starts_with("expected VERSION"), "{e}"),
            }
            if let Err(e) = parse_subsystems(&v) {
                prop_assert!(e.contains("is not a subsystem rankwise traces"), "{e}");
            }
        }
    }
}
