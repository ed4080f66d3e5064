//! NCCL's functions as a program linked to libnccl sees them: looked up in
//! the process's global scope, so a preloaded interposer's come first.
//! Shared by the interposer's tests and `examples/call_cost.rs`.

/// The function `name` from the global scope, as the function pointer `T`.
pub fn sym<T: Copy>(name: &str) -> T {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: a NUL-terminated name looked up in the process's global scope.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) };
    assert!(!p.is_null(), "{name} is not defined");
    assert_eq!(
        std::mem::size_of::<T>(),
        std::mem::size_of::<*mut std::ffi::c_void>()
    );
    // SAFETY: T is the function pointer type of nccl.h's `name`.
    unsafe { std::mem::transmute_copy(&p) }
}
