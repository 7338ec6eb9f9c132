//! Which NVTX ranges are steps and stages. Jobs that already push NVTX ranges name them
//! after what they time; this maps those names onto the ordered-stage contract:
//!
//! - a range named exactly like a stage (the five defaults, plus `SF_NVTX_STAGES`) is that
//!   stage, recorded under its stage name (an `nvtxname=stage` item renames);
//! - a range named like the step (`SF_NVTX_STEP`, default `step`) is a logical step: the one
//!   after the last, or, as `step 12` / `step:12`, step 12;
//! - every other range is not ours and is ignored.
//!
//! Built once when NVTX attaches; classifying a message compares bytes and never allocates.

use crate::core::log::format::stage_names::NAME_CAPACITY;
use crate::core::record::notice::echo;
use crate::core::steps::step_assembly::RESIDUAL_STAGE;

/// The stages of the ordered-stage contract; NVTX ranges with these names always count.
pub const DEFAULT_STAGES: [&str; 5] = [
    "data.next_wait",
    "model.fwd_loss_cpu_wall",
    "model.backward_cpu_wall",
    "callbacks.cpu_wall",
    "optim.step_cpu_wall",
];

pub const DEFAULT_STEP: &str = "step";

/// Stage names are interned into the log's table, which keeps 39 bytes of a name: longer
/// ones would be cut and could merge.
const MAX_STAGE_NAME: usize = NAME_CAPACITY - 1;
const MAX_NVTX_NAME: usize = 255;
/// With the defaults and the residual this stays well inside the 64-name table.
const MAX_EXTRA_STAGES: usize = 32;

/// What a range is to us.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeClass {
    Other,
    /// A logical step, with its index when the name gave one.
    Step(Option<u64>),
    /// The stage at this index of [`StageNaming::stage_name`].
    Stage(u16),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageNaming {
    step: String,
    /// (NVTX range name, recorded stage name), the defaults first.
    stages: Vec<(String, String)>,
}

impl StageNaming {
    /// `step` and `extra` as `Config` holds them: already checked by
    /// [`check_step_name`] and [`parse_stage_list`].
    pub fn new(step: &str, extra: &[(String, String)]) -> StageNaming {
        let defaults = DEFAULT_STAGES.iter().map(|s| (s.to_string(), s.to_string()));
        StageNaming { step: step.to_string(), stages: defaults.chain(extra.iter().cloned()).collect() }
    }

    pub fn classify(&self, message: &[u8]) -> RangeClass {
        if let Some(i) = self.stages.iter().position(|(nvtx, _)| nvtx.as_bytes() == message) {
            return RangeClass::Stage(i as u16);
        }
        let Some(rest) = message.strip_prefix(self.step.as_bytes()) else { return RangeClass::Other };
        match rest {
            [] => RangeClass::Step(None),
            [b' ' | b':', index @ ..] => step_index(index).map_or(RangeClass::Other, |i| RangeClass::Step(Some(i))),
            _ => RangeClass::Other,
        }
    }

    /// The recorded name of stage `index`, as [`RangeClass::Stage`] gave it.
    pub fn stage_name(&self, index: u16) -> Option<&[u8]> {
        self.stages.get(index as usize).map(|(_, recorded)| recorded.as_bytes())
    }
}

/// Decimal digits, optionally padded with spaces (`step: 12`), that fit a step index.
fn step_index(text: &[u8]) -> Option<u64> {
    let digits = text.trim_ascii();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse::<u64>().ok().filter(|&i| i <= i64::MAX as u64)
}

fn printable(name: &str) -> bool {
    name.bytes().all(|b| (b' '..=b'~').contains(&b))
}

/// `SF_NVTX_STEP`: printable ASCII that is no stage name and does not end in the
/// separators of `step 12` / `step:12` (they would make those names ambiguous).
pub fn check_step_name(step: &str) -> Result<(), String> {
    if step.len() > MAX_NVTX_NAME || !printable(step) || step.trim() != step {
        return Err(format!("is not printable ASCII of 1 to {MAX_NVTX_NAME} bytes without outer spaces"));
    }
    if step.ends_with(':') {
        return Err("ends in ':', which `step:N` names use".to_string());
    }
    if DEFAULT_STAGES.contains(&step) {
        return Err("is a default stage name".to_string());
    }
    Ok(())
}

/// `SF_NVTX_STAGES`: `item (',' item)*`, item `name` (the range name is the stage name) or
/// `nvtxname=stage`. Names are trimmed; the whole list is refused on any bad item, so a
/// typo never silently drops a stage.
pub fn parse_stage_list(list: &str, step: &str) -> Result<Vec<(String, String)>, String> {
    let mut stages: Vec<(String, String)> = Vec::new();
    for item in list.split(',') {
        let (nvtx, recorded) = match item.split_once('=') {
            Some((nvtx, recorded)) => (nvtx.trim(), recorded.trim()),
            None => (item.trim(), item.trim()),
        };
        // Until the checks below pass, the item may be long or hold control characters.
        let shown = echo(item.as_bytes());
        if nvtx.is_empty() || recorded.is_empty() {
            return Err(format!("item {shown} has an empty name"));
        }
        if !printable(nvtx) || !printable(recorded) || recorded.contains('=') {
            return Err(format!("item {shown} is not `name` or `nvtxname=stage` in printable ASCII"));
        }
        if nvtx.len() > MAX_NVTX_NAME || recorded.len() > MAX_STAGE_NAME {
            return Err(format!(
                "item {shown} is too long (range names up to {MAX_NVTX_NAME} bytes, stage names up to {MAX_STAGE_NAME})"
            ));
        }
        if recorded == RESIDUAL_STAGE {
            return Err(format!("item '{item}' names the residual {RESIDUAL_STAGE}, which the library computes"));
        }
        if DEFAULT_STAGES.contains(&nvtx) || stages.iter().any(|(n, _)| n == nvtx) {
            return Err(format!("range name '{nvtx}' is already a stage"));
        }
        if nvtx == step {
            return Err(format!("range name '{nvtx}' is the step name"));
        }
        stages.push((nvtx.to_string(), recorded.to_string()));
    }
    if stages.len() > MAX_EXTRA_STAGES {
        return Err(format!("has {} items, more than {MAX_EXTRA_STAGES}", stages.len()));
    }
    Ok(stages)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naming(step: &str, extra: &str) -> StageNaming {
        let extra = if extra.is_empty() { Vec::new() } else { parse_stage_list(extra, step).unwrap() };
        StageNaming::new(step, &extra)
    }

    fn stage_of(naming: &StageNaming, message: &str) -> Option<String> {
        match naming.classify(message.as_bytes()) {
            RangeClass::Stage(i) => Some(String::from_utf8(naming.stage_name(i).unwrap().to_vec()).unwrap()),
            _ => None,
        }
    }

    #[test]
    fn default_stages_are_themselves() {
        let n = naming(DEFAULT_STEP, "");
        for stage in DEFAULT_STAGES {
            assert_eq!(stage_of(&n, stage).as_deref(), Some(stage));
        }
        for other in ["", "data.next_wai", "data.next_wait ", "Data.next_wait", "aten::add", "forward"] {
            assert_eq!(n.classify(other.as_bytes()), RangeClass::Other, "{other:?}");
        }
    }

    #[test]
    fn step_names_with_and_without_index() {
        let n = naming(DEFAULT_STEP, "");
        assert_eq!(n.classify(b"step"), RangeClass::Step(None));
        assert_eq!(n.classify(b"step 12"), RangeClass::Step(Some(12)));
        assert_eq!(n.classify(b"step:12"), RangeClass::Step(Some(12)));
        assert_eq!(n.classify(b"step: 7"), RangeClass::Step(Some(7)));
        assert_eq!(n.classify(b"step 0"), RangeClass::Step(Some(0)));
        for other in ["steps", "step ", "step:", "step x", "step 1x", "step -1", "step 1.5", "Step", "optim.step"] {
            assert_eq!(n.classify(other.as_bytes()), RangeClass::Other, "{other:?}");
        }
        assert_eq!(n.classify(b"step 9223372036854775808"), RangeClass::Other, "beyond i64");
    }

    #[test]
    fn a_configured_step_name() {
        let n = naming("train_step", "");
        assert_eq!(n.classify(b"train_step"), RangeClass::Step(None));
        assert_eq!(n.classify(b"train_step 3"), RangeClass::Step(Some(3)));
        assert_eq!(n.classify(b"step"), RangeClass::Other);
    }

    #[test]
    fn extra_stages_and_renames() {
        let n = naming(DEFAULT_STEP, "forward=model.fwd_loss_cpu_wall, backward = model.backward_cpu_wall,ckpt.save");
        assert_eq!(stage_of(&n, "forward").as_deref(), Some("model.fwd_loss_cpu_wall"));
        assert_eq!(stage_of(&n, "backward").as_deref(), Some("model.backward_cpu_wall"));
        assert_eq!(stage_of(&n, "ckpt.save").as_deref(), Some("ckpt.save"));
        assert_eq!(stage_of(&n, "model.fwd_loss_cpu_wall").as_deref(), Some("model.fwd_loss_cpu_wall"));
        assert_eq!(n.classify(b" forward"), RangeClass::Other, "messages are matched exactly");
    }

    #[test]
    fn bad_stage_lists_are_refused_whole() {
        for bad in [
            "a,,b",
            "=x",
            "x=",
            "a=b=c",
            "data.next_wait",
            "data.next_wait=other",
            "a,a",
            "step",
            "x=step.other_cpu_wall",
            "tab\tname",
            "x=0123456789012345678901234567890123456789",
        ] {
            assert!(parse_stage_list(bad, DEFAULT_STEP).is_err(), "{bad:?}");
        }
        let many: Vec<String> = (0..33).map(|i| format!("s{i}")).collect();
        assert!(parse_stage_list(&many.join(","), DEFAULT_STEP).is_err());
        assert!(parse_stage_list(&many[..32].join(","), DEFAULT_STEP).is_ok());
    }

    #[test]
    fn bad_step_names() {
        for bad in ["data.next_wait", "step:", " step", "st\u{e9}p"] {
            assert!(check_step_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_step_name("iteration").is_ok());
        assert!(check_step_name("train step").is_ok());
    }
}
