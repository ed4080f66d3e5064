//! What the scale harnesses share: a rank's connection to the store that
//! counts every request it makes and the bytes it carries both ways (what
//! they report as the store's load), and their command line.

use rankwise::core::Result as RwResult;
use rankwise::transport::store::{Item, Share, SideChannel};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A rank's connection, counting what it carries.
pub struct Counted {
    /// a TCP client, or the store itself for the rank in its process
    pub inner: Arc<dyn SideChannel>,
    pub requests: Arc<AtomicU64>,
    pub bytes: Arc<AtomicU64>,
}

fn item_bytes(items: &[Item<'_>]) -> u64 {
    items
        .iter()
        .map(|i| (i.key.len() + 8 * i.owners.len() + i.value.map_or(0, <[u8]>::len) + 16) as u64)
        .sum()
}

impl SideChannel for Counted {
    fn set(&self, key: &str, value: &[u8]) -> RwResult<()> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes
            .fetch_add((key.len() + value.len()) as u64, Ordering::Relaxed);
        self.inner.set(key, value)
    }
    fn get(
        &self,
        key: &str,
        owner: usize,
        deadline: Instant,
    ) -> RwResult<Result<Vec<u8>, rankwise::transport::store::Missing>> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let r = self.inner.get(key, owner, deadline)?;
        let n = key.len() + r.as_ref().map_or(0, Vec::len);
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(r)
    }
    fn finish(&self, rank: usize, error: Option<&str>) -> RwResult<()> {
        self.inner.finish(rank, error)
    }
    fn exchange(
        &self,
        items: &[Item<'_>],
        note: Option<(usize, &[u8])>,
        deadline: Instant,
    ) -> RwResult<Vec<Vec<Share>>> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let answer = self.inner.exchange(items, note, deadline)?;
        let back: usize = answer
            .iter()
            .flatten()
            .map(|s| s.as_ref().map_or(8, |v| v.len() + 8))
            .sum();
        self.bytes
            .fetch_add(item_bytes(items) + back as u64, Ordering::Relaxed);
        Ok(answer)
    }
    fn last_note(&self, owner: usize) -> RwResult<Option<Vec<u8>>> {
        self.inner.last_note(owner)
    }
}

/// The value after `name` on the command line.
pub fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// `--ranks`: the sizes to run, a comma list (`default` without it).
pub fn sizes(default: &str) -> Vec<usize> {
    arg("--ranks")
        .unwrap_or_else(|| default.into())
        .split(',')
        .map(|s| s.parse().expect("--ranks: a comma list of numbers"))
        .collect()
}
