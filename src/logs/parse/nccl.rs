//! NCCL INFO messages: the COLL line of a call and the init lines.

use super::fields::{Tokens, parse_hex, parse_i32, parse_i64, parse_ptr, parse_u32, parse_u64};
use super::{BadField, Body, Broken, Coll, Init, InitPhase};
use crate::core::Func;

pub(super) fn parse_info(msg: &[u8]) -> Result<Body<'_>, Broken<'_>> {
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

pub(super) fn parse_coll(op: Func, fields: &[u8]) -> Result<Coll, BadField<'_>> {
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
        complete: false,
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
                c.complete = toks.next().is_some();
            }
            // another process's line glued into this one
            b"NCCL" => {
                return Err(BadField {
                    field: "NCCL",
                    value: None,
                });
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
