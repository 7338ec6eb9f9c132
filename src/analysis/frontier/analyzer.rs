//! Streaming windowing: steps in, closed windows out. Memory is one window's O(R·S)
//! accumulators plus one step's scratch, whatever the number of steps.

use super::context::Context;
use super::step::{Step, StepError};
use super::step_view::StepScratch;
use super::window::{Close, Window, WindowAcc};

pub struct Analyzer {
    context: Context,
    /// Close a window after this many steps; `None` keeps it open until the input changes.
    window_steps: Option<usize>,
    open: Option<WindowAcc>,
    scratch: StepScratch,
    last_index: Option<u64>,
}

impl Analyzer {
    pub fn new(context: Context, window_steps: Option<usize>) -> Analyzer {
        Analyzer { context, window_steps, open: None, scratch: StepScratch::default(), last_index: None }
    }

    /// Adds one step. Returns the window this step closed, if any: a window closes when a
    /// step brings another schema, world size or set of missing ranks (Sec. 3: windows
    /// never mix them), or when it is full and another step arrives.
    pub fn push(&mut self, step: Step) -> Result<Option<Window>, StepError> {
        step.validate()?;
        if let Some(previous) = self.last_index.filter(|&p| step.index <= p) {
            return Err(StepError::OutOfOrder { index: step.index, previous });
        }
        self.last_index = Some(step.index);
        let full = |w: &WindowAcc| self.window_steps.is_some_and(|n| w.steps() >= n);
        let reason = self.open.as_ref().and_then(|w| if full(w) { Some(Close::Length) } else { w.closed_by(&step) });
        let closed = match reason {
            Some(reason) => self.open.take().map(|w| w.finish(reason, &self.context)),
            None => None,
        };
        let window = self.open.get_or_insert_with(|| WindowAcc::new(&step, &self.context));
        window.add(step.index, &self.scratch.view(step.durations, step.schema.len()), step.overlap_s, step.device);
        Ok(closed)
    }

    /// Closes the open window at the end of the input.
    pub fn finish(&mut self) -> Option<Window> {
        self.open.take().map(|w| w.finish(Close::End, &self.context))
    }
}

/// Every window of `steps`, in order.
pub fn analyze<'a>(
    steps: impl IntoIterator<Item = Step<'a>>,
    context: Context,
    window_steps: Option<usize>,
) -> Result<Vec<Window>, StepError> {
    let mut analyzer = Analyzer::new(context, window_steps);
    let mut windows = Vec::new();
    for step in steps {
        windows.extend(analyzer.push(step)?);
    }
    windows.extend(analyzer.finish());
    Ok(windows)
}
