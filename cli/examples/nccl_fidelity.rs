//! How faithful rankwise's local engine is to real NCCL, measured on a GPU.
//! Every measurement runs rank processes through rankwise's own process
//! launcher (several ranks may share one GPU), so it needs what
//! `rankwise verify --engine nccl` needs: NCCL 2.28+ and a GPU.
//!
//! ```text
//! nccl_fidelity diff     --ranks N [--count C]  local vs nccl, same inputs, every op × dtype × reduction
//! nccl_fidelity argcheck --ranks N              bad arguments straight to NCCL, beside rankwise's verdict
//! nccl_fidelity fault    --ranks N --scenario S --timeout SECS [--checks]
//!                                               a misuse scenario on NCCL (rankwise's checks off unless --checks)
//! nccl_fidelity misuse   [--timeout SECS]       every misuse scenario, rankwise's checks on
//! nccl_fidelity misuse   --checks-off [--timeout SECS] [--scenarios A,B,…]
//!                                               every misuse scenario on NCCL alone: one JSON line each
//! nccl_fidelity percall  [--iters K]            time per call: rankwise's path vs a bare ncclAllReduce loop (N=1)
//! ```
//!
//! Without a GPU each command says what it looked for and exits 1.

use rankwise::core::{DataType, Element, F8E4M3, F8E5M2, Func, RawCall, Scalar, layout};
use rankwise::engine::nccl::raw;
use rankwise::launch::process::{self, Handler, Job};
use rankwise::launch::{self, EngineKind, LaunchOptions};
use rankwise::{Comm, Error, ErrorKind, RedOp, Result};
use rankwise_cli::misuse::Guards;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn jobs() -> Vec<(&'static str, Handler)> {
    let mut j = rankwise_cli::verify::runner::JOBS.to_vec();
    j.push(("diff", diff_job as Handler));
    j.push(("argcheck", argcheck_job as Handler));
    j.push(("fault", fault_job as Handler));
    j.push(("percall", percall_job as Handler));
    j.push(("unchecked", unchecked_job as Handler));
    j
}

fn main() -> ExitCode {
    if let Some(code) = process::serve_if_worker(&jobs()) {
        return code;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().any(|a| a == name);
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let n: usize = opt("--ranks").and_then(|v| v.parse().ok()).unwrap_or(2);
    if let Err(why) = EngineKind::Nccl.available() {
        eprintln!("nccl_fidelity: the nccl engine cannot run here: {why}");
        return ExitCode::from(1);
    }
    println!("engine {}", EngineKind::Nccl.describe());
    let r = match args.first().map(String::as_str) {
        Some("diff") => diff(
            n,
            opt("--count").and_then(|v| v.parse().ok()).unwrap_or(256),
            flag("--isolate"),
        ),
        Some("argcheck") => argcheck(n),
        Some("fault") => fault(
            n,
            &opt("--scenario").unwrap_or_default(),
            Duration::from_secs_f64(
                opt("--timeout")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(20.0),
            ),
            flag("--checks"),
        ),
        Some("misuse") if flag("--checks-off") => misuse_unchecked(
            Duration::from_secs_f64(opt("--timeout").and_then(|v| v.parse().ok()).unwrap_or(5.0)),
            opt("--scenarios"),
        ),
        Some("misuse") => misuse(Duration::from_secs_f64(
            opt("--timeout").and_then(|v| v.parse().ok()).unwrap_or(5.0),
        )),
        Some("percall") => percall(opt("--iters").and_then(|v| v.parse().ok()).unwrap_or(2000)),
        _ => Err(Error::new(
            ErrorKind::InvalidUsage,
            "usage: nccl_fidelity diff|argcheck|fault|percall [--ranks N] …",
        )),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nccl_fidelity: {e}");
            ExitCode::from(1)
        }
    }
}

fn on_nccl(n: usize, opts: &LaunchOptions, name: &str, args: Value) -> Result<Vec<Result<Value>>> {
    let job = Job {
        name: name.into(),
        args,
        capture_trace: false,
    };
    let reports = process::run_job(EngineKind::Nccl, opts, n, &job, None)?;
    Ok(reports.into_iter().map(|r| r.result).collect())
}

// ---------------------------------------------------------------- inputs

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Input element i of rank r for case k: random bits for integers; for
/// floats ±m·2^e with m in [1, 2) and e in -3..=3, rounded to the type.
fn input_value(dt: DataType, k: usize, rank: usize, i: usize) -> Scalar {
    let h = splitmix(((k as u64) << 40) ^ ((rank as u64) << 24) ^ i as u64);
    if !dt.is_float() {
        return Scalar::Int(h as i64 as i128).to_type(dt);
    }
    let m = 1.0 + (h & 0xFFFF_FFFF) as f64 / 4_294_967_296.0;
    let e = ((h >> 32) % 7) as i32 - 3;
    let s = if (h >> 40) & 1 == 1 { -1.0 } else { 1.0 };
    Scalar::Float(s * m * 2f64.powi(e)).to_type(dt)
}

fn encode<T: Element>(vals: &[Scalar]) -> Vec<u8> {
    let v: Vec<T> = vals.iter().map(|s| T::from_scalar(*s)).collect();
    rankwise::core::bytes::of(&v).to_vec()
}

fn decode<T: Element>(bytes: &[u8]) -> Vec<Scalar> {
    let mut v = vec![T::default(); bytes.len() / std::mem::size_of::<T>()];
    let used = std::mem::size_of_val(&v[..]);
    rankwise::core::bytes::of_mut(&mut v).copy_from_slice(&bytes[..used]);
    v.iter().map(|x| x.to_scalar()).collect()
}

macro_rules! by_type {
    ($dt:expr, $f:ident, $arg:expr) => {
        match $dt {
            DataType::Int8 => $f::<i8>($arg),
            DataType::Uint8 => $f::<u8>($arg),
            DataType::Int32 => $f::<i32>($arg),
            DataType::Uint32 => $f::<u32>($arg),
            DataType::Int64 => $f::<i64>($arg),
            DataType::Uint64 => $f::<u64>($arg),
            DataType::Float16 => $f::<half::f16>($arg),
            DataType::Float32 => $f::<f32>($arg),
            DataType::Float64 => $f::<f64>($arg),
            DataType::Bfloat16 => $f::<half::bf16>($arg),
            DataType::Float8e4m3 => $f::<F8E4M3>($arg),
            DataType::Float8e5m2 => $f::<F8E5M2>($arg),
        }
    };
}

fn to_bytes(dt: DataType, vals: &[Scalar]) -> Vec<u8> {
    by_type!(dt, encode, vals)
}
fn to_scalars(dt: DataType, bytes: &[u8]) -> Vec<Scalar> {
    by_type!(dt, decode, bytes)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap_or(0))
        .collect()
}

// ---------------------------------------------------------------- diff

#[derive(Debug, Clone, Copy)]
struct DiffCase {
    func: Func,
    dt: DataType,
    op: RedOp,
    root: usize,
}

fn premul_scalar(dt: DataType) -> f64 {
    if dt.is_float() { 0.3 } else { 3.0 }
}

fn diff_cases(n: usize) -> Vec<DiffCase> {
    let mut out = Vec::new();
    let root = n - 1;
    for func in Func::COLLECTIVES {
        for dt in DataType::ALL {
            if func.reduces() {
                let mut ops = RedOp::BUILTIN.to_vec();
                ops.push(RedOp::PreMulSum(premul_scalar(dt)));
                for op in ops {
                    out.push(DiffCase { func, dt, op, root });
                }
            } else {
                out.push(DiffCase {
                    func,
                    dt,
                    op: RedOp::Sum,
                    root,
                });
            }
        }
    }
    out
}

fn case_key(c: &DiffCase) -> String {
    format!("{} {} {}", c.func, c.dt.name(), c.op.name())
}

/// One rank's outputs of every diff case, as hex. With `isolate`, each
/// case runs on its own communicator split from this one, and a case NCCL
/// rejects is recorded as `error: …` instead of ending the job (NCCL's
/// first error fails the communicator it ran on).
fn diff_job(comm: &mut Comm, args: &Value) -> Result<Value> {
    let isolate = args["isolate"].as_bool().unwrap_or(false);
    let mut out = serde_json::Map::new();
    for (k, c) in diff_cases(comm.size()).iter().enumerate() {
        let r = if isolate {
            let mut d = comm.dup()?;
            diff_case(&mut d, args, k, c)
        } else {
            diff_case(comm, args, k, c)
        };
        let v = match r {
            Ok(hex) => hex,
            Err(e) if isolate => format!("error: {e}"),
            Err(e) => return Err(e),
        };
        out.insert(case_key(c), Value::String(v));
    }
    Ok(Value::Object(out))
}

/// One diff case on one rank: its output as hex.
fn diff_case(comm: &mut Comm, args: &Value, k: usize, c: &DiffCase) -> Result<String> {
    let count = args["count"].as_u64().unwrap_or(256) as usize;
    let (n, me) = (comm.size(), comm.rank());
    {
        let l = layout(c.func, n, me, c.root, count);
        let size = c.dt.size();
        let send = if l.send_elems > 0 {
            let p = comm.alloc(l.send_elems * size)?;
            let vals: Vec<Scalar> = (0..l.send_elems)
                .map(|i| input_value(c.dt, k, me, i))
                .collect();
            comm.write::<u8>(p, &to_bytes(c.dt, &vals))?;
            p
        } else {
            0
        };
        let recv = if l.recv_elems > 0 {
            comm.alloc(l.recv_elems * size)?
        } else {
            0
        };
        let root = c.root as i32;
        match c.func {
            Func::AllReduce => comm.nccl_all_reduce(send, recv, count, c.dt, c.op)?,
            Func::Reduce => comm.nccl_reduce(send, recv, count, c.dt, c.op, root)?,
            Func::ReduceScatter => comm.nccl_reduce_scatter(send, recv, count, c.dt, c.op)?,
            Func::AllGather => comm.nccl_all_gather(send, recv, count, c.dt)?,
            Func::Broadcast => comm.nccl_broadcast(send, recv, count, c.dt, root)?,
            Func::AlltoAll => comm.nccl_all_to_all(send, recv, count, c.dt)?,
            Func::Gather => comm.nccl_gather(send, recv, count, c.dt, root)?,
            Func::Scatter => comm.nccl_scatter(send, recv, count, c.dt, root)?,
            Func::Send | Func::Recv => {}
        }
        let got: Vec<u8> = if recv != 0 {
            comm.read::<u8>(recv, l.recv_elems * size)?
        } else {
            Vec::new()
        };
        for p in [send, recv] {
            if p != 0 {
                comm.free(p)?;
            }
        }
        Ok(hex(&got))
    }
}

/// The position of a float's bits on the number line (ULP distance is the
/// difference of two of these).
fn ordinal(dt: DataType, x: f64) -> i64 {
    let bits: u64 = match dt {
        DataType::Float64 => x.to_bits(),
        DataType::Float32 => (x as f32).to_bits() as u64,
        DataType::Float16 => half::f16::from_f64(x).to_bits() as u64,
        DataType::Bfloat16 => half::bf16::from_f64(x).to_bits() as u64,
        DataType::Float8e4m3 => F8E4M3::from_f64(x).0 as u64,
        DataType::Float8e5m2 => F8E5M2::from_f64(x).0 as u64,
        _ => return x as i64,
    };
    let width = 8 * dt.size() as u32;
    let sign = 1u64 << (width - 1);
    if bits & sign != 0 {
        -((bits & (sign - 1)) as i64)
    } else {
        bits as i64
    }
}

/// Every value a reduction of `xs` can take when each step is rounded
/// with `rnd`, over every association and order (15 at N = 4).
fn all_folds(xs: &[f64], op: &dyn Fn(f64, f64) -> f64, rnd: &dyn Fn(f64) -> f64) -> Vec<u64> {
    fn rec(
        items: &[usize],
        xs: &[f64],
        op: &dyn Fn(f64, f64) -> f64,
        rnd: &dyn Fn(f64) -> f64,
    ) -> Vec<f64> {
        if items.len() == 1 {
            return vec![xs[items[0]]];
        }
        let mut out = Vec::new();
        let first = items[0];
        let rest = &items[1..];
        // subsets of `rest` that join `first` on the left side
        for mask in 0..(1u32 << rest.len()) {
            let left: Vec<usize> = std::iter::once(first)
                .chain(
                    rest.iter()
                        .enumerate()
                        .filter(|(i, _)| mask >> i & 1 == 1)
                        .map(|(_, x)| *x),
                )
                .collect();
            let right: Vec<usize> = rest
                .iter()
                .enumerate()
                .filter(|(i, _)| mask >> i & 1 == 0)
                .map(|(_, x)| *x)
                .collect();
            if right.is_empty() {
                continue;
            }
            for a in rec(&left, xs, op, rnd) {
                for b in rec(&right, xs, op, rnd) {
                    out.push(rnd(op(a, b)));
                }
            }
        }
        out
    }
    let items: Vec<usize> = (0..xs.len()).collect();
    let mut v: Vec<u64> = rec(&items, xs, op, rnd)
        .iter()
        .map(|x| x.to_bits())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Every value of a chain that scales each input as it joins: the first
/// rnd(x·s), then acc = rnd(acc + x·s) with the product unrounded (a fused
/// multiply-add), in every order of the inputs.
fn fused_chains(xs: &[f64], s: f64, rnd: &dyn Fn(f64) -> f64) -> Vec<u64> {
    fn perms(items: Vec<usize>, out: &mut Vec<Vec<usize>>, at: usize) {
        if at == items.len() {
            out.push(items);
            return;
        }
        for i in at..items.len() {
            let mut v = items.clone();
            v.swap(at, i);
            perms(v, out, at + 1);
        }
    }
    let mut orders = Vec::new();
    perms((0..xs.len()).collect(), &mut orders, 0);
    let mut v: Vec<u64> = orders
        .iter()
        .map(|o| {
            let mut acc = rnd(xs[o[0]] * s);
            for &i in &o[1..] {
                acc = rnd(xs[i].mul_add(s, acc));
            }
            acc.to_bits()
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The rules a float reduction could follow, each as the set of results it
/// allows for one element.
fn rules(dt: DataType, op: RedOp, xs: &[f64]) -> Vec<(String, Vec<u64>)> {
    let mut out: Vec<(String, Vec<u64>)> = named_rules(dt, op, xs)
        .into_iter()
        .map(|(name, v)| (name.to_string(), v))
        .collect();
    // NCCL's rule for the type (fused steps for half, float, double and
    // bfloat16; fp8's product rounded first) in one order each: the ring
    // from rank k, k+1, …; "ring from 0" is rank order, what the local
    // engine computes
    let n = xs.len();
    let scalar = match op {
        RedOp::Avg => Some(1.0 / n as f64),
        RedOp::PreMulSum(k) => Some(k),
        _ => None,
    };
    if let Some(k) = scalar {
        let rnd = |x: f64| Scalar::Float(x).to_type(dt).to_f64();
        let s = rnd(k);
        for start in 0..n {
            let mut acc = rnd(xs[start] * s);
            for j in 1..n {
                let x = xs[(start + j) % n];
                acc = rankwise_cli::verify::reference::fused_step(dt, acc, x, s);
            }
            out.push((format!("nccl rule, ring from {start}"), vec![acc.to_bits()]));
        }
    }
    out
}

fn named_rules(dt: DataType, op: RedOp, xs: &[f64]) -> Vec<(&'static str, Vec<u64>)> {
    let n = xs.len() as f64;
    let rnd = |x: f64| Scalar::Float(x).to_type(dt).to_f64();
    let add = |a: f64, b: f64| a + b;
    let mul = |a: f64, b: f64| a * b;
    let wide = |v: &[f64]| v.iter().sum::<f64>();
    let once = |x: f64| vec![rnd(x).to_bits()];
    match op {
        RedOp::Sum => vec![
            ("each step rounded to the type", all_folds(xs, &add, &rnd)),
            ("summed wide, rounded once", once(wide(xs))),
        ],
        RedOp::Prod => vec![("each step rounded to the type", all_folds(xs, &mul, &rnd))],
        RedOp::Avg => {
            let s = rnd(1.0 / n);
            let pre: Vec<f64> = xs.iter().map(|x| rnd(x * s)).collect();
            let post: Vec<u64> = all_folds(xs, &add, &rnd)
                .into_iter()
                .map(|b| rnd(f64::from_bits(b) / n).to_bits())
                .collect();
            let pre32: Vec<f64> = xs
                .iter()
                .map(|x| rnd(x * (1.0 / n as f32) as f64))
                .collect();
            vec![
                (
                    "premul fused: rnd(acc + x·s), s = rnd(1/N)",
                    fused_chains(xs, s, &rnd),
                ),
                (
                    "premul: x·rnd(1/N), steps rounded",
                    all_folds(&pre, &add, &rnd),
                ),
                ("premul with 1/N in f32", all_folds(&pre32, &add, &rnd)),
                ("postdiv: steps rounded, then /N", post),
                ("summed wide, /N, rounded once", once(wide(xs) / n)),
            ]
        }
        RedOp::PreMulSum(k) => {
            let s = rnd(k);
            let pre: Vec<f64> = xs.iter().map(|x| rnd(x * s)).collect();
            let pre32: Vec<f64> = xs.iter().map(|x| rnd(x * (k as f32) as f64)).collect();
            vec![
                (
                    "premul fused: rnd(acc + x·s), s = rnd(s)",
                    fused_chains(xs, s, &rnd),
                ),
                (
                    "premul: x·rnd(s), steps rounded",
                    all_folds(&pre, &add, &rnd),
                ),
                ("premul with s in f32", all_folds(&pre32, &add, &rnd)),
                ("summed wide ×s, rounded once", once(wide(xs) * k)),
            ]
        }
        _ => vec![],
    }
}

fn diff(n: usize, count: usize, isolate: bool) -> Result<()> {
    let args = json!({ "count": count, "isolate": isolate });
    let opts = LaunchOptions::default();
    let t = Instant::now();
    let nccl = launch::all_ok(on_nccl(n, &opts, "diff", args.clone())?)?;
    let t_nccl = t.elapsed();
    let t = Instant::now();
    let local = launch::launch_with(EngineKind::Local, opts, n, |c| diff_job(c, &args))?;
    let t_local = t.elapsed();
    println!(
        "diff: {n} rank(s), count {count}: nccl {:.1} s, local {:.1} s",
        t_nccl.as_secs_f64(),
        t_local.as_secs_f64()
    );
    println!(
        "{:<14} {:<9} {:<10} {:>8} {:>9} {:>8}  rules matching every element (NCCL's output, rank 0)",
        "op", "dtype", "redop", "elements", "differ", "max ULP"
    );
    let mut summary: BTreeMap<String, (usize, usize, i64)> = BTreeMap::new();
    for (k, c) in diff_cases(n).iter().enumerate() {
        let key = case_key(c);
        let refused =
            (0..n).find_map(|r| nccl[r][&key].as_str().filter(|v| v.starts_with("error")));
        if let Some(e) = refused {
            println!(
                "{:<14} {:<9} {:<10} NCCL refused it: {e}",
                c.func.name(),
                c.dt.name(),
                c.op.name()
            );
            continue;
        }
        let (mut elems, mut differ, mut max_ulp) = (0usize, 0usize, 0i64);
        for r in 0..n {
            let a = unhex(nccl[r][&key].as_str().unwrap_or(""));
            let b = unhex(local[r][&key].as_str().unwrap_or(""));
            let (va, vb) = (to_scalars(c.dt, &a), to_scalars(c.dt, &b));
            elems += va.len();
            if va.len() != vb.len() {
                differ += va.len().max(vb.len());
                continue;
            }
            for (x, y) in va.iter().zip(&vb) {
                if x != y {
                    differ += 1;
                    if c.dt.is_float() {
                        let d = (ordinal(c.dt, x.to_f64()) - ordinal(c.dt, y.to_f64())).abs();
                        max_ulp = max_ulp.max(d);
                    } else {
                        max_ulp = i64::MAX;
                    }
                }
            }
        }
        // which rules NCCL's AllReduce follows, element by element
        let mut matched = String::new();
        if c.func == Func::AllReduce && c.dt.is_float() && !matches!(c.op, RedOp::Max | RedOp::Min)
        {
            let out = to_scalars(c.dt, &unhex(nccl[0][&key].as_str().unwrap_or("")));
            let mut hits: BTreeMap<String, usize> = BTreeMap::new();
            for (i, y) in out.iter().enumerate() {
                let xs: Vec<f64> = (0..n)
                    .map(|r| input_value(c.dt, k, r, i).to_f64())
                    .collect();
                for (name, allowed) in rules(c.dt, c.op, &xs) {
                    let e = hits.entry(name).or_default();
                    if allowed.contains(&y.to_f64().to_bits()) {
                        *e += 1;
                    }
                }
            }
            let all: Vec<String> = hits
                .iter()
                .map(|(name, h)| format!("{name} {h}/{}", out.len()))
                .collect();
            matched = all.join("; ");
            // which ring order NCCL's value fits, element by element, as
            // runs of elements: `0-63:1` = elements 0..=63 fit the ring from
            // rank 1 (`*` several, `-` none)
            if matches!(c.op, RedOp::Avg | RedOp::PreMulSum(_)) {
                let fits: Vec<String> = out
                    .iter()
                    .enumerate()
                    .map(|(i, y)| {
                        let xs: Vec<f64> = (0..n)
                            .map(|r| input_value(c.dt, k, r, i).to_f64())
                            .collect();
                        let starts: Vec<String> = rules(c.dt, c.op, &xs)
                            .into_iter()
                            .filter_map(|(name, v)| {
                                let start = name.strip_prefix("nccl rule, ring from ")?;
                                v.contains(&y.to_f64().to_bits()).then(|| start.to_string())
                            })
                            .collect();
                        match starts.len() {
                            0 => "-".to_string(),
                            1 => starts[0].clone(),
                            _ if starts.len() == n => "*".to_string(),
                            _ => starts.join("|"),
                        }
                    })
                    .collect();
                let mut runs = Vec::new();
                let mut at = 0;
                while at < fits.len() {
                    let end = (at..fits.len())
                        .find(|&j| fits[j] != fits[at])
                        .unwrap_or(fits.len());
                    runs.push(format!("{at}-{}:{}", end - 1, fits[at]));
                    at = end;
                }
                matched.push_str(&format!("\n    ring order by element: {}", runs.join(" ")));
            }
        }
        let ulp = match max_ulp {
            i64::MAX => "int".to_string(),
            u => u.to_string(),
        };
        println!(
            "{:<14} {:<9} {:<10} {:>8} {:>9} {:>8}  {matched}",
            c.func.name(),
            c.dt.name(),
            c.op.name(),
            elems,
            differ,
            ulp
        );
        let s = summary
            .entry(format!("{} {}", c.dt.name(), c.op.name()))
            .or_default();
        s.0 += elems;
        s.1 += differ;
        s.2 = s.2.max(max_ulp);
    }
    let bad_ints: usize = diff_cases(n)
        .iter()
        .filter(|c| !c.dt.is_float())
        .filter_map(|c| summary.get(&format!("{} {}", c.dt.name(), c.op.name())))
        .map(|s| s.1)
        .sum();
    println!("integer elements that differ: {bad_ints}");
    println!(
        "per datatype and reduction, every reducing collective: elements that differ / compared, max ULP"
    );
    for (key, (elems, differ, ulp)) in &summary {
        let ulp = match *ulp {
            i64::MAX => "int".to_string(),
            u => u.to_string(),
        };
        println!("  {key:<20} {differ}/{elems} {ulp}");
    }
    Ok(())
}

// ---------------------------------------------------------------- argcheck

struct ArgCase {
    name: &'static str,
    /// Builds and issues the calls; returns what NCCL said to each.
    run: fn(&mut Comm, &raw_ctx::Ctx) -> Result<Vec<raw::Outcome>>,
}

mod raw_ctx {
    pub struct Ctx {
        pub stream: rankwise::engine::nccl::cuda::Stream,
    }
}

fn rc(func: Func, s: usize, r: usize, count: usize, dt: i32, op: i32, root: i32) -> RawCall {
    RawCall {
        func,
        sendbuff: s,
        recvbuff: r,
        count,
        datatype: dt,
        op,
        root,
    }
}

fn note(text: String) -> raw::Outcome {
    raw::Outcome {
        result: text,
        code: -1,
        last_error: String::new(),
    }
}

/// Waits for what NCCL accepted; says how that ended.
fn settle(c: &Comm, x: &raw_ctx::Ctx, out: &mut Vec<raw::Outcome>) {
    settle_within(c, x, out, Duration::from_secs(10))
}

fn settle_within(c: &Comm, x: &raw_ctx::Ctx, out: &mut Vec<raw::Outcome>, limit: Duration) {
    // SAFETY: the communicator is live.
    match unsafe { raw::wait(c.handle(), &x.stream, limit) } {
        Ok(true) => out.push(note("completed".into())),
        Ok(false) => out.push(note(format!("no completion within {limit:?}"))),
        Err(e) => out.push(note(format!("then: {}", e.message))),
    }
}

fn one(c: &mut Comm, x: &raw_ctx::Ctx, call: RawCall) -> Result<Vec<raw::Outcome>> {
    one_within(c, x, call, Duration::from_secs(10))
}

fn one_within(
    c: &mut Comm,
    x: &raw_ctx::Ctx,
    call: RawCall,
    limit: Duration,
) -> Result<Vec<raw::Outcome>> {
    // SAFETY: buffers come from this communicator's allocations (or are
    // NULL), and every rank makes the same call.
    let o = unsafe { raw::call(c.handle(), &x.stream, &call)? };
    // ncclSuccess, or ncclInProgress (7): a non-blocking communicator
    // accepts work and issues it later, so both are waited for
    let accepted = o.code == 0 || o.code == 7;
    let mut out = vec![o];
    if accepted {
        settle_within(c, x, &mut out, limit);
    }
    Ok(out)
}

fn arg_cases() -> Vec<ArgCase> {
    const F32: i32 = 7;
    vec![
        ArgCase {
            name: "Broadcast root -1",
            run: |c, x| {
                let b = c.alloc(64)?;
                one(c, x, rc(Func::Broadcast, b, b, 16, F32, 0, -1))
            },
        },
        ArgCase {
            name: "Broadcast root N",
            run: |c, x| {
                let b = c.alloc(64)?;
                let n = c.size() as i32;
                one(c, x, rc(Func::Broadcast, b, b, 16, F32, 0, n))
            },
        },
        ArgCase {
            name: "AllReduce datatype 12",
            run: |c, x| {
                let b = c.alloc(64)?;
                one(c, x, rc(Func::AllReduce, b, b, 16, 12, 0, 0))
            },
        },
        ArgCase {
            name: "AllReduce op 5 (no PreMulSum made)",
            run: |c, x| {
                let b = c.alloc(64)?;
                one(c, x, rc(Func::AllReduce, b, b, 16, F32, 5, 0))
            },
        },
        ArgCase {
            name: "AllReduce sendbuff NULL",
            run: |c, x| {
                let b = c.alloc(64)?;
                one(c, x, rc(Func::AllReduce, 0, b, 16, F32, 0, 0))
            },
        },
        ArgCase {
            name: "AllReduce recvbuff NULL",
            run: |c, x| {
                let b = c.alloc(64)?;
                one(c, x, rc(Func::AllReduce, b, 0, 16, F32, 0, 0))
            },
        },
        ArgCase {
            name: "AllReduce count 0, NULL buffers",
            run: |c, x| one(c, x, rc(Func::AllReduce, 0, 0, 0, F32, 0, 0)),
        },
        ArgCase {
            name: "Reduce non-root recvbuff NULL",
            run: |c, x| {
                let b = c.alloc(64)?;
                let me = c.rank();
                let recv = if me == 0 { c.alloc(64)? } else { 0 };
                one(c, x, rc(Func::Reduce, b, recv, 16, F32, 0, 0))
            },
        },
        ArgCase {
            name: "AllReduce partial overlap (recvbuff = sendbuff + 4 elements)",
            run: |c, x| {
                let b = c.alloc(128)?;
                one(c, x, rc(Func::AllReduce, b, b + 16, 16, F32, 0, 0))
            },
        },
        ArgCase {
            name: "AllReduce sendbuff extent 1 KiB past its allocation",
            run: |c, x| {
                let s = c.alloc(1024)?;
                let r = c.alloc(2048)?;
                one(c, x, rc(Func::AllReduce, s, r, 512, F32, 0, 0))
            },
        },
        ArgCase {
            name: "AllGather in place at the wrong offset",
            run: |c, x| {
                let n = c.size();
                let b = c.alloc(64 * n)?;
                // the rule is sendbuff == recvbuff + rank*count*size
                let off = ((c.rank() + 1) % n) * 64;
                one(c, x, rc(Func::AllGather, b + off, b, 16, F32, 0, 0))
            },
        },
        ArgCase {
            name: "Send to self without Recv (one group)",
            run: |c, x| {
                let b = c.alloc(64)?;
                let h = c.handle();
                let me = c.rank() as i32;
                let mut out = vec![raw::group_start(h)?];
                // SAFETY: a live buffer of this communicator.
                out.push(unsafe {
                    raw::call(h, &x.stream, &rc(Func::Send, b, 0, 16, F32, 0, me))?
                });
                out.push(raw::group_end(h)?);
                settle(c, x, &mut out);
                Ok(out)
            },
        },
        ArgCase {
            name: "ncclGroupEnd without ncclGroupStart",
            run: |c, _| Ok(vec![raw::group_end(c.handle())?]),
        },
    ]
}

/// What rankwise's checks say to the same case on the local engine.
fn rankwise_verdict(c: &mut Comm, name: &str) -> String {
    const F32: i32 = 7;
    let n = c.size();
    let me = c.rank();
    let r: Result<()> = (|| match name {
        "Broadcast root -1" => {
            let b = c.alloc(64)?;
            c.nccl_broadcast(b, b, 16, F32, -1)
        }
        "Broadcast root N" => {
            let b = c.alloc(64)?;
            c.nccl_broadcast(b, b, 16, F32, n as i32)
        }
        "AllReduce datatype 12" => {
            let b = c.alloc(64)?;
            c.nccl_all_reduce(b, b, 16, 12, 0)
        }
        "AllReduce op 5 (no PreMulSum made)" => {
            let b = c.alloc(64)?;
            c.nccl_all_reduce(b, b, 16, F32, 5)
        }
        "AllReduce sendbuff NULL" => {
            let b = c.alloc(64)?;
            c.nccl_all_reduce(0, b, 16, F32, 0)
        }
        "AllReduce recvbuff NULL" => {
            let b = c.alloc(64)?;
            c.nccl_all_reduce(b, 0, 16, F32, 0)
        }
        "AllReduce count 0, NULL buffers" => c.nccl_all_reduce(0, 0, 0, F32, 0),
        "Reduce non-root recvbuff NULL" => {
            let b = c.alloc(64)?;
            let recv = if me == 0 { c.alloc(64)? } else { 0 };
            c.nccl_reduce(b, recv, 16, F32, 0, 0)
        }
        "AllReduce partial overlap (recvbuff = sendbuff + 4 elements)" => {
            let b = c.alloc(128)?;
            c.nccl_all_reduce(b, b + 16, 16, F32, 0)
        }
        "AllReduce sendbuff extent 1 KiB past its allocation" => {
            let s = c.alloc(1024)?;
            let r = c.alloc(2048)?;
            c.nccl_all_reduce(s, r, 512, F32, 0)
        }
        "AllGather in place at the wrong offset" => {
            let b = c.alloc(64 * n)?;
            let off = ((me + 1) % n) * 64;
            c.nccl_all_gather(b + off, b, 16, F32)
        }
        "Send to self without Recv (one group)" => {
            let b = c.alloc(64)?;
            c.nccl_group_start()?;
            let s = c.nccl_send(b, 16, F32, me as i32);
            let e = c.nccl_group_end();
            s.and(e)
        }
        "ncclGroupEnd without ncclGroupStart" => c.nccl_group_end(),
        _ => Ok(()),
    })();
    match r {
        Ok(()) => "accepted".into(),
        Err(e) => format!("{} ({:?}): {}", e.code().nccl_name(), e.kind, e.message),
    }
}

fn argcheck_job(comm: &mut Comm, _args: &Value) -> Result<Value> {
    let ctx = raw_ctx::Ctx {
        stream: raw::stream()?,
    };
    let mut out = Vec::new();
    for case in arg_cases() {
        // a fresh communicator per case: NCCL's first error fails the one it ran on
        let mut d = comm.dup()?;
        let said = (case.run)(&mut d, &ctx);
        // SAFETY: live communicator.
        let after = unsafe { raw::async_error(d.handle()) }.ok();
        out.push(json!({
            "case": case.name,
            "nccl": match &said {
                Ok(v) => serde_json::to_value(v).unwrap_or(Value::Null),
                Err(e) => Value::String(e.to_string()),
            },
            "async_after": after.map(|a| a.result),
        }));
    }
    Ok(Value::Array(out))
}

fn argcheck(n: usize) -> Result<()> {
    let opts = LaunchOptions::default().with_timeout(Duration::from_secs(60));
    let nccl = on_nccl(n, &opts, "argcheck", Value::Null)?;
    let names: Vec<&str> = arg_cases().iter().map(|c| c.name).collect();
    let local = launch::launch_each(
        EngineKind::Local,
        LaunchOptions::default().with_tracer(rankwise::trace::Tracer::off()),
        n,
        |c| {
            let mut v = Vec::new();
            for name in &names {
                // each case on a fresh communicator: an error fails the one it ran on
                let mut d = c.dup()?;
                v.push(rankwise_verdict(&mut d, name));
            }
            Ok(v)
        },
    )?;
    println!(
        "argcheck: {n} rank(s); NCCL's result and last error on rank 0, rankwise's verdict on rank 0"
    );
    let r0 = nccl[0].as_ref().map_err(Clone::clone)?;
    let l0 = local[0].as_ref().map_err(Clone::clone)?;
    for (i, row) in r0.as_array().into_iter().flatten().enumerate() {
        println!("case: {}", row["case"].as_str().unwrap_or(""));
        println!("  nccl:     {}", row["nccl"]);
        println!("  async:    {}", row["async_after"]);
        println!("  rankwise: {}", l0.get(i).cloned().unwrap_or_default());
    }
    for (r, res) in nccl.iter().enumerate().skip(1) {
        if let Err(e) = res {
            println!("rank {r}: {e}");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- fault

fn fault_job(comm: &mut Comm, args: &Value) -> Result<Value> {
    let name = args["scenario"].as_str().unwrap_or("");
    let s = rankwise_cli::misuse::scenario(name)
        .ok_or_else(|| Error::new(ErrorKind::InvalidUsage, format!("no scenario {name}")))?;
    let mut g = rankwise_cli::misuse::Guards::default();
    let t = Instant::now();
    let r = (s.program)(comm, &mut g);
    let violations = g.violations(comm);
    if let Err(e) = &r {
        // as a failing program ends: the other ranks learn why at once
        comm.finish(Some(e));
    }
    Ok(json!({
        "error": r.err().map(|e| e.to_string()),
        "seconds": t.elapsed().as_secs_f64(),
        "guard_violations": violations,
    }))
}

fn fault(n: usize, scenario: &str, timeout: Duration, checks: bool) -> Result<()> {
    let mut opts = LaunchOptions::default().with_timeout(timeout);
    if !checks {
        // SAFETY: measuring what NCCL does with the mismatched calls of a
        // misuse scenario is the point; every wait is bounded by `timeout`
        // and ends in ncclCommAbort.
        opts = unsafe { opts.without_agreement_checks() };
    }
    let t = Instant::now();
    let res = on_nccl(n, &opts, "fault", json!({ "scenario": scenario }))?;
    println!(
        "fault {scenario}: {n} rank(s), rankwise checks {}, timeout {:?}: {:.1} s",
        if checks { "on" } else { "off" },
        timeout,
        t.elapsed().as_secs_f64()
    );
    for (r, x) in res.iter().enumerate() {
        match x {
            Ok(v) => println!("  rank {r}: {v}"),
            Err(e) => println!("  rank {r}: {e}"),
        }
    }
    Ok(())
}

/// Every misuse scenario on rank processes with rankwise's checks on: the
/// error each rank returns beside the one the catalogue expects.
fn misuse(timeout: Duration) -> Result<()> {
    println!(
        "misuse: every scenario on NCCL rank processes, rankwise's checks on, timeout {timeout:?} (0.3 s where the scenario's rank arrives late)"
    );
    let (mut passed, mut total, mut changed) = (0, 0, 0u64);
    for s in rankwise_cli::misuse::catalogue() {
        let t = if s.short_timeout {
            Duration::from_millis(300)
        } else {
            timeout
        };
        let opts = LaunchOptions::default()
            .with_timeout(t)
            .with_tracer(rankwise::trace::Tracer::off());
        let t0 = Instant::now();
        let res = on_nccl(s.ranks, &opts, "fault", json!({ "scenario": s.name }))?;
        let wall = t0.elapsed().as_secs_f64();
        let mut got = Vec::new();
        let mut ok = true;
        for (r, x) in res.iter().enumerate() {
            let (kind, violations) = match x {
                Ok(v) => (
                    v["error"].as_str().map_or("ok".to_string(), kind_of),
                    v["guard_violations"].as_u64().unwrap_or(0),
                ),
                Err(e) => (format!("{:?}", e.kind), 0),
            };
            let want = (s.expect)(r).map_or("ok".to_string(), |k| format!("{k:?}"));
            ok &= kind == want && violations == 0;
            changed += violations;
            got.push(format!("{r}:{kind}"));
        }
        total += 1;
        passed += usize::from(ok);
        let first = res
            .first()
            .and_then(|x| x.as_ref().ok())
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or_default();
        println!(
            "{:<34} {:<5} {:>5.1} s  {}  | {}",
            s.name,
            if ok { "as" } else { "DIFF" },
            wall,
            got.join(" "),
            first.chars().take(200).collect::<String>()
        );
    }
    println!("{passed} of {total} scenarios end in the catalogue's error on every rank");
    println!("guard bytes changed, all scenarios and ranks: {changed}");
    Ok(())
}

// ------------------------------------------------- misuse, NCCL on its own

/// A misuse scenario whose bad argument rankwise refuses on each rank
/// before NCCL sees it, written as the same calls straight to NCCL
/// (`engine::nccl::raw`): what NCCL returned to each call, then how the
/// work ended within `limit`.
type Unchecked = fn(&mut Comm, &mut Guards, &raw_ctx::Ctx, Duration) -> Result<Vec<raw::Outcome>>;

fn unchecked_program(name: &str) -> Option<Unchecked> {
    const I32: i32 = 2;
    let p: Unchecked = match name {
        "invalid-root" => |c, g, x, t| {
            let b = g.output(c, 64)?;
            one_within(c, x, rc(Func::Broadcast, b, b, 16, I32, 0, 4), t)
        },
        "null-root-recvbuff" => |c, g, x, t| {
            let s = g.input(c, 64)?;
            one_within(c, x, rc(Func::Reduce, s, 0, 16, I32, 0, 2), t)
        },
        "out-of-bounds-extent" => |c, g, x, t| {
            // rank 1's recvbuff one element short, with a guard after it:
            // what NCCL writes past the end lands in the guard
            let q = 16;
            let short = usize::from(c.rank() == 1);
            let s = g.input(c, q * 4)?;
            let r = g.output(c, (4 * q - short) * 4)?;
            one_within(c, x, rc(Func::AllGather, s, r, q, I32, 0, 0), t)
        },
        "illegal-overlap" => |c, g, x, t| {
            let b = g.output(c, 4 * 16 * 4)?;
            one_within(c, x, rc(Func::AllGather, b, b, 16, I32, 0, 0), t)
        },
        "group-end-without-start" => |c, _, _, _| Ok(vec![raw::group_end(c.handle())?]),
        "send-to-self-without-recv" => |c, g, x, t| {
            let s = g.input(c, 64)?;
            let h = c.handle();
            let me = c.rank() as i32;
            let mut out = vec![raw::group_start(h)?];
            // SAFETY: a live buffer of this communicator.
            out.push(unsafe { raw::call(h, &x.stream, &rc(Func::Send, s, 0, 16, I32, 0, me))? });
            out.push(raw::group_end(h)?);
            settle_within(c, x, &mut out, t);
            Ok(out)
        },
        "bad-datatype-code" => |c, g, x, t| {
            let b = g.output(c, 64)?;
            one_within(c, x, rc(Func::AllReduce, b, b, 16, 12, 0, 0), t)
        },
        "bad-op-code" => |c, g, x, t| {
            let b = g.output(c, 64)?;
            one_within(c, x, rc(Func::AllReduce, b, b, 16, I32, 9, 0), t)
        },
        _ => return None,
    };
    Some(p)
}

/// One rank of a misuse scenario with rankwise's cross-rank checks off
/// (and, for the argument scenarios, its per-call checks too): the error
/// or NCCL's answers, the time, the guard bytes changed, and every output
/// buffer's bytes before and after (hex, the first 4 KiB).
fn unchecked_job(comm: &mut Comm, args: &Value) -> Result<Value> {
    let name = args["scenario"].as_str().unwrap_or("");
    let limit = Duration::from_secs_f64(args["timeout"].as_f64().unwrap_or(5.0));
    let s = rankwise_cli::misuse::scenario(name)
        .ok_or_else(|| Error::new(ErrorKind::InvalidUsage, format!("no scenario {name}")))?;
    let mut g = Guards::default();
    let t = Instant::now();
    let (error, nccl) = match unchecked_program(name) {
        Some(p) => {
            let x = raw_ctx::Ctx {
                stream: raw::stream()?,
            };
            match p(comm, &mut g, &x, limit) {
                Ok(o) => (None, Some(o)),
                Err(e) => (Some(e), None),
            }
        }
        None => ((s.program)(comm, &mut g).err(), None),
    };
    let seconds = t.elapsed().as_secs_f64();
    let cap = |b: &[u8]| hex(&b[..b.len().min(4096)]);
    let after = g.outputs(comm);
    let before = g.initial_outputs();
    let changed: Vec<usize> = match &after {
        Ok(a) => a
            .iter()
            .zip(&before)
            .map(|(x, y)| x.iter().zip(y).filter(|(p, q)| p != q).count())
            .collect(),
        Err(_) => Vec::new(),
    };
    let violations = g.violations(comm);
    if let Some(e) = &error {
        comm.finish(Some(e));
    }
    Ok(json!({
        "error": error.map(|e| e.to_string()),
        "nccl": nccl,
        "seconds": seconds,
        "guard_violations": violations,
        "outputs_before": before.iter().map(|b| cap(b)).collect::<Vec<_>>(),
        "outputs_after": match &after {
            Ok(a) => json!(a.iter().map(|b| cap(b)).collect::<Vec<_>>()),
            Err(e) => json!(format!("unreadable: {e}")),
        },
        "output_bytes_changed": changed,
    }))
}

/// Every misuse scenario on NCCL with rankwise's checks off, each rank
/// bounded by `timeout` (then ncclCommAbort) and each job by a deadline
/// past that: one JSON line per scenario, what each rank did.
/// `only`: a comma-separated list of scenario names (default: all).
fn misuse_unchecked(timeout: Duration, only: Option<String>) -> Result<()> {
    let only: Option<Vec<String>> = only.map(|l| l.split(',').map(str::to_string).collect());
    if let Some(names) = &only {
        let known: Vec<&str> = rankwise_cli::misuse::catalogue()
            .iter()
            .map(|s| s.name)
            .collect();
        if let Some(bad) = names.iter().find(|n| !known.contains(&n.as_str())) {
            return Err(Error::new(
                ErrorKind::InvalidUsage,
                format!(
                    "--scenarios: no scenario {bad:?}; the catalogue has {}",
                    known.join(", ")
                ),
            ));
        }
    }
    println!(
        "misuse, rankwise's checks off: every scenario on NCCL rank processes at its catalogue size, timeout {timeout:?}"
    );
    for s in rankwise_cli::misuse::catalogue() {
        if only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|n| n == s.name))
        {
            continue;
        }
        // SAFETY: measuring what NCCL does with the scenario's mismatched
        // calls is the point; every wait is bounded by `timeout` and ends
        // in ncclCommAbort, and the job's deadline kills what remains.
        let opts = unsafe {
            LaunchOptions::default()
                .with_timeout(timeout)
                .with_tracer(rankwise::trace::Tracer::off())
                .without_agreement_checks()
        };
        let job = Job {
            name: "unchecked".into(),
            args: json!({ "scenario": s.name, "timeout": timeout.as_secs_f64() }),
            capture_trace: false,
        };
        let t0 = Instant::now();
        let deadline = t0 + 3 * timeout + Duration::from_secs(30);
        let reports = process::run_job(EngineKind::Nccl, &opts, s.ranks, &job, Some(deadline))?;
        let ranks: Vec<Value> = reports
            .into_iter()
            .map(|r| match r.result {
                Ok(v) => v,
                Err(e) => json!({ "job_error": e.to_string() }),
            })
            .collect();
        println!(
            "{}",
            json!({
                "scenario": s.name,
                "ranks": s.ranks,
                "wall": t0.elapsed().as_secs_f64(),
                "per_rank": ranks,
            })
        );
    }
    Ok(())
}

/// The ErrorKind of `ncclInvalidUsage on rank 2: …` (the text names the
/// code, not the kind), from the code and the message's words.
fn kind_of(e: &str) -> String {
    let code = e.split_whitespace().next().unwrap_or("");
    let has = |w: &str| e.contains(w);
    let k = match code {
        "ncclTimeout" => "Timeout",
        "ncclRemoteError" => "RemoteError",
        "ncclInternalError" if has("panicked") => "Panic",
        "ncclInternalError" => "Internal",
        "ncclSystemError" => "System",
        "ncclInvalidArgument" if has("is out of range") => "InvalidRoot",
        "ncclInvalidArgument" if has("datatype code") => "InvalidDatatype",
        "ncclInvalidArgument" if has("reduction op code") => "InvalidOp",
        "ncclInvalidArgument" if has("is NULL") => "NullPointer",
        "ncclInvalidArgument" if has("overlaps") => "IllegalOverlap",
        "ncclInvalidArgument" if has("overruns") || has("not inside any allocation") => {
            "OutOfBounds"
        }
        "ncclInvalidArgument" => "BadLength",
        "ncclInvalidUsage" if has("has no matching") => "Unmatched",
        "ncclInvalidUsage" if has("failed earlier") => "CommFailed",
        "ncclInvalidUsage" if has("finished its program") => "Deadlock",
        "ncclInvalidUsage" if has("differ") || has("skipped") || has("mismatch") => "Mismatch",
        "ncclInvalidUsage" => "InvalidUsage",
        _ => "?",
    };
    k.to_string()
}

// ---------------------------------------------------------------- percall

fn percall_job(comm: &mut Comm, args: &Value) -> Result<Value> {
    let iters = args["iters"].as_u64().unwrap_or(2000) as usize;
    let stream = raw::stream()?;
    let mut rows = Vec::new();
    for bytes in [8usize, 64 << 20] {
        let count = bytes / 4;
        let s = comm.alloc(bytes)?;
        let r = comm.alloc(bytes)?;
        let k = if bytes > 1 << 20 { iters / 20 } else { iters }.max(10);
        // warm up both paths
        for _ in 0..10 {
            comm.nccl_all_reduce(s, r, count, DataType::Float32, RedOp::Sum)?;
        }
        let t = Instant::now();
        for _ in 0..k {
            comm.nccl_all_reduce(s, r, count, DataType::Float32, RedOp::Sum)?;
        }
        let rankwise_us = t.elapsed().as_secs_f64() * 1e6 / k as f64;
        let call = rc(Func::AllReduce, s, r, count, 7, 0, 0);
        let h = comm.handle();
        let t = Instant::now();
        for _ in 0..k {
            // SAFETY: live buffers of this communicator; one rank; waited for.
            unsafe {
                raw::call(h, &stream, &call)?;
                raw::wait(h, &stream, Duration::from_secs(30))?;
            }
        }
        let bare_us = t.elapsed().as_secs_f64() * 1e6 / k as f64;
        rows.push(json!({
            "bytes": bytes, "iters": k,
            "rankwise_us": rankwise_us, "bare_nccl_us": bare_us,
            "overhead_us": rankwise_us - bare_us,
        }));
        comm.free(s)?;
        comm.free(r)?;
    }
    Ok(Value::Array(rows))
}

fn percall(iters: usize) -> Result<()> {
    let opts = LaunchOptions::default().with_tracer(rankwise::trace::Tracer::off());
    let res = launch::all_ok(on_nccl(1, &opts, "percall", json!({ "iters": iters }))?)?;
    println!("percall: 1 rank, AllReduce float32, each call waited for");
    for row in res[0].as_array().into_iter().flatten() {
        println!(
            "  {:>9} B  {:>5} calls  rankwise {:>9.2} us  bare ncclAllReduce {:>9.2} us  difference {:>7.2} us",
            row["bytes"],
            row["iters"],
            row["rankwise_us"].as_f64().unwrap_or(0.0),
            row["bare_nccl_us"].as_f64().unwrap_or(0.0),
            row["overhead_us"].as_f64().unwrap_or(0.0)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_association_of_four_terms_is_enumerated() {
        // distinct values so every association differs in rounding
        let xs = [1.0, 2.0, 4.0, 8.0];
        let id = |x: f64| x;
        // exact sums agree: one value
        assert_eq!(all_folds(&xs, &|a, b| a + b, &id).len(), 1);
        // the enumeration visits 15 shapes of four terms, 3 of three
        fn shapes(items: &[usize]) -> usize {
            if items.len() == 1 {
                return 1;
            }
            let rest = &items[1..];
            let mut total = 0;
            for mask in 0..(1u32 << rest.len()) {
                let right = rest
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask >> i & 1 == 0)
                    .count();
                if right == 0 {
                    continue;
                }
                let left = items.len() - right;
                total += shapes(&vec![0; left]) * shapes(&vec![0; right]);
            }
            total
        }
        assert_eq!(shapes(&[0, 1, 2, 3]), 15);
        assert_eq!(shapes(&[0, 1, 2]), 3);
        // in half precision the order shows: (2048 + 1) + 1 = 2048, 2048 + (1 + 1) = 2050
        let h = |x: f64| half::f16::from_f64(x).to_f64();
        let got: Vec<f64> = all_folds(&[2048.0, 1.0, 1.0], &|a, b| a + b, &h)
            .into_iter()
            .map(f64::from_bits)
            .collect();
        assert_eq!(got, vec![2048.0, 2050.0]);
        assert_eq!(
            ordinal(DataType::Float32, 1.0)
                - ordinal(
                    DataType::Float32,
                    f32::from_bits(1.0f32.to_bits() - 1) as f64
                ),
            1
        );
        assert_eq!(ordinal(DataType::Float16, -0.0), 0);
    }

    #[test]
    fn inputs_are_values_of_their_type() {
        for dt in DataType::ALL {
            for i in 0..100 {
                let v = input_value(dt, 3, 1, i);
                assert_eq!(v.to_type(dt), v, "{dt:?}");
                assert_eq!(to_scalars(dt, &to_bytes(dt, &[v])), vec![v]);
            }
        }
    }
}
