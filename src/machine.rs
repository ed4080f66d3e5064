//! What several layers ask of the machine: how many cores this process may
//! use (a wait spins only where every rank has a core of its own; the
//! benchmark sizes its runs by it), and how busy the machine has been (the
//! benchmarks say what other processes took from them).

/// The cores this process may use (its affinity mask), at least 1.
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// CPU seconds every core of the machine together has been busy since
/// boot (`/proc/stat`: all but idle and iowait, in the kernel's USER_HZ of
/// 100 ticks a second), None where it cannot be read: a benchmark takes
/// the difference over its run, less its own CPU time, as what other
/// processes took from it.
pub fn busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<f64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    (ticks.len() >= 5).then(|| (ticks.iter().sum::<f64>() - ticks[3] - ticks[4]) / 100.0)
}
