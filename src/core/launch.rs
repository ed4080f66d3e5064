//! One launch: the calls a rank hands an engine at once (a single call, or
//! the fused calls of a group), and what a rank shows the others of it so
//! they can agree before any data moves.

use super::Call;

/// The work of one launch, in call order: collectives first fused as one
/// operation, then the point-to-point calls that progress together.
#[derive(Debug, Default, Clone)]
pub struct Launch {
    /// The launch's number on its communicator (what the trace prints as
    /// `opCount`); the same on every rank for matching launches.
    pub op_count: u64,
    pub colls: Vec<Call>,
    pub p2p: Vec<Call>,
}

impl Launch {
    pub fn is_empty(&self) -> bool {
        self.colls.is_empty() && self.p2p.is_empty()
    }

    /// The NCCL name of the launch's first call (`group` when empty).
    pub fn first_name(&self) -> &'static str {
        self.colls
            .first()
            .or(self.p2p.first())
            .map(|c| c.func.name())
            .unwrap_or("group")
    }

    /// `AllReduce (opCount 3)`, or `a group of 4 calls starting with Send
    /// (opCount 3)`: how waits and timeouts name the launch.
    pub fn describe(&self) -> String {
        let n = self.colls.len() + self.p2p.len();
        if n > 1 {
            format!(
                "a group of {n} calls starting with {} (opCount {:x})",
                self.first_name(),
                self.op_count
            )
        } else {
            format!("{} (opCount {:x})", self.first_name(), self.op_count)
        }
    }

    /// Empties the launch, keeping its allocations for the next one.
    pub fn clear(&mut self) {
        self.colls.clear();
        self.p2p.clear();
    }

    /// What this rank shows the others of its collectives.
    pub fn posted(&self) -> Posted {
        Posted {
            op_count: self.op_count,
            calls: self.colls.clone(),
        }
    }
}

/// The collective part of one rank's launch as the other ranks see it: what
/// [`crate::core::agree`] compares. Addresses are never compared (each
/// rank's buffers are its own) and travel only where an engine moves data
/// with them (the local engine's mailbox), not in `core::wire`'s words.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Posted {
    pub op_count: u64,
    pub calls: Vec<Call>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{DataType, Func, RedOp};

    fn call(func: Func) -> Call {
        Call {
            func,
            sendbuff: 0,
            recvbuff: 0,
            count: 1,
            datatype: DataType::Int8,
            op: RedOp::Sum,
            op_code: 0,
            root: 0,
        }
    }

    #[test]
    fn a_launch_names_itself_by_its_first_call() {
        let mut l = Launch {
            op_count: 0x1a,
            ..Launch::default()
        };
        assert_eq!(l.describe(), "group (opCount 1a)");
        l.p2p.push(call(Func::Send));
        assert_eq!(l.describe(), "Send (opCount 1a)");
        l.colls.push(call(Func::AllGather));
        assert_eq!(
            l.describe(),
            "a group of 2 calls starting with AllGather (opCount 1a)"
        );
        l.clear();
        assert!(l.is_empty());
    }
}
