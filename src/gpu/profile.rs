//! Per-dispatch GPU timestamps, to find where a call's time goes (`convt bench --profile`): while a [`Profiler`] is
//! attached to a context ([`GpuContext::set_profiler`]), every dispatch convt records is bracketed by two timestamps
//! written inside its compute pass and named by its pipeline; [`Profiler::read`] returns each call's dispatches in
//! order with their times. Needs `TIMESTAMP_QUERY_INSIDE_PASSES` (requested where the adapter has it).
//!
//! A timestamp is written when every command before it has finished (Vulkan's bottom of the pipe), so a dispatch's
//! time runs from the end of the previous command to its own end: what the call would take without it, gaps and
//! barriers included.

use std::sync::Mutex;

use crate::error::{ConvtError, Result};
use crate::gpu::context::{lock, GpuContext};
use crate::gpu::memory::plain_buffer;
use crate::gpu::timing::read_intervals;

/// One timed dispatch.
#[derive(Debug, Clone, PartialEq)]
pub struct Dispatch {
    /// The part of the call it belongs to, where the call names its parts (the backward: `grad_input`,
    /// `grad_weight`, `grad_bias`), each with the preparation and rounding passes of its own.
    pub section: Option<&'static str>,
    /// Its pipeline's name.
    pub pipeline: String,
    /// Its time, from the end of the command before it.
    pub ms: f64,
}

/// One call's dispatches in recording order.
pub type CallProfile = Vec<Dispatch>;

/// The queries of one query set (wgpu's limit), two per dispatch.
const QUERIES: u32 = wgpu::QUERY_SET_MAX_QUERIES;

/// Timestamps around each dispatch recorded while it is attached to a context.
pub struct Profiler {
    queries: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The section and pipeline of each recorded dispatch, in recording order (dispatch i owns queries 2i and
    /// 2i + 1).
    names: Vec<(Option<&'static str>, String)>,
    /// The section dispatches are recorded under now.
    section: Option<&'static str>,
    /// Where each call's dispatches start in `names`.
    calls: Vec<usize>,
    /// Dispatches recorded past the query set's capacity (not timed).
    dropped: usize,
}

impl std::fmt::Debug for Profiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profiler").field("recorded", &lock(&self.state).names.len()).finish_non_exhaustive()
    }
}

impl Profiler {
    /// A profiler for `ctx`'s device, room for 2048 dispatches between reads. An adapter without timestamps
    /// inside passes is an error.
    pub fn new(ctx: &GpuContext) -> Result<Self> {
        let need = wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
        if !ctx.device().features().contains(need) {
            return Err(ConvtError::Gpu(format!(
                "adapter {} has no timestamps inside compute passes (TIMESTAMP_QUERY_INSIDE_PASSES), so dispatches \
                 cannot be timed one by one",
                ctx.adapter_info().name
            )));
        }
        ctx.scoped(|| {
            let queries = ctx.device().create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("convt profiler"),
                ty: wgpu::QueryType::Timestamp,
                count: QUERIES,
            });
            let usage = wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC;
            let resolve = plain_buffer(ctx.device(), "convt profiler resolve", 8 * QUERIES as u64, usage);
            Ok(Self { queries, resolve, state: Mutex::default() })
        })
    }

    /// Starts a new call: the dispatches recorded from here until the next `begin_call` are its own.
    pub fn begin_call(&self) {
        let mut s = lock(&self.state);
        let at = s.names.len();
        s.calls.push(at);
    }

    /// Records the following dispatches under `section` (or none).
    pub(crate) fn set_section(&self, section: Option<&'static str>) {
        lock(&self.state).section = section;
    }

    /// Dispatches recorded since the last read.
    pub fn recorded(&self) -> usize {
        lock(&self.state).names.len()
    }

    /// Dispatches that can still be recorded before [`Profiler::read`].
    pub fn room(&self) -> usize {
        (QUERIES / 2) as usize - lock(&self.state).names.len().min((QUERIES / 2) as usize)
    }

    /// Records `dispatch` (which encodes one dispatch into `pass`) between two timestamps, under `name`.
    pub(crate) fn around(
        &self,
        pass: &mut wgpu::ComputePass<'_>,
        name: String,
        dispatch: impl FnOnce(&mut wgpu::ComputePass<'_>),
    ) {
        let slot = {
            let mut s = lock(&self.state);
            if s.names.len() < (QUERIES / 2) as usize {
                let section = s.section;
                s.names.push((section, name));
                Some(s.names.len() as u32 - 1)
            } else {
                s.dropped += 1;
                None
            }
        };
        match slot {
            Some(i) => {
                pass.write_timestamp(&self.queries, 2 * i);
                dispatch(pass);
                pass.write_timestamp(&self.queries, 2 * i + 1);
            }
            None => dispatch(pass),
        }
    }

    /// Each call's dispatches since the last read, in recording order, and the number
    /// of dispatches not timed for want of queries; then starts afresh. Waits for the GPU. Read after the recorded
    /// work was submitted: a call that failed before it submitted leaves timestamps that were never written.
    pub fn read(&self, ctx: &GpuContext) -> Result<(Vec<CallProfile>, usize)> {
        let State { names, mut calls, dropped, .. } = std::mem::take(&mut *lock(&self.state));
        if names.is_empty() {
            return Ok((vec![Vec::new(); calls.len()], dropped));
        }
        let ms = read_intervals(ctx, &self.queries, &self.resolve, names.len() as u32)?;
        let timed: CallProfile =
            names.into_iter().zip(ms).map(|((section, pipeline), ms)| Dispatch { section, pipeline, ms }).collect();
        if calls.first() != Some(&0) {
            calls.insert(0, 0);
        }
        let ends = calls.iter().skip(1).copied().chain(std::iter::once(timed.len()));
        let per_call = calls.iter().zip(ends).map(|(&b, e)| timed[b.min(e)..e].to_vec()).collect();
        Ok((per_call, dropped))
    }
}

/// Names no part of a call when it goes ([`GpuContext::profile_sections`]).
pub(crate) struct Sections<'a>(pub(crate) &'a GpuContext);

impl Drop for Sections<'_> {
    fn drop(&mut self) {
        self.0.profile_section(None);
    }
}
