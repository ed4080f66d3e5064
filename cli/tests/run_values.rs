//! `rankwise run` carries every element exactly, in its own type, from the
//! inputs file to the JSON and text output. What each test expects is
//! computed here, independently of rankwise: integer reductions with Rust's
//! wrapping arithmetic in the element type itself, float values decoded
//! from their bit patterns by the formats' definitions.

mod common;
use common::rankwise;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn run_json(args: &[&str]) -> Value {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.push("--json");
    rankwise(&all).expect(0).json()
}

/// `run all_reduce` of `n` ranks and count `q` over an inputs file, as JSON.
fn all_reduce_json(n: usize, q: usize, dtype: &str, op: &str, file: &Path) -> Value {
    run_json(&[
        "all_reduce",
        "-n",
        &n.to_string(),
        "-c",
        &q.to_string(),
        "--dtype",
        dtype,
        "--op",
        op,
        "--inputs",
        file.to_str().unwrap(),
    ])
}

/// Writes `{"inputs": [...]}` with each element given as JSON text.
fn write_inputs(dir: &Path, name: &str, per_rank: &[Vec<String>]) -> PathBuf {
    let lists: Vec<String> = per_rank
        .iter()
        .map(|xs| format!("[{}]", xs.join(", ")))
        .collect();
    let path = dir.join(name);
    std::fs::write(&path, format!("{{\"inputs\": [{}]}}", lists.join(", "))).unwrap();
    path
}

// ---- floats ----

/// A binary float format: exponent and mantissa widths, and how its top
/// exponent is used.
#[derive(Clone, Copy)]
struct Format {
    dtype: &'static str,
    exp_bits: u32,
    mant_bits: u32,
    /// IEEE: the top exponent holds inf and NaN. Else (e4m3fn) only the
    /// all-ones code is NaN and there is no infinity.
    ieee: bool,
}

const FORMATS: [Format; 6] = [
    Format {
        dtype: "double",
        exp_bits: 11,
        mant_bits: 52,
        ieee: true,
    },
    Format {
        dtype: "float",
        exp_bits: 8,
        mant_bits: 23,
        ieee: true,
    },
    Format {
        dtype: "half",
        exp_bits: 5,
        mant_bits: 10,
        ieee: true,
    },
    Format {
        dtype: "bfloat16",
        exp_bits: 8,
        mant_bits: 7,
        ieee: true,
    },
    Format {
        dtype: "f8e4m3",
        exp_bits: 4,
        mant_bits: 3,
        ieee: false,
    },
    Format {
        dtype: "f8e5m2",
        exp_bits: 5,
        mant_bits: 2,
        ieee: true,
    },
];

impl Format {
    fn bits(self) -> u32 {
        1 + self.exp_bits + self.mant_bits
    }
    /// The value of a code: `(-1)^s × m × 2^(e - bias - mant_bits)`, with
    /// the implicit leading one for normal codes; None for NaN.
    fn decode(self, code: u64) -> Option<f64> {
        if self.bits() == 64 {
            // double is f64 itself (and 2^-1074 is past what powi computes exactly)
            let x = f64::from_bits(code);
            return (!x.is_nan()).then_some(x);
        }
        let mant = code & ((1 << self.mant_bits) - 1);
        let exp = (code >> self.mant_bits) & ((1 << self.exp_bits) - 1);
        let neg = code >> (self.exp_bits + self.mant_bits) & 1 == 1;
        let top = (1 << self.exp_bits) - 1;
        let bias = (1i32 << (self.exp_bits - 1)) - 1;
        let sign = if neg { -1.0 } else { 1.0 };
        if self.ieee && exp == top {
            return (mant == 0).then_some(sign * f64::INFINITY);
        }
        if !self.ieee && exp == top && mant == (1 << self.mant_bits) - 1 {
            return None;
        }
        let (m, e) = if exp == 0 {
            (mant, 1 - bias)
        } else {
            (mant | 1 << self.mant_bits, exp as i32 - bias)
        };
        // m < 2^53 and the power of two is in f64's range: both exact
        Some(sign * m as f64 * 2f64.powi(e - self.mant_bits as i32))
    }
    /// A random value of the type (NaN excluded), with the type's extremes
    /// and signed zeros mixed in.
    fn random(self, rng: &mut StdRng) -> f64 {
        loop {
            let code = if rng.random_range(0..8) == 0 {
                // the ends of the range: ±0, the smallest subnormals, the
                // largest codes, infinity and the largest finite value
                let top = (1u64 << (self.bits() - 1)) - 1;
                let inf = ((1u64 << self.exp_bits) - 1) << self.mant_bits;
                let pick = [0, 1, 2, top, top - 1, inf, inf - 1][rng.random_range(0..7)];
                pick | u64::from(rng.random::<bool>()) << (self.bits() - 1)
            } else {
                rng.random::<u64>() >> (64 - self.bits())
            };
            if let Some(x) = self.decode(code) {
                return x;
            }
        }
    }
}

/// JSON text of a float, written the way this test chooses (Rust's
/// shortest round-trip digits, in exponent form), not by rankwise.
fn json_text(x: f64) -> String {
    if x.is_infinite() {
        return if x > 0.0 { "\"inf\"" } else { "\"-inf\"" }.to_string();
    }
    format!("{x:e}")
}

/// A float from rankwise's JSON: a number, or "inf", "-inf", "nan".
fn json_float(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().unwrap(),
        Value::String(s) if s == "inf" => f64::INFINITY,
        Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
        Value::String(s) if s == "nan" => f64::NAN,
        other => panic!("not a float: {other}"),
    }
}

/// A float from rankwise's text output.
fn text_float(s: &str) -> f64 {
    match s {
        "inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        "nan" => f64::NAN,
        _ => s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}")),
    }
}

fn assert_same_bits(got: f64, want: f64, what: &str) {
    assert_eq!(
        got.to_bits(),
        want.to_bits(),
        "{what}: got {got:e}, expected {want:e}"
    );
}

/// The `[...]` lists of each rank row of `run`'s text table: (input, output).
fn text_rows(stdout: &str, ranks: usize) -> Vec<(Vec<String>, Vec<String>)> {
    let rows: Vec<(Vec<String>, Vec<String>)> = stdout
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| {
            let lists: Vec<Vec<String>> = l
                .split('[')
                .skip(1)
                .map(|part| {
                    let inner = &part[..part.find(']').unwrap()];
                    inner.split(", ").map(String::from).collect()
                })
                .collect();
            assert!(lists.len() >= 2, "{l}");
            (
                lists[lists.len() - 2].clone(),
                lists[lists.len() - 1].clone(),
            )
        })
        .collect();
    assert_eq!(rows.len(), ranks, "{stdout}");
    rows
}

/// Random values of every float type go through AllGather bit for bit: in
/// the JSON output, in the text output, and again when rankwise's own JSON
/// inputs are given back to it.
#[test]
fn every_float_type_round_trips_bit_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let (n, q) = (3usize, 150usize);
    for (k, f) in FORMATS.into_iter().enumerate() {
        let mut rng = StdRng::seed_from_u64(100 + k as u64);
        let values: Vec<Vec<f64>> = (0..n)
            .map(|_| (0..q).map(|_| f.random(&mut rng)).collect())
            .collect();
        let texts: Vec<Vec<String>> = values
            .iter()
            .map(|xs| xs.iter().map(|x| json_text(*x)).collect())
            .collect();
        let file = write_inputs(tmp.path(), &format!("{}.json", f.dtype), &texts);
        let file = file.to_str().unwrap();
        let (ns, qs) = (n.to_string(), q.to_string());
        let args = [
            "run",
            "all_gather",
            "-n",
            &ns,
            "-c",
            &qs,
            "--dtype",
            f.dtype,
            "--inputs",
            file,
            "--json",
        ];
        let out = rankwise(&args).expect(0);
        let v = out.json();
        let check = |v: &Value, how: &str| {
            for r in 0..n {
                for j in 0..q {
                    let what = format!("{} {how}: rank {r} input {j}", f.dtype);
                    assert_same_bits(json_float(&v["inputs"][r][j]), values[r][j], &what);
                }
                for (i, y) in v["outputs"][r].as_array().unwrap().iter().enumerate() {
                    let what = format!("{} {how}: rank {r} output {i}", f.dtype);
                    assert_same_bits(json_float(y), values[i / q][i % q], &what);
                }
            }
        };
        check(&v, "json");
        // rankwise's own printed inputs, given back to it
        let start = out.stdout.find("\"inputs\":").unwrap();
        let end = out.stdout.find(",\"outputs\":").unwrap();
        let again = tmp.path().join(format!("{}-again.json", f.dtype));
        std::fs::write(&again, format!("{{{}}}", &out.stdout[start..end])).unwrap();
        let mut args2 = args;
        args2[9] = again.to_str().unwrap();
        check(
            &rankwise(&args2).expect(0).json(),
            "json, inputs as printed",
        );
        // the text table
        let text = rankwise(&args[..10]).expect(0);
        for (r, (input, output)) in text_rows(&text.stdout, n).into_iter().enumerate() {
            for (j, s) in input.iter().enumerate() {
                let what = format!("{} text: rank {r} input {j}", f.dtype);
                assert_same_bits(text_float(s), values[r][j], &what);
            }
            assert_eq!(output.len(), n * q);
            for (i, s) in output.iter().enumerate() {
                let what = format!("{} text: rank {r} output {i}", f.dtype);
                assert_same_bits(text_float(s), values[i / q][i % q], &what);
            }
        }
    }
}

/// Max and Min select: each output element is, bit for bit, one of the
/// inputs at its index, and no input lies beyond it. (Not for e5m2's
/// infinities: NCCL converts every fp8 result with saturation, so a Max
/// over +inf gives 57344.)
#[test]
fn max_and_min_return_one_of_the_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    let (n, q) = (4usize, 200usize);
    for (k, f) in FORMATS.into_iter().enumerate() {
        let mut rng = StdRng::seed_from_u64(200 + k as u64);
        let mut draw = || loop {
            let x = f.random(&mut rng);
            if f.dtype != "f8e5m2" || x.is_finite() {
                return x;
            }
        };
        let values: Vec<Vec<f64>> = (0..n).map(|_| (0..q).map(|_| draw()).collect()).collect();
        let texts: Vec<Vec<String>> = values
            .iter()
            .map(|xs| xs.iter().map(|x| json_text(*x)).collect())
            .collect();
        let file = write_inputs(tmp.path(), &format!("{}.json", f.dtype), &texts);
        for op in ["max", "min"] {
            let v = all_reduce_json(n, q, f.dtype, op, &file);
            for r in 0..n {
                for j in 0..q {
                    let y = json_float(&v["outputs"][r][j]);
                    let column: Vec<f64> = values.iter().map(|xs| xs[j]).collect();
                    assert!(
                        column.iter().any(|x| x.to_bits() == y.to_bits()),
                        "{} {op}: rank {r} element {j} = {y:e} is none of the inputs {column:?}",
                        f.dtype
                    );
                    let beyond = column
                        .iter()
                        .any(|x| if op == "max" { *x > y } else { *x < y });
                    assert!(
                        !beyond,
                        "{} {op}: element {j} = {y:e} of {column:?}",
                        f.dtype
                    );
                }
            }
        }
    }
}

/// Values that are exactly elements of their type, written as the shortest
/// decimal of the f64 that widens them, are accepted and come back as given.
#[test]
fn decimals_exact_in_their_type_are_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&str, &str, f64); 7] = [
        // the float nearest 0.0094708036
        (
            "float",
            "0.009470803663134575",
            "0.0094708036".parse::<f32>().unwrap() as f64,
        ),
        ("float", "3.4028234663852886e38", f32::MAX as f64),
        ("float", "1.401298464324817e-45", f32::from_bits(1) as f64),
        ("half", "5.960464477539063e-08", 2f64.powi(-24)),
        ("half", "65504", 65504.0),
        ("bfloat16", "3.3895313892515355e38", 255.0 * 2f64.powi(120)),
        ("double", "12.500243810835503", 12.500243810835503),
    ];
    for (i, (dtype, text, want)) in cases.into_iter().enumerate() {
        let file = write_inputs(
            tmp.path(),
            &format!("{i}.json"),
            &[vec![text.to_string()], vec!["0".to_string()]],
        );
        let v = run_json(&[
            "broadcast",
            "-n",
            "2",
            "-c",
            "1",
            "--dtype",
            dtype,
            "--inputs",
            file.to_str().unwrap(),
        ]);
        for r in 0..2 {
            assert_same_bits(
                json_float(&v["outputs"][r][0]),
                want,
                &format!("{dtype} {text}"),
            );
        }
    }
}

/// half 65504 + 65504 overflows to inf, printed as the string "inf": not
/// null, which stays the mark of a rank with no output.
#[test]
fn float_overflow_is_inf_and_distinct_from_no_output() {
    let tmp = tempfile::tempdir().unwrap();
    let file = write_inputs(
        tmp.path(),
        "in.json",
        &[vec!["65504".into()], vec!["65504".into()]],
    );
    let file = file.to_str().unwrap();
    let v = run_json(&[
        "reduce", "-n", "2", "-c", "1", "--dtype", "half", "--root", "1", "--inputs", file,
    ]);
    assert_eq!(v["outputs"], json!([null, ["inf"]]));
    let v = run_json(&[
        "all_reduce",
        "-n",
        "2",
        "-c",
        "1",
        "--dtype",
        "half",
        "--inputs",
        file,
    ]);
    assert_eq!(v["outputs"], json!([["inf"], ["inf"]]));
    // non-finite inputs given as strings, and -0, come back as they went in
    let file = write_inputs(
        tmp.path(),
        "special.json",
        &[
            ["\"inf\"", "\"-inf\"", "\"nan\"", "-0", "\"+Infinity\""]
                .map(String::from)
                .to_vec(),
            ["0", "0", "0", "0", "0"].map(String::from).to_vec(),
        ],
    );
    let args = [
        "run",
        "broadcast",
        "-n",
        "2",
        "-c",
        "5",
        "--dtype",
        "bfloat16",
        "--inputs",
        file.to_str().unwrap(),
    ];
    let v = rankwise(&[&args[..], &["--json"][..]].concat())
        .expect(0)
        .json();
    assert_eq!(v["outputs"][1], json!(["inf", "-inf", "nan", -0.0, "inf"]));
    assert!(v["outputs"][1][3].as_f64().unwrap().is_sign_negative());
    let text = rankwise(&args).expect(0);
    assert!(
        text.stdout.contains("[inf, -inf, nan, -0, inf]"),
        "{}",
        text.stdout
    );
}

// ---- integers ----

/// The case: 64-bit products wrap; computed here from the inputs
/// rankwise prints, with i64 wrapping multiplication.
#[test]
fn int64_products_wrap_exactly() {
    let v = run_json(&[
        "all_reduce",
        "--ranks",
        "8",
        "--count",
        "2",
        "--dtype",
        "int64",
        "--op",
        "prod",
    ]);
    for j in 0..2 {
        let want = (0..8).fold(1i64, |a, s| {
            a.wrapping_mul(v["inputs"][s][j].as_i64().unwrap())
        });
        for r in 0..8 {
            assert_eq!(
                v["outputs"][r][j].as_i64(),
                Some(want),
                "rank {r} element {j}"
            );
        }
    }
    // the value the issue gives: 1·10001·20001·…·70001 wrapped to 64 bits
    assert_eq!(v["outputs"][0][1].as_i64(), Some(6593534113640925121));
}

/// uint64's and int64's extremes, and integers above 2^53, pass through exactly.
#[test]
fn sixty_four_bit_extremes_pass_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let u: Vec<u64> = vec![u64::MAX, (1 << 53) + 1, 0, u64::MAX - 1];
    let i: Vec<i64> = vec![i64::MIN, i64::MAX, -(1 << 53) - 1, -1];
    for (dtype, texts, want) in [
        (
            "uint64",
            u.iter().map(|x| x.to_string()).collect::<Vec<_>>(),
            u.iter().map(|x| json!(x)).collect::<Vec<_>>(),
        ),
        (
            "int64",
            i.iter().map(|x| x.to_string()).collect(),
            i.iter().map(|x| json!(x)).collect(),
        ),
    ] {
        let file = write_inputs(tmp.path(), "in.json", &[texts.clone(), texts]);
        let args = [
            "run",
            "broadcast",
            "-n",
            "2",
            "-c",
            "4",
            "--dtype",
            dtype,
            "--inputs",
            file.to_str().unwrap(),
        ];
        let v = rankwise(&[&args[..], &["--json"][..]].concat())
            .expect(0)
            .json();
        assert_eq!(v["outputs"][1], Value::Array(want.clone()), "{dtype}");
        let text = rankwise(&args).expect(0).stdout;
        let printed: Vec<String> = want.iter().map(|x| x.to_string()).collect();
        assert!(
            text.contains(&format!("[{}]", printed.join(", "))),
            "{dtype}: {text}"
        );
    }
}

/// Random 64-bit inputs, many above 2^53, reduced with every op: the
/// expected values are Rust's wrapping arithmetic in i64 / u64.
#[test]
fn sixty_four_bit_reductions_match_wrapping_arithmetic() {
    let tmp = tempfile::tempdir().unwrap();
    let q = 24;
    for seed in 0..4u64 {
        let mut rng = StdRng::seed_from_u64(300 + seed);
        let n: usize = rng.random_range(2..=8);
        let draw = |rng: &mut StdRng| -> u64 {
            match rng.random_range(0..4) {
                0 => rng.random(),
                1 => (1u64 << 53)
                    .wrapping_add(rng.random_range(0..64))
                    .wrapping_sub(32),
                2 => [0, 1, u64::MAX, u64::MAX / 2, u64::MAX / 2 + 1][rng.random_range(0..5)],
                _ => rng.random_range(0..1000),
            }
        };
        let bits: Vec<Vec<u64>> = (0..n)
            .map(|_| (0..q).map(|_| draw(&mut rng)).collect())
            .collect();
        for signed in [false, true] {
            let dtype = if signed { "int64" } else { "uint64" };
            let texts: Vec<Vec<String>> = bits
                .iter()
                .map(|xs| {
                    xs.iter()
                        .map(|b| {
                            if signed {
                                (*b as i64).to_string()
                            } else {
                                b.to_string()
                            }
                        })
                        .collect()
                })
                .collect();
            let file = write_inputs(tmp.path(), &format!("{seed}-{dtype}.json"), &texts);
            for op in ["sum", "prod", "max", "min", "avg"] {
                let v = all_reduce_json(n, q, dtype, op, &file);
                for j in 0..q {
                    let col: Vec<u64> = bits.iter().map(|xs| xs[j]).collect();
                    let want = if signed {
                        let c: Vec<i64> = col.iter().map(|b| *b as i64).collect();
                        let sum = c.iter().fold(0i64, |a, x| a.wrapping_add(*x));
                        json!(match op {
                            "sum" => sum,
                            "prod" => c.iter().fold(1i64, |a, x| a.wrapping_mul(*x)),
                            "max" => *c.iter().max().unwrap(),
                            "min" => *c.iter().min().unwrap(),
                            _ => sum / n as i64,
                        })
                    } else {
                        let sum = col.iter().fold(0u64, |a, x| a.wrapping_add(*x));
                        json!(match op {
                            "sum" => sum,
                            "prod" => col.iter().fold(1u64, |a, x| a.wrapping_mul(*x)),
                            "max" => *col.iter().max().unwrap(),
                            "min" => *col.iter().min().unwrap(),
                            _ => sum / n as u64,
                        })
                    };
                    for r in 0..n {
                        assert_eq!(
                            v["outputs"][r][j], want,
                            "{dtype} {op} N={n} seed {seed}: rank {r} element {j} of {col:?}"
                        );
                    }
                }
            }
        }
    }
}
