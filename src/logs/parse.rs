//! One log line → one typed record.
//!
//! The parser works on raw bytes and borrows from the line: no allocation, no
//! regular expression, no UTF-8 validation. It finds NCCL's level marker
//! (` NCCL INFO `, ` NCCL WARN `, ` NCCL TRACE `) anywhere in the line, so any
//! prefix in front of NCCL's own `host:pid:tid [dev]` header is tolerated:
//! timestamps (`[2026-12-02 16:09:41] `), torchrun's `[rank0]:` and
//! `[default0]:`, mpirun's `[1,0]<stdout>:`. Rank hints found in those
//! prefixes are returned; they are only used when a log has no init lines.
//!
//! Recognised messages (NCCL 2.18 to 2.30 and rankwise's own trace):
//! - the COLL line of every call:
//!   `AllReduce: opCount 1f sendbuff 0x… recvbuff 0x… count 8 datatype 7 op 0 root 0 comm 0x… [nranks=4] stream 0x…`
//!   (fields are read as `key value` pairs, so an added or missing optional
//!   field does not break the line; `count`, `datatype` and `comm` are required);
//! - init lines that tie a comm pointer to a rank: `ncclCommInitRank comm …
//!   rank … nranks … commId 0x… - Init COMPLETE` (also `ncclCommInitRankConfig`,
//!   `ncclCommSplit … parent 0x… splitCount … color …`, the pre-2.19 form that
//!   starts with `comm`, and the topology form `comm 0x… rank 0 nRanks 4 nNodes …`),
//!   and the `- Destroy COMPLETE` / `- Abort COMPLETE` lines;
//! - argcheck WARN lines: `Broadcast : invalid root 4 (…)`,
//!   `AllReduce : invalid type 42`, `AllReduce : invalid reduction operation 42`,
//!   `AllReduce : reduction operation 42 unknown to this communicator`.

use crate::core::Func;
use memchr::memmem;
use serde::Serialize;

/// NCCL's own line header, and what the prefixes in front of it say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head<'a> {
    pub host: &'a [u8],
    pub pid: u32,
    pub tid: u32,
    /// The number in `[..]`: the CUDA device for NCCL, the rank for rankwise.
    pub dev: Option<u32>,
    /// A global rank from a launcher prefix: torchrun `[rank3]:`, mpirun `[1,3]<stdout>:`.
    pub prefix_rank: Option<u32>,
    /// A local rank from torchrun's role prefix `[default3]:`.
    pub prefix_local: Option<u32>,
}

/// The COLL line of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coll {
    pub op: Func,
    pub op_count: Option<u64>,
    pub sendbuff: u64,
    pub recvbuff: u64,
    pub count: u64,
    pub datatype: i32,
    pub redop: i32,
    /// The root; for Send and Recv, the peer.
    pub root: i32,
    pub comm: u64,
    pub nranks: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InitPhase {
    Start,
    Complete,
    /// `comm 0x… rank 0 nRanks 4 nNodes …`, printed during init.
    Topology,
    Destroy,
    Abort,
}

/// An init (or teardown) line that ties a comm pointer to its rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Init {
    pub comm: u64,
    pub rank: Option<u32>,
    pub nranks: Option<u32>,
    pub comm_id: Option<u64>,
    pub parent: Option<u64>,
    pub color: Option<i64>,
    pub split_count: Option<u32>,
    pub phase: InitPhase,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum WarnKind {
    InvalidRoot(i64),
    InvalidType(i64),
    InvalidOp(i64),
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Warn<'a> {
    pub op: Option<Func>,
    pub kind: WarnKind,
    /// The message after `NCCL WARN `.
    pub text: &'a [u8],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body<'a> {
    Coll(Coll),
    Init(Init),
    Warn(Warn<'a>),
    /// An NCCL INFO/TRACE line that carries nothing the analyzer uses.
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line<'a> {
    Nccl(Head<'a>, Body<'a>),
    /// Not an NCCL line (application output, blank line, binary noise).
    NotNccl,
    /// Looks like an NCCL COLL or init line but a required field is missing or unreadable.
    Malformed(Broken<'a>),
}

/// What a malformed line looked like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broken<'a> {
    /// A COLL line (`Op: opCount …`), a call that cannot be checked, and
    /// its first field that could not be read.
    Call(BadField<'a>),
    /// An init line.
    Init,
}

/// A field of a COLL line that could not be read: its name and what it
/// held (`None`: no value, or no such field while it is required).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadField<'a> {
    pub field: &'static str,
    pub value: Option<&'a [u8]>,
}

impl BadField<'_> {
    /// "count is 'x3', expected an unsigned 64-bit integer", "comm is missing".
    pub fn describe(&self) -> String {
        let expected = match self.field {
            "opCount" => "a hex number",
            "sendbuff" | "recvbuff" | "comm" => "a pointer (0x… or (nil))",
            "count" => "an unsigned 64-bit integer",
            "[nranks=]" => "an unsigned 32-bit integer",
            _ => "a 32-bit integer",
        };
        match self.value {
            Some(v) => format!(
                "{} is '{}', expected {expected}",
                self.field,
                String::from_utf8_lossy(&v[..v.len().min(40)])
            ),
            None => format!("{} is missing, expected {expected}", self.field),
        }
    }
}

/// A reusable line parser (holds the marker searcher).
pub struct Parser {
    marker: memmem::Finder<'static>,
}

impl Default for Parser {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Info,
    Warn,
    Trace,
}

impl Parser {
    pub fn new() -> Self {
        Parser {
            marker: memmem::Finder::new(b" NCCL "),
        }
    }

    /// Parse one line (with or without its line terminator).
    pub fn parse<'a>(&self, line: &'a [u8]) -> Line<'a> {
        let line = trim_end(line);
        let mut from = 0;
        // The first " NCCL " followed by a level is the marker; earlier
        // occurrences may sit in a prefix.
        let (pos, level, msg_start) = loop {
            let Some(p) = self.marker.find(&line[from..]).map(|p| p + from) else {
                return Line::NotNccl;
            };
            let after = &line[p + 6..];
            if after.starts_with(b"INFO ") {
                break (p, Level::Info, p + 11);
            } else if after.starts_with(b"WARN ") {
                break (p, Level::Warn, p + 11);
            } else if after.starts_with(b"TRACE ") {
                break (p, Level::Trace, p + 12);
            }
            from = p + 1;
        };
        let Some(head) = parse_head(&line[..pos]) else {
            return Line::NotNccl;
        };
        let msg = &line[msg_start..];
        let body = match level {
            Level::Info => match parse_info(msg) {
                Ok(b) => b,
                Err(broken) => return Line::Malformed(broken),
            },
            Level::Warn => Body::Warn(parse_warn(msg)),
            Level::Trace => Body::Other,
        };
        Line::Nccl(head, body)
    }
}

fn trim_end(mut s: &[u8]) -> &[u8] {
    while let [rest @ .., b'\n' | b'\r' | b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// `… host:pid:tid [dev] [file.cc:line]` (what precedes the marker).
fn parse_head(pre: &[u8]) -> Option<Head<'_>> {
    let mut toks = TokensRev::new(pre);
    // The bracket is the last token, or one of the two before it
    // (WARN: `file.cc:48`; TRACE: a time and `func:line`).
    let mut dev = None;
    let mut found = false;
    for _ in 0..3 {
        let t = toks.next()?;
        if let [b'[', inner @ .., b']'] = t {
            dev = parse_u32(inner);
            if dev.is_some() {
                found = true;
                break;
            }
        }
    }
    if !found {
        return None;
    }
    let (hpt, hpt_start) = toks.next_with_start()?;
    // host:pid:tid, possibly glued to a launcher prefix (`[rank0]:host:1:2`).
    let c2 = memchr::memrchr(b':', hpt)?;
    let tid = parse_u32(&hpt[c2 + 1..])?;
    let c1 = memchr::memrchr(b':', &hpt[..c2])?;
    let pid = parse_u32(&hpt[c1 + 1..c2])?;
    let host_full = &hpt[..c1];
    let (glue, host) = match memchr::memrchr(b':', host_full) {
        Some(c0) => (&host_full[..=c0], &host_full[c0 + 1..]),
        None => (&b""[..], host_full),
    };
    if host.is_empty() {
        return None;
    }
    let mut head = Head {
        host,
        pid,
        tid,
        dev,
        prefix_rank: None,
        prefix_local: None,
    };
    if !glue.is_empty() || hpt_start > 0 {
        rank_hints(&pre[..hpt_start], &mut head);
        rank_hints(glue, &mut head);
    }
    Some(head)
}

/// Rank hints in launcher prefixes: `[rank3]:` and `[1,3]<stdout>:` give a
/// global rank, `[default3]:` (torchrun's role prefix) a local rank.
fn rank_hints(s: &[u8], head: &mut Head<'_>) {
    let mut i = 0;
    while let Some(off) = memchr::memchr(b'[', &s[i..]) {
        let start = i + off + 1;
        let Some(len) = memchr::memchr(b']', &s[start..]) else {
            return;
        };
        let inner = &s[start..start + len];
        i = start + len + 1;
        if let Some(num) = inner.strip_prefix(b"rank") {
            if let Some(r) = parse_u32(num) {
                head.prefix_rank = Some(r);
            }
        } else if let Some(comma) = memchr::memchr(b',', inner) {
            if parse_u32(&inner[..comma]).is_some()
                && let Some(r) = parse_u32(&inner[comma + 1..])
            {
                head.prefix_rank = Some(r);
            }
        } else if s.get(i) == Some(&b':') {
            let digits = inner
                .iter()
                .rev()
                .take_while(|b| b.is_ascii_digit())
                .count();
            let (role, num) = inner.split_at(inner.len() - digits);
            if digits > 0 && !role.is_empty() && role.iter().all(|b| b.is_ascii_alphabetic()) {
                head.prefix_local = parse_u32(num);
            }
        }
    }
}

/// Whitespace tokens from the right, with their start offsets.
struct TokensRev<'a> {
    s: &'a [u8],
    end: usize,
}

impl<'a> TokensRev<'a> {
    fn new(s: &'a [u8]) -> Self {
        TokensRev { s, end: s.len() }
    }

    fn next_with_start(&mut self) -> Option<(&'a [u8], usize)> {
        while self.end > 0 && self.s[self.end - 1] == b' ' {
            self.end -= 1;
        }
        if self.end == 0 {
            return None;
        }
        let mut start = self.end;
        while start > 0 && self.s[start - 1] != b' ' {
            start -= 1;
        }
        let tok = &self.s[start..self.end];
        self.end = start;
        Some((tok, start))
    }

    fn next(&mut self) -> Option<&'a [u8]> {
        self.next_with_start().map(|(t, _)| t)
    }
}

/// Whitespace tokens from the left.
struct Tokens<'a> {
    s: &'a [u8],
    pos: usize,
}

impl<'a> Tokens<'a> {
    fn new(s: &'a [u8]) -> Self {
        Tokens { s, pos: 0 }
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let s = self.s;
        let mut p = self.pos;
        while p < s.len() && s[p] == b' ' {
            p += 1;
        }
        if p >= s.len() {
            self.pos = p;
            return None;
        }
        // Tokens are short: a plain loop beats a vectorised search here.
        let mut end = p;
        while end < s.len() && s[end] != b' ' {
            end += 1;
        }
        self.pos = end;
        Some(&s[p..end])
    }
}

fn parse_info(msg: &[u8]) -> Result<Body<'_>, Broken<'_>> {
    let mut toks = Tokens::new(msg);
    let Some(t0) = toks.next() else {
        return Ok(Body::Other);
    };
    if let [name @ .., b':'] = t0 {
        let rest_start = toks.pos;
        if toks.next() == Some(&b"opCount"[..]) {
            return match Func::from_log_name(name) {
                Some(op) => parse_coll(op, &msg[rest_start..])
                    .map(Body::Coll)
                    .map_err(Broken::Call),
                None => Ok(Body::Other),
            };
        }
        return Ok(Body::Other);
    }
    let is_init = if t0 == b"comm" {
        true
    } else if t0.starts_with(b"nccl") {
        toks.next() == Some(&b"comm"[..])
    } else {
        false
    };
    if is_init {
        return parse_init(msg).ok_or(Broken::Init);
    }
    Ok(Body::Other)
}

/// The value after a field name, parsed; or the field, as unreadable.
#[inline]
fn field<'a, T>(
    toks: &mut Tokens<'a>,
    field: &'static str,
    parse: fn(&[u8]) -> Option<T>,
) -> Result<T, BadField<'a>> {
    let value = toks.next();
    value.and_then(parse).ok_or(BadField { field, value })
}

fn parse_coll(op: Func, fields: &[u8]) -> Result<Coll, BadField<'_>> {
    let mut toks = Tokens::new(fields);
    let (mut count, mut datatype, mut comm) = (None, None, None);
    let mut c = Coll {
        op,
        op_count: None,
        sendbuff: 0,
        recvbuff: 0,
        count: 0,
        datatype: 0,
        redop: 0,
        root: 0,
        comm: 0,
        nranks: None,
    };
    while let Some(k) = toks.next() {
        match k {
            b"opCount" => c.op_count = Some(field(&mut toks, "opCount", parse_hex)?),
            b"sendbuff" => c.sendbuff = field(&mut toks, "sendbuff", parse_ptr)?,
            b"recvbuff" => c.recvbuff = field(&mut toks, "recvbuff", parse_ptr)?,
            b"count" => count = Some(field(&mut toks, "count", parse_u64)?),
            b"datatype" => datatype = Some(field(&mut toks, "datatype", parse_i32)?),
            b"op" => c.redop = field(&mut toks, "op", parse_i32)?,
            b"root" => c.root = field(&mut toks, "root", parse_i32)?,
            b"comm" => comm = Some(field(&mut toks, "comm", parse_ptr)?),
            b"stream" => {
                toks.next();
            }
            _ => {
                if let Some(v) = k.strip_prefix(b"[nranks=") {
                    let n = v.strip_suffix(b"]").and_then(parse_u32);
                    c.nranks = Some(n.ok_or(BadField {
                        field: "[nranks=]",
                        value: Some(v.strip_suffix(b"]").unwrap_or(v)),
                    })?);
                }
            }
        }
    }
    let missing = |field| BadField { field, value: None };
    c.count = count.ok_or(missing("count"))?;
    c.datatype = datatype.ok_or(missing("datatype"))?;
    c.comm = comm.ok_or(missing("comm"))?;
    Ok(c)
}

fn parse_init(msg: &[u8]) -> Option<Body<'_>> {
    let mut toks = Tokens::new(msg);
    let mut init = Init {
        comm: 0,
        rank: None,
        nranks: None,
        comm_id: None,
        parent: None,
        color: None,
        split_count: None,
        phase: InitPhase::Topology,
    };
    let mut comm = None;
    let mut phase = None;
    let mut prev: &[u8] = b"";
    while let Some(k) = toks.next() {
        match k {
            b"comm" if comm.is_none() => comm = Some(parse_ptr(toks.next()?)?),
            b"rank" => init.rank = parse_u32(toks.next()?),
            b"nranks" | b"nRanks" => init.nranks = parse_u32(toks.next()?),
            b"commId" => init.comm_id = toks.next().and_then(parse_ptr),
            b"parent" => init.parent = toks.next().and_then(parse_ptr),
            b"color" => init.color = toks.next().and_then(parse_i64),
            b"splitCount" => init.split_count = toks.next().and_then(parse_u32),
            b"COMPLETE" => {
                phase = match prev {
                    b"Init" => Some(InitPhase::Complete),
                    b"Destroy" => Some(InitPhase::Destroy),
                    b"Abort" => Some(InitPhase::Abort),
                    _ => phase,
                }
            }
            b"START" if prev == b"Init" => phase = Some(InitPhase::Start),
            _ => {}
        }
        prev = k;
    }
    let Some(comm) = comm else {
        return Some(Body::Other);
    };
    init.comm = comm;
    match phase {
        Some(p) => init.phase = p,
        // Without a phase word, only the topology form (`rank … nRanks …`) counts.
        None if init.rank.is_some() && init.nranks.is_some() => {}
        None => return Some(Body::Other),
    }
    if init.rank.is_none() && matches!(init.phase, InitPhase::Start | InitPhase::Complete) {
        return None;
    }
    Some(Body::Init(init))
}

fn parse_warn(msg: &[u8]) -> Warn<'_> {
    let mut toks = Tokens::new(msg);
    let op = toks.next().and_then(|t| {
        let name = t.strip_suffix(b":").unwrap_or(t);
        Func::from_log_name(name)
    });
    let number_after = |needle: &[u8]| -> Option<i64> {
        let p = memmem::find(msg, needle)?;
        let mut t = Tokens::new(&msg[p + needle.len()..]);
        parse_i64_prefix(t.next()?)
    };
    let kind = if let Some(r) = number_after(b"invalid root ") {
        WarnKind::InvalidRoot(r)
    } else if let Some(r) = number_after(b"invalid peer ") {
        WarnKind::InvalidRoot(r)
    } else if let Some(r) = memmem::find(msg, b" is out of range").and_then(|end| {
        let p = memmem::rfind(&msg[..end], b"root ")?;
        parse_i64(&msg[p + 5..end])
    }) {
        WarnKind::InvalidRoot(r)
    } else if let Some(t) =
        number_after(b"invalid type ").or_else(|| number_after(b"invalid datatype "))
    {
        WarnKind::InvalidType(t)
    } else if let Some(o) = number_after(b"invalid reduction operation ")
        .or_else(|| number_after(b"invalid op "))
        .or_else(|| {
            // 2.28: "reduction operation 42 unknown to this communicator"
            memmem::find(msg, b" unknown to this communicator")?;
            number_after(b"reduction operation ")
        })
    {
        WarnKind::InvalidOp(o)
    } else {
        WarnKind::Other
    };
    Warn {
        op,
        kind,
        text: msg,
    }
}

/// A signed integer at the start of a token (`4,` or `4)` read as 4).
fn parse_i64_prefix(t: &[u8]) -> Option<i64> {
    let sign = usize::from(t.first() == Some(&b'-'));
    let digits = t[sign..].iter().take_while(|b| b.is_ascii_digit()).count();
    parse_i64(&t[..sign + digits])
}

#[inline]
fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

#[inline]
fn parse_u32(s: &[u8]) -> Option<u32> {
    parse_u64(s).and_then(|v| u32::try_from(v).ok())
}

#[inline]
fn parse_i64(s: &[u8]) -> Option<i64> {
    match s {
        [b'-', digits @ ..] => parse_u64(digits)
            .and_then(|v| i64::try_from(v).ok())
            .map(|v| -v),
        _ => parse_u64(s).and_then(|v| i64::try_from(v).ok()),
    }
}

#[inline]
fn parse_i32(s: &[u8]) -> Option<i32> {
    parse_i64(s).and_then(|v| i32::try_from(v).ok())
}

/// Hex digits, with or without `0x` (opCount is printed with `%lx`).
#[inline]
fn parse_hex(s: &[u8]) -> Option<u64> {
    let s = s
        .strip_prefix(b"0x")
        .or_else(|| s.strip_prefix(b"0X"))
        .unwrap_or(s);
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        v = (v << 4) | u64::from(d);
    }
    Some(v)
}

/// printf `%p`: `0x7fd796e00000` or `(nil)`.
#[inline]
fn parse_ptr(s: &[u8]) -> Option<u64> {
    match s {
        b"(nil)" | b"nil" | b"0" => Some(0),
        [b'0', b'x' | b'X', ..] => parse_hex(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(line: &str) -> Line<'_> {
        Parser::new().parse(line.as_bytes())
    }

    fn coll(line: &str) -> (Head<'_>, Coll) {
        match p(line) {
            Line::Nccl(h, Body::Coll(c)) => (h, c),
            other => panic!("not a COLL line: {other:?}"),
        }
    }

    #[test]
    fn real_allreduce_line() {
        let (h, c) = coll(
            "vm:590:590 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7fd796e00000 recvbuff 0x7fd796e00000 count 3 datatype 4 op 0 root 0 comm 0x22c2a4f0 [nranks=1] stream (nil)",
        );
        assert_eq!(
            (h.host, h.pid, h.tid, h.dev),
            (&b"vm"[..], 590, 590, Some(0))
        );
        assert_eq!(c.op, Func::AllReduce);
        assert_eq!(c.op_count, Some(0));
        assert_eq!(c.sendbuff, 0x7fd796e00000);
        assert_eq!(c.count, 3);
        assert_eq!(c.datatype, 4);
        assert_eq!(c.comm, 0x22c2a4f0);
        assert_eq!(c.nranks, Some(1));
    }

    #[test]
    fn send_prints_peer_as_root_and_buffer_as_recvbuff() {
        let (_, c) = coll(
            "vm:447:447 [0] NCCL INFO Send: opCount 1a sendbuff (nil) recvbuff 0x7f66dae00200 count 9 datatype 7 op 0 root 3 comm 0x23ebc600 [nranks=4] stream 0x2b37a4b0",
        );
        assert_eq!(c.op, Func::Send);
        assert_eq!(c.op_count, Some(0x1a));
        assert_eq!(c.sendbuff, 0);
        assert_eq!(c.recvbuff, 0x7f66dae00200);
        assert_eq!(c.root, 3);
        assert_eq!(c.nranks, Some(4));
    }

    #[test]
    fn prefixes_are_tolerated_and_give_rank_hints() {
        let base = "node7:12:13 [2] NCCL INFO Broadcast: opCount ff sendbuff 0x1 recvbuff 0x1 count 4 datatype 1 op 0 root 0 comm 0xabc [nranks=8] stream (nil)";
        let (h, c) = coll(base);
        assert_eq!((h.prefix_rank, h.prefix_local), (None, None));
        assert_eq!(c.op_count, Some(255));

        let l = format!("[rank5]:{base}");
        let (h, _) = coll(&l);
        assert_eq!(h.host, b"node7");
        assert_eq!(h.prefix_rank, Some(5));

        let l = format!("[default3]:{base}");
        let (h, _) = coll(&l);
        assert_eq!((h.prefix_rank, h.prefix_local), (None, Some(3)));

        let l = format!("[1,6]<stdout>:{base}");
        let (h, _) = coll(&l);
        assert_eq!((h.host, h.prefix_rank), (&b"node7"[..], Some(6)));

        let l = format!("[2026-12-02 16:09:41] {base}");
        let (h, _) = coll(&l);
        assert_eq!((h.host, h.pid, h.prefix_rank), (&b"node7"[..], 12, None));

        let l = format!("[2026-12-02 16:09:41.123] [rank4]: {base}\r\n");
        let (h, c) = coll(&l);
        assert_eq!((h.prefix_rank, c.count), (Some(4), 4));
    }

    #[test]
    fn init_lines_of_every_form() {
        type Case = (
            &'static str,
            u64,
            Option<u32>,
            Option<u32>,
            Option<u64>,
            InitPhase,
        );
        let cases: [Case; 6] = [
            (
                "vm:473:473 [0] NCCL INFO ncclCommInitRankConfig comm 0x209db0f0 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 60 commId 0x67c0057cd53cedc1 - Init COMPLETE",
                0x209db0f0,
                Some(0),
                Some(1),
                Some(0x67c0057cd53cedc1),
                InitPhase::Complete,
            ),
            (
                "h:1:1 [3] NCCL INFO ncclCommInitRank comm 0x55aa rank 3 nranks 4 cudaDev 3 nvmlDev 3 busId 4f000 commId 0x1234 - Init START",
                0x55aa,
                Some(3),
                Some(4),
                Some(0x1234),
                InitPhase::Start,
            ),
            (
                "h:1:1 [1] NCCL INFO comm 0x55ab rank 1 nranks 2 cudaDev 1 busId 4f000 commId 0x99 - Init COMPLETE",
                0x55ab,
                Some(1),
                Some(2),
                Some(0x99),
                InitPhase::Complete,
            ),
            (
                "vm:473:473 [0] NCCL INFO comm 0x209db0f0 rank 0 nRanks 1 nNodes 1 localRanks 1 localRank 0 MNNVL 0",
                0x209db0f0,
                Some(0),
                Some(1),
                None,
                InitPhase::Topology,
            ),
            (
                "vm:473:473 [0] NCCL INFO comm 0x209db0f0 rank 0 nranks 1 cudaDev 0 busId 60 - Destroy COMPLETE",
                0x209db0f0,
                Some(0),
                Some(1),
                None,
                InitPhase::Destroy,
            ),
            (
                "vm:447:447 [0] NCCL INFO ncclCommSplit comm 0x2cb3be70 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 60 parent 0x23ebc600 splitCount 1 color 59908776 key 0- Init START",
                0x2cb3be70,
                Some(0),
                Some(1),
                None,
                InitPhase::Start,
            ),
        ];
        for (line, comm, rank, nranks, id, phase) in cases {
            match p(line) {
                Line::Nccl(_, Body::Init(i)) => {
                    assert_eq!(
                        (i.comm, i.rank, i.nranks, i.comm_id, i.phase),
                        (comm, rank, nranks, id, phase),
                        "{line}"
                    );
                }
                other => panic!("{line}: {other:?}"),
            }
        }
        match p(
            "vm:447:447 [0] NCCL INFO ncclCommSplit comm 0x2cb3be70 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 60 parent 0x23ebc600 splitCount 1 color 59908776 key 0 - Init COMPLETE",
        ) {
            Line::Nccl(_, Body::Init(i)) => {
                assert_eq!(
                    (i.parent, i.split_count, i.color),
                    (Some(0x23ebc600), Some(1), Some(59908776))
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn other_info_lines_are_not_init() {
        for l in [
            "vm:473:473 [0] NCCL INFO Init timings - ncclCommInitRankConfig: rank 0 nranks 1 total 0.55 (kernels 0.52)",
            "vm:473:473 [0] NCCL INFO Channel 00/64 : 0",
            "vm:473:473 [0] NCCL INFO enqueue.cc:2643 -> 4",
            "vm:473:473 [0] NCCL INFO NCCL version 2.28.9+cuda13.0",
            "vm:473:473 [0] NCCL INFO Foo: opCount 0 count 3",
        ] {
            assert_eq!(
                p(l),
                Line::Nccl(
                    Head {
                        host: b"vm",
                        pid: 473,
                        tid: 473,
                        dev: Some(0),
                        prefix_rank: None,
                        prefix_local: None
                    },
                    Body::Other
                ),
                "{l}"
            );
        }
    }

    #[test]
    fn warn_lines() {
        let w = |l| match p(l) {
            Line::Nccl(_, Body::Warn(w)) => (w.op, w.kind),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            w(
                "[2026-12-02 16:09:41] vm:473:473 [0] misc/argcheck.cc:48 NCCL WARN Broadcast : invalid root 1 (root should be in the 0..1 range)"
            ),
            (Some(Func::Broadcast), WarnKind::InvalidRoot(1))
        );
        assert_eq!(
            w("h:9:9 [3] NCCL WARN Broadcast : invalid root 4 (valid roots are 0..=3)"),
            (Some(Func::Broadcast), WarnKind::InvalidRoot(4))
        );
        assert_eq!(
            w("h:9:9 [3] NCCL WARN Reduce: root 4 is out of range: valid roots are 0..=3"),
            (Some(Func::Reduce), WarnKind::InvalidRoot(4))
        );
        assert_eq!(
            w(
                "[2026-12-02 16:23:23] vm:447:447 [0] misc/argcheck.cc:52 NCCL WARN AllReduce : invalid type 42"
            ),
            (Some(Func::AllReduce), WarnKind::InvalidType(42))
        );
        assert_eq!(
            w(
                "[2026-12-02 16:23:23] vm:447:447 [0] misc/argcheck.cc:67 NCCL WARN AllReduce : reduction operation 42 unknown to this communicator"
            ),
            (Some(Func::AllReduce), WarnKind::InvalidOp(42))
        );
        assert_eq!(
            w("h:1:1 [0] misc/argcheck.cc:60 NCCL WARN AllReduce : invalid reduction operation 7"),
            (Some(Func::AllReduce), WarnKind::InvalidOp(7))
        );
        assert_eq!(
            w("h:1:1 [0] transport/net.cc:1 NCCL WARN Call to connect returned Connection refused"),
            (None, WarnKind::Other)
        );
    }

    #[test]
    fn malformed_and_foreign_lines() {
        assert_eq!(p(""), Line::NotNccl);
        assert_eq!(p("ok [1, 10, 0] [0, 1, 2, 3, 4, 5]"), Line::NotNccl);
        assert_eq!(
            p(
                "bad root: DistBackendError('NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3780, invalid argument"
            ),
            Line::NotNccl
        );
        assert_eq!(p("NCCL INFO AllReduce: opCount 0"), Line::NotNccl);
        // required field missing / unreadable: which one, and what it held
        let call = |field, value: Option<&'static [u8]>| {
            Line::Malformed(Broken::Call(BadField { field, value }))
        };
        assert_eq!(
            p(
                "h:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 datatype 7 op 0 root 0 comm 0x5 [nranks=2] stream (nil)"
            ),
            call("count", None)
        );
        assert_eq!(
            p(
                "h:1:1 [0] NCCL INFO AllReduce: opCount zz sendbuff 0x1 recvbuff 0x1 count 1 datatype 7 op 0 root 0 comm 0x5 [nranks=2] stream (nil)"
            ),
            call("opCount", Some(b"zz"))
        );
        assert_eq!(
            p(
                "h:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 1 datatype 7 op 0 root 0 comm"
            ),
            call("comm", None)
        );
        assert_eq!(
            p(
                "h:1:1 [0] NCCL INFO Send: opCount 0 sendbuff 0x1 recvbuff 0x1 count 1 datatype 7 op 0 root 2147483648 comm 0x5 [nranks=4294967296] stream (nil)"
            ),
            call("root", Some(b"2147483648"))
        );
        assert_eq!(
            p(
                "h:1:1 [0] NCCL INFO Send: opCount 0 sendbuff 0x1 recvbuff 0x1 count 1 datatype 7 op 0 root 2 comm 0x5 [nranks=4294967296] stream (nil)"
            ),
            call("[nranks=]", Some(b"4294967296"))
        );
        assert_eq!(
            BadField {
                field: "count",
                value: Some(b"x3")
            }
            .describe(),
            "count is 'x3', expected an unsigned 64-bit integer"
        );
        assert_eq!(
            BadField {
                field: "comm",
                value: None
            }
            .describe(),
            "comm is missing, expected a pointer (0x… or (nil))"
        );
        // an init line without its rank
        assert_eq!(
            p(
                "vm:473:473 [0] NCCL INFO ncclCommInitRankConfig comm 0x209db0f0 rank x nranks 1 cudaDev 0 nvmlDev 0 busId 60 commId 0x67c0057cd53cedc1 - Init COMPLETE"
            ),
            Line::Malformed(Broken::Init)
        );
    }

    #[test]
    fn reads_back_every_line_cores_trace_writes() {
        use crate::core::RawCall;
        use crate::core::trace::{LinePrefix, coll_line, init_line, warn_line};
        let pre = LinePrefix {
            host: "node3",
            pid: 77,
            tid: 78,
            dev: 2,
        };
        for (i, func) in Func::ALL.into_iter().enumerate() {
            let call = RawCall {
                func,
                sendbuff: if func == Func::Recv {
                    0
                } else {
                    0x7f00_0000_1000
                },
                recvbuff: if func == Func::Send {
                    0
                } else {
                    0x7f00_0000_2000
                },
                count: 1000 + i,
                datatype: (i % 12) as i32,
                op: (i % 5) as i32,
                root: (i % 4) as i32,
            };
            let line = coll_line(&pre, &call, 0x1a + i as u64, 0x55aa_0000, 4);
            let (h, c) = coll(&line);
            assert_eq!(
                (h.host, h.pid, h.tid, h.dev),
                (&b"node3"[..], 77, 78, Some(2))
            );
            // Send logs its buffer under recvbuff
            let buffer = if func == Func::Send {
                call.sendbuff
            } else {
                call.recvbuff
            };
            assert_eq!(
                (c.op, c.op_count, c.count, c.datatype, c.redop, c.root),
                (
                    func,
                    Some(0x1a + i as u64),
                    1000 + i as u64,
                    call.datatype,
                    call.op,
                    call.root
                ),
                "{line}"
            );
            assert_eq!(c.recvbuff, buffer as u64, "{line}");
            assert_eq!((c.comm, c.nranks), (0x55aa_0000, Some(4)), "{line}");
        }
        match p(&init_line(&pre, 0x55aa_0000, 2, 4, 0xfeed)) {
            Line::Nccl(_, Body::Init(i)) => assert_eq!(
                (i.comm, i.rank, i.nranks, i.comm_id, i.phase),
                (
                    0x55aa_0000,
                    Some(2),
                    Some(4),
                    Some(0xfeed),
                    InitPhase::Complete
                )
            ),
            other => panic!("{other:?}"),
        }
        let warn = warn_line(
            &pre,
            "Broadcast : invalid root 4 (root should be in the 0..4 range)",
        );
        match p(&warn) {
            Line::Nccl(_, Body::Warn(w)) => {
                assert_eq!(
                    (w.op, w.kind),
                    (Some(Func::Broadcast), WarnKind::InvalidRoot(4))
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_hex(b"0x7fd796e00000"), Some(0x7fd796e00000));
        assert_eq!(parse_hex(b"ffffffffffffffff"), Some(u64::MAX));
        assert_eq!(parse_hex(b"1ffffffffffffffff"), None);
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_i64(b"-3"), Some(-3));
        assert_eq!(parse_i32(b"4294967296"), None);
        assert_eq!(parse_ptr(b"(nil)"), Some(0));
        assert_eq!(parse_ptr(b"22c2a4f0"), None);
    }

    #[test]
    fn every_line_of_the_real_fixtures_is_classified() {
        let parser = Parser::new();
        for text in [
            include_str!("../../tests/fixtures/nccl-2.28.9-1rank-init-coll.log"),
            include_str!("../../tests/fixtures/nccl-2.28.9-1rank-torch-ctypes.log"),
        ] {
            for line in text.lines() {
                let parsed = parser.parse(line.as_bytes());
                assert!(!matches!(parsed, Line::Malformed(_)), "{line}");
                if line.contains(" NCCL INFO ") && line.contains(": opCount ") {
                    assert!(matches!(parsed, Line::Nccl(_, Body::Coll(_))), "{line}");
                }
                if line.contains(" NCCL ") && line.contains(" - Init COMPLETE") {
                    assert!(matches!(parsed, Line::Nccl(_, Body::Init(_))), "{line}");
                }
            }
        }
    }
}
