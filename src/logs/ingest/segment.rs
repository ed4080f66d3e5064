//! One segment's lines → its own call streams, keyed by (host, pid, comm
//! pointer): the hot path. Each line is parsed in place; a call keeps only
//! an interned signature, its opCount and its line number.
//!
//! A COLL line cut short (no `stream` field: wrapped by a terminal, or cut
//! by another process's line written into the middle of it) is held back
//! one line: if the next line is its rest, the two are read as one.

use super::FxMap;
use super::io::Piece;
use crate::logs::model::{
    BadLine, CallRec, Counts, Loc, SHOWN_TEXT, Sig, Stream, TorchEventRec, TorchRec, WarnRec,
};
use crate::logs::parse::{Body, Broken, Head, InitPhase, Line, Parser, Torch, TorchEvent};
use std::collections::HashMap;

pub(super) type StreamKey = (u32, u32, u64);

/// WARN lines kept per segment (the rest are only counted).
const MAX_WARNINGS: usize = 1000;

/// A line's text as quoted in a report: lossy UTF-8, cut to [`SHOWN_TEXT`] bytes.
fn quoted(line: &[u8]) -> String {
    let line = &line[..line.len().min(SHOWN_TEXT + 1)];
    match line.len() > SHOWN_TEXT {
        true => format!("{}…", String::from_utf8_lossy(&line[..SHOWN_TEXT])),
        false => String::from_utf8_lossy(line).into_owned(),
    }
}

pub(super) struct SegResult {
    pub(super) st: SegState,
    pub(super) note: Option<String>,
}

/// Parse state of one segment.
pub(super) struct SegState {
    pub(super) parser: Parser,
    pub(super) host_ids: HashMap<Box<[u8]>, u32>,
    pub(super) hosts: Vec<Box<[u8]>>,
    /// The host of the previous line (most lines repeat it).
    pub(super) last_host: Option<u32>,
    pub(super) sig_ids: FxMap<Sig, u32>,
    pub(super) sigs: Vec<Sig>,
    pub(super) streams: Vec<Stream>,
    pub(super) current: FxMap<StreamKey, usize>,
    /// Epoch bumps per key (pointer reuse after a destroy).
    pub(super) bumps: FxMap<StreamKey, u32>,
    pub(super) warnings: Vec<WarnRec>,
    pub(super) counts: Counts,
    /// The segment's first malformed COLL line.
    pub(super) first_malformed_call: Option<BadLine>,
    /// The segment's first line over the bound: (line, length).
    pub(super) first_long_line: Option<(u64, u64)>,
    pub(super) torch: Vec<TorchRec>,
    /// A COLL line cut short, held for its rest: (text, line).
    pending: Option<(Vec<u8>, u32)>,
}

impl SegState {
    pub(super) fn new() -> Self {
        SegState {
            parser: Parser::new(),
            host_ids: HashMap::new(),
            hosts: Vec::new(),
            last_host: None,
            sig_ids: FxMap::default(),
            sigs: Vec::new(),
            streams: Vec::new(),
            current: FxMap::default(),
            bumps: FxMap::default(),
            warnings: Vec::new(),
            counts: Counts::default(),
            first_malformed_call: None,
            first_long_line: None,
            torch: Vec::new(),
            pending: None,
        }
    }

    fn host_id(&mut self, host: &[u8]) -> u32 {
        if let Some(id) = self.last_host
            && &*self.hosts[id as usize] == host
        {
            return id;
        }
        let id = match self.host_ids.get(host) {
            Some(&id) => id,
            None => {
                let id = self.hosts.len() as u32;
                self.hosts.push(host.into());
                self.host_ids.insert(host.into(), id);
                id
            }
        };
        self.last_host = Some(id);
        id
    }

    fn stream(&mut self, head: &Head<'_>, comm: u64, line: u32) -> usize {
        let host = self.host_id(head.host);
        let key = (host, head.pid, comm);
        let idx = match self.current.get(&key) {
            Some(&i) => i,
            None => self.new_stream(key, line),
        };
        let s = &mut self.streams[idx];
        if s.dev.is_none() {
            s.dev = head.dev;
        }
        if head.prefix_rank.is_some() {
            s.prefix_rank = head.prefix_rank;
        }
        if head.prefix_local.is_some() {
            s.prefix_local = head.prefix_local;
        }
        s.last.line = u64::from(line);
        idx
    }

    fn new_stream(&mut self, key: StreamKey, line: u32) -> usize {
        let idx = self.streams.len();
        self.streams.push(Stream {
            host: key.0,
            pid: key.1,
            comm: key.2,
            epoch: self.bumps.get(&key).copied().unwrap_or(0),
            first: Loc {
                file: 0,
                line: u64::from(line),
            },
            ..Stream::default()
        });
        self.current.insert(key, idx);
        idx
    }

    fn bump(&mut self, idx: usize) {
        let s = &self.streams[idx];
        let key = (s.host, s.pid, s.comm);
        *self.bumps.entry(key).or_insert(0) += 1;
        self.current.remove(&key);
    }

    pub(super) fn on_piece(&mut self, p: Piece<'_>) {
        match p {
            Piece::Line(l) => self.on_line(l),
            Piece::Long(len) => {
                self.counts.lines += 1;
                self.counts.long_lines += 1;
                if self.first_long_line.is_none() {
                    self.first_long_line = Some((self.counts.lines, len));
                }
            }
        }
    }

    /// The end of the segment: a line still held back is read as it is.
    pub(super) fn finish(&mut self) {
        if let Some((text, line)) = self.pending.take() {
            self.on_parsed(&text, line, true);
        }
    }

    fn on_line(&mut self, raw: &[u8]) {
        self.counts.lines += 1;
        let line = u32::try_from(self.counts.lines).unwrap_or(u32::MAX);
        if let Some((held, at)) = self.pending.take() {
            if self.try_rejoin(&held, at, raw) {
                return;
            }
            self.on_parsed(&held, at, true);
        }
        self.on_parsed(raw, line, false);
    }

    /// `raw` may be the rest of the held line `held`: joined as it was cut
    /// (no space) or at a space, if that makes a whole COLL line.
    fn try_rejoin(&mut self, held: &[u8], at: u32, raw: &[u8]) -> bool {
        if !matches!(self.parser.parse(raw), Line::NotNccl) {
            return false;
        }
        let rest = raw.strip_suffix(b"\r").unwrap_or(raw);
        for sep in [&b""[..], b" "] {
            let joined = [held, sep, rest].concat();
            if let Line::Nccl(_, Body::Coll(c)) = self.parser.parse(&joined)
                && c.complete
            {
                self.counts.rejoined_lines += 1;
                self.on_parsed(&joined, at, true);
                return true;
            }
        }
        false
    }

    /// Handle one parsed line; `last_try`: it was held back already (or
    /// joined), so it is taken as it is.
    fn on_parsed(&mut self, raw: &[u8], line: u32, last_try: bool) {
        match self.parser.parse(raw) {
            Line::Nccl(_, Body::Coll(c)) if !c.complete && !last_try => {
                self.pending = Some((raw.to_vec(), line));
            }
            Line::Malformed(Broken::Call(_)) if !last_try && raw.len() <= 4096 => {
                self.pending = Some((raw.to_vec(), line));
            }
            Line::Interleaved { line: text, split } => {
                // the second line is whole; the first waits for its rest
                let split = self.known_host_split(text, split);
                self.on_parsed(&text[split..], line, true);
                let first = text[..split].trim_ascii_end();
                self.pending = Some((first.to_vec(), line));
            }
            Line::Torch(t) => self.on_torch(&t, raw, line),
            other => self.on_line_kind(other, raw, line),
        }
    }

    /// Where an interleaved line's second header begins: moved back over
    /// the glued text to the longest host name already seen, if any.
    fn known_host_split(&self, text: &[u8], split: usize) -> usize {
        let Some(colon) = memchr::memchr(b':', &text[split..]).map(|c| c + split) else {
            return split;
        };
        let earliest = colon.saturating_sub(256);
        let token_start = text[..colon]
            .iter()
            .rposition(|b| *b == b' ')
            .map_or(0, |p| p + 1)
            .max(earliest);
        (token_start..colon)
            .find(|&s| self.host_ids.contains_key(&text[s..colon]))
            .unwrap_or(split)
    }

    fn on_torch(&mut self, t: &Torch<'_>, raw: &[u8], line: u32) {
        self.counts.torch_lines += 1;
        if self.torch.len() >= MAX_WARNINGS {
            return;
        }
        let text = |b: &[u8]| String::from_utf8_lossy(&b[..b.len().min(64)]).into_owned();
        let event = match t.event {
            TorchEvent::Timeout {
                seq,
                op,
                numel_in,
                numel_out,
                timeout_ms,
                ran_ms,
            } => TorchEventRec::Timeout {
                seq,
                op: text(op),
                numel_in,
                numel_out,
                timeout_ms,
                ran_ms,
            },
            TorchEvent::Progress {
                at,
                enqueued,
                completed,
            } => TorchEventRec::Progress {
                at,
                enqueued,
                completed,
            },
            TorchEvent::Error => TorchEventRec::Error { text: quoted(raw) },
        };
        self.torch.push(TorchRec {
            loc: Loc::at(line),
            rank: t.rank,
            pg: t.pg.map(text),
            event,
        });
    }

    fn on_line_kind(&mut self, parsed: Line<'_>, raw: &[u8], line: u32) {
        match parsed {
            Line::Torch(_) | Line::Interleaved { .. } => {}
            Line::NotNccl => self.counts.not_nccl_lines += 1,
            Line::Malformed(what) => {
                self.counts.nccl_lines += 1;
                self.counts.malformed_lines += 1;
                if let Broken::Call(bad) = what {
                    self.counts.malformed_calls += 1;
                    if self.first_malformed_call.is_none() {
                        self.first_malformed_call = Some(BadLine {
                            loc: Loc::at(line),
                            why: bad.describe(),
                            text: quoted(raw),
                        });
                    }
                }
            }
            Line::Nccl(head, body) => {
                self.counts.nccl_lines += 1;
                match body {
                    Body::Coll(c) => {
                        self.counts.calls += 1;
                        let sig = Sig {
                            op: c.op,
                            count: c.count,
                            datatype: c.datatype,
                            redop: c.redop,
                            root: c.root,
                        };
                        let next = self.sigs.len() as u32;
                        let sig = *self.sig_ids.entry(sig).or_insert_with(|| {
                            self.sigs.push(sig);
                            next
                        });
                        let idx = self.stream(&head, c.comm, line);
                        let s = &mut self.streams[idx];
                        if let Some(n) = c.nranks {
                            match s.nranks_coll {
                                None => {
                                    s.nranks_coll = Some(n);
                                    s.nranks_coll_at = Loc::at(line);
                                }
                                Some(m) if m != n && s.nranks_other.is_none() => {
                                    s.nranks_other = Some((n, Loc::at(line), false));
                                }
                                Some(_) => {}
                            }
                        }
                        s.calls.push(CallRec {
                            sig,
                            line,
                            op_count: c.op_count.unwrap_or(u64::MAX),
                        });
                    }
                    Body::Init(i) => {
                        self.counts.init_lines += 1;
                        let mut idx = self.stream(&head, i.comm, line);
                        let fresh_init = matches!(i.phase, InitPhase::Start)
                            || (matches!(i.phase, InitPhase::Complete)
                                && !self.streams[idx].init_complete);
                        if fresh_init && !self.streams[idx].calls.is_empty() {
                            // A new communicator at a reused address.
                            self.bump(idx);
                            idx = self.stream(&head, i.comm, line);
                        }
                        let s = &mut self.streams[idx];
                        let here = Loc::at(line);
                        if s.rank.is_none() && i.rank.is_some() {
                            s.rank = i.rank;
                            s.rank_at = here;
                        }
                        if let Some(n) = i.nranks {
                            match s.nranks_init {
                                None => {
                                    s.nranks_init = Some(n);
                                    s.nranks_init_at = here;
                                }
                                Some(m) if m != n && s.nranks_other.is_none() => {
                                    s.nranks_other = Some((n, here, true));
                                }
                                Some(_) => {}
                            }
                        }
                        s.comm_id = i.comm_id.or(s.comm_id);
                        s.parent = i.parent.or(s.parent);
                        s.color = i.color.or(s.color);
                        s.split_count = i.split_count.or(s.split_count);
                        match i.phase {
                            InitPhase::Complete => s.init_complete = true,
                            InitPhase::Destroy | InitPhase::Abort => {
                                s.ended = Some((
                                    i.phase,
                                    Loc {
                                        file: 0,
                                        line: u64::from(line),
                                    },
                                ));
                                self.bump(idx);
                            }
                            InitPhase::Start | InitPhase::Topology => {}
                        }
                    }
                    Body::Warn(w) => {
                        self.counts.warn_lines += 1;
                        if self.warnings.len() >= MAX_WARNINGS {
                            return; // counted, not kept: a WARN flood must not grow memory
                        }
                        let host = self.host_id(head.host);
                        let text = String::from_utf8_lossy(&w.text[..w.text.len().min(300)]);
                        self.warnings.push(WarnRec {
                            host,
                            pid: head.pid,
                            dev: head.dev,
                            loc: Loc {
                                file: 0,
                                line: u64::from(line),
                            },
                            op: w.op,
                            kind: w.kind,
                            text: text.into_owned(),
                        });
                    }
                    Body::Other => self.counts.other_nccl_lines += 1,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::collect_bytes;

    #[test]
    fn pointer_reuse_after_destroy_starts_a_new_stream() {
        let text = b"h:1:1 [0] NCCL INFO ncclCommInitRank comm 0x10 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 0 commId 0xa - Init COMPLETE
h:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 4 datatype 7 op 0 root 0 comm 0x10 [nranks=2] stream (nil)
h:1:1 [0] NCCL INFO comm 0x10 rank 0 nranks 2 cudaDev 0 busId 0 - Destroy COMPLETE
h:1:1 [0] NCCL INFO ncclCommInitRank comm 0x10 rank 1 nranks 4 cudaDev 0 nvmlDev 0 busId 0 commId 0xb - Init COMPLETE
h:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 8 datatype 7 op 0 root 0 comm 0x10 [nranks=4] stream (nil)
";
        let c = collect_bytes("x", text);
        assert_eq!(c.streams.len(), 2);
        assert_eq!(
            (
                c.streams[0].comm_id,
                c.streams[0].calls.len(),
                c.streams[0].rank
            ),
            (Some(0xa), 1, Some(0))
        );
        assert_eq!(
            (
                c.streams[1].comm_id,
                c.streams[1].calls.len(),
                c.streams[1].rank
            ),
            (Some(0xb), 1, Some(1))
        );
        assert!(c.streams[0].ended.is_some());
        assert_eq!(c.streams[1].loc(0).line, 5);
    }
}
