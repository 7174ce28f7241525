//! `bench`, `tune` and `verify` take the same shape flags (and `--batch`) as well as suite cases; `tune` on a
//! shape of one's own writes a cache entry that the selector then uses for the shapes of its bucket; every
//! subcommand that prints results prints them as JSON with `--json`.

mod common;

use common::cli::{convt_fails, convt_ok, describe, text};
use convt::gpu::tune::{Pass, TuneKey};
use convt::gpu::{select, GpuContext, GpuOptions, Strategy};
use convt::io::save_tensors;
use convt::{ConvTranspose2dOptions, DType, Precision, Tensor};

/// The flags of one custom shape: 8 -> 4 channels, a 9 x 13 input, a 3 x 3 kernel at stride 2 with padding 1.
const SHAPE: [&str; 12] =
    ["--in-channels", "8", "--out-channels", "4", "--size", "9,13", "--kernel", "3", "--stride", "2", "--padding", "1"];

fn json_lines(stdout: &[u8]) -> Vec<serde_json::Value> {
    text(stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn bench_times_a_shape_given_by_flags() {
    let dir = common::TempDir::new("bench-shape");
    let json = dir.path("bench.json");
    let mut args = vec!["bench", "--runs", "3", "--warmup", "1", "--batch", "3", "--json", json.to_str().unwrap()];
    args.extend(SHAPE);
    convt_ok(&args);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let cases = v["cases"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(cases.len(), 1, "{v}");
    let c = &cases[0];
    assert_eq!(c["case"], "custom", "{c}");
    assert!(c["ms"].as_f64().is_some_and(|ms| ms > 0.0), "{c}");
    // The timed output checked against the float64 reference.
    assert!(c["rel_l2"].as_f64().is_some_and(|e| e <= common::F32_TOLERANCE), "{c}");
    // Partial shapes are refused naming what is missing, as in verify.
    convt_fails(&["bench", "--in-channels", "8", "--size", "9"], &["missing: --out-channels, --kernel"]);
    convt_fails(&["tune", "--case", "kb81", "--stride", "2"], &["--case", "--stride"]);
}

#[test]
fn tune_on_a_shape_caches_a_winner_the_selector_uses_for_its_bucket() {
    let dir = common::TempDir::new("tune-shape");
    let cache = dir.path("tune.json");
    let mut args =
        vec!["tune", "--runs", "2", "--warmup", "1", "--batch", "4", "--cache", cache.to_str().unwrap(), "--json"];
    args.extend(SHAPE);
    let out = convt_ok(&args);
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.len(), 1, "{}", describe(&args, &out));
    let winner = lines[0]["winner"].as_str().expect("a winner").to_string();
    assert!(lines[0]["timings"].as_array().is_some_and(|t| !t.is_empty()), "{}", lines[0]);

    // A batch of 3 and a 10 x 12 input share the bucket of the tuned batch of 4 and 9 x 13 input (16 x 16).
    let ctx = GpuContext::with_options(GpuOptions {
        tune_cache: Some(cache.clone()),
        strategy: None,
        ..GpuOptions::from_env().unwrap()
    })
    .unwrap();
    let options = ConvTranspose2dOptions::default().stride(2).padding(1);
    let near = options.resolve(&[3, 8, 10, 12], &[8, 4, 3, 3], None).unwrap();
    let key = TuneKey::new(ctx.adapter_info(), Pass::Forward, &near, false, Precision::F32, DType::F32);
    assert_eq!(ctx.tuned().lookup(&key), Some(winner.as_str()));
    assert_eq!(select::forward(&ctx, &near, false, Precision::F32, DType::F32), Strategy::from_name(&winner).unwrap());
}

#[test]
fn every_subcommand_that_prints_results_prints_json() {
    let dir = common::TempDir::new("json");
    let tensors = dir.path("t.safetensors");
    let x = Tensor::uniform(vec![1, 2, 3, 3], -1.0, 1.0, 1).unwrap();
    let w = Tensor::uniform(vec![2, 3, 2, 2], -1.0, 1.0, 2).unwrap();
    let go = Tensor::uniform(vec![1, 3, 4, 4], -1.0, 1.0, 3).unwrap();
    save_tensors(&tensors, &[("input", &x), ("weight", &w), ("grad_output", &go)], None).unwrap();
    let (t, o) = (tensors.to_str().unwrap(), dir.path("out.safetensors"));
    let o = o.to_str().unwrap();

    let v = &json_lines(&convt_ok(&["forward", "--tensors", t, "--out", o, "--json"]).stdout)[0];
    assert_eq!(v["wrote"]["output"], serde_json::json!([1, 3, 4, 4]), "{v}");
    assert!(v["ran"]["kernel"].is_string(), "{v}");
    std::fs::remove_file(o).unwrap();
    let v = &json_lines(&convt_ok(&["backward", "--tensors", t, "--out", o, "--json", "--backend", "cpu"]).stdout)[0];
    assert_eq!(v["wrote"]["grad_weight"], serde_json::json!([2, 3, 2, 2]), "{v}");
    let mut args = vec!["verify", "--json"];
    args.extend(SHAPE);
    let v = &json_lines(&convt_ok(&args).stdout)[0];
    assert_eq!(v["ok"], true, "{v}");
    assert!(json_lines(&convt_ok(&["info", "--json"]).stdout)[0]["chosen"]["name"].is_string());
}
