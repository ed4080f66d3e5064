//! NCCL's C entry points, resolved from the library [`super::library`]
//! found. The structs and handles are cudarc's (`cudarc::nccl::sys`: the
//! communicator, the unique id, the 2.28 config, the stream); enums cross as
//! plain `int`, so a datatype or op code NCCL does not know (the argument-
//! check probes pass them on purpose) is an integer here, never an invalid
//! Rust enum value.

use std::ffi::{c_char, c_int, c_void};

pub use cudarc::nccl::sys::{cudaStream_t, ncclComm_t, ncclConfig_t, ncclUniqueId};

/// `ncclResult_t` values.
pub const SUCCESS: c_int = 0;
pub const IN_PROGRESS: c_int = 7;
/// `ncclScalarHostImmediate`.
pub const SCALAR_HOST_IMMEDIATE: c_int = 1;

type Res = c_int;

/// The NCCL functions rankwise calls.
pub struct Api {
    pub get_version: unsafe extern "C" fn(*mut c_int) -> Res,
    pub get_unique_id: unsafe extern "C" fn(*mut ncclUniqueId) -> Res,
    pub comm_init_rank_config:
        unsafe extern "C" fn(*mut ncclComm_t, c_int, ncclUniqueId, c_int, *mut ncclConfig_t) -> Res,
    pub comm_split:
        unsafe extern "C" fn(ncclComm_t, c_int, c_int, *mut ncclComm_t, *mut ncclConfig_t) -> Res,
    pub comm_finalize: unsafe extern "C" fn(ncclComm_t) -> Res,
    pub comm_destroy: unsafe extern "C" fn(ncclComm_t) -> Res,
    pub comm_abort: unsafe extern "C" fn(ncclComm_t) -> Res,
    pub comm_get_async_error: unsafe extern "C" fn(ncclComm_t, *mut c_int) -> Res,
    pub get_error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    pub get_last_error: unsafe extern "C" fn(ncclComm_t) -> *const c_char,
    pub group_start: unsafe extern "C" fn() -> Res,
    pub group_end: unsafe extern "C" fn() -> Res,
    pub all_reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        ncclComm_t,
        cudaStream_t,
    ) -> Res,
    pub reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        c_int,
        ncclComm_t,
        cudaStream_t,
    ) -> Res,
    pub broadcast: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        ncclComm_t,
        cudaStream_t,
    ) -> Res,
    pub all_gather: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        ncclComm_t,
        cudaStream_t,
    ) -> Res,
    pub reduce_scatter: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        ncclComm_t,
        cudaStream_t,
    ) -> Res,
    pub all_to_all: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        ncclComm_t,
        cudaStream_t,
    ) -> Res,
    pub gather: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        ncclComm_t,
        cudaStream_t,
    ) -> Res,
    pub scatter: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        ncclComm_t,
        cudaStream_t,
    ) -> Res,
    pub send:
        unsafe extern "C" fn(*const c_void, usize, c_int, c_int, ncclComm_t, cudaStream_t) -> Res,
    pub recv:
        unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, ncclComm_t, cudaStream_t) -> Res,
    pub red_op_create_pre_mul_sum:
        unsafe extern "C" fn(*mut c_int, *mut c_void, c_int, c_int, ncclComm_t) -> Res,
    pub red_op_destroy: unsafe extern "C" fn(c_int, ncclComm_t) -> Res,
}

impl Api {
    /// Resolves every function, or names the first one missing.
    pub fn load(lib: &libloading::Library) -> Result<Api, &'static str> {
        macro_rules! sym {
            ($name:literal) => {{
                // SAFETY: the symbol is NCCL's function of that name, whose C
                // signature is the field's type (nccl.h, 2.28).
                match unsafe { lib.get($name) } {
                    Ok(s) => *s,
                    Err(_) => return Err($name),
                }
            }};
        }
        Ok(Api {
            get_version: sym!("ncclGetVersion"),
            get_unique_id: sym!("ncclGetUniqueId"),
            comm_init_rank_config: sym!("ncclCommInitRankConfig"),
            comm_split: sym!("ncclCommSplit"),
            comm_finalize: sym!("ncclCommFinalize"),
            comm_destroy: sym!("ncclCommDestroy"),
            comm_abort: sym!("ncclCommAbort"),
            comm_get_async_error: sym!("ncclCommGetAsyncError"),
            get_error_string: sym!("ncclGetErrorString"),
            get_last_error: sym!("ncclGetLastError"),
            group_start: sym!("ncclGroupStart"),
            group_end: sym!("ncclGroupEnd"),
            all_reduce: sym!("ncclAllReduce"),
            reduce: sym!("ncclReduce"),
            broadcast: sym!("ncclBroadcast"),
            all_gather: sym!("ncclAllGather"),
            reduce_scatter: sym!("ncclReduceScatter"),
            all_to_all: sym!("ncclAlltoAll"),
            gather: sym!("ncclGather"),
            scatter: sym!("ncclScatter"),
            send: sym!("ncclSend"),
            recv: sym!("ncclRecv"),
            red_op_create_pre_mul_sum: sym!("ncclRedOpCreatePreMulSum"),
            red_op_destroy: sym!("ncclRedOpDestroy"),
        })
    }
}

/// `NCCL_CONFIG_INITIALIZER` of nccl.h 2.28, with `blocking` set.
pub fn config(blocking: bool) -> ncclConfig_t {
    const UNDEF: c_int = c_int::MIN;
    ncclConfig_t {
        size: std::mem::size_of::<ncclConfig_t>(),
        magic: 0xcafe_beef,
        // NCCL_VERSION(2, 28, 3): the header cudarc's bindings come from
        version: 22803,
        blocking: c_int::from(blocking),
        cgaClusterSize: UNDEF,
        minCTAs: UNDEF,
        maxCTAs: UNDEF,
        netName: std::ptr::null(),
        splitShare: UNDEF,
        trafficClass: UNDEF,
        commName: std::ptr::null(),
        collnetEnable: UNDEF,
        CTAPolicy: UNDEF,
        shrinkShare: UNDEF,
        nvlsCTAs: UNDEF,
        nChannelsPerNetPeer: UNDEF,
        nvlinkCentricSched: UNDEF,
    }
}

/// `ncclInvalidArgument` for 4: the enumerator's name of a result code.
pub fn result_name(code: c_int) -> &'static str {
    match code {
        0 => "ncclSuccess",
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        8 => "ncclTimeout",
        _ => "an unknown ncclResult_t",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_matches_nccl_h() {
        let c = config(false);
        assert_eq!(c.magic, 0xcafebeef);
        assert_eq!(c.blocking, 0);
        assert_eq!(c.minCTAs, i32::MIN);
        assert_eq!(c.size, std::mem::size_of::<ncclConfig_t>());
        assert_eq!(std::mem::size_of::<ncclUniqueId>(), 128);
        assert_eq!(result_name(4), "ncclInvalidArgument");
        assert_eq!(result_name(99), "an unknown ncclResult_t");
    }
}
