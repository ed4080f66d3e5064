//! The CUDA driver calls the NCCL engine needs, over cudarc's `result`
//! layer: one device's primary context made current on the calling thread,
//! a stream, and synchronous copies. Every failure is an [`Error`] that
//! names the call and CUDA's error.

use crate::core::{Error, ErrorKind, Result};
use cudarc::driver::{result, sys};

fn cuda(what: &str, e: result::DriverError) -> Error {
    let name = e
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0));
    Error::new(ErrorKind::System, format!("CUDA: {what} failed: {name}"))
}

/// Loads the driver and counts the GPUs (`cuInit`, `cuDeviceGetCount`).
pub fn device_count() -> Result<usize> {
    super::library::cuda_driver().map_err(|e| Error::new(ErrorKind::System, e))?;
    result::init().map_err(|e| cuda("cuInit", e))?;
    let n = result::device::get_count().map_err(|e| cuda("cuDeviceGetCount", e))?;
    Ok(n.max(0) as usize)
}

/// One GPU's primary context, current on the thread that made it.
pub struct Device {
    pub ordinal: usize,
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    /// `0000:3b:00.0`
    pub bus_id: String,
}

impl Device {
    /// Makes GPU `ordinal`'s primary context current on this thread.
    pub fn open(ordinal: usize) -> Result<Device> {
        let n = device_count()?;
        if ordinal >= n {
            return Err(Error::new(
                ErrorKind::System,
                format!("CUDA: GPU {ordinal} asked for, this machine has {n}"),
            ));
        }
        let dev = result::device::get(ordinal as i32).map_err(|e| cuda("cuDeviceGet", e))?;
        // SAFETY: dev is a valid device handle from cuDeviceGet.
        let ctx = unsafe { result::primary_ctx::retain(dev) }
            .map_err(|e| cuda("cuDevicePrimaryCtxRetain", e))?;
        let d = Device {
            ordinal,
            dev,
            ctx,
            bus_id: String::new(),
        };
        d.make_current()?;
        let mut buf = [0 as std::ffi::c_char; 32];
        // SAFETY: the buffer holds 32 chars and its length is passed.
        let rc = unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, dev) };
        let bus_id = if rc == sys::cudaError_enum::CUDA_SUCCESS {
            // SAFETY: cuDeviceGetPCIBusId wrote a NUL-terminated string.
            unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        } else {
            String::new()
        };
        Ok(Device { bus_id, ..d })
    }

    /// Makes the context current on the calling thread.
    pub fn make_current(&self) -> Result<()> {
        // SAFETY: ctx is the retained primary context, alive until drop.
        unsafe { result::ctx::set_current(self.ctx) }.map_err(|e| cuda("cuCtxSetCurrent", e))
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: releases the retain made in open.
        let _ = unsafe { result::primary_ctx::release(self.dev) };
    }
}

/// A non-blocking stream of the current context.
pub struct Stream(pub sys::CUstream);

impl Stream {
    pub fn new() -> Result<Stream> {
        result::stream::create(result::stream::StreamKind::NonBlocking)
            .map(Stream)
            .map_err(|e| cuda("cuStreamCreate", e))
    }
    /// Ok(true) when all work queued on the stream is done.
    pub fn query(&self) -> Result<bool> {
        // SAFETY: self.0 is a live stream.
        let rc = unsafe { sys::cuStreamQuery(self.0) };
        match rc {
            sys::cudaError_enum::CUDA_SUCCESS => Ok(true),
            sys::cudaError_enum::CUDA_ERROR_NOT_READY => Ok(false),
            e => Err(cuda("cuStreamQuery", result::DriverError(e))),
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: the stream was created by Stream::new and is destroyed once.
        let _ = unsafe { result::stream::destroy(self.0) };
    }
}

/// `cuMemAlloc` of `bytes` (at least 1), zeroed.
pub fn alloc_zeroed(bytes: usize) -> Result<usize> {
    let n = bytes.max(1);
    // SAFETY: plain device allocation in the current context.
    let p = unsafe { result::malloc_sync(n) }.map_err(|e| cuda("cuMemAlloc", e))?;
    // SAFETY: p is a fresh allocation of n bytes.
    unsafe { result::memset_d8_sync(p, 0, n) }.map_err(|e| cuda("cuMemsetD8", e))?;
    Ok(p as usize)
}

/// `cuMemFree`.
pub fn free(addr: usize) -> Result<()> {
    // SAFETY: the caller frees a base address it got from alloc_zeroed, once.
    unsafe { result::free_sync(addr as sys::CUdeviceptr) }.map_err(|e| cuda("cuMemFree", e))
}

/// Host to device; `addr..addr+src.len()` lies in one allocation (checked by the caller).
pub fn write(addr: usize, src: &[u8]) -> Result<()> {
    if src.is_empty() {
        return Ok(());
    }
    // SAFETY: the destination range is inside a live allocation; the copy
    // is synchronous, so src outlives it.
    unsafe { result::memcpy_htod_sync(addr as sys::CUdeviceptr, src) }
        .map_err(|e| cuda("cuMemcpyHtoD", e))
}

/// Device to host; the range lies in one allocation (checked by the caller).
pub fn read(addr: usize, dst: &mut [u8]) -> Result<()> {
    if dst.is_empty() {
        return Ok(());
    }
    // SAFETY: the source range is inside a live allocation; synchronous copy.
    unsafe { result::memcpy_dtoh_sync(dst, addr as sys::CUdeviceptr) }
        .map_err(|e| cuda("cuMemcpyDtoH", e))
}

/// Sets `bytes` bytes at `addr` to `byte` (range checked by the caller).
pub fn fill(addr: usize, bytes: usize, byte: u8) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: the range is inside a live allocation.
    unsafe { result::memset_d8_sync(addr as sys::CUdeviceptr, byte, bytes) }
        .map_err(|e| cuda("cuMemsetD8", e))
}

/// The allocation that holds `addr`, as the driver knows it (`cuMemGetAddressRange`).
pub fn address_range(addr: usize) -> Option<(usize, usize)> {
    let (mut base, mut size) = (0 as sys::CUdeviceptr, 0usize);
    // SAFETY: the driver writes two out-parameters; an address it does not
    // know is an error return, not a fault.
    let rc =
        unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, addr as sys::CUdeviceptr) };
    (rc == sys::cudaError_enum::CUDA_SUCCESS).then_some((base as usize, size))
}
