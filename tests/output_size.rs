//! PyTorch's `forward(input, output_size=...)`: `ConvTranspose2dOptions::for_output_size`, the layers'
//! `forward_with_output_size` and the CLI's `--output-size`. Every reachable size (from the output without padding
//! to stride - 1 more, per axis) gives an output of that size equal to the float64 reference with the matching
//! output_padding; every other size, and an output_size of the wrong length, is refused with PyTorch's message.

mod common;

use common::cli::{convt_fails, convt_ok};
use convt::io::{save_tensors, TensorFile};
use convt::{ConvTranspose2d, ConvTranspose2dOptions, ConvtError, ErrorStats, GpuTensor, Tensor};
use proptest::prelude::*;

/// The output size without output padding, per axis, from PyTorch's formula.
fn min_size(o: &ConvTranspose2dOptions, input_hw: [usize; 2], kernel: [usize; 2]) -> [i64; 2] {
    [0, 1]
        .map(|a| (input_hw[a] as i64 - 1) * o.stride[a] - 2 * o.padding[a] + o.dilation[a] * (kernel[a] as i64 - 1) + 1)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(200), ..ProptestConfig::default() })]

    /// Sizes in range set output_padding to their distance from the minimum (whatever the options held) and
    /// resolve to that output; sizes out of range are refused naming the range.
    #[test]
    fn output_size_sets_output_padding_as_pytorch_does(
        stride in (1i64..5, 1i64..5),
        padding in (0i64..3, 0i64..3),
        dilation in (1i64..4, 1i64..4),
        hw in (1usize..9, 1usize..9),
        kernel in (1usize..5, 1usize..5),
        extra in (-2i64..6, -2i64..6),
        batched in any::<bool>(),
    ) {
        let options = ConvTranspose2dOptions::default()
            .stride([stride.0, stride.1])
            .padding([padding.0, padding.1])
            .dilation([dilation.0, dilation.1]);
        let input: Vec<usize> = if batched { vec![2, 3, hw.0, hw.1] } else { vec![3, hw.0, hw.1] };
        let weight = [3, 2, kernel.0, kernel.1];
        let min = min_size(&options, [hw.0, hw.1], [kernel.0, kernel.1]);
        let want = [min[0] + extra.0, min[1] + extra.1];
        prop_assume!(want[0] >= 0 && want[1] >= 0);
        let size = [want[0] as usize, want[1] as usize];
        let reachable = (0..2).all(|a| [extra.0, extra.1][a] >= 0 && [extra.0, extra.1][a] < [stride.0, stride.1][a]);
        match options.for_output_size(&input, &weight, &size) {
            Ok(o) => {
                prop_assert!(reachable, "{size:?} from {min:?}");
                prop_assert_eq!(o.output_padding, [extra.0, extra.1]);
                prop_assert_eq!(o.stride, options.stride);
                // A reachable size may still be an empty output (min < 1): resolve refuses it as PyTorch does.
                if let Ok(shape) = o.resolve(&input, &weight, None) {
                    prop_assert_eq!(shape.out_hw, size);
                } else {
                    prop_assert!(min[0] < 1 || min[1] < 1);
                }
            }
            Err(e) => {
                prop_assert!(!reachable, "{size:?} from {min:?}: {e}");
                let max = [min[0] + stride.0 - 1, min[1] + stride.1 - 1];
                prop_assert_eq!(
                    e.to_string(),
                    format!(
                        "requested an output size of {size:?}, but valid sizes range from {min:?} to {max:?} (for an \
                         input of {:?})",
                        [hw.0, hw.1]
                    )
                );
            }
        }
    }
}

#[test]
fn output_size_takes_two_or_all_dimensions_and_replaces_output_padding() {
    let options = ConvTranspose2dOptions::default().stride(2).padding(1).output_padding(1);
    let (input, weight) = ([1, 4, 5, 5], [4, 2, 3, 3]);
    // PyTorch: ConvTranspose2d(4, 2, 3, stride=2, padding=1)(x, output_size=[9, 10]) on a 5 x 5 input.
    let o = options.for_output_size(&input, &weight, &[9, 10]).unwrap();
    assert_eq!(o.output_padding, [0, 1]);
    assert_eq!(options.for_output_size(&input, &weight, &[1, 2, 9, 10]).unwrap(), o);
    let e = options.for_output_size(&input, &weight, &[2, 9, 10]).unwrap_err();
    assert!(matches!(e, ConvtError::OutputSizeLength { input_dims: 4, got: 3 }), "{e:?}");
    assert_eq!(e.to_string(), "ConvTranspose2D: for 4D input, output_size must have 2 or 4 elements (got 3)");
    let e = options.for_output_size(&[4, 5, 5], &weight, &[1, 2, 9, 10]).unwrap_err();
    assert_eq!(e.to_string(), "ConvTranspose2D: for 3D input, output_size must have 2 or 3 elements (got 4)");
    let e = options.for_output_size(&input, &weight, &[11, 9]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "requested an output size of [11, 9], but valid sizes range from [9, 9] to [10, 10] (for an input of [5, 5])"
    );
    // Invalid options are refused first, as without output_size.
    let e = ConvTranspose2dOptions::default().stride(0).for_output_size(&input, &weight, &[9, 9]).unwrap_err();
    assert!(matches!(e, ConvtError::NonPositiveStride { .. }), "{e:?}");
}

/// The layers' forward_with_output_size on the GPU (outputs poisoned) and the CPU against the float64 reference
/// with the output_padding that size stands for.
#[test]
fn layers_forward_to_the_requested_size() {
    let ctx = common::ctx();
    let options = ConvTranspose2dOptions::default().stride([3, 2]).padding(1).dilation([1, 2]);
    let layer = ConvTranspose2d::new(6, 4, [3, 2], options, common::fresh_seed()).unwrap();
    let x = Tensor::uniform(vec![2, 6, 7, 5], -1.0, 1.0, common::fresh_seed()).unwrap();
    let gpu_layer = layer.to_gpu(ctx).unwrap();
    let xg = GpuTensor::upload(ctx, &x).unwrap();
    let min = min_size(&options, [7, 5], [3, 2]);
    for extra in [[0, 0], [2, 1], [1, 0]] {
        let size = [(min[0] + extra[0]) as usize, (min[1] + extra[1]) as usize];
        let padded = ConvTranspose2dOptions { output_padding: extra.map(i64::from), ..options };
        let shape = padded.resolve(x.shape(), layer.weight().shape(), layer.bias().map(|b| b.shape())).unwrap();
        let want =
            convt::cpu::conv_transpose2d_f64(&shape, x.data(), layer.weight().data(), layer.bias().map(|b| b.data()))
                .unwrap();
        let outputs = [
            ("host layer on the GPU", layer.forward_with_output_size(ctx, &x, &size).unwrap()),
            ("GPU layer", gpu_layer.forward_with_output_size(&xg, &size).unwrap().download(ctx).unwrap()),
            ("CPU reference", layer.forward_cpu_with_output_size(&x, &size).unwrap()),
        ];
        for (what, got) in outputs {
            assert_eq!(got.shape(), [2, 4, size[0], size[1]], "{what} {size:?}");
            let s = ErrorStats::compare(got.data(), &want);
            assert!(s.non_finite == 0 && s.rel_l2 <= common::F32_TOLERANCE, "{what} {size:?}: {s:?}");
        }
    }
    let e = gpu_layer.forward_with_output_size(&xg, &[min[0] as usize + 3, min[1] as usize]).unwrap_err();
    assert!(matches!(e, ConvtError::OutputSizeUnreachable { .. }), "{e:?}");
}

#[test]
fn the_cli_takes_output_size() {
    let dir = common::TempDir::new("output-size");
    let tensors = dir.path("problem.safetensors");
    let x = Tensor::uniform(vec![1, 3, 4, 6], -1.0, 1.0, common::fresh_seed()).unwrap();
    let w = Tensor::uniform(vec![3, 2, 3, 3], -1.0, 1.0, common::fresh_seed()).unwrap();
    save_tensors(&tensors, &[("input", &x), ("weight", &w)], None).unwrap();
    let out = dir.path("out.safetensors");
    let (t, o) = (tensors.to_str().unwrap(), out.to_str().unwrap());
    for backend in ["gpu", "cpu"] {
        // Stride 2, padding 1: 7 x 11 without output padding, 8 x 12 at most.
        let args = ["forward", "--tensors", t, "--out", o, "--stride", "2", "--padding", "1"];
        let mut sized = args.to_vec();
        sized.extend(["--output-size", "8,11", "--backend", backend]);
        convt_ok(&sized);
        let got = TensorFile::load(&out).unwrap().get("output").unwrap();
        let options = ConvTranspose2dOptions::default().stride(2).padding(1).output_padding([1, 0]);
        let want = convt::cpu::conv_transpose2d(&x, &w, None, &options).unwrap();
        assert_eq!(got.shape(), [1, 2, 8, 11], "{backend}");
        let s = ErrorStats::compare(got.data(), &want.data().iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
        assert!(s.rel_l2 <= common::F32_TOLERANCE, "{backend}: {s:?}");
        std::fs::remove_file(&out).unwrap();

        let mut far = args.to_vec();
        far.extend(["--output-size", "9,11", "--backend", backend]);
        convt_fails(&far, &["requested an output size of [9, 11], but valid sizes range from [7, 11] to [8, 12]"]);
        let mut both = args.to_vec();
        both.extend(["--output-size", "8,11", "--output-padding", "1", "--backend", backend]);
        convt_fails(&both, &["--output-size sets the output padding: it cannot be combined with --output-padding"]);
        assert!(!out.exists(), "{backend}: a refused call writes nothing");
    }
}
