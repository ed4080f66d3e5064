//! The real NCCL behind the interposer: every entry point resolved once,
//! by name, from the library the program itself uses.
//!
//! Where each function comes from, in order:
//!
//! 1. `RANKWISE_NCCL_LIBRARY` set: that file (`dlopen`), and nothing else;
//! 2. the next definition after this library in the process's lookup order
//!    (`dlsym(RTLD_NEXT)`): the libnccl the program loaded;
//! 3. `libnccl.so.2` through the dynamic loader.
//!
//! In each place `pnccl<Name>` is asked for first: NCCL builds export every
//! API function twice, `ncclX` weak and `pncclX` strong, exactly so that a
//! profiler or checker can define `ncclX` and still reach NCCL's. Then
//! `nccl<Name>`. A definition inside this library itself is never taken.
//!
//! This module, `driver`, `exports` and `process` hold all of the crate's
//! `unsafe`.

use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::OnceLock;

pub type Res = c_int;
pub type Comm = *mut c_void;
pub type Stream = *mut c_void;

/// `ncclUniqueId`: 128 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [c_char; 128],
}

impl UniqueId {
    pub fn bytes(&self) -> [u8; 128] {
        self.internal.map(|c| c as u8)
    }
    pub fn from_bytes(b: &[u8; 128]) -> UniqueId {
        UniqueId {
            internal: b.map(|c| c as c_char),
        }
    }
}

/// Where the real functions are looked up.
struct Source {
    /// a dlopen handle, or RTLD_NEXT
    handle: *mut c_void,
    what: String,
}

// SAFETY: a dlopen handle (or the RTLD_NEXT pseudo-handle) is a process-wide
// token that dlsym may be given from any thread.
unsafe impl Send for Source {}
// SAFETY: as above; the handle is only read.
unsafe impl Sync for Source {}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string owned by libc,
    // valid until the next dl* call on this thread; it is copied at once.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        return "unknown error".into();
    }
    // SAFETY: non-NULL, NUL-terminated (above).
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

fn open(path: &str, flags: c_int) -> Result<*mut c_void, String> {
    let c = CString::new(path).map_err(|_| format!("{path}: a path with a NUL byte"))?;
    // SAFETY: c is a NUL-terminated path; dlopen runs the library's
    // initialisers, which for libnccl are NCCL's own.
    let h = unsafe { libc::dlopen(c.as_ptr(), flags) };
    if h.is_null() { Err(dl_error()) } else { Ok(h) }
}

/// The object file that holds `addr`, as its load base.
fn object_of(addr: usize) -> Option<usize> {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr only reads the address and fills the Dl_info it is given.
    let ok = unsafe { libc::dladdr(addr as *const c_void, info.as_mut_ptr()) };
    if ok == 0 {
        return None;
    }
    // SAFETY: dladdr returned non-zero, so it initialised info.
    Some(unsafe { info.assume_init() }.dli_fbase as usize)
}

fn this_object() -> Option<usize> {
    object_of(this_object as *const () as usize)
}

fn lookup(handle: *mut c_void, name: &str) -> Option<usize> {
    let c = CString::new(name).ok()?;
    // SAFETY: handle is a dlopen handle or RTLD_NEXT; c is NUL-terminated.
    let p = unsafe { libc::dlsym(handle, c.as_ptr()) } as usize;
    // a definition in this library is ours, not NCCL's
    (p != 0 && object_of(p) != this_object()).then_some(p)
}

fn sources() -> &'static Result<Vec<Source>, String> {
    static S: OnceLock<Result<Vec<Source>, String>> = OnceLock::new();
    S.get_or_init(|| {
        if let Some(p) =
            std::env::var_os(rankwise::engine::nccl::library::LIBRARY_VAR).filter(|p| !p.is_empty())
        {
            let p = p.to_string_lossy().into_owned();
            return open(&p, libc::RTLD_NOW | libc::RTLD_GLOBAL)
                .map(|handle| {
                    vec![Source {
                        handle,
                        what: p.clone(),
                    }]
                })
                .map_err(|e| format!("RANKWISE_NCCL_LIBRARY={p}: {e}"));
        }
        let mut out = vec![Source {
            handle: libc::RTLD_NEXT,
            what: "the program's libnccl (RTLD_NEXT)".into(),
        }];
        if let Ok(handle) = open(rankwise::engine::nccl::library::SONAME, libc::RTLD_LAZY) {
            out.push(Source {
                handle,
                what: "libnccl.so.2 via the dynamic loader".into(),
            });
        }
        Ok(out)
    })
}

/// The real `nccl<name>` (as `pnccl<name>` where exported), or why not.
pub fn find(name: &str) -> Result<usize, String> {
    let srcs = sources().as_ref().map_err(Clone::clone)?;
    for s in srcs {
        for sym in [format!("pnccl{name}"), format!("nccl{name}")] {
            if let Some(p) = lookup(s.handle, &sym) {
                return Ok(p);
            }
        }
    }
    let looked: Vec<&str> = srcs.iter().map(|s| s.what.as_str()).collect();
    Err(format!(
        "no NCCL defines nccl{name}: looked in {} (set RANKWISE_NCCL_LIBRARY to the path of libnccl.so.2)",
        looked.join(", ")
    ))
}

macro_rules! api {
    ($($field:ident: $name:literal ($($arg:ty),*) -> $ret:ty;)*) => {
        /// NCCL's entry points, each resolved on first use.
        pub struct Api {
            $(pub $field: OnceLock<Result<unsafe extern "C" fn($($arg),*) -> $ret, String>>,)*
        }
        pub static API: Api = Api { $($field: OnceLock::new(),)* };
        impl Api {
            $(
                pub fn $field(&self) -> Result<unsafe extern "C" fn($($arg),*) -> $ret, String> {
                    self.$field
                        .get_or_init(|| {
                            find($name).map(|p| {
                                // SAFETY: p is the address of NCCL's function
                                // of that name, whose C signature is this one
                                // (nccl.h, 2.28); both are plain C ABI.
                                unsafe {
                                    std::mem::transmute::<usize, unsafe extern "C" fn($($arg),*) -> $ret>(p)
                                }
                            })
                        })
                        .clone()
                }
            )*
        }
    };
}

api! {
    get_version: "GetVersion" (*mut c_int) -> Res;
    get_error_string: "GetErrorString" (Res) -> *const c_char;
    reset_debug_init: "ResetDebugInit" () -> ();
    get_unique_id: "GetUniqueId" (*mut UniqueId) -> Res;
    comm_init_all: "CommInitAll" (*mut Comm, c_int, *const c_int) -> Res;
    comm_shrink: "CommShrink" (Comm, *mut c_int, c_int, *mut Comm, *mut c_void, c_int) -> Res;
    comm_finalize: "CommFinalize" (Comm) -> Res;
    comm_revoke: "CommRevoke" (Comm, c_int) -> Res;
    comm_get_async_error: "CommGetAsyncError" (Comm, *mut Res) -> Res;
    comm_cu_device: "CommCuDevice" (Comm, *mut c_int) -> Res;
    comm_register: "CommRegister" (Comm, *mut c_void, usize, *mut *mut c_void) -> Res;
    comm_deregister: "CommDeregister" (Comm, *mut c_void) -> Res;
    comm_window_register: "CommWindowRegister" (Comm, *mut c_void, usize, *mut *mut c_void, c_int) -> Res;
    comm_window_deregister: "CommWindowDeregister" (Comm, *mut c_void) -> Res;
    group_simulate_end: "GroupSimulateEnd" (*mut c_void) -> Res;
    comm_init_rank: "CommInitRank" (*mut Comm, c_int, UniqueId, c_int) -> Res;
    comm_init_rank_config: "CommInitRankConfig" (*mut Comm, c_int, UniqueId, c_int, *mut c_void) -> Res;
    comm_init_rank_scalable: "CommInitRankScalable" (*mut Comm, c_int, c_int, c_int, *mut UniqueId, *mut c_void) -> Res;
    comm_split: "CommSplit" (Comm, c_int, c_int, *mut Comm, *mut c_void) -> Res;
    comm_destroy: "CommDestroy" (Comm) -> Res;
    comm_abort: "CommAbort" (Comm) -> Res;
    comm_count: "CommCount" (Comm, *mut c_int) -> Res;
    comm_user_rank: "CommUserRank" (Comm, *mut c_int) -> Res;
    get_last_error: "GetLastError" (Comm) -> *const c_char;
    group_start: "GroupStart" () -> Res;
    group_end: "GroupEnd" () -> Res;
    mem_alloc: "MemAlloc" (*mut *mut c_void, usize) -> Res;
    mem_free: "MemFree" (*mut c_void) -> Res;
    red_op_create_pre_mul_sum: "RedOpCreatePreMulSum" (*mut c_int, *mut c_void, c_int, c_int, Comm) -> Res;
    red_op_destroy: "RedOpDestroy" (c_int, Comm) -> Res;
    all_reduce: "AllReduce" (*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> Res;
    reduce: "Reduce" (*const c_void, *mut c_void, usize, c_int, c_int, c_int, Comm, Stream) -> Res;
    broadcast: "Broadcast" (*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> Res;
    all_gather: "AllGather" (*const c_void, *mut c_void, usize, c_int, Comm, Stream) -> Res;
    reduce_scatter: "ReduceScatter" (*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> Res;
    all_to_all: "AlltoAll" (*const c_void, *mut c_void, usize, c_int, Comm, Stream) -> Res;
    gather: "Gather" (*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> Res;
    scatter: "Scatter" (*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> Res;
    send: "Send" (*const c_void, usize, c_int, c_int, Comm, Stream) -> Res;
    recv: "Recv" (*mut c_void, usize, c_int, c_int, Comm, Stream) -> Res;
}

/// Runs `f` when the process exits normally ([`crate::process::at_exit`]).
pub fn at_exit(f: extern "C" fn()) {
    crate::process::at_exit(f);
}

/// The loaded NCCL's `NCCL_VERSION_CODE` (e.g. 22809), when it says.
pub fn version() -> Option<c_int> {
    static V: OnceLock<Option<c_int>> = OnceLock::new();
    *V.get_or_init(|| {
        let f = API.get_version().ok()?;
        let mut v = 0;
        // SAFETY: ncclGetVersion writes one int through the pointer.
        (unsafe { f(&mut v) } == 0).then_some(v)
    })
}

/// What the interposer returns for an entry point it cannot find in any
/// NCCL: `ncclSystemError`, with the reason on stderr.
pub fn missing(why: &str) -> Res {
    crate::hooks::say(&format!("rankwise: {why}"));
    2
}
