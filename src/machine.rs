//! What several layers ask of the machine: how many cores this process may
//! use (a wait spins only where every rank has a core of its own; the
//! benchmark sizes its runs by it).

/// The cores this process may use (its affinity mask), at least 1.
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
