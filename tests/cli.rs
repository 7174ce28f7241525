//! The `convt` binary, run as a user runs it: `forward` reproduces PyTorch's output on a fixture with both
//! backends, bad input fails with exit code 2 and one `error:` line (no panic, no backtrace), `verify` and
//! `info` succeed and print what they promise; `backward` matches the library's CPU reference on both backends
//! and rejects a missing or mis-sized `grad_output` the same way.

mod common;

use common::cli::{assert_no_panic, convt, convt_fails, convt_ok, convt_with_env, describe, s, text};

use std::path::{Path, PathBuf};
use std::process::Command;

use convt::io::{save_tensors, TensorFile};
use convt::{ErrorStats, Tensor};

// ---------------------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------------------

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// The fixture's options (its "params" metadata, as tests/fixtures.rs reads it) as `convt` flags.
fn fixture_flags(file: &TensorFile) -> Vec<String> {
    let meta: serde_json::Value =
        serde_json::from_str(&file.metadata()["params"]).expect("fixture metadata holds params JSON");
    let pair = |k: &str| -> String {
        let v = meta[k].as_array().expect("pair");
        format!("{},{}", v[0].as_i64().unwrap(), v[1].as_i64().unwrap())
    };
    vec![
        "--stride".into(),
        pair("stride"),
        "--padding".into(),
        pair("padding"),
        "--output-padding".into(),
        pair("output_padding"),
        "--dilation".into(),
        pair("dilation"),
        "--groups".into(),
        meta["groups"].as_i64().expect("groups").to_string(),
    ]
}

/// The `output` tensor of a file `convt forward` wrote.
fn read_output(path: &Path) -> Tensor {
    let file = TensorFile::load(path).expect("convt wrote a readable file");
    file.get("output").expect("output tensor")
}

fn rel_l2(result: &Tensor, expected: &Tensor) -> ErrorStats {
    assert_eq!(result.shape(), expected.shape());
    let reference: Vec<f64> = expected.data().iter().map(|&v| v as f64).collect();
    ErrorStats::compare(result.data(), &reference)
}

// ---------------------------------------------------------------------------------------------------------
// forward
// ---------------------------------------------------------------------------------------------------------

fn forward_matches_fixture(backend: &str) {
    let tensors = fixture("everything.safetensors");
    let file = TensorFile::load(&tensors).unwrap();
    let expected = file.get("output").unwrap();
    let dir = common::TempDir::new(backend);
    let out_path = dir.path("out.safetensors");
    let flags = fixture_flags(&file);
    let mut args = vec!["forward", "--tensors", s(&tensors), "--out", s(&out_path), "--backend", backend];
    args.extend(flags.iter().map(String::as_str));
    let out = convt_ok(&args);
    // The result lines are on stdout.
    assert!(text(&out.stdout).contains(&format!("{:?}", expected.shape())), "{}", describe(&args, &out));

    let result = read_output(&out_path);
    let stats = rel_l2(&result, &expected);
    assert!(
        stats.rel_l2 <= common::F32_TOLERANCE,
        "{backend}: rel L2 {:e} ({} non-finite)",
        stats.rel_l2,
        stats.non_finite
    );
}

#[test]
fn forward_on_gpu_matches_the_fixture() {
    forward_matches_fixture("gpu");
}

#[test]
fn forward_on_cpu_matches_the_fixture() {
    forward_matches_fixture("cpu");
}

#[test]
fn single_integer_means_the_same_value_for_both_axes() {
    let tensors = fixture("basic.safetensors");
    let dir = common::TempDir::new("pair");
    let run = |name: &str, flags: &[&str]| -> Tensor {
        let out_path = dir.path(name);
        let mut args = vec!["forward", "--tensors", s(&tensors), "--out", s(&out_path), "--backend", "cpu"];
        args.extend_from_slice(flags);
        convt_ok(&args);
        read_output(&out_path)
    };
    let single = run("single.safetensors", &["--stride", "2", "--padding", "1"]);
    let pair = run("pair.safetensors", &["--stride", "2,2", "--padding", "1,1"]);
    assert_eq!(single.shape(), pair.shape());
    assert_eq!(single.data(), pair.data());
    // And it is not the same as another pair.
    let other = run("other.safetensors", &["--stride", "2,1", "--padding", "1,1"]);
    assert_ne!(single.shape(), other.shape());
}

// ---------------------------------------------------------------------------------------------------------
// Bad input: exit code 2, one `error:` line
// ---------------------------------------------------------------------------------------------------------

/// `convt forward` on the `everything` fixture (input [3, 6, 4, 5], weight [6, 3, 2, 3]) with `flags`.
fn forward_fails(flags: &[&str], mentions: &[&str]) -> String {
    let dir = common::TempDir::new("bad");
    let out_path = dir.path("out.safetensors");
    let tensors = fixture("everything.safetensors");
    let mut args = vec!["forward", "--tensors", s(&tensors), "--out", s(&out_path)];
    args.extend_from_slice(flags);
    let line = convt_fails(&args, mentions);
    assert!(!out_path.exists(), "no output is written on error");
    line
}

#[test]
fn negative_padding_fails_cleanly() {
    let gpu = forward_fails(&["--padding=-1"], &["negative padding", "padding = [-1, -1]"]);
    // Validation comes before any GPU work: the CPU backend says the same.
    let cpu = forward_fails(&["--padding=-1", "--backend", "cpu"], &["negative padding"]);
    assert_eq!(gpu, cpu);
    forward_fails(&["--padding", "0,-2"], &["padding = [0, -2]"]);
}

#[test]
fn zero_stride_fails_cleanly() {
    forward_fails(&["--stride", "0"], &["non-positive stride", "[0, 0]"]);
    forward_fails(&["--stride", "2,0"], &["non-positive stride", "[2, 0]"]);
}

#[test]
fn output_padding_too_large_fails_cleanly() {
    forward_fails(
        &["--output-padding", "1"],
        &["output padding must be smaller", "output_padding = [1, 1]", "stride = [1, 1]", "dilation = [1, 1]"],
    );
    forward_fails(&["--stride", "2,3", "--output-padding", "0,3"], &["output_padding = [0, 3]", "stride = [2, 3]"]);
}

#[test]
fn zero_groups_fails_cleanly() {
    forward_fails(&["--groups", "0"], &["non-positive groups", "groups = 0"]);
    forward_fails(&["--groups", "-2"], &["groups = -2"]);
}

#[test]
fn groups_not_dividing_the_channels_fails_cleanly() {
    // The weight has 6 input channels.
    forward_fails(&["--groups", "4"], &["in_channels must be divisible by groups", "in_channels = 6", "groups = 4"]);
    // A shape given to `verify` whose output channels groups do not divide.
    convt_fails(
        &["verify", "--in-channels", "4", "--out-channels", "6", "--size", "5", "--kernel", "3", "--groups", "4"],
        &["out_channels must be divisible by groups", "out_channels = 6", "groups = 4"],
    );
}

#[test]
fn missing_tensors_file_fails_cleanly() {
    let dir = common::TempDir::new("missing");
    let missing = dir.path("no-such-file.safetensors");
    let out_path = dir.path("out.safetensors");
    convt_fails(&["forward", "--tensors", s(&missing), "--out", s(&out_path)], &[s(&missing)]);
    assert!(!out_path.exists());
}

#[test]
fn file_that_is_not_safetensors_fails_cleanly() {
    let dir = common::TempDir::new("garbage");
    let garbage = dir.path("garbage.safetensors");
    std::fs::write(&garbage, b"definitely not a safetensors file\n").unwrap();
    let out_path = dir.path("out.safetensors");
    convt_fails(
        &["forward", "--tensors", s(&garbage), "--out", s(&out_path)],
        &[s(&garbage), "not a valid safetensors file"],
    );
    assert!(!out_path.exists());
}

#[test]
fn file_without_weight_fails_cleanly() {
    let dir = common::TempDir::new("noweight");
    let path = dir.path("input-only.safetensors");
    let input = Tensor::uniform(vec![1, 2, 3, 3], -1.0, 1.0, 0).unwrap();
    save_tensors(&path, &[("input", &input)], None).unwrap();
    let out_path = dir.path("out.safetensors");
    convt_fails(
        &["forward", "--tensors", s(&path), "--out", s(&out_path)],
        &[s(&path), "`weight` not found", "found: input"],
    );
    assert!(!out_path.exists());
}

#[test]
fn malformed_pairs_are_usage_errors() {
    let tensors = fixture("everything.safetensors");
    let dir = common::TempDir::new("malformed");
    let out_path = dir.path("out.safetensors");
    for bad in ["1,2,3", "x", "1,x", ""] {
        let args = ["forward", "--tensors", s(&tensors), "--out", s(&out_path), "--stride", bad];
        let out = convt(&args);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&args, &out));
        assert_no_panic(&args, &out);
        assert!(text(&out.stderr).contains("--stride"), "{}", describe(&args, &out));
        assert!(!out_path.exists());
    }
}

// ---------------------------------------------------------------------------------------------------------
// backward
// ---------------------------------------------------------------------------------------------------------

/// Flags of the backward tests' layer: every option away from its default.
const BACKWARD_FLAGS: [&str; 10] =
    ["--stride", "2,3", "--padding", "1,0", "--output-padding", "1,2", "--dilation", "2,1", "--groups", "2"];

/// The same options as [`BACKWARD_FLAGS`], for the library.
fn backward_params() -> convt::ConvTranspose2dOptions {
    convt::ConvTranspose2dOptions::default()
        .stride([2, 3])
        .padding([1, 0])
        .output_padding([1, 2])
        .dilation([2, 1])
        .groups(2)
}

/// Random `input` [2, 4, 5, 6], `weight` [4, 3, 3, 2] (6 output channels in 2 groups), `bias` [6] when `bias`, and
/// a `grad_output` of the output's size, written to `dir`; returns the file and the tensors.
fn backward_problem(dir: &common::TempDir, bias: bool) -> (PathBuf, Vec<(&'static str, Tensor)>) {
    let input = Tensor::uniform(vec![2, 4, 5, 6], -1.0, 1.0, 11).unwrap();
    let weight = Tensor::uniform(vec![4, 3, 3, 2], -1.0, 1.0, 12).unwrap();
    let b = Tensor::uniform(vec![6], -1.0, 1.0, 13).unwrap();
    let shape = backward_params().resolve(input.shape(), weight.shape(), bias.then_some(b.shape())).unwrap();
    let grad_output = Tensor::uniform(shape.output_dims(), -1.0, 1.0, 14).unwrap();
    let mut tensors = vec![("input", input), ("weight", weight), ("grad_output", grad_output)];
    if bias {
        tensors.push(("bias", b));
    }
    let path = dir.path(if bias { "with-bias.safetensors" } else { "no-bias.safetensors" });
    let refs: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    save_tensors(&path, &refs, None).unwrap();
    (path, tensors)
}

fn named<'a>(tensors: &'a [(&str, Tensor)], name: &str) -> &'a Tensor {
    &tensors.iter().find(|(n, _)| *n == name).unwrap().1
}

/// Runs `convt backward` on `tensors` with `backend` and returns the file it wrote.
fn run_backward(dir: &common::TempDir, tensors: &Path, backend: &str) -> TensorFile {
    let out_path = dir.path(&format!("grads-{backend}.safetensors"));
    let mut args = vec!["backward", "--tensors", s(tensors), "--out", s(&out_path), "--backend", backend];
    args.extend_from_slice(&BACKWARD_FLAGS);
    let out = convt_ok(&args);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("grad_input [2, 4, 5, 6]") && stdout.contains(s(&out_path)), "{}", describe(&args, &out));
    TensorFile::load(&out_path).expect("convt wrote a readable file")
}

fn backward_matches_the_reference(backend: &str) {
    let dir = common::TempDir::new(&format!("backward-{backend}"));
    let (path, t) = backward_problem(&dir, true);
    let expected = convt::cpu::conv_transpose2d_backward(
        named(&t, "input"),
        named(&t, "weight"),
        Some(named(&t, "bias")),
        named(&t, "grad_output"),
        &backward_params(),
    )
    .unwrap();
    let file = run_backward(&dir, &path, backend);
    let names: Vec<&str> = file.names().collect();
    assert_eq!(names, ["grad_bias", "grad_input", "grad_weight"]);
    let expected_bias = expected.grad_bias.as_ref().expect("the layer has a bias");
    for (name, want) in
        [("grad_input", &expected.grad_input), ("grad_weight", &expected.grad_weight), ("grad_bias", expected_bias)]
    {
        let stats = rel_l2(&file.get(name).unwrap(), want);
        assert!(
            stats.rel_l2 <= common::F32_TOLERANCE,
            "{backend} {name}: rel L2 {:e} ({} non-finite)",
            stats.rel_l2,
            stats.non_finite
        );
    }
}

#[test]
fn backward_on_gpu_matches_the_cpu_reference() {
    backward_matches_the_reference("gpu");
}

#[test]
fn backward_on_cpu_matches_the_cpu_reference() {
    backward_matches_the_reference("cpu");
}

#[test]
fn backward_without_bias_writes_no_grad_bias() {
    let dir = common::TempDir::new("backward-nobias");
    let (path, t) = backward_problem(&dir, false);
    let expected = convt::cpu::conv_transpose2d_backward(
        named(&t, "input"),
        named(&t, "weight"),
        None,
        named(&t, "grad_output"),
        &backward_params(),
    )
    .unwrap();
    let file = run_backward(&dir, &path, "gpu");
    let names: Vec<&str> = file.names().collect();
    assert_eq!(names, ["grad_input", "grad_weight"]);
    assert!(rel_l2(&file.get("grad_input").unwrap(), &expected.grad_input).rel_l2 <= common::F32_TOLERANCE);
    assert!(rel_l2(&file.get("grad_weight").unwrap(), &expected.grad_weight).rel_l2 <= common::F32_TOLERANCE);
}

/// `convt backward` on `tensors` with [`BACKWARD_FLAGS`] and `backend` must fail cleanly and write nothing.
fn backward_fails(dir: &common::TempDir, tensors: &Path, backend: &str, mentions: &[&str]) -> String {
    let out_path = dir.path("out.safetensors");
    let mut args = vec!["backward", "--tensors", s(tensors), "--out", s(&out_path), "--backend", backend];
    args.extend_from_slice(&BACKWARD_FLAGS);
    let line = convt_fails(&args, mentions);
    assert!(!out_path.exists(), "no output is written on error");
    line
}

#[test]
fn backward_without_grad_output_fails_cleanly() {
    let dir = common::TempDir::new("backward-nogo");
    let (_, t) = backward_problem(&dir, true);
    let path = dir.path("no-grad-output.safetensors");
    let refs: Vec<(&str, &Tensor)> = t.iter().filter(|(n, _)| *n != "grad_output").map(|(n, t)| (*n, t)).collect();
    save_tensors(&path, &refs, None).unwrap();
    backward_fails(&dir, &path, "gpu", &[s(&path), "`grad_output` not found", "found: bias, input, weight"]);
}

#[test]
fn backward_with_wrong_grad_output_size_fails_cleanly() {
    let dir = common::TempDir::new("backward-badgo");
    let (_, t) = backward_problem(&dir, true);
    let output_dims = backward_params()
        .resolve(named(&t, "input").shape(), named(&t, "weight").shape(), Some(&[6]))
        .unwrap()
        .output_dims();
    let mut wrong = output_dims.clone();
    wrong[3] -= 1;
    let bad = Tensor::uniform(wrong.clone(), -1.0, 1.0, 15).unwrap();
    let path = dir.path("bad-grad-output.safetensors");
    let refs: Vec<(&str, &Tensor)> =
        t.iter().map(|(n, t)| if *n == "grad_output" { (*n, &bad) } else { (*n, t) }).collect();
    save_tensors(&path, &refs, None).unwrap();
    let message =
        format!("grad_output must have the output's size {output_dims:?}, but got grad_output of size {wrong:?}");
    let gpu = backward_fails(&dir, &path, "gpu", &[&message]);
    // Validation comes before any GPU work: the CPU backend says the same.
    let cpu = backward_fails(&dir, &path, "cpu", &[&message]);
    assert_eq!(gpu, cpu);
}

// ---------------------------------------------------------------------------------------------------------
// verify and info
// ---------------------------------------------------------------------------------------------------------

#[test]
fn verify_a_shape_given_by_flags() {
    let args = [
        "verify",
        "--in-channels",
        "4",
        "--out-channels",
        "6",
        "--size",
        "5,7",
        "--kernel",
        "3,2",
        "--stride",
        "2,1",
        "--padding",
        "1,0",
        "--output-padding",
        "1,0",
        "--groups",
        "2",
        "--bias",
    ];
    let out = convt_ok(&args);
    let stdout = text(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("custom"))
        .unwrap_or_else(|| panic!("no result line\n{}", describe(&args, &out)));
    assert!(line.trim_end().ends_with(" ok"), "{}", describe(&args, &out));
    // Output [1, 6, (5-1)*2 - 2 + 2 + 1 + 1, (7-1) + 1 + 1].
    assert!(line.contains("[1, 6, 10, 8]"), "{}", describe(&args, &out));
}

#[test]
fn verify_a_suite_case_as_json() {
    let args = ["verify", "--case", "kb81", "--json"];
    let out = convt_ok(&args);
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "{}", describe(&args, &out));
    for line in lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}\n{}", describe(&args, &out)));
        assert_eq!(v["ok"], serde_json::Value::Bool(true), "{line}");
        assert_eq!(v["case"], "kb81", "{line}");
        assert_eq!(v["all_finite"], serde_json::Value::Bool(true), "{line}");
    }
}

#[test]
fn verify_an_unknown_case_fails_cleanly() {
    convt_fails(&["verify", "--case", "nosuch"], &["unknown case `nosuch`", "kb81"]);
}

#[test]
fn info_prints_the_chosen_adapter() {
    let out = convt_ok(&["info"]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("chosen: "), "{stdout}");
    assert!(stdout.contains("limits:"), "{stdout}");

    let out = convt_ok(&["info", "--json"]);
    let stdout = text(&out.stdout);
    let v: serde_json::Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    let chosen = v["chosen"].as_object().expect("a \"chosen\" object");
    assert!(chosen["name"].as_str().is_some_and(|n| !n.is_empty()), "{stdout}");
    assert!(v["adapters"].as_array().is_some_and(|a| !a.is_empty()), "{stdout}");
    assert!(v["limits"]["binding_limit_used"].as_u64().is_some_and(|b| b > 0), "{stdout}");
}

#[test]
#[cfg(unix)]
fn output_into_a_closed_pipe_ends_quietly() {
    // `convt info | head -1`: the reader is gone before convt writes (it opens the GPU first). The tool must end
    // without a panic message (as other Unix tools end: by SIGPIPE).
    use std::os::unix::process::ExitStatusExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_convt"));
    cmd.arg("info").env_remove("RUST_LOG").env("RUST_BACKTRACE", "1");
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        cmd.env("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    let mut child =
        cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("convt runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("convt ends");
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.status.success() || out.status.signal() == Some(13), "{:?}: {stderr}", out.status);
}

// ---------------------------------------------------------------------------------------------------------
// Precision
// ---------------------------------------------------------------------------------------------------------

#[test]
fn verify_at_precision_fast_names_the_kernel_and_meets_1e_3() {
    let args = [
        "verify",
        "--precision",
        "fast",
        "--in-channels",
        "32",
        "--out-channels",
        "32",
        "--size",
        "6,9",
        "--kernel",
        "3,2",
        "--stride",
        "2,1",
        "--bias",
        "--json",
    ];
    let out = convt_ok(&args);
    let line: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(line["precision"], "fast", "{}", describe(&args, &out));
    assert!(line["kernel"].as_str().is_some_and(|k| !k.is_empty()), "{}", describe(&args, &out));
    assert!(line["arithmetic"].as_str().is_some_and(|a| a.contains("f16") || a.contains("exact")));
    assert!(line["checks"][0]["rel_l2"].as_f64().unwrap() <= 1e-3, "{}", describe(&args, &out));
}

#[test]
fn forward_at_precision_fast_says_which_kernel_ran() {
    let tensors = fixture("dcgan_like.safetensors");
    let file = TensorFile::load(&tensors).unwrap();
    let dir = common::TempDir::new("cli-fast");
    let out_path = dir.path("out.safetensors");
    let flags = fixture_flags(&file);
    let mut args = vec!["forward", "--tensors", s(&tensors), "--out", s(&out_path)];
    args.extend(flags.iter().map(String::as_str));
    args.extend(["--precision", "fast"]);
    let out = convt_ok(&args);
    assert!(text(&out.stdout).contains("ran "), "{}", describe(&args, &out));
    let expected = file.get("output").unwrap();
    let s = rel_l2(&read_output(&out_path), &expected);
    assert!(s.rel_l2 <= 1e-3, "rel L2 {:e}\n{}", s.rel_l2, describe(&args, &out));
}

#[test]
fn bad_precision_values_are_usage_errors() {
    // A value clap rejects: its usage error (exit 2), naming the flag and the accepted values.
    let args = ["verify", "--precision", "f8"];
    let out = convt(&args);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&args, &out));
    assert_no_panic(&args, &out);
    assert!(
        text(&out.stderr).contains("--precision") && text(&out.stderr).contains("`fast`"),
        "{}",
        describe(&args, &out)
    );
    // (`--backward` takes `--precision fast` too: tests/backward_fast.rs runs `convt verify --backward --precision
    // fast`.)
}

#[test]
fn bench_backward_at_fast_on_f16_reports_each_gradient() {
    // `convt bench --backward --precision fast --dtype f16` times the backward and writes, for each case, the
    // kernels that ran for grad_input and grad_weight and each gradient's error against the float64 reference
    // under the names PyTorch's side uses (`grad_input_rel_l2`, ...), held to `convt verify`'s tolerance for
    // fast on f16 tensors (1e-3 plus f16's unit roundoff). With --profile, each kernel's share of a call.
    let dir = common::TempDir::new("cli-bench-backward-f16");
    let json_path = dir.path("bench.json");
    let args = [
        "bench",
        "--backward",
        "--precision",
        "fast",
        "--dtype",
        "f16",
        "--in-channels",
        "16",
        "--out-channels",
        "16",
        "--size",
        "6",
        "--kernel",
        "3",
        "--stride",
        "2",
        "--bias",
        "--batch",
        "2",
        "--runs",
        "2",
        "--warmup",
        "1",
        "--profile",
        "--json",
        s(&json_path),
    ];
    let out = convt_ok(&args);
    let said = text(&out.stdout);
    assert!(said.contains("grad_input") && said.contains("grad_weight"), "{}", describe(&args, &out));
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert_eq!(
        (doc["pass"].as_str(), doc["precision"].as_str(), doc["dtype"].as_str()),
        (Some("backward"), Some("fast"), Some("f16"))
    );
    let tolerance = doc["tolerance"].as_f64().expect("the tolerance");
    assert!((tolerance - (1e-3 + 2f64.powi(-11))).abs() < 1e-12, "{tolerance}");
    let case = &doc["cases"][0];
    let algorithm = case["algorithm"].as_str().expect("algorithm");
    for kernel in ["grad_input_kernel", "grad_weight_kernel"] {
        let name = case[kernel].as_str().unwrap_or_else(|| panic!("{kernel} in {case}"));
        assert!(!name.is_empty() && algorithm.contains(name), "{kernel} {name} not in {algorithm}");
    }
    for gradient in ["grad_input", "grad_weight", "grad_bias"] {
        let err = case[format!("{gradient}_rel_l2")].as_f64().unwrap_or_else(|| panic!("{gradient} error in {case}"));
        // Rounded to f16, the gradients cannot be exact; a correct kernel stays within the tolerance.
        assert!(err > 0.0 && err <= tolerance, "{gradient} rel L2 {err:e}, tolerance {tolerance:e}");
        assert!(case[format!("{gradient}_samples")].as_u64().is_some_and(|n| n > 0), "{case}");
    }
    assert_eq!(case["rel_l2"], case["grad_input_rel_l2"], "the row's error is grad_input's, as PyTorch's side has it");
    assert_eq!(case["within_tolerance"], serde_json::Value::Bool(true), "{case}");
    // Warmed up, each call finds its scratch idle in the pool: the timed calls allocate nothing.
    assert_eq!(case["buffers_created"].as_u64(), Some(0), "{case}");
    // The profile: every pipeline that ran, each with its dispatches per call and a time, the two gradients' GEMMs
    // among them, and each in the table.
    let profile = case["profile"].as_array().unwrap_or_else(|| panic!("profile in {case}"));
    for kernel in ["grad_input_kernel", "grad_weight_kernel"] {
        let name = case[kernel].as_str().unwrap().split(' ').next().unwrap();
        assert!(profile.iter().any(|p| p["kernel"].as_str().unwrap().starts_with(name)), "{name} in {profile:?}");
    }
    for p in profile {
        let ms = p["ms"].as_f64().unwrap_or(f64::NAN);
        assert!(ms.is_finite() && ms >= 0.0 && p["dispatches"].as_u64() >= Some(1), "{p}");
        let short = p["kernel"].as_str().unwrap().split(' ').next().unwrap();
        assert!(said.lines().any(|l| l.contains(" x ") && l.contains(short)), "{short} not in the table:\n{said}");
    }
    // Each gradient's time (its kernels and their preparation and rounding passes), and the two GEMMs' rates: each
    // does the forward's useful FLOPs, so time x rate is the same for both.
    let work = |g: &str| {
        let (ms, tflops) = (case[format!("{g}_ms")].as_f64(), case[format!("{g}_tflops")].as_f64());
        let (ms, tflops) = (ms.unwrap_or_else(|| panic!("{g}_ms in {case}")), tflops.expect("a rate"));
        assert!(ms > 0.0 && tflops > 0.0, "{case}");
        ms * tflops
    };
    let (gi, gw) = (work("grad_input"), work("grad_weight"));
    assert!((gi - gw).abs() <= 1e-9 * gi, "{gi} {gw}");
    assert!(case["grad_bias_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{case}");
    assert!(said.contains("grad_weight") && said.contains("TFLOP/s)"), "{said}");
}

#[test]
fn bench_train_times_a_training_step_and_checks_its_gradient() {
    // `convt bench --train` times a training step (the f32 master weight cast to the activations' dtype, forward,
    // backward, SGD step) on f16 activations at `fast`, on f32 ones exactly, and through a layer (`--layer`: its
    // forward, backward and SGD step) at `fast`, and writes each step's time, the
    // kernels of its three convolutions and grad_weight's error against the float64 reference, within `convt
    // verify`'s tolerance; the rows carry what scripts/side_by_side.py reads, and the buffers the timed steps
    // allocated (none: the pool holds a step's buffers). The f32 step with --profile: each kernel's time per step,
    // in the table and the JSON, and the dispatches' sum.
    let dir = common::TempDir::new("cli-bench-train");
    for (precision, dtype, layer) in [("fast", "f16", false), ("f32", "f32", false), ("fast", "f32", true)] {
        let json_path = dir.path(&format!("train-{dtype}-{layer}.json"));
        let mut args = vec![
            "bench",
            "--train",
            "--precision",
            precision,
            "--dtype",
            dtype,
            "--in-channels",
            "16",
            "--out-channels",
            "8",
            "--size",
            "5,7",
            "--kernel",
            "3",
            "--stride",
            "2",
            "--bias",
            "--batch",
            "2",
            "--runs",
            "3",
            "--warmup",
            "1",
            "--json",
            s(&json_path),
        ];
        if layer {
            args.push("--layer");
        }
        let profiled = precision == "f32";
        if profiled {
            args.push("--profile");
        }
        let out = convt_ok(&args);
        let said = text(&out.stdout);
        let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
        assert_eq!(
            (doc["pass"].as_str(), doc["precision"].as_str(), doc["dtype"].as_str(), doc["layer"].as_bool()),
            (Some("train"), Some(precision), Some(dtype), Some(layer))
        );
        assert_eq!(doc["cases"][0]["buffers_created"].as_u64(), Some(0), "{}", doc["cases"][0]);
        if profiled {
            let case = &doc["cases"][0];
            let profile = case["profile"].as_array().unwrap_or_else(|| panic!("profile in {case}"));
            // Each step's dispatches sum to at least any one pipeline's share of it, so their median does too.
            let busy = case["busy_ms"].as_f64().unwrap_or_else(|| panic!("busy_ms in {case}"));
            for p in profile {
                let ms = p["ms"].as_f64().unwrap();
                assert!(ms > 0.0 && ms <= busy * (1.0 + 1e-9), "{p} against busy_ms {busy}: {case}");
            }
            assert!(profile.iter().any(|p| p["kernel"].as_str().unwrap().starts_with("axpby")), "{case}");
            assert!(said.contains("dispatches") && said.contains("x axpby"), "{}", describe(&args, &out));
        }
        let tolerance = doc["tolerance"].as_f64().expect("the tolerance");
        let case = &doc["cases"][0];
        let times = case["times_ms"].as_array().expect("times");
        assert_eq!(times.len(), 3, "{case}");
        assert!(times.iter().all(|t| t.as_f64().is_some_and(|t| t > 0.0)), "{case}");
        assert!(case["ms"].as_f64().is_some_and(|ms| ms > 0.0) && case["tflops"].as_f64().is_some(), "{case}");
        for kernel in ["forward_kernel", "grad_input_kernel", "grad_weight_kernel"] {
            let name = case[kernel].as_str().unwrap_or_else(|| panic!("{kernel} in {case}"));
            assert!(
                !name.is_empty() && said.contains(name),
                "{kernel} {name} not in the table:\n{}",
                describe(&args, &out)
            );
        }
        let err = case["grad_weight_rel_l2"].as_f64().unwrap_or_else(|| panic!("grad_weight error in {case}"));
        assert!(err <= tolerance && case["rel_l2"] == case["grad_weight_rel_l2"], "{err:e} {tolerance:e} {case}");
        assert_eq!(case["within_tolerance"], serde_json::Value::Bool(true), "{case}");
        assert!(case["peak_mb"].as_f64().is_some_and(|mb| mb > 0.0), "{case}");
    }
    // A layer's step takes f32 activations only (its weight has its input's dtype): one line, before any GPU work.
    convt_fails(&["bench", "--train", "--layer", "--dtype", "f16", "--case", "dcgan"], &["--train --layer", "f16"]);
}

#[test]
fn tune_backward_keeps_both_gradients_kernels_and_bench_runs_them() {
    // `convt tune --backward` on a strided case times grad_input's kernels, then grad_weight's, and keeps each
    // winner under the case's grad_input and grad_weight keys (with `--gradient`, that gradient's alone);
    // `convt bench --backward` runs the kernels those keys name (rewritten here to ones the untuned choice is not,
    // so that a bench ignoring the cache fails) and says so.
    let dir = common::TempDir::new("cli-tune-backward");
    let cache = dir.path("tune.json");
    let small = ["--case", "dcgan", "--batch", "1", "--runs", "1"];
    let no_forcing = ["CONVT_STRATEGY", "CONVT_TUNE_CACHE"];
    let mut args = vec!["tune", "--backward", "--warmup", "1", "--cache", cache.to_str().unwrap()];
    args.extend(small);
    let out = convt_with_env(&args, &[], &no_forcing);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&args, &out));
    assert!(text(&out.stdout).contains("->"), "{}", describe(&args, &out));
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cache).unwrap()).unwrap();
    let entries = json["entries"].as_object_mut().unwrap();
    assert_eq!(entries.len(), 2, "{entries:?}");
    for (key, entry) in entries.iter_mut() {
        assert!(key.contains("N<=1 Cin512 Cout256"), "{key}");
        let winner = entry["strategy"].as_str().unwrap().to_string();
        if key.contains(" | grad_input f32 f32 | ") {
            assert!(winner == "gather" || winner.starts_with("gemm_"), "{winner}");
            entry["strategy"] = "gather".into();
        } else {
            assert!(key.contains(" | grad_weight f32 f32 | "), "{key}");
            assert!(winner.starts_with("grad_weight_"), "{winner}");
            entry["strategy"] = "grad_weight_16".into();
        }
    }

    // `--gradient weight` (or `input`) times that gradient's kernels only and keeps that one key.
    for (gradient, kept) in [("weight", " | grad_weight f32 f32 | "), ("input", " | grad_input f32 f32 | ")] {
        let only = dir.path(&format!("{gradient}-only.json"));
        let mut args =
            vec!["tune", "--backward", "--gradient", gradient, "--warmup", "1", "--cache", only.to_str().unwrap()];
        args.extend(small);
        let out = convt_with_env(&args, &[], &no_forcing);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&args, &out));
        let one: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&only).unwrap()).unwrap();
        let keys: Vec<&String> = one["entries"].as_object().unwrap().keys().collect();
        assert!(keys.len() == 1 && keys[0].contains(kept), "{gradient}: {keys:?}");
    }

    let mut args = vec!["bench", "--backward"];
    args.extend(small);
    let empty = dir.path("empty.json");
    let untuned = convt_with_env(&args, &[("CONVT_TUNE_CACHE", &empty)], &["CONVT_STRATEGY"]);
    assert_eq!(untuned.status.code(), Some(0), "{}", describe(&args, &untuned));
    let said = text(&untuned.stdout);
    assert!(said.contains("grad_input gemm_") && said.contains("grad_weight_64"), "{}", describe(&args, &untuned));
    std::fs::write(&cache, serde_json::to_string(&json).unwrap()).unwrap();
    let tuned = convt_with_env(&args, &[("CONVT_TUNE_CACHE", &cache)], &["CONVT_STRATEGY"]);
    assert_eq!(tuned.status.code(), Some(0), "{}", describe(&args, &tuned));
    let said = text(&tuned.stdout);
    assert!(said.contains("grad_input gather") && said.contains("grad_weight_16"), "{}", describe(&args, &tuned));
}

#[test]
fn tensor_name_flags_read_files_with_other_names() {
    // A state_dict-like file whose tensors are named otherwise: the flags map them, the results match the
    // default names' run, and a name the file lacks says which flag names another.
    let dir = common::TempDir::new("cli-names");
    let (path, tensors) = backward_problem(&dir, true);
    let renamed = dir.path("renamed.safetensors");
    let names = [("input", "x"), ("weight", "up.w"), ("bias", "up.b"), ("grad_output", "dy")];
    let refs: Vec<(&str, &Tensor)> =
        tensors.iter().map(|(n, t)| (names.iter().find(|(a, _)| a == n).unwrap().1, t)).collect();
    save_tensors(&renamed, &refs, None).unwrap();
    let flags = ["--input-name", "x", "--weight-name", "up.w", "--bias-name", "up.b", "--grad-output-name", "dy"];
    let (a, b) = (dir.path("a.safetensors"), dir.path("b.safetensors"));
    let mut args = vec!["backward", "--tensors", s(&renamed), "--out", s(&a), "--backend", "cpu"];
    args.extend(BACKWARD_FLAGS);
    args.extend(flags);
    convt_ok(&args);
    let mut plain = vec!["backward", "--tensors", s(&path), "--out", s(&b), "--backend", "cpu"];
    plain.extend(BACKWARD_FLAGS);
    convt_ok(&plain);
    let (a, b) = (TensorFile::load(&a).unwrap(), TensorFile::load(&b).unwrap());
    for name in ["grad_input", "grad_weight", "grad_bias"] {
        assert_eq!(a.get(name).unwrap().data(), b.get(name).unwrap().data(), "{name}");
    }
    let out = dir.path("c.safetensors");
    convt_fails(
        &["forward", "--tensors", s(&renamed), "--out", s(&out), "--backend", "cpu"],
        &["tensor `input` not found", "found: dy, up.b, up.w, x", "--input-name names another"],
    );
}

#[test]
fn results_are_on_stdout_and_errors_are_json_under_json() {
    let dir = common::TempDir::new("cli-stdout");
    let (path, _) = backward_problem(&dir, false);
    let out = dir.path("out.safetensors");
    let mut args = vec!["backward", "--tensors", s(&path), "--out", s(&out), "--backend", "cpu"];
    args.extend(BACKWARD_FLAGS);
    let run = convt_ok(&args);
    assert!(text(&run.stdout).contains("wrote grad_input [2, 4, 5, 6]"), "{}", describe(&args, &run));
    assert!(text(&run.stderr).trim().is_empty(), "{}", describe(&args, &run));
    // Under --json: one JSON object on stdout, for a result and for an error alike.
    args.push("--json");
    let run = convt_ok(&args);
    let v: serde_json::Value = serde_json::from_str(text(&run.stdout).trim()).unwrap();
    assert_eq!(v["wrote"]["grad_input"], serde_json::json!([2, 4, 5, 6]));
    let missing = dir.path("missing.safetensors");
    let args = ["forward", "--tensors", s(&missing), "--out", s(&out), "--json"];
    let failed = convt(&args);
    assert_eq!(failed.status.code(), Some(2), "{}", describe(&args, &failed));
    let v: serde_json::Value = serde_json::from_str(text(&failed.stdout).trim()).unwrap();
    let line = text(&failed.stderr);
    assert_eq!(format!("error: {}", v["error"].as_str().unwrap()), line.trim(), "{}", describe(&args, &failed));
}

#[test]
fn no_subcommand_writes_over_the_tuning_cache() {
    let dir = common::TempDir::new("cli-cache");
    let cache = dir.path("tune.json");
    std::fs::write(&cache, "{\"entries\": {}}").unwrap();
    let (path, _) = backward_problem(&dir, false);
    let env = [("CONVT_TUNE_CACHE", cache.as_path())];
    let mut args = vec!["backward", "--tensors", s(&path), "--out", s(&cache), "--backend", "cpu"];
    args.extend(BACKWARD_FLAGS);
    let out = convt_with_env(&args, &env, &["CONVT_STRATEGY"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&args, &out));
    assert!(text(&out.stderr).contains("is the tuning cache"), "{}", describe(&args, &out));
    let args = ["bench", "--case", "dcgan", "--batch", "1", "--runs", "1", "--json", s(&cache)];
    let out = convt_with_env(&args, &env, &["CONVT_STRATEGY"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&args, &out));
    assert!(text(&out.stderr).contains("--json"), "{}", describe(&args, &out));
    assert_eq!(std::fs::read_to_string(&cache).unwrap(), "{\"entries\": {}}", "the cache was changed");
}

#[test]
fn bench_json_without_a_file_prints_the_json_on_stdout() {
    let args = ["bench", "--case", "dcgan", "--batch", "1", "--runs", "1", "--warmup", "1", "--json"];
    let out = convt_ok(&args);
    let v: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).expect("one JSON document on stdout");
    assert_eq!(v["cases"][0]["case"], "dcgan", "{}", describe(&args, &out));
    assert!(text(&out.stderr).contains("algorithm"), "the table goes to stderr\n{}", describe(&args, &out));
}

#[test]
fn verify_says_when_it_scales_a_case_down() {
    let args = ["verify", "--case", "kb57", "--max-gflop", "0.05"];
    let out = convt_ok(&args);
    let info: serde_json::Value = serde_json::from_str(text(&convt_ok(&["info", "--json"]).stdout).trim()).unwrap();
    let software = info["chosen"]["device_type"] == "Cpu";
    assert_eq!(
        text(&out.stderr).contains("kb57: scaled down on this software adapter from N=8 1024x1024"),
        software,
        "{}",
        describe(&args, &out)
    );
}

#[test]
fn backward_refuses_a_forced_kernel_this_adapter_lacks_as_the_forward_does() {
    // A cooperative-matrix kernel forced through CONVT_STRATEGY on an adapter without cooperative matrices: one
    // clean line naming the kernel and the adapter from both subcommands, nothing written. Where the adapter has
    // them, both run.
    let info: serde_json::Value = serde_json::from_str(text(&convt_ok(&["info", "--json"]).stdout).trim()).unwrap();
    let has_coop = info["features"].as_array().unwrap().iter().any(|f| f == "EXPERIMENTAL_COOPERATIVE_MATRIX");
    let dir = common::TempDir::new("cli-forced");
    let input = Tensor::uniform(vec![1, 64, 6, 6], -1.0, 1.0, 1).unwrap();
    let weight = Tensor::uniform(vec![64, 64, 3, 3], -1.0, 1.0, 2).unwrap();
    let grad_output = Tensor::uniform(vec![1, 64, 8, 8], -1.0, 1.0, 3).unwrap();
    let path = dir.path("p.safetensors");
    save_tensors(&path, &[("input", &input), ("weight", &weight), ("grad_output", &grad_output)], None).unwrap();
    let out = dir.path("out.safetensors");
    let strategy = Path::new("coop_128x64x16_64x32");
    for pass in ["forward", "backward"] {
        let args = [pass, "--tensors", s(&path), "--out", s(&out), "--precision", "fast"];
        let run = convt_with_env(&args, &[("CONVT_STRATEGY", strategy)], &["CONVT_TUNE_CACHE"]);
        if has_coop {
            assert_eq!(run.status.code(), Some(0), "{}", describe(&args, &run));
            continue;
        }
        assert_eq!(run.status.code(), Some(2), "{}", describe(&args, &run));
        assert_no_panic(&args, &run);
        let stderr = text(&run.stderr);
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{}", describe(&args, &run));
        assert!(lines[0].starts_with("error: ") && lines[0].contains("coop_128x64x16_64x32"), "{}", lines[0]);
        assert!(lines[0].contains("cannot run on") && !lines[0].contains("Validation"), "{}", lines[0]);
        assert!(!out.exists(), "{pass} wrote its output");
    }
}
