//! `diff`: the local engine and NCCL on the same inputs, every op × datatype × reduction, and which rounding rule NCCL's results follow.

use super::*;

#[derive(Debug, Clone, Copy)]
pub(crate) struct DiffCase {
    func: Func,
    dt: DataType,
    op: RedOp,
    root: usize,
}

pub(crate) fn premul_scalar(dt: DataType) -> f64 {
    if dt.is_float() { 0.3 } else { 3.0 }
}

pub(crate) fn diff_cases(n: usize) -> Vec<DiffCase> {
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

pub(crate) fn case_key(c: &DiffCase) -> String {
    format!("{} {} {}", c.func, c.dt.name(), c.op.name())
}

/// One rank's outputs of every diff case, as hex. With `isolate`, each
/// case runs on its own communicator split from this one, and a case NCCL
/// rejects is recorded as `error: …` instead of ending the job (NCCL's
/// first error fails the communicator it ran on).
pub(crate) fn diff_job(comm: &mut Comm, args: &Value) -> Result<Value> {
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
pub(crate) fn diff_case(comm: &mut Comm, args: &Value, k: usize, c: &DiffCase) -> Result<String> {
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
pub(crate) fn ordinal(dt: DataType, x: f64) -> i64 {
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
pub(crate) fn all_folds(
    xs: &[f64],
    op: &dyn Fn(f64, f64) -> f64,
    rnd: &dyn Fn(f64) -> f64,
) -> Vec<u64> {
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
pub(crate) fn fused_chains(xs: &[f64], s: f64, rnd: &dyn Fn(f64) -> f64) -> Vec<u64> {
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
pub(crate) fn rules(dt: DataType, op: RedOp, xs: &[f64]) -> Vec<(String, Vec<u64>)> {
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

pub(crate) fn named_rules(dt: DataType, op: RedOp, xs: &[f64]) -> Vec<(&'static str, Vec<u64>)> {
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

pub(crate) fn diff(n: usize, count: usize, isolate: bool) -> Result<()> {
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
