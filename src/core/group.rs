//! One rank's group state on one communicator, the same for every engine:
//! how deep `ncclGroupStart` nests, the launch the group is collecting, the
//! first error raised inside it (returned at the outermost end, as NCCL
//! does), and the launch counter printed as `opCount`. Also the rules a
//! launch obeys before it reaches an engine: empty collectives are
//! discarded, and a Send to self needs a Recv from self in the same group.

use super::{Call, Error, ErrorKind, Func, Launch, Result};

/// A rank's group nesting, queued launch and launch counter.
#[derive(Debug, Default)]
pub struct Group {
    depth: u32,
    queued: Launch,
    error: Option<Error>,
    op_count: u64,
}

/// What happens to a call once it passed its checks.
#[derive(Debug, PartialEq, Eq)]
pub enum Queued {
    /// Inside a group: it waits for the outermost `ncclGroupEnd`.
    Waiting,
    /// Outside a group: launch now.
    LaunchNow,
    /// A collective of count 0: logged, then dropped, as NCCL does.
    Discarded,
}

/// Whether NCCL drops this call after logging it: a collective of count 0.
/// A zero-count Send/Recv still pairs with its peer.
pub fn discarded(call: &Call) -> bool {
    call.count == 0 && !call.func.is_p2p()
}

/// The group-end rule for sends to self: as many Sends to `me` as Recvs
/// from `me` among `p2p`.
pub fn check_sends_to_self(p2p: &[Call], me: usize) -> Result<()> {
    let to_self = |f: Func| p2p.iter().filter(|c| c.func == f && c.root == me).count();
    let (sends, recvs) = (to_self(Func::Send), to_self(Func::Recv));
    if sends == recvs {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::InvalidUsage,
        format!(
            "ncclGroupEnd: {sends} Send(s) to self but {recvs} Recv(s) from self in this group: a send to self needs a matching recv from self in the same group"
        ),
    ))
}

impl Group {
    pub fn in_group(&self) -> bool {
        self.depth > 0
    }

    /// Launches numbered so far: the opCount the next launch gets.
    pub fn op_count(&self) -> u64 {
        self.op_count
    }

    /// Whether calls wait in an open group.
    pub fn has_queued(&self) -> bool {
        !self.queued.is_empty()
    }

    /// Remembers `err` as the group's error when it is the first raised
    /// inside an open group.
    pub fn note_error(&mut self, err: &Error) {
        if self.in_group() && self.error.is_none() {
            self.error = Some(err.clone());
        }
    }

    /// Queues a checked call and says what happens to it next.
    pub fn queue(&mut self, call: Call) -> Queued {
        if discarded(&call) {
            return Queued::Discarded;
        }
        if call.func.is_p2p() {
            self.queued.p2p.push(call);
        } else {
            self.queued.colls.push(call);
        }
        if self.in_group() {
            Queued::Waiting
        } else {
            Queued::LaunchNow
        }
    }

    /// `ncclGroupStart`.
    pub fn start(&mut self) {
        self.depth += 1;
    }

    /// `ncclGroupEnd` on rank `me`: Ok(true) when the outermost group closed
    /// and its launch should go; Ok(false) for an inner end. Errors: no open
    /// group, the group's first error, or the send-to-self rule; the queued
    /// calls are dropped then.
    pub fn end(&mut self, me: usize) -> Result<bool> {
        let verdict = self.end_keeping(me);
        if verdict.is_err() {
            self.queued.clear();
        }
        verdict
    }

    /// [`Group::end`], except that a group refused at its end keeps its
    /// queued calls, for [`Group::take`]: a rank whose group was refused
    /// tells its peers so, in that launch's place.
    pub fn end_keeping(&mut self, me: usize) -> Result<bool> {
        if self.depth == 0 {
            return Err(Error::new(
                ErrorKind::InvalidUsage,
                "ncclGroupEnd: no group is open (ncclGroupEnd without a matching ncclGroupStart)",
            ));
        }
        self.depth -= 1;
        if self.depth > 0 {
            return Ok(false);
        }
        let verdict = match self.error.take() {
            Some(e) => Err(e),
            None => check_sends_to_self(&self.queued.p2p, me),
        };
        verdict.map(|()| true)
    }

    /// Takes the queued launch, or None when nothing is queued. Number it
    /// with [`Group::number`] once it will really launch, and hand it back
    /// with [`Group::recycle`].
    pub fn take(&mut self) -> Option<Launch> {
        (!self.queued.is_empty()).then(|| std::mem::take(&mut self.queued))
    }

    /// Gives `launch` the next opCount.
    pub fn number(&mut self, launch: &mut Launch) {
        launch.op_count = self.op_count;
        self.op_count += 1;
    }

    /// Keeps a finished launch's allocations for the next one.
    pub fn recycle(&mut self, mut launch: Launch) {
        launch.clear();
        if self.queued.is_empty() {
            self.queued = launch;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{DataType, RedOp};

    fn call(func: Func, count: usize, root: usize) -> Call {
        Call {
            func,
            sendbuff: 0,
            recvbuff: 0,
            count,
            datatype: DataType::Float32,
            op: RedOp::Sum,
            op_code: 0,
            root,
        }
    }

    #[test]
    fn outside_a_group_a_call_launches_and_numbers_count_up() {
        let mut g = Group::default();
        assert_eq!(g.queue(call(Func::AllReduce, 4, 0)), Queued::LaunchNow);
        let mut l = g.take().unwrap();
        g.number(&mut l);
        assert_eq!((l.op_count, l.colls.len()), (0, 1));
        g.recycle(l);
        assert!(g.take().is_none(), "nothing queued after a launch");
        assert_eq!(g.queue(call(Func::Send, 0, 1)), Queued::LaunchNow);
        let mut l = g.take().unwrap();
        g.number(&mut l);
        assert_eq!((l.op_count, g.op_count()), (1, 2));
    }

    #[test]
    fn empty_collectives_are_discarded_and_empty_p2p_is_not() {
        let mut g = Group::default();
        assert_eq!(g.queue(call(Func::Broadcast, 0, 0)), Queued::Discarded);
        assert!(!g.has_queued());
        assert_eq!(g.queue(call(Func::Recv, 0, 0)), Queued::LaunchNow);
    }

    #[test]
    fn nested_groups_launch_once_at_the_outermost_end() {
        let mut g = Group::default();
        g.start();
        g.start();
        assert_eq!(g.queue(call(Func::AllGather, 2, 0)), Queued::Waiting);
        assert_eq!(g.end(0), Ok(false));
        assert_eq!(g.queue(call(Func::Send, 2, 1)), Queued::Waiting);
        assert_eq!(g.end(0), Ok(true));
        let l = g.take().unwrap();
        assert_eq!((l.colls.len(), l.p2p.len()), (1, 1));
    }

    #[test]
    fn the_first_error_in_a_group_comes_back_at_its_end_and_drops_the_group() {
        let mut g = Group::default();
        g.start();
        g.queue(call(Func::AllReduce, 2, 0));
        let first = Error::new(ErrorKind::InvalidOp, "first");
        g.note_error(&first);
        g.note_error(&Error::new(ErrorKind::InvalidOp, "second"));
        assert_eq!(g.end(0).unwrap_err().message, "first");
        assert!(g.take().is_none());
        // outside a group an error is the call's own, not remembered
        g.note_error(&first);
        g.start();
        assert_eq!(g.end(0), Ok(true));
    }

    #[test]
    fn a_send_to_self_needs_a_recv_from_self() {
        let mut g = Group::default();
        g.start();
        g.queue(call(Func::Send, 3, 2));
        let e = g.end(2).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidUsage);
        assert!(e.message.contains("1 Send(s) to self but 0 Recv(s)"), "{e}");
        g.start();
        g.queue(call(Func::Send, 3, 2));
        g.queue(call(Func::Recv, 3, 2));
        assert_eq!(g.end(2), Ok(true));
        assert!(check_sends_to_self(&[call(Func::Send, 3, 1)], 2).is_ok());
    }

    #[test]
    fn an_end_without_a_start_is_refused() {
        let e = Group::default().end(0).unwrap_err();
        assert!(e.message.contains("without a matching ncclGroupStart"));
    }
}
