//! `rankwise run <op>`: one collective on N local ranks through the raw face
//! (so `--in-place` uses the op's exact pointer equation from `core`),
//! showing every rank's input and output. Outputs the contract leaves
//! undefined or unused are shown as null and never read. A call the engine
//! rejects prints its error with the `ncclResult_t` name and exits 2.

use super::{FAILED, MAX_LOCAL_RANKS, REJECTED, fail};
use crate::core::{DataType, ErrorKind, RedOp, Role, layout};
use crate::local::{self, LaunchOptions};
use crate::verify::cases::native::{self, Inputs, Spec};
use crate::verify::cases::{Actual, Outcome};
use crate::verify::records::fmt_values;
use crate::verify::reference;
use serde_json::{Value, json};
use std::process::ExitCode;
use std::sync::Arc;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub call: super::CallArgs,
    /// encoded (source*10000 + block*100 + offset), iota, random, or a JSON file {"inputs": [[...] per rank]}
    #[arg(long, default_value = "encoded")]
    pub inputs: String,
    /// Seed for --inputs random
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print one JSON object
    #[arg(long)]
    pub json: bool,
}

/// Most buffer elements (all ranks, send and recv) run accepts: it prints every one.
const MAX_ELEMENTS: usize = 1 << 22;

pub fn run(args: Args) -> ExitCode {
    match prepare(&args) {
        Ok((spec, inputs, note)) => execute(&args, spec, inputs, note),
        Err(e) => fail("run", e),
    }
}

/// The call, every rank's input, and a note on where the inputs came from.
type Prepared = (Spec, Vec<Vec<f64>>, Option<String>);

fn prepare(args: &Args) -> Result<Prepared, String> {
    let func = args.call.collective;
    let (n, q, dt) = (args.call.ranks, args.call.count, args.call.dtype);
    super::check_size(n, q, dt, Some(MAX_LOCAL_RANKS))?;
    if n * q > MAX_ELEMENTS {
        return Err(format!(
            "--ranks {n} × --count {q} is more than run shows ({MAX_ELEMENTS} elements); use a smaller count"
        ));
    }
    if args.call.redop.is_some() && !func.reduces() {
        return Err(format!("{} takes no reduction op (--op)", func.cli_name()));
    }
    if args.call.root.is_some() && !func.is_rooted() {
        return Err(format!("{} takes no root (--root)", func.cli_name()));
    }
    let root = args.call.root.unwrap_or(0);
    if i32::try_from(root).is_err() {
        return Err(format!("--root {root} does not fit the C API's int"));
    }
    let spec = Spec {
        func,
        dtype: dt,
        count: q,
        op: args.call.redop.unwrap_or(RedOp::Sum),
        root,
        in_place: args.call.in_place,
        null_when_allowed: true,
        inputs: Inputs::Matrix,
    };
    let total: usize = (0..n)
        .map(|r| {
            let l = spec.layout(n, r);
            l.send_elems + l.recv_elems
        })
        .sum();
    if total > MAX_ELEMENTS {
        return Err(format!(
            "{} on {n} ranks with count {q} needs {total} buffer elements in all, more than run shows ({MAX_ELEMENTS}); use fewer ranks or a smaller count",
            func.name()
        ));
    }
    let lens: Vec<usize> = (0..n).map(|r| spec.layout(n, r).send_elems).collect();
    let (inputs, note) = match args.inputs.as_str() {
        "encoded" => (
            (0..n)
                .map(|s| {
                    (0..lens[s])
                        .map(|j| reference::encoded_element(dt, n, s, q, lens[s], j))
                        .collect()
                })
                .collect(),
            None,
        ),
        "iota" => {
            let v: Vec<Vec<f64>> = (0..n)
                .map(|s| (0..lens[s]).map(|j| (s * lens[s] + j) as f64).collect())
                .collect();
            check_exact(&v, dt, "iota")?;
            (v, None)
        }
        "random" => {
            use rand::{RngExt, SeedableRng};
            let seed = args.seed.unwrap_or_else(rand::random);
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let v = lens
                .iter()
                .map(|len| {
                    (0..*len)
                        .map(|_| f64::from(rng.random_range(0..10u8)))
                        .collect()
                })
                .collect();
            (v, Some(format!("random inputs 0..=9, --seed {seed}")))
        }
        path => (read_inputs(path, &spec, n, &lens)?, None),
    };
    Ok((spec, inputs, note))
}

fn check_exact(v: &[Vec<f64>], dt: DataType, what: &str) -> Result<(), String> {
    for (r, xs) in v.iter().enumerate() {
        for (j, x) in xs.iter().enumerate() {
            if reference::round_to(dt, *x) != *x {
                return Err(format!(
                    "{what}: rank {r} element {j} = {x} is not exactly representable as {dt}"
                ));
            }
        }
    }
    Ok(())
}

/// `{"inputs": [[...] per rank]}`: each rank's send buffer (its input part in place).
fn read_inputs(path: &str, spec: &Spec, n: usize, lens: &[usize]) -> Result<Vec<Vec<f64>>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!("--inputs {path}: {e} (--inputs takes encoded, iota, random or a JSON file)")
    })?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{path} is not JSON: {e}"))?;
    let lists = v
        .get("inputs")
        .and_then(|i| i.as_array())
        .ok_or_else(|| format!("{path}: expected an object {{\"inputs\": [[...] per rank]}}"))?;
    if lists.len() != n {
        return Err(format!(
            "{path}: {} input lists for {n} rank(s): give one per rank",
            lists.len()
        ));
    }
    let mut out = Vec::with_capacity(n);
    for (r, list) in lists.iter().enumerate() {
        let items = list
            .as_array()
            .ok_or_else(|| format!("{path}: rank {r}'s input is not a list"))?;
        let l = spec.layout(n, r);
        if matches!(l.send_role, Role::Ignored | Role::Unused) {
            // the call does not read this rank's send buffer
            out.push(Vec::new());
            continue;
        }
        if items.len() != lens[r] {
            return Err(format!(
                "{path}: rank {r}'s input has {} elements, but {} with count {} reads {} on rank {r}",
                items.len(),
                spec.func.name(),
                spec.count,
                lens[r]
            ));
        }
        let mut xs = Vec::with_capacity(items.len());
        for (j, x) in items.iter().enumerate() {
            let x = x
                .as_f64()
                .ok_or_else(|| format!("{path}: rank {r} element {j} is not a number: {x}"))?;
            xs.push(x);
        }
        out.push(xs);
    }
    check_exact(&out, spec.dtype, path)?;
    Ok(out)
}

/// `--json`'s object, in the documented key order.
#[derive(serde::Serialize)]
struct RunJson {
    op: &'static str,
    ranks: usize,
    count: usize,
    dtype: &'static str,
    redop: Option<&'static str>,
    root: Option<i64>,
    in_place: bool,
    inputs: Vec<Vec<Value>>,
    /// null where the contract defines no output on that rank (or the call failed)
    outputs: Vec<Option<Vec<Value>>>,
    error: Option<ErrorJson>,
}

#[derive(serde::Serialize)]
struct ErrorJson {
    code: i32,
    name: &'static str,
    rank: Option<usize>,
    message: String,
}

fn number(dt: DataType, x: f64) -> Value {
    if !dt.is_float() {
        if x < 0.0 {
            return json!(x as i64);
        }
        return json!(x as u64);
    }
    serde_json::Number::from_f64(x)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

fn execute(args: &Args, spec: Spec, inputs: Vec<Vec<f64>>, note: Option<String>) -> ExitCode {
    let n = args.call.ranks;
    let shared = Arc::new(inputs);
    let spec = Spec {
        inputs: Inputs::Given(shared.clone()),
        ..spec
    };
    let results = local::launch_each(LaunchOptions::default(), n, |comm| {
        let input = shared[comm.rank()].clone();
        Ok(native::execute(comm, &spec, &input))
    });
    let outcomes: Vec<Outcome> = match results {
        Ok(r) => r
            .into_iter()
            .map(|o| o.unwrap_or_else(|e| Outcome::error(e, String::new())))
            .collect(),
        Err(e) => return fail("run", e),
    };
    let errors: Vec<&crate::Error> = outcomes
        .iter()
        .filter_map(|o| match &o.actual {
            Actual::Error(e) => Some(e),
            _ => None,
        })
        .collect();
    let first = errors
        .iter()
        .find(|e| e.kind != ErrorKind::RemoteError)
        .or(errors.first())
        .copied();
    let dt = spec.dtype;
    let outputs: Vec<Option<Vec<f64>>> = outcomes
        .iter()
        .map(|o| match &o.actual {
            Actual::Values(v) => Some(v.clone()),
            _ => None,
        })
        .collect();
    let problems: Vec<String> = outcomes
        .iter()
        .enumerate()
        .flat_map(|(r, o)| o.problems.iter().map(move |p| format!("rank {r}: {p}")))
        .collect();
    if args.json {
        let v = RunJson {
            op: spec.func.cli_name(),
            ranks: n,
            count: spec.count,
            dtype: dt.name(),
            redop: spec.func.reduces().then(|| spec.op.name()),
            root: spec.func.is_rooted().then_some(spec.root),
            in_place: spec.in_place,
            inputs: shared
                .iter()
                .map(|x| x.iter().map(|v| number(dt, *v)).collect())
                .collect(),
            outputs: outputs
                .iter()
                .map(|o| {
                    o.as_ref()
                        .map(|x| x.iter().map(|v| number(dt, *v)).collect())
                })
                .collect(),
            error: first.map(|e| ErrorJson {
                code: e.code().code(),
                name: e.code().nccl_name(),
                rank: e.rank,
                message: e.message.clone(),
            }),
        };
        outln!("{}", serde_json::to_string(&v).unwrap_or_default());
    } else {
        print_text(&spec, n, &shared, &outcomes, note.as_deref());
        if let Some(e) = first {
            let who = errors.iter().filter_map(|e| e.rank).collect::<Vec<_>>();
            outln!("rejected: {e}");
            if who.len() > 1 {
                outln!(
                    "(rejected on ranks {})",
                    crate::verify::summary::fmt_ranks(&who)
                );
            }
        }
    }
    if first.is_some() {
        return ExitCode::from(REJECTED);
    }
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("rankwise run: contract violation on {p}");
        }
        return ExitCode::from(FAILED);
    }
    ExitCode::SUCCESS
}

fn print_text(
    spec: &Spec,
    n: usize,
    inputs: &[Vec<f64>],
    outcomes: &[Outcome],
    note: Option<&str>,
) {
    let mut head = format!(
        "{} on {n} rank(s): count {}, {}",
        spec.func.c_name(),
        spec.count,
        spec.dtype.nccl_name()
    );
    if spec.func.reduces() {
        head.push_str(&format!(", {}", spec.op.nccl_name()));
    }
    if spec.func.is_rooted() {
        head.push_str(&format!(", root {}", spec.root));
    }
    head.push_str(if spec.in_place {
        ", in place"
    } else {
        ", out of place"
    });
    outln!("{head}");
    if let Some(note) = note {
        outln!("({note})");
    }
    let rows: Vec<Vec<String>> = (0..n)
        .map(|r| {
            let l = layout(spec.func, n, r, spec.root_index(), spec.count);
            let input = match l.send_role {
                Role::Ignored => "(ignored off the root)".to_string(),
                Role::Unused => "(unused off the root)".to_string(),
                _ => fmt_values(&inputs[r]),
            };
            let output = match &outcomes[r].actual {
                Actual::Values(v) => fmt_values(v),
                Actual::Nothing if l.recv_role == Role::Undefined => {
                    "null (undefined: no output contract)".into()
                }
                Actual::Nothing => "null (unused off the root)".into(),
                Actual::Error(e) => format!("error {}", e.code().nccl_name()),
            };
            vec![
                r.to_string(),
                spec.relation(n, r),
                outcomes[r].addresses.clone(),
                input,
                output,
            ]
        })
        .collect();
    out!(
        "{}",
        crate::verify::summary::render_table(
            &["rank", "pointer relation", "pointers", "input", "output"],
            &rows
        )
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactness_catches_out_of_range_values() {
        assert!(check_exact(&[vec![127.0, -128.0]], DataType::Int8, "x").is_ok());
        assert!(check_exact(&[vec![300.0]], DataType::Int8, "x").is_err());
        assert!(check_exact(&[vec![1.5]], DataType::Int32, "x").is_err());
        assert!(check_exact(&[vec![1.5]], DataType::Float8e4m3, "x").is_ok());
    }
}
