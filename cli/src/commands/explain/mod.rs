//! `rankwise explain <op>`: the contract of one call, with every number
//! taken from `core` — buffer sizes and roles from `layout`, the in-place
//! offset from `in_place`, valid roots and rejections from `check_call` and
//! `check_buffers`, bandwidth from `Func::alg_bytes`/`bus_factor`.
//! Impossible calls (root out of range, in-place AlltoAll) are explained.
//!
//! Any N a communicator can have (up to `i32::MAX`, NCCL's `int nranks`)
//! is explained in the same few kilobytes: past 16 ranks the listings show
//! the first three, the last, the chosen rank and the root, and count the
//! ranks left out; nothing is computed or kept per rank.

mod listing;
mod sections;

use super::fail;
use rankwise::core::{DataType, Func, Layout, RawCall, RedOp, check_call, layout};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub call: super::CallArgs,
    /// The rank whose pointers and C call to show [default: 0]
    #[arg(long)]
    pub rank: Option<usize>,
}

pub fn run(args: Args) -> ExitCode {
    match explain(&args) {
        Ok(text) => {
            out!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => fail("explain", e),
    }
}

/// The call to explain, its arguments checked.
pub struct Call {
    pub func: Func,
    pub n: usize,
    pub q: usize,
    pub dt: DataType,
    /// the rank whose pointers and C call are shown
    pub me: usize,
    pub op: RedOp,
    /// the root as given (it may be out of range: the rejection is explained)
    pub root_arg: i64,
    pub root_i32: i32,
    pub in_place: bool,
}

impl Call {
    /// The call `args` name, or why they name none at all.
    pub fn from_args(args: &Args) -> Result<Call, String> {
        let (n, q, dt) = (args.call.ranks, args.call.count, args.call.dtype);
        super::check_size(n, q, dt, None)?;
        if n > i32::MAX as usize {
            return Err(format!(
                "--ranks {n} is more ranks than a communicator has: NCCL's nranks is a C int, at most {}",
                i32::MAX
            ));
        }
        let me = args.rank.unwrap_or(0);
        if me >= n {
            return Err(format!(
                "--rank {me} is not a rank of a {n}-rank communicator (ranks are 0..={})",
                n - 1
            ));
        }
        let root_arg = args.call.root.unwrap_or(0);
        let root_i32 = i32::try_from(root_arg)
            .map_err(|_| format!("--root {root_arg} does not fit the C API's int"))?;
        Ok(Call {
            func: args.call.collective,
            n,
            q,
            dt,
            me,
            op: args.call.redop.unwrap_or(RedOp::Sum),
            root_arg,
            root_i32,
            in_place: args.call.in_place,
        })
    }

    /// The call as every rank hands it to the argument check.
    fn raw(&self) -> RawCall {
        RawCall {
            func: self.func,
            sendbuff: 0,
            recvbuff: 0,
            count: self.q,
            datatype: self.dt.code(),
            op: self.op.builtin_code().unwrap_or(0),
            root: self.root_i32,
        }
    }

    /// The root (valid once the argument check passed).
    fn root(&self) -> usize {
        self.root_arg as usize
    }

    /// The root, for ops that have one.
    fn rooted(&self) -> Option<usize> {
        self.func.is_rooted().then_some(self.root())
    }

    fn layout(&self, rank: usize) -> Layout {
        layout(self.func, self.n, rank, self.root(), self.q)
    }

    fn c_call(&self) -> String {
        sections::c_call(
            self.func,
            self.n,
            self.me,
            self.root_arg,
            self.q,
            self.dt,
            self.op,
            self.in_place,
        )
    }
}

/// The call, and notes on arguments the op does not take.
fn heading(c: &Call, args: &Args) -> String {
    let mut head = format!(
        "{} on {} rank(s), count {}, {}",
        c.func.c_name(),
        c.n,
        c.q,
        c.dt.nccl_name()
    );
    if c.func.reduces() {
        head.push_str(&format!(", {}", c.op.nccl_name()));
    }
    if c.func.is_rooted() {
        head.push_str(&format!(", root {}", c.root_arg));
    }
    if c.in_place {
        head.push_str(", in place");
    }
    let mut o = format!("{head}\n\n");
    if args.call.root.is_some() && !c.func.is_rooted() {
        o.push_str(&format!(
            "note: {} takes no root; --root is not part of this call\n\n",
            c.func.name()
        ));
    }
    if args.call.redop.is_some() && !c.func.reduces() {
        o.push_str(&format!(
            "note: {} reduces nothing; --op is not part of this call\n\n",
            c.func.name()
        ));
    }
    o
}

/// The explanation as text, or why the arguments are not a call at all.
pub fn explain(args: &Args) -> Result<String, String> {
    let c = Call::from_args(args)?;
    let mut o = heading(&c, args);
    // the argument check, exactly as every rank runs it
    if let Err(e) = check_call(&c.raw(), c.n, &|_| None) {
        o.push_str(&sections::rejected(&c, &e));
        return Ok(o);
    }
    for section in [
        sections::count_meaning(&c),
        sections::reduction(&c),
        sections::buffers(&c),
        sections::in_place_form(&c),
        sections::reads_and_writes(&c),
        format!("{}\n", sections::roots_section(c.func, c.n)),
        sections::layout_diagram(&c),
        sections::c_call_section(&c),
        sections::bandwidth(&c),
    ] {
        o.push_str(&section);
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::listing::{has_role, ranks_where};
    use super::sections::{check_root, roots_section};
    use super::*;
    use crate::verify::summary::fmt_ranks;
    use proptest::prelude::*;
    use rankwise::core::Role;

    const ROLES: [Role; 5] = [
        Role::Read,
        Role::Written,
        Role::Ignored,
        Role::Unused,
        Role::Undefined,
    ];

    #[test]
    fn ranks_where_matches_every_rank() {
        for func in Func::COLLECTIVES {
            for n in 1..=10 {
                for root in 0..n {
                    for q in [0, 2] {
                        for send in [true, false] {
                            for role in ROLES {
                                let holds = |r| has_role(func, n, r, root, q, send, role);
                                let every: Vec<usize> = (0..n).filter(|r| holds(*r)).collect();
                                let want = (!every.is_empty()).then(|| fmt_ranks(&every));
                                assert_eq!(
                                    ranks_where(n, root, holds),
                                    want,
                                    "{func:?} N={n} root {root} q={q} send={send} {role:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn roots_match_check_call() {
        for func in Func::COLLECTIVES.into_iter().filter(|f| f.is_rooted()) {
            for n in 1..=10usize {
                let valid: Vec<usize> = (0..=n + 1)
                    .filter(|r| check_root(func, n, *r as i32).is_ok())
                    .collect();
                let section = roots_section(func, n);
                assert!(
                    section.contains(&format!("valid roots: {} (", fmt_ranks(&valid))),
                    "{section}"
                );
            }
        }
    }

    proptest! {
        /// Any N a communicator can have: the explanation is a few
        /// kilobytes, its sizes are the closed forms, and every rank is
        /// either listed or counted among the ranks not shown.
        #[test]
        fn any_n_is_explained_compactly(
            n in prop_oneof![1usize..40, 1usize..=i32::MAX as usize],
            q in 0usize..100_000,
            func in proptest::sample::select(Func::COLLECTIVES.to_vec()),
            me_frac in 0.0f64..1.0,
            root_frac in 0.0f64..1.0,
        ) {
            let pick = |f: f64| ((n as f64 * f) as usize).min(n - 1);
            let mut a = args(func, n, q);
            a.rank = Some(pick(me_frac));
            a.call.root = Some(pick(root_frac) as i64);
            let t = explain(&a).unwrap();
            prop_assert!(t.len() < 8000, "{} bytes", t.len());
            // nccl-tests' size: N·q elements for the ops that move N blocks, else q
            let per_call = match func {
                Func::AllGather | Func::ReduceScatter | Func::AlltoAll | Func::Gather | Func::Scatter => n * q * 4,
                _ => q * 4,
            };
            let line = format!("size = {per_call} bytes per call");
            prop_assert!(t.contains(&line), "{}", t);
            if func == Func::AllGather {
                let line = format!("every recvbuff holds N × sendcount = {} elements ({} bytes)", n * q, n * q * 4);
                prop_assert!(t.contains(&line), "{}", t);
            }
            let table = t.split("Buffers (from the contract's layout)\n").nth(1).unwrap();
            let table = table.split("\n\n").next().unwrap();
            let mut covered = 0;
            for row in table.lines().skip(1) {
                match row.split("(").nth(1).and_then(|r| r.strip_suffix(" ranks not shown)").or(r.strip_suffix(" rank not shown)"))) {
                    Some(k) if row.trim_start().starts_with('…') => covered += k.parse::<usize>().unwrap(),
                    _ => covered += 1,
                }
            }
            prop_assert_eq!(covered, n, "{}", table);
        }
    }

    fn args(func: Func, n: usize, q: usize) -> Args {
        Args {
            call: crate::commands::CallArgs {
                collective: func,
                ranks: n,
                count: q,
                dtype: DataType::Int32,
                root: None,
                in_place: false,
                redop: None,
            },
            rank: None,
        }
    }

    #[test]
    fn all_gather_sizes_and_offset() {
        let mut a = args(Func::AllGather, 4, 3);
        a.call.in_place = true;
        a.rank = Some(2);
        let t = explain(&a).unwrap();
        assert!(
            t.contains("every recvbuff holds N × sendcount = 12 elements (48 bytes)"),
            "{t}"
        );
        assert!(
            t.contains("rank 2: sendbuff = recvbuff + 6 elements (24 bytes)"),
            "{t}"
        );
        assert!(
            t.contains("ncclAllGather(recvbuff + 6, recvbuff, 3, ncclInt32, comm, stream);"),
            "{t}"
        );
        assert!(t.contains("busbw = algbw × 0.75"), "{t}");
    }

    #[test]
    fn impossible_calls_are_explained() {
        let mut a = args(Func::Broadcast, 4, 3);
        a.call.root = Some(4);
        let t = explain(&a).unwrap();
        assert!(t.contains("REJECTED"), "{t}");
        assert!(
            t.contains("root 4 is out of range: valid roots are 0..=3"),
            "{t}"
        );
        let mut a = args(Func::AlltoAll, 4, 3);
        a.call.in_place = true;
        let t = explain(&a).unwrap();
        assert!(t.contains("AlltoAll has no in-place form"), "{t}");
        assert!(t.contains("ncclInvalidArgument"), "{t}");
        let mut a = args(Func::AllReduce, 4, 3);
        a.rank = Some(4);
        assert!(explain(&a).unwrap_err().contains("--rank 4 is not a rank"));
    }
}
