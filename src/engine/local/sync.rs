//! The local engine's synchronisation primitives: how a wait spends its
//! time before it parks (`Patience`), values padded to their own cache
//! lines, a poison-tolerant lock, and a generation barrier a waiter can
//! leave while it is incomplete.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Busy-wait rounds before yielding, when every rank has a core of its own:
/// a few microseconds (a `pause` takes tens of nanoseconds), enough for a
/// peer that is about to arrive. More only costs when the peer is not
/// running (the machine is busy with other work): then every microsecond
/// spent spinning is one the peer waits for its core.
const SPINS: u32 = 128;
/// `yield_now` rounds before parking, with a core per rank.
const YIELDS: u32 = 50;
/// When ranks outnumber cores, a spinning rank only delays the rank it waits
/// for (which needs its core): such waits yield at once, and keep yielding
/// longer before they park (a park and its wake-up cost a few microseconds).
const YIELDS_OVERSUBSCRIBED: u32 = 2000;
pub const PARK: Duration = Duration::from_millis(2);

/// How a wait spends its time before it parks.
#[derive(Debug, Clone, Copy)]
pub struct Patience {
    spins: u32,
    yields: u32,
    /// more ranks than cores
    pub oversubscribed: bool,
}

/// Busy-wait rounds before yielding when every rank has a core of its own
/// (pinned): about a millisecond. No peer needs this core, and yielding it
/// would hand it to whatever else the machine runs for a whole time slice,
/// so the rank keeps its core like an MPI process polling.
const SPINS_PINNED: u32 = 20_000;

impl Patience {
    pub fn pinned() -> Patience {
        Patience {
            spins: SPINS_PINNED,
            yields: YIELDS,
            oversubscribed: false,
        }
    }

    pub fn for_ranks(n: usize) -> Patience {
        let cores = std::thread::available_parallelism()
            .map(|c| c.get())
            .unwrap_or(1);
        if n > cores {
            Patience {
                spins: 0,
                yields: YIELDS_OVERSUBSCRIBED,
                oversubscribed: true,
            }
        } else {
            Patience {
                spins: SPINS,
                yields: YIELDS,
                oversubscribed: false,
            }
        }
    }

    /// One round of waiting: spin, yield, or false when it is time to park.
    #[inline]
    pub fn idle(&self, round: u32) -> bool {
        if round < self.spins {
            std::hint::spin_loop();
            true
        } else if round < self.spins + self.yields {
            std::thread::yield_now();
            true
        } else {
            false
        }
    }
}

/// A value alone on its cache lines (128 bytes: adjacent-line prefetch
/// pairs lines), so ranks writing neighbouring values do not invalidate
/// each other's copies (false sharing).
#[derive(Default)]
#[repr(align(128))]
pub struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Locks a mutex, ignoring poisoning: the engine's protected data stays
/// consistent across a panic (panics are caught and turned into errors).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A generation barrier that a waiter can leave (withdraw from) only while
/// the generation is incomplete, so nobody proceeds past a rank that left.
#[derive(Default)]
pub struct Barrier {
    /// generation << 32 | ranks present
    word: AtomicU64,
}

const PRESENT: u64 = 0xFFFF_FFFF;

impl Barrier {
    /// Arrives; returns the generation and whether this arrival completed it.
    pub fn arrive(&self, n: usize) -> (u64, bool) {
        self.arrive_then(n, || {})
    }
    /// [`Barrier::arrive`], and the arrival that completes the generation
    /// runs `last` before anyone can pass it: while every rank is present
    /// and none has left.
    pub fn arrive_then(&self, n: usize, last: impl FnOnce()) -> (u64, bool) {
        let w = self.word.fetch_add(1, SeqCst);
        let generation = w >> 32;
        if (w & PRESENT) + 1 == n as u64 {
            last();
            // all present: nobody can withdraw or arrive until this store
            self.word.store((generation + 1) << 32, SeqCst);
            (generation, true)
        } else {
            (generation, false)
        }
    }
    pub fn passed(&self, generation: u64) -> bool {
        self.word.load(SeqCst) >> 32 != generation
    }
    /// Leaves generation `generation`; false when it completed meanwhile (then the
    /// caller must take part in the phase after all).
    pub fn withdraw(&self, generation: u64, n: usize) -> bool {
        loop {
            let w = self.word.load(SeqCst);
            if w >> 32 != generation {
                return false;
            }
            if w & PRESENT == n as u64 {
                std::hint::spin_loop();
                continue;
            }
            if self.word.compare_exchange(w, w - 1, SeqCst, SeqCst).is_ok() {
                return true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barrier_completes_and_withdraw_blocks_completion() {
        let b = Barrier::default();
        assert_eq!(b.arrive(3), (0, false));
        assert_eq!(b.arrive(3), (0, false));
        assert!(b.withdraw(0, 3), "an incomplete generation can be left");
        assert_eq!(b.arrive(3), (0, false), "two present again, not three");
        assert!(!b.passed(0));
        assert_eq!(b.arrive(3), (0, true));
        assert!(b.passed(0));
        assert!(!b.withdraw(0, 3), "a completed generation cannot be left");
    }

    #[test]
    fn only_the_completing_arrival_runs_its_closure_before_the_generation_passes() {
        let b = Barrier::default();
        let runs = std::cell::Cell::new(0);
        assert_eq!(b.arrive_then(2, || runs.set(runs.get() + 1)), (0, false));
        assert_eq!(
            runs.get(),
            0,
            "an arrival that completes nothing runs nothing"
        );
        let seen = b.arrive_then(2, || {
            assert!(!b.passed(0), "the closure runs before anyone can pass");
            runs.set(runs.get() + 1);
        });
        assert_eq!((seen, runs.get()), ((0, true), 1));
        assert!(b.passed(0));
    }
}
