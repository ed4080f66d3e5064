//! Native cases: one collective through the raw face, with buffers laid out
//! from `core::layout` and, in place, addresses derived from
//! `core::in_place` — so the pointer equation under test is the one `core`
//! states, not one restated here. Also used by `rankwise run`.
//!
//! Every buffer is poisoned (bytes 0xA5) before the input is written, and a
//! 16-byte guard of poison follows each buffer the call reads or writes:
//! after the call the guard must be intact and an out-of-place sendbuff
//! unchanged. A buffer whose contents the contract leaves undefined
//! (non-root Reduce) is never read, guard included.

use super::{Actual, Expect, Outcome};
use crate::verify::reference;
use rankwise::api::{Comm, NULL};
use rankwise::core::trace::fmt_ptr;
use rankwise::core::{DataType, Element, Func, RedOp, Role, Scalar, in_place, is_in_place, layout};
use std::sync::Arc;

const GUARD: usize = 16;
const POISON: u8 = 0xA5;

/// Where a case's inputs come from.
#[derive(Debug, Clone)]
pub enum Inputs {
    /// `[r+1, r+10, 2r]` (seed AllReduce)
    SeedAllReduce,
    /// `[r, r+10, r+100]` (seed AllGather)
    SeedAllGather,
    /// `r*100 + i` over the full `N·q` (seed ReduceScatter)
    SeedReduceScatter,
    /// `r*10 + j` (seed Broadcast)
    SeedBroadcast,
    /// `[r+1, (r+1)*10]` (seed Reduce)
    SeedReduce,
    /// `reference::matrix_input` (full suite)
    Matrix,
    /// Given per rank (`rankwise run`), each an element of the spec's dtype.
    Given(Arc<Vec<Vec<Scalar>>>),
}

/// One raw-face collective.
#[derive(Debug, Clone)]
pub struct Spec {
    pub func: Func,
    pub dtype: DataType,
    pub count: usize,
    pub op: RedOp,
    /// As passed to the API: may be out of range (`rankwise run` shows the rejection).
    pub root: i64,
    pub in_place: bool,
    /// Pass NULL for buffers the contract lets be NULL on this rank
    /// (non-root Reduce's recvbuff, Gather's recvbuff and Scatter's sendbuff off the root).
    pub null_when_allowed: bool,
    pub inputs: Inputs,
}

impl Spec {
    /// The root as a rank index (a negative root matches no rank).
    pub fn root_index(&self) -> usize {
        usize::try_from(self.root).unwrap_or(usize::MAX)
    }

    /// What the contract has this rank's buffers do.
    pub fn layout(&self, n: usize, rank: usize) -> rankwise::core::Layout {
        layout(self.func, n, rank, self.root_index(), self.count)
    }

    /// Rank `rank`'s send buffer contents (its input part, in place).
    pub fn input(&self, n: usize, rank: usize) -> Vec<Scalar> {
        let len = self.layout(n, rank).send_elems;
        let r = rank as f64;
        let formula = match &self.inputs {
            Inputs::SeedAllReduce => vec![r + 1.0, r + 10.0, r * 2.0],
            Inputs::SeedAllGather => vec![r, r + 10.0, r + 100.0],
            Inputs::SeedReduceScatter => (0..len).map(|i| r * 100.0 + i as f64).collect(),
            Inputs::SeedBroadcast => (0..len).map(|j| r * 10.0 + j as f64).collect(),
            Inputs::SeedReduce => vec![r + 1.0, (r + 1.0) * 10.0],
            Inputs::Matrix => {
                reference::matrix_input(self.func, self.op, self.dtype, n, rank, self.count, len)
            }
            Inputs::Given(v) => return v.get(rank).cloned().unwrap_or_default(),
        };
        reference::exact(self.dtype, &formula)
    }

    pub fn expect(&self, n: usize, rank: usize) -> Expect {
        let l = self.layout(n, rank);
        match l.recv_role {
            Role::Undefined => return Expect::NoOutput("no output contract"),
            Role::Unused => {
                return Expect::NoOutput("no output on this rank: recvbuff is unused off the root");
            }
            _ => {}
        }
        let root = self.root_index();
        let seed = |v: Vec<f64>| reference::exact(self.dtype, &v);
        let values = match self.inputs {
            Inputs::SeedAllReduce => seed(reference::seed_all_reduce_sum(n)),
            Inputs::SeedAllGather => seed(reference::seed_all_gather(n)),
            Inputs::SeedReduceScatter => seed(reference::seed_reduce_scatter(n, rank)),
            Inputs::SeedBroadcast => seed(reference::seed_broadcast(root, 10, self.count)),
            Inputs::SeedReduce => seed(reference::seed_reduce(n)),
            _ => {
                let inputs: Vec<Vec<Scalar>> = (0..n).map(|s| self.input(n, s)).collect();
                reference::contract_output(
                    self.func, self.op, self.dtype, rank, root, self.count, &inputs,
                )
                .unwrap_or_default()
            }
        };
        Expect::Values(values)
    }

    /// Whether this rank passes NULL for its send / recv buffer.
    fn nulls(&self, n: usize, rank: usize) -> (bool, bool) {
        let l = self.layout(n, rank);
        if self.in_place && self.in_place_form(rank).is_some() {
            return (false, false);
        }
        let may = |role: Role| matches!(role, Role::Undefined | Role::Unused);
        let allowed = self.null_when_allowed || self.in_place;
        (allowed && may(l.send_role), allowed && may(l.recv_role))
    }

    fn in_place_form(&self, rank: usize) -> Option<rankwise::core::InPlace> {
        in_place(self.func, rank, self.root_index(), self.count)
    }

    /// The pointer relation this rank's call has.
    pub fn relation(&self, n: usize, rank: usize) -> String {
        let l = self.layout(n, rank);
        if self.in_place {
            if let Some(ip) = self.in_place_form(rank) {
                return ip.equation.to_string();
            }
            if self.func.is_rooted() {
                return format!(
                    "no in-place form off the root: {}",
                    null_rule(self.nulls(n, rank), l)
                );
            }
            return format!("{} has no in-place form: sendbuff == recvbuff", self.func);
        }
        let (null_send, null_recv) = self.nulls(n, rank);
        if null_send || null_recv {
            return format!("{} (non-root)", null_rule((null_send, null_recv), l));
        }
        out_of_place_relation(self.func, l).to_string()
    }
}

fn null_rule(nulls: (bool, bool), l: rankwise::core::Layout) -> String {
    match nulls {
        (true, _) => "sendbuff == NULL".to_string(),
        (_, true) => "recvbuff == NULL".to_string(),
        _ => format!(
            "separate buffers, sendbuff {} and recvbuff {}",
            l.send_role.describe(),
            l.recv_role.describe()
        ),
    }
}

/// The out-of-place relation, as the seed's result table words it.
fn out_of_place_relation(func: Func, l: rankwise::core::Layout) -> &'static str {
    match func {
        Func::AllGather => "separate q input and N*q output",
        Func::ReduceScatter => "separate N*q input and q output",
        Func::AlltoAll => "separate N*q input and N*q output",
        Func::Gather if l.recv_role == Role::Written => {
            "separate q input and N*q output on the root"
        }
        Func::Scatter if l.send_role == Role::Read => "separate N*q input on the root and q output",
        _ => "sendbuff != recvbuff",
    }
}

/// Runs the spec on this rank with `input` as its send buffer contents.
pub fn execute(comm: &mut Comm, spec: &Spec, input: &[Scalar]) -> Outcome {
    rankwise::with_element_type!(spec.dtype, T => execute_typed::<T>(comm, spec, input))
}

struct Buffers {
    send: usize,
    recv: usize,
    allocations: Vec<usize>,
    /// (address, bytes) of guards to check after the call
    guards: Vec<(usize, usize)>,
}

fn setup<T: Element>(comm: &mut Comm, spec: &Spec, input: &[T]) -> rankwise::Result<Buffers> {
    let (n, rank) = (comm.size(), comm.rank());
    let size = spec.dtype.size();
    let l = spec.layout(n, rank);
    let mut b = Buffers {
        send: NULL,
        recv: NULL,
        allocations: Vec::new(),
        guards: Vec::new(),
    };
    let ip = if spec.in_place {
        spec.in_place_form(rank)
    } else {
        None
    };
    let undefined = l.recv_role == Role::Undefined;
    let in_place_alias = spec.in_place && ip.is_none() && !spec.func.is_rooted();
    if let Some(ip) = ip {
        // one allocation holding both regions, offset by the equation
        let d = ip.send_minus_recv;
        let (send_off, recv_off) = if d >= 0 {
            (d.unsigned_abs(), 0)
        } else {
            (0, d.unsigned_abs())
        };
        let elems = (send_off + l.send_elems).max(recv_off + l.recv_elems);
        let base = comm.alloc(elems * size + GUARD)?;
        comm.fill(base, elems * size + GUARD, POISON)?;
        b.allocations.push(base);
        b.send = base + send_off * size;
        b.recv = base + recv_off * size;
        if !undefined {
            b.guards.push((base + elems * size, GUARD));
        }
    } else if in_place_alias {
        // an op with no in-place form called with sendbuff == recvbuff: the
        // engine must reject it (`rankwise run --in-place` on AlltoAll)
        let elems = l.send_elems.max(l.recv_elems);
        let base = comm.alloc(elems * size + GUARD)?;
        b.allocations.push(base);
        b.send = base;
        b.recv = base;
    } else {
        let (null_send, null_recv) = spec.nulls(n, rank);
        for (is_send, elems, role, null) in [
            (true, l.send_elems, l.send_role, null_send),
            (false, l.recv_elems, l.recv_role, null_recv),
        ] {
            if null {
                continue;
            }
            let at = comm.alloc(elems * size + GUARD)?;
            comm.fill(at, elems * size + GUARD, POISON)?;
            b.allocations.push(at);
            if matches!(role, Role::Read | Role::Written) {
                b.guards.push((at + elems * size, GUARD));
            }
            if is_send {
                b.send = at;
            } else {
                b.recv = at;
            }
        }
    }
    if !input.is_empty() {
        comm.write(b.send, input)?;
    }
    Ok(b)
}

fn call(comm: &mut Comm, spec: &Spec, send: usize, recv: usize) -> rankwise::Result<()> {
    let (q, dt, op) = (spec.count, spec.dtype, spec.op);
    let root = i32::try_from(spec.root).unwrap_or(if spec.root < 0 { i32::MIN } else { i32::MAX });
    match spec.func {
        Func::AllReduce => comm.nccl_all_reduce(send, recv, q, dt, op),
        Func::Reduce => comm.nccl_reduce(send, recv, q, dt, op, root),
        Func::Broadcast => comm.nccl_broadcast(send, recv, q, dt, root),
        Func::AllGather => comm.nccl_all_gather(send, recv, q, dt),
        Func::ReduceScatter => comm.nccl_reduce_scatter(send, recv, q, dt, op),
        Func::AlltoAll => comm.nccl_all_to_all(send, recv, q, dt),
        Func::Gather => comm.nccl_gather(send, recv, q, dt, root),
        Func::Scatter => comm.nccl_scatter(send, recv, q, dt, root),
        Func::Send => comm.nccl_send(send, q, dt, root),
        Func::Recv => comm.nccl_recv(recv, q, dt, root),
    }
}

fn addresses(spec: &Spec, rank: usize, send: usize, recv: usize) -> String {
    if spec.in_place && send != NULL && recv != NULL && spec.in_place_form(rank).is_some() {
        let size = spec.dtype.size() as isize;
        let diff = send as isize - recv as isize;
        let (lhs, rhs, by) = if diff >= 0 {
            ("sendbuff", "recvbuff", diff)
        } else {
            ("recvbuff", "sendbuff", -diff)
        };
        let (a, b) = if diff >= 0 {
            (send, recv)
        } else {
            (recv, send)
        };
        return format!(
            "{lhs} {} = {rhs} {} + {by} bytes ({} elements)",
            fmt_ptr(a),
            fmt_ptr(b),
            by / size
        );
    }
    format!("sendbuff {} recvbuff {}", fmt_ptr(send), fmt_ptr(recv))
}

fn execute_typed<T: Element>(comm: &mut Comm, spec: &Spec, input: &[Scalar]) -> Outcome {
    let (n, rank) = (comm.size(), comm.rank());
    let l = spec.layout(n, rank);
    let written: Vec<T> = input.iter().map(|v| T::from_scalar(*v)).collect();
    let b = match setup(comm, spec, &written) {
        Ok(b) => b,
        Err(e) => return Outcome::error(e, String::new()),
    };
    let addr = addresses(spec, rank, b.send, b.recv);
    let result = call(comm, spec, b.send, b.recv);
    let mut out = Outcome {
        actual: Actual::Nothing,
        addresses: addr,
        problems: Vec::new(),
    };
    match result {
        Err(e) => out.actual = Actual::Error(e),
        Ok(()) => {
            if l.recv_role == Role::Written {
                match comm.read::<T>(b.recv, l.recv_elems) {
                    Ok(v) => out.actual = Actual::Values(v.iter().map(|x| x.to_scalar()).collect()),
                    Err(e) => out.actual = Actual::Error(e),
                }
            }
            let ip = spec.in_place && spec.in_place_form(rank).is_some();
            if ip
                && !is_in_place(
                    spec.func,
                    rank,
                    spec.root_index(),
                    spec.count,
                    spec.dtype.size(),
                    b.send,
                    b.recv,
                )
            {
                out.problems.push(format!(
                    "the addresses do not satisfy `{}`",
                    spec.relation(n, rank)
                ));
            }
            if !spec.in_place && l.send_role == Role::Read && b.send != NULL {
                // bit for bit: a NaN input is unchanged though NaN != NaN
                let bits = |v: &[T]| v.iter().map(|x| x.to_scalar()).collect::<Vec<_>>();
                match comm.read::<T>(b.send, written.len()) {
                    Ok(v) if bits(&v) == bits(&written) => {}
                    Ok(_) => out
                        .problems
                        .push("sendbuff was modified by an out-of-place call".into()),
                    Err(e) => out.problems.push(format!("cannot read sendbuff back: {e}")),
                }
            }
            for (at, bytes) in &b.guards {
                match comm.read::<u8>(*at, *bytes) {
                    Ok(g) if g.iter().all(|x| *x == POISON) => {}
                    Ok(g) => out.problems.push(format!(
                        "{} bytes past the end of a buffer's contract extent were overwritten",
                        g.iter().filter(|x| **x != POISON).count()
                    )),
                    Err(e) => out.problems.push(format!("cannot read guard: {e}")),
                }
            }
        }
    }
    for a in b.allocations {
        let _ = comm.free(a);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(func: Func, in_place: bool, root: i64, null: bool) -> Spec {
        Spec {
            func,
            dtype: DataType::Int32,
            count: 3,
            op: RedOp::Sum,
            root,
            in_place,
            null_when_allowed: null,
            inputs: Inputs::Matrix,
        }
    }

    #[test]
    fn relations_come_from_core() {
        let s = spec(Func::AllGather, true, 0, false);
        assert_eq!(s.relation(4, 2), "sendbuff == recvbuff + rank*sendcount");
        let s = spec(Func::ReduceScatter, true, 0, false);
        assert_eq!(s.relation(4, 1), "recvbuff == sendbuff + rank*recvcount");
        let s = spec(Func::Reduce, false, 3, true);
        assert_eq!(s.relation(4, 3), "sendbuff != recvbuff");
        assert_eq!(s.relation(4, 0), "recvbuff == NULL (non-root)");
        let s = spec(Func::Gather, true, 1, false);
        assert_eq!(s.relation(4, 1), "sendbuff == recvbuff + root*count");
        assert_eq!(
            s.relation(4, 0),
            "no in-place form off the root: recvbuff == NULL"
        );
        let s = spec(Func::Scatter, true, 1, false);
        assert_eq!(
            s.relation(4, 2),
            "no in-place form off the root: sendbuff == NULL"
        );
    }

    #[test]
    fn every_op_in_place_and_out_of_place_matches_the_reference() {
        for func in Func::COLLECTIVES {
            for in_place in [false, true] {
                if func == Func::AlltoAll && in_place {
                    continue;
                }
                for null in [false, true] {
                    let s = spec(func, in_place, 2, null);
                    let outs = rankwise::local::launch(3, |c| Ok(s.clone().run_here(c))).unwrap();
                    for (r, o) in outs.into_iter().enumerate() {
                        assert!(
                            o.problems.is_empty(),
                            "{func} ip={in_place}: {:?}",
                            o.problems
                        );
                        match (s.expect(3, r), o.actual) {
                            (Expect::Values(e), Actual::Values(a)) => {
                                assert_eq!(a, e, "{func} ip={in_place} rank {r}")
                            }
                            (Expect::NoOutput(_), Actual::Nothing) => {}
                            (e, a) => {
                                panic!("{func} ip={in_place} rank {r}: expected {e:?}, got {a:?}")
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn in_place_all_to_all_is_rejected_by_the_engine() {
        let s = spec(Func::AlltoAll, true, 0, false);
        let outs = rankwise::local::launch(2, |c| Ok(s.run_here(c))).unwrap();
        for o in outs {
            match o.actual {
                Actual::Error(e) => {
                    assert!(e.message.contains("no in-place form"), "{}", e.message)
                }
                a => panic!("{a:?}"),
            }
        }
    }

    impl Spec {
        fn run_here(&self, c: &mut Comm) -> Outcome {
            let input = self.input(c.size(), c.rank());
            execute(c, self, &input)
        }
    }
}
