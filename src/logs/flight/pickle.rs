//! The pickles PyTorch writes for Flight Recorder, decoded into JSON values.
//!
//! PyTorch's own pickler (protocol 2) writes plain dictionaries, lists,
//! tuples, strings, integers, floats, booleans and `None`, and memoizes
//! every string it may repeat (`BINPUT`), then refers back to it (`BINGET`)
//! — also from inside a structure that is itself still being built, which
//! the general-purpose `serde-pickle` 1.2 rejects as a recursive structure
//! (or, told to go on, replaces by `None`). This decoder runs just the
//! opcodes such a pickle holds, shares memoized values by copy, and refuses
//! anything else (classes, `REDUCE` of unknown globals) by name. The input
//! is hostile: every length is checked against what is left, the stack and
//! memo are bounded, and so is the number of values made (a memoized value
//! referred to many times is copied each time).

use serde_json::{Map, Number, Value};

/// The most values one pickle may make, copies of memoized ones included.
const MAX_VALUES: usize = 1 << 26;
/// The deepest nesting of marks.
const MAX_MARKS: usize = 256;

enum Item {
    Mark,
    V(Value),
}

struct Vm<'a> {
    b: &'a [u8],
    pos: usize,
    stack: Vec<Item>,
    marks: usize,
    memo: Vec<Option<Value>>,
    made: usize,
}

/// Decode a pickle into a JSON value (dictionary keys as strings).
pub fn decode(b: &[u8]) -> Result<Value, String> {
    let mut vm = Vm {
        b,
        pos: 0,
        stack: Vec::new(),
        marks: 0,
        memo: Vec::new(),
        made: 0,
    };
    vm.run().map_err(|e| format!("{e} (byte {})", vm.pos))
}

impl Vm<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or_else(|| format!("cut short: {n} more bytes expected"))?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn push(&mut self, v: Value) -> Result<(), String> {
        self.made += 1;
        if self.made > MAX_VALUES {
            return Err(format!("more than {MAX_VALUES} values"));
        }
        self.stack.push(Item::V(v));
        Ok(())
    }

    fn pop(&mut self) -> Result<Value, String> {
        match self.stack.pop() {
            Some(Item::V(v)) => Ok(v),
            _ => Err("a value was expected on the stack".into()),
        }
    }

    /// The values above the last mark, which is removed.
    fn pop_mark(&mut self) -> Result<Vec<Value>, String> {
        let at = self
            .stack
            .iter()
            .rposition(|i| matches!(i, Item::Mark))
            .ok_or("no mark on the stack")?;
        let items = self.stack.split_off(at + 1);
        self.stack.pop();
        self.marks -= 1;
        items
            .into_iter()
            .map(|i| match i {
                Item::V(v) => Ok(v),
                Item::Mark => Err("a mark inside a mark".to_string()),
            })
            .collect()
    }

    fn top(&mut self) -> Result<&mut Value, String> {
        match self.stack.last_mut() {
            Some(Item::V(v)) => Ok(v),
            _ => Err("a container was expected on the stack".into()),
        }
    }

    fn set_items(&mut self, kv: Vec<Value>) -> Result<(), String> {
        if !kv.len().is_multiple_of(2) {
            return Err("a key without its value".into());
        }
        let Value::Object(m) = self.top()? else {
            return Err("SETITEMS on something not a dictionary".into());
        };
        let mut it = kv.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            let key = match k {
                Value::String(s) => s,
                other => other.to_string(),
            };
            m.insert(key, v);
        }
        Ok(())
    }

    fn append(&mut self, items: Vec<Value>) -> Result<(), String> {
        match self.top()? {
            Value::Array(a) => {
                a.extend(items);
                Ok(())
            }
            _ => Err("APPENDS on something not a list".into()),
        }
    }

    fn memo_put(&mut self, i: usize) -> Result<(), String> {
        let v = match self.stack.last() {
            Some(Item::V(v)) => v.clone(),
            _ => return Err("nothing to memoize".into()),
        };
        if i > self.b.len() {
            return Err(format!("memo index {i} out of range"));
        }
        if self.memo.len() <= i {
            self.memo.resize(i + 1, None);
        }
        self.memo[i] = Some(v);
        Ok(())
    }

    fn memo_get(&mut self, i: usize) -> Result<(), String> {
        let v = self
            .memo
            .get(i)
            .cloned()
            .flatten()
            .ok_or_else(|| format!("memo {i} was never stored"))?;
        self.made += count(&v);
        self.push(v)
    }

    fn string(&mut self, n: usize) -> Result<(), String> {
        let s = String::from_utf8_lossy(self.take(n)?).into_owned();
        self.push(Value::String(s))
    }

    fn run(&mut self) -> Result<Value, String> {
        loop {
            let op = self.u8()?;
            match op {
                0x80 => {
                    self.u8()?; // PROTO n
                }
                0x95 => {
                    self.take(8)?; // FRAME length
                }
                b'.' => return self.pop(),
                b'}' => self.push(Value::Object(Map::new()))?,
                b']' => self.push(Value::Array(Vec::new()))?,
                b')' => self.push(Value::Array(Vec::new()))?,
                b'(' => {
                    self.marks += 1;
                    if self.marks > MAX_MARKS {
                        return Err(format!("more than {MAX_MARKS} nested marks"));
                    }
                    self.stack.push(Item::Mark);
                }
                b'N' => self.push(Value::Null)?,
                0x88 => self.push(Value::Bool(true))?,
                0x89 => self.push(Value::Bool(false))?,
                b'J' => {
                    let v = self.u32()? as i32;
                    self.push(Value::from(v))?;
                }
                b'K' => {
                    let v = self.u8()?;
                    self.push(Value::from(v))?;
                }
                b'M' => {
                    let s = self.take(2)?;
                    let v = u16::from_le_bytes([s[0], s[1]]);
                    self.push(Value::from(v))?;
                }
                0x8a => {
                    // LONG1: n little-endian two's-complement bytes
                    let n = usize::from(self.u8()?);
                    let s = self.take(n)?;
                    if n > 8 {
                        return Err(format!("an integer of {n} bytes"));
                    }
                    let mut buf = if s.last().is_some_and(|b| b & 0x80 != 0) {
                        [0xff; 8]
                    } else {
                        [0; 8]
                    };
                    buf[..n].copy_from_slice(s);
                    self.push(Value::from(i64::from_le_bytes(buf)))?;
                }
                b'G' => {
                    let s = self.take(8)?;
                    let f = f64::from_be_bytes(s.try_into().map_err(|_| "float")?);
                    self.push(Number::from_f64(f).map_or(Value::Null, Value::Number))?;
                }
                b'X' => {
                    let n = self.u32()? as usize;
                    self.string(n)?;
                }
                0x8c => {
                    let n = usize::from(self.u8()?);
                    self.string(n)?;
                }
                b'C' => {
                    let n = usize::from(self.u8()?);
                    self.string(n)?;
                }
                b'B' => {
                    let n = self.u32()? as usize;
                    self.string(n)?;
                }
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Value::Array(items))?;
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop()?);
                    }
                    items.reverse();
                    self.push(Value::Array(items))?;
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    self.set_items(vec![k, v])?;
                }
                b'u' => {
                    let kv = self.pop_mark()?;
                    self.set_items(kv)?;
                }
                b'a' => {
                    let v = self.pop()?;
                    self.append(vec![v])?;
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    self.append(items)?;
                }
                b'q' => {
                    let i = usize::from(self.u8()?);
                    self.memo_put(i)?;
                }
                b'r' => {
                    let i = self.u32()? as usize;
                    self.memo_put(i)?;
                }
                0x94 => {
                    let i = self.memo.len();
                    self.memo_put(i)?;
                }
                b'h' => {
                    let i = usize::from(self.u8()?);
                    self.memo_get(i)?;
                }
                b'j' => {
                    let i = self.u32()? as usize;
                    self.memo_get(i)?;
                }
                b'c' => {
                    return Err(
                        "a class or function reference (GLOBAL): not a plain Flight Recorder dump"
                            .into(),
                    );
                }
                other => return Err(format!("pickle opcode 0x{other:02x} is not read here")),
            }
        }
    }
}

/// Values in `v` (for the bound on copies).
fn count(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(count).sum::<usize>(),
        Value::Object(m) => 1 + m.values().map(count).sum::<usize>(),
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::decode;
    use serde_json::json;

    #[test]
    fn a_pytorch_dump_reads_as_its_json_twin() {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/pytorch-2.11-gloo-cpu"
        );
        for case in ["healthy", "skip", "count"] {
            for r in 0..4 {
                let p = std::fs::read(format!("{dir}/{case}/pickle/nccl_trace_rank_{r}")).unwrap();
                let j: serde_json::Value = serde_json::from_slice(
                    &std::fs::read(format!("{dir}/{case}/json/fr_rank{r}.json")).unwrap(),
                )
                .unwrap();
                let v = decode(&p).unwrap();
                // the JSON writer leaves out frames and writes 0 for a missing time
                let entries = |x: &serde_json::Value| -> Vec<_> {
                    x["entries"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|e| {
                            (
                                e["collective_seq_id"].clone(),
                                e["profiling_name"].clone(),
                                e["process_group"].clone(),
                                e["input_sizes"].clone(),
                                e["output_sizes"].clone(),
                                e["state"].clone(),
                            )
                        })
                        .collect()
                };
                assert_eq!(entries(&v), entries(&j), "{case} rank {r}");
                assert_eq!(v["version"], j["version"]);
                assert_eq!(v["pg_config"], j["pg_config"]);
            }
        }
    }

    #[test]
    fn hostile_pickles_are_refused_by_name() {
        // cut short inside a string
        assert!(
            decode(b"\x80\x02X\x10\x00\x00\x00abc")
                .unwrap_err()
                .starts_with("cut short")
        );
        // a class reference
        assert!(
            decode(b"\x80\x02cos\nsystem\n.")
                .unwrap_err()
                .contains("GLOBAL")
        );
        // a memo slot never stored
        assert!(
            decode(b"\x80\x02h\x05.")
                .unwrap_err()
                .contains("never stored")
        );
        // a mark without its end, then STOP on a mark
        assert!(decode(b"\x80\x02(.").is_err());
        // a plain one
        assert_eq!(
            decode(
                b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01K\x07h\x01]q\x02(K\x01J\xff\xff\xff\xffeu."
            )
            .unwrap(),
            json!({"a": [1, -1]})
        );
    }
}
