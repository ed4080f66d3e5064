//! Memory of the local engine's data phase: the accessors through which a
//! rank moves data between other ranks' allocations (host memory,
//! `engine::host_memory`), and the streaming copies they use. Every
//! `unsafe` operation of the engine on memory is here. The one other
//! `unsafe` in the engine is the call that opens a data phase,
//! [`Phase::enter`]: where a launch's ranks have met and agreed
//! (`exec.rs`), and where a Recv has claimed a Send whose sender waits for
//! it (`p2p.rs`), each with its argument. The reduction loops are safe code
//! over the slices [`Phase::view`] hands out (`crate::kernels`, whose own
//! `unsafe` is the choice of instruction set).
//!
//! Why the accessors are sound: a [`Phase`] token exists only between a
//! launch's arrival rendezvous and its completion rendezvous. Before a call
//! is posted its buffers passed [`crate::core::check_buffers`] (raw face:
//! inside a live registered allocation; typed face: derived from live Rust
//! slices borrowed for the whole call), and every rank's posted extents were
//! checked to agree (same count, datatype, op). Every owner stays blocked in
//! the call until the completion rendezvous, so no buffer is freed or touched
//! by its owner while others use it. The collectives partition the work so
//! that no two threads write the same byte, and no thread reads bytes that
//! another writes in the same phase (each family's module says how).
//!
//! A small call goes inline instead (`exec.rs`): its owner copies its own
//! send buffer into its mailbox when posting, and computes its own results
//! from every rank's copy into its own recv buffer. Neither touches another
//! rank's memory, and no other rank writes this rank's buffers then: only a
//! data phase of a launch this rank takes part in could.

use crate::core::Element;

/// Proof that the current thread is inside a launch's data phase (see the
/// module doc). Only the launch code creates one.
pub struct Phase(());

impl Phase {
    /// # Safety
    /// Call only between a launch's arrival and completion rendezvous, with
    /// buffers checked and agreed as the module doc describes.
    pub(super) unsafe fn enter() -> Phase {
        Phase(())
    }

    /// Copies `bytes` bytes; no-op when `src == dst` (in-place forms).
    pub fn copy(&self, src: usize, dst: usize, bytes: usize) {
        if src != dst && bytes > 0 {
            // SAFETY: module doc: both extents are live and checked; the
            // families never hand this partially overlapping regions.
            unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, bytes) }
        }
    }

    /// Like [`Phase::copy`], with non-temporal stores when `bytes` is large
    /// enough to pay for them: for outputs that will not be read back soon
    /// (a large collective's), it skips reading each destination line before
    /// overwriting it and leaves the cache to the inputs. The stores are
    /// weakly ordered until [`Phase::fence`], which the data phase calls
    /// before its completion is signalled.
    pub fn copy_stream(&self, src: usize, dst: usize, bytes: usize) {
        if src != dst && bytes > 0 {
            // SAFETY: as in `copy`.
            unsafe { stream_copy(src as *const u8, dst as *mut u8, bytes, false) }
        }
    }

    /// Writes one cache line's worth of elements (`LINE` bytes) to `dst`.
    /// With `stream` and `dst` on a line boundary, non-temporal stores write
    /// the whole line without reading it first (weakly ordered until
    /// [`Phase::fence`], as in [`Phase::copy_stream`]); otherwise plain
    /// stores.
    #[inline(always)]
    pub fn write_line<T: Element>(&self, dst: usize, line: &[T], stream: bool) {
        assert_eq!(
            std::mem::size_of_val(line),
            LINE,
            "write_line: not one line"
        );
        // (Miri cannot run the streaming stores' inline assembly; plain
        // stores have the same effect on memory.)
        #[cfg(x86_simd)]
        if stream && dst.is_multiple_of(LINE) {
            use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
            let src = line.as_ptr() as *const __m128i;
            let dst = dst as *mut __m128i;
            // SAFETY: module doc: `dst` starts a live, checked line that no
            // other thread touches now; it is 64-byte (so 16-byte) aligned
            // as `_mm_stream_si128` requires, `line` holds 64 bytes, and
            // SSE2 is part of x86-64.
            unsafe {
                for k in 0..LINE / 16 {
                    _mm_stream_si128(dst.add(k), _mm_loadu_si128(src.add(k)));
                }
            }
            return;
        }
        #[cfg(not(x86_simd))]
        let _ = stream;
        self.write(dst, line);
    }

    /// Asks the CPU to start loading the line at `addr` into its caches,
    /// ahead of a read: a hint, which changes no memory and never faults,
    /// so any address will do, inside a buffer or past its end.
    #[inline(always)]
    pub fn prefetch(&self, addr: usize) {
        #[cfg(x86_simd)]
        // SAFETY: a prefetch reads nothing into the program and cannot
        // fault, whatever the address (SSE is part of x86-64).
        unsafe {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            _mm_prefetch::<_MM_HINT_T0>(addr as *const i8)
        }
        #[cfg(not(x86_simd))]
        let _ = addr;
    }

    /// Orders every streaming store made so far before any later store (the
    /// rendezvous that tells other ranks the data is there).
    pub fn fence(&self) {
        store_fence();
    }

    /// A read-only view of `len` elements. The caller drops it before writing
    /// any byte it covers.
    pub fn view<T: Element>(&self, addr: usize, len: usize) -> &[T] {
        if len == 0 {
            return &[];
        }
        debug_assert!(
            addr.is_multiple_of(std::mem::align_of::<T>()),
            "view of {} at {addr:#x}: not aligned for it",
            std::any::type_name::<T>()
        );
        // SAFETY: module doc: the extent is live, no thread writes it while
        // the view exists, and addresses are aligned for T (allocations are
        // 16-byte aligned and `check_buffers` refuses a pointer that is not
        // a whole number of elements into one; typed slices are aligned by
        // construction; inline payloads start on 8-byte words).
        unsafe { std::slice::from_raw_parts(addr as *const T, len) }
    }

    /// A mutable view of `len` elements that no other thread reads or
    /// writes while it lives, and that overlaps no other view.
    #[allow(clippy::mut_from_ref)]
    pub fn view_mut<T: Element>(&self, addr: usize, len: usize) -> &mut [T] {
        if len == 0 {
            return &mut [];
        }
        debug_assert!(
            addr.is_multiple_of(std::mem::align_of::<T>()),
            "mutable view of {} at {addr:#x}: not aligned for it",
            std::any::type_name::<T>()
        );
        // SAFETY: as in `view`, and the caller holds the only access to the
        // extent (a rank's own output in a call that nobody else writes).
        unsafe { std::slice::from_raw_parts_mut(addr as *mut T, len) }
    }

    /// Writes elements to `dst`, which no other thread reads or writes now.
    pub fn write<T: Element>(&self, dst: usize, src: &[T]) {
        self.copy(src.as_ptr() as usize, dst, std::mem::size_of_val(src));
    }
}

/// Copies with non-temporal stores (a safe wrapper over the kernel the data
/// phase uses; the benchmark measures the machine's copy bandwidth with it).
pub fn copy_streaming(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_streaming: lengths differ");
    // SAFETY: two distinct live slices (a `&mut` cannot alias a `&`) of
    // equal length.
    unsafe { stream_copy(src.as_ptr(), dst.as_mut_ptr(), src.len(), true) }
}

/// `sfence` on x86-64 (non-temporal stores are not ordered by the usual
/// x86 rules); nothing elsewhere, where no streaming stores are made.
fn store_fence() {
    #[cfg(x86_simd)]
    // SAFETY: SSE is part of x86-64.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    }
}

/// Bytes in a cache line: the unit of [`Phase::write_line`].
pub const LINE: usize = 64;

/// Below this many bytes a plain copy is as fast and keeps the data cached.
#[cfg(x86_simd)]
const STREAM_MIN: usize = 4096;

/// Copies `bytes` bytes from `src` to `dst` with 64-byte non-temporal
/// stores where the CPU has them (AVX-512F, AVX or SSE2 on x86-64) and plain
/// copies for the unaligned head and the tail. With `fence`, a store fence
/// at the end orders the stores; without, the caller fences once after many
/// copies (a fence waits for the stores to drain, so one per piece of a
/// large copy would stall it).
///
/// # Safety
/// `src` is valid for reading and `dst` for writing `bytes` bytes, and the
/// two regions do not overlap.
unsafe fn stream_copy(src: *const u8, dst: *mut u8, bytes: usize, fence: bool) {
    // under Miri, which cannot run the streaming stores, a plain copy
    #[cfg(x86_simd)]
    if bytes >= STREAM_MIN {
        let head = dst.align_offset(64).min(bytes);
        let body = (bytes - head) & !63;
        // SAFETY: head + body + tail = bytes, each piece inside both regions.
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst, head);
            let (s, d) = (src.add(head), dst.add(head));
            if std::arch::is_x86_feature_detected!("avx512f") {
                x86::stream_avx512(s, d, body);
            } else if std::arch::is_x86_feature_detected!("avx") {
                x86::stream_avx(s, d, body);
            } else {
                x86::stream_sse2(s, d, body);
            }
            std::ptr::copy_nonoverlapping(s.add(body), d.add(body), bytes - head - body);
        }
        if fence {
            store_fence();
        }
        return;
    }
    // (a plain copy is ordered: nothing to fence)
    #[cfg(not(x86_simd))]
    let _ = fence;
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, bytes) }
}

#[cfg(x86_simd)]
mod x86 {
    use std::arch::x86_64::*;

    /// # Safety
    /// `d` is 64-byte aligned, `n` a multiple of 64, both regions valid and
    /// disjoint, and the CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn stream_avx512(s: *const u8, d: *mut u8, n: usize) {
        let mut i = 0;
        while i < n {
            // SAFETY: the caller's contract; `d + i` is 64-byte aligned.
            unsafe {
                let v = _mm512_loadu_si512(s.add(i) as *const _);
                _mm512_stream_si512(d.add(i) as *mut _, v);
            }
            i += 64;
        }
    }

    /// # Safety
    /// As [`stream_avx512`], with AVX instead of AVX-512F.
    #[target_feature(enable = "avx")]
    pub unsafe fn stream_avx(s: *const u8, d: *mut u8, n: usize) {
        let mut i = 0;
        while i < n {
            // SAFETY: the caller's contract; `d + i` is 32-byte aligned.
            unsafe {
                let a = _mm256_loadu_si256(s.add(i) as *const __m256i);
                let b = _mm256_loadu_si256(s.add(i + 32) as *const __m256i);
                _mm256_stream_si256(d.add(i) as *mut __m256i, a);
                _mm256_stream_si256(d.add(i + 32) as *mut __m256i, b);
            }
            i += 64;
        }
    }

    /// # Safety
    /// As [`stream_avx512`]; SSE2 is part of x86-64.
    pub unsafe fn stream_sse2(s: *const u8, d: *mut u8, n: usize) {
        let mut i = 0;
        while i < n {
            // SAFETY: the caller's contract; `d + i` is 16-byte aligned.
            unsafe {
                for k in 0..4 {
                    let v = _mm_loadu_si128(s.add(i + 16 * k) as *const __m128i);
                    _mm_stream_si128(d.add(i + 16 * k) as *mut __m128i, v);
                }
            }
            i += 64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Result, bytes};
    use crate::engine::Memory;
    use crate::engine::host_memory::Registry;

    fn put<T: Element>(r: &mut Registry, at: usize, xs: &[T]) -> Result<()> {
        Memory::write(r, at, bytes::of(xs))
    }
    fn get<T: Element>(r: &Registry, at: usize, n: usize) -> Result<Vec<T>> {
        let mut out = vec![T::default(); n];
        Memory::read(r, at, bytes::of_mut(&mut out))?;
        Ok(out)
    }

    #[test]
    fn streaming_copy_copies_every_byte_at_any_alignment() {
        // Miri interprets every byte: smaller copies there, still past STREAM_MIN
        let big = if cfg!(miri) { 9000 } else { 70_000 };
        let src: Vec<u8> = (0..big as u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for (from, to, len) in [
            (0, 0, big - 64),
            (3, 17, 5000),
            (1, 0, 4096),
            (0, 5, 100),
            (9, 9, big - 10),
        ] {
            let mut dst = vec![0u8; len + 64];
            copy_streaming(&mut dst[to..to + len], &src[from..from + len]);
            assert_eq!(
                &dst[to..to + len],
                &src[from..from + len],
                "from {from} to {to} len {len}"
            );
            assert!(
                dst[..to].iter().chain(&dst[to + len..]).all(|b| *b == 0),
                "nothing written outside"
            );
        }
    }

    /// The data phase's accessors on registry memory, from several threads
    /// at once as a launch uses them: every thread reads one shared input
    /// through a view and writes its own disjoint part of one output, by
    /// `view_mut`, `write`, `write_line` and `copy`. Miri checks the views'
    /// aliasing and that the threads' accesses do not race.
    #[test]
    fn phase_accessors_from_several_threads() {
        const THREADS: usize = 4;
        let per = if cfg!(miri) { 64 } else { 1024 }; // f32 elements per thread: whole lines
        let mut r = Registry::default();
        let input = r.alloc(per * 4);
        let output = r.alloc(THREADS * per * 4);
        let x: Vec<f32> = (0..per).map(|j| j as f32 * 0.5).collect();
        put(&mut r, input, &x).unwrap();
        std::thread::scope(|s| {
            for t in 0..THREADS {
                s.spawn(move || {
                    // SAFETY: as in a data phase: both allocations outlive the
                    // scope, the input is only read, and thread t writes only
                    // elements t*per .. (t+1)*per of the output.
                    let phase = unsafe { Phase::enter() };
                    let src = phase.view::<f32>(input, per);
                    let at = output + t * per * 4;
                    let half = per / 2;
                    let out = phase.view_mut::<f32>(at, half);
                    for (o, v) in out.iter_mut().zip(src) {
                        *o = v + t as f32;
                    }
                    let quarter: Vec<f32> = src[half..].iter().map(|v| v * 2.0).collect();
                    let (lines, rest) = quarter.split_at(quarter.len() / 16 * 16);
                    for (k, line) in lines.chunks(16).enumerate() {
                        phase.write_line(at + (half + 16 * k) * 4, line, t % 2 == 0);
                    }
                    phase.write(at + (half + lines.len()) * 4, rest);
                    phase.fence();
                    // copy onto itself is a no-op; a real copy moves bytes
                    phase.copy(at, at, per * 4);
                });
            }
        });
        for t in 0..THREADS {
            let got = get::<f32>(&r, output + t * per * 4, per).unwrap();
            let want: Vec<f32> = (0..per)
                .map(|j| {
                    let v = j as f32 * 0.5;
                    if j < per / 2 { v + t as f32 } else { v * 2.0 }
                })
                .collect();
            assert_eq!(got, want, "thread {t}");
        }
        let copy = r.alloc(per * 4);
        // SAFETY: single-threaded; both extents are live allocations of `r`.
        let phase = unsafe { Phase::enter() };
        phase.copy_stream(input, copy, per * 4);
        phase.fence();
        assert_eq!(get::<f32>(&r, copy, per).unwrap(), x);
    }

    /// A misaligned view is caught before it is formed (debug builds; the
    /// buffer checks refuse misaligned pointers before any call gets here).
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "not aligned for it")]
    fn a_misaligned_view_is_never_formed() {
        let mut r = Registry::default();
        let a = r.alloc(16);
        // SAFETY: the allocation is live and nothing else touches it; the
        // view is refused before from_raw_parts.
        let phase = unsafe { Phase::enter() };
        phase.view::<u32>(a + 2, 2);
    }
}
