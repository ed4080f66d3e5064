//! The CUDA driver functions the interposer uses, where the process has
//! them: whether a stream is being captured into a graph, and events that
//! say how far a stream has run (watch mode's `rankwise::agreement::watch::flight`).
//!
//! Each is looked up once, in the process's global scope or in a
//! `libcuda.so.1` already loaded; the interposer never loads the driver
//! itself, so a program without CUDA sees no difference.

use rankwise::agreement::watch::flight::Events;
use std::ffi::{CStr, c_int, c_void};
use std::sync::OnceLock;

type Stream = *mut c_void;
type Event = *mut c_void;
type Context = *mut c_void;

/// `CUDA_SUCCESS` and `CUDA_ERROR_NOT_READY`.
const SUCCESS: c_int = 0;
const NOT_READY: c_int = 600;
/// `CU_EVENT_DISABLE_TIMING`: an event that only marks, the cheapest kind.
const DISABLE_TIMING: u32 = 2;

/// The driver's `name`, where the process has it (module doc).
fn symbol(name: &CStr) -> Option<usize> {
    // SAFETY: a NUL-terminated name looked up in the global scope.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as usize;
    if p != 0 {
        return Some(p);
    }
    static LIB: OnceLock<usize> = OnceLock::new();
    let h = *LIB.get_or_init(|| {
        // SAFETY: RTLD_NOLOAD only finds a library already loaded: nothing
        // new runs.
        (unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) })
            as usize
    });
    if h == 0 {
        return None;
    }
    // SAFETY: a handle dlopen returned and a NUL-terminated name.
    let p = unsafe { libc::dlsym(h as *mut c_void, name.as_ptr()) } as usize;
    (p != 0).then_some(p)
}

/// `cuStreamIsCapturing(stream, *status)`.
type IsCapturing = unsafe extern "C" fn(Stream, *mut c_int) -> c_int;

/// Whether work issued to `stream` now is recorded into a CUDA graph
/// instead of running (false where the driver cannot say).
pub fn capturing(stream: usize) -> bool {
    // the legacy default stream is never captured, and asking about it
    // while another stream captures would break that capture
    if stream == 0 {
        return false;
    }
    static F: OnceLock<Option<usize>> = OnceLock::new();
    let Some(p) = *F.get_or_init(|| symbol(c"cuStreamIsCapturing")) else {
        return false;
    };
    // SAFETY: p is the driver's cuStreamIsCapturing, whose C signature is
    // IsCapturing (cuda.h, CUDA 10 on); both are plain C ABI.
    let f = unsafe { std::mem::transmute::<usize, IsCapturing>(p) };
    let mut status: c_int = 0;
    // SAFETY: the program's stream, as it passed it to NCCL; the driver
    // writes the capture status (0 = not capturing) through the pointer.
    let rc = unsafe { f(stream as Stream, &mut status) };
    rc == SUCCESS && status != 0
}

type EventCreate = unsafe extern "C" fn(*mut Event, u32) -> c_int;
type EventRecord = unsafe extern "C" fn(Event, Stream) -> c_int;
type EventOne = unsafe extern "C" fn(Event) -> c_int;
type CtxGet = unsafe extern "C" fn(*mut Context) -> c_int;
type CtxSet = unsafe extern "C" fn(Context) -> c_int;

/// The driver's event functions (cuda.h, CUDA 4 on; plain C ABI).
#[derive(Clone, Copy)]
struct Fns {
    create: EventCreate,
    record: EventRecord,
    query: EventOne,
    destroy: EventOne,
    get_ctx: CtxGet,
    set_ctx: CtxSet,
}

fn fns() -> Option<Fns> {
    static F: OnceLock<Option<Fns>> = OnceLock::new();
    *F.get_or_init(|| {
        let (create, record, query, destroy, get_ctx, set_ctx) = (
            symbol(c"cuEventCreate")?,
            symbol(c"cuEventRecord")?,
            symbol(c"cuEventQuery")?,
            symbol(c"cuEventDestroy_v2").or_else(|| symbol(c"cuEventDestroy"))?,
            symbol(c"cuCtxGetCurrent")?,
            symbol(c"cuCtxSetCurrent")?,
        );
        // SAFETY: each address is the driver's function of that name, whose
        // C signature is the field's type (cuda.h).
        unsafe {
            Some(Fns {
                create: std::mem::transmute::<usize, EventCreate>(create),
                record: std::mem::transmute::<usize, EventRecord>(record),
                query: std::mem::transmute::<usize, EventOne>(query),
                destroy: std::mem::transmute::<usize, EventOne>(destroy),
                get_ctx: std::mem::transmute::<usize, CtxGet>(get_ctx),
                set_ctx: std::mem::transmute::<usize, CtxSet>(set_ctx),
            })
        }
    })
}

/// A communicator's events, in the CUDA context its calls were made in.
pub struct Cuda {
    fns: Fns,
    /// the context current where the first event was made (0: none yet)
    ctx: usize,
}

/// An event the driver made (its handle as a number, so that it crosses
/// threads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaEvent(usize);

impl Cuda {
    /// Events where the process has the driver.
    pub fn new() -> Option<Cuda> {
        Some(Cuda {
            fns: fns()?,
            ctx: 0,
        })
    }

    /// Makes this thread's current context the one the events were made
    /// in (the watch thread, before it asks about them). False when none
    /// is known yet or the driver refuses.
    pub fn enter(&self) -> bool {
        // SAFETY: a context the driver returned on the program's thread;
        // contexts are process-wide and may be current on any thread.
        self.ctx != 0 && unsafe { (self.fns.set_ctx)(self.ctx as Context) } == SUCCESS
    }
}

impl Events for Cuda {
    type Event = CudaEvent;

    fn create(&mut self) -> Option<CudaEvent> {
        if self.ctx == 0 {
            let mut ctx: Context = std::ptr::null_mut();
            // SAFETY: the driver writes the calling thread's current
            // context (or NULL) through the pointer.
            if unsafe { (self.fns.get_ctx)(&mut ctx) } != SUCCESS || ctx.is_null() {
                return None;
            }
            self.ctx = ctx as usize;
        }
        let mut ev: Event = std::ptr::null_mut();
        // SAFETY: the driver writes a new event's handle through the
        // pointer; the flag is one cuda.h defines.
        let rc = unsafe { (self.fns.create)(&mut ev, DISABLE_TIMING) };
        (rc == SUCCESS && !ev.is_null()).then_some(CudaEvent(ev as usize))
    }

    fn record(&mut self, ev: CudaEvent, stream: usize) -> bool {
        // SAFETY: an event this driver made and not yet destroyed (the
        // pool destroys its events only when its communicator's watch
        // ends); the program's stream, as it passed it to NCCL a moment ago.
        unsafe { (self.fns.record)(ev.0 as Event, stream as Stream) == SUCCESS }
    }

    fn reached(&mut self, ev: CudaEvent) -> Option<bool> {
        // SAFETY: as in record.
        match unsafe { (self.fns.query)(ev.0 as Event) } {
            SUCCESS => Some(true),
            NOT_READY => Some(false),
            _ => None,
        }
    }

    fn destroy(&mut self, ev: CudaEvent) {
        // SAFETY: as in record; the pool forgets the event with this call
        // (the driver frees one still pending once its stream reaches it).
        unsafe { (self.fns.destroy)(ev.0 as Event) };
    }
}
