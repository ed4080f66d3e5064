//! A Flight Recorder dump, pickle or JSON, → [`Dump`].
//!
//! PyTorch writes one dump per rank (`TORCH_FR_BUFFER_SIZE` /
//! `TORCH_NCCL_TRACE_BUFFER_SIZE`, on timeout with `TORCH_NCCL_DUMP_ON_TIMEOUT`):
//! a pickle (protocol 2, plain dicts, lists, strings and numbers; decoded
//! by [`super::pickle`]) at
//! `${TORCH_FR_DUMP_TEMP_FILE}<rank>`, or the same fields as JSON through
//! `_dump_nccl_trace_json`. Format versions 2.2 to 2.10 (PyTorch 2.5 to
//! 2.11) are read: fields added later are optional, and a field of the
//! wrong type is an error that names it. The dump does not hold its own
//! rank; like PyTorch's analyzer, the reader takes the digits that end
//! the file's name.

use serde_json::Value;

/// The most bytes read from one dump (a 20,000-entry buffer with stack
/// frames is a few tens of MB).
pub const MAX_DUMP_BYTES: u64 = 512 << 20;
/// The most entries kept from one dump.
pub const MAX_ENTRIES: usize = 1 << 20;

/// One rank's dump.
#[derive(Clone, Debug, PartialEq)]
pub struct Dump {
    pub path: String,
    /// The global rank (from the file name).
    pub rank: Option<u32>,
    pub version: String,
    pub groups: Vec<PgConfig>,
    pub entries: Vec<Entry>,
}

/// A process group as `pg_config` states it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgConfig {
    pub name: String,
    pub desc: String,
    /// Its members' global ranks, in group-rank order.
    pub ranks: Vec<u32>,
}

/// One recorded call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub record_id: u64,
    pub pg_name: String,
    pub pg_desc: String,
    pub collective_seq_id: u64,
    pub p2p_seq_id: u64,
    /// `nccl:all_reduce`, `nccl:send 0->1`, `gloo:broadcast`, …
    pub profiling_name: String,
    pub is_p2p: bool,
    pub input_sizes: Vec<Vec<i64>>,
    pub input_dtypes: Vec<String>,
    pub output_sizes: Vec<Vec<i64>>,
    pub output_dtypes: Vec<String>,
    /// `scheduled`, `started` or `completed`.
    pub state: String,
}

impl Entry {
    /// `all_reduce` in `nccl:all_reduce`; `send` in `nccl:send 0->1`.
    pub fn op(&self) -> &str {
        let name = self
            .profiling_name
            .split_once(':')
            .map_or(self.profiling_name.as_str(), |(_, n)| n);
        name.split(' ').next().unwrap_or(name)
    }

    /// For Send/Recv: `(src, dst)` in group ranks.
    pub fn peers(&self) -> Option<(u32, u32)> {
        let meta = self.profiling_name.split(' ').nth(1)?;
        if let Some((s, d)) = meta.split_once("->") {
            return Some((s.parse().ok()?, d.parse().ok()?));
        }
        let (d, s) = meta.split_once("<-")?;
        Some((s.parse().ok()?, d.parse().ok()?))
    }
}

/// What kind of file a dump is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DumpFormat {
    Pickle,
    Json,
}

/// Whether `head` (a file's first bytes) looks like a Flight Recorder dump.
pub fn sniff(head: &[u8]) -> Option<DumpFormat> {
    if head.len() >= 2 && head[0] == 0x80 && (2..=5).contains(&head[1]) {
        return Some(DumpFormat::Pickle);
    }
    let text = head.trim_ascii_start();
    let has = |k: &[u8]| memchr::memmem::find(text, k).is_some();
    (text.first() == Some(&b'{')
        && (has(b"\"entries\"") || has(b"\"pg_config\"") || has(b"\"version\"")))
    .then_some(DumpFormat::Json)
}

/// The rank that ends a dump's file name (`nccl_trace_rank_3` → 3).
pub fn rank_from_name(path: &str) -> Option<u32> {
    let name = path.rsplit('/').next().unwrap_or(path);
    let stem = name.split('.').next().unwrap_or(name);
    let digits = stem.bytes().rev().take_while(u8::is_ascii_digit).count();
    (digits > 0 && digits <= 9)
        .then(|| stem[stem.len() - digits..].parse().ok())
        .flatten()
}

/// Parse a dump's bytes.
pub fn parse(path: &str, bytes: &[u8], format: DumpFormat) -> Result<Dump, String> {
    let value = match format {
        DumpFormat::Json => serde_json::from_slice::<Value>(bytes)
            .map_err(|e| format!("not a Flight Recorder JSON dump: {e}"))?,
        DumpFormat::Pickle => super::pickle::decode(bytes)
            .map_err(|e| format!("not a Flight Recorder pickle dump: {e}"))?,
    };
    from_value(path, &value)
}

fn from_value(path: &str, v: &Value) -> Result<Dump, String> {
    let top = v
        .as_object()
        .ok_or("not a Flight Recorder dump: the top level is not a dictionary")?;
    let version = match top.get("version") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => return Err("not a Flight Recorder dump: no 'version' field".into()),
    };
    let mut groups = Vec::new();
    if let Some(Value::Object(cfg)) = top.get("pg_config") {
        for (key, g) in cfg {
            let field = |k: &str| g.get(k).and_then(Value::as_str).unwrap_or_default();
            let name = if field("name").is_empty() {
                key.as_str()
            } else {
                field("name")
            };
            groups.push(PgConfig {
                name: name.to_string(),
                desc: field("desc").to_string(),
                ranks: parse_ranks(field("ranks")),
            });
        }
    }
    let mut entries = Vec::new();
    if let Some(list) = top.get("entries") {
        let list = list.as_array().ok_or("'entries' is not a list")?;
        for (i, e) in list.iter().take(MAX_ENTRIES).enumerate() {
            entries.push(entry(e).map_err(|why| format!("entry {i}: {why}"))?);
        }
    }
    Ok(Dump {
        path: path.to_string(),
        rank: rank_from_name(path),
        version,
        groups,
        entries,
    })
}

/// `"[0, 1, 2]"` → `[0, 1, 2]`.
fn parse_ranks(s: &str) -> Vec<u32> {
    s.trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .filter_map(|x| x.trim().parse().ok())
        .collect()
}

fn entry(e: &Value) -> Result<Entry, String> {
    let o = e.as_object().ok_or("not a dictionary")?;
    let uint = |k: &str| -> Result<u64, String> {
        match o.get(k) {
            Some(v) => v
                .as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                .ok_or_else(|| format!("'{k}' is {v}, expected an unsigned integer")),
            None => Ok(0),
        }
    };
    let text = |k: &str| {
        o.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let sizes = |k: &str| -> Result<Vec<Vec<i64>>, String> {
        let Some(v) = o.get(k) else {
            return Ok(Vec::new());
        };
        let bad = || format!("'{k}' is not a list of lists of integers");
        v.as_array()
            .ok_or_else(bad)?
            .iter()
            .map(|t| {
                t.as_array()
                    .ok_or_else(bad)?
                    .iter()
                    .map(|d| d.as_i64().ok_or_else(bad))
                    .collect()
            })
            .collect()
    };
    let strings = |k: &str| -> Vec<String> {
        o.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (pg_name, pg_desc) = match o.get("process_group") {
        Some(Value::Array(a)) => (
            a.first()
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            a.get(1)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        ),
        Some(Value::String(s)) => (s.clone(), String::new()),
        _ => (String::new(), String::new()),
    };
    let profiling_name = text("profiling_name");
    if profiling_name.is_empty() {
        return Err("no 'profiling_name'".into());
    }
    Ok(Entry {
        record_id: uint("record_id")?,
        pg_name,
        pg_desc,
        collective_seq_id: uint("collective_seq_id")?,
        p2p_seq_id: uint("p2p_seq_id")?,
        is_p2p: o.get("is_p2p").and_then(Value::as_bool).unwrap_or_else(|| {
            profiling_name.contains(":send") || profiling_name.contains(":recv")
        }),
        profiling_name,
        input_sizes: sizes("input_sizes")?,
        input_dtypes: strings("input_dtypes"),
        output_sizes: sizes("output_sizes")?,
        output_dtypes: strings("output_dtypes"),
        state: text("state"),
    })
}
