//! The operation kinds of docs/reference/contracts.md §1 (`ncclFunc_t`), their names as NCCL
//! logs them, and nccl-tests' bandwidth accounting (§6).

use std::fmt;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Func {
    Broadcast,
    Reduce,
    AllGather,
    ReduceScatter,
    AllReduce,
    AlltoAll,
    Gather,
    Scatter,
    Send,
    Recv,
}

impl Func {
    pub const ALL: [Func; 10] = [
        Func::AllReduce,
        Func::Reduce,
        Func::Broadcast,
        Func::AllGather,
        Func::ReduceScatter,
        Func::AlltoAll,
        Func::Gather,
        Func::Scatter,
        Func::Send,
        Func::Recv,
    ];
    /// Position in [`Func::ALL`] (`Func::ALL[f.index()] == f`): a compact
    /// code for packing a call into words.
    pub fn index(self) -> usize {
        // a match, not a search of ALL: this runs on every checked call
        match self {
            Func::AllReduce => 0,
            Func::Reduce => 1,
            Func::Broadcast => 2,
            Func::AllGather => 3,
            Func::ReduceScatter => 4,
            Func::AlltoAll => 5,
            Func::Gather => 6,
            Func::Scatter => 7,
            Func::Send => 8,
            Func::Recv => 9,
        }
    }
    /// The collectives, in the order the CLI lists them.
    pub const COLLECTIVES: [Func; 8] = [
        Func::AllReduce,
        Func::Reduce,
        Func::Broadcast,
        Func::AllGather,
        Func::ReduceScatter,
        Func::AlltoAll,
        Func::Gather,
        Func::Scatter,
    ];

    /// The name NCCL prints in its trace (`opName`).
    pub fn name(self) -> &'static str {
        match self {
            Func::Broadcast => "Broadcast",
            Func::Reduce => "Reduce",
            Func::AllGather => "AllGather",
            Func::ReduceScatter => "ReduceScatter",
            Func::AllReduce => "AllReduce",
            Func::AlltoAll => "AlltoAll",
            Func::Gather => "Gather",
            Func::Scatter => "Scatter",
            Func::Send => "Send",
            Func::Recv => "Recv",
        }
    }
    /// The C entry point.
    pub fn c_name(self) -> &'static str {
        match self {
            Func::Broadcast => "ncclBroadcast",
            Func::Reduce => "ncclReduce",
            Func::AllGather => "ncclAllGather",
            Func::ReduceScatter => "ncclReduceScatter",
            Func::AllReduce => "ncclAllReduce",
            Func::AlltoAll => "ncclAlltoAll",
            Func::Gather => "ncclGather",
            Func::Scatter => "ncclScatter",
            Func::Send => "ncclSend",
            Func::Recv => "ncclRecv",
        }
    }
    /// The snake_case name the CLI takes (`all_reduce`).
    pub fn cli_name(self) -> &'static str {
        match self {
            Func::Broadcast => "broadcast",
            Func::Reduce => "reduce",
            Func::AllGather => "all_gather",
            Func::ReduceScatter => "reduce_scatter",
            Func::AllReduce => "all_reduce",
            Func::AlltoAll => "all_to_all",
            Func::Gather => "gather",
            Func::Scatter => "scatter",
            Func::Send => "send",
            Func::Recv => "recv",
        }
    }
    /// Accepts `all_reduce`, `allreduce`, `AllReduce`, `ncclAllReduce`, `alltoall`.
    pub fn parse(s: &str) -> Option<Func> {
        let norm: String = s
            .chars()
            .filter(|c| *c != '_' && *c != '-')
            .collect::<String>()
            .to_ascii_lowercase();
        let norm = norm.strip_prefix("nccl").unwrap_or(&norm);
        Func::ALL
            .into_iter()
            .find(|f| f.name().to_ascii_lowercase() == norm)
    }
    /// Takes a root (Reduce, Broadcast, Gather, Scatter).
    pub fn is_rooted(self) -> bool {
        matches!(
            self,
            Func::Reduce | Func::Broadcast | Func::Gather | Func::Scatter
        )
    }
    pub fn is_p2p(self) -> bool {
        matches!(self, Func::Send | Func::Recv)
    }
    /// Takes a reduction op.
    pub fn reduces(self) -> bool {
        matches!(self, Func::AllReduce | Func::Reduce | Func::ReduceScatter)
    }
    /// The name as NCCL logs it in a COLL line (`AllReduce`), on raw bytes
    /// and without allocating; also the spellings older releases and
    /// plugins print (`Bcast`, `AllToAll`).
    pub fn from_log_name(name: &[u8]) -> Option<Func> {
        match name {
            b"Bcast" => Some(Func::Broadcast),
            b"AllToAll" => Some(Func::AlltoAll),
            _ => Func::ALL.into_iter().find(|f| f.name().as_bytes() == name),
        }
    }
    /// The ops whose `bytes` count every rank's block (N·count·size).
    fn counts_every_rank(self) -> bool {
        matches!(
            self,
            Func::AllGather | Func::ReduceScatter | Func::AlltoAll | Func::Gather | Func::Scatter
        )
    }
    /// nccl-tests' `bytes` for one call: the size the timing is divided by.
    pub fn alg_bytes(self, nranks: usize, count: usize, elem_size: usize) -> usize {
        if self.counts_every_rank() {
            nranks * count * elem_size
        } else {
            count * elem_size
        }
    }
    /// [`Func::alg_bytes`] for counts read from outside (a log line may
    /// state any count): `None` when it does not fit in 64 bits. It is also
    /// the size of the largest buffer the call names on one rank.
    pub fn alg_bytes_checked(self, nranks: u64, count: u64, elem_size: u64) -> Option<u64> {
        let per_rank = count.checked_mul(elem_size)?;
        if self.counts_every_rank() {
            per_rank.checked_mul(nranks.max(1))
        } else {
            Some(per_rank)
        }
    }
    /// nccl-tests' bus-bandwidth factor: busbw = algbw × factor.
    pub fn bus_factor(self, nranks: usize) -> f64 {
        let n = nranks as f64;
        match self {
            Func::AllReduce => 2.0 * (n - 1.0) / n,
            Func::AllGather
            | Func::ReduceScatter
            | Func::AlltoAll
            | Func::Gather
            | Func::Scatter => (n - 1.0) / n,
            Func::Broadcast | Func::Reduce | Func::Send | Func::Recv => 1.0,
        }
    }
}

impl fmt::Display for Func {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_inverts_all() {
        for (i, f) in Func::ALL.iter().enumerate() {
            assert_eq!(f.index(), i, "{f}");
        }
    }

    #[test]
    fn parse_accepts_every_spelling() {
        for f in Func::ALL {
            assert_eq!(Func::parse(f.name()), Some(f));
            assert_eq!(Func::parse(f.c_name()), Some(f));
            assert_eq!(Func::parse(f.cli_name()), Some(f));
        }
        assert_eq!(Func::parse("all-to-all"), Some(Func::AlltoAll));
        assert_eq!(Func::parse("allfoo"), None);
    }

    #[test]
    fn log_names_are_nccls_op_names() {
        for f in Func::ALL {
            assert_eq!(Func::from_log_name(f.name().as_bytes()), Some(f));
        }
        assert_eq!(Func::from_log_name(b"Bcast"), Some(Func::Broadcast));
        assert_eq!(Func::from_log_name(b"AllToAll"), Some(Func::AlltoAll));
        for other in [&b"allreduce"[..], b"ncclAllReduce", b"Foo", b""] {
            assert_eq!(Func::from_log_name(other), None);
        }
    }

    #[test]
    fn checked_bytes_agree_with_alg_bytes_or_say_overflow() {
        for f in Func::ALL {
            for (n, q, s) in [(1, 0, 4), (4, 100, 4), (8, 7, 2), (3, 1 << 20, 8)] {
                assert_eq!(
                    f.alg_bytes_checked(n as u64, q as u64, s as u64),
                    Some(f.alg_bytes(n, q, s) as u64),
                    "{f}"
                );
            }
        }
        assert_eq!(Func::AllReduce.alg_bytes_checked(1, u64::MAX, 4), None);
        assert_eq!(
            Func::AllReduce.alg_bytes_checked(1, u64::MAX, 1),
            Some(u64::MAX)
        );
        assert_eq!(Func::AlltoAll.alg_bytes_checked(4, 1 << 62, 1), None);
        assert_eq!(
            Func::AlltoAll.alg_bytes_checked(4, 1 << 61, 1),
            Some(1 << 63)
        );
        // nranks 0 (a corrupted line) counts as one rank
        assert_eq!(Func::AllGather.alg_bytes_checked(0, 10, 4), Some(40));
    }

    #[test]
    fn bandwidth_accounting_follows_nccl_tests() {
        assert_eq!(Func::AllReduce.bus_factor(4), 1.5);
        assert_eq!(Func::AllGather.bus_factor(4), 0.75);
        assert_eq!(Func::Broadcast.bus_factor(4), 1.0);
        assert_eq!(Func::AllReduce.alg_bytes(4, 100, 4), 400);
        assert_eq!(Func::AllGather.alg_bytes(4, 100, 4), 1600);
        assert_eq!(Func::ReduceScatter.alg_bytes(4, 100, 4), 1600);
        assert_eq!(Func::AllReduce.bus_factor(1), 0.0);
    }
}
