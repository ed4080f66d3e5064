//! The cases of a suite, as data. A case knows, without running anything,
//! what every rank must see ([`Case::expect`], from `reference`) and which
//! pointer relation each rank's call has ([`Case::relation`]); running it on
//! one rank ([`Case::run`]) yields that rank's [`Outcome`]. So `summarize`
//! can re-derive every declared row from the suite name and N alone.
//!
//! - `seed`: the chapter's 9 native and 14 framework cases, adapted to any N;
//! - `full`: seed plus the NCCL 2.28 ops, every datatype × op, counts 0, 1
//!   and counts that divide by nothing, every legal root.

pub mod framework;
pub mod full;
pub mod native;
pub mod seed;

use rankwise::api::Comm;
use rankwise::core::{DataType, Error, ErrorKind, Scalar};
use std::fmt;

/// Which face of the communicator a layer drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layer {
    /// The raw face: explicit pointers, NULL, the exact in-place equations.
    Native,
    /// The typed face: slices and torch.distributed's names.
    Framework,
}

impl Layer {
    pub const ALL: [Layer; 2] = [Layer::Native, Layer::Framework];
    pub fn name(self) -> &'static str {
        match self {
            Layer::Native => "native",
            Layer::Framework => "framework",
        }
    }
    pub fn describe(self) -> &'static str {
        match self {
            Layer::Native => "raw face, explicit pointers (the seed's native C API layer)",
            Layer::Framework => "typed face, torch.distributed names (the seed's PyTorch layer)",
        }
    }
    pub fn parse(s: &str) -> Option<Layer> {
        Layer::ALL.into_iter().find(|l| l.name() == s)
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A named set of cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    Seed,
    Full,
}

impl Suite {
    pub fn name(self) -> &'static str {
        match self {
            Suite::Seed => "seed",
            Suite::Full => "full",
        }
    }
    pub fn parse(s: &str) -> Option<Suite> {
        match s {
            "seed" => Some(Suite::Seed),
            "full" => Some(Suite::Full),
            _ => None,
        }
    }
}

/// What the contract promises one rank.
#[derive(Debug, Clone, PartialEq)]
pub enum Expect {
    /// These output elements, exactly (bit for bit).
    Values(Vec<Scalar>),
    /// No output to compare; the string says why (and the buffer is not read).
    NoOutput(&'static str),
    /// The call must be rejected with this error.
    Reject(ErrorKind),
}

/// What a rank observed.
#[derive(Debug, Clone)]
pub enum Actual {
    Values(Vec<Scalar>),
    /// The call succeeded and there was nothing to read.
    Nothing,
    Error(Error),
}

/// One rank's run of one case.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub actual: Actual,
    /// The addresses the call used, and the concrete offset where in place.
    pub addresses: String,
    /// Contract violations besides the output values: a modified sendbuff,
    /// a write past a buffer's extent, pointers that miss the equation.
    pub problems: Vec<String>,
}

impl Outcome {
    pub fn error(e: Error, addresses: String) -> Outcome {
        Outcome {
            actual: Actual::Error(e),
            addresses,
            problems: Vec::new(),
        }
    }
}

/// How a case runs.
#[derive(Debug, Clone)]
pub enum Body {
    Native(native::Spec),
    Framework(framework::Kind),
}

/// One case of a suite: one row per rank.
#[derive(Debug, Clone)]
pub struct Case {
    pub layer: Layer,
    pub operation: String,
    /// Unique within (layer, operation).
    pub variant: String,
    pub dtype: DataType,
    pub body: Body,
    /// Why the case differs from the seed at this N ("" when it does not).
    pub note: String,
}

impl Case {
    /// The API count this rank passes.
    pub fn count(&self, n: usize, rank: usize) -> usize {
        match &self.body {
            Body::Native(s) => s.count,
            Body::Framework(k) => k.count(n, rank),
        }
    }
    pub fn expect(&self, n: usize, rank: usize) -> Expect {
        match &self.body {
            Body::Native(s) => s.expect(n, rank),
            Body::Framework(k) => k.expect(self.dtype, n, rank),
        }
    }
    /// The pointer relation of this rank's call (an equation or a NULL rule).
    pub fn relation(&self, n: usize, rank: usize) -> String {
        match &self.body {
            Body::Native(s) => s.relation(n, rank),
            Body::Framework(k) => k.relation(n, rank),
        }
    }
    pub fn run(&self, comm: &mut Comm) -> Outcome {
        match &self.body {
            Body::Native(s) => {
                let input = s.input(comm.size(), comm.rank());
                native::execute(comm, s, &input)
            }
            Body::Framework(k) => k.run(self.dtype, comm),
        }
    }
}

/// The cases of one layer, in the order every rank runs them.
#[derive(Debug, Clone)]
pub struct LayerPlan {
    pub layer: Layer,
    pub cases: Vec<Case>,
}

impl LayerPlan {
    /// Rows each rank writes for this layer.
    pub fn rows_per_rank(&self) -> usize {
        self.cases.len()
    }
    /// Distinct (operation, variant, pointer relation) records over all ranks.
    pub fn records(&self, n: usize) -> usize {
        self.cases
            .iter()
            .map(|c| {
                let mut rel: Vec<String> = (0..n).map(|r| c.relation(n, r)).collect();
                rel.sort();
                rel.dedup();
                rel.len()
            })
            .sum()
    }
    pub fn find(&self, operation: &str, variant: &str) -> Option<(usize, &Case)> {
        self.cases
            .iter()
            .enumerate()
            .find(|(_, c)| c.operation == operation && c.variant == variant)
    }
}

/// Everything a suite declares at one N.
#[derive(Debug, Clone)]
pub struct Plan {
    pub suite: Suite,
    pub n: usize,
    pub layers: Vec<LayerPlan>,
    /// How the seed's cases were adapted to N (empty at N >= 4).
    pub adaptations: Vec<String>,
}

impl Plan {
    pub fn layer(&self, layer: Layer) -> Option<&LayerPlan> {
        self.layers.iter().find(|l| l.layer == layer)
    }
}

/// The cases `suite` declares for a communicator of `n` ranks.
pub fn plan(suite: Suite, n: usize) -> Plan {
    let mut adaptations = Vec::new();
    let mut native = seed::native(n, &mut adaptations);
    let mut framework = seed::framework(n, &mut adaptations);
    if suite == Suite::Full {
        native.extend(full::native(n));
        framework.extend(full::framework(n));
    }
    Plan {
        suite,
        n,
        layers: vec![
            LayerPlan {
                layer: Layer::Native,
                cases: native,
            },
            LayerPlan {
                layer: Layer::Framework,
                cases: framework,
            },
        ],
        adaptations,
    }
}

/// A seed root at this N: the seed's when it is a rank, else the last rank,
/// with a note saying so.
pub fn adapt_root(seed_root: usize, n: usize) -> (usize, Option<String>) {
    if seed_root < n {
        (seed_root, None)
    } else {
        (
            n - 1,
            Some(format!(
                "seed root {seed_root} is not a rank of a {n}-rank communicator: root {} used instead",
                n - 1
            )),
        )
    }
}

/// `root 2`, or `root 1 (seed: root 2)` when adapted.
pub fn root_label(seed_root: usize, root: usize) -> String {
    if seed_root == root {
        format!("root {root}")
    } else {
        format!("root {root} (seed: root {seed_root})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_suite_counts_at_4_ranks_match_the_chapter() {
        let p = plan(Suite::Seed, 4);
        let native = p.layer(Layer::Native).unwrap();
        let framework = p.layer(Layer::Framework).unwrap();
        assert_eq!(native.rows_per_rank() * 4, 36);
        assert_eq!(native.records(4), 10);
        assert_eq!(framework.rows_per_rank() * 4, 56);
        assert_eq!(framework.records(4), 14);
        assert!(p.adaptations.is_empty());
    }

    #[test]
    fn cases_are_unique_and_adapt_to_small_n() {
        for suite in [Suite::Seed, Suite::Full] {
            for n in [1, 2, 3, 4, 5, 8] {
                let p = plan(suite, n);
                for l in &p.layers {
                    let mut keys: Vec<(&str, &str)> = l
                        .cases
                        .iter()
                        .map(|c| (c.operation.as_str(), c.variant.as_str()))
                        .collect();
                    let total = keys.len();
                    keys.sort();
                    keys.dedup();
                    assert_eq!(
                        keys.len(),
                        total,
                        "{suite:?} N={n} {}: duplicate case",
                        l.layer
                    );
                }
                assert_eq!(p.adaptations.is_empty(), n >= 4, "N={n}");
            }
        }
        let p = plan(Suite::Seed, 1);
        assert_eq!(
            p.layer(Layer::Native).unwrap().records(1),
            9,
            "no non-root Reduce rows at N=1"
        );
    }
}
