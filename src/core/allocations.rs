//! Test support: the most bytes a piece of code holds allocated at once on
//! its thread, so a decoder fed a peer's bytes can be held to its bound.
//! The test binary's allocator is the system's, counted per thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

#[global_allocator]
static COUNTING: Counting = Counting;

thread_local! {
    /// bytes this thread allocated less those it freed (memory allocated
    /// on one thread and freed on another makes it drift, never wrong for
    /// a measure that allocates and frees on one)
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    // try_with: nothing is counted while the thread's cells are torn down
    let _ = LIVE.try_with(|live| {
        let now = live.get().wrapping_add(delta);
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every call goes to the system allocator with the caller's own
// arguments and its answer comes back unchanged, so this allocator keeps
// every promise `System` keeps; the counting beside it touches only this
// thread's cells and allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's promises for `alloc` are passed on as made.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from `System`,
        // with `layout`, as the caller promises.
        unsafe { System.dealloc(ptr, layout) };
        note(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`, and `new_size` is the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            note(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// `f`'s result, and the most bytes it held allocated at once on this
/// thread beyond what the thread held before (its result included).
pub fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(start));
    let r = f();
    let peak = PEAK.with(Cell::get);
    (r, peak.saturating_sub(start).max(0) as usize)
}

#[test]
fn what_a_closure_allocates_is_counted() {
    let (v, peak) = peak_of(|| vec![0u8; 10_000]);
    assert!((10_000..10_100).contains(&peak), "{peak}");
    drop(v);
    // freed inside: still counted at its most
    let ((), peak) = peak_of(|| drop(std::hint::black_box(vec![1u64; 500])));
    assert!((4_000..4_100).contains(&peak), "{peak}");
    let ((), peak) = peak_of(|| {});
    assert_eq!(peak, 0);
}
