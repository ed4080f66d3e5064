//! `percall`: time per call, rankwise's path against a bare ncclAllReduce loop at N = 1.

use super::*;

pub(crate) fn percall_job(comm: &mut Comm, args: &Value) -> Result<Value> {
    let iters = args["iters"].as_u64().unwrap_or(2000) as usize;
    let stream = raw::stream()?;
    let mut rows = Vec::new();
    for bytes in [8usize, 64 << 20] {
        let count = bytes / 4;
        let s = comm.alloc(bytes)?;
        let r = comm.alloc(bytes)?;
        let k = if bytes > 1 << 20 { iters / 20 } else { iters }.max(10);
        // warm up both paths
        for _ in 0..10 {
            comm.nccl_all_reduce(s, r, count, DataType::Float32, RedOp::Sum)?;
        }
        let t = Instant::now();
        for _ in 0..k {
            comm.nccl_all_reduce(s, r, count, DataType::Float32, RedOp::Sum)?;
        }
        let rankwise_us = t.elapsed().as_secs_f64() * 1e6 / k as f64;
        let call = rc(Func::AllReduce, s, r, count, 7, 0, 0);
        let h = comm.handle();
        let t = Instant::now();
        for _ in 0..k {
            // SAFETY: live buffers of this communicator; one rank; waited for.
            unsafe {
                raw::call(h, &stream, &call)?;
                raw::wait(h, &stream, Duration::from_secs(30))?;
            }
        }
        let bare_us = t.elapsed().as_secs_f64() * 1e6 / k as f64;
        rows.push(json!({
            "bytes": bytes, "iters": k,
            "rankwise_us": rankwise_us, "bare_nccl_us": bare_us,
            "overhead_us": rankwise_us - bare_us,
        }));
        comm.free(s)?;
        comm.free(r)?;
    }
    Ok(Value::Array(rows))
}

pub(crate) fn percall(iters: usize) -> Result<()> {
    let opts = LaunchOptions::default().with_tracer(rankwise::trace::Tracer::off());
    let res = launch::all_ok(on_nccl(1, &opts, "percall", json!({ "iters": iters }))?)?;
    println!("percall: 1 rank, AllReduce float32, each call waited for");
    for row in res[0].as_array().into_iter().flatten() {
        println!(
            "  {:>9} B  {:>5} calls  rankwise {:>9.2} us  bare ncclAllReduce {:>9.2} us  difference {:>7.2} us",
            row["bytes"],
            row["iters"],
            row["rankwise_us"].as_f64().unwrap_or(0.0),
            row["bare_nccl_us"].as_f64().unwrap_or(0.0),
            row["overhead_us"].as_f64().unwrap_or(0.0)
        );
    }
    Ok(())
}
