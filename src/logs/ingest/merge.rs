//! Segment results, folded in file and segment order into one
//! [`Collected`]: hosts and signatures renumbered, line numbers offset,
//! streams continued across segments and files (a file that repeats what
//! another already holds is skipped and said).

use super::FxMap;
use super::segment::{SegResult, StreamKey};
use crate::logs::model::{BadLine, Collected, FileInfo, Loc, Sig};
use std::collections::HashMap;

/// Folds segment results, in order, into one [`Collected`].
pub(super) struct Merger {
    out: Collected,
    host_ids: HashMap<Box<[u8]>, u32>,
    sig_ids: FxMap<Sig, u32>,
    /// (host, pid, comm, epoch) → global stream index.
    index: FxMap<(u32, u32, u64, u32), usize>,
    /// Epoch base per (host, pid, comm): bumps seen in earlier segments.
    base: FxMap<StreamKey, u32>,
    /// Lines already delivered per file (the line offset of the next segment).
    file_lines: Vec<u64>,
    /// (file, global stream) pairs whose calls repeat an earlier file's.
    repeated: std::collections::HashSet<(u32, usize)>,
}

impl Merger {
    pub(super) fn new(files: Vec<FileInfo>) -> Self {
        let n = files.len();
        Merger {
            out: Collected {
                files,
                ..Collected::default()
            },
            host_ids: HashMap::new(),
            sig_ids: FxMap::default(),
            index: FxMap::default(),
            base: FxMap::default(),
            file_lines: vec![0; n],
            repeated: std::collections::HashSet::new(),
        }
    }

    pub(super) fn add(&mut self, file: u32, r: SegResult) {
        let SegResult { st, note } = r;
        let f = file as usize;
        let offset = self.file_lines[f];
        self.file_lines[f] += st.counts.lines;
        self.out.files[f].lines += st.counts.lines;
        if note.is_some() && self.out.files[f].note.is_none() {
            self.out.files[f].note = note;
        }
        let info = &mut self.out.files[f];
        info.long_lines += st.counts.long_lines;
        if info.first_long_line.is_none() {
            info.first_long_line = st.first_long_line.map(|(line, len)| (line + offset, len));
        }
        self.out.counts.add(&st.counts);
        let loc = |line: u64| Loc {
            file,
            line: line + offset,
        };

        let hosts: Vec<u32> = st
            .hosts
            .iter()
            .map(|h| match self.host_ids.get(h) {
                Some(&id) => id,
                None => {
                    let id = self.out.hosts.len() as u32;
                    self.out.hosts.push(String::from_utf8_lossy(h).into_owned());
                    self.host_ids.insert(h.clone(), id);
                    id
                }
            })
            .collect();
        let sigs: Vec<u32> = st
            .sigs
            .iter()
            .map(|s| {
                let next = self.out.sigs.len() as u32;
                *self.sig_ids.entry(*s).or_insert_with(|| {
                    self.out.sigs.push(*s);
                    next
                })
            })
            .collect();
        let line32 = |l: u32| -> u32 { u32::try_from(u64::from(l) + offset).unwrap_or(u32::MAX) };

        for mut s in st.streams {
            let host = hosts[s.host as usize];
            let key = (host, s.pid, s.comm);
            let epoch = self.base.get(&key).copied().unwrap_or(0) + s.epoch;
            for c in &mut s.calls {
                c.sig = sigs[c.sig as usize];
                c.line = line32(c.line);
            }
            let first = loc(s.first.line);
            let last = loc(s.last.line);
            let ended = s.ended.map(|(p, l)| (p, loc(l.line)));
            s.rank_at = loc(s.rank_at.line);
            s.nranks_init_at = loc(s.nranks_init_at.line);
            s.nranks_coll_at = loc(s.nranks_coll_at.line);
            s.nranks_other = s.nranks_other.map(|(n, l, init)| (n, loc(l.line), init));
            match self.index.get(&(host, s.pid, s.comm, epoch)) {
                None => {
                    self.index
                        .insert((host, s.pid, s.comm, epoch), self.out.streams.len());
                    s.host = host;
                    s.epoch = epoch;
                    s.first = first;
                    s.last = last;
                    s.ended = ended;
                    s.file_runs = vec![(file, 0)];
                    self.out.streams.push(s);
                }
                Some(&g) => {
                    let d = &mut self.out.streams[g];
                    let new_file = d.file_runs.last().map(|r| r.0) != Some(file);
                    // opCount never goes back within a communicator: a file
                    // that restarts it below what was read is a second copy.
                    let restarts = match (s.calls.first(), d.calls.last()) {
                        (Some(a), Some(b)) => {
                            a.op_count != u64::MAX
                                && b.op_count != u64::MAX
                                && a.op_count < b.op_count
                        }
                        _ => false,
                    };
                    if self.repeated.contains(&(file, g)) || (new_file && restarts) {
                        if self.repeated.insert((file, g)) {
                            let first_file = d.file_runs[0].0 as usize;
                            self.out.repeated_procs.push((file, host, s.pid));
                            self.out.repeats.push(format!(
                                "{} repeats the calls of {}:{} comm 0x{:x} already read from {}; skipped, with that process's WARN lines there",
                                self.out.files[f].path,
                                self.out.hosts[host as usize],
                                s.pid,
                                s.comm,
                                self.out.files[first_file].path
                            ));
                        }
                        self.out.counts.repeated_calls += s.calls.len() as u64;
                        continue;
                    }
                    if new_file {
                        d.file_runs.push((file, d.calls.len() as u32));
                    }
                    d.calls.extend_from_slice(&s.calls);
                    if d.rank.is_none() {
                        (d.rank, d.rank_at) = (s.rank, s.rank_at);
                    }
                    // The first statement of each kind is kept; a different
                    // later one is remembered for the report.
                    for (mine, mine_at, theirs, theirs_at, init) in [
                        (
                            &mut d.nranks_init,
                            &mut d.nranks_init_at,
                            s.nranks_init,
                            s.nranks_init_at,
                            true,
                        ),
                        (
                            &mut d.nranks_coll,
                            &mut d.nranks_coll_at,
                            s.nranks_coll,
                            s.nranks_coll_at,
                            false,
                        ),
                    ] {
                        match (*mine, theirs) {
                            (None, Some(_)) => (*mine, *mine_at) = (theirs, theirs_at),
                            (Some(m), Some(n)) if m != n && d.nranks_other.is_none() => {
                                d.nranks_other = Some((n, theirs_at, init));
                            }
                            _ => {}
                        }
                    }
                    d.nranks_other = d.nranks_other.or(s.nranks_other);
                    d.comm_id = d.comm_id.or(s.comm_id);
                    d.parent = d.parent.or(s.parent);
                    d.color = d.color.or(s.color);
                    d.split_count = d.split_count.or(s.split_count);
                    d.init_complete |= s.init_complete;
                    d.dev = d.dev.or(s.dev);
                    d.prefix_rank = s.prefix_rank.or(d.prefix_rank);
                    d.prefix_local = s.prefix_local.or(d.prefix_local);
                    d.last = d.last.max(last);
                    d.ended = ended.or(d.ended);
                }
            }
        }
        for (key, n) in st.bumps {
            let key = (hosts[key.0 as usize], key.1, key.2);
            *self.base.entry(key).or_insert(0) += n;
        }
        if self.out.first_malformed_call.is_none() {
            self.out.first_malformed_call = st.first_malformed_call.map(|b| BadLine {
                loc: loc(b.loc.line),
                ..b
            });
        }
        for mut w in st.warnings {
            w.host = hosts[w.host as usize];
            w.loc = loc(w.loc.line);
            self.out.warnings.push(w);
        }
        for mut t in st.torch {
            t.loc = loc(t.loc.line);
            self.out.torch.push(t);
        }
    }

    pub(super) fn finish(mut self) -> Collected {
        for s in &mut self.out.streams {
            s.calls.shrink_to_fit();
        }
        self.out
    }
}
