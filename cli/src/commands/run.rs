//! `rankwise run <op>`: one collective on N ranks through the raw face
//! (so `--in-place` uses the op's exact pointer equation from `core`),
//! showing every rank's input and output. Outputs the contract leaves
//! undefined or unused are shown as null and never read. A call the engine
//! rejects prints its error with the `ncclResult_t` name and exits 2. On
//! the mpi engine each rank is a process of an MPI job and rank 0 prints
//! every rank's outcome.
//!
//! Every element travels as an exact [`Scalar`] of the call's datatype, from
//! the inputs file to the output: a 64-bit integer is never rounded through
//! an f64, and a float prints as the shortest decimal that reads back to its
//! bits. An input that is not an element of the datatype is refused with its
//! rank, index and value.

use super::{FAILED, REJECTED, fail};
use crate::MAX_LOCAL_RANKS;
use crate::verify::cases::native::{self, Inputs, Spec};
use crate::verify::cases::{Actual, Outcome};
use crate::verify::records::fmt_values;
use crate::verify::reference;
use rankwise::core::{DataType, ErrorKind, RedOp, Role, Scalar, layout};
use rankwise::launch::{self, EngineKind, LaunchOptions};
use serde_json::Value;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::BTreeMap;
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
    /// Engine to run on: local (threads), nccl (a process per rank, real
    /// NCCL), mpi (a process per rank of an MPI job; outside mpirun,
    /// rankwise starts `mpirun -n RANKS` itself)
    #[arg(long, value_parser = crate::commands::engine_parser(), default_value = "local")]
    pub engine: EngineKind,
}

/// Most buffer elements (all ranks, send and recv) run accepts: it prints every one.
const MAX_ELEMENTS: usize = 1 << 22;

/// Largest `--inputs` file run reads: 64 bytes for each element it accepts.
const MAX_INPUT_BYTES: u64 = MAX_ELEMENTS as u64 * 64;

pub fn run(args: Args) -> ExitCode {
    if let Some(code) = rankwise::launch::mpirun::relaunch("run", args.engine, args.call.ranks) {
        return code;
    }
    #[cfg(feature = "mpi")]
    if let Some(job) = rankwise::launch::mpirun::rank_of_job(args.engine) {
        return run_mpi(args, job);
    }
    match prepare(&args) {
        Ok((spec, inputs, note)) => ExitCode::from(execute(&args, spec, inputs, note, true)),
        Err(e) => fail("run", e),
    }
}

/// `run` as one rank of an MPI job: every process prepares the same call
/// (rank 0's seed for random inputs), runs its rank, and rank 0 prints
/// every rank's input and output.
#[cfg(feature = "mpi")]
fn run_mpi(mut args: Args, job: Result<(usize, usize), String>) -> ExitCode {
    use rankwise::launch::mpirun::{end_with_rank0, share};
    let (rank, size) = match job {
        Ok(j) => j,
        Err(e) => return fail("run", e),
    };
    let say = |e: String| {
        if rank == 0 {
            let _ = fail("run", e);
        }
        end_with_rank0(rank, FAILED)
    };
    if args.call.ranks != size {
        return say(format!(
            "--ranks {}, but mpirun started {size} process(es): each rank is one process (mpirun -n {})",
            args.call.ranks, args.call.ranks
        ));
    }
    if args.inputs == "random" && args.seed.is_none() {
        let mine: u64 = rand::random();
        match share(&mine.to_le_bytes()) {
            Ok(all) => {
                let lead = all.first().and_then(|b| <[u8; 8]>::try_from(&b[..]).ok());
                args.seed = lead.map(u64::from_le_bytes);
            }
            Err(e) => return say(e),
        }
    }
    match prepare(&args) {
        Ok((spec, inputs, note)) => {
            let code = execute(&args, spec, inputs, note, rank == 0);
            end_with_rank0(rank, code)
        }
        Err(e) => say(e),
    }
}

/// An outcome as it crosses between processes: each element as text that
/// reads back to the same value (a float by its bits).
#[cfg(feature = "mpi")]
#[derive(serde::Serialize, serde::Deserialize)]
struct WireOutcome {
    values: Option<Vec<String>>,
    error: Option<rankwise::Error>,
    addresses: String,
    problems: Vec<String>,
}

#[cfg(feature = "mpi")]
impl WireOutcome {
    fn from(o: Outcome) -> WireOutcome {
        let (values, error) = match o.actual {
            Actual::Values(v) => (
                Some(
                    v.iter()
                        .map(|x| match x {
                            Scalar::Int(i) => format!("i{i}"),
                            Scalar::Float(f) => format!("f{:x}", f.to_bits()),
                        })
                        .collect(),
                ),
                None,
            ),
            Actual::Nothing => (None, None),
            Actual::Error(e) => (None, Some(e)),
        };
        WireOutcome {
            values,
            error,
            addresses: o.addresses,
            problems: o.problems,
        }
    }
    fn into_outcome(self) -> rankwise::Result<Outcome> {
        let bad = |x: &str| {
            rankwise::Error::new(
                ErrorKind::Internal,
                format!("an element came back from a rank process as {x:?}"),
            )
        };
        let actual = match (self.values, self.error) {
            (_, Some(e)) => Actual::Error(e),
            (None, None) => Actual::Nothing,
            (Some(v), None) => Actual::Values(
                v.iter()
                    .map(|x| match x.split_at_checked(1) {
                        Some(("i", i)) => i.parse().map(Scalar::Int).map_err(|_| bad(x)),
                        Some(("f", b)) => u64::from_str_radix(b, 16)
                            .map(|b| Scalar::Float(f64::from_bits(b)))
                            .map_err(|_| bad(x)),
                        _ => Err(bad(x)),
                    })
                    .collect::<rankwise::Result<_>>()?,
            ),
        };
        Ok(Outcome {
            actual,
            addresses: self.addresses,
            problems: self.problems,
        })
    }
}

/// The call, every rank's input, and a note on where the inputs came from.
type Prepared = (Spec, Vec<Vec<Scalar>>, Option<String>);

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
                        .map(|j| {
                            Scalar::from_f64(
                                dt,
                                reference::encoded_element(dt, n, s, q, lens[s], j),
                            )
                        })
                        .collect()
                })
                .collect(),
            None,
        ),
        "iota" => {
            let v: Vec<Vec<Scalar>> = (0..n)
                .map(|s| {
                    (0..lens[s])
                        .map(|j| Scalar::from_f64(dt, (s * lens[s] + j) as f64))
                        .collect()
                })
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
                        .map(|_| Scalar::from_f64(dt, f64::from(rng.random_range(0..10u8))))
                        .collect()
                })
                .collect();
            (v, Some(format!("random inputs 0..=9, --seed {seed}")))
        }
        path => (read_inputs(path, &spec, n, &lens)?, None),
    };
    Ok((spec, inputs, note))
}

fn check_exact(v: &[Vec<Scalar>], dt: DataType, what: &str) -> Result<(), String> {
    for (r, xs) in v.iter().enumerate() {
        for (j, x) in xs.iter().enumerate() {
            if x.to_type(dt) != *x {
                return Err(format!(
                    "{what}: rank {r} element {j} = {x} is not exactly representable as {dt}"
                ));
            }
        }
    }
    Ok(())
}

/// `{"inputs": [[...] per rank]}`: each rank's send buffer (its input part
/// in place). Each element is a JSON number, or a string holding one or
/// `inf`, `-inf`, `nan`; it is read from its own text ([`Scalar::parse`]),
/// never through an f64, so 64-bit integers stay exact.
fn read_inputs(
    path: &str,
    spec: &Spec,
    n: usize,
    lens: &[usize],
) -> Result<Vec<Vec<Scalar>>, String> {
    let file = std::fs::File::open(path).map_err(|e| {
        format!("--inputs {path}: {e} (--inputs takes encoded, iota, random or a JSON file)")
    })?;
    let too_large = || {
        format!(
            "--inputs {path} is larger than run reads ({} MiB, 64 bytes for each of the {MAX_ELEMENTS} elements it shows)",
            MAX_INPUT_BYTES >> 20
        )
    };
    // the size on disk refuses a large file unread; the bounded read covers pipes
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size > MAX_INPUT_BYTES {
        return Err(too_large());
    }
    let bytes = crate::verify::records::read_capped(file, MAX_INPUT_BYTES)
        .map_err(|e| format!("--inputs {path}: {e}"))?
        .ok_or_else(too_large)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("--inputs {path}: stream did not contain valid UTF-8"))?;
    let shape = || format!("{path}: expected an object {{\"inputs\": [[...] per rank]}}");
    let top: &RawValue =
        serde_json::from_str(&text).map_err(|e| format!("{path} is not JSON: {e}"))?;
    let object: BTreeMap<String, &RawValue> =
        serde_json::from_str(top.get()).map_err(|_| shape())?;
    let lists = object
        .get("inputs")
        .and_then(|v| Bounded::read(v.get(), n).ok())
        .ok_or_else(shape)?;
    if lists.len != n {
        return Err(format!(
            "{path}: {} input lists for {n} rank(s): give one per rank",
            lists.len
        ));
    }
    let mut out = Vec::with_capacity(n);
    for (r, list) in lists.items.iter().enumerate() {
        // the call does not read an ignored or unused send buffer
        let ignored = matches!(spec.layout(n, r).send_role, Role::Ignored | Role::Unused);
        let keep = if ignored { 0 } else { lens[r] };
        let items = Bounded::read(list.get(), keep)
            .map_err(|_| format!("{path}: rank {r}'s input is not a list"))?;
        if ignored {
            out.push(Vec::new());
            continue;
        }
        if items.len != lens[r] {
            return Err(format!(
                "{path}: rank {r}'s input has {} elements, but {} with count {} reads {} on rank {r}",
                items.len,
                spec.func.name(),
                spec.count,
                lens[r]
            ));
        }
        let mut xs = Vec::with_capacity(items.len);
        for (j, x) in items.items.iter().enumerate() {
            let raw = x.get();
            // a JSON string is read by its contents ("inf", "nan", or digits)
            let text: Cow<str> = if raw.starts_with('"') {
                serde_json::from_str::<String>(raw).map_or(Cow::Borrowed(raw), Cow::Owned)
            } else {
                Cow::Borrowed(raw)
            };
            let v = Scalar::parse(&text, spec.dtype)
                .map_err(|e| format!("{path}: rank {r} element {j}: {e}"))?;
            xs.push(v);
        }
        out.push(xs);
    }
    Ok(out)
}

/// A JSON list as the raw text of its first `keep` elements, and its
/// length: the elements past `keep` are counted, not stored, so a long list
/// costs no memory.
struct Bounded<'a> {
    items: Vec<&'a RawValue>,
    len: usize,
}

impl<'a> Bounded<'a> {
    fn read(text: &'a str, keep: usize) -> serde_json::Result<Bounded<'a>> {
        use serde::de::DeserializeSeed;
        let mut de = serde_json::Deserializer::from_str(text);
        let list = Keep(keep).deserialize(&mut de)?;
        de.end()?;
        Ok(list)
    }
}

struct Keep(usize);

impl<'de> serde::de::DeserializeSeed<'de> for Keep {
    type Value = Bounded<'de>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Bounded<'de>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Keep {
    type Value = Bounded<'de>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Bounded<'de>, A::Error> {
        let mut list = Bounded {
            items: Vec::new(),
            len: 0,
        };
        loop {
            if list.len < self.0 {
                match seq.next_element::<&RawValue>()? {
                    Some(x) => list.items.push(x),
                    None => break,
                }
            } else if seq.next_element::<serde::de::IgnoredAny>()?.is_none() {
                break;
            }
            list.len += 1;
        }
        Ok(list)
    }
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

/// An element as JSON: every integer as an exact number; a finite float as
/// the shortest number that reads back to its bits; `inf`, `-inf` and `nan`
/// as those strings (JSON has no such numbers, and `null` means "no output").
fn number(x: Scalar) -> Value {
    match x {
        Scalar::Int(i) => u64::try_from(i)
            .map(Value::from)
            .or_else(|_| i64::try_from(i).map(Value::from))
            .unwrap_or_else(|_| Value::String(x.to_string())),
        Scalar::Float(f) => serde_json::Number::from_f64(f)
            .map(Value::Number)
            .unwrap_or_else(|| Value::String(x.to_string())),
    }
}

/// Runs the call on every rank and, when `speak`, prints what each did;
/// returns the exit code.
fn execute(
    args: &Args,
    spec: Spec,
    inputs: Vec<Vec<Scalar>>,
    note: Option<String>,
    speak: bool,
) -> u8 {
    let n = args.call.ranks;
    let shared = Arc::new(inputs);
    let spec = Spec {
        inputs: Inputs::Given(shared.clone()),
        ..spec
    };
    let results = run_ranks(args.engine, n, &spec, &shared);
    let failed = |e: rankwise::Error| {
        if speak {
            eprintln!("rankwise run: {e}");
        }
        FAILED
    };
    let outcomes: Vec<Outcome> = match results {
        Ok(r) => r
            .into_iter()
            .map(|o| o.unwrap_or_else(|e| Outcome::error(e, String::new())))
            .collect(),
        Err(e) => return failed(e),
    };
    let errors: Vec<&rankwise::Error> = outcomes
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
    let outputs: Vec<Option<Vec<Scalar>>> = outcomes
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
    if speak && args.json {
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
                .map(|x| x.iter().map(|v| number(*v)).collect())
                .collect(),
            outputs: outputs
                .iter()
                .map(|o| o.as_ref().map(|x| x.iter().map(|v| number(*v)).collect()))
                .collect(),
            error: first.map(|e| ErrorJson {
                code: e.code().code(),
                name: e.code().nccl_name(),
                rank: e.rank,
                message: e.message.clone(),
            }),
        };
        outln!("{}", serde_json::to_string(&v).unwrap_or_default());
    } else if speak {
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
        return REJECTED;
    }
    if !problems.is_empty() {
        for p in problems.iter().filter(|_| speak) {
            eprintln!("rankwise run: contract violation on {p}");
        }
        return FAILED;
    }
    0
}

/// Every rank's outcome of the call, from the engine's ranks.
fn run_ranks(
    engine: EngineKind,
    n: usize,
    spec: &Spec,
    inputs: &[Vec<Scalar>],
) -> rankwise::Result<Vec<rankwise::Result<Outcome>>> {
    #[cfg(feature = "mpi")]
    if engine == EngineKind::Mpi {
        let out = rankwise::mpi::launch_each(LaunchOptions::default(), n, |comm| {
            let input = inputs.get(comm.rank()).cloned().unwrap_or_default();
            Ok(WireOutcome::from(native::execute(comm, spec, &input)))
        })?;
        return Ok(out
            .into_iter()
            .map(|r| r.and_then(WireOutcome::into_outcome))
            .collect());
    }
    launch::launch_each(engine, LaunchOptions::default(), n, |comm| {
        let input = inputs.get(comm.rank()).cloned().unwrap_or_default();
        Ok(native::execute(comm, spec, &input))
    })
}

fn print_text(
    spec: &Spec,
    n: usize,
    inputs: &[Vec<Scalar>],
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
        let i = |v: i128| Scalar::Int(v);
        assert!(check_exact(&[vec![i(127), i(-128)]], DataType::Int8, "x").is_ok());
        assert!(check_exact(&[vec![i(300)]], DataType::Int8, "x").is_err());
        let f = |v: f64| Scalar::Float(v);
        assert!(check_exact(&[vec![f(1.5)]], DataType::Float8e4m3, "x").is_ok());
        assert!(check_exact(&[vec![f(0.1)]], DataType::Float32, "x").is_err());
    }

    #[test]
    fn json_numbers_are_exact_and_non_finite_floats_are_strings() {
        let text = |x: Scalar| number(x).to_string();
        assert_eq!(text(Scalar::Int(u64::MAX.into())), "18446744073709551615");
        assert_eq!(text(Scalar::Int(i64::MIN.into())), "-9223372036854775808");
        assert_eq!(text(Scalar::Float(0.1)), "0.1");
        assert_eq!(text(Scalar::Float(f64::INFINITY)), "\"inf\"");
        assert_eq!(text(Scalar::Float(f64::NEG_INFINITY)), "\"-inf\"");
        assert_eq!(text(Scalar::Float(f64::NAN)), "\"nan\"");
    }
}
