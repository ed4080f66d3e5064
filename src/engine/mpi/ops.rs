//! The reductions MPI runs for the mpi engine: one user-defined MPI op per
//! datatype and element function, built on the local engine's element
//! arithmetic (`Arith`), so integers wrap, 16- and 8-bit floats round after
//! every step, and Max/Min pick an input exactly, as on every engine.
//! Avg and PreMulSum reach MPI as sums (`collectives` scales the inputs or
//! divides the result, as NCCL does).

use super::ffi::{self, Op};
use crate::core::{DataType, Error, ErrorKind, RedOp, Result};
use crate::engine::local::reduce::Arith;
use std::cell::RefCell;
use std::collections::HashMap;
use std::os::raw::{c_int, c_void};

const ADD: u8 = 0;
const MUL: u8 = 1;
const MAX: u8 = 2;
const MIN: u8 = 3;

unsafe extern "C" fn combine<T: Arith, const K: u8>(
    invec: *mut c_void,
    inout: *mut c_void,
    len: *mut c_int,
    _datatype: *mut ffi::Datatype,
) {
    // SAFETY: MPI calls this with its own arguments, and the op is used
    // only with T's container (see `op`).
    let (x, y) = unsafe { ffi::op_args::<T>(invec, inout, len) };
    let f = match K {
        ADD => T::add,
        MUL => T::mul,
        MAX => T::max,
        _ => T::min,
    };
    for (a, b) in x.iter().zip(y) {
        *b = f(*a, *b);
    }
}

fn function<T: Arith>(
    k: u8,
) -> unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut ffi::Datatype) {
    match k {
        ADD => combine::<T, ADD>,
        MUL => combine::<T, MUL>,
        MAX => combine::<T, MAX>,
        _ => combine::<T, MIN>,
    }
}

thread_local! {
    /// Ops created so far, by datatype code and element function.
    static OPS: RefCell<HashMap<(i32, u8), Op>> = RefCell::new(HashMap::new());
}

/// The MPI op that reduces `dt` elements with the element function of `op`
/// (Sum for Avg and PreMulSum), created on first use.
pub fn get(dt: DataType, op: RedOp) -> Result<Op> {
    let k = match op {
        RedOp::Sum | RedOp::Avg | RedOp::PreMulSum(_) => ADD,
        RedOp::Prod => MUL,
        RedOp::Max => MAX,
        RedOp::Min => MIN,
    };
    if let Some(op) = OPS.with(|o| o.borrow().get(&(dt.code(), k)).copied()) {
        return Ok(op);
    }
    let f = crate::with_element_type!(dt, T => function::<T>(k));
    let created = ffi::op_create(Some(f)).map_err(|e| {
        Error::new(
            ErrorKind::System,
            format!("cannot create the MPI op for {op} on {dt}: {e}"),
        )
    })?;
    OPS.with(|o| o.borrow_mut().insert((dt.code(), k), created));
    Ok(created)
}
