//! The seed chapter's cases (实验设计), at any N. At N >= 4 they are the
//! chapter's exactly; below, roots the communicator lacks become N-1 and the
//! plan records each change.

use super::framework::Kind;
use super::native::{Inputs, Spec};
use super::{Body, Case, Layer, adapt_root, root_label};
use rankwise::core::{DataType, Func, RedOp};

fn native_case(operation: Func, variant: String, spec: Spec, note: Option<String>) -> Case {
    Case {
        layer: Layer::Native,
        operation: operation.name().to_string(),
        variant,
        dtype: spec.dtype,
        body: Body::Native(spec),
        note: note.unwrap_or_default(),
    }
}

fn spec(
    func: Func,
    dtype: DataType,
    count: usize,
    root: usize,
    in_place: bool,
    inputs: Inputs,
) -> Spec {
    Spec {
        func,
        dtype,
        count,
        op: RedOp::Sum,
        root: root as i64,
        in_place,
        null_when_allowed: false,
        inputs,
    }
}

/// The native layer: 9 operations, 10 pointer records at N >= 2.
pub fn native(n: usize, adaptations: &mut Vec<String>) -> Vec<Case> {
    use DataType::*;
    use Func::*;
    let mut cases = Vec::new();
    for (variant, ip) in [("out-of-place", false), ("in-place", true)] {
        cases.push(native_case(
            AllReduce,
            variant.into(),
            spec(AllReduce, Int32, 3, 0, ip, Inputs::SeedAllReduce),
            None,
        ));
    }
    for (variant, ip) in [("out-of-place", false), ("in-place", true)] {
        cases.push(native_case(
            AllGather,
            variant.into(),
            spec(AllGather, Int32, 3, 0, ip, Inputs::SeedAllGather),
            None,
        ));
    }
    for (variant, ip) in [("out-of-place", false), ("in-place", true)] {
        cases.push(native_case(
            ReduceScatter,
            variant.into(),
            spec(ReduceScatter, Int32, 3, 0, ip, Inputs::SeedReduceScatter),
            None,
        ));
    }
    for (placement, seed_root, ip) in [("out-of-place", 2, false), ("in-place", 1, true)] {
        let (root, note) = adapt_root(seed_root, n);
        let variant = format!("{placement}, {}", root_label(seed_root, root));
        let note = note.map(|m| format!("native Broadcast {placement}: {m}"));
        adaptations.extend(note.clone());
        cases.push(native_case(
            Broadcast,
            variant,
            spec(Broadcast, Int64, 4, root, ip, Inputs::SeedBroadcast),
            note,
        ));
    }
    let (root, note) = adapt_root(3, n);
    let note = note.map(|m| format!("native Reduce: {m}"));
    adaptations.extend(note.clone());
    let mut reduce = spec(Reduce, Int32, 2, root, false, Inputs::SeedReduce);
    reduce.null_when_allowed = true;
    cases.push(native_case(Reduce, root_label(3, root), reduce, note));
    cases
}

fn framework_case(
    operation: &str,
    variant: String,
    dtype: DataType,
    kind: Kind,
    note: Option<String>,
) -> Case {
    Case {
        layer: Layer::Framework,
        operation: operation.to_string(),
        variant,
        dtype,
        body: Body::Framework(kind),
        note: note.unwrap_or_default(),
    }
}

/// The framework layer: the seed's 14 variants.
pub fn framework(n: usize, adaptations: &mut Vec<String>) -> Vec<Case> {
    use DataType::*;
    let mut cases = vec![
        framework_case(
            "AllReduce",
            "SUM/int64".into(),
            Int64,
            Kind::AllReduceSum,
            None,
        ),
        framework_case(
            "AllReduce",
            "MAX/float32".into(),
            Float32,
            Kind::AllReduceMax,
            None,
        ),
        framework_case(
            "AllReduce",
            "count 0".into(),
            Float32,
            Kind::AllReduceZero,
            None,
        ),
    ];
    for seed_root in [0, 2] {
        let (root, note) = adapt_root(seed_root, n);
        let note = note.map(|m| format!("framework Broadcast: {m}"));
        adaptations.extend(note.clone());
        cases.push(framework_case(
            "Broadcast",
            root_label(seed_root, root),
            Int64,
            Kind::Broadcast { root },
            note,
        ));
    }
    for seed_root in [0, 3] {
        let (root, note) = adapt_root(seed_root, n);
        let note = note.map(|m| format!("framework Reduce: {m}"));
        adaptations.extend(note.clone());
        cases.push(framework_case(
            "Reduce",
            root_label(seed_root, root),
            Int64,
            Kind::Reduce { root },
            note,
        ));
    }
    cases.extend([
        framework_case(
            "AllGather",
            "tensor list".into(),
            Int32,
            Kind::AllGatherList,
            None,
        ),
        framework_case(
            "AllGather",
            "flat output".into(),
            Int32,
            Kind::AllGatherFlat,
            None,
        ),
        framework_case(
            "ReduceScatter",
            format!("{} -> 3 per rank", 3 * n),
            Int64,
            Kind::ReduceScatter,
            None,
        ),
        framework_case(
            "AlltoAll",
            "equal splits (Send/Recv pairs)".into(),
            Int64,
            Kind::AlltoAllEqualSplits,
            None,
        ),
        framework_case(
            "AlltoAll",
            "uneven splits s+d+1".into(),
            Int64,
            Kind::AlltoAllUneven,
            None,
        ),
        framework_case(
            "Send/Recv",
            format!("grouped ring of {n}"),
            Int64,
            Kind::Ring,
            None,
        ),
        framework_case(
            "invalid root",
            format!("Broadcast root {n}"),
            Int64,
            Kind::InvalidRoot,
            None,
        ),
    ]);
    cases
}
