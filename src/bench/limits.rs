//! What `rankwise bench` accepts, as pure functions: the size sweep and the
//! bounds on ranks, calls and rows. Every number the command line gives is
//! checked here before anything is allocated or any thread starts: a sweep
//! either fits in these bounds or is refused with a message that says what
//! was given and what is allowed.

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
