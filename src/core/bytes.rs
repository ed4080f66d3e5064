//! Elements as bytes, for engines whose memory interface moves bytes.

use super::Element;

/// The bytes of `s`, in memory order.
pub fn of<T: Element>(s: &[T]) -> &[u8] {
    // SAFETY: `Element` is implemented only by rankwise for plain integer
    // and floating-point types (and its fp8 newtypes over u8): no padding,
    // so every byte of the slice is initialised; the length is the slice's
    // size in bytes and u8 needs no alignment.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)) }
}

/// The bytes of `s`, writable: any bytes written form valid elements.
pub fn of_mut<T: Element>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `of`; moreover every bit pattern is a valid value of
    // each `Element` type, so writing arbitrary bytes leaves valid elements,
    // and the exclusive borrow of `s` is handed on.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(s)) }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_endian = "little")]
    fn bytes_round_trip_in_memory_order() {
        let mut x = [0x0102_0304u32, 0xA0B0_C0D0];
        assert_eq!(super::of(&x), [4, 3, 2, 1, 0xD0, 0xC0, 0xB0, 0xA0]);
        super::of_mut(&mut x)[0] = 9;
        assert_eq!(x[0], 0x0102_0309);
    }
}
