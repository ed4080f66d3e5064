//! Wait-for cycles among a store's exchanges. A party that posted in an
//! exchange and reads it waits until every party has posted, and a rank
//! posts only when it starts a launch: one that waits in an exchange
//! posts nowhere else until that exchange is answered. When such waits
//! close a cycle (A waits for B, B for C, …, and one for A), none of them
//! can ever be answered, and no deadline ends it better: the store answers
//! every party on the cycle at once, with the cycle.
//!
//! Only the exchanges of one communicator are joined into a cycle (keys
//! that share what comes before their first `/`, the communicator's name
//! as the agreement gives it): a process may drive several communicators
//! from threads of their own, and its wait in one does not hold another.

use std::collections::HashMap;

/// Owner `from` waits for owner `to`: party `party` of exchange `key`
/// posted and waits for party `awaits`, which has not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Edge<'a> {
    pub from: usize,
    pub to: usize,
    pub key: &'a str,
    pub party: usize,
    pub awaits: usize,
}

/// The communicator an exchange belongs to.
pub(super) fn scope(key: &str) -> &str {
    key.split('/').next().unwrap_or(key)
}

/// For each owner found on a cycle of `edges`, with the communicator of
/// the cycle, the indices of its cycle's edges, its own first. Every
/// communicator whose waits hold a cycle has one found (a depth-first
/// search's back edge); an owner on a second cycle tangled with the first
/// may not be named, and learns of it when a named one fails.
pub(super) fn cycles<'a>(edges: &[Edge<'a>]) -> HashMap<(usize, &'a str), Vec<usize>> {
    let mut by_scope: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, e) in edges.iter().enumerate() {
        by_scope.entry(scope(e.key)).or_default().push(i);
    }
    let mut found = HashMap::new();
    for (comm, ids) in by_scope {
        search(edges, &ids, comm, &mut found);
    }
    found
}

/// Depth-first search over the edges `ids` of communicator `comm`.
fn search<'a>(
    edges: &[Edge<'a>],
    ids: &[usize],
    comm: &'a str,
    found: &mut HashMap<(usize, &'a str), Vec<usize>>,
) {
    let mut out: HashMap<usize, Vec<usize>> = HashMap::new();
    for &i in ids {
        out.entry(edges[i].from).or_default().push(i);
    }
    let mut starts: Vec<usize> = out.keys().copied().collect();
    starts.sort_unstable();
    // owners fully searched, and the depth of those on the current path
    let mut done: std::collections::HashSet<usize> = Default::default();
    let mut depth: HashMap<usize, usize> = HashMap::new();
    for start in starts {
        if done.contains(&start) {
            continue;
        }
        // (owner, the next of its edges to follow), and the edge taken
        // out of each owner on the path
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        let mut taken: Vec<usize> = Vec::new();
        depth.insert(start, 0);
        while let Some(&mut (owner, ref mut next)) = stack.last_mut() {
            let Some(&e) = out.get(&owner).and_then(|v| v.get(*next)) else {
                stack.pop();
                taken.pop();
                depth.remove(&owner);
                done.insert(owner);
                continue;
            };
            *next += 1;
            let to = edges[e].to;
            if let Some(&d) = depth.get(&to) {
                // back to an owner on the path: the path from it, and e
                let mut cycle: Vec<usize> = taken[d..].to_vec();
                cycle.push(e);
                for k in 0..cycle.len() {
                    let who = edges[cycle[k]].from;
                    found.entry((who, comm)).or_insert_with(|| {
                        let mut mine = cycle[k..].to_vec();
                        mine.extend_from_slice(&cycle[..k]);
                        mine
                    });
                }
            } else if !done.contains(&to) {
                depth.insert(to, stack.len());
                stack.push((to, 0));
                taken.push(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(from: usize, to: usize, key: &'static str) -> Edge<'static> {
        Edge {
            from,
            to,
            key,
            party: 0,
            awaits: 1,
        }
    }

    /// The owners each cycle names, in the order its edges go.
    type Found<'a> = HashMap<(usize, &'a str), Vec<usize>>;

    /// The owners of `who`'s cycle, `who` first (on the one communicator
    /// of the test's edges).
    fn owners(edges: &[Edge<'_>], found: &Found<'_>, who: usize) -> Vec<usize> {
        let mine = found.iter().find(|((o, _), _)| *o == who).unwrap().1;
        mine.iter().map(|&i| edges[i].from).collect()
    }

    /// The owners found on a cycle, in order.
    fn on(found: &Found<'_>) -> Vec<usize> {
        let mut on: Vec<usize> = found.keys().map(|(o, _)| *o).collect();
        on.sort_unstable();
        on
    }

    #[test]
    fn a_ring_of_waits_is_found_from_each_of_its_owners() {
        // 0 waits for 1, 1 for 2, 2 for 0; 3 waits for 0 and is not on it
        let edges = [
            edge(0, 1, "c/p0>1/0"),
            edge(1, 2, "c/p1>2/0"),
            edge(2, 0, "c/p2>0/0"),
            edge(3, 0, "c/x4"),
        ];
        let found = cycles(&edges);
        assert_eq!(on(&found), vec![0, 1, 2]);
        assert_eq!(owners(&edges, &found, 0), vec![0, 1, 2]);
        assert_eq!(owners(&edges, &found, 1), vec![1, 2, 0]);
        assert_eq!(owners(&edges, &found, 2), vec![2, 0, 1]);
        // each step's edge leaves its owner for the next
        for ((w, comm), ids) in &found {
            assert_eq!(*comm, "c");
            assert_eq!(edges[ids[0]].from, *w);
            for k in 0..ids.len() {
                assert_eq!(edges[ids[k]].to, edges[ids[(k + 1) % ids.len()]].from);
            }
        }
    }

    #[test]
    fn chains_and_waits_of_other_communicators_are_no_cycle() {
        // a chain that ends in an owner that waits for nobody
        let chain = [
            edge(0, 1, "c/p0>1/0"),
            edge(1, 2, "c/x3"),
            edge(3, 1, "c/x3"),
        ];
        assert!(cycles(&chain).is_empty());
        // 0 waits for 1 on one communicator, 1 for 0 on another
        let across = [edge(0, 1, "a/x1"), edge(1, 0, "b/x1")];
        assert!(cycles(&across).is_empty());
        // the same two waits on one communicator are a cycle of two
        let two = [edge(0, 1, "a/x1"), edge(1, 0, "a/p1>0/0")];
        assert_eq!(owners(&two, &cycles(&two), 1), vec![1, 0]);
        // a diamond with no way back, searched from every start
        let diamond = [
            edge(0, 1, "c/a"),
            edge(0, 2, "c/b"),
            edge(1, 3, "c/c"),
            edge(2, 3, "c/d"),
        ];
        assert!(cycles(&diamond).is_empty());
    }

    #[test]
    fn a_cycle_behind_a_searched_branch_is_found() {
        // from 0 the search first goes to 1 (a dead end), then to 2, whose
        // cycle with 3 does not pass through 0
        let edges = [
            edge(0, 1, "c/a"),
            edge(0, 2, "c/b"),
            edge(2, 3, "c/c"),
            edge(3, 2, "c/d"),
        ];
        let found = cycles(&edges);
        assert_eq!(on(&found), vec![2, 3]);
        assert_eq!(owners(&edges, &found, 3), vec![3, 2]);
    }

    #[test]
    fn an_owner_on_cycles_of_two_communicators_is_found_on_each() {
        // 0 and 1 wait for each other on communicator a, and their watch
        // threads (same owners) on a.w
        let edges = [
            edge(0, 1, "a/p0>1/0"),
            edge(1, 0, "a/p1>0/0"),
            edge(0, 1, "a.w/w1"),
            edge(1, 0, "a.w/w2"),
        ];
        let found = cycles(&edges);
        let mut keys: Vec<(usize, &str)> = found.keys().copied().collect();
        keys.sort_unstable();
        assert_eq!(keys, [(0, "a"), (0, "a.w"), (1, "a"), (1, "a.w")]);
        let keys_of = |who| -> Vec<&str> { found[&who].iter().map(|&i| edges[i].key).collect() };
        assert_eq!(keys_of((0, "a")), ["a/p0>1/0", "a/p1>0/0"]);
        assert_eq!(keys_of((1, "a.w")), ["a.w/w2", "a.w/w1"]);
    }
}
