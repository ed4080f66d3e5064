//! The data the kernel benchmarks share: a well-spread 64-bit hash
//! (SplitMix64's finaliser), from which they draw their inputs.

/// A well-spread 64-bit hash of `i`.
pub fn hash(i: u64) -> u64 {
    let mut z = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
