// grad_input.wgsl: the gradient of conv_transpose2d with respect to its input, by gathering over grad_output.
// Every option; the kernel grad_input takes where no GEMM form pays (groups with few channels, strides that make
// grad_output much larger than the input).
//
// What it computes: grad_input[n, ic, ih, iw] = sum over the output channels co of ic's group and the taps
// (kh, kw) with  oh = ih*S_H - P_H + kh*D_H  inside [0, OUT_H)  (likewise ow)  of
// grad_output[n, co, oh, ow] * w[ic, co % Cog, kh, kw]. This is a regular strided, dilated, grouped convolution
// of grad_output with the weight: every input pixel reaches its output pixels through every tap, so there is
// nothing to divide.
//
// Mapping: a workgroup takes one sample, one block of IC_BLOCK input channels of one group and WORKGROUP_SIZE * PX
// consecutive input pixels (row-major over the plane); invocation lid takes the pixels lid, lid + WORKGROUP_SIZE,
// ... of them, so that a subgroup's lanes read neighbouring grad_output columns. Each invocation keeps PX x IC_BLOCK
// sums, so every grad_output value it loads serves IC_BLOCK multiply-adds and every weight vec4 4 x PX. The block's
// weights, the same for the whole workgroup, are staged in workgroup memory CO_CHUNK output channels at a time as
// [co][kh][kw][ic / 4] (STAGED; where even one output channel's taps do not fit, each is read from storage).
// Why: one invocation per pixel and four channels, reading four weights from storage per grad_output value, spent
// more instructions loading than multiplying (docs/PERFORMANCE.md).
//
// An invocation all of whose pixels reach the output through every tap (the common case) loads without a bound
// check; one with a pixel near the border, or past the plane's end, tests each tap's position. Both load every
// pixel's value of a tap before the multiply-adds: a branch around each load had made the border invocations
// several times slower than the others.
//
// Large tensors arrive in slices (src/gpu/slices.rs with grad_output as the tensor read and grad_input as the
// one written): one dispatch covers samples [0, n_count) of the bound chunks, grad_output channels
// [go_begin, go_end) and grad_input channel blocks [block_begin, block_begin + block_count). When a sample's
// grad_output channels are split over several dispatches, the later ones add to what the first wrote.
//
// The host puts PX, IC_VECS and STAGED (constants: they size each invocation's arrays) and the shape's override
// constants (shaders/common/shape.wgsl) in front of this file (src/gpu/backward/grad_input.rs, `GatherTile`).

override WORKGROUP_SIZE: u32 = 256u;
override CO_CHUNK: u32;  // output channels whose weights are staged at once
override WS_LEN: u32;    // vec4s of staged weights: CO_CHUNK * K_H * K_W * IC_VECS (1 where not STAGED)

const IC_BLOCK: u32 = 4u * IC_VECS;

struct Slice {
    n_count: u32,
    go_offset: u32,        // element offset of (sample 0 of the slice, channel go_begin) in the grad_output binding
    gi_offset: u32,        // element offset of (sample 0 of the slice, channel gi_first_channel) in the grad_input binding
    gi_first_channel: u32,
    go_begin: u32,
    go_end: u32,
    block_begin: u32,
    block_count: u32,
    gi_begin: u32,         // grad_input channels outside [gi_begin, gi_end) belong to another slice
    gi_end: u32,
    accumulate: u32,
    dispatch_width: u32,   // workgroups per row of the dispatch grid
}

@group(0) @binding(0) var<uniform> slice: Slice;
// grad_out (binding 1), w (2) and grad_in (3, written), in the tensors' dtype: read with grad_out_ld(i) and the
// like, written with grad_in_st(i, v) (declared by the host: src/gpu/wgsl/operands.rs).

var<workgroup> ws: array<vec4<f32>, WS_LEN>; // [co - chunk start][kh][kw][ic / 4]

// The weights of input channels 4v .. 4v + 3 of the block for output channel co (within the group) and tap t,
// zero past the group's channels: from workgroup memory where STAGED (co_rel counts from the chunk's start),
// else from storage.
fn weights(co_rel: u32, co: u32, t: u32, v: u32, group: u32, ic0: u32) -> vec4<f32> {
    if (STAGED) {
        return ws[(co_rel * K_H * K_W + t) * IC_VECS + v];
    }
    return weights_from_storage(co, t, v, group, ic0);
}

fn weights_from_storage(co: u32, t: u32, v: u32, group: u32, ic0: u32) -> vec4<f32> {
    let cig = C_IN / GROUPS;
    let cog = C_OUT / GROUPS;
    var q = vec4<f32>(0.0);
    for (var e = 0u; e < 4u; e++) {
        let ic = ic0 + 4u * v + e;
        if (ic < cig) {
            q[e] = w_ld(((group * cig + ic) * cog + co) * K_H * K_W + t);
        }
    }
    return q;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let wg = wid.y * slice.dispatch_width + wid.x;
    let pixels = IN_H * IN_W;
    let span = WORKGROUP_SIZE * PX;
    let tiles = (pixels + span - 1u) / span;
    if (wg >= slice.n_count * slice.block_count * tiles) {
        return; // the grid's last row: the whole workgroup leaves, before any barrier
    }
    let tile = wg % tiles;
    let block = slice.block_begin + (wg / tiles) % slice.block_count;
    let n = wg / (tiles * slice.block_count);

    let cog = C_OUT / GROUPS;
    let cig = C_IN / GROUPS;
    let blocks_per_group = (cig + IC_BLOCK - 1u) / IC_BLOCK;
    let group = block / blocks_per_group;
    let ic0 = (block % blocks_per_group) * IC_BLOCK; // first input channel of the block, within the group
    let taps = K_H * K_W;
    let out_pixels = OUT_H * OUT_W;
    let co_lo = max(group * cog, slice.go_begin);
    let co_hi = min(group * cog + cog, slice.go_end);
    let go_sample = slice.go_offset + n * C_OUT * out_pixels;

    // Each pixel's output row and column of tap (0, 0), which may lie before the output's start (a pixel past the
    // plane's end gets a row after the output's end, so that no tap reaches it); the invocation is interior when
    // every pixel reaches the output through every tap.
    var oh0: array<i32, PX>;
    var ow0: array<i32, PX>;
    var interior = true;
    for (var j = 0u; j < PX; j++) {
        let p = tile * span + j * WORKGROUP_SIZE + lid;
        oh0[j] = i32((p / IN_W) * S_H) - i32(P_H);
        ow0[j] = i32((p % IN_W) * S_W) - i32(P_W);
        if (p >= pixels) {
            oh0[j] = i32(OUT_H);
        }
        let rows_in = oh0[j] >= 0 && oh0[j] + i32((K_H - 1u) * D_H) < i32(OUT_H);
        let cols_in = ow0[j] >= 0 && ow0[j] + i32((K_W - 1u) * D_W) < i32(OUT_W);
        interior = interior && rows_in && cols_in;
    }

    // The border path loads from the plane's first element where a tap lies outside the output and takes zero
    // instead of the value, so that its loads need no branch.
    var acc: array<vec4<f32>, PX * IC_VECS>;
    for (var c0 = co_lo; c0 < co_hi; c0 += CO_CHUNK) {
        let c1 = min(c0 + CO_CHUNK, co_hi);
        if (STAGED) {
            workgroupBarrier(); // the last chunk's weights are read
            for (var i = lid; i < (c1 - c0) * taps * IC_VECS; i += WORKGROUP_SIZE) {
                let v = i % IC_VECS;
                let t = (i / IC_VECS) % taps;
                let co = c0 - group * cog + i / (IC_VECS * taps);
                ws[i] = weights_from_storage(co, t, v, group, ic0);
            }
            workgroupBarrier();
        }
        for (var co = c0; co < c1; co++) {
            let plane = go_sample + (co - slice.go_begin) * out_pixels;
            for (var kh = 0u; kh < K_H; kh++) {
                var row: array<u32, PX>;
                var row_in: array<bool, PX>;
                for (var j = 0u; j < PX; j++) {
                    let oh = oh0[j] + i32(kh * D_H);
                    row_in[j] = u32(oh) < OUT_H;
                    row[j] = plane + u32(oh) * OUT_W;
                }
                for (var kw = 0u; kw < K_W; kw++) {
                    var w: array<vec4<f32>, IC_VECS>;
                    for (var v = 0u; v < IC_VECS; v++) {
                        w[v] = weights(co - c0, co - group * cog, kh * K_W + kw, v, group, ic0);
                    }
                    var g: array<f32, PX>;
                    if (interior) {
                        for (var j = 0u; j < PX; j++) {
                            g[j] = grad_out_ld(row[j] + u32(ow0[j] + i32(kw * D_W)));
                        }
                    } else {
                        for (var j = 0u; j < PX; j++) {
                            let ow = ow0[j] + i32(kw * D_W);
                            let inside = row_in[j] && u32(ow) < OUT_W;
                            g[j] = select(0.0, grad_out_ld(select(plane, row[j] + u32(ow), inside)), inside);
                        }
                    }
                    for (var j = 0u; j < PX; j++) {
                        for (var v = 0u; v < IC_VECS; v++) {
                            acc[j * IC_VECS + v] += g[j] * w[v];
                        }
                    }
                }
            }
        }
    }

    let gi_sample = slice.gi_offset + n * C_IN * pixels;
    for (var j = 0u; j < PX; j++) {
        let p = tile * span + j * WORKGROUP_SIZE + lid;
        if (p >= pixels) {
            continue;
        }
        for (var c = 0u; c < IC_BLOCK; c++) {
            let ic = ic0 + c;
            let ci = group * cig + ic;
            if (ic >= cig || ci < slice.gi_begin || ci >= slice.gi_end) {
                continue;
            }
            let idx = gi_sample + (ci - slice.gi_first_channel) * pixels + p;
            var value = acc[j * IC_VECS + c / 4u][c % 4u];
            if (slice.accumulate != 0u) {
                value += grad_in_ld(idx);
            }
            grad_in_st(idx, value);
        }
    }
}
