//! Golden files written by real PyTorch (`scripts/make_fixtures.py`): both backends must reproduce PyTorch's
//! output and autograd's three gradients within 1e-5 relative L2, and the validation rules must accept and
//! reject what PyTorch does.

mod common;

use std::path::{Path, PathBuf};

use convt::io::TensorFile;
use convt::{ConvTranspose2dOptions, ErrorStats, Gradients, Tensor};

struct Fixture {
    name: String,
    input: Tensor,
    weight: Tensor,
    bias: Option<Tensor>,
    expected: Tensor,
    params: ConvTranspose2dOptions,
    /// A random gradient of the output and PyTorch autograd's gradients for it.
    grad_output: Tensor,
    expected_grads: Gradients,
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn load_fixtures() -> Vec<Fixture> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .expect("tests/fixtures exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 20, "expected the PyTorch fixtures in tests/fixtures, found {}", paths.len());
    paths
        .iter()
        .map(|path| {
            let file = TensorFile::load(path).expect("fixture loads");
            let meta: serde_json::Value =
                serde_json::from_str(&file.metadata()["params"]).expect("fixture metadata holds params JSON");
            let pair = |k: &str| -> [i64; 2] {
                let v = meta[k].as_array().expect("pair");
                [v[0].as_i64().expect("int"), v[1].as_i64().expect("int")]
            };
            let params = ConvTranspose2dOptions {
                stride: pair("stride"),
                padding: pair("padding"),
                output_padding: pair("output_padding"),
                dilation: pair("dilation"),
                groups: meta["groups"].as_i64().expect("groups"),
                ..Default::default()
            };
            Fixture {
                name: path.file_stem().unwrap().to_string_lossy().into_owned(),
                input: file.get("input").expect("input"),
                weight: file.get("weight").expect("weight"),
                bias: file.get_optional("bias").expect("bias reads"),
                expected: file.get("output").expect("output"),
                params,
                grad_output: file.get("grad_output").expect("grad_output"),
                expected_grads: Gradients {
                    grad_input: file.get("grad_input").expect("grad_input"),
                    grad_weight: file.get("grad_weight").expect("grad_weight"),
                    grad_bias: file.get_optional("grad_bias").expect("grad_bias reads"),
                },
            }
        })
        .collect()
}

fn stats(result: &Tensor, expected: &Tensor) -> ErrorStats {
    assert_eq!(result.shape(), expected.shape());
    let reference: Vec<f64> = expected.data().iter().map(|&v| v as f64).collect();
    ErrorStats::compare(result.data(), &reference)
}

#[test]
fn cpu_reference_matches_pytorch() {
    for f in load_fixtures() {
        let out = convt::cpu::conv_transpose2d(&f.input, &f.weight, f.bias.as_ref(), &f.params).unwrap();
        let s = stats(&out, &f.expected);
        assert!(s.rel_l2 <= common::F32_TOLERANCE, "{}: rel L2 {:e}", f.name, s.rel_l2);
    }
}

#[test]
fn every_gpu_strategy_matches_pytorch() {
    // Each kernel on every file in the full tier; on a few files, drawn afresh, in the fast tier.
    let fixtures = load_fixtures();
    let names: Vec<&str> = fixtures.iter().map(|f| f.name.as_str()).collect();
    for strategy in convt::gpu::Strategy::candidates() {
        let ctx = common::ctx_with_strategy(strategy);
        let chosen = common::sample(&names, 3);
        for f in fixtures.iter().filter(|f| chosen.contains(&f.name.as_str())) {
            let out = common::forward_host(ctx, &f.input, &f.weight, f.bias.as_ref(), &f.params).unwrap();
            let s = stats(&out, &f.expected);
            assert!(s.rel_l2 <= common::F32_TOLERANCE, "{} with {}: rel L2 {:e}", f.name, strategy.name(), s.rel_l2);
        }
    }
}

#[test]
fn gpu_matches_pytorch() {
    let ctx = common::ctx();
    for f in load_fixtures() {
        let out = common::forward_host(ctx, &f.input, &f.weight, f.bias.as_ref(), &f.params).unwrap();
        let s = stats(&out, &f.expected);
        assert!(s.rel_l2 <= common::F32_TOLERANCE, "{}: rel L2 {:e} ({} non-finite)", f.name, s.rel_l2, s.non_finite);
    }
}

#[test]
fn gpu_matches_pytorch_with_tensors_split_over_many_bindings() {
    // Bindings just large enough for the weight and one plane: inputs and outputs span many chunks, samples
    // are split between chunks, so sliced dispatches and accumulation across input-channel chunks run.
    let mut split = 0;
    for f in load_fixtures() {
        let plane = |t: &Tensor| t.shape()[t.shape().len() - 2..].iter().product::<usize>();
        let limit =
            4 * [f.weight.numel(), plane(&f.input), plane(&f.expected), f.bias.as_ref().map_or(1, |b| b.numel())]
                .into_iter()
                .max()
                .unwrap();
        let ctx = common::ctx_with_binding_limit(limit as u64, None);
        let x = convt::GpuTensor::upload(&ctx, &f.input).unwrap();
        let w = convt::GpuTensor::upload(&ctx, &f.weight).unwrap();
        let b = f.bias.as_ref().map(|b| convt::GpuTensor::upload(&ctx, b).unwrap());
        let y = convt::gpu::conv_transpose2d(&ctx, &x, &w, b.as_ref(), &f.params).unwrap();
        if x.chunks().len() > 1 || y.chunks().len() > 1 {
            split += 1;
        }
        let s = stats(&y.download(&ctx).unwrap(), &f.expected);
        assert!(s.rel_l2 <= common::F32_TOLERANCE, "{}: rel L2 {:e} ({} non-finite)", f.name, s.rel_l2, s.non_finite);
    }
    assert!(split >= 15, "only {split} fixtures were split over several bindings");
}

/// Each gradient of `got` against PyTorch's for fixture `f`.
fn check_gradients(f: &Fixture, got: &Gradients, backend: &str) {
    assert_eq!(got.grad_bias.is_some(), f.expected_grads.grad_bias.is_some(), "{}", f.name);
    let pairs = [
        ("grad_input", Some(&got.grad_input), Some(&f.expected_grads.grad_input)),
        ("grad_weight", Some(&got.grad_weight), Some(&f.expected_grads.grad_weight)),
        ("grad_bias", got.grad_bias.as_ref(), f.expected_grads.grad_bias.as_ref()),
    ];
    for (what, got, expected) in pairs {
        if let (Some(got), Some(expected)) = (got, expected) {
            let s = stats(got, expected);
            assert!(
                s.rel_l2 <= common::F32_TOLERANCE,
                "{} {what} on {backend}: rel L2 {:e} ({} non-finite)",
                f.name,
                s.rel_l2,
                s.non_finite
            );
        }
    }
}

#[test]
fn cpu_gradients_match_pytorch_autograd() {
    for f in load_fixtures() {
        let g = convt::cpu::conv_transpose2d_backward(&f.input, &f.weight, f.bias.as_ref(), &f.grad_output, &f.params)
            .unwrap();
        check_gradients(&f, &g, "cpu");
    }
}

#[test]
fn gpu_gradients_match_pytorch_autograd() {
    let ctx = common::ctx();
    for f in load_fixtures() {
        let g = common::backward_host(ctx, &f.input, &f.weight, f.bias.as_ref(), &f.grad_output, &f.params).unwrap();
        check_gradients(&f, &g, "gpu");
    }
}

#[test]
fn gpu_gradients_match_pytorch_autograd_with_tensors_split_over_many_bindings() {
    for f in load_fixtures() {
        let plane = |t: &Tensor| t.shape()[t.shape().len() - 2..].iter().product::<usize>();
        let limit = 4 * [f.weight.numel(), plane(&f.input), plane(&f.expected), f.expected.shape()[1]]
            .into_iter()
            .max()
            .unwrap();
        let ctx = common::ctx_with_binding_limit(limit as u64, None);
        let g = common::backward_host(&ctx, &f.input, &f.weight, f.bias.as_ref(), &f.grad_output, &f.params).unwrap();
        check_gradients(&f, &g, "gpu, split bindings");
    }
}

/// PyTorch's own verdicts on edge and invalid configurations (`torch_behaviour.json`): convt must accept what
/// PyTorch accepts, with the same output shape, and reject what it rejects.
#[test]
fn validation_agrees_with_pytorch() {
    let text = std::fs::read_to_string(fixtures_dir().join("torch_behaviour.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let pair = |v: &serde_json::Value| -> [i64; 2] {
        match v.as_array() {
            Some(a) => [a[0].as_i64().unwrap(), a[1].as_i64().unwrap()],
            None => [v.as_i64().unwrap(); 2],
        }
    };
    let dims = |v: &serde_json::Value| -> Vec<usize> {
        v.as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect()
    };
    let records = doc["functional"].as_array().unwrap();
    assert!(records.len() >= 20);
    for r in records {
        let params = ConvTranspose2dOptions {
            stride: pair(&r["stride"]),
            padding: pair(&r["padding"]),
            output_padding: pair(&r["output_padding"]),
            dilation: pair(&r["dilation"]),
            groups: r["groups"].as_i64().unwrap(),
            ..Default::default()
        };
        let bias = r["bias"].as_u64().map(|b| vec![b as usize]);
        let got = params.resolve(&dims(&r["input"]), &dims(&r["weight"]), bias.as_deref());
        let name = r["name"].as_str().unwrap();
        if r["ok"].as_bool().unwrap() {
            let shape = got.unwrap_or_else(|e| panic!("{name}: PyTorch accepts it, convt says: {e}"));
            assert_eq!(shape.output_dims_as_given(), dims(&r["output_shape"]), "{name}");
        } else {
            assert!(got.is_err(), "{name}: PyTorch rejects it ({}), convt accepts it", r["error"]);
        }
    }
}
