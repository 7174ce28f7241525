//! Every validation rule, one test each: the specific [`ConvtError`] variant (with its field values) and a
//! message that names the offending values. The rules are PyTorch's (`params.rs`, `layer.rs`), plus the
//! library's own (sizes that overflow, tensors too large for one GPU binding, safetensors files). Invalid
//! problems must fail the same way on the CPU reference and on the GPU path, before any GPU work.

// Expected output sizes are written out term by term, as in the formula.
#![allow(clippy::identity_op)]

mod common;

use std::path::{Path, PathBuf};

use convt::io::{save_tensors, TensorFile};
use convt::{
    ConvTranspose2d, ConvTranspose2dOptions, ConvtError, ErrorStats, GpuContext, GpuOptions, GpuTensor, Tensor,
};

// ---------------------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------------------

fn p() -> ConvTranspose2dOptions {
    ConvTranspose2dOptions::default()
}

/// A tensor of `shape` with reproducible values in [-1, 1).
fn rand(shape: &[usize], seed: u64) -> Tensor {
    Tensor::uniform(shape.to_vec(), -1.0, 1.0, seed).unwrap()
}

/// The error `resolve` gives for these sizes; panics if it accepts them.
fn resolve_err(
    params: ConvTranspose2dOptions,
    input: &[usize],
    weight: &[usize],
    bias: Option<&[usize]>,
) -> ConvtError {
    match params.resolve(input, weight, bias) {
        Ok(shape) => {
            panic!("{params:?} with input {input:?}, weight {weight:?}, bias {bias:?} was accepted: {shape:?}")
        }
        Err(e) => e,
    }
}

/// The error the CPU reference gives on tensors of these sizes; panics if it succeeds.
fn cpu_err(params: ConvTranspose2dOptions, input: &[usize], weight: &[usize], bias: Option<&[usize]>) -> ConvtError {
    let (x, w, b) = tensors(input, weight, bias);
    match convt::cpu::conv_transpose2d(&x, &w, b.as_ref(), &params) {
        Ok(out) => panic!("CPU accepted {params:?}: output {:?}", out.shape()),
        Err(e) => e,
    }
}

/// The error the GPU path gives on tensors of these sizes; panics if it succeeds.
fn gpu_err(
    ctx: &GpuContext,
    params: ConvTranspose2dOptions,
    input: &[usize],
    weight: &[usize],
    bias: Option<&[usize]>,
) -> ConvtError {
    let (x, w, b) = tensors(input, weight, bias);
    match common::forward_host(ctx, &x, &w, b.as_ref(), &params) {
        Ok(out) => panic!("GPU accepted {params:?}: output {:?}", out.shape()),
        Err(e) => e,
    }
}

fn tensors(input: &[usize], weight: &[usize], bias: Option<&[usize]>) -> (Tensor, Tensor, Option<Tensor>) {
    (rand(input, 1), rand(weight, 2), bias.map(|b| rand(b, 3)))
}

/// Asserts that the error's message contains every one of `parts`.
#[track_caller]
fn assert_message(e: &ConvtError, parts: &[&str]) {
    let msg = e.to_string();
    for part in parts {
        assert!(msg.contains(part), "message {msg:?} should mention {part:?} (error: {e:?})");
    }
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// A context whose storage bindings hold at most 64 bytes (16 floats).
fn tiny_binding_ctx() -> GpuContext {
    GpuContext::with_options(GpuOptions { max_binding_bytes: Some(64), ..GpuOptions::from_env().unwrap() })
        .unwrap_or_else(|e| panic!("the GPU tests need an adapter: {e}"))
}

const INPUT: &[usize] = &[1, 4, 5, 5];
const WEIGHT: &[usize] = &[4, 2, 3, 3];

// ---------------------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------------------

#[test]
fn non_positive_groups_is_rejected() {
    for groups in [0, -1] {
        let params = p().groups(groups);
        let e = params.validate().unwrap_err();
        assert!(matches!(e, ConvtError::NonPositiveGroups { groups: g } if g == groups), "{e:?}");
        assert_message(&e, &[&format!("groups = {groups}")]);

        let e = resolve_err(params, INPUT, WEIGHT, None);
        assert!(matches!(e, ConvtError::NonPositiveGroups { groups: g } if g == groups), "{e:?}");

        // The layer checks the options before dividing anything by groups.
        let options = ConvTranspose2dOptions { groups, ..Default::default() };
        let e = ConvTranspose2d::new(4, 4, 3, options, 0).unwrap_err();
        assert!(matches!(e, ConvtError::NonPositiveGroups { groups: g } if g == groups), "{e:?}");
    }
}

#[test]
fn stride_below_one_is_rejected_on_each_axis() {
    for stride in [[0, 1], [1, 0], [0, 0], [-1, 1], [1, -3], [-2, -2]] {
        let e = resolve_err(p().stride(stride), INPUT, WEIGHT, None);
        assert!(matches!(e, ConvtError::NonPositiveStride { stride: s } if s == stride), "{stride:?}: {e:?}");
        assert_message(&e, &["stride", &format!("{stride:?}")]);
    }
}

#[test]
fn dilation_below_one_is_rejected_on_each_axis() {
    for dilation in [[0, 1], [1, 0], [-1, 2], [2, -1]] {
        let e = resolve_err(p().dilation(dilation), INPUT, WEIGHT, None);
        assert!(matches!(e, ConvtError::NonPositiveDilation { dilation: d } if d == dilation), "{dilation:?}: {e:?}");
        assert_message(&e, &["dilation", &format!("{dilation:?}")]);
    }
}

#[test]
fn negative_padding_is_rejected_on_each_axis() {
    for padding in [[-1, 0], [0, -1], [-3, -2]] {
        let e = resolve_err(p().padding(padding), INPUT, WEIGHT, None);
        assert!(matches!(e, ConvtError::NegativePadding { padding: q } if q == padding), "{padding:?}: {e:?}");
        assert_message(&e, &["padding", &format!("{padding:?}")]);
    }
}

#[test]
fn negative_output_padding_is_rejected_on_each_axis() {
    for output_padding in [[-1, 0], [0, -1], [-2, -5]] {
        let params = p().stride(3).output_padding(output_padding);
        let e = resolve_err(params, INPUT, WEIGHT, None);
        assert!(
            matches!(e, ConvtError::NegativeOutputPadding { output_padding: q } if q == output_padding),
            "{output_padding:?}: {e:?}"
        );
        assert_message(&e, &["output_padding", &format!("{output_padding:?}")]);
    }
}

#[test]
fn output_padding_must_be_below_max_of_stride_and_dilation_on_each_axis() {
    // (output_padding, stride, dilation), each with one axis at or over the bound.
    let cases = [
        ([1, 0], [1, 1], [1, 1]),
        ([0, 1], [1, 1], [1, 1]),
        ([2, 0], [2, 1], [1, 1]), // == stride on H
        ([0, 1], [2, 1], [1, 1]), // == stride on W (H is fine)
        ([1, 3], [2, 2], [1, 3]), // == dilation on W, stride smaller
        ([4, 0], [3, 1], [2, 1]), // over both on H
    ];
    for (output_padding, stride, dilation) in cases {
        let params = p().output_padding(output_padding).stride(stride).dilation(dilation);
        let e = resolve_err(params, INPUT, WEIGHT, None);
        assert!(
            matches!(
                e,
                ConvtError::OutputPaddingTooLarge { output_padding: o, stride: s, dilation: d }
                    if o == output_padding && s == stride && d == dilation
            ),
            "{params:?}: {e:?}"
        );
        assert_message(
            &e,
            &[
                &format!("output_padding = {output_padding:?}"),
                &format!("stride = {stride:?}"),
                &format!("dilation = {dilation:?}"),
            ],
        );
    }
}

#[test]
fn output_padding_below_dilation_is_accepted_when_dilation_exceeds_stride() {
    // output_padding >= stride on both axes, but < dilation: PyTorch accepts this.
    let params = p().stride([1, 2]).dilation([3, 4]).output_padding([2, 3]).padding([1, 0]);
    params.validate().unwrap();
    let (input, weight) = ([2, 4, 5, 6], [4, 3, 3, 2]);
    let shape = params.resolve(&input, &weight, Some(&[3])).unwrap();
    // (in - 1) * s - 2p + d (k - 1) + op + 1
    let ho = (5 - 1) * 1 - 2 + 3 * (3 - 1) + 2 + 1;
    let wo = (6 - 1) * 2 + 4 * (2 - 1) + 3 + 1;
    assert_eq!(shape.output_dims_as_given(), vec![2, 3, ho, wo]);

    let (x, w, b) = tensors(&input, &weight, Some(&[3]));
    let cpu = convt::cpu::conv_transpose2d(&x, &w, b.as_ref(), &params).unwrap();
    let gpu = common::forward_host(common::ctx(), &x, &w, b.as_ref(), &params).unwrap();
    assert_eq!(cpu.shape(), &[2, 3, ho, wo]);
    assert_eq!(gpu.shape(), cpu.shape());
    let reference: Vec<f64> = cpu.data().iter().map(|&v| v as f64).collect();
    let s = ErrorStats::compare(gpu.data(), &reference);
    assert!(s.rel_l2 <= common::F32_TOLERANCE, "{s:?}");
}

// ---------------------------------------------------------------------------------------------------------
// Groups against channel counts
// ---------------------------------------------------------------------------------------------------------

#[test]
fn weight_in_channels_not_divisible_by_groups_is_rejected() {
    let params = p().groups(2);
    let e = resolve_err(params, &[1, 5, 4, 4], &[5, 2, 3, 3], None);
    assert!(matches!(e, ConvtError::InChannelsNotDivisible { in_channels: 5, groups: 2 }), "{e:?}");
    assert_message(&e, &["in_channels = 5", "groups = 2"]);

    let e = ConvTranspose2d::from_weights(rand(&[5, 2, 3, 3], 0), None, params).unwrap_err();
    assert!(matches!(e, ConvtError::InChannelsNotDivisible { in_channels: 5, groups: 2 }), "{e:?}");

    let options = ConvTranspose2dOptions { groups: 3, ..Default::default() };
    let e = ConvTranspose2d::new(4, 6, 3, options, 0).unwrap_err();
    assert!(matches!(e, ConvtError::InChannelsNotDivisible { in_channels: 4, groups: 3 }), "{e:?}");
    assert_message(&e, &["in_channels = 4", "groups = 3"]);
}

#[test]
fn layer_out_channels_not_divisible_by_groups_is_rejected() {
    let options = ConvTranspose2dOptions { groups: 2, ..Default::default() };
    let e = ConvTranspose2d::new(4, 5, 3, options, 0).unwrap_err();
    assert!(matches!(e, ConvtError::OutChannelsNotDivisible { out_channels: 5, groups: 2 }), "{e:?}");
    assert_message(&e, &["out_channels = 5", "groups = 2"]);

    // Divisible is fine: weight [Cin, Cout/groups, kH, kW].
    let layer = ConvTranspose2d::new(4, 6, (3, 2), options, 0).unwrap();
    assert_eq!(layer.weight().shape(), &[4, 3, 3, 2]);
    assert_eq!(layer.bias().unwrap().shape(), &[6]);
    assert_eq!(layer.out_channels(), 6);
}

// ---------------------------------------------------------------------------------------------------------
// Tensor ranks and sizes
// ---------------------------------------------------------------------------------------------------------

#[test]
fn input_rank_other_than_3_or_4_is_rejected() {
    for input in [vec![4, 5], vec![1, 4, 5, 5, 1]] {
        let e = resolve_err(p(), &input, WEIGHT, None);
        assert!(matches!(&e, ConvtError::InputRank { shape } if *shape == input), "{e:?}");
        assert_message(&e, &[&format!("{input:?}")]);
        let e = cpu_err(p(), &input, WEIGHT, None);
        assert!(matches!(&e, ConvtError::InputRank { shape } if *shape == input));

        let layer = ConvTranspose2d::from_weights(rand(WEIGHT, 0), None, p()).unwrap();
        let e = layer.forward_cpu(&rand(&input, 1)).unwrap_err();
        assert!(matches!(&e, ConvtError::InputRank { shape } if *shape == input));
    }
}

#[test]
fn weight_rank_other_than_4_is_rejected() {
    let weight = [4, 2, 3];
    let e = resolve_err(p(), INPUT, &weight, None);
    assert!(matches!(&e, ConvtError::WeightRank { shape } if shape == &weight), "{e:?}");
    assert_message(&e, &["[4, 2, 3]"]);

    let e = ConvTranspose2d::from_weights(rand(&weight, 0), None, p()).unwrap_err();
    assert!(matches!(&e, ConvtError::WeightRank { shape } if shape == &weight), "{e:?}");
}

#[test]
fn weight_with_a_zero_dimension_is_rejected() {
    for weight in [[0, 2, 3, 3], [4, 0, 3, 3], [4, 2, 0, 3], [4, 2, 3, 0]] {
        // The input's channel count matches the weight's, so only the empty weight is wrong.
        let input = [1, weight[0], 5, 5];
        let e = resolve_err(p(), &input, &weight, None);
        assert!(matches!(&e, ConvtError::EmptyWeight { shape } if shape == &weight), "{weight:?}: {e:?}");
        assert_message(&e, &[&format!("{weight:?}")]);

        let e = ConvTranspose2d::from_weights(Tensor::zeros(weight.to_vec()).unwrap(), None, p()).unwrap_err();
        assert!(matches!(&e, ConvtError::EmptyWeight { shape } if shape == &weight), "{weight:?}: {e:?}");
    }
}

#[test]
fn input_with_zero_height_or_width_is_rejected() {
    for input in [vec![1, 4, 0, 5], vec![2, 4, 5, 0], vec![4, 0, 0], vec![0, 4, 0, 3]] {
        let e = resolve_err(p(), &input, WEIGHT, None);
        assert!(matches!(&e, ConvtError::EmptyInput { shape } if *shape == input), "{input:?}: {e:?}");
        assert_message(&e, &[&format!("{input:?}")]);
    }
}

#[test]
fn empty_batch_is_accepted_on_cpu_and_gpu() {
    let params = p().stride(2).padding(1).output_padding(1);
    let (input, weight, bias) = ([0, 4, 5, 6], [4, 3, 3, 3], [3]);
    let shape = params.resolve(&input, &weight, Some(&bias)).unwrap();
    let expected = vec![0, 3, (5 - 1) * 2 - 2 + 2 + 1 + 1, (6 - 1) * 2 - 2 + 2 + 1 + 1];
    assert_eq!(shape.output_dims_as_given(), expected);

    let (x, w, b) = tensors(&input, &weight, Some(&bias));
    assert_eq!(x.numel(), 0);
    let cpu = convt::cpu::conv_transpose2d(&x, &w, b.as_ref(), &params).unwrap();
    assert_eq!(cpu.shape(), &expected[..]);
    assert!(cpu.data().is_empty());

    let ctx = GpuContext::new().unwrap_or_else(|e| panic!("the GPU tests need an adapter: {e}"));
    let gpu = common::forward_host(&ctx, &x, &w, b.as_ref(), &params).unwrap();
    assert_eq!(gpu.shape(), &expected[..]);
    assert!(gpu.data().is_empty());
}

#[test]
fn unbatched_input_gives_unbatched_output_equal_to_batched() {
    let params = p().stride([2, 1]).padding([1, 0]).output_padding([1, 0]).dilation([1, 2]).groups(2);
    let (weight, bias) = (rand(&[4, 3, 3, 2], 11), rand(&[6], 12));
    let unbatched = rand(&[4, 5, 6], 13);
    let batched = unbatched.clone().reshape(vec![1, 4, 5, 6]).unwrap();

    let shape = params.resolve(unbatched.shape(), weight.shape(), Some(bias.shape())).unwrap();
    assert!(shape.unbatched);
    let ho = (5 - 1) * 2 - 2 + (3 - 1) + 1 + 1;
    let wo = (6 - 1) + 2 * (2 - 1) + 1;
    assert_eq!(shape.output_dims_as_given(), vec![6, ho, wo]);

    let cpu_3d = convt::cpu::conv_transpose2d(&unbatched, &weight, Some(&bias), &params).unwrap();
    let cpu_4d = convt::cpu::conv_transpose2d(&batched, &weight, Some(&bias), &params).unwrap();
    assert_eq!(cpu_3d.shape(), &[6, ho, wo]);
    assert_eq!(cpu_4d.shape(), &[1, 6, ho, wo]);
    assert_eq!(cpu_3d.data(), cpu_4d.data());

    let ctx = common::ctx();
    let gpu_3d = common::forward_host(ctx, &unbatched, &weight, Some(&bias), &params).unwrap();
    let gpu_4d = common::forward_host(ctx, &batched, &weight, Some(&bias), &params).unwrap();
    assert_eq!(gpu_3d.shape(), &[6, ho, wo]);
    assert_eq!(gpu_4d.shape(), &[1, 6, ho, wo]);
    assert_eq!(gpu_3d.data(), gpu_4d.data());
    let reference: Vec<f64> = cpu_3d.data().iter().map(|&v| v as f64).collect();
    let s = ErrorStats::compare(gpu_3d.data(), &reference);
    assert!(s.rel_l2 <= common::F32_TOLERANCE, "{s:?}");
}

#[test]
fn input_channels_must_match_the_weight() {
    for input in [vec![1, 3, 5, 5], vec![3, 5, 5], vec![2, 8, 5, 5]] {
        let actual = input[input.len() - 3];
        let e = resolve_err(p(), &input, WEIGHT, None);
        assert!(
            matches!(
                &e,
                ConvtError::ChannelMismatch { input: i, weight: w, expected: 4, actual: a }
                    if *i == input && w == WEIGHT && *a == actual
            ),
            "{input:?}: {e:?}"
        );
        assert_message(
            &e,
            &[&format!("{input:?}"), &format!("{WEIGHT:?}"), &format!("with {actual} channels"), "have 4 channels"],
        );
    }
}

#[test]
fn bias_of_wrong_length_or_rank_is_rejected() {
    // weight [4, 2, 3, 3] with groups 2: out_channels = 4.
    let params = p().groups(2);
    let bad: [&[usize]; 4] = [&[2], &[5], &[4, 1], &[]];
    for bias in bad {
        let e = resolve_err(params, INPUT, WEIGHT, Some(bias));
        assert!(matches!(&e, ConvtError::BiasShape { expected: 4, shape } if shape == bias), "{bias:?}: {e:?}");
        assert_message(&e, &["4 elements", &format!("{bias:?}")]);

        let b = Tensor::zeros(bias.to_vec()).unwrap();
        let e = ConvTranspose2d::from_weights(rand(WEIGHT, 0), Some(b), params).unwrap_err();
        assert!(matches!(&e, ConvtError::BiasShape { expected: 4, shape } if shape == bias), "{bias:?}: {e:?}");
    }
    params.resolve(INPUT, WEIGHT, Some(&[4])).unwrap();
}

#[test]
fn non_positive_output_size_is_rejected() {
    // out = (in - 1) * s - 2p + d (k - 1) + op + 1 = 2 - 2p for in 2, k 1.
    let (input, weight) = ([1, 1, 2, 2], [1, 1, 1, 1]);
    let cases = [([1, 0], [0, 2]), ([0, 1], [2, 0]), ([2, 0], [-2, 2]), ([0, 3], [2, -4])];
    for (padding, [out_h, out_w]) in cases {
        let e = resolve_err(p().padding(padding), &input, &weight, None);
        assert!(
            matches!(
                e,
                ConvtError::OutputTooSmall { in_h: 2, in_w: 2, out_h: h, out_w: w } if h == out_h && w == out_w
            ),
            "{padding:?}: {e:?}"
        );
        assert_message(&e, &["(2 x 2)", &format!("({out_h} x {out_w})")]);
    }
    // One less padding gives an output of one row.
    let shape = p().padding([0, 0]).resolve(&[1, 1, 1, 1], &weight, None).unwrap();
    assert_eq!(shape.out_hw, [1, 1]);
}

#[test]
fn tensor_data_of_wrong_length_is_rejected() {
    for len in [5, 7, 0] {
        let e = Tensor::new(vec![2, 3], vec![0.0; len]).unwrap_err();
        assert!(
            matches!(&e, ConvtError::DataLength { shape, expected: 6, actual } if *shape == [2, 3] && *actual == len),
            "{e:?}"
        );
        assert_message(&e, &["[2, 3]", "6 elements", &format!("{len} were given")]);
    }
    let e = Tensor::zeros(vec![2, 3]).unwrap().reshape(vec![4, 2]).unwrap_err();
    assert!(matches!(e, ConvtError::DataLength { expected: 8, actual: 6, .. }), "{e:?}");
    assert_eq!(Tensor::new(vec![2, 3], vec![0.0; 6]).unwrap().numel(), 6);
}

#[test]
fn sizes_that_overflow_are_rejected() {
    // An input whose element count does not fit in usize.
    let input = [usize::MAX / 2, 4, 4, 4];
    let e = resolve_err(p(), &input, WEIGHT, None);
    assert!(matches!(&e, ConvtError::SizeOverflow { shape } if shape == &input), "{e:?}");
    assert_message(&e, &[&format!("{input:?}")]);

    // An output that overflows: stride i64::MAX.
    let e = resolve_err(p().stride([i64::MAX, 1]), &[1, 1, 2, 2], &[1, 1, 1, 1], None);
    assert!(matches!(e, ConvtError::SizeOverflow { .. }), "{e:?}");

    // out_channels = (Cout / groups) * groups overflows.
    let weight = [2, usize::MAX / 2 + 1, 1, 1];
    let e = resolve_err(p().groups(2), &[1, 2, 2, 2], &weight, None);
    assert!(matches!(&e, ConvtError::SizeOverflow { shape } if shape == &weight), "{e:?}");

    // Host tensors: the element count, or its byte count, overflows (no allocation is attempted).
    for shape in [vec![usize::MAX, 2], vec![usize::MAX / 2], vec![1 << 40, 1 << 40]] {
        let e = Tensor::zeros(shape.clone()).unwrap_err();
        assert!(matches!(&e, ConvtError::SizeOverflow { shape: s } if *s == shape), "{shape:?}: {e:?}");
        assert_message(&e, &[&format!("{shape:?}")]);
        let e = Tensor::new(shape.clone(), vec![]).unwrap_err();
        assert!(matches!(&e, ConvtError::SizeOverflow { shape: s } if *s == shape), "{e:?}");
        let e = Tensor::uniform(shape.clone(), 0.0, 1.0, 0).unwrap_err();
        assert!(matches!(&e, ConvtError::SizeOverflow { .. }), "{e:?}");
    }
}

#[test]
fn layer_with_a_zero_or_negative_kernel_is_rejected() {
    let o = ConvTranspose2dOptions::default();
    let e = ConvTranspose2d::new(4, 2, 0, o, 0).unwrap_err();
    assert!(matches!(&e, ConvtError::NonPositiveKernel { kernel } if *kernel == [0, 0]), "{e:?}");
    assert_message(&e, &["[0, 0]"]);

    let e = ConvTranspose2d::new(4, 2, (3, 0), o, 0).unwrap_err();
    assert!(matches!(&e, ConvtError::NonPositiveKernel { kernel } if *kernel == [3, 0]), "{e:?}");
    let e = ConvTranspose2d::new(4, 2, (-1, 3), o, 0).unwrap_err();
    assert!(matches!(&e, ConvtError::NonPositiveKernel { kernel } if *kernel == [-1, 3]), "{e:?}");
    assert_message(&e, &["[-1, 3]"]);

    // Zero channels give an empty weight as well.
    for (cin, cout, shape) in [(0, 2, [0, 2, 3, 3]), (4, 0, [4, 0, 3, 3])] {
        let e = ConvTranspose2d::new(cin, cout, 3, o, 0).unwrap_err();
        assert!(matches!(&e, ConvtError::EmptyWeight { shape: s } if *s == shape), "{e:?}");
    }
}

// ---------------------------------------------------------------------------------------------------------
// The GPU path validates the same way, before any GPU work
// ---------------------------------------------------------------------------------------------------------

#[test]
fn gpu_path_reports_the_same_errors_as_the_cpu_reference() {
    type Case = (ConvTranspose2dOptions, Vec<usize>, Vec<usize>, Option<Vec<usize>>);
    let cases: Vec<Case> = vec![
        (p().padding([0, -1]), INPUT.to_vec(), WEIGHT.to_vec(), None),
        (p().groups(0), INPUT.to_vec(), WEIGHT.to_vec(), None),
        (p().stride([1, 0]), INPUT.to_vec(), WEIGHT.to_vec(), None),
        (p().output_padding(1), INPUT.to_vec(), WEIGHT.to_vec(), None),
        (p(), vec![1, 3, 5, 5], WEIGHT.to_vec(), None),
        (p(), vec![4, 5], WEIGHT.to_vec(), None),
        (p(), INPUT.to_vec(), vec![4, 2, 3], None),
        (p(), INPUT.to_vec(), WEIGHT.to_vec(), Some(vec![3])),
        (p().groups(3), vec![1, 6, 5, 5], vec![6, 1, 3, 3], Some(vec![6])),
        (p(), vec![1, 4, 0, 5], WEIGHT.to_vec(), None),
        (p().padding(4), INPUT.to_vec(), WEIGHT.to_vec(), None),
    ];
    let ctx = common::ctx();
    // A context on which any real tensor here would be too large for one binding: validation comes first.
    let tiny = tiny_binding_ctx();
    for (params, input, weight, bias) in &cases {
        let cpu = cpu_err(*params, input, weight, bias.as_deref());
        let resolved = resolve_err(*params, input, weight, bias.as_deref());
        for gpu_ctx in [ctx, &tiny] {
            let gpu = gpu_err(gpu_ctx, *params, input, weight, bias.as_deref());
            assert_eq!(std::mem::discriminant(&gpu), std::mem::discriminant(&cpu), "GPU: {gpu:?}, CPU: {cpu:?}");
            assert_eq!(gpu.to_string(), cpu.to_string());
        }
        assert_eq!(resolved.to_string(), cpu.to_string());
    }

    // Through the layer too.
    let layer = ConvTranspose2d::from_weights(rand(WEIGHT, 0), None, p()).unwrap();
    let x = rand(&[1, 3, 5, 5], 1);
    let (gpu, cpu) = (layer.forward(ctx, &x).unwrap_err(), layer.forward_cpu(&x).unwrap_err());
    assert!(matches!(gpu, ConvtError::ChannelMismatch { expected: 4, actual: 3, .. }));
    assert_eq!(gpu.to_string(), cpu.to_string());
}

#[test]
fn plane_larger_than_the_binding_limit_is_too_large_for_binding() {
    let ctx = tiny_binding_ctx();
    assert_eq!(ctx.binding_limit(), 64);

    // A 5 x 5 input plane is 100 bytes.
    let x = rand(&[1, 1, 5, 5], 1);
    let e = GpuTensor::upload(&ctx, &x).expect_err("upload must fail");
    assert!(
        matches!(&e, ConvtError::TooLargeForBinding { bytes: 100, limit: 64, what } if what.contains("[1, 1, 5, 5]")),
        "{e:?}"
    );
    assert_message(&e, &["100 bytes", "at most 64 bytes", "[1, 1, 5, 5]"]);

    let w = rand(&[1, 1, 1, 1], 2);
    let e = common::forward_host(&ctx, &x, &w, None, &p()).unwrap_err();
    assert!(matches!(e, ConvtError::TooLargeForBinding { bytes: 100, limit: 64, .. }), "{e:?}");

    // Small input planes (16 bytes) and weight (32 bytes), but a 5 x 5 output plane with stride 3.
    let x = rand(&[2, 2, 2, 2], 3);
    let w = rand(&[2, 1, 2, 2], 4);
    let e = common::forward_host(&ctx, &x, &w, None, &p().stride(3)).unwrap_err();
    assert!(
        matches!(&e, ConvtError::TooLargeForBinding { bytes: 100, limit: 64, what } if what.contains("[2, 1, 5, 5]")),
        "{e:?}"
    );

    // Just at the limit (stride 2: 4 x 4 output planes, 64 bytes) it runs, split plane by plane.
    let out = common::forward_host(&ctx, &x, &w, None, &p().stride(2)).unwrap();
    assert_eq!(out.shape(), &[2, 1, 4, 4]);
    let cpu = convt::cpu::conv_transpose2d(&x, &w, None, &p().stride(2)).unwrap();
    let reference: Vec<f64> = cpu.data().iter().map(|&v| v as f64).collect();
    let s = ErrorStats::compare(out.data(), &reference);
    assert!(s.rel_l2 <= common::F32_TOLERANCE, "{s:?}");
}

#[test]
fn weight_larger_than_the_binding_limit_is_too_large_for_binding() {
    let ctx = tiny_binding_ctx();
    // Weight [4, 2, 3, 3]: 288 bytes in all, though each 3 x 3 plane (36 bytes) fits. Input planes are 16
    // bytes and output planes 64: only the weight, which must sit in one binding, is too large.
    let x = rand(&[1, 4, 2, 2], 1);
    let w = rand(WEIGHT, 2);
    let e = common::forward_host(&ctx, &x, &w, None, &p()).unwrap_err();
    assert!(
        matches!(&e, ConvtError::TooLargeForBinding { bytes: 288, limit: 64, what } if what.contains("weight")),
        "{e:?}"
    );
    assert_message(&e, &["weight", "[4, 2, 3, 3]", "288 bytes", "at most 64 bytes"]);

    // A bias of 20 floats (80 bytes) is too large as well (it is uploaded, and rejected, first).
    let w = rand(&[1, 20, 1, 1], 3);
    let b = rand(&[20], 4);
    let x = rand(&[1, 1, 2, 2], 5);
    let e = common::forward_host(&ctx, &x, &w, Some(&b), &p()).unwrap_err();
    assert!(
        matches!(&e, ConvtError::TooLargeForBinding { bytes: 80, limit: 64, what } if what.contains("size [20]")),
        "{e:?}"
    );
}

// ---------------------------------------------------------------------------------------------------------
// Safetensors files
// ---------------------------------------------------------------------------------------------------------

#[test]
fn integer_tensor_in_a_file_is_a_dtype_error_when_read() {
    use safetensors::tensor::{Dtype, TensorView};
    let dir = common::TempDir::new("dtype");
    let path = dir.path("i32.safetensors");
    let values: Vec<u8> = [1i32, 2, 3, 4].iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = TensorView::new(Dtype::I32, vec![2, 2], &values).unwrap();
    safetensors::serialize_to_file([("weight", view)], None, &path).unwrap();

    let e = TensorFile::load(&path).unwrap().get("weight").unwrap_err();
    assert!(
        matches!(&e, ConvtError::DType { path: p, name, dtype } if *p == path && name == "weight" && dtype == "I32"),
        "{e:?}"
    );
    assert_message(&e, &[&path.display().to_string(), "`weight`", "I32", "F32, F16, BF16; F64"]);
}

#[test]
fn missing_file_is_an_io_error() {
    let dir = common::TempDir::new("missing");
    let path = dir.path("does-not-exist.safetensors");
    let e = TensorFile::load(&path).unwrap_err();
    assert!(
        matches!(&e, ConvtError::Io { path: p, source } if *p == path && source.kind() == std::io::ErrorKind::NotFound),
        "{e:?}"
    );
    assert_message(&e, &[&path.display().to_string()]);
}

#[test]
fn garbage_or_truncated_file_is_a_tensor_file_error() {
    let dir = common::TempDir::new("garbage");
    // A valid file to truncate.
    let good = dir.path("good.safetensors");
    let t = rand(&[2, 3, 4, 4], 1);
    save_tensors(&good, &[("input", &t)], None).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    assert!(TensorFile::load(&good).is_ok());

    let files: [(&str, Vec<u8>); 5] = [
        ("text", b"this is not a safetensors file at all\n".to_vec()),
        ("empty", Vec::new()),
        ("short", vec![1, 2, 3]),
        ("truncated-data", bytes[..bytes.len() - 10].to_vec()),
        ("truncated-header", bytes[..20].to_vec()),
    ];
    for (name, content) in files {
        let path = dir.path(&format!("{name}.safetensors"));
        std::fs::write(&path, &content).unwrap();
        let e = TensorFile::load(&path).unwrap_err();
        assert!(matches!(&e, ConvtError::TensorFile { path: p, .. } if *p == path), "{name}: {e:?}");
        assert_message(&e, &[&path.display().to_string(), "not a valid safetensors file"]);
    }
}

#[test]
fn missing_tensor_name_is_a_missing_tensor_error() {
    let path = fixture("everything.safetensors");
    let file = TensorFile::load(&path).unwrap();
    assert!(file.get("weight").is_ok());
    let e = file.get("nosuch").unwrap_err();
    const FOUND: &str = "bias, grad_bias, grad_input, grad_output, grad_weight, input, output, weight";
    assert!(
        matches!(&e, ConvtError::MissingTensor { path: p, name, found } if *p == path && name == "nosuch" && found == FOUND),
        "{e:?}"
    );
    assert_message(&e, &[&path.display().to_string(), "`nosuch`", FOUND]);
}
