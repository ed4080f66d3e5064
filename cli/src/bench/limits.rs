//! What `rankwise bench` accepts, as pure functions: the size sweep, the
//! bounds on ranks, calls and rows, and the comparison of the memory a
//! sweep needs with the memory there is. Every number the command line
//! gives is checked here before anything is allocated or any thread starts:
//! a sweep either fits in these bounds or is refused with a message that
//! says what was given and what is allowed.

use std::fmt;

/// Most sizes a sweep may make. nccl-tests' default sweep (8 B to 128 MiB,
/// ×2) has 25; a factor of 1.05 from 8 B to 1 GiB has 384.
pub const MAX_SIZES: usize = 512;

/// Most timed, warm-up or checked calls per row and placement. The timed
/// calls' times are kept on every rank until the row's median is taken.
pub const MAX_ITERS: usize = 100_000;

/// Most rows a run may have (a row is one size of one collective, datatype,
/// op and root, timed out of place and in place).
pub const MAX_ROWS: usize = 100_000;

/// `min_bytes` × `factor`^k for k = 0, 1, … up to `max_bytes`, each rounded
/// to a byte, repeats dropped: nccl-tests' `-b`, `-e` and `-f`, with a
/// factor that need not be an integer. A factor close to 1 makes many
/// sizes: more than [`MAX_SIZES`] steps is refused, naming how many it
/// would be and the least factor that fits. The work done is bounded by
/// [`MAX_SIZES`] whatever the input.
pub fn sweep(min_bytes: usize, max_bytes: usize, factor: f64) -> Result<Vec<usize>, String> {
    if min_bytes == 0 {
        return Err(format!(
            "-b 0: sizes are in bytes and start at 1 (given -b {min_bytes} -e {max_bytes})"
        ));
    }
    if min_bytes > max_bytes {
        return Err(format!("-b {min_bytes} is larger than -e {max_bytes}"));
    }
    if !factor.is_finite() {
        return Err(format!("-f must be a finite number, not {factor}"));
    }
    if min_bytes == max_bytes {
        return Ok(vec![min_bytes]);
    }
    if factor <= 1.0 {
        return Err(format!(
            "-f must be greater than 1 to step from -b {min_bytes} to -e {max_bytes}, not {factor}"
        ));
    }
    // a step's size is its product rounded to a byte, so the few ulps the
    // float product drifts by never add or drop a size; products past 2^64
    // are past any -e
    let size = |s: f64| {
        (s < 2f64.powi(64))
            .then(|| s.round() as usize)
            .filter(|&b| b <= max_bytes)
    };
    let mut out = vec![min_bytes];
    let mut s = min_bytes as f64;
    for _ in 1..MAX_SIZES {
        s *= factor;
        let Some(b) = size(s) else {
            return Ok(out);
        };
        if out.last() != Some(&b) {
            out.push(b);
        }
    }
    if size(s * factor).is_none() {
        return Ok(out);
    }
    Err(format!(
        "-f {factor} makes {} sizes from -b {min_bytes} to -e {max_bytes}; a sweep has at most {MAX_SIZES}: use -f {} or more",
        sweep_len(min_bytes, max_bytes, factor).max(MAX_SIZES as u64 + 1),
        least_factor(min_bytes, max_bytes)
    ))
}

/// `ln((max + 1/2) / min)`: a step's size is its product rounded, so the
/// steps go on while the product is below `max + 1/2`.
fn span(min_bytes: usize, max_bytes: usize) -> f64 {
    ((max_bytes as f64 + 0.5) / min_bytes as f64).ln()
}

/// How many steps `round(min × factor^k) <= max` there are, from
/// logarithms (for the message only: the sweep itself counts its steps).
fn sweep_len(min_bytes: usize, max_bytes: usize, factor: f64) -> u64 {
    let span = span(min_bytes, max_bytes);
    // ln_1p keeps the digits of a factor like 1.0000000001
    (span / (factor - 1.0).ln_1p()).floor() as u64 + 1
}

/// The smallest factor, rounded up to 5 decimals, whose sweep from
/// `min_bytes` to `max_bytes` has at most [`MAX_SIZES`] sizes.
fn least_factor(min_bytes: usize, max_bytes: usize) -> f64 {
    let f = (span(min_bytes, max_bytes) / (MAX_SIZES - 1) as f64).exp();
    // rounding up keeps the suggestion inside the bound; 1.00001 is the
    // least that prints as more than 1
    ((f * 1e5).ceil() / 1e5).max(1.00001)
}

/// `--ranks`: at least 1, at most `max` (the local engine runs one thread
/// per rank).
pub fn ranks(nranks: usize, max: usize) -> Result<usize, String> {
    if nranks == 0 {
        return Err("--ranks must be at least 1: a communicator has at least one rank".into());
    }
    if nranks > max {
        return Err(format!(
            "--ranks {nranks} is more than the local engine runs here (at most {max}: one thread per rank)"
        ));
    }
    Ok(nranks)
}

/// `-n`, `-w` or `-c`: at most [`MAX_ITERS`], and at least `least`.
pub fn calls(flag: &str, given: usize, least: usize) -> Result<usize, String> {
    if given < least {
        return Err(format!("{flag} must be at least {least}, not {given}"));
    }
    if given > MAX_ITERS {
        return Err(format!(
            "{flag} {given} is more calls per row than the bench makes (at most {MAX_ITERS})"
        ));
    }
    Ok(given)
}

/// The number of rows: at most [`MAX_ROWS`].
pub fn rows(count: u128) -> Result<(), String> {
    if count > MAX_ROWS as u128 {
        return Err(format!(
            "this run has {count} rows (collectives × datatypes × ops × roots × sizes); at most {MAX_ROWS} are run at once: narrow -d, -o, -r or the sizes"
        ));
    }
    Ok(())
}

/// The memory one run needs, by what it is for, in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    /// every rank's buffers for the datatype that needs the most (the
    /// buffers of one datatype are freed before the next is allocated);
    /// `None` when that is more than 2^64 bytes
    pub buffers: Option<u64>,
    /// whose buffers those are, for the message
    pub largest: String,
    /// everything else the run writes: thread stacks, the checker's chunks,
    /// the timing, the rows and the copy-bandwidth probe's buffers
    pub rest: u64,
    /// address space the run maps without writing it (`malloc`'s per-thread
    /// arenas): it counts against `ulimit -v`, not against the machine's memory
    pub reserved: u64,
}

impl Need {
    /// Memory written: what the machine must have.
    pub fn memory(&self) -> Option<u64> {
        self.buffers?.checked_add(self.rest)
    }
    /// Address space mapped: what the process's limits must allow.
    pub fn address_space(&self) -> Option<u64> {
        self.memory()?.checked_add(self.reserved)
    }
}

/// One limit on the memory a process may map (`ulimit -v`, `ulimit -d`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessLimit {
    /// how the user sets it, e.g. `address space (ulimit -v)`
    pub name: &'static str,
    pub limit: u64,
    /// what the process already maps against it
    pub used: u64,
}

impl ProcessLimit {
    pub fn left(&self) -> u64 {
        self.limit.saturating_sub(self.used)
    }
}

/// Where the memory available to this process comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Available {
    /// `MemAvailable` of `/proc/meminfo`, or why it could not be read
    pub machine: Result<u64, String>,
    /// the process's own limits that are set (not unlimited)
    pub process: Vec<ProcessLimit>,
}

/// What a machine whose free memory cannot be read is assumed to have.
pub const ASSUMED_AVAILABLE: u64 = 4 << 30;

impl Available {
    /// The machine's available memory, or [`ASSUMED_AVAILABLE`].
    pub fn machine_bytes(&self) -> u64 {
        *self.machine.as_ref().unwrap_or(&ASSUMED_AVAILABLE)
    }
}

/// Whether the run fits in the machine's memory and in every limit of the
/// process; if not, how much it needs, how much there is and why.
pub fn fits(need: &Need, avail: &Available) -> Result<(), String> {
    let (Some(buffers), Some(memory), Some(address_space)) =
        (need.buffers, need.memory(), need.address_space())
    else {
        return Err(format!(
            "this sweep needs more than 2^64 bytes of memory (buffers for {}): lower -e or --ranks",
            need.largest
        ));
    };
    let parts = format!(
        "{} of buffers for {}, {} for threads, checking, timing and probes",
        Bytes(buffers),
        need.largest,
        Bytes(need.rest)
    );
    let have = avail.machine_bytes();
    if memory > have {
        let source = match &avail.machine {
            Ok(_) => "MemAvailable in /proc/meminfo".to_string(),
            Err(why) => format!("{why}, so this much is assumed"),
        };
        return Err(format!(
            "this sweep needs {} of memory ({}) but {} is available ({source}): lower -e or --ranks",
            Bytes(memory),
            parts,
            Bytes(have)
        ));
    }
    for l in &avail.process {
        if address_space > l.left() {
            return Err(format!(
                "this sweep needs {} of address space ({}, {} reserved by malloc's thread arenas) but the {} limit of {} leaves {} (the process maps {} already): lower -e or --ranks, or raise the limit",
                Bytes(address_space),
                parts,
                Bytes(need.reserved),
                l.name,
                Bytes(l.limit),
                Bytes(l.left()),
                Bytes(l.used)
            ));
        }
    }
    Ok(())
}

/// A byte count for people: `512 B`, `3.00 KiB`, `16.00 GiB`.
#[derive(Debug, Clone, Copy)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
        if self.0 < 1024 {
            return write!(f, "{} B", self.0);
        }
        let mut v = self.0 as f64 / 1024.0;
        let mut unit = 0;
        while v >= 1024.0 && unit + 1 < UNITS.len() {
            v /= 1024.0;
            unit += 1;
        }
        write!(f, "{v:.2} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `min × f^k <= max` for an integer factor, in integer arithmetic.
    fn integer_sweep(min: u64, max: u64, f: u64) -> Vec<usize> {
        std::iter::successors(Some(min), |s| s.checked_mul(f))
            .take_while(|s| *s <= max)
            .map(|s| s as usize)
            .collect()
    }

    /// The number the refusal names, and the factor it suggests.
    fn refusal(msg: &str) -> (u64, f64) {
        let words: Vec<&str> = msg.split_whitespace().collect();
        let at = words.iter().position(|w| *w == "makes").unwrap();
        let count = words[at + 1].parse().unwrap();
        let use_at = words.iter().position(|w| *w == "use").unwrap();
        let f = words[use_at + 2].parse().unwrap();
        (count, f)
    }

    #[test]
    fn integer_factors_step_as_nccl_tests() {
        assert_eq!(
            sweep(8, 64 << 20, 2.0).unwrap(),
            integer_sweep(8, 64 << 20, 2)
        );
        assert_eq!(sweep(8, 64 << 20, 2.0).unwrap().len(), 24);
        assert_eq!(sweep(1, 1, 2.0).unwrap(), vec![1]);
        // a factor is not needed when there is one size
        assert_eq!(sweep(5, 5, 1.0).unwrap(), vec![5]);
        // 2^64 - 1 bytes is a size (memory is checked later, not here)
        assert_eq!(
            sweep(usize::MAX, usize::MAX, 2.0).unwrap(),
            vec![usize::MAX]
        );
        assert_eq!(
            sweep(1 << 62, usize::MAX, 2.0).unwrap(),
            vec![1 << 62, 1 << 63]
        );
    }

    #[test]
    fn sizes_start_at_one_byte_and_go_up() {
        let e = sweep(0, 0, 2.0).unwrap_err();
        assert!(e.contains("-b 0") && e.contains("start at 1"), "{e}");
        assert!(sweep(0, 64, 2.0).is_err());
        assert_eq!(sweep(16, 8, 2.0).unwrap_err(), "-b 16 is larger than -e 8");
    }

    #[test]
    fn factors_must_be_finite_and_above_one() {
        for f in [1.0, 0.5, 0.0, -2.0] {
            let e = sweep(8, 64, f).unwrap_err();
            assert!(
                e.contains("greater than 1") && e.contains(&f.to_string()),
                "{e}"
            );
        }
        for f in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let e = sweep(8, 64, f).unwrap_err();
            assert!(e.contains("finite"), "{e}");
        }
    }

    #[test]
    fn a_factor_close_to_one_is_refused_with_its_count() {
        let e = sweep(8, 16, 1.0000000001).unwrap_err();
        let (count, f) = refusal(&e);
        // ln(16.5 / 8) / ln(1.0000000001) + 1
        let expected = ((16.5f64 / 8.0).ln() / 1e-10) as u64 + 1;
        assert!(count.abs_diff(expected) < expected / 1000, "{e}");
        assert!(e.contains("at most 512"), "{e}");
        // (16.5 / 8)^(1/511) = 1.0014172…, rounded up
        assert_eq!(f, 1.00142, "{e}");
        assert!(sweep(8, 16, f).unwrap().len() <= MAX_SIZES);
        // 1.01 from 1 B to 1 GiB: ln(2^30 + 1/2) / ln 1.01 + 1 = 2090 sizes
        let (count, _) = refusal(&sweep(1, 1 << 30, 1.01).unwrap_err());
        assert_eq!(count, 2090);
    }

    #[test]
    fn the_bound_is_on_steps() {
        // 2^(k/16) for k = 0..=511 stays under 2^32 (k = 511 gives 2^31.94)
        let f = 2f64.powf(1.0 / 16.0);
        let top = 2f64.powf(511.0 / 16.0) as usize;
        assert_eq!(sweep(1, top, f).map(|v| v.len() <= MAX_SIZES), Ok(true));
        assert!(sweep(1, 1 << 32, f).is_err(), "k = 512 reaches 2^32");
    }

    #[test]
    fn ranks_and_calls_are_bounded() {
        assert!(ranks(0, 256).unwrap_err().contains("at least 1"));
        assert_eq!(ranks(1, 256), Ok(1));
        assert_eq!(ranks(256, 256), Ok(256));
        assert_eq!(
            ranks(usize::MAX, 256).unwrap_err(),
            format!(
                "--ranks {} is more than the local engine runs here (at most 256: one thread per rank)",
                usize::MAX
            )
        );
        assert_eq!(
            calls("-n", 0, 1).unwrap_err(),
            "-n must be at least 1, not 0"
        );
        assert_eq!(calls("-w", 0, 0), Ok(0));
        assert_eq!(calls("-c", MAX_ITERS, 0), Ok(MAX_ITERS));
        assert!(
            calls("-w", MAX_ITERS + 1, 0)
                .unwrap_err()
                .contains("at most 100000")
        );
        assert_eq!(rows(MAX_ROWS as u128), Ok(()));
        assert!(
            rows(MAX_ROWS as u128 + 1)
                .unwrap_err()
                .contains("100001 rows")
        );
    }

    fn need(buffers: Option<u64>, rest: u64, reserved: u64) -> Need {
        Need {
            buffers,
            largest: "2 ranks of float rows up to 8 bytes".into(),
            rest,
            reserved,
        }
    }

    #[test]
    fn memory_is_compared_with_the_machine_and_the_limits() {
        let roomy = Available {
            machine: Ok(10 << 30),
            process: vec![],
        };
        assert_eq!(fits(&need(Some(6 << 30), 4 << 30, 1 << 40), &roomy), Ok(()));
        let e = fits(&need(Some(6 << 30), (4 << 30) + 1, 0), &roomy).unwrap_err();
        assert!(
            e.contains("needs 10.00 GiB of memory")
                && e.contains("6.00 GiB of buffers for 2 ranks of float rows up to 8 bytes")
                && e.contains("10.00 GiB is available (MemAvailable"),
            "{e}"
        );
        // the arenas' address space counts against ulimit -v only
        let limited = Available {
            machine: Ok(10 << 30),
            process: vec![ProcessLimit {
                name: "address space (ulimit -v)",
                limit: 4 << 30,
                used: 1 << 30,
            }],
        };
        assert_eq!(fits(&need(Some(2 << 30), 0, 1 << 30), &limited), Ok(()));
        let e = fits(&need(Some(2 << 30), 0, (1 << 30) + 1), &limited).unwrap_err();
        assert!(
            e.contains("needs 3.00 GiB of address space")
                && e.contains("limit of 4.00 GiB leaves 3.00 GiB")
                && e.contains("maps 1.00 GiB already"),
            "{e}"
        );
        let e = fits(&need(None, 0, 0), &roomy).unwrap_err();
        assert!(e.contains("more than 2^64 bytes"), "{e}");
        assert!(fits(&need(Some(u64::MAX), 1, 0), &roomy).is_err());
    }

    #[test]
    fn unreadable_memory_falls_back_to_a_stated_amount() {
        let blind = Available {
            machine: Err("/proc/meminfo cannot be read (no such file)".into()),
            process: vec![],
        };
        assert_eq!(fits(&need(Some(ASSUMED_AVAILABLE), 0, 0), &blind), Ok(()));
        let e = fits(&need(Some(ASSUMED_AVAILABLE), 1, 0), &blind).unwrap_err();
        assert!(
            e.contains("4.00 GiB is available (/proc/meminfo cannot be read (no such file), so this much is assumed)"),
            "{e}"
        );
    }

    #[test]
    fn byte_counts_read_as_people_write_them() {
        assert_eq!(Bytes(512).to_string(), "512 B");
        assert_eq!(Bytes(1536).to_string(), "1.50 KiB");
        assert_eq!(Bytes(16 << 30).to_string(), "16.00 GiB");
        assert_eq!(Bytes(u64::MAX).to_string(), "16.00 EiB");
    }

    fn factor() -> impl Strategy<Value = f64> {
        prop_oneof![
            Just(f64::NAN),
            Just(f64::INFINITY),
            -4.0..4.0f64,
            1.0..1.000001f64,
            1.0..1.1f64,
            1.0..1e6f64,
        ]
    }

    fn bytes() -> impl Strategy<Value = usize> {
        prop_oneof![
            0..64usize,
            0..=usize::MAX,
            (0..64u32).prop_map(|k| 1usize << k)
        ]
    }

    proptest! {
        /// Any -b, -e and -f give a short increasing list inside [-b, -e]
        /// that starts at -b, or a reason; never a panic, never a long loop.
        #[test]
        fn any_flags_give_a_bounded_sweep_or_a_reason(
            min in bytes(), max in bytes(), f in factor()
        ) {
            match sweep(min, max, f) {
                Ok(v) => {
                    prop_assert!(!v.is_empty() && v.len() <= MAX_SIZES);
                    prop_assert_eq!(v[0], min);
                    prop_assert!(v.windows(2).all(|w| w[0] < w[1]));
                    prop_assert!(v.iter().all(|s| (min..=max).contains(s)));
                }
                Err(e) => {
                    prop_assert!(!e.is_empty());
                    let stepped = min >= 1 && min < max && f.is_finite() && f > 1.0;
                    if stepped {
                        let (count, least) = refusal(&e);
                        prop_assert!(count > MAX_SIZES as u64, "{}", e);
                        // the suggested factor is accepted
                        prop_assert!(sweep(min, max, least).is_ok(), "{}", e);
                    }
                }
            }
        }

        /// An integer factor steps exactly as integer arithmetic does.
        #[test]
        fn integer_factors_match_integer_arithmetic(
            min in 1u64..1 << 40, span in 0u64..1 << 12, f in 2u64..17
        ) {
            let max = min.saturating_mul(span.max(1)).min(1 << 52);
            prop_assume!(min <= max);
            prop_assert_eq!(
                sweep(min as usize, max as usize, f as f64).unwrap(),
                integer_sweep(min, max, f)
            );
        }
    }
}
