//! The reductions MPI runs for the mpi engine: one user-defined MPI op per
//! datatype and element function, built on the local engine's element
//! arithmetic (`Arith`), so integers wrap, 16- and 8-bit floats round after
//! every step, and Max/Min pick an input exactly, as on every engine.
//! Avg and PreMulSum reach MPI as sums (`collectives` scales the inputs or
//! divides the result, as NCCL does).
//!
//! Where MPI's built-in op computes exactly that arithmetic, it is used
//! instead (MPI's own ops are what its fastest algorithms and reductions
//! are tuned for): Sum and Prod on 32- and 64-bit integers in unsigned
//! types of the same width (unsigned arithmetic wraps in C, and its bits
//! are the two's-complement result of the signed one; a signed overflow in
//! C is undefined), Max and Min on integers in their own signed or unsigned
//! types, Sum and Prod on float and double (one IEEE operation per step,
//! as here). Float Max and Min stay user-defined: MPI's pick no NaN rule,
//! NCCL's ignore a NaN operand as Rust's `max` does. Sum and Prod on 8-bit
//! integers stay user-defined too: Debian's OpenMPI 4.1.4 saturates an
//! `MPI_SUM` on `MPI_UINT8_T` (85 + 173 gives 255, not 2; seen on arrays of
//! a few hundred elements, where its vectorised ops take over), where NCCL
//! wraps.

use super::ffi::{self, Op};
use crate::core::{DataType, Error, ErrorKind, RedOp, Result};
use crate::kernels::Arith;
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

/// The MPI datatype and op that reduce `dt` elements with the element
/// function of `op` (Sum for Avg and PreMulSum): MPI's own where it is
/// exact, else the element's container and a user-defined op, created on
/// first use.
pub fn get(dt: DataType, op: RedOp) -> Result<(ffi::Datatype, Op)> {
    let k = match op {
        RedOp::Sum | RedOp::Avg | RedOp::PreMulSum(_) => ADD,
        RedOp::Prod => MUL,
        RedOp::Max => MAX,
        RedOp::Min => MIN,
    };
    if let Some(builtin) = builtin(dt, k) {
        return Ok(builtin);
    }
    let container = ffi::container(dt.size());
    if let Some(op) = OPS.with(|o| o.borrow().get(&(dt.code(), k)).copied()) {
        return Ok((container, op));
    }
    let f = crate::with_element_type!(dt, T => function::<T>(k));
    let created = ffi::op_create(Some(f)).map_err(|e| {
        Error::new(
            ErrorKind::System,
            format!("cannot create the MPI op for {op} on {dt}: {e}"),
        )
    })?;
    OPS.with(|o| o.borrow_mut().insert((dt.code(), k), created));
    Ok((container, created))
}

/// MPI's built-in type and op for element function `k` on `dt`, where they
/// compute exactly what `Arith` does (see the module's docs).
fn builtin(dt: DataType, k: u8) -> Option<(ffi::Datatype, Op)> {
    let float = dt.is_float();
    match k {
        ADD | MUL if dt.size() == 1 => None,
        ADD | MUL => {
            let t = if float {
                ffi::typed(dt)?
            } else {
                ffi::container(dt.size())
            };
            Some((t, if k == ADD { ffi::sum() } else { ffi::prod() }))
        }
        _ if float => None,
        _ => Some((
            ffi::typed(dt)?,
            if k == MAX { ffi::max() } else { ffi::min() },
        )),
    }
}
