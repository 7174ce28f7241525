//! The layer's parameters and gradients: PyTorch state_dict interchange through safetensors (a layer exported
//! by real PyTorch, `scripts/state_dict.py export`), strict loading, and the layer-level backward and SGD step.

mod common;

use std::path::{Path, PathBuf};

use convt::io::{save_tensors, TensorFile};
use convt::{ConvTranspose2d, ConvTranspose2dOptions, ConvtError, ErrorStats, GpuTensor, LayerConfig, Tensor};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state_dict").join(name)
}

fn rel_l2(got: &Tensor, expected: &Tensor) -> f64 {
    assert_eq!(got.shape(), expected.shape());
    let reference: Vec<f64> = expected.data().iter().map(|&v| v as f64).collect();
    ErrorStats::compare(got.data(), &reference).rel_l2
}

/// The configuration PyTorch's layer was built with, from the metadata of the exported io file.
fn torch_config() -> LayerConfig {
    let io = TensorFile::load(fixture("layer_io.safetensors")).unwrap();
    serde_json::from_str(&io.metadata()["config"]).unwrap()
}

fn options_of(c: &LayerConfig) -> ConvTranspose2dOptions {
    ConvTranspose2dOptions {
        stride: c.stride,
        padding: c.padding,
        output_padding: c.output_padding,
        groups: c.groups,
        bias: c.bias,
        dilation: c.dilation,
        ..Default::default()
    }
}

#[test]
fn a_pytorch_state_dict_loads_and_gives_pytorchs_output() {
    let config = torch_config();
    let layer = ConvTranspose2d::from_state_dict(fixture("layer.safetensors"), options_of(&config)).unwrap();
    assert_eq!(layer.config(), config, "channels and kernel size read from the weight");
    let io = TensorFile::load(fixture("layer_io.safetensors")).unwrap();
    let (x, y) = (&io.get("input").unwrap(), &io.get("output").unwrap());
    assert!(rel_l2(&layer.forward_cpu(x).unwrap(), y) <= common::F32_TOLERANCE);
    assert!(rel_l2(&layer.forward(common::ctx(), x).unwrap(), y) <= common::F32_TOLERANCE);
}

#[test]
fn save_then_load_round_trips_exactly_with_pytorchs_names_and_config() {
    let dir = common::TempDir::new("state-dict");
    let config = torch_config();
    let layer = ConvTranspose2d::from_state_dict(fixture("layer.safetensors"), options_of(&config)).unwrap();
    let path = dir.path("saved.safetensors");
    layer.save_state_dict(&path).unwrap();
    let file = TensorFile::load(&path).unwrap();
    assert_eq!(file.names().collect::<Vec<_>>(), ["bias", "weight"], "exactly PyTorch's keys");
    // scripts/state_dict.py rebuilds nn.ConvTranspose2d from this JSON: it must be PyTorch's own arguments.
    let saved: LayerConfig = serde_json::from_str(&file.metadata()["convt"]).unwrap();
    assert_eq!(saved, config);
    let reloaded = ConvTranspose2d::from_state_dict(&path, options_of(&config)).unwrap();
    assert_eq!(reloaded.weight(), layer.weight());
    assert_eq!(reloaded.bias(), layer.bias());

    // load_state_dict into a freshly initialised layer of the same shape replaces its parameters.
    let mut fresh = ConvTranspose2d::new(
        config.in_channels,
        config.out_channels,
        (config.kernel_size[0] as i64, config.kernel_size[1] as i64),
        options_of(&config),
        99,
    )
    .unwrap();
    assert_ne!(fresh.weight(), layer.weight());
    fresh.load_state_dict(&path).unwrap();
    assert_eq!(fresh.weight(), layer.weight());
    assert_eq!(fresh.bias(), layer.bias());
}

#[test]
fn loading_is_strict_like_pytorch() {
    let dir = common::TempDir::new("state-dict-strict");
    let w = Tensor::uniform(vec![4, 3, 3, 3], -1.0, 1.0, 1).unwrap();
    let b = Tensor::uniform(vec![3], -1.0, 1.0, 2).unwrap();
    let save = |name: &str, tensors: &[(&str, &Tensor)]| {
        let p = dir.path(name);
        save_tensors(&p, tensors, None).unwrap();
        p
    };
    let with_bias = ConvTranspose2dOptions::default();
    let without_bias = ConvTranspose2dOptions { bias: false, ..Default::default() };

    let e = ConvTranspose2d::from_state_dict(save("no_weight.safetensors", &[("bias", &b)]), with_bias).unwrap_err();
    assert!(matches!(&e, ConvtError::MissingTensor { name, .. } if name == "weight"), "{e}");

    let extra = save("extra.safetensors", &[("weight", &w), ("bias", &b), ("running_mean", &b)]);
    let e = ConvTranspose2d::from_state_dict(&extra, with_bias).unwrap_err();
    assert!(matches!(e, ConvtError::StateDict { .. }) && e.to_string().contains("running_mean"), "{e}");

    let both = save("both.safetensors", &[("weight", &w), ("bias", &b)]);
    let e = ConvTranspose2d::from_state_dict(&both, without_bias).unwrap_err();
    assert!(matches!(e, ConvtError::StateDict { .. }) && e.to_string().contains("bias = false"), "{e}");
    let only_w = save("only_w.safetensors", &[("weight", &w)]);
    let e = ConvTranspose2d::from_state_dict(&only_w, with_bias).unwrap_err();
    assert!(matches!(e, ConvtError::StateDict { .. }) && e.to_string().contains("missing"), "{e}");

    let short_bias = Tensor::uniform(vec![2], -1.0, 1.0, 3).unwrap();
    let e =
        ConvTranspose2d::from_state_dict(save("b2.safetensors", &[("weight", &w), ("bias", &short_bias)]), with_bias)
            .unwrap_err();
    assert!(matches!(e, ConvtError::BiasShape { .. }), "{e}");

    let rank3 = Tensor::uniform(vec![4, 3, 3], -1.0, 1.0, 4).unwrap();
    let e = ConvTranspose2d::from_state_dict(save("r3.safetensors", &[("weight", &rank3)]), without_bias).unwrap_err();
    assert!(matches!(e, ConvtError::StateDict { .. }), "{e}");

    // load_state_dict keeps the layer's shape: a different kernel size is refused and the layer left as it was.
    let mut layer = ConvTranspose2d::new(4, 3, 2, with_bias, 5).unwrap();
    let before = layer.weight().clone();
    let e = layer.load_state_dict(&both).unwrap_err();
    assert!(matches!(e, ConvtError::StateDict { .. }) && e.to_string().contains("[4, 3, 2, 2]"), "{e}");
    assert_eq!(layer.weight(), &before);
}

#[test]
fn one_layer_of_a_model_state_dict_loads_by_prefix() {
    let dir = common::TempDir::new("state-dict-prefix");
    let w = Tensor::uniform(vec![6, 2, 4, 4], -1.0, 1.0, 1).unwrap();
    let b = Tensor::uniform(vec![4], -1.0, 1.0, 2).unwrap();
    let other = Tensor::uniform(vec![5], -1.0, 1.0, 3).unwrap();
    let path = dir.path("model.safetensors");
    save_tensors(&path, &[("decoder.0.weight", &w), ("decoder.0.bias", &b), ("encoder.0.weight", &other)], None)
        .unwrap();
    let options = ConvTranspose2dOptions::default().stride(2).padding(1).groups(2);
    let layer = ConvTranspose2d::from_state_dict_prefixed(&path, "decoder.0.", options).unwrap();
    assert_eq!(layer.weight(), &w);
    assert_eq!(layer.bias(), Some(&b));
    assert_eq!((layer.in_channels(), layer.out_channels()), (6, 4));
}

/// A model's state_dict as PyTorch saves it: BatchNorm's int64 counter, an f64 layer, f16 layers. One layer loads
/// by prefix (the library and the CLI's --weights/--prefix), converted from its dtype; the other tensors are
/// ignored; a tensor of another dtype is an error only when it is the one asked for.
#[test]
fn a_model_checkpoint_of_mixed_dtypes_gives_one_layer_by_prefix() {
    use safetensors::tensor::{Dtype, TensorView};
    let dir = common::TempDir::new("model-checkpoint");
    let w = Tensor::uniform(vec![6, 2, 3, 3], -1.0, 1.0, common::fresh_seed()).unwrap();
    let b = Tensor::uniform(vec![4], -1.0, 1.0, common::fresh_seed()).unwrap();
    let f64_bytes = |t: &Tensor| t.data().iter().flat_map(|&v| f64::from(v).to_le_bytes()).collect::<Vec<u8>>();
    let half_bytes =
        |t: &Tensor| t.data().iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect::<Vec<u8>>();
    let (wd, bd) = (f64_bytes(&w), f64_bytes(&b));
    let other = Tensor::uniform(vec![8, 6, 3, 3], -1.0, 1.0, 5).unwrap();
    let oh = half_bytes(&other);
    let counter = 11i64.to_le_bytes();
    let views = vec![
        ("decoder.3.weight", TensorView::new(Dtype::F64, vec![6, 2, 3, 3], &wd).unwrap()),
        ("decoder.3.bias", TensorView::new(Dtype::F64, vec![4], &bd).unwrap()),
        ("decoder.1.weight", TensorView::new(Dtype::F16, vec![8, 6, 3, 3], &oh).unwrap()),
        ("decoder.2.num_batches_tracked", TensorView::new(Dtype::I64, vec![], &counter).unwrap()),
    ];
    let model = dir.path("model.safetensors");
    std::fs::write(&model, safetensors::serialize(views, None).unwrap()).unwrap();
    let options = ConvTranspose2dOptions::default().stride(2).padding(1).groups(2);
    let layer = ConvTranspose2d::from_state_dict_prefixed(&model, "decoder.3.", options).unwrap();
    // f64 values of f32 ones read back exactly.
    assert_eq!(layer.weight(), &w);
    assert_eq!(layer.bias(), Some(&b));
    let e = ConvTranspose2d::from_state_dict_prefixed(&model, "decoder.2.", options).unwrap_err();
    assert!(e.to_string().contains("`decoder.2.weight`"), "{e}");

    // The CLI: the input from one file, the layer from the model by prefix.
    let x = Tensor::uniform(vec![2, 6, 5, 4], -1.0, 1.0, common::fresh_seed()).unwrap();
    let inputs = dir.path("x.safetensors");
    save_tensors(&inputs, &[("input", &x)], None).unwrap();
    let out = dir.path("y.safetensors");
    let (i, m, o) = (inputs.to_str().unwrap(), model.to_str().unwrap(), out.to_str().unwrap());
    let flags = ["--stride", "2", "--padding", "1", "--groups", "2"];
    let mut args = vec!["forward", "--tensors", i, "--weights", m, "--prefix", "decoder.3.", "--out", o];
    args.extend(flags);
    common::cli::convt_ok(&args);
    let got = TensorFile::load(&out).unwrap().get("output").unwrap();
    let want = layer.forward_cpu(&x).unwrap();
    assert!(rel_l2(&got, &want) <= common::F32_TOLERANCE, "{}", rel_l2(&got, &want));
    // A prefix the model lacks names what it holds; the output is not written.
    std::fs::remove_file(&out).unwrap();
    let mut args = vec!["forward", "--tensors", i, "--weights", m, "--prefix", "encoder.", "--out", o];
    args.extend(flags);
    let line = common::cli::convt_fails(&args, &["encoder.weight", "decoder.3.weight"]);
    assert!(line.contains("decoder.2.num_batches_tracked"), "{line}");
    assert!(!out.exists());
    // --weights may not be the output.
    let mut args = vec!["forward", "--tensors", i, "--weights", m, "--prefix", "decoder.3.", "--out", m];
    args.extend(flags);
    common::cli::convt_fails(&args, &[]);
    assert!(TensorFile::load(&model).unwrap().contains("decoder.3.weight"), "the model file is untouched");
}

#[test]
fn layer_backward_on_gpu_matches_cpu_and_sgd_steps_the_parameters() {
    let ctx = common::ctx();
    let options = ConvTranspose2dOptions {
        stride: [2, 1],
        padding: [1, 0],
        output_padding: [1, 0],
        groups: 2,
        ..Default::default()
    };
    let layer = ConvTranspose2d::new(4, 6, (3, 2), options, common::fresh_seed()).unwrap();
    let x = Tensor::uniform(vec![2, 4, 5, 4], -1.0, 1.0, common::fresh_seed()).unwrap();
    let y = layer.forward_cpu(&x).unwrap();
    let go = Tensor::uniform(y.shape().to_vec(), -1.0, 1.0, common::fresh_seed()).unwrap();
    let cpu = layer.backward_cpu(&x, &go).unwrap();
    let gpu = layer.backward(ctx, &x, &go).unwrap();
    assert!(rel_l2(&gpu.grad_input, &cpu.grad_input) <= common::F32_TOLERANCE);
    assert!(rel_l2(&gpu.grad_weight, &cpu.grad_weight) <= common::F32_TOLERANCE);
    assert!(rel_l2(gpu.grad_bias.as_ref().unwrap(), cpu.grad_bias.as_ref().unwrap()) <= common::F32_TOLERANCE);

    // The GPU-resident layer: backward, then w -= lr * gw and b -= lr * gb, all on the GPU.
    let lr = 0.25;
    let mut resident = layer.to_gpu(ctx).unwrap();
    let grads = resident.backward(&GpuTensor::upload(ctx, &x).unwrap(), &GpuTensor::upload(ctx, &go).unwrap()).unwrap();
    resident.sgd_step(&grads, lr).unwrap();
    let stepped = resident.to_host().unwrap();
    let expect = |p: &Tensor, g: &Tensor| {
        Tensor::new(p.shape().to_vec(), p.data().iter().zip(g.data()).map(|(p, g)| p - lr * g).collect()).unwrap()
    };
    let w_expected = expect(layer.weight(), &cpu.grad_weight);
    let b_expected = expect(layer.bias().unwrap(), cpu.grad_bias.as_ref().unwrap());
    assert!(rel_l2(stepped.weight(), &w_expected) <= common::F32_TOLERANCE);
    assert!(rel_l2(stepped.bias().unwrap(), &b_expected) <= common::F32_TOLERANCE);
}
