//! The soak test: 10,000 calls on one context must not grow memory. It measures the process's resident memory,
//! so it has a test binary (a process) of its own: beside other tests running at once it would count their
//! allocations too (seen on the H100, where they ran on 16 threads).

mod common;

use common::problems::Problem;
use convt::{ConvTranspose2dOptions, Tensor};

fn resident_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
        .unwrap_or(0);
    pages * 4096
}

#[test]
fn soak_ten_thousand_calls_on_one_context_do_not_grow_memory() {
    // 5,000 forward and 5,000 backward calls over 8 shapes (every option, with and without bias) on one
    // context; resident memory, GPU buffers created, idle pool bytes, live tensor bytes and cached pipelines
    // measured after a warm-up round and at the end.
    let ctx = &common::ctx_with_budget(u64::MAX);
    let shapes: Vec<Problem> = (0..8)
        .map(|i| {
            let params = ConvTranspose2dOptions::default()
                .stride((1 + i % 3, 1 + i % 2))
                .padding((i % 2, (i / 2) % 2))
                .dilation((1 + i / 4, 1))
                .groups(if i % 2 == 0 { 2 } else { 1 });
            Problem {
                input: vec![1 + i as usize % 2, 4, 3 + i as usize, 4],
                weight: vec![4, 2 + i as usize % 3, 2 + i as usize % 2, 3],
                bias: i % 3 != 0,
                params,
                seed: i as u64,
            }
        })
        .collect();
    let operands: Vec<_> = shapes
        .iter()
        .map(|p| {
            let (x, w, b) = p.tensors();
            let go = Tensor::uniform(p.shape().output_dims(), -1.0, 1.0, p.seed ^ 5).unwrap();
            (x, w, b, go)
        })
        .collect();
    let call = |i: usize| {
        let (p, (x, w, b, go)) = (&shapes[i % shapes.len()], &operands[i % shapes.len()]);
        if i.is_multiple_of(2) {
            common::forward_host(ctx, x, w, b.as_ref(), &p.params).map(|_| ())
        } else {
            common::backward_host(ctx, x, w, b.as_ref(), go, &p.params).map(|_| ())
        }
    };
    let calls: usize = std::env::var("CONVT_SOAK_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    for i in 0..2 * shapes.len() {
        call(i).unwrap();
    }
    let start = (resident_bytes(), ctx.buffer_stats(), ctx.cached_pipelines());
    let t = std::time::Instant::now();
    for i in 0..calls {
        call(i).unwrap();
    }
    let end = (resident_bytes(), ctx.buffer_stats(), ctx.cached_pipelines());
    println!(
        "soak: {calls} calls in {:.1}s; resident {} -> {} MiB; buffers created {} -> {}, idle {} -> {} ({} -> {} KiB); \
         live tensor bytes at end {}; pipelines {} -> {}",
        t.elapsed().as_secs_f64(),
        start.0 >> 20,
        end.0 >> 20,
        start.1 .0,
        end.1 .0,
        start.1 .1,
        end.1 .1,
        start.1 .2 >> 10,
        end.1 .2 >> 10,
        ctx.tensor_bytes(),
        start.2,
        end.2
    );
    assert_eq!(ctx.tensor_bytes(), 0, "every tensor's bytes released");
    assert_eq!(end.2, start.2, "no pipeline compiled after the warm-up round");
    // These calls' scratch is far below the least idle limit, which therefore holds.
    assert_eq!(ctx.idle_limit(), convt::GpuContext::MAX_IDLE_BYTES);
    assert!(end.1 .2 <= ctx.idle_limit(), "idle pool bounded");
    ctx.release_idle_memory();
    assert_eq!(ctx.buffer_stats().1, 0, "every idle buffer freed");
    assert!(end.1 .0 <= start.1 .0 + 8, "the pool kept creating buffers: {} -> {}", start.1 .0, end.1 .0);
    assert!(end.0 <= start.0 + (64 << 20), "resident memory grew from {} to {} MiB", start.0 >> 20, end.0 >> 20);
}
