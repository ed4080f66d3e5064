//! NCCL's line header (`host:pid:tid [dev]`) and the launcher prefixes in
//! front of it, which may name the rank.

use super::Head;
use super::fields::{TokensRev, parse_u32};

pub(super) fn trim_end(mut s: &[u8]) -> &[u8] {
    while let [rest @ .., b'\n' | b'\r' | b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// `… host:pid:tid [dev] [file.cc:line]` (what precedes the marker).
pub(super) fn parse_head(pre: &[u8]) -> Option<Head<'_>> {
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

/// Rank hints in launcher prefixes: `[rank3]:`, `[1,3]<stdout>:` (mpirun)
/// and a leading `3:` (srun `--label`) give a global rank, `[default3]:`
/// (torchrun's role prefix) a local rank.
pub(super) fn rank_hints(s: &[u8], head: &mut Head<'_>) {
    let lead = s.iter().take_while(|b| **b == b' ').count();
    let digits = s[lead..].iter().take_while(|b| b.is_ascii_digit()).count();
    if digits > 0
        && s.get(lead + digits) == Some(&b':')
        && matches!(s.get(lead + digits + 1), None | Some(b' '))
    {
        head.prefix_rank = parse_u32(&s[lead..lead + digits]);
    }
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
